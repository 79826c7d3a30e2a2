//! Calendars (issue 11): which dates are days off and which are working
//! days, and the rules that let a calendar decide the days a job fires on.
//!
//! A calendar is a set of dates, each a `holiday` (a day off, even on a
//! weekday) or a `workday` (a working day, even on a weekend: China's
//! make-up working days, 调休上班), plus the range of years it has data for.
//! Outside that range it knows nothing, and every rule falls back to the
//! plain week (Monday–Friday working, Saturday and Sunday off); a schedule
//! reports that gap as a notice rather than guessing silently.
//!
//! The built-in calendar `cn-workdays` is read from `data/cn-workdays.toml`
//! (see [`builtin`]); user calendars are validated by [`user`] and stored by
//! the storage crate.

pub mod builtin;
pub mod user;

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound;

use chrono::{Datelike, NaiveDate, Weekday};

use crate::lang::Lang;

pub use builtin::{CN_WORKDAYS, Notice, NoticeAmendment};

/// Earliest and latest year a calendar may hold: wide enough for any real
/// schedule, narrow enough that iterating a calendar's days stays cheap.
pub const MIN_YEAR: i32 = 1970;
pub const MAX_YEAR: i32 = 2200;

/// What a listed date is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DayKind {
    /// A day off, even when it falls on a weekday.
    Holiday,
    /// A working day, even when it falls on a weekend (调休上班).
    Workday,
}

impl DayKind {
    pub const ALL: [DayKind; 2] = [DayKind::Holiday, DayKind::Workday];

    pub fn as_str(self) -> &'static str {
        match self {
            DayKind::Holiday => "holiday",
            DayKind::Workday => "workday",
        }
    }

    pub fn parse(s: &str) -> Option<DayKind> {
        DayKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The kind as a person reads it.
    pub fn label(self, lang: Lang) -> &'static str {
        match self {
            DayKind::Holiday => lang.pick("放假", "day off"),
            DayKind::Workday => lang.pick("上班", "working day"),
        }
    }
}

/// How a job's calendar decides its days; the cron still gives the times of
/// day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CalendarRule {
    /// Only on working days: Monday–Friday that are not holidays, plus the
    /// calendar's working days on weekends.
    Workdays,
    /// Only on days off: Saturdays and Sundays the calendar does not make
    /// working days, plus the calendar's holidays.
    Holidays,
    /// The cron's days, without the calendar's holidays.
    Exclude,
}

impl CalendarRule {
    pub const ALL: [CalendarRule; 3] = [
        CalendarRule::Workdays,
        CalendarRule::Holidays,
        CalendarRule::Exclude,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CalendarRule::Workdays => "workdays",
            CalendarRule::Holidays => "holidays",
            CalendarRule::Exclude => "exclude",
        }
    }

    pub fn parse(s: &str) -> Option<CalendarRule> {
        CalendarRule::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// True when the rule, not the cron, decides the weekdays: the cron's
    /// day-of-week field must then allow every day (see `job.rs`).
    pub fn decides_weekdays(self) -> bool {
        matches!(self, CalendarRule::Workdays | CalendarRule::Holidays)
    }

    /// Whether the rule lets a job fire on `date` by the plain week alone,
    /// as with a calendar that lists nothing (the fallback outside a
    /// calendar's years, and the baseline a calendar's effect is measured
    /// against).
    pub fn allows_plain(self, date: NaiveDate) -> bool {
        match self {
            CalendarRule::Workdays => !is_weekend(date),
            CalendarRule::Holidays => is_weekend(date),
            CalendarRule::Exclude => true,
        }
    }
}

impl fmt::Display for CalendarRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Saturday or Sunday.
pub fn is_weekend(date: NaiveDate) -> bool {
    matches!(date.weekday(), Weekday::Sat | Weekday::Sun)
}

/// A text in both languages (a user calendar gives one text for both).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Label {
    pub zh: String,
    pub en: String,
}

impl Label {
    pub fn new(zh: impl Into<String>, en: impl Into<String>) -> Label {
        Label {
            zh: zh.into(),
            en: en.into(),
        }
    }

    /// The same text in both languages.
    pub fn same(text: impl Into<String>) -> Label {
        let text = text.into();
        Label {
            zh: text.clone(),
            en: text,
        }
    }

    pub fn pick(&self, lang: Lang) -> &str {
        lang.pick(&self.zh, &self.en)
    }

    pub fn is_empty(&self) -> bool {
        self.zh.is_empty() && self.en.is_empty()
    }
}

/// One listed date.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalendarDate {
    pub kind: DayKind,
    /// What the date is, such as 春节; may be empty.
    pub name: Label,
}

/// The years a calendar has data for, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Years {
    first: i32,
    last: i32,
}

impl Years {
    /// `None` when `first > last` or either lies outside
    /// [`MIN_YEAR`]–[`MAX_YEAR`].
    pub fn new(first: i32, last: i32) -> Option<Years> {
        (MIN_YEAR <= first && first <= last && last <= MAX_YEAR).then_some(Years { first, last })
    }

    pub fn first(self) -> i32 {
        self.first
    }

    pub fn last(self) -> i32 {
        self.last
    }

    pub fn contains(self, year: i32) -> bool {
        (self.first..=self.last).contains(&year)
    }
}

/// Why a calendar cannot be built from the given parts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CalendarError {
    #[error("date {0} lies outside the calendar's years")]
    DateOutsideYears(NaiveDate),
    #[error("a calendar without years cannot list dates")]
    DatesWithoutYears,
}

/// A calendar: listed dates and the years it has data for.
///
/// Invariant: every listed date lies within its years, so a year without
/// data has no listed date and every rule treats it as the plain week.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calendar {
    code: String,
    name: Label,
    years: Option<Years>,
    dates: BTreeMap<NaiveDate, CalendarDate>,
}

impl Calendar {
    pub fn new(
        code: impl Into<String>,
        name: Label,
        years: Option<Years>,
        dates: BTreeMap<NaiveDate, CalendarDate>,
    ) -> Result<Calendar, CalendarError> {
        match years {
            None if !dates.is_empty() => return Err(CalendarError::DatesWithoutYears),
            None => {}
            Some(years) => {
                if let Some(date) = dates.keys().find(|d| !years.contains(d.year())) {
                    return Err(CalendarError::DateOutsideYears(*date));
                }
            }
        }
        Ok(Calendar {
            code: code.into(),
            name,
            years,
            dates,
        })
    }

    pub fn code(&self) -> &str {
        &self.code
    }

    pub fn name(&self) -> &Label {
        &self.name
    }

    /// The years the calendar has data for; `None` for a calendar that has
    /// data for no year at all.
    pub fn years(&self) -> Option<Years> {
        self.years
    }

    /// True when the calendar has data for `year`.
    pub fn covers(&self, year: i32) -> bool {
        self.years.is_some_and(|y| y.contains(year))
    }

    /// The listed entry for `date`, if any.
    pub fn date(&self, date: NaiveDate) -> Option<&CalendarDate> {
        self.dates.get(&date)
    }

    /// Every listed date, in order.
    pub fn dates(&self) -> impl Iterator<Item = (NaiveDate, &CalendarDate)> + '_ {
        self.dates.iter().map(|(d, e)| (*d, e))
    }

    /// The listed dates from `from` to `to`, both included, in order.
    pub fn dates_between(
        &self,
        from: NaiveDate,
        to: NaiveDate,
    ) -> impl Iterator<Item = (NaiveDate, &CalendarDate)> + '_ {
        let range = if from <= to {
            (Bound::Included(from), Bound::Included(to))
        } else {
            // An empty range; BTreeMap::range panics on a reversed one.
            (Bound::Included(from), Bound::Excluded(from))
        };
        self.dates.range(range).map(|(d, e)| (*d, e))
    }

    /// How many dates are listed.
    pub fn len(&self) -> usize {
        self.dates.len()
    }

    pub fn is_empty(&self) -> bool {
        self.dates.is_empty()
    }

    /// True when `date` is a working day: a listed working day, or a
    /// Monday–Friday that is not a listed holiday.
    pub fn is_working_day(&self, date: NaiveDate) -> bool {
        match self.dates.get(&date).map(|e| e.kind) {
            Some(DayKind::Workday) => true,
            Some(DayKind::Holiday) => false,
            None => !is_weekend(date),
        }
    }

    /// Whether `rule` lets a job fire on `date` (the date in the job's zone).
    pub fn allows(&self, rule: CalendarRule, date: NaiveDate) -> bool {
        match rule {
            CalendarRule::Workdays => self.is_working_day(date),
            CalendarRule::Holidays => !self.is_working_day(date),
            CalendarRule::Exclude => {
                self.dates.get(&date).map(|e| e.kind) != Some(DayKind::Holiday)
            }
        }
    }
}

#[cfg(test)]
mod tests;
