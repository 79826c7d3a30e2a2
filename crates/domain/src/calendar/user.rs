//! User calendars: validation of the JSON a client sends, every error naming
//! its field (`dates[3].kind`) in Chinese and English.
//!
//! A user calendar is `{code, name, description?, firstYear?, lastYear?,
//! dates: [{date, kind, name?}]}`. Without `firstYear`/`lastYear` its years
//! are those of its first and last date; with them, every date must lie
//! inside. A calendar with no dates and no years has data for no year.

use std::collections::BTreeMap;

use chrono::{Datelike, NaiveDate};
use serde_json::{Map, Value};

use super::{
    Calendar, CalendarDate, CalendarError, DayKind, Label, MAX_YEAR, MIN_YEAR, Years, builtin,
};
use crate::lang::Lang;

pub const MAX_CODE_CHARS: usize = 64;
pub const MAX_NAME_CHARS: usize = 64;
pub const MAX_DESCRIPTION_CHARS: usize = 500;
pub const MAX_DATE_NAME_CHARS: usize = 64;
/// Most dates one calendar lists: a calendar lists the exceptions to the
/// plain week, and 2 000 is decades of them (and a body that fits the
/// API's 256 KiB limit).
pub const MAX_DATES: usize = 2_000;

/// Fields of a new calendar; an update sends the same without `code` but
/// with `version`.
pub const FIELDS: [&str; 6] = [
    "code",
    "name",
    "description",
    "firstYear",
    "lastYear",
    "dates",
];

/// Fields a client may echo back from a read; they are ignored.
pub const READ_ONLY_FIELDS: [&str; 9] = [
    "version",
    "builtin",
    "createdAt",
    "createdBy",
    "updatedAt",
    "updatedBy",
    "dateCount",
    "notices",
    "nameEn",
];

/// A user calendar that passed every rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserCalendarSpec {
    pub code: String,
    pub name: String,
    pub description: String,
    pub years: Option<Years>,
    pub dates: BTreeMap<NaiveDate, CalendarDate>,
}

impl UserCalendarSpec {
    /// The calendar a schedule uses.
    pub fn to_calendar(&self) -> Calendar {
        // The spec's years cover its dates (checked by `validate`), so
        // `Calendar::new` cannot refuse them; an empty calendar is the
        // fallback that keeps this total.
        Calendar::new(
            self.code.clone(),
            Label::same(self.name.clone()),
            self.years,
            self.dates.clone(),
        )
        .unwrap_or_else(|_: CalendarError| Calendar {
            code: self.code.clone(),
            name: Label::same(self.name.clone()),
            years: None,
            dates: BTreeMap::new(),
        })
    }
}

/// What is wrong with one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CalendarProblem {
    Required,
    UnknownField,
    WrongType(&'static str),
    Blank,
    TooLong {
        max: usize,
        chars: usize,
    },
    /// A control character (U+0000–U+001F, U+007F): it breaks lists,
    /// exports and logs, and PostgreSQL refuses U+0000.
    ControlCharacter,
    BadCode,
    BuiltinCode(String),
    NotADate(String),
    UnknownKind(String),
    DuplicateDate(NaiveDate),
    YearOutOfRange,
    /// Only one of `firstYear` and `lastYear` was given.
    YearsHalf,
    YearsReversed,
    DateOutsideYears {
        date: NaiveDate,
        first: i32,
        last: i32,
    },
    TooManyDates {
        max: usize,
        count: usize,
    },
}

/// One invalid field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalendarFieldError {
    pub field: String,
    pub problem: CalendarProblem,
}

impl CalendarFieldError {
    fn new(field: impl Into<String>, problem: CalendarProblem) -> CalendarFieldError {
        CalendarFieldError {
            field: field.into(),
            problem,
        }
    }

    pub fn message(&self, lang: Lang) -> String {
        use CalendarProblem as P;
        match (&self.problem, lang) {
            (P::Required, Lang::Zh) => "必填".into(),
            (P::Required, Lang::En) => "This field is required".into(),
            (P::UnknownField, Lang::Zh) => format!("不认识的字段 {}", self.field),
            (P::UnknownField, Lang::En) => format!("Unknown field {}", self.field),
            (P::WrongType(t), Lang::Zh) => format!("类型应为 {}", type_zh(t)),
            (P::WrongType(t), Lang::En) => format!("Must be {t}"),
            (P::Blank, Lang::Zh) => "不能为空".into(),
            (P::Blank, Lang::En) => "Must not be blank".into(),
            (P::TooLong { max, chars }, Lang::Zh) => format!("最多 {max} 个字，现在是 {chars} 个"),
            (P::TooLong { max, chars }, Lang::En) => {
                format!("At most {max} characters, got {chars}")
            }
            (P::ControlCharacter, Lang::Zh) => {
                "不能包含控制字符（换行、制表符等 U+0000–U+001F、U+007F）".into()
            }
            (P::ControlCharacter, Lang::En) => {
                "Must not contain control characters (line breaks, tabs and the rest of U+0000–U+001F, U+007F)".into()
            }
            (P::BadCode, Lang::Zh) => "日历编码为 1–64 个小写字母、数字、_ 或 -".into(),
            (P::BadCode, Lang::En) => {
                "A calendar code is 1–64 lower-case letters, digits, _ or -".into()
            }
            (P::BuiltinCode(code), Lang::Zh) => format!("{code} 是内置日历的编码，请换一个"),
            (P::BuiltinCode(code), Lang::En) => {
                format!("{code} is the code of a built-in calendar: choose another")
            }
            (P::NotADate(text), Lang::Zh) => {
                format!("“{text}”不是日期：请写成 YYYY-MM-DD，比如 2026-02-14")
            }
            (P::NotADate(text), Lang::En) => {
                format!("`{text}` is not a date: write YYYY-MM-DD, such as 2026-02-14")
            }
            (P::UnknownKind(kind), Lang::Zh) => {
                format!("类型 {kind} 不存在：只能是 holiday（放假）或 workday（上班）")
            }
            (P::UnknownKind(kind), Lang::En) => {
                format!("Kind {kind} does not exist: use holiday or workday")
            }
            (P::DuplicateDate(d), Lang::Zh) => format!("日期 {d} 重复出现：每个日期只能有一种类型"),
            (P::DuplicateDate(d), Lang::En) => {
                format!("Date {d} is listed twice: a date has one kind only")
            }
            (P::YearOutOfRange, Lang::Zh) => format!("年份的取值范围是 {MIN_YEAR}–{MAX_YEAR}"),
            (P::YearOutOfRange, Lang::En) => {
                format!("A year must be between {MIN_YEAR} and {MAX_YEAR}")
            }
            (P::YearsHalf, Lang::Zh) => {
                "firstYear 和 lastYear 要么都填，要么都不填（不填时按日期推算）".into()
            }
            (P::YearsHalf, Lang::En) => {
                "Give both firstYear and lastYear, or neither (then the dates decide)".into()
            }
            (P::YearsReversed, Lang::Zh) => "lastYear 不能早于 firstYear".into(),
            (P::YearsReversed, Lang::En) => "lastYear cannot be before firstYear".into(),
            (P::DateOutsideYears { date, first, last }, Lang::Zh) => {
                format!("日期 {date} 不在日历的年份 {first}–{last} 之内")
            }
            (P::DateOutsideYears { date, first, last }, Lang::En) => {
                format!("Date {date} lies outside the calendar's years {first}–{last}")
            }
            (P::TooManyDates { max, count }, Lang::Zh) => {
                format!("最多 {max} 个日期，现在是 {count} 个")
            }
            (P::TooManyDates { max, count }, Lang::En) => {
                format!("At most {max} dates, got {count}")
            }
        }
    }
}

fn type_zh(t: &str) -> &'static str {
    match t {
        "a string" => "字符串",
        "an integer" => "整数",
        "an array" => "数组",
        "an object" => "对象",
        "an integer or null" => "整数或 null",
        _ => "其他类型",
    }
}

/// True for 1–64 lower-case letters, digits, `_` or `-`.
pub fn valid_code(code: &str) -> bool {
    (1..=MAX_CODE_CHARS).contains(&code.len())
        && code
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// Checks a whole user calendar. `code` is the calendar's code when it comes
/// from the path (an update, where the body has no `code`); `None` reads it
/// from the body (a creation).
pub fn validate(
    input: &Map<String, Value>,
    code: Option<&str>,
) -> Result<UserCalendarSpec, Vec<CalendarFieldError>> {
    let mut errors = Vec::new();
    for key in input.keys() {
        let writable = FIELDS.contains(&key.as_str()) && !(code.is_some() && key == "code");
        if !writable && !READ_ONLY_FIELDS.contains(&key.as_str()) {
            errors.push(CalendarFieldError::new(key, CalendarProblem::UnknownField));
        }
    }
    let code = match code {
        Some(c) => Some(c.to_string()),
        None => match input.get("code") {
            None | Some(Value::Null) => {
                errors.push(CalendarFieldError::new("code", CalendarProblem::Required));
                None
            }
            Some(Value::String(s)) => {
                let s = s.trim();
                if !valid_code(s) {
                    errors.push(CalendarFieldError::new("code", CalendarProblem::BadCode));
                    None
                } else if builtin::is_builtin(s) {
                    errors.push(CalendarFieldError::new(
                        "code",
                        CalendarProblem::BuiltinCode(s.to_string()),
                    ));
                    None
                } else {
                    Some(s.to_string())
                }
            }
            Some(_) => {
                errors.push(CalendarFieldError::new(
                    "code",
                    CalendarProblem::WrongType("a string"),
                ));
                None
            }
        },
    };
    let name = text(input, "name", MAX_NAME_CHARS, true, &mut errors);
    let description = text(
        input,
        "description",
        MAX_DESCRIPTION_CHARS,
        false,
        &mut errors,
    );
    let first = year(input, "firstYear", &mut errors);
    let last = year(input, "lastYear", &mut errors);
    let explicit_years = match (first, last) {
        (Some(None), Some(None)) => Some(None),
        (Some(Some(_)), Some(None)) => {
            errors.push(CalendarFieldError::new(
                "lastYear",
                CalendarProblem::YearsHalf,
            ));
            None
        }
        (Some(None), Some(Some(_))) => {
            errors.push(CalendarFieldError::new(
                "firstYear",
                CalendarProblem::YearsHalf,
            ));
            None
        }
        (Some(Some(f)), Some(Some(l))) => match Years::new(f, l) {
            Some(y) => Some(Some(y)),
            None => {
                errors.push(CalendarFieldError::new(
                    "lastYear",
                    CalendarProblem::YearsReversed,
                ));
                None
            }
        },
        _ => None,
    };
    let dates = dates(input, &mut errors);

    let years = match (&dates, explicit_years) {
        (Some(dates), Some(Some(years))) => {
            for (i, date) in dates.iter().enumerate() {
                if !years.contains(date.0.year()) {
                    errors.push(CalendarFieldError::new(
                        format!("dates[{i}].date"),
                        CalendarProblem::DateOutsideYears {
                            date: date.0,
                            first: years.first(),
                            last: years.last(),
                        },
                    ));
                }
            }
            Some(Some(years))
        }
        (Some(dates), Some(None)) => {
            let first = dates.iter().map(|d| d.0.year()).min();
            let last = dates.iter().map(|d| d.0.year()).max();
            match (first, last) {
                (Some(f), Some(l)) => match Years::new(f, l) {
                    Some(y) => Some(Some(y)),
                    None => {
                        // Dates are parsed within MIN_YEAR–MAX_YEAR, so this
                        // only guards the invariant.
                        errors.push(CalendarFieldError::new(
                            "dates",
                            CalendarProblem::YearOutOfRange,
                        ));
                        None
                    }
                },
                _ => Some(None),
            }
        }
        _ => None,
    };

    match (code, name, description, years, dates) {
        (Some(code), Some(name), Some(description), Some(years), Some(dates))
            if errors.is_empty() =>
        {
            Ok(UserCalendarSpec {
                code,
                name,
                description,
                years,
                dates: dates.into_iter().collect(),
            })
        }
        _ => Err(errors),
    }
}

fn text(
    input: &Map<String, Value>,
    field: &str,
    max: usize,
    required: bool,
    errors: &mut Vec<CalendarFieldError>,
) -> Option<String> {
    text_at(input, field, field, max, required, errors)
}

/// Reads `key` of `input`, naming errors `field`.
fn text_at(
    input: &Map<String, Value>,
    key: &str,
    field: &str,
    max: usize,
    required: bool,
    errors: &mut Vec<CalendarFieldError>,
) -> Option<String> {
    match input.get(key) {
        None | Some(Value::Null) if required => {
            errors.push(CalendarFieldError::new(field, CalendarProblem::Required));
            None
        }
        None | Some(Value::Null) => Some(String::new()),
        Some(Value::String(s)) if crate::job::has_control(s) => {
            errors.push(CalendarFieldError::new(
                field,
                CalendarProblem::ControlCharacter,
            ));
            None
        }
        Some(Value::String(raw)) => {
            let s = raw.trim();
            // The limit is on the text as sent, as the document states it;
            // the stored text is then trimmed.
            let chars = raw.chars().count();
            if required && s.is_empty() {
                errors.push(CalendarFieldError::new(field, CalendarProblem::Blank));
                None
            } else if chars > max {
                errors.push(CalendarFieldError::new(
                    field,
                    CalendarProblem::TooLong { max, chars },
                ));
                None
            } else {
                Some(s.to_string())
            }
        }
        Some(_) => {
            errors.push(CalendarFieldError::new(
                field,
                CalendarProblem::WrongType("a string"),
            ));
            None
        }
    }
}

/// `Some(None)` for absent or null, `Some(Some(y))` for a valid year.
fn year(
    input: &Map<String, Value>,
    field: &str,
    errors: &mut Vec<CalendarFieldError>,
) -> Option<Option<i32>> {
    match input.get(field) {
        None | Some(Value::Null) => Some(None),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(y) if (i64::from(MIN_YEAR)..=i64::from(MAX_YEAR)).contains(&y) => {
                Some(Some(y as i32))
            }
            _ if n.as_f64().is_some_and(|f| f.fract() == 0.0) => {
                errors.push(CalendarFieldError::new(
                    field,
                    CalendarProblem::YearOutOfRange,
                ));
                None
            }
            _ => {
                errors.push(CalendarFieldError::new(
                    field,
                    CalendarProblem::WrongType("an integer or null"),
                ));
                None
            }
        },
        Some(_) => {
            errors.push(CalendarFieldError::new(
                field,
                CalendarProblem::WrongType("an integer or null"),
            ));
            None
        }
    }
}

/// The listed dates in the order given; `None` when any is invalid.
fn dates(
    input: &Map<String, Value>,
    errors: &mut Vec<CalendarFieldError>,
) -> Option<Vec<(NaiveDate, CalendarDate)>> {
    let items = match input.get("dates") {
        None | Some(Value::Null) => return Some(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => {
            errors.push(CalendarFieldError::new(
                "dates",
                CalendarProblem::WrongType("an array"),
            ));
            return None;
        }
    };
    if items.len() > MAX_DATES {
        errors.push(CalendarFieldError::new(
            "dates",
            CalendarProblem::TooManyDates {
                max: MAX_DATES,
                count: items.len(),
            },
        ));
        return None;
    }
    let before = errors.len();
    let mut out = Vec::with_capacity(items.len());
    let mut seen: BTreeMap<NaiveDate, usize> = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        let Value::Object(item) = item else {
            errors.push(CalendarFieldError::new(
                format!("dates[{i}]"),
                CalendarProblem::WrongType("an object"),
            ));
            continue;
        };
        for key in item.keys() {
            if !["date", "kind", "name"].contains(&key.as_str()) {
                errors.push(CalendarFieldError::new(
                    format!("dates[{i}].{key}"),
                    CalendarProblem::UnknownField,
                ));
            }
        }
        let date = match item.get("date") {
            None | Some(Value::Null) => {
                errors.push(CalendarFieldError::new(
                    format!("dates[{i}].date"),
                    CalendarProblem::Required,
                ));
                None
            }
            Some(Value::String(s)) => match parse_date(s.trim()) {
                Some(d) => Some(d),
                None => {
                    errors.push(CalendarFieldError::new(
                        format!("dates[{i}].date"),
                        CalendarProblem::NotADate(s.clone()),
                    ));
                    None
                }
            },
            Some(_) => {
                errors.push(CalendarFieldError::new(
                    format!("dates[{i}].date"),
                    CalendarProblem::WrongType("a string"),
                ));
                None
            }
        };
        let kind = match item.get("kind") {
            None | Some(Value::Null) => {
                errors.push(CalendarFieldError::new(
                    format!("dates[{i}].kind"),
                    CalendarProblem::Required,
                ));
                None
            }
            Some(Value::String(s)) => match DayKind::parse(s.trim()) {
                Some(k) => Some(k),
                None => {
                    errors.push(CalendarFieldError::new(
                        format!("dates[{i}].kind"),
                        CalendarProblem::UnknownKind(s.clone()),
                    ));
                    None
                }
            },
            Some(_) => {
                errors.push(CalendarFieldError::new(
                    format!("dates[{i}].kind"),
                    CalendarProblem::WrongType("a string"),
                ));
                None
            }
        };
        let name = text_at(
            item,
            "name",
            &format!("dates[{i}].name"),
            MAX_DATE_NAME_CHARS,
            false,
            errors,
        );
        if let Some(d) = date
            && seen.insert(d, i).is_some()
        {
            errors.push(CalendarFieldError::new(
                format!("dates[{i}].date"),
                CalendarProblem::DuplicateDate(d),
            ));
            continue;
        }
        if let (Some(date), Some(kind), Some(name)) = (date, kind, name) {
            out.push((
                date,
                CalendarDate {
                    kind,
                    name: Label::same(name),
                },
            ));
        }
    }
    (errors.len() == before).then_some(out)
}

/// A `YYYY-MM-DD` date within [`MIN_YEAR`]–[`MAX_YEAR`].
pub fn parse_date(s: &str) -> Option<NaiveDate> {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let d = NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()?;
    (MIN_YEAR..=MAX_YEAR).contains(&d.year()).then_some(d)
}
