//! The cron dialect of SPEC §4: parsing, validation and fire times.
//!
//! Our own strict parser decides what is valid; `croner` does the calendar and
//! DST arithmetic on expressions that have already passed it. A `CronExpr` is
//! valid forever once built, so callers never re-check it.

mod describe;

use std::fmt;

use chrono::{DateTime, Datelike, NaiveDate, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::{Cron, JobType};

use crate::lang::Lang;

/// One of the six fields of an expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldKind {
    Second,
    Minute,
    Hour,
    DayOfMonth,
    Month,
    DayOfWeek,
}

impl FieldKind {
    const ALL: [FieldKind; 6] = [
        FieldKind::Second,
        FieldKind::Minute,
        FieldKind::Hour,
        FieldKind::DayOfMonth,
        FieldKind::Month,
        FieldKind::DayOfWeek,
    ];

    /// The inclusive range of values the field accepts.
    pub fn bounds(self) -> (u8, u8) {
        match self {
            FieldKind::Second | FieldKind::Minute => (0, 59),
            FieldKind::Hour => (0, 23),
            FieldKind::DayOfMonth => (1, 31),
            FieldKind::Month => (1, 12),
            FieldKind::DayOfWeek => (0, 6),
        }
    }

    /// The field's name as a person reads it.
    pub fn label(self, lang: Lang) -> &'static str {
        match self {
            FieldKind::Second => lang.pick("秒", "second"),
            FieldKind::Minute => lang.pick("分钟", "minute"),
            FieldKind::Hour => lang.pick("小时", "hour"),
            FieldKind::DayOfMonth => lang.pick("日", "day-of-month"),
            FieldKind::Month => lang.pick("月", "month"),
            FieldKind::DayOfWeek => lang.pick("星期", "day-of-week"),
        }
    }
}

/// What is wrong inside one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldProblem {
    /// `?`, which Quartz uses where we want `*`.
    QuestionMark,
    /// `L`, `W` or `#`.
    Special(char),
    /// A name such as `MON` or `JAN`.
    Name(String),
    /// Any other character outside digits and `* , - /`.
    BadChar(char),
    /// An empty item, as in `1,,2` or a trailing comma.
    EmptyItem,
    /// A number outside the field's range.
    OutOfRange { value: u32 },
    /// Day of week 7, which some crons read as Sunday.
    DayOfWeekSeven,
    /// `/0`.
    StepZero,
    /// `a-b` with `a > b`.
    ReversedRange { start: u32, end: u32 },
    /// Something that is not a value, range or step.
    Malformed(String),
}

/// Why an expression is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    #[error("empty cron expression")]
    Empty,
    #[error("macros such as @daily are not supported")]
    Macro(String),
    #[error("wrong number of fields: {0}")]
    FieldCount(usize),
    #[error("problem in field {kind:?} (`{text}`): {problem:?}")]
    Field {
        kind: FieldKind,
        text: String,
        problem: FieldProblem,
    },
    #[error("the expression can never fire")]
    NeverFires,
}

impl CronError {
    /// A message a person understands: which field, and what is wrong.
    pub fn message(&self, lang: Lang) -> String {
        match self {
            CronError::Empty => lang
                .pick("Cron 表达式不能为空", "The cron expression is empty")
                .to_string(),
            CronError::Macro(m) => match lang {
                Lang::Zh => format!("不支持 {m} 这样的宏：请写成 5 段或 6 段的表达式"),
                Lang::En => {
                    format!("Macros such as {m} are not supported: write 5 or 6 fields")
                }
            },
            CronError::FieldCount(7) => lang
                .pick(
                    "不支持第 7 段（年）：请去掉年份，只写 5 段或 6 段",
                    "A 7th (year) field is not supported: write 5 or 6 fields",
                )
                .to_string(),
            CronError::FieldCount(n) => match lang {
                Lang::Zh => format!("需要 5 段或 6 段，用空格分隔，现在是 {n} 段"),
                Lang::En => format!("Expected 5 or 6 fields separated by spaces, got {n}"),
            },
            CronError::Field {
                kind,
                text,
                problem,
            } => {
                let field = kind.label(lang);
                let (lo, hi) = kind.bounds();
                let what = match (problem, lang) {
                    (FieldProblem::QuestionMark, Lang::Zh) => "不支持 ?，请改用 *".to_string(),
                    (FieldProblem::QuestionMark, Lang::En) => {
                        "`?` is not supported: use `*` instead".to_string()
                    }
                    (FieldProblem::Special(c), Lang::Zh) => format!("不支持 {c}"),
                    (FieldProblem::Special(c), Lang::En) => format!("`{c}` is not supported"),
                    (FieldProblem::Name(n), Lang::Zh) => {
                        format!("不支持 {n} 这样的英文缩写，请用数字")
                    }
                    (FieldProblem::Name(n), Lang::En) => {
                        format!("names such as `{n}` are not supported: use numbers")
                    }
                    (FieldProblem::BadChar(c), Lang::Zh) => {
                        format!("含有不允许的字符 {c}：只能用数字和 * , - /")
                    }
                    (FieldProblem::BadChar(c), Lang::En) => {
                        format!("`{c}` is not allowed: only digits and * , - /")
                    }
                    (FieldProblem::EmptyItem, Lang::Zh) => "有空的列表项".to_string(),
                    (FieldProblem::EmptyItem, Lang::En) => "has an empty list item".to_string(),
                    (FieldProblem::OutOfRange { value }, Lang::Zh) => {
                        format!("{value} 超出范围 {lo}–{hi}")
                    }
                    (FieldProblem::OutOfRange { value }, Lang::En) => {
                        format!("{value} is out of range {lo}–{hi}")
                    }
                    (FieldProblem::DayOfWeekSeven, Lang::Zh) => {
                        "星期用 0–6 表示（0 是周日），不支持 7".to_string()
                    }
                    (FieldProblem::DayOfWeekSeven, Lang::En) => {
                        "7 is not allowed: days of week are 0–6, 0 is Sunday".to_string()
                    }
                    (FieldProblem::StepZero, Lang::Zh) => "步长不能为 0".to_string(),
                    (FieldProblem::StepZero, Lang::En) => "the step cannot be 0".to_string(),
                    (FieldProblem::ReversedRange { start, end }, Lang::Zh) => {
                        format!("范围 {start}-{end} 的起点大于终点")
                    }
                    (FieldProblem::ReversedRange { start, end }, Lang::En) => {
                        format!("range {start}-{end} starts after it ends")
                    }
                    (FieldProblem::Malformed(t), Lang::Zh) => format!("无法识别 {t}"),
                    (FieldProblem::Malformed(t), Lang::En) => format!("cannot read `{t}`"),
                };
                match lang {
                    Lang::Zh => format!("第 {} 段（{field}）“{text}”：{what}", position(*kind)),
                    Lang::En => format!("Field {} ({field}) `{text}`: {what}", position(*kind)),
                }
            }
            CronError::NeverFires => lang
                .pick(
                    "这个表达式永远不会触发（比如 2 月 30 日）",
                    "This expression can never fire (for example 30 February)",
                )
                .to_string(),
        }
    }
}

/// The 1-based position of a field in a 6-field expression.
fn position(kind: FieldKind) -> usize {
    FieldKind::ALL.iter().position(|k| *k == kind).unwrap_or(0) + 1
}

/// One comma-separated item of a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Item {
    /// `*`.
    Any,
    /// `5`.
    Value(u8),
    /// `1-5`.
    Range(u8, u8),
    /// `*/15`, `10-50/5` or `10/5` (the last read as `10-max/5`).
    Step {
        start: u8,
        end: u8,
        step: u8,
        from_star: bool,
    },
}

/// One parsed field: its items and the set of values they match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Field {
    pub(crate) kind: FieldKind,
    pub(crate) items: Vec<Item>,
    /// Bit `v` is set when value `v` matches.
    pub(crate) bits: u64,
}

impl Field {
    /// True when the field starts with `*` (Vixie's test for "unrestricted").
    pub(crate) fn starts_with_star(&self) -> bool {
        matches!(
            self.items.first(),
            Some(
                Item::Any
                    | Item::Step {
                        from_star: true,
                        ..
                    }
            )
        )
    }

    /// True for a plain `*`.
    pub(crate) fn is_any(&self) -> bool {
        self.items == [Item::Any]
    }

    /// The value when the field is exactly one number.
    pub(crate) fn single(&self) -> Option<u8> {
        match self.items.as_slice() {
            [Item::Value(v)] => Some(*v),
            _ => None,
        }
    }

    pub(crate) fn matches(&self, v: u32) -> bool {
        v < 64 && self.bits & (1u64 << v) != 0
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = u8> + '_ {
        (0u8..64).filter(|v| self.bits & (1u64 << v) != 0)
    }

    /// The field written back in the dialect, with `a/n` spelled `a-max/n`.
    fn canonical(&self) -> String {
        let (_, hi) = self.kind.bounds();
        self.items
            .iter()
            .map(|item| match *item {
                Item::Any => "*".to_string(),
                Item::Value(v) => v.to_string(),
                Item::Range(a, b) => format!("{a}-{b}"),
                Item::Step {
                    step,
                    from_star: true,
                    ..
                } => format!("*/{step}"),
                Item::Step {
                    start, end, step, ..
                } => {
                    let end = if end == 0 { hi } else { end };
                    format!("{start}-{end}/{step}")
                }
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// A valid expression of our dialect, ready to compute fire times.
#[derive(Clone)]
pub struct CronExpr {
    source: String,
    /// True when the expression was written with 5 fields (seconds = 0).
    five_fields: bool,
    fields: [Field; 6],
    cron: Cron,
}

impl fmt::Debug for CronExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CronExpr").field(&self.source).finish()
    }
}

impl PartialEq for CronExpr {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl fmt::Display for CronExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl CronExpr {
    /// Parses and validates an expression; the result is valid forever.
    pub fn parse(input: &str) -> Result<CronExpr, CronError> {
        let trimmed = input.trim();
        if trimmed.is_empty() {
            return Err(CronError::Empty);
        }
        if let Some(first) = trimmed.split_whitespace().next()
            && first.starts_with('@')
        {
            return Err(CronError::Macro(first.to_string()));
        }
        let texts: Vec<&str> = trimmed.split_whitespace().collect();
        let (five_fields, texts): (bool, Vec<&str>) = match texts.len() {
            5 => (true, std::iter::once("0").chain(texts).collect()),
            6 => (false, texts),
            n => return Err(CronError::FieldCount(n)),
        };
        let mut parsed = Vec::with_capacity(6);
        for (kind, text) in FieldKind::ALL.into_iter().zip(&texts) {
            parsed.push(parse_field(kind, text)?);
        }
        let fields: [Field; 6] = parsed.try_into().map_err(|_| CronError::FieldCount(0))?;
        if !can_fire(&fields) {
            return Err(CronError::NeverFires);
        }
        let canonical = fields
            .iter()
            .map(Field::canonical)
            .collect::<Vec<_>>()
            .join(" ");
        // Vixie: when either day field starts with `*`, both must match
        // (a plain `*` then matches everything); croner's OR mode only
        // recognises a plain `*`, so the AND mode is chosen explicitly.
        let dom_and_dow = fields[3].starts_with_star() || fields[5].starts_with_star();
        let cron = CronParser::builder()
            .seconds(Seconds::Required)
            .year(Year::Disallowed)
            .dom_and_dow(dom_and_dow)
            .build()
            .parse(&canonical)
            .map_err(|e| CronError::Field {
                kind: FieldKind::Second,
                text: canonical.clone(),
                problem: FieldProblem::Malformed(e.to_string()),
            })?;
        Ok(CronExpr {
            source: texts_source(trimmed),
            five_fields,
            fields,
            cron,
        })
    }

    /// The expression as the user wrote it, with runs of spaces collapsed.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// True when second, minute and hour are single values: such a job runs
    /// once a day whatever the clocks do (SPEC §4).
    pub fn is_fixed_time(&self) -> bool {
        // croner's classification is the one its DST arithmetic applies.
        self.cron.determine_job_type() == JobType::FixedTime
    }

    /// The first fire time strictly after `after`, in zone `tz`.
    ///
    /// `None` only past year 5000, where the calendar search stops.
    pub fn next_after(&self, after: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
        let local = after.with_timezone(&tz);
        let next = self.cron.find_next_occurrence(&local, false).ok()?;
        Some(next.with_timezone(&Utc))
    }

    /// The last fire time at or before `at`, in zone `tz` (used to name the
    /// latest missed fire without walking every one of them).
    pub fn last_at_or_before(&self, at: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
        let local = at.with_timezone(&tz);
        let prev = self.cron.find_previous_occurrence(&local, true).ok()?;
        Some(prev.with_timezone(&Utc))
    }

    /// The next `count` fire times strictly after `after`, in zone `tz`.
    pub fn upcoming(&self, after: DateTime<Utc>, tz: Tz, count: usize) -> Vec<DateTime<Utc>> {
        let mut out = Vec::with_capacity(count);
        let mut cursor = after;
        while out.len() < count {
            match self.next_after(cursor, tz) {
                Some(t) => {
                    out.push(t);
                    cursor = t;
                }
                None => break,
            }
        }
        out
    }

    /// A description in the given language, such as `每天 03:30:00`.
    pub fn describe(&self, lang: Lang) -> String {
        describe::describe(&self.fields, self.five_fields, lang)
    }

    /// True when the day-of-month, month and day-of-week fields match `date`
    /// (Vixie's rule for the two day fields), whatever the time fields say.
    pub fn matches_date(&self, date: NaiveDate) -> bool {
        let [_, _, _, dom, mon, dow] = &self.fields;
        if !mon.matches(date.month()) {
            return false;
        }
        let dom_ok = dom.matches(date.day());
        let dow_ok = dow.matches(date.weekday().num_days_from_sunday());
        if dom.starts_with_star() || dow.starts_with_star() {
            dom_ok && dow_ok
        } else {
            dom_ok || dow_ok
        }
    }

    /// True when the day-of-week field allows every day of the week, so the
    /// weekday never decides whether the expression fires.
    pub fn every_weekday(&self) -> bool {
        (0..7).all(|d| self.fields[5].matches(d))
    }

    /// The shortest time between two consecutive fire times, in seconds, as
    /// the wall clock counts it (a clock change can make one real interval
    /// up to an hour shorter or longer).
    ///
    /// Within a day it is the smallest gap between the day's times; across
    /// days it is the evening's last time to the first time of the nearest
    /// following firing day. Days are compared over a whole 400-year
    /// Gregorian cycle, after which dates and weekdays repeat.
    pub fn shortest_period_secs(&self) -> i64 {
        let [s, mi, h, ..] = &self.fields;
        let mut times = Vec::new();
        for hour in h.values() {
            for minute in mi.values() {
                for second in s.values() {
                    times.push(i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second));
                }
            }
        }
        // The loops run in increasing order, so `times` is sorted.
        let (Some(&first), Some(&last)) = (times.first(), times.last()) else {
            return 86_400;
        };
        let within_day = times.windows(2).map(|w| w[1] - w[0]).min();
        let across_days = self.shortest_day_gap() * 86_400 - last + first;
        within_day.map_or(across_days, |w| w.min(across_days))
    }

    /// The fewest days between two consecutive dates the day fields match.
    fn shortest_day_gap(&self) -> i64 {
        const CYCLE_DAYS: i64 = 146_097;
        let Some(start) = NaiveDate::from_ymd_opt(2000, 1, 1) else {
            return 1;
        };
        let mut previous: Option<NaiveDate> = None;
        let mut best = i64::MAX;
        // One cycle plus a year, so the gap that wraps around the cycle's
        // end is seen too.
        for date in start.iter_days().take((CYCLE_DAYS + 366) as usize) {
            if !self.matches_date(date) {
                continue;
            }
            if let Some(p) = previous {
                best = best.min((date - p).num_days());
                if best == 1 {
                    return 1;
                }
            }
            previous = Some(date);
        }
        // `can_fire` guarantees some date matches; a single match per cycle
        // cannot happen (29 February alone recurs within a cycle).
        if best == i64::MAX { CYCLE_DAYS } else { best }
    }

    /// True when the local wall-clock time matches every field (used by tests
    /// and by callers that need to check a single instant).
    pub fn matches_local(&self, t: &chrono::NaiveDateTime) -> bool {
        use chrono::Timelike;
        let [s, mi, h, dom, mon, dow] = &self.fields;
        if !(s.matches(t.second()) && mi.matches(t.minute()) && h.matches(t.hour())) {
            return false;
        }
        if !mon.matches(t.month()) {
            return false;
        }
        let dom_ok = dom.matches(t.day());
        let dow_ok = dow.matches(t.weekday().num_days_from_sunday());
        if dom.starts_with_star() || dow.starts_with_star() {
            dom_ok && dow_ok
        } else {
            dom_ok || dow_ok
        }
    }
}

fn texts_source(trimmed: &str) -> String {
    trimmed.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The longest each month can be, February counting its leap day.
const MAX_DAYS: [u8; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/// Decides statically whether some date matches the day and month fields.
///
/// With both day fields restricted (OR mode) any weekday occurs in every
/// month, so the expression fires. Otherwise a day of month must exist in
/// some chosen month; every real date falls on every weekday in some year
/// (29 February included), so the weekday field never makes it impossible.
fn can_fire(fields: &[Field; 6]) -> bool {
    let (dom, month, dow) = (&fields[3], &fields[4], &fields[5]);
    let and_mode = dom.starts_with_star() || dow.starts_with_star();
    if !and_mode {
        return true;
    }
    month
        .values()
        .any(|m| dom.values().any(|d| d <= MAX_DAYS[usize::from(m) - 1]))
}

fn parse_field(kind: FieldKind, text: &str) -> Result<Field, CronError> {
    let fail = |problem| CronError::Field {
        kind,
        text: text.to_string(),
        problem,
    };
    // Character-level problems first: they have the clearest messages.
    if let Some(name) = first_word(text) {
        return Err(match name.as_str() {
            "L" | "W" | "LW" => fail(FieldProblem::Special(name.chars().next().unwrap_or('L'))),
            _ => fail(FieldProblem::Name(name)),
        });
    }
    for c in text.chars() {
        match c {
            '0'..='9' | '*' | ',' | '-' | '/' => {}
            '?' => return Err(fail(FieldProblem::QuestionMark)),
            '#' => return Err(fail(FieldProblem::Special('#'))),
            c => return Err(fail(FieldProblem::BadChar(c))),
        }
    }
    let (lo, hi) = kind.bounds();
    let number = |s: &str| -> Result<u8, CronError> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(fail(FieldProblem::Malformed(s.to_string())));
        }
        // Long digit strings saturate so they report as out of range.
        let v: u32 = s.parse().unwrap_or(u32::MAX);
        if kind == FieldKind::DayOfWeek && v == 7 {
            return Err(fail(FieldProblem::DayOfWeekSeven));
        }
        if v < u32::from(lo) || v > u32::from(hi) {
            return Err(fail(FieldProblem::OutOfRange { value: v }));
        }
        Ok(v as u8)
    };
    let mut items = Vec::new();
    let mut bits = 0u64;
    for raw in text.split(',') {
        if raw.is_empty() {
            return Err(fail(FieldProblem::EmptyItem));
        }
        let (base, step) = match raw.split_once('/') {
            Some((base, step)) => {
                if step.is_empty() || !step.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(fail(FieldProblem::Malformed(raw.to_string())));
                }
                let step: u32 = step.parse().unwrap_or(u32::MAX);
                if step == 0 {
                    return Err(fail(FieldProblem::StepZero));
                }
                if step > u32::from(hi) + 1 {
                    return Err(fail(FieldProblem::OutOfRange { value: step }));
                }
                (base, Some(step as u8))
            }
            None => (raw, None),
        };
        let (start, end, star) = if base == "*" {
            (lo, hi, true)
        } else if let Some((a, b)) = base.split_once('-') {
            let (a, b) = (number(a)?, number(b)?);
            if a > b {
                return Err(fail(FieldProblem::ReversedRange {
                    start: a.into(),
                    end: b.into(),
                }));
            }
            (a, b, false)
        } else {
            let v = number(base)?;
            // `a/n` runs from `a` to the field's maximum.
            (v, if step.is_some() { hi } else { v }, false)
        };
        let item = match (step, star) {
            (None, true) => Item::Any,
            (None, false) if start == end && !base.contains('-') => Item::Value(start),
            (None, false) => Item::Range(start, end),
            (Some(step), from_star) => Item::Step {
                start,
                end,
                step,
                from_star,
            },
        };
        let step = step.unwrap_or(1);
        let mut v = start;
        loop {
            bits |= 1u64 << v;
            match v.checked_add(step) {
                Some(next) if next <= end => v = next,
                _ => break,
            }
        }
        items.push(item);
    }
    Ok(Field { kind, items, bits })
}

/// The first run of letters in a field, upper-cased (`mon` → `MON`).
fn first_word(text: &str) -> Option<String> {
    let start = text.find(|c: char| c.is_ascii_alphabetic())?;
    let word: String = text[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect();
    Some(word.to_ascii_uppercase())
}

#[cfg(test)]
mod tests;
