//! Request and response bodies of calendars (issue 11) and of the cron
//! preview's calendar effect, with their OpenAPI schemas.

use chrono::{DateTime, NaiveDate, Utc};
use qiwu_domain::Lang;
use qiwu_domain::calendar::builtin::{self, Notice};
use qiwu_domain::calendar::{Calendar, DayKind};
use qiwu_domain::schedule::{CalendarEffect, DayEffect};
use qiwu_storage::{CalendarRecord, CalendarSummary};
use serde::Serialize;
use utoipa::ToSchema;

/// What a listed date is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DayKindDto {
    /// A day off, even on a weekday.
    Holiday,
    /// A working day, even on a weekend (a make-up working day, 调休上班).
    Workday,
}

impl From<DayKind> for DayKindDto {
    fn from(k: DayKind) -> Self {
        match k {
            DayKind::Holiday => DayKindDto::Holiday,
            DayKind::Workday => DayKindDto::Workday,
        }
    }
}

/// One listed date.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CalendarDateDto {
    /// `YYYY-MM-DD`.
    #[schema(value_type = String, format = Date)]
    pub date: NaiveDate,
    pub kind: DayKindDto,
    /// What the date is, such as 春节 (in the reader's language for the
    /// built-in calendar); may be empty.
    pub name: String,
}

impl CalendarDateDto {
    fn from_effect(e: &DayEffect, lang: Lang) -> CalendarDateDto {
        CalendarDateDto {
            date: e.date,
            kind: e.kind.into(),
            name: e.name.pick(lang).to_string(),
        }
    }
}

/// A later notice that changed a year's arrangement.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NoticeAmendmentDto {
    pub title: String,
    pub document: Option<String>,
    #[schema(value_type = String, format = Date)]
    pub date: NaiveDate,
    /// What it changed.
    pub change: String,
    pub sources: Vec<String>,
}

/// One year's notice of the General Office of the State Council that the
/// built-in calendar is made of.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NoticeDto {
    pub year: i32,
    /// Such as 国务院办公厅关于2026年部分节假日安排的通知.
    pub title: String,
    /// Its document number, when a reliable copy showed it.
    pub document: Option<String>,
    /// The date the notice bears.
    #[schema(value_type = String, format = Date)]
    pub date: NaiveDate,
    /// Where its text was read.
    pub sources: Vec<String>,
    pub amendments: Vec<NoticeAmendmentDto>,
}

impl From<&Notice> for NoticeDto {
    fn from(n: &Notice) -> Self {
        NoticeDto {
            year: n.year,
            title: n.title.clone(),
            document: n.document.clone(),
            date: n.date,
            sources: n.sources.clone(),
            amendments: n
                .amendments
                .iter()
                .map(|a| NoticeAmendmentDto {
                    title: a.title.clone(),
                    document: a.document.clone(),
                    date: a.date,
                    change: a.change.clone(),
                    sources: a.sources.clone(),
                })
                .collect(),
        }
    }
}

/// A calendar in a list, without its dates.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CalendarSummaryDto {
    /// Such as `cn-workdays` (built in) or a user calendar's code.
    pub code: String,
    /// The built-in calendar's name is in the reader's language.
    pub name: String,
    pub description: String,
    /// Built-in calendars are read-only.
    pub builtin: bool,
    /// The first and last year the calendar has data for (both null: none).
    pub first_year: Option<i32>,
    pub last_year: Option<i32>,
    pub date_count: u64,
    /// Null for a built-in calendar; send it back to `PUT`.
    pub version: Option<i64>,
    pub created_at: Option<DateTime<Utc>>,
    pub created_by: Option<String>,
    pub updated_at: Option<DateTime<Utc>>,
    pub updated_by: Option<String>,
}

/// A calendar with its dates.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CalendarDto {
    pub code: String,
    pub name: String,
    pub description: String,
    pub builtin: bool,
    pub first_year: Option<i32>,
    pub last_year: Option<i32>,
    pub date_count: u64,
    pub version: Option<i64>,
    pub created_at: Option<DateTime<Utc>>,
    pub created_by: Option<String>,
    pub updated_at: Option<DateTime<Utc>>,
    pub updated_by: Option<String>,
    /// Every listed date, by date.
    pub dates: Vec<CalendarDateDto>,
    /// The notices a built-in calendar is made of, oldest first (empty for
    /// a user calendar).
    pub notices: Vec<NoticeDto>,
}

/// The built-in calendar's description.
fn builtin_description(lang: Lang) -> String {
    lang.pick(
        "国务院办公厅每年发布的节假日安排：法定节假日放假，调休的周末上班。用 workdays 规则即“中国的工作日”。",
        "The holidays the General Office of the State Council publishes each year: statutory days off, and the weekends made working days. With the rule workdays it means China's working days.",
    )
    .to_string()
}

impl CalendarSummaryDto {
    pub fn builtin(cal: &Calendar, lang: Lang) -> CalendarSummaryDto {
        CalendarSummaryDto {
            code: cal.code().to_string(),
            name: cal.name().pick(lang).to_string(),
            description: builtin_description(lang),
            builtin: true,
            first_year: cal.years().map(|y| y.first()),
            last_year: cal.years().map(|y| y.last()),
            date_count: cal.len() as u64,
            version: None,
            created_at: None,
            created_by: None,
            updated_at: None,
            updated_by: None,
        }
    }

    pub fn user(s: CalendarSummary) -> CalendarSummaryDto {
        CalendarSummaryDto {
            code: s.code,
            name: s.name,
            description: s.description,
            builtin: false,
            first_year: s.first_year,
            last_year: s.last_year,
            date_count: s.date_count,
            version: Some(s.version),
            created_at: Some(s.created_at),
            created_by: Some(s.created_by),
            updated_at: Some(s.updated_at),
            updated_by: Some(s.updated_by),
        }
    }
}

impl CalendarDto {
    pub fn builtin(cal: &Calendar, lang: Lang) -> CalendarDto {
        let notices = if cal.code() == builtin::CN_WORKDAYS {
            builtin::cn_workdays_notices()
                .iter()
                .map(NoticeDto::from)
                .collect()
        } else {
            Vec::new()
        };
        CalendarDto {
            code: cal.code().to_string(),
            name: cal.name().pick(lang).to_string(),
            description: builtin_description(lang),
            builtin: true,
            first_year: cal.years().map(|y| y.first()),
            last_year: cal.years().map(|y| y.last()),
            date_count: cal.len() as u64,
            version: None,
            created_at: None,
            created_by: None,
            updated_at: None,
            updated_by: None,
            dates: cal
                .dates()
                .map(|(date, e)| CalendarDateDto {
                    date,
                    kind: e.kind.into(),
                    name: e.name.pick(lang).to_string(),
                })
                .collect(),
            notices,
        }
    }

    pub fn user(r: CalendarRecord) -> CalendarDto {
        CalendarDto {
            date_count: r.dates.len() as u64,
            dates: r
                .dates
                .into_iter()
                .map(|d| CalendarDateDto {
                    date: d.date,
                    kind: d.kind.into(),
                    name: d.name,
                })
                .collect(),
            code: r.code,
            name: r.name,
            description: r.description,
            builtin: false,
            first_year: r.first_year,
            last_year: r.last_year,
            version: Some(r.version),
            created_at: Some(r.created_at),
            created_by: Some(r.created_by),
            updated_at: Some(r.updated_at),
            updated_by: Some(r.updated_by),
            notices: Vec::new(),
        }
    }
}

/// A calendar code in a path or a body: 1–64 lower-case letters, digits,
/// `_` or `-`.
pub const CODE_PATTERN: &str = r"^[a-z0-9_-]{1,64}$";

/// One date of a calendar being written.
#[derive(Debug, ToSchema)]
#[schema(rename_all = "camelCase")]
#[allow(dead_code)] // documents the body; the handlers read it as JSON to name every bad field
pub struct CalendarDateWrite {
    /// `YYYY-MM-DD`, in 1970–2200; each date at most once, and inside
    /// `firstYear`–`lastYear` when those are given.
    #[schema(
        value_type = String,
        format = Date,
        pattern = r"^\s*(19[7-9][0-9]|2[01][0-9]{2}|2200)-[0-9]{2}-[0-9]{2}\s*$"
    )]
    pub date: String,
    pub kind: DayKindDto,
    /// What the date is, such as 春节; up to 64 characters, no control
    /// characters. Null: empty.
    #[schema(nullable, max_length = 64, pattern = r"^[^\x00-\x1F\x7F]*$")]
    pub name: Option<String>,
}

/// A new user calendar. Absent or null optional fields are empty.
#[derive(Debug, ToSchema)]
#[schema(rename_all = "camelCase")]
#[allow(dead_code)] // documents the body; the handlers read it as JSON to name every bad field
pub struct CalendarCreate {
    /// 1–64 lower-case letters, digits, `_` or `-` (surrounding blanks are
    /// trimmed), not a built-in calendar's code (`cn-workdays`).
    #[schema(pattern = r"^\s*[a-z0-9_-]{1,64}\s*$")]
    pub code: String,
    /// 1–64 characters, no control characters.
    #[schema(
        max_length = 64,
        pattern = r"^[^\x00-\x1F\x7F]*[^\s\x00-\x1F\x7F][^\x00-\x1F\x7F]*$"
    )]
    pub name: String,
    /// Up to 500 characters, no control characters (line breaks included).
    #[schema(nullable, max_length = 500, pattern = r"^[^\x00-\x1F\x7F]*$")]
    pub description: Option<String>,
    /// The first year the calendar has data for; give both years or
    /// neither. Without them, the years of the first and last date. Outside
    /// its years a calendar knows nothing and the plain week applies (a
    /// preview says so in `notice`).
    #[schema(nullable, minimum = 1970, maximum = 2200)]
    pub first_year: Option<i32>,
    /// The last year the calendar has data for, not before `firstYear`.
    #[schema(nullable, minimum = 1970, maximum = 2200)]
    pub last_year: Option<i32>,
    /// Up to 2 000 dates: the exceptions to the plain week (Monday–Friday
    /// working).
    #[schema(nullable, max_items = 2000)]
    pub dates: Option<Vec<CalendarDateWrite>>,
}

/// A user calendar replaced as a whole: every field of a creation but the
/// code (taken from the path), plus the `version` the edit is based on.
/// Absent or null optional fields become empty.
#[derive(Debug, ToSchema)]
#[schema(rename_all = "camelCase")]
#[allow(dead_code)] // documents the body; the handlers read it as JSON to name every bad field
pub struct CalendarUpdate {
    /// The `version` read before editing (409 when someone saved since).
    #[schema(minimum = 1, maximum = 9007199254740991_i64)]
    pub version: i64,
    /// 1–64 characters, no control characters.
    #[schema(
        max_length = 64,
        pattern = r"^[^\x00-\x1F\x7F]*[^\s\x00-\x1F\x7F][^\x00-\x1F\x7F]*$"
    )]
    pub name: String,
    /// Up to 500 characters, no control characters (line breaks included).
    #[schema(nullable, max_length = 500, pattern = r"^[^\x00-\x1F\x7F]*$")]
    pub description: Option<String>,
    /// As for a creation.
    #[schema(nullable, minimum = 1970, maximum = 2200)]
    pub first_year: Option<i32>,
    #[schema(nullable, minimum = 1970, maximum = 2200)]
    pub last_year: Option<i32>,
    /// Up to 2 000 dates.
    #[schema(nullable, max_items = 2000)]
    pub dates: Option<Vec<CalendarDateWrite>>,
}

/// What the calendar did in the previewed range, compared with the same
/// rule over the plain week (Monday–Friday working).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CalendarEffectDto {
    /// Dates the plain week would fire on and the calendar ruled out (a
    /// holiday on a weekday for `workdays` and `exclude`; a make-up working
    /// weekend for `holidays`).
    pub removed: Vec<CalendarDateDto>,
    /// Dates the calendar added to the plain week (a make-up working
    /// weekend for `workdays`; a holiday on a weekday for `holidays`).
    pub added: Vec<CalendarDateDto>,
    /// Years in the range the calendar has no data for (the plain week
    /// applies there).
    pub missing_years: Vec<i32>,
}

impl CalendarEffectDto {
    pub fn new(effect: &CalendarEffect, lang: Lang) -> CalendarEffectDto {
        CalendarEffectDto {
            removed: effect
                .removed
                .iter()
                .map(|e| CalendarDateDto::from_effect(e, lang))
                .collect(),
            added: effect
                .added
                .iter()
                .map(|e| CalendarDateDto::from_effect(e, lang))
                .collect(),
            missing_years: effect.missing_years.clone(),
        }
    }
}
