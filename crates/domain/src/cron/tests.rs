//! Table-driven tests of the dialect, fire times and descriptions, plus a
//! property test against a naive second-by-second matcher.

use chrono::{DateTime, Duration, NaiveDate, Utc};
use chrono_tz::Tz;

use super::{CronError, CronExpr, FieldKind, FieldProblem};
use crate::lang::Lang;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .expect("test timestamp")
        .with_timezone(&Utc)
}

fn tz(name: &str) -> Tz {
    name.parse().expect("test zone")
}

#[test]
fn accepts_valid_expressions() {
    let valid = [
        "* * * * * *",
        "* * * * *",
        "0 30 3 * * *",
        "30 3 * * *",
        "0 */10 * * * *",
        "0 0 9 * * 1-5",
        "0 0 0 1 * *",
        "*/30 * * * * *",
        "0 0 0 29 2 *",
        "0 0 0 31 1,3,5 *",
        "0 0 0 * * 0",
        "0 0 0 * * 6",
        "59 59 23 31 12 *",
        "0 0,15,30,45 * * * *",
        "0 0 8-18/2 * * *",
        "5/15 * * * * *",
        "0 0 0 1-7 * 1",
        "0 0 0 */2 * 1",
        "0 0 12 * 1-12/3 *",
        "  0   30  3 * * *  ",
        "0 0 0 30 1-12 *",
        "0 0 0 30 2 1",
        "00 05 03 * * *",
        "0-59 * * * * *",
    ];
    for expr in valid {
        assert!(CronExpr::parse(expr).is_ok(), "{expr} should be valid");
    }
}

#[test]
fn rejects_with_reasons() {
    use FieldKind::*;
    use FieldProblem::*;
    let field = |kind, text: &str, problem| CronError::Field {
        kind,
        text: text.to_string(),
        problem,
    };
    let cases: Vec<(&str, CronError)> = vec![
        ("", CronError::Empty),
        ("   ", CronError::Empty),
        ("@daily", CronError::Macro("@daily".into())),
        ("@every 5m", CronError::Macro("@every".into())),
        ("* * * *", CronError::FieldCount(4)),
        ("* * * * * * *", CronError::FieldCount(7)),
        ("0 0 0 1 1 * 2030", CronError::FieldCount(7)),
        ("0 0 2 ? * *", field(DayOfMonth, "?", QuestionMark)),
        ("0 0 2 * * ?", field(DayOfWeek, "?", QuestionMark)),
        ("0 0 0 L * *", field(DayOfMonth, "L", Special('L'))),
        ("0 0 0 15W * *", field(DayOfMonth, "15W", Special('W'))),
        ("0 0 0 * * 5L", field(DayOfWeek, "5L", Special('L'))),
        ("0 0 0 * * 1#2", field(DayOfWeek, "1#2", Special('#'))),
        ("0 0 0 * * MON", field(DayOfWeek, "MON", Name("MON".into()))),
        (
            "0 0 0 * * mon-fri",
            field(DayOfWeek, "mon-fri", Name("MON".into())),
        ),
        ("0 0 0 1 JAN *", field(Month, "JAN", Name("JAN".into()))),
        ("0 0 0 * * 7", field(DayOfWeek, "7", DayOfWeekSeven)),
        ("0 0 0 * * 1-7", field(DayOfWeek, "1-7", DayOfWeekSeven)),
        (
            "60 * * * * *",
            field(Second, "60", OutOfRange { value: 60 }),
        ),
        (
            "* 60 * * * *",
            field(Minute, "60", OutOfRange { value: 60 }),
        ),
        ("* * 24 * * *", field(Hour, "24", OutOfRange { value: 24 })),
        (
            "* * * 0 * *",
            field(DayOfMonth, "0", OutOfRange { value: 0 }),
        ),
        (
            "* * * 32 * *",
            field(DayOfMonth, "32", OutOfRange { value: 32 }),
        ),
        ("* * * * 0 *", field(Month, "0", OutOfRange { value: 0 })),
        ("* * * * 13 *", field(Month, "13", OutOfRange { value: 13 })),
        (
            "* * * * * 8",
            field(DayOfWeek, "8", OutOfRange { value: 8 }),
        ),
        (
            "99999999999 * * * * *",
            field(Second, "99999999999", OutOfRange { value: u32::MAX }),
        ),
        ("*/0 * * * * *", field(Second, "*/0", StepZero)),
        ("0 1-5/0 * * * *", field(Minute, "1-5/0", StepZero)),
        (
            "0 0 5-1 * * *",
            field(Hour, "5-1", ReversedRange { start: 5, end: 1 }),
        ),
        ("0 0 1,,2 * * *", field(Hour, "1,,2", EmptyItem)),
        ("0 0 1, * * *", field(Hour, "1,", EmptyItem)),
        ("0 0 0 * * %", field(DayOfWeek, "%", BadChar('%'))),
        ("0 0 0 * * 1;2", field(DayOfWeek, "1;2", BadChar(';'))),
        (
            "0 0 1-2-3 * * *",
            field(Hour, "1-2-3", Malformed("2-3".into())),
        ),
        ("0 0 */ * * *", field(Hour, "*/", Malformed("*/".into()))),
        ("0 0 - * * *", field(Hour, "-", Malformed("".into()))),
        (
            "0 0 1/2/3 * * *",
            field(Hour, "1/2/3", Malformed("1/2/3".into())),
        ),
        ("0 0 0 30 2 *", CronError::NeverFires),
        ("0 0 0 31 4,6,9,11 *", CronError::NeverFires),
        ("0 0 0 30-31 2 *", CronError::NeverFires),
        ("0 0 0 31 2 */2", CronError::NeverFires),
        ("0 0 0 30/5 2 *", CronError::NeverFires),
    ];
    assert!(cases.len() >= 40);
    for (expr, want) in cases {
        let got = CronExpr::parse(expr).expect_err(expr);
        assert_eq!(got, want, "{expr}");
        // Every reason reads as a sentence in both languages.
        assert!(!got.message(Lang::Zh).is_empty());
        assert!(!got.message(Lang::En).is_empty());
    }
}

#[test]
fn reasons_name_the_field() {
    let err = CronExpr::parse("0 0 0 * * 7").expect_err("dow 7");
    assert_eq!(
        err.message(Lang::Zh),
        "第 6 段（星期）“7”：星期用 0–6 表示（0 是周日），不支持 7"
    );
    assert_eq!(
        err.message(Lang::En),
        "Field 6 (day-of-week) `7`: 7 is not allowed: days of week are 0–6, 0 is Sunday"
    );
    let err = CronExpr::parse("0 61 * * * *").expect_err("minute 61");
    assert_eq!(
        err.message(Lang::En),
        "Field 2 (minute) `61`: 61 is out of range 0–59"
    );
}

/// `(expression, zone, after, expected next times)`.
type NextCase = (
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
);

#[test]
fn next_times_table() {
    let cases: &[NextCase] = &[
        // Month ends.
        (
            "0 0 0 31 * *",
            "UTC",
            "2026-01-31T00:00:00Z",
            &[
                "2026-03-31T00:00:00Z",
                "2026-05-31T00:00:00Z",
                "2026-07-31T00:00:00Z",
            ],
        ),
        (
            "0 0 12 30 * *",
            "UTC",
            "2026-01-30T12:00:00Z",
            &["2026-03-30T12:00:00Z", "2026-04-30T12:00:00Z"],
        ),
        // Leap years, including the century rule.
        (
            "0 0 0 29 2 *",
            "UTC",
            "2026-01-01T00:00:00Z",
            &["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"],
        ),
        (
            "0 0 0 29 2 *",
            "UTC",
            "2096-03-01T00:00:00Z",
            &["2104-02-29T00:00:00Z"],
        ),
        // Year end.
        (
            "59 59 23 31 12 *",
            "UTC",
            "2026-06-01T00:00:00Z",
            &["2026-12-31T23:59:59Z", "2027-12-31T23:59:59Z"],
        ),
        // Strictly after: an instant that matches is not returned.
        (
            "0 30 3 * * *",
            "UTC",
            "2026-05-01T03:30:00Z",
            &["2026-05-02T03:30:00Z"],
        ),
        // Five fields: seconds are 0.
        (
            "*/15 * * * *",
            "UTC",
            "2026-05-01T10:07:31Z",
            &["2026-05-01T10:15:00Z", "2026-05-01T10:30:00Z"],
        ),
        // Vixie: both day fields restricted means either.
        (
            "0 0 0 13 * 5",
            "UTC",
            "2026-02-01T00:00:00Z",
            &[
                "2026-02-06T00:00:00Z",
                "2026-02-13T00:00:00Z",
                "2026-02-20T00:00:00Z",
            ],
        ),
        // One day field starting with `*` means both must match.
        (
            "0 0 0 */2 * 1",
            "UTC",
            "2026-02-01T00:00:00Z",
            &[
                "2026-02-09T00:00:00Z",
                "2026-02-23T00:00:00Z",
                "2026-03-09T00:00:00Z",
            ],
        ),
        // A zone ahead of UTC.
        (
            "0 30 3 * * *",
            "Asia/Shanghai",
            "2026-05-01T00:00:00Z",
            &["2026-05-01T19:30:00Z", "2026-05-02T19:30:00Z"],
        ),
        // New York spring forward (2026-03-08 02:00 EST → 03:00 EDT):
        // a daily job inside the gap runs at the first instant after it.
        (
            "0 30 2 * * *",
            "America/New_York",
            "2026-03-07T12:00:00Z",
            &["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"],
        ),
        // An hourly job skips the hour that does not exist.
        (
            "0 30 * * * *",
            "America/New_York",
            "2026-03-08T06:00:00Z",
            &[
                "2026-03-08T06:30:00Z",
                "2026-03-08T07:30:00Z",
                "2026-03-08T08:30:00Z",
            ],
        ),
        // New York fall back (2026-11-01 02:00 EDT → 01:00 EST):
        // a daily job in the repeated hour runs in the first pass only.
        (
            "0 30 1 * * *",
            "America/New_York",
            "2026-10-31T12:00:00Z",
            &["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"],
        ),
        // An hourly job runs in both passes of the repeated hour.
        (
            "0 30 * * * *",
            "America/New_York",
            "2026-11-01T04:00:00Z",
            &[
                "2026-11-01T04:30:00Z",
                "2026-11-01T05:30:00Z",
                "2026-11-01T06:30:00Z",
            ],
        ),
        // Berlin spring forward (2026-03-29 02:00 CET → 03:00 CEST).
        (
            "0 15 2 * * *",
            "Europe/Berlin",
            "2026-03-28T12:00:00Z",
            &["2026-03-29T01:00:00Z", "2026-03-30T00:15:00Z"],
        ),
        (
            "0 0 */1 * * *",
            "Europe/Berlin",
            "2026-03-29T00:30:00Z",
            &["2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"],
        ),
        // Berlin fall back (2026-10-25 03:00 CEST → 02:00 CET).
        (
            "0 30 2 * * *",
            "Europe/Berlin",
            "2026-10-24T12:00:00Z",
            &["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"],
        ),
        (
            "0 */30 2 * * *",
            "Europe/Berlin",
            "2026-10-24T23:00:00Z",
            &[
                "2026-10-25T00:00:00Z",
                "2026-10-25T00:30:00Z",
                "2026-10-25T01:00:00Z",
                "2026-10-25T01:30:00Z",
                "2026-10-26T01:00:00Z",
            ],
        ),
    ];
    for (expr, zone, after, want) in cases {
        let cron = CronExpr::parse(expr).expect(expr);
        let got = cron.upcoming(utc(after), tz(zone), want.len());
        let want: Vec<DateTime<Utc>> = want.iter().map(|s| utc(s)).collect();
        assert_eq!(got, want, "{expr} in {zone} after {after}");
    }
}

#[test]
fn fixed_time_classification() {
    let cases = [
        ("0 30 3 * * *", true),
        ("30 3 * * *", true),
        ("0 30 3 1 * 1-5", true),
        ("0 30 */3 * * *", false),
        ("0 0,30 3 * * *", false),
        ("0 30 3-4 * * *", false),
        ("* 30 3 * * *", false),
    ];
    for (expr, want) in cases {
        assert_eq!(
            CronExpr::parse(expr).expect(expr).is_fixed_time(),
            want,
            "{expr}"
        );
    }
}

#[test]
fn descriptions_in_both_languages() {
    let cases = [
        ("0 30 3 * * *", "每天 03:30:00", "At 03:30:00, every day"),
        ("30 3 * * *", "每天 03:30", "At 03:30, every day"),
        ("0 */10 * * * *", "每 10 分钟", "Every 10 minutes"),
        (
            "0 0 9 * * 1-5",
            "周一到周五 09:00:00",
            "At 09:00:00, Monday through Friday",
        ),
        (
            "0 0 0 1 * *",
            "每月 1 日 00:00:00",
            "At 00:00:00, on day 1 of the month",
        ),
        ("*/30 * * * * *", "每 30 秒", "Every 30 seconds"),
        ("* * * * * *", "每秒", "Every second"),
        ("0 * * * * *", "每分钟", "Every minute"),
        ("0 0 * * * *", "每小时整点", "Every hour, on the hour"),
        ("0 */5 * * * *", "每 5 分钟", "Every 5 minutes"),
        (
            "0 0 */2 * * *",
            "每 2 小时整点",
            "Every 2 hours, on the hour",
        ),
        (
            "0 0 9,18 * * *",
            "每天 09:00:00、18:00:00",
            "At 09:00:00 and 18:00:00, every day",
        ),
        (
            "0 0 8 * * 1,3,5",
            "每周一、周三、周五 08:00:00",
            "At 08:00:00, on Monday, Wednesday and Friday",
        ),
        (
            "0 0 0 1,15 * *",
            "每月 1、15 日 00:00:00",
            "At 00:00:00, on days 1 and 15 of the month",
        ),
        (
            "0 0 6 1 1,7 *",
            "每年 1、7 月 1 日 06:00:00",
            "At 06:00:00, on day 1 of the month, in January and July",
        ),
        (
            "0 0,30 9-17 * * 1-5",
            "周一到周五，9–17 点，每小时的第 0、30 分钟",
            "At minutes 0 and 30 past the hour, during hours 9 through 17, Monday through Friday",
        ),
        (
            "0 0 0 13 * 5",
            "每月 13 日或每周五 00:00:00",
            "At 00:00:00, on day 13 of the month or on Friday",
        ),
        (
            "15 */5 * * * *",
            "每 5 分钟的第 15 秒",
            "Every 5 minutes, at second 15",
        ),
        (
            "0 0 8-18/2 * * *",
            "8–18 点每 2 小时整点",
            "Every 2 hours from 8 through 18, on the hour",
        ),
        (
            "*/10 * 3 * * *",
            "3 点，每 10 秒",
            "Every 10 seconds, during hour 3",
        ),
    ];
    for (expr, zh, en) in cases {
        let cron = CronExpr::parse(expr).expect(expr);
        assert_eq!(cron.describe(Lang::Zh), zh, "{expr}");
        assert_eq!(cron.describe(Lang::En), en, "{expr}");
    }
}

/// A small deterministic generator so the property test needs no crate.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn random_field(rng: &mut XorShift, lo: u64, hi: u64, dense: bool) -> String {
    let value = |rng: &mut XorShift| lo + rng.below(hi - lo + 1);
    match rng.below(if dense { 7 } else { 9 }) {
        0 | 1 => "*".to_string(),
        2 => format!("*/{}", 1 + rng.below(hi.min(20))),
        3 => {
            let (a, b) = (value(rng), value(rng));
            format!("{}-{}", a.min(b), a.max(b))
        }
        4 => {
            let (a, b) = (value(rng), value(rng));
            format!("{}-{}/{}", a.min(b), a.max(b), 1 + rng.below(5))
        }
        5 => (0..1 + rng.below(4))
            .map(|_| value(rng).to_string())
            .collect::<Vec<_>>()
            .join(","),
        6 => format!("{}/{}", value(rng), 1 + rng.below(10)),
        _ => value(rng).to_string(),
    }
}

/// The naive definition of "follows real time": walk every second and ask
/// whether its local wall-clock time matches.
fn naive_next(
    cron: &CronExpr,
    after: DateTime<Utc>,
    zone: Tz,
    limit: i64,
) -> Option<DateTime<Utc>> {
    (1..=limit)
        .map(|s| after + Duration::seconds(s))
        .find(|t| cron.matches_local(&t.with_timezone(&zone).naive_local()))
}

#[test]
fn property_matches_naive_second_by_second() {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let zones = [tz("UTC"), tz("America/New_York"), tz("Europe/Berlin")];
    // Starting points that straddle DST transitions in both zones.
    let starts = [
        utc("2026-03-08T04:17:03Z"),
        utc("2026-11-01T04:59:59Z"),
        utc("2026-03-29T00:10:00Z"),
        utc("2026-10-25T00:00:00Z"),
        utc("2028-02-28T22:00:00Z"),
    ];
    let window = 3 * 3600;
    let mut checked = 0;
    while checked < 300 {
        let expr = [
            random_field(&mut rng, 0, 59, true),
            random_field(&mut rng, 0, 59, true),
            random_field(&mut rng, 0, 23, true),
            random_field(&mut rng, 1, 31, false),
            random_field(&mut rng, 1, 12, false),
            random_field(&mut rng, 0, 6, false),
        ]
        .join(" ");
        let Ok(cron) = CronExpr::parse(&expr) else {
            continue;
        };
        let zone = zones[rng.below(3) as usize];
        // Fixed-time jobs deliberately differ from real time at DST
        // transitions; they are checked against the naive walk in UTC.
        let zone = if cron.is_fixed_time() {
            tz("UTC")
        } else {
            zone
        };
        let start = starts[rng.below(starts.len() as u64) as usize];
        let naive = naive_next(&cron, start, zone, window);
        let got = cron.next_after(start, zone);
        match naive {
            Some(t) => assert_eq!(got, Some(t), "{expr} in {zone} after {start}"),
            None => assert!(
                got.is_some_and(|g| g > start + Duration::seconds(window)),
                "{expr} in {zone} after {start}: naive found none, got {got:?}"
            ),
        }
        checked += 1;
    }
}

#[test]
fn upcoming_is_strictly_increasing_over_a_year() {
    let cron = CronExpr::parse("0 0 0 * * *").expect("daily");
    let zone = tz("America/New_York");
    let times = cron.upcoming(utc("2026-01-01T00:00:00Z"), zone, 400);
    assert_eq!(times.len(), 400);
    assert!(times.windows(2).all(|w| w[0] < w[1]));
    // Every local date appears exactly once.
    let first = NaiveDate::from_ymd_opt(2026, 1, 1).expect("date");
    for (i, t) in times.iter().enumerate() {
        let local = t.with_timezone(&zone);
        assert_eq!(local.date_naive(), first + Duration::days(i as i64));
        assert_eq!(local.time(), chrono::NaiveTime::MIN);
    }
}

#[test]
fn last_at_or_before_is_the_inverse_of_next() {
    let cases = [
        (
            "* * * * * *",
            "UTC",
            "2026-05-01T10:00:00.700Z",
            "2026-05-01T10:00:00Z",
        ),
        (
            "0 30 3 * * *",
            "UTC",
            "2026-05-01T03:30:00Z",
            "2026-05-01T03:30:00Z",
        ),
        (
            "0 30 3 * * *",
            "UTC",
            "2026-05-01T03:29:59Z",
            "2026-04-30T03:30:00Z",
        ),
        (
            "0 0 0 29 2 *",
            "UTC",
            "2027-01-01T00:00:00Z",
            "2024-02-29T00:00:00Z",
        ),
        (
            "0 30 * * * *",
            "America/New_York",
            "2026-11-01T06:00:00Z",
            "2026-11-01T05:30:00Z",
        ),
    ];
    for (expr, zone, at, want) in cases {
        let cron = CronExpr::parse(expr).expect(expr);
        assert_eq!(
            cron.last_at_or_before(utc(at), tz(zone)),
            Some(utc(want)),
            "{expr} at {at}"
        );
    }
}
