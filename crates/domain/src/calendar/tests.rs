//! The built-in calendar against the published notices, day by day; the data
//! file's structural rules; the three rules; user-calendar validation.

use chrono::{Datelike, NaiveDate, Weekday};
use serde_json::{Map, Value, json};

use super::builtin::{self, DataError};
use super::user::{self, CalendarProblem};
use super::*;

fn d(y: i32, m: u32, day: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(y, m, day).expect("valid date")
}

/// One festival as a notice states it: the days off (from, to, with the
/// weekdays the notice prints in brackets where it prints them) and the
/// make-up working days with their printed weekdays. Typed from the
/// notices' text, independently of data/cn-workdays.toml.
struct Festival {
    from: (u32, u32, Option<Weekday>),
    to: (u32, u32, Option<Weekday>),
    /// Days off that fall in December of the year before (2023's 元旦).
    from_previous_year: bool,
    workdays: &'static [(u32, u32, Weekday)],
}

const fn f(
    from: (u32, u32, Option<Weekday>),
    to: (u32, u32, Option<Weekday>),
    workdays: &'static [(u32, u32, Weekday)],
) -> Festival {
    Festival {
        from,
        to,
        from_previous_year: false,
        workdays,
    }
}

use Weekday::{Fri, Mon, Sat, Sun, Thu, Tue, Wed};

/// 国务院办公厅关于2025年部分节假日安排的通知 (2024-11-12).
const NOTICE_2025: &[Festival] = &[
    // 一、元旦：1月1日（周三）放假1天，不调休。
    f((1, 1, Some(Wed)), (1, 1, Some(Wed)), &[]),
    // 二、春节：1月28日（农历除夕、周二）至2月4日（农历正月初七、周二）放假调休，
    // 共8天。1月26日（周日）、2月8日（周六）上班。
    f(
        (1, 28, Some(Tue)),
        (2, 4, Some(Tue)),
        &[(1, 26, Sun), (2, 8, Sat)],
    ),
    // 三、清明节：4月4日（周五）至6日（周日）放假，共3天。
    f((4, 4, Some(Fri)), (4, 6, Some(Sun)), &[]),
    // 四、劳动节：5月1日（周四）至5日（周一）放假调休，共5天。4月27日（周日）上班。
    f((5, 1, Some(Thu)), (5, 5, Some(Mon)), &[(4, 27, Sun)]),
    // 五、端午节：5月31日（周六）至6月2日（周一）放假，共3天。
    f((5, 31, Some(Sat)), (6, 2, Some(Mon)), &[]),
    // 六、国庆节、中秋节：10月1日（周三）至8日（周三）放假调休，共8天。
    // 9月28日（周日）、10月11日（周六）上班。
    f(
        (10, 1, Some(Wed)),
        (10, 8, Some(Wed)),
        &[(9, 28, Sun), (10, 11, Sat)],
    ),
];

/// 国务院办公厅关于2026年部分节假日安排的通知 (2025-11-04).
const NOTICE_2026: &[Festival] = &[
    // 一、元旦：1月1日（周四）至3日（周六）放假调休，共3天。1月4日（周日）上班。
    f((1, 1, Some(Thu)), (1, 3, Some(Sat)), &[(1, 4, Sun)]),
    // 二、春节：2月15日（农历腊月二十八、周日）至23日（农历正月初七、周一）放假调休，
    // 共9天。2月14日（周六）、2月28日（周六）上班。
    f(
        (2, 15, Some(Sun)),
        (2, 23, Some(Mon)),
        &[(2, 14, Sat), (2, 28, Sat)],
    ),
    // 三、清明节：4月4日（周六）至6日（周一）放假，共3天。
    f((4, 4, Some(Sat)), (4, 6, Some(Mon)), &[]),
    // 四、劳动节：5月1日（周五）至5日（周二）放假调休，共5天。5月9日（周六）上班。
    f((5, 1, Some(Fri)), (5, 5, Some(Tue)), &[(5, 9, Sat)]),
    // 五、端午节：6月19日（周五）至21日（周日）放假，共3天。
    f((6, 19, Some(Fri)), (6, 21, Some(Sun)), &[]),
    // 六、中秋节：9月25日（周五）至27日（周日）放假，共3天。
    f((9, 25, Some(Fri)), (9, 27, Some(Sun)), &[]),
    // 七、国庆节：10月1日（周四）至7日（周三）放假调休，共7天。
    // 9月20日（周日）、10月10日（周六）上班。
    f(
        (10, 1, Some(Thu)),
        (10, 7, Some(Wed)),
        &[(9, 20, Sun), (10, 10, Sat)],
    ),
];

/// The days off and make-up working days of one notice, after checking the
/// weekdays it prints against the real calendar (a typo in this table
/// shows up here, not as a wrong expectation).
fn notice_days(year: i32, notice: &[Festival]) -> (Vec<NaiveDate>, Vec<NaiveDate>) {
    let mut off = Vec::new();
    let mut work = Vec::new();
    for festival in notice {
        let from_year = if festival.from_previous_year {
            year - 1
        } else {
            year
        };
        let from = d(from_year, festival.from.0, festival.from.1);
        let to = d(year, festival.to.0, festival.to.1);
        for (date, printed) in [(from, festival.from.2), (to, festival.to.2)] {
            if let Some(weekday) = printed {
                assert_eq!(date.weekday(), weekday, "{date} is printed as {weekday:?}");
            }
        }
        off.extend(from.iter_days().take_while(|x| *x <= to));
        for &(m, day, weekday) in festival.workdays {
            let date = d(year, m, day);
            assert_eq!(date.weekday(), weekday, "{date} is printed as {weekday:?}");
            work.push(date);
        }
    }
    (off, work)
}

/// Every day of the year, working or not, against the notice.
fn check_year_day_by_day(year: i32, notice: &[Festival], days_off: usize, workdays: usize) {
    let cal = builtin::cn_workdays();
    let (off, work) = notice_days(year, notice);
    assert_eq!(off.len(), days_off, "{year}: days off in the notice");
    let mut working_days = 0;
    for date in d(year, 1, 1).iter_days().take_while(|x| x.year() == year) {
        let expected = if off.contains(&date) {
            false
        } else if work.contains(&date) {
            true
        } else {
            !matches!(date.weekday(), Sat | Sun)
        };
        assert_eq!(
            cal.is_working_day(date),
            expected,
            "{date} ({:?}): working day?",
            date.weekday()
        );
        let listed = cal.date(date).map(|e| e.kind);
        let expected_listed = if off.contains(&date) {
            Some(DayKind::Holiday)
        } else if work.contains(&date) {
            Some(DayKind::Workday)
        } else {
            None
        };
        assert_eq!(listed, expected_listed, "{date}: listed kind");
        working_days += usize::from(expected);
    }
    assert_eq!(working_days, workdays, "{year}: working days");
}

#[test]
fn year_2025_day_by_day_matches_the_notice() {
    // 1 + 8 + 3 + 5 + 3 + 8 = 28 days off, 18 of them on weekdays; 104
    // weekend days; 5 make-up working days: 365 − 104 − 18 + 5 = 248.
    check_year_day_by_day(2025, NOTICE_2025, 28, 248);
}

#[test]
fn year_2026_day_by_day_matches_the_notice() {
    // 3 + 9 + 3 + 5 + 3 + 3 + 7 = 33 days off, 19 of them on weekdays; 104
    // weekend days; 6 make-up working days: 365 − 104 − 19 + 6 = 248.
    check_year_day_by_day(2026, NOTICE_2026, 33, 248);
}

#[test]
fn builtin_data_is_valid() {
    let parsed = builtin::parse(
        CN_WORKDAYS,
        builtin::cn_workdays_name(),
        builtin::CN_WORKDAYS_TOML,
    )
    .expect("data/cn-workdays.toml passes every structural rule");
    let cal = &parsed.calendar;
    assert_eq!(cal.code(), "cn-workdays");
    assert_eq!(cal.years(), Years::new(2020, 2026));
    let years: Vec<i32> = parsed.notices.iter().map(|n| n.year).collect();
    assert_eq!(years, (2020..=2026).collect::<Vec<_>>());
    for notice in &parsed.notices {
        assert_eq!(
            notice.title,
            format!("国务院办公厅关于{}年部分节假日安排的通知", notice.year)
        );
        assert_eq!(notice.date.year(), notice.year - 1, "{}", notice.title);
        assert!(!notice.sources.is_empty(), "{}: sources", notice.title);
    }
    let dates: Vec<(i32, NaiveDate)> = parsed.notices.iter().map(|n| (n.year, n.date)).collect();
    assert_eq!(
        dates,
        vec![
            (2020, d(2019, 11, 21)),
            (2021, d(2020, 11, 25)),
            (2022, d(2021, 10, 25)),
            (2023, d(2022, 12, 8)),
            (2024, d(2023, 10, 25)),
            (2025, d(2024, 11, 12)),
            (2026, d(2025, 11, 4)),
        ]
    );
    // Structural rules, checked again on the result: make-up working days
    // fall on weekends; every date lies in the calendar's years.
    for (date, entry) in cal.dates() {
        assert!(cal.covers(date.year()), "{date}");
        if entry.kind == DayKind::Workday {
            assert!(is_weekend(date), "{date} is a make-up working day");
        }
        assert!(!entry.name.zh.is_empty() && !entry.name.en.is_empty());
    }
    // 2020's Spring Festival as extended on 2020-01-26.
    let amendments = &parsed.notices[0].amendments;
    assert_eq!(amendments.len(), 1);
    assert_eq!(
        amendments[0].title,
        "国务院办公厅关于延长2020年春节假期的通知"
    );
    assert_eq!(amendments[0].date, d(2020, 1, 26));
    assert!(!cal.is_working_day(d(2020, 1, 31)));
    assert!(
        !cal.is_working_day(d(2020, 2, 1)),
        "the Saturday stayed off"
    );
    assert!(!cal.is_working_day(d(2020, 2, 2)));
    assert!(cal.is_working_day(d(2020, 2, 3)));
    assert!(cal.is_working_day(d(2020, 1, 19)), "the Sunday make-up day");
    // 2023's New Year starts on 2022-12-31.
    assert_eq!(
        cal.date(d(2022, 12, 31)).map(|e| e.name.zh.as_str()),
        Some("元旦")
    );
    // 2024's New Year's Eve was only encouraged, not a day off.
    assert!(cal.is_working_day(d(2024, 2, 9)));
}

/// A data file made of `years` entries (each a TOML fragment after the
/// standard header of its year).
fn data(entries: &[(i32, &str)]) -> String {
    entries
        .iter()
        .map(|(year, body)| {
            format!(
                "[[years]]\nyear = {year}\ntitle = \"国务院办公厅关于{year}年部分节假日安排的通知\"\ndate = {}-11-01\n{body}\n",
                year - 1
            )
        })
        .collect()
}

/// Whether an error is the one a case expects.
type IsExpected = fn(&DataError) -> bool;

const HOLIDAY: &str = "[[years.holidays]]\nname = \"元旦\"\nname_en = \"New Year's Day\"\n";

#[test]
fn data_file_rules_reject_each_mistake() {
    let ok = data(&[(
        2026,
        &format!("{HOLIDAY}from = 2026-01-01\nto = 2026-01-03\nworkdays = [2026-01-04]"),
    )]);
    assert!(builtin::parse("x", Label::default(), &ok).is_ok());

    let cases: Vec<(String, IsExpected)> = vec![
        (String::new(), |e| matches!(e, DataError::Toml(_))),
        ("years = []".into(), |e| matches!(e, DataError::Empty)),
        (
            // 2027 missing between 2026 and 2028.
            data(&[(2026, ""), (2028, "")]),
            |e| {
                matches!(
                    e,
                    DataError::NotContiguous {
                        previous: 2026,
                        year: 2028
                    }
                )
            },
        ),
        (data(&[(2026, ""), (2026, "")]), |e| {
            matches!(e, DataError::NotContiguous { .. })
        }),
        (ok.replace("2026年部分", "2026年部份"), |e| {
            matches!(e, DataError::Title { year: 2026, .. })
        }),
        (ok.replace("date = 2025-11-01", "date = 2026-11-01"), |e| {
            matches!(e, DataError::NoticeDate { year: 2026, .. })
        }),
        (
            ok.replace("date = 2025-11-01", "date = 2025-11-01T08:00:00"),
            |e| matches!(e, DataError::NotADate { .. }),
        ),
        (
            // 2026-01-05 is a Monday.
            ok.replace("workdays = [2026-01-04]", "workdays = [2026-01-05]"),
            |e| matches!(e, DataError::WorkdayNotOnWeekend { .. }),
        ),
        (
            // Both off (1–3 January) and working.
            ok.replace("workdays = [2026-01-04]", "workdays = [2026-01-03]"),
            |e| {
                matches!(
                    e,
                    DataError::Duplicate {
                        first: "holiday",
                        second: "workday",
                        ..
                    }
                )
            },
        ),
        (
            // Two festivals overlapping.
            data(&[(
                2026,
                &format!(
                    "{HOLIDAY}from = 2026-01-01\nto = 2026-01-03\n{HOLIDAY}from = 2026-01-03\nto = 2026-01-04"
                ),
            )]),
            |e| {
                matches!(
                    e,
                    DataError::Duplicate {
                        first: "holiday",
                        second: "holiday",
                        ..
                    }
                )
            },
        ),
        (ok.replace("to = 2026-01-03", "to = 2025-12-30"), |e| {
            matches!(e, DataError::BadRange { .. })
        }),
        (ok.replace("to = 2026-01-03", "to = 2026-02-03"), |e| {
            matches!(e, DataError::BadRange { .. })
        }),
        (
            // A date of another year than the notice's.
            ok.replace("workdays = [2026-01-04]", "workdays = [2027-01-02]"),
            |e| matches!(e, DataError::OutOfReach { .. }),
        ),
        (ok.replace("name = \"元旦\"", "name = \"\""), |e| {
            matches!(e, DataError::Unnamed { year: 2026 })
        }),
        (
            ok.replace("name = \"元旦\"", "name = \"元旦\"\nlabel = \"x\""),
            |e| matches!(e, DataError::Toml(_)),
        ),
    ];
    for (text, expected) in cases {
        match builtin::parse("x", Label::default(), &text) {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(e) => assert!(expected(&e), "unexpected error {e:?} for:\n{text}"),
        }
    }
}

#[test]
fn rules_decide_each_kind_of_day() {
    let cal = builtin::cn_workdays();
    // (date, workdays, holidays, exclude)
    let cases = [
        (d(2026, 2, 13), true, false, true),  // Friday, ordinary
        (d(2026, 2, 14), true, false, true),  // Saturday, make-up working day
        (d(2026, 2, 15), false, true, false), // Sunday, holiday
        (d(2026, 2, 16), false, true, false), // Monday, holiday
        (d(2026, 2, 24), true, false, true),  // Tuesday after the festival
        (d(2026, 3, 7), false, true, true),   // Saturday, ordinary
        (d(2026, 1, 4), true, false, true),   // Sunday, make-up working day
        (d(2030, 1, 1), true, false, true),   // no data: a plain Tuesday
        (d(2030, 1, 5), false, true, true),   // no data: a plain Saturday
    ];
    for (date, workdays, holidays, exclude) in cases {
        assert_eq!(
            cal.allows(CalendarRule::Workdays, date),
            workdays,
            "{date} workdays"
        );
        assert_eq!(
            cal.allows(CalendarRule::Holidays, date),
            holidays,
            "{date} holidays"
        );
        assert_eq!(
            cal.allows(CalendarRule::Exclude, date),
            exclude,
            "{date} exclude"
        );
    }
    assert!(cal.covers(2020) && cal.covers(2026));
    assert!(!cal.covers(2019) && !cal.covers(2027));
    for rule in CalendarRule::ALL {
        assert_eq!(CalendarRule::parse(rule.as_str()), Some(rule));
    }
    assert_eq!(CalendarRule::parse("weekdays"), None);
    assert_eq!(DayKind::parse("holiday"), Some(DayKind::Holiday));
    assert_eq!(DayKind::parse("Holiday"), None);
}

#[test]
fn a_calendar_keeps_its_dates_within_its_years() {
    let one = std::collections::BTreeMap::from([(
        d(2026, 5, 1),
        CalendarDate {
            kind: DayKind::Holiday,
            name: Label::same("x"),
        },
    )]);
    assert_eq!(
        Calendar::new("c", Label::default(), Years::new(2027, 2027), one.clone()),
        Err(CalendarError::DateOutsideYears(d(2026, 5, 1)))
    );
    assert_eq!(
        Calendar::new("c", Label::default(), None, one.clone()),
        Err(CalendarError::DatesWithoutYears)
    );
    assert!(Calendar::new("c", Label::default(), Years::new(2026, 2026), one).is_ok());
    assert_eq!(Years::new(2027, 2026), None);
    assert_eq!(Years::new(1969, 2026), None);
    assert_eq!(Years::new(2026, 2201), None);
}

fn body(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

#[test]
fn user_calendars_are_validated_field_by_field() {
    let spec = user::validate(
        &body(json!({
            "code": "acme-2026",
            "name": " 公司日历 ",
            "dates": [
                {"date": "2026-12-24", "kind": "holiday", "name": "Christmas Eve"},
                {"date": "2026-12-26", "kind": "workday"},
            ],
        })),
        None,
    )
    .expect("valid");
    assert_eq!(spec.code, "acme-2026");
    assert_eq!(spec.name, "公司日历");
    assert_eq!(spec.years, Years::new(2026, 2026), "years from the dates");
    let cal = spec.to_calendar();
    assert!(!cal.is_working_day(d(2026, 12, 24)));
    assert!(cal.is_working_day(d(2026, 12, 26)));
    assert!(cal.covers(2026) && !cal.covers(2027));

    let explicit = user::validate(
        &body(json!({"code": "c", "name": "n", "firstYear": 2026, "lastYear": 2028, "dates": []})),
        None,
    )
    .expect("valid");
    assert_eq!(explicit.years, Years::new(2026, 2028));
    let empty = user::validate(&body(json!({"code": "c", "name": "n"})), None).expect("valid");
    assert_eq!(empty.years, None, "no dates, no years: data for no year");
    // On update the code comes from the path; echoed read-only fields pass.
    let update = user::validate(
        &body(json!({"name": "n", "version": 3, "builtin": false, "dateCount": 0})),
        Some("acme"),
    )
    .expect("valid");
    assert_eq!(update.code, "acme");

    let cases = [
        (json!({"name": "n"}), "code", CalendarProblem::Required),
        (
            json!({"code": "Acme", "name": "n"}),
            "code",
            CalendarProblem::BadCode,
        ),
        (
            json!({"code": "cn-workdays", "name": "n"}),
            "code",
            CalendarProblem::BuiltinCode("cn-workdays".into()),
        ),
        (
            json!({"code": 5, "name": "n"}),
            "code",
            CalendarProblem::WrongType("a string"),
        ),
        (json!({"code": "c"}), "name", CalendarProblem::Required),
        (
            json!({"code": "c", "name": "  "}),
            "name",
            CalendarProblem::Blank,
        ),
        (
            json!({"code": "c", "name": "名".repeat(65)}),
            "name",
            CalendarProblem::TooLong { max: 64, chars: 65 },
        ),
        (
            json!({"code": "c", "name": "a\u{0}b"}),
            "name",
            CalendarProblem::ControlCharacter,
        ),
        (
            json!({"code": "c", "name": "n", "description": "line\nbreak"}),
            "description",
            CalendarProblem::ControlCharacter,
        ),
        (
            json!({"code": "c", "name": "n", "dates": [{"date": "2026-02-03", "kind": "holiday", "name": "\u{7f}"}]}),
            "dates[0].name",
            CalendarProblem::ControlCharacter,
        ),
        (
            json!({"code": "c", "name": "n", "colour": "red"}),
            "colour",
            CalendarProblem::UnknownField,
        ),
        (
            json!({"code": "c", "name": "n", "firstYear": 2026}),
            "lastYear",
            CalendarProblem::YearsHalf,
        ),
        (
            json!({"code": "c", "name": "n", "firstYear": 2027, "lastYear": 2026}),
            "lastYear",
            CalendarProblem::YearsReversed,
        ),
        (
            json!({"code": "c", "name": "n", "firstYear": 1900, "lastYear": 2026}),
            "firstYear",
            CalendarProblem::YearOutOfRange,
        ),
        (
            json!({"code": "c", "name": "n", "firstYear": "2026", "lastYear": 2026}),
            "firstYear",
            CalendarProblem::WrongType("an integer or null"),
        ),
        (
            json!({"code": "c", "name": "n", "dates": {}}),
            "dates",
            CalendarProblem::WrongType("an array"),
        ),
        (
            json!({"code": "c", "name": "n", "dates": [{"date": "2026-02-30", "kind": "holiday"}]}),
            "dates[0].date",
            CalendarProblem::NotADate("2026-02-30".into()),
        ),
        (
            json!({"code": "c", "name": "n", "dates": [{"date": "2026-2-3", "kind": "holiday"}]}),
            "dates[0].date",
            CalendarProblem::NotADate("2026-2-3".into()),
        ),
        (
            json!({"code": "c", "name": "n", "dates": [{"kind": "holiday"}]}),
            "dates[0].date",
            CalendarProblem::Required,
        ),
        (
            json!({"code": "c", "name": "n", "dates": [{"date": "2026-02-03", "kind": "off"}]}),
            "dates[0].kind",
            CalendarProblem::UnknownKind("off".into()),
        ),
        (
            json!({"code": "c", "name": "n", "dates": [
                {"date": "2026-02-03", "kind": "holiday"},
                {"date": "2026-02-03", "kind": "workday"},
            ]}),
            "dates[1].date",
            CalendarProblem::DuplicateDate(d(2026, 2, 3)),
        ),
        (
            json!({"code": "c", "name": "n", "dates": [{"date": "2026-02-03", "kind": "holiday", "note": 1}]}),
            "dates[0].note",
            CalendarProblem::UnknownField,
        ),
        (
            json!({"code": "c", "name": "n", "dates": [{"date": "2026-02-03", "kind": "holiday", "name": "x".repeat(65)}]}),
            "dates[0].name",
            CalendarProblem::TooLong { max: 64, chars: 65 },
        ),
        (
            json!({"code": "c", "name": "n", "dates": ["2026-02-03"]}),
            "dates[0]",
            CalendarProblem::WrongType("an object"),
        ),
        (
            json!({"code": "c", "name": "n", "firstYear": 2027, "lastYear": 2027,
                   "dates": [{"date": "2026-02-03", "kind": "holiday"}]}),
            "dates[0].date",
            CalendarProblem::DateOutsideYears {
                date: d(2026, 2, 3),
                first: 2027,
                last: 2027,
            },
        ),
    ];
    for (input, field, problem) in cases {
        let errors = user::validate(&body(input.clone()), None).expect_err(&input.to_string());
        assert!(
            errors
                .iter()
                .any(|e| e.field == field && e.problem == problem),
            "{input}: expected {field} {problem:?}, got {errors:?}"
        );
        for e in &errors {
            assert!(!e.message(Lang::Zh).is_empty() && !e.message(Lang::En).is_empty());
        }
    }
    // An update cannot rename: `code` in the body is an unknown field.
    let errors = user::validate(&body(json!({"code": "other", "name": "n"})), Some("acme"))
        .expect_err("code in an update");
    assert_eq!(errors[0].field, "code");
    assert_eq!(errors[0].problem, CalendarProblem::UnknownField);
    // Too many dates.
    let many: Vec<Value> = d(2026, 1, 1)
        .iter_days()
        .take(user::MAX_DATES + 1)
        .map(|x| json!({"date": x.to_string(), "kind": "holiday"}))
        .collect();
    let errors = user::validate(
        &body(json!({"code": "c", "name": "n", "dates": many})),
        None,
    )
    .expect_err("too many");
    assert_eq!(errors[0].field, "dates");
}

#[test]
fn messages_name_the_problem_in_both_languages() {
    let e = user::CalendarFieldError {
        field: "dates[0].kind".into(),
        problem: CalendarProblem::UnknownKind("off".into()),
    };
    assert_eq!(
        e.message(Lang::Zh),
        "类型 off 不存在：只能是 holiday（放假）或 workday（上班）"
    );
    assert_eq!(
        e.message(Lang::En),
        "Kind off does not exist: use holiday or workday"
    );
}

/// Every festival of every notice: the length the notice states (共N天, or
/// one day where it says 放假 without a count) and how many make-up working
/// days it lists. 2020's Spring Festival is the extended one (7 days by the
/// first notice, 10 after 2020-01-26, one make-up day less).
#[test]
fn festival_lengths_match_the_notices() {
    let table: &[(i32, &str, usize, usize)] = &[
        (2020, "元旦", 1, 0),
        (2020, "春节", 10, 1),
        (2020, "清明节", 3, 0),
        (2020, "劳动节", 5, 2),
        (2020, "端午节", 3, 1),
        (2020, "国庆节、中秋节", 8, 2),
        (2021, "元旦", 3, 0),
        (2021, "春节", 7, 2),
        (2021, "清明节", 3, 0),
        (2021, "劳动节", 5, 2),
        (2021, "端午节", 3, 0),
        (2021, "中秋节", 3, 1),
        (2021, "国庆节", 7, 2),
        (2022, "元旦", 3, 0),
        (2022, "春节", 7, 2),
        (2022, "清明节", 3, 1),
        (2022, "劳动节", 5, 2),
        (2022, "端午节", 3, 0),
        (2022, "中秋节", 3, 0),
        (2022, "国庆节", 7, 2),
        (2023, "元旦", 3, 0),
        (2023, "春节", 7, 2),
        (2023, "清明节", 1, 0),
        (2023, "劳动节", 5, 2),
        (2023, "端午节", 3, 1),
        (2023, "中秋节、国庆节", 8, 2),
        (2024, "元旦", 1, 0),
        (2024, "春节", 8, 2),
        (2024, "清明节", 3, 1),
        (2024, "劳动节", 5, 2),
        (2024, "端午节", 1, 0),
        (2024, "中秋节", 3, 1),
        (2024, "国庆节", 7, 2),
        (2025, "元旦", 1, 0),
        (2025, "春节", 8, 2),
        (2025, "清明节", 3, 0),
        (2025, "劳动节", 5, 1),
        (2025, "端午节", 3, 0),
        (2025, "国庆节、中秋节", 8, 2),
        (2026, "元旦", 3, 1),
        (2026, "春节", 9, 2),
        (2026, "清明节", 3, 0),
        (2026, "劳动节", 5, 1),
        (2026, "端午节", 3, 0),
        (2026, "中秋节", 3, 0),
        (2026, "国庆节", 7, 2),
    ];
    let mut counted: std::collections::BTreeMap<(i32, String), (usize, usize)> =
        std::collections::BTreeMap::new();
    for (date, entry) in builtin::cn_workdays().dates() {
        // A December day off belongs to the next year's New Year.
        let year = if date.month() == 12 && entry.kind == DayKind::Holiday {
            date.year() + 1
        } else {
            date.year()
        };
        let slot = counted.entry((year, entry.name.zh.clone())).or_default();
        match entry.kind {
            DayKind::Holiday => slot.0 += 1,
            DayKind::Workday => slot.1 += 1,
        }
    }
    let expected: std::collections::BTreeMap<(i32, String), (usize, usize)> = table
        .iter()
        .map(|&(y, name, off, work)| ((y, name.to_string()), (off, work)))
        .collect();
    assert_eq!(counted, expected);
}
