//! The built-in calendar `cn-workdays`, read from `data/cn-workdays.toml`
//! (compiled in): the days off and make-up working days of every notice of
//! the General Office of the State Council on the year's holidays
//! (国务院办公厅关于YYYY年部分节假日安排的通知).
//!
//! The file is checked when it is read ([`parse`]): years contiguous, each
//! notice's title in the official form, dates within the notice's reach, no
//! date listed twice (so none is both off and working), make-up working days
//! on Saturdays and Sundays. A unit test reads the embedded file, so a bad
//! data change fails the build's tests, never a running service.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use chrono::{Datelike, NaiveDate};
use serde::Deserialize;

use super::{Calendar, CalendarDate, DayKind, Label, Years, is_weekend};

/// The code of the built-in calendar of China's working days.
pub const CN_WORKDAYS: &str = "cn-workdays";

/// The data file, compiled in.
pub const CN_WORKDAYS_TOML: &str = include_str!("../../data/cn-workdays.toml");

/// The longest stretch of days off one festival may have; longer means a
/// typo in the data (the longest so far is 2020's extended Spring Festival,
/// 10 days).
const MAX_HOLIDAY_DAYS: i64 = 14;

/// One year's notice, as the data file records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub year: i32,
    /// The notice's exact title.
    pub title: String,
    /// Its document number (文号), when a reliable copy showed it.
    pub document: Option<String>,
    /// The date the notice bears.
    pub date: NaiveDate,
    /// Where its text was read.
    pub sources: Vec<String>,
    /// Later notices that changed the year's arrangement.
    pub amendments: Vec<NoticeAmendment>,
}

/// A later notice that changed a year's arrangement (2020's extended Spring
/// Festival).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoticeAmendment {
    pub title: String,
    pub document: Option<String>,
    pub date: NaiveDate,
    pub sources: Vec<String>,
    /// What it changed, in the notice's words.
    pub change: String,
}

/// Why the data file is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DataError {
    #[error("not valid TOML for this file: {0}")]
    Toml(String),
    #[error("no [[years]] entry")]
    Empty,
    #[error("year {year}: {what} is not a plain date (YYYY-MM-DD)")]
    NotADate { year: i32, what: String },
    #[error("year {year} follows {previous}: years must be contiguous and increasing")]
    NotContiguous { previous: i32, year: i32 },
    #[error("year {year} is outside the years a calendar may hold")]
    YearOutOfRange { year: i32 },
    #[error("year {year}: the title must be `{expected}`")]
    Title { year: i32, expected: String },
    #[error("year {year}: the notice's date {date} is not in the year before")]
    NoticeDate { year: i32, date: NaiveDate },
    #[error("year {year}: an amendment's title or change is empty")]
    Amendment { year: i32 },
    #[error("year {year}: a holiday has an empty name")]
    Unnamed { year: i32 },
    #[error("year {year}, {name}: from {from} is after to {to}, or the stretch is too long")]
    BadRange {
        year: i32,
        name: String,
        from: NaiveDate,
        to: NaiveDate,
    },
    #[error(
        "year {year}, {name}: {date} is outside the notice's reach (its year, or December of the year before)"
    )]
    OutOfReach {
        year: i32,
        name: String,
        date: NaiveDate,
    },
    #[error("year {year}, {name}: make-up working day {date} is not a Saturday or Sunday")]
    WorkdayNotOnWeekend {
        year: i32,
        name: String,
        date: NaiveDate,
    },
    #[error("{date} is listed twice (as {first} and as {second})")]
    Duplicate {
        date: NaiveDate,
        first: &'static str,
        second: &'static str,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    years: Vec<YearEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YearEntry {
    year: i32,
    title: String,
    document: Option<String>,
    date: toml::value::Datetime,
    #[serde(default)]
    sources: Vec<String>,
    #[serde(default)]
    amendments: Vec<AmendmentEntry>,
    #[serde(default)]
    holidays: Vec<HolidayEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AmendmentEntry {
    title: String,
    document: Option<String>,
    date: toml::value::Datetime,
    #[serde(default)]
    sources: Vec<String>,
    change: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HolidayEntry {
    name: String,
    name_en: String,
    from: toml::value::Datetime,
    to: toml::value::Datetime,
    #[serde(default)]
    workdays: Vec<toml::value::Datetime>,
    #[serde(default)]
    #[allow(dead_code)] // read by people, kept in the file
    note: Option<String>,
}

/// The calendar and its notices, as read from a data file.
#[derive(Debug, Clone)]
pub struct Parsed {
    pub calendar: Arc<Calendar>,
    pub notices: Vec<Notice>,
}

fn plain_date(
    value: &toml::value::Datetime,
    year: i32,
    what: &str,
) -> Result<NaiveDate, DataError> {
    let not_a_date = || DataError::NotADate {
        year,
        what: what.to_string(),
    };
    match (value.date, value.time, value.offset) {
        (Some(d), None, None) => {
            NaiveDate::from_ymd_opt(i32::from(d.year), u32::from(d.month), u32::from(d.day))
                .ok_or_else(not_a_date)
        }
        _ => Err(not_a_date()),
    }
}

/// True when `date` may belong to the notice for `year`: that year, or the
/// December before it (元旦 can start on 31 December).
fn within_reach(date: NaiveDate, year: i32) -> bool {
    date.year() == year || (date.year() == year - 1 && date.month() == 12)
}

/// Reads and checks a data file in the format of `data/cn-workdays.toml`.
pub fn parse(code: &str, name: Label, text: &str) -> Result<Parsed, DataError> {
    let file: File = toml::from_str(text).map_err(|e| DataError::Toml(e.to_string()))?;
    let (Some(first), Some(last)) = (file.years.first(), file.years.last()) else {
        return Err(DataError::Empty);
    };
    let years = Years::new(first.year, last.year).ok_or(DataError::YearOutOfRange {
        year: if Years::new(first.year, first.year).is_none() {
            first.year
        } else {
            last.year
        },
    })?;
    let mut dates: BTreeMap<NaiveDate, CalendarDate> = BTreeMap::new();
    let mut notices = Vec::with_capacity(file.years.len());
    let mut previous: Option<i32> = None;
    for entry in &file.years {
        let year = entry.year;
        if let Some(previous) = previous
            && year != previous + 1
        {
            return Err(DataError::NotContiguous { previous, year });
        }
        previous = Some(year);
        let expected = format!("国务院办公厅关于{year}年部分节假日安排的通知");
        if entry.title != expected {
            return Err(DataError::Title { year, expected });
        }
        let date = plain_date(&entry.date, year, "date")?;
        if date.year() != year - 1 {
            return Err(DataError::NoticeDate { year, date });
        }
        let mut amendments = Vec::with_capacity(entry.amendments.len());
        for a in &entry.amendments {
            if a.title.trim().is_empty() || a.change.trim().is_empty() {
                return Err(DataError::Amendment { year });
            }
            amendments.push(NoticeAmendment {
                title: a.title.clone(),
                document: a.document.clone(),
                date: plain_date(&a.date, year, "an amendment's date")?,
                sources: a.sources.clone(),
                change: a.change.clone(),
            });
        }
        for h in &entry.holidays {
            if h.name.trim().is_empty() || h.name_en.trim().is_empty() {
                return Err(DataError::Unnamed { year });
            }
            let label = Label::new(h.name.clone(), h.name_en.clone());
            let from = plain_date(&h.from, year, &format!("{}: from", h.name))?;
            let to = plain_date(&h.to, year, &format!("{}: to", h.name))?;
            if from > to || (to - from).num_days() >= MAX_HOLIDAY_DAYS {
                return Err(DataError::BadRange {
                    year,
                    name: h.name.clone(),
                    from,
                    to,
                });
            }
            let mut listed: Vec<(NaiveDate, DayKind)> = from
                .iter_days()
                .take_while(|d| *d <= to)
                .map(|d| (d, DayKind::Holiday))
                .collect();
            for w in &h.workdays {
                let d = plain_date(w, year, &format!("{}: a make-up working day", h.name))?;
                if !is_weekend(d) {
                    return Err(DataError::WorkdayNotOnWeekend {
                        year,
                        name: h.name.clone(),
                        date: d,
                    });
                }
                listed.push((d, DayKind::Workday));
            }
            for (d, kind) in listed {
                if !within_reach(d, year) {
                    return Err(DataError::OutOfReach {
                        year,
                        name: h.name.clone(),
                        date: d,
                    });
                }
                if let Some(existing) = dates.get(&d) {
                    return Err(DataError::Duplicate {
                        date: d,
                        first: existing.kind.as_str(),
                        second: kind.as_str(),
                    });
                }
                dates.insert(
                    d,
                    CalendarDate {
                        kind,
                        name: label.clone(),
                    },
                );
            }
        }
        notices.push(Notice {
            year,
            title: entry.title.clone(),
            document: entry.document.clone(),
            date,
            sources: entry.sources.clone(),
            amendments,
        });
    }
    // Every date lies within its notice's reach, and the years are
    // contiguous, so every date lies within the calendar's years unless the
    // first notice reaches into the December before it.
    let calendar = Calendar::new(code, name, Some(years), dates).map_err(|e| match e {
        super::CalendarError::DateOutsideYears(date) => DataError::OutOfReach {
            year: first.year,
            name: "-".into(),
            date,
        },
        super::CalendarError::DatesWithoutYears => DataError::Empty,
    })?;
    Ok(Parsed {
        calendar: Arc::new(calendar),
        notices,
    })
}

/// The built-in calendar's display name.
pub fn cn_workdays_name() -> Label {
    Label::new(
        "中国法定工作日（国务院办公厅节假日安排）",
        "China working days (State Council holiday arrangements)",
    )
}

fn cn_parsed() -> &'static Parsed {
    static PARSED: OnceLock<Parsed> = OnceLock::new();
    PARSED.get_or_init(|| {
        // The embedded file is checked by the unit test
        // `builtin_data_is_valid`, so this cannot fail in a tested build.
        #[allow(clippy::expect_used)]
        parse(CN_WORKDAYS, cn_workdays_name(), CN_WORKDAYS_TOML)
            .expect("data/cn-workdays.toml is checked by the test builtin_data_is_valid")
    })
}

/// The built-in calendar `cn-workdays`.
pub fn cn_workdays() -> &'static Arc<Calendar> {
    &cn_parsed().calendar
}

/// The notices `cn-workdays` is made of, oldest first.
pub fn cn_workdays_notices() -> &'static [Notice] {
    &cn_parsed().notices
}

/// Every built-in calendar's code.
pub const BUILTIN_CODES: [&str; 1] = [CN_WORKDAYS];

/// The built-in calendar with this code.
pub fn find(code: &str) -> Option<Arc<Calendar>> {
    (code == CN_WORKDAYS).then(|| Arc::clone(cn_workdays()))
}

/// True when `code` names a built-in calendar (user calendars cannot take it).
pub fn is_builtin(code: &str) -> bool {
    BUILTIN_CODES.contains(&code)
}
