//! Schedules: calendars deciding the days (a payroll job over the 2026
//! Spring Festival), active windows, jitter, and their interplay with
//! daylight saving time in America/New_York.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use chrono_tz::America::New_York;
use chrono_tz::Asia::Shanghai;
use chrono_tz::{Tz, UTC};

use super::*;
use crate::calendar::{CalendarDate, Years, builtin};

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .expect("RFC 3339")
        .with_timezone(&Utc)
}

fn d(y: i32, m: u32, day: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(y, m, day).expect("valid date")
}

fn cron(expr: &str) -> CronExpr {
    CronExpr::parse(expr).expect("valid cron")
}

fn cn(expr: &str, rule: CalendarRule) -> Schedule {
    Schedule::new(cron(expr), Shanghai)
        .with_calendar(Arc::clone(builtin::cn_workdays()), rule)
        .expect("rule fits the cron")
}

/// The local dates and times of `times` in `tz`, as `YYYY-MM-DD HH:MM`.
fn local(times: &[DateTime<Utc>], tz: Tz) -> Vec<String> {
    times
        .iter()
        .map(|x| x.with_timezone(&tz).format("%Y-%m-%d %H:%M").to_string())
        .collect()
}

fn dates(effect: &[DayEffect]) -> Vec<String> {
    effect.iter().map(|e| e.date.to_string()).collect()
}

/// A company calendar in New York: Thanksgiving and Christmas off, and a
/// Saturday made a working day (stock-taking).
fn us_calendar() -> Arc<Calendar> {
    let entry = |kind, name: &str| CalendarDate {
        kind,
        name: Label::same(name),
    };
    let dates = BTreeMap::from([
        (d(2026, 3, 7), entry(DayKind::Workday, "Stock-taking")),
        (d(2026, 11, 26), entry(DayKind::Holiday, "Thanksgiving")),
        (d(2026, 12, 25), entry(DayKind::Holiday, "Christmas")),
    ]);
    Arc::new(
        Calendar::new(
            "acme-us",
            Label::same("ACME US"),
            Years::new(2026, 2026),
            dates,
        )
        .expect("valid calendar"),
    )
}

fn ny(expr: &str, rule: CalendarRule) -> Schedule {
    Schedule::new(cron(expr), New_York)
        .with_calendar(us_calendar(), rule)
        .expect("rule fits the cron")
}

#[test]
fn payroll_on_working_days_over_the_2026_spring_festival() {
    let payroll = cn("0 0 10 * * *", CalendarRule::Workdays);
    let from = t("2026-02-10T00:00:00+08:00");
    let times = payroll.upcoming(from, 12);
    assert_eq!(
        local(&times, Shanghai),
        [
            "2026-02-10 10:00",
            "2026-02-11 10:00",
            "2026-02-12 10:00",
            "2026-02-13 10:00",
            "2026-02-14 10:00", // Saturday, make-up working day
            // 15–23 February: the Spring Festival, nine days off.
            "2026-02-24 10:00",
            "2026-02-25 10:00",
            "2026-02-26 10:00",
            "2026-02-27 10:00",
            "2026-02-28 10:00", // Saturday, make-up working day
            "2026-03-02 10:00",
            "2026-03-03 10:00",
        ]
    );
    let last = *times.last().expect("times");
    let effect = payroll.calendar_effect(from, last).expect("a calendar");
    assert_eq!(
        dates(&effect.removed),
        [
            "2026-02-16",
            "2026-02-17",
            "2026-02-18",
            "2026-02-19",
            "2026-02-20",
            "2026-02-23"
        ],
        "weekdays of the festival"
    );
    assert!(effect.removed.iter().all(|e| e.name.zh == "春节"));
    assert!(effect.removed.iter().all(|e| e.kind == DayKind::Holiday));
    assert_eq!(dates(&effect.added), ["2026-02-14", "2026-02-28"]);
    assert!(effect.added.iter().all(|e| e.kind == DayKind::Workday));
    assert!(effect.missing_years.is_empty());

    // Asked during the festival, the last payroll run was the make-up Saturday.
    assert_eq!(
        payroll.last_at_or_before(t("2026-02-23T12:00:00+08:00")),
        Some(t("2026-02-14T10:00:00+08:00"))
    );
    assert_eq!(
        payroll.last_at_or_before(t("2026-02-14T10:00:00+08:00")),
        Some(t("2026-02-14T10:00:00+08:00")),
        "at or before"
    );
    // February 2026 has 16 working days: 2–6, 9–13, 14, 24–27, 28.
    let (feb, more) = payroll.between(
        t("2026-02-01T00:00:00+08:00"),
        t("2026-02-28T23:59:59+08:00"),
        1000,
    );
    assert_eq!((feb.len(), more), (16, false));
    let (first_five, more) = payroll.between(
        t("2026-02-01T00:00:00+08:00"),
        t("2026-02-28T23:59:59+08:00"),
        5,
    );
    assert_eq!((first_five.len(), more), (5, true));
    assert_eq!(first_five[0], t("2026-02-02T10:00:00+08:00"));
}

#[test]
fn the_other_rules_over_the_same_festival() {
    let from = t("2026-02-10T00:00:00+08:00");
    let days_off = cn("0 0 10 * * *", CalendarRule::Holidays);
    let times = days_off.upcoming(from, 12);
    assert_eq!(
        local(&times, Shanghai),
        [
            "2026-02-15 10:00",
            "2026-02-16 10:00",
            "2026-02-17 10:00",
            "2026-02-18 10:00",
            "2026-02-19 10:00",
            "2026-02-20 10:00",
            "2026-02-21 10:00",
            "2026-02-22 10:00",
            "2026-02-23 10:00",
            // 28 February is a make-up working Saturday.
            "2026-03-01 10:00",
            "2026-03-07 10:00",
            "2026-03-08 10:00",
        ]
    );
    let effect = days_off
        .calendar_effect(from, *times.last().expect("times"))
        .expect("a calendar");
    assert_eq!(dates(&effect.removed), ["2026-02-14", "2026-02-28"]);
    assert_eq!(
        dates(&effect.added),
        [
            "2026-02-16",
            "2026-02-17",
            "2026-02-18",
            "2026-02-19",
            "2026-02-20",
            "2026-02-23"
        ]
    );

    // `exclude` keeps the cron's days (every day here) without the holidays,
    // and adds nothing.
    let daily = cn("0 0 10 * * *", CalendarRule::Exclude);
    let times = daily.upcoming(t("2026-02-13T00:00:00+08:00"), 3);
    assert_eq!(
        local(&times, Shanghai),
        ["2026-02-13 10:00", "2026-02-14 10:00", "2026-02-24 10:00"]
    );
    let effect = daily
        .calendar_effect(t("2026-02-13T00:00:00+08:00"), times[2])
        .expect("a calendar");
    assert_eq!(effect.removed.len(), 9, "15–23 February");
    assert!(effect.added.is_empty());
    // With `exclude` the cron may name weekdays: Mondays only.
    let mondays = cn("0 0 10 * * 1", CalendarRule::Exclude);
    assert_eq!(
        local(
            &mondays.upcoming(t("2026-02-10T00:00:00+08:00"), 2),
            Shanghai
        ),
        ["2026-03-02 10:00", "2026-03-09 10:00"],
        "16 and 23 February are holidays"
    );
}

#[test]
fn workdays_and_holidays_need_every_weekday_in_the_cron() {
    let cal = Arc::clone(builtin::cn_workdays());
    for (expr, rule, ok) in [
        ("0 0 10 * * *", CalendarRule::Workdays, true),
        ("0 0 10 * * 0-6", CalendarRule::Workdays, true),
        ("0 0 10 * * */1", CalendarRule::Holidays, true),
        ("0 0 10 1-7 * *", CalendarRule::Workdays, true),
        ("0 0 10 * * 1-5", CalendarRule::Workdays, false),
        ("0 0 10 * * 0,6", CalendarRule::Holidays, false),
        ("0 0 10 * * 1-5", CalendarRule::Exclude, true),
    ] {
        let built = Schedule::new(cron(expr), Shanghai).with_calendar(Arc::clone(&cal), rule);
        assert_eq!(built.is_ok(), ok, "{expr} with {rule}");
        if !ok {
            assert_eq!(built, Err(ScheduleError::RuleNeedsEveryWeekday { rule }));
        }
    }
    // The cron's day-of-month still narrows the days: 1–7 October 2026 are
    // all days off (National Day), so after 30 September the next working
    // day among the 1st–7th is 2 November (the 1st is a Sunday).
    let early = cn("0 0 10 1-7 * *", CalendarRule::Workdays);
    assert_eq!(
        local(&early.upcoming(t("2026-09-30T00:00:00+08:00"), 2), Shanghai),
        ["2026-11-02 10:00", "2026-11-03 10:00"]
    );
}

#[test]
fn a_missing_year_is_a_notice_from_december_on() {
    let payroll = cn("0 0 10 * * *", CalendarRule::Workdays);
    // (now, expected year of the notice)
    let cases = [
        ("2026-06-01T12:00:00+08:00", None),
        ("2026-11-30T23:59:59+08:00", None),
        ("2026-12-01T00:00:00+08:00", Some(2027)),
        // The date in the job's zone decides: 1 December in Shanghai.
        ("2026-11-30T16:30:00Z", Some(2027)),
        ("2027-03-01T00:00:00+08:00", Some(2027)),
        ("2019-06-01T00:00:00+08:00", Some(2019)),
        ("2019-12-15T00:00:00+08:00", Some(2019)),
    ];
    for (now, year) in cases {
        let notice = payroll.calendar_notice(t(now));
        assert_eq!(notice.as_ref().map(|n| n.year), year, "{now}");
        if let Some(n) = notice {
            assert_eq!(n.calendar, "cn-workdays");
            let zh = n.message(Lang::Zh);
            let en = n.message(Lang::En);
            assert!(
                zh.contains(&n.year.to_string()) && zh.contains("周一至周五"),
                "{zh}"
            );
            assert!(en.contains("Monday to Friday"), "{en}");
        }
    }
    // The same instant in New York is still 30 November.
    let in_new_york = Schedule::new(cron("0 0 10 * * *"), New_York)
        .with_calendar(Arc::clone(builtin::cn_workdays()), CalendarRule::Workdays)
        .expect("schedule");
    assert_eq!(in_new_york.calendar_notice(t("2026-11-30T16:30:00Z")), None);
    // A job that stops before the missing year needs no notice.
    let ends = payroll
        .clone()
        .with_active_window(None, Some(t("2026-12-31T23:59:59+08:00")))
        .expect("window");
    assert_eq!(ends.calendar_notice(t("2026-12-15T00:00:00+08:00")), None);
    // Nor does one without a calendar.
    let plain = Schedule::new(cron("0 0 10 * * *"), Shanghai);
    assert_eq!(plain.calendar_notice(t("2026-12-15T00:00:00+08:00")), None);
    // Past the data the plain week applies, and the effect says which years.
    let times = payroll.upcoming(t("2026-12-31T00:00:00+08:00"), 2);
    assert_eq!(
        local(&times, Shanghai),
        ["2026-12-31 10:00", "2027-01-01 10:00"],
        "1 January 2027 is a plain Friday until the 2027 notice is added"
    );
    let effect = payroll
        .calendar_effect(t("2026-12-20T00:00:00+08:00"), times[1])
        .expect("a calendar");
    assert_eq!(effect.missing_years, [2027]);
    assert!(effect.removed.is_empty() && effect.added.is_empty());
}

#[test]
fn active_window_edges() {
    let hourly = || Schedule::new(cron("0 0 * * * *"), UTC);
    let window = |from: &str, until: &str| {
        hourly()
            .with_active_window(Some(t(from)), Some(t(until)))
            .expect("window")
    };
    let s = window("2026-03-01T10:00:00Z", "2026-03-01T12:00:00Z");
    // (after, next fire time)
    let cases = [
        ("2026-01-01T00:00:00Z", Some("2026-03-01T10:00:00Z")), // from is included
        ("2026-03-01T09:59:59.999Z", Some("2026-03-01T10:00:00Z")),
        ("2026-03-01T10:00:00Z", Some("2026-03-01T11:00:00Z")),
        ("2026-03-01T11:00:00Z", Some("2026-03-01T12:00:00Z")), // until is included
        ("2026-03-01T12:00:00Z", None),
        ("2026-04-01T00:00:00Z", None),
    ];
    for (after, next) in cases {
        assert_eq!(s.next_after(t(after)), next.map(t), "after {after}");
    }
    assert_eq!(
        local(&s.upcoming(t("2026-01-01T00:00:00Z"), 10), UTC),
        ["2026-03-01 10:00", "2026-03-01 11:00", "2026-03-01 12:00"]
    );
    // (at, last fire time at or before)
    let cases = [
        ("2026-03-01T13:30:00Z", Some("2026-03-01T12:00:00Z")),
        ("2026-03-01T10:00:00Z", Some("2026-03-01T10:00:00Z")),
        ("2026-03-01T09:59:59Z", None),
        ("2026-01-01T00:00:00Z", None),
    ];
    for (at, last) in cases {
        assert_eq!(s.last_at_or_before(t(at)), last.map(t), "at {at}");
    }
    // Edges between whole seconds: a fire time just outside is left out.
    let s = window("2026-03-01T10:00:00.500Z", "2026-03-01T11:59:59.999Z");
    assert_eq!(
        local(&s.upcoming(t("2026-01-01T00:00:00Z"), 10), UTC),
        ["2026-03-01 11:00"]
    );
    // A window of one instant.
    let s = window("2026-03-01T10:00:00Z", "2026-03-01T10:00:00Z");
    assert_eq!(s.upcoming(t("2026-01-01T00:00:00Z"), 10).len(), 1);
    // Open-ended on either side.
    let s = hourly()
        .with_active_window(None, Some(t("2026-03-01T01:00:00Z")))
        .expect("window");
    assert_eq!(s.upcoming(t("2026-03-01T00:00:00Z"), 10).len(), 1);
    let s = hourly()
        .with_active_window(Some(t("2026-03-01T01:00:00Z")), None)
        .expect("window");
    assert_eq!(s.upcoming(t("2026-03-01T00:00:00Z"), 10).len(), 10);
    // Reversed.
    assert_eq!(
        hourly().with_active_window(
            Some(t("2026-03-01T10:00:00Z")),
            Some(t("2026-03-01T09:59:59.999Z"))
        ),
        Err(ScheduleError::WindowReversed)
    );
    // The calendar's effect stays inside the window: 14 February is outside.
    let payroll = cn("0 0 10 * * *", CalendarRule::Workdays)
        .with_active_window(Some(t("2026-02-15T00:00:00+08:00")), None)
        .expect("window");
    let effect = payroll
        .calendar_effect(
            t("2026-02-10T00:00:00+08:00"),
            t("2026-03-01T00:00:00+08:00"),
        )
        .expect("a calendar");
    assert_eq!(dates(&effect.added), ["2026-02-28"]);
}

#[test]
fn shortest_periods_and_the_jitter_they_allow() {
    // (cron, shortest period in seconds)
    let periods = [
        ("* * * * * *", 1),
        ("*/5 * * * * *", 5),
        ("0 */15 * * * *", 900),
        ("0 0 9,17 * * *", 8 * 3600),
        // 23:59 to 00:00 the next day is one minute.
        ("0 0,59 0,23 * * *", 60),
        ("0 0 10 * * *", 86_400),
        ("0 0 10 * * 1-5", 86_400),
        ("0 0 10 * * 1", 7 * 86_400),
        ("0 0 10 31 * *", 31 * 86_400),
        ("0 0 10 29 2 *", 1_461 * 86_400),
        // Either the 1st or a Monday (both day fields restricted): Monday
        // the 31st, then Tuesday the 1st.
        ("0 0 10 1 * 1", 86_400),
    ];
    for (expr, secs) in periods {
        assert_eq!(cron(expr).shortest_period_secs(), secs, "{expr}");
    }
    // (cron, jitterMs, accepted)
    let cases = [
        ("*/5 * * * * *", 0, Ok(())),
        ("*/5 * * * * *", 4_999, Ok(())),
        (
            "*/5 * * * * *",
            5_000,
            Err(ScheduleError::JitterTooLong {
                jitter_ms: 5_000,
                period_ms: 5_000,
            }),
        ),
        ("0 */15 * * * *", 899_999, Ok(())),
        ("0 0,59 0,23 * * *", 59_999, Ok(())),
        (
            "0 0,59 0,23 * * *",
            60_000,
            Err(ScheduleError::JitterTooLong {
                jitter_ms: 60_000,
                period_ms: 60_000,
            }),
        ),
        ("0 0 10 * * *", 86_399_999, Ok(())),
        (
            "0 0 10 * * *",
            86_400_000,
            Err(ScheduleError::JitterTooLong {
                jitter_ms: 86_400_000,
                period_ms: 86_400_000,
            }),
        ),
        ("0 0 10 * * 1", MAX_JITTER_MS, Ok(())),
        (
            "0 0 10 * * 1",
            MAX_JITTER_MS + 1,
            Err(ScheduleError::JitterOutOfRange {
                max_ms: MAX_JITTER_MS,
            }),
        ),
        (
            "0 0 10 * * *",
            -1,
            Err(ScheduleError::JitterOutOfRange {
                max_ms: MAX_JITTER_MS,
            }),
        ),
    ];
    for (expr, jitter, expected) in cases {
        assert_eq!(
            check_jitter(&cron(expr), jitter),
            expected,
            "{expr} {jitter}"
        );
        assert_eq!(
            Schedule::new(cron(expr), UTC)
                .with_jitter_ms(jitter)
                .map(|s| s.jitter_ms()),
            expected.clone().map(|()| jitter),
        );
    }
}

#[test]
fn jitter_is_deterministic_and_spread() {
    let s = Schedule::new(cron("0 * * * * *"), UTC)
        .with_jitter_ms(30_000)
        .expect("jitter");
    let nominal = t("2026-01-01T00:00:00Z");
    // Pinned: every worker, of every release, must compute these.
    assert_eq!(s.jitter_delay_ms(1, nominal), PINNED_DELAY_JOB_1);
    assert_eq!(s.jitter_delay_ms(2, nominal), PINNED_DELAY_JOB_2);
    let mut seen = std::collections::BTreeSet::new();
    for job in 1..=1000 {
        let delay = s.jitter_delay_ms(job, nominal);
        assert!((0..30_000).contains(&delay));
        assert_eq!(delay, s.jitter_delay_ms(job, nominal));
        let start = s.start_at(job, nominal);
        assert_eq!(start, nominal + TimeDelta::milliseconds(delay));
        seen.insert(delay / 1000);
    }
    assert!(seen.len() >= 25, "delays spread over the seconds: {seen:?}");
    // The same job lands elsewhere at another time.
    let later: Vec<i64> = (0..10)
        .map(|m| s.jitter_delay_ms(1, nominal + TimeDelta::minutes(m)))
        .collect();
    assert!(later.windows(2).any(|w| w[0] != w[1]), "{later:?}");
    // Without jitter a fire starts on time.
    let plain = Schedule::new(cron("0 * * * * *"), UTC);
    assert_eq!(plain.jitter_delay_ms(1, nominal), 0);
    assert_eq!(plain.start_at(1, nominal), nominal);
}

/// SplitMix64(SplitMix64(job) XOR nominal ms) mod 30 000 for 2026-01-01T00:00Z
/// (1 767 225 600 000 ms), computed independently of this crate.
const PINNED_DELAY_JOB_1: i64 = 1_922;
const PINNED_DELAY_JOB_2: i64 = 13_102;

#[test]
fn dst_spring_forward_in_new_york() {
    // A days-off job at 02:30, which does not exist on 8 March 2026: it runs
    // at 03:00 EDT that Sunday. The calendar's working Saturday 7 March is
    // left out.
    let s = ny("0 30 2 * * *", CalendarRule::Holidays)
        .with_jitter_ms(3_600_000)
        .expect("jitter below a day");
    let times = s.upcoming(t("2026-03-06T12:00:00Z"), 3);
    assert_eq!(
        times,
        [
            t("2026-03-08T03:00:00-04:00"),
            t("2026-03-14T02:30:00-04:00"),
            t("2026-03-15T02:30:00-04:00"),
        ]
    );
    let effect = s
        .calendar_effect(t("2026-03-06T12:00:00Z"), times[2])
        .expect("a calendar");
    assert_eq!(dates(&effect.removed), ["2026-03-07"]);
    assert_eq!(effect.removed[0].name.en, "Stock-taking");
    for job in 1..=50 {
        for &nominal in &times {
            let start = s.start_at(job, nominal);
            assert!(start >= nominal && start < nominal + TimeDelta::hours(1));
        }
    }

    // A daily 01:30 job may be jittered by almost a day on the wall clock,
    // but from Sunday to Monday the real interval is 23 hours: a start is
    // never at or past the next nominal time.
    let daily = Schedule::new(cron("0 30 1 * * *"), New_York)
        .with_jitter_ms(86_399_999)
        .expect("less than a day");
    let sunday = t("2026-03-08T01:30:00-05:00");
    let monday = daily.next_after(sunday).expect("next");
    assert_eq!(monday, t("2026-03-09T01:30:00-04:00"));
    assert_eq!(monday - sunday, TimeDelta::hours(23));
    let mut capped = 0;
    for job in 1..=200 {
        let start = daily.start_at(job, sunday);
        assert!(start >= sunday && start < monday, "job {job}: {start}");
        let raw = daily.jitter_delay_ms(job, sunday);
        if raw >= (monday - sunday).num_milliseconds() {
            assert_eq!(start, monday - TimeDelta::milliseconds(1));
            capped += 1;
        } else {
            assert_eq!(start, sunday + TimeDelta::milliseconds(raw));
        }
    }
    assert!(capped > 0, "some of 200 jobs fall in the missing hour");
}

#[test]
fn dst_fall_back_in_new_york() {
    // 1 November 2026, a Sunday: 01:00–02:00 happens twice.
    let from = t("2026-10-31T12:00:00Z");
    // A fixed-time job runs once (the first 01:30), and only on days off.
    let off = ny("0 30 1 * * *", CalendarRule::Holidays);
    assert_eq!(
        off.upcoming(from, 2),
        [
            t("2026-11-01T01:30:00-04:00"),
            t("2026-11-07T01:30:00-05:00")
        ]
    );
    let working = ny("0 30 1 * * *", CalendarRule::Workdays);
    assert_eq!(
        working.upcoming(from, 1),
        [t("2026-11-02T01:30:00-05:00")],
        "Sunday is skipped, in either half of the repeated hour"
    );
    // An interval job fires in both halves; both are 1 November in New York.
    let every_half_hour = ny("0 */30 1 * * *", CalendarRule::Holidays);
    assert_eq!(
        every_half_hour.upcoming(from, 5),
        [
            t("2026-11-01T01:00:00-04:00"),
            t("2026-11-01T01:30:00-04:00"),
            t("2026-11-01T01:00:00-05:00"),
            t("2026-11-01T01:30:00-05:00"),
            t("2026-11-07T01:00:00-05:00"),
        ]
    );
    // Its shortest period is 30 minutes on the wall clock and in real time.
    let jittered = every_half_hour
        .clone()
        .with_jitter_ms(1_799_999)
        .expect("below 30 minutes");
    for job in 1..=50 {
        for pair in every_half_hour.upcoming(from, 5).windows(2) {
            let start = jittered.start_at(job, pair[0]);
            assert!(start >= pair[0] && start < pair[1]);
        }
    }
    assert_eq!(
        jittered.with_jitter_ms(1_800_000),
        Err(ScheduleError::JitterTooLong {
            jitter_ms: 1_800_000,
            period_ms: 1_800_000
        })
    );
}

#[test]
fn the_calendar_rules_on_the_nominal_date_not_the_jittered_start() {
    // 23:30 on working days, up to an hour late: Wednesday's run may start
    // on Thanksgiving, Friday's on Saturday; Thanksgiving itself has none.
    let s = ny("0 30 23 * * *", CalendarRule::Workdays)
        .with_jitter_ms(3_600_000)
        .expect("jitter");
    let times = s.upcoming(t("2026-11-25T12:00:00-05:00"), 3);
    assert_eq!(
        local(&times, New_York),
        ["2026-11-25 23:30", "2026-11-27 23:30", "2026-11-30 23:30"]
    );
    let friday = times[1];
    let late = (1..=200)
        .find(|&job| s.jitter_delay_ms(job, friday) > 30 * 60 * 1000)
        .expect("some job starts after midnight");
    let start = s.start_at(late, friday);
    assert_eq!(s.local_date(start), d(2026, 11, 28), "starts on Saturday");
    assert_eq!(
        s.local_date(friday),
        d(2026, 11, 27),
        "but is Friday's fire"
    );
    assert_eq!(
        s.last_at_or_before(start),
        Some(friday),
        "scheduledAt stays nominal"
    );
}

#[test]
fn the_date_is_the_one_in_the_job_zone() {
    // cn-workdays in a New York job: 21:00 on Friday 13 February in New
    // York is already Saturday 10:00 in Shanghai; New York's date decides.
    let s = Schedule::new(cron("0 0 21 * * *"), New_York)
        .with_calendar(Arc::clone(builtin::cn_workdays()), CalendarRule::Workdays)
        .expect("schedule");
    let times = s.upcoming(t("2026-02-13T00:00:00-05:00"), 3);
    assert_eq!(
        local(&times, New_York),
        ["2026-02-13 21:00", "2026-02-14 21:00", "2026-02-24 21:00"]
    );
    assert_eq!(
        local(&times[..1], Shanghai),
        ["2026-02-14 10:00"],
        "the same instant in Shanghai"
    );
}
