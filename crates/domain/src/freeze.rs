//! Freeze windows (issue 11, part 4): a period declared ahead (a release, a
//! migration) in which the fire times of the jobs it covers are not run.
//!
//! A window covers `from <= t < to`. Its scope is every job (`all`), a
//! group, a handler, or a list of job ids. This module validates a body,
//! says which jobs and times a freeze covers, and writes the text of the
//! one skipped record a job gets per window.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde_json::{Map, Value};

use crate::misfire::{Missed, missed_between};
use crate::{Lang, Schedule};

/// Most characters of a reason.
pub const REASON_MAX: usize = 500;
/// Most job ids a `jobIds` scope lists.
pub const JOB_IDS_MAX: usize = 1000;
/// The largest id a JSON client can hold exactly (2^53 − 1).
const ID_MAX: i64 = 9_007_199_254_740_991;

/// The jobs a freeze covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FreezeScope {
    All,
    Group(String),
    Handler(String),
    JobIds(Vec<i64>),
}

impl FreezeScope {
    /// `all`, `group`, `handler` or `jobIds`.
    pub fn kind(&self) -> &'static str {
        match self {
            FreezeScope::All => "all",
            FreezeScope::Group(_) => "group",
            FreezeScope::Handler(_) => "handler",
            FreezeScope::JobIds(_) => "jobIds",
        }
    }

    /// True when a job with this id, group and handler is in the scope.
    pub fn covers(&self, job_id: i64, group: &str, handler: &str) -> bool {
        match self {
            FreezeScope::All => true,
            FreezeScope::Group(g) => g == group,
            FreezeScope::Handler(h) => h == handler,
            FreezeScope::JobIds(ids) => ids.contains(&job_id),
        }
    }
}

/// A freeze as validated, before it is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreezeSpec {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub scope: FreezeScope,
    pub reason: String,
}

/// A stored freeze, as the engine matches fire times against it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Freeze {
    pub id: i64,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub scope: FreezeScope,
    pub reason: String,
}

impl Freeze {
    /// True when the window holds `at` (`from <= at < to`).
    pub fn holds(&self, at: DateTime<Utc>) -> bool {
        self.from <= at && at < self.to
    }

    /// True when the window holds `at` for this job.
    pub fn freezes(&self, job_id: i64, group: &str, handler: &str, at: DateTime<Utc>) -> bool {
        self.holds(at) && self.scope.covers(job_id, group, handler)
    }
}

/// The freeze (the earliest-starting one) that holds `at` for this job.
pub fn freezing<'a>(
    freezes: &'a [Freeze],
    job_id: i64,
    group: &str,
    handler: &str,
    at: DateTime<Utc>,
) -> Option<&'a Freeze> {
    freezes
        .iter()
        .filter(|f| f.freezes(job_id, group, handler, at))
        .min_by_key(|f| (f.from, f.id))
}

/// The frozen fire times of `schedule` in the window: every time in
/// `[from, to)` strictly after `after`. `None` when there are none.
pub fn frozen_times(schedule: &Schedule, freeze: &Freeze, after: DateTime<Utc>) -> Option<Missed> {
    let start = after.max(freeze.from - chrono::Duration::milliseconds(1));
    let last = schedule.last_at_or_before(freeze.to - chrono::Duration::milliseconds(1))?;
    missed_between(schedule, start, last)
}

/// The first run of unrecorded fire times after `after` up to `through`,
/// split at freeze windows: the plain times before the first frozen one
/// (`None` as the freeze), or, when the first time is frozen, every time
/// that freeze holds (up to its end, even past `through`: a job gets one
/// record per window). `None` when nothing after `after` is due by
/// `through`.
pub fn first_span<'a>(
    schedule: &Schedule,
    freezes: &'a [Freeze],
    job: (i64, &str, &str),
    after: DateTime<Utc>,
    through: DateTime<Utc>,
) -> Option<(Missed, Option<&'a Freeze>)> {
    let (job_id, group, handler) = job;
    let plain = missed_between(schedule, after, through)?;
    if let Some(freeze) = freezing(freezes, job_id, group, handler, plain.first) {
        let frozen = frozen_times(schedule, freeze, after)?;
        return Some((frozen, Some(freeze)));
    }
    // The earliest frozen time within the span, if any: the span ends
    // before it.
    let first_frozen = freezes
        .iter()
        .filter(|f| f.scope.covers(job_id, group, handler))
        .filter(|f| f.from <= plain.last && f.to > plain.first)
        .filter_map(|f| frozen_times(schedule, f, after).map(|m| m.first))
        .filter(|t| *t <= plain.last)
        .min();
    match first_frozen {
        None => Some((plain, None)),
        Some(t) => {
            let cap = schedule.last_at_or_before(t - chrono::Duration::milliseconds(1))?;
            missed_between(schedule, after, cap).map(|m| (m, None))
        }
    }
}

/// Why a field of a freeze body was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FreezeProblem {
    Required,
    UnknownField,
    WrongType(&'static str),
    Blank,
    TooLong {
        max: usize,
    },
    ControlCharacter,
    NotATime(String),
    /// `to` is not after `from`.
    EndNotAfterStart,
    /// `to` is not in the future.
    EndInPast,
    UnknownScope(String),
    /// A field that only another scope takes.
    NotForScope(&'static str),
    TooMany {
        max: usize,
    },
    BadId,
}

/// One refused field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreezeFieldError {
    pub field: String,
    pub problem: FreezeProblem,
}

impl FreezeFieldError {
    fn new(field: &str, problem: FreezeProblem) -> FreezeFieldError {
        FreezeFieldError {
            field: field.to_string(),
            problem,
        }
    }

    pub fn message(&self, lang: Lang) -> String {
        use FreezeProblem as P;
        match (&self.problem, lang) {
            (P::Required, Lang::Zh) => "必填".into(),
            (P::Required, Lang::En) => "This field is required".into(),
            (P::UnknownField, Lang::Zh) => format!("不认识的字段 {}", self.field),
            (P::UnknownField, Lang::En) => format!("Unknown field {}", self.field),
            (P::WrongType(t), Lang::Zh) => match *t {
                "an array of job ids" => "类型应为任务 ID 数组".into(),
                _ => "类型应为字符串".into(),
            },
            (P::WrongType(t), Lang::En) => format!("Must be {t}"),
            (P::Blank, Lang::Zh) => "不能为空".into(),
            (P::Blank, Lang::En) => "Must not be blank".into(),
            (P::TooLong { max }, Lang::Zh) => format!("最多 {max} 个字符"),
            (P::TooLong { max }, Lang::En) => format!("At most {max} characters"),
            (P::ControlCharacter, Lang::Zh) => "不能包含控制字符".into(),
            (P::ControlCharacter, Lang::En) => "Must not contain control characters".into(),
            (P::NotATime(s), Lang::Zh) => {
                format!("「{s}」不是带时区偏移的 RFC 3339 时间，例如 2026-12-01T22:00:00+08:00")
            }
            (P::NotATime(s), Lang::En) => format!(
                "“{s}” is not an RFC 3339 time with an offset, such as 2026-12-01T22:00:00+08:00"
            ),
            (P::EndNotAfterStart, Lang::Zh) => "结束时间必须晚于开始时间".into(),
            (P::EndNotAfterStart, Lang::En) => "Must be after from".into(),
            (P::EndInPast, Lang::Zh) => "结束时间必须在将来".into(),
            (P::EndInPast, Lang::En) => "Must be in the future".into(),
            (P::UnknownScope(s), Lang::Zh) => {
                format!("范围 {s} 不存在：只能是 all、group、handler 或 jobIds")
            }
            (P::UnknownScope(s), Lang::En) => {
                format!("Scope {s} does not exist: use all, group, handler or jobIds")
            }
            (P::NotForScope(scope), Lang::Zh) => format!("只有 scope 为 {scope} 时才能填写"),
            (P::NotForScope(scope), Lang::En) => format!("Only taken with scope {scope}"),
            (P::TooMany { max }, Lang::Zh) => format!("最多 {max} 个"),
            (P::TooMany { max }, Lang::En) => format!("At most {max} items"),
            (P::BadId, Lang::Zh) => "任务 ID 必须是 1 到 9007199254740991 之间的整数".into(),
            (P::BadId, Lang::En) => "Job ids must be integers from 1 to 9007199254740991".into(),
        }
    }
}

const FIELDS: [&str; 7] = [
    "from", "to", "scope", "group", "handler", "jobIds", "reason",
];

/// Validates a freeze body (`from`, `to`, `scope`, the scope's own field,
/// `reason`) at `now`. Whether the group, handler or jobs exist is for the
/// caller to check.
pub fn validate(
    body: &Map<String, Value>,
    now: DateTime<Utc>,
) -> Result<FreezeSpec, Vec<FreezeFieldError>> {
    let mut errors = Vec::new();
    for key in body.keys() {
        if !FIELDS.contains(&key.as_str()) {
            errors.push(FreezeFieldError::new(key, FreezeProblem::UnknownField));
        }
    }
    let from = time(body, "from", &mut errors);
    let to = time(body, "to", &mut errors);
    if let (Some(from), Some(to)) = (from, to) {
        if to <= from {
            errors.push(FreezeFieldError::new("to", FreezeProblem::EndNotAfterStart));
        } else if to <= now {
            errors.push(FreezeFieldError::new("to", FreezeProblem::EndInPast));
        }
    }
    let reason = text(body, "reason", REASON_MAX, &mut errors);
    let scope = scope(body, &mut errors);
    match (from, to, scope, reason) {
        (Some(from), Some(to), Some(scope), Some(reason)) if errors.is_empty() => Ok(FreezeSpec {
            from,
            to,
            scope,
            reason,
        }),
        _ => Err(errors),
    }
}

fn time(
    body: &Map<String, Value>,
    field: &str,
    errors: &mut Vec<FreezeFieldError>,
) -> Option<DateTime<Utc>> {
    match body.get(field) {
        None | Some(Value::Null) => {
            errors.push(FreezeFieldError::new(field, FreezeProblem::Required));
            None
        }
        Some(Value::String(s)) => match DateTime::parse_from_rfc3339(s.trim()) {
            Ok(t) => Some(t.with_timezone(&Utc)),
            Err(_) => {
                errors.push(FreezeFieldError::new(
                    field,
                    FreezeProblem::NotATime(s.clone()),
                ));
                None
            }
        },
        Some(_) => {
            errors.push(FreezeFieldError::new(
                field,
                FreezeProblem::WrongType("a string"),
            ));
            None
        }
    }
}

/// A required, trimmed, non-blank text without control characters.
fn text(
    body: &Map<String, Value>,
    field: &str,
    max: usize,
    errors: &mut Vec<FreezeFieldError>,
) -> Option<String> {
    let problem = match body.get(field) {
        None | Some(Value::Null) => FreezeProblem::Required,
        Some(Value::String(s)) => {
            let trimmed = s.trim();
            if s.chars().any(|c| c.is_control()) {
                FreezeProblem::ControlCharacter
            } else if trimmed.is_empty() {
                FreezeProblem::Blank
            } else if trimmed.chars().count() > max {
                FreezeProblem::TooLong { max }
            } else {
                return Some(trimmed.to_string());
            }
        }
        Some(_) => FreezeProblem::WrongType("a string"),
    };
    errors.push(FreezeFieldError::new(field, problem));
    None
}

fn scope(body: &Map<String, Value>, errors: &mut Vec<FreezeFieldError>) -> Option<FreezeScope> {
    let kind = text(body, "scope", 16, errors)?;
    let own = match kind.as_str() {
        "all" => None,
        "group" => Some("group"),
        "handler" => Some("handler"),
        "jobIds" => Some("jobIds"),
        _ => {
            errors.push(FreezeFieldError::new(
                "scope",
                FreezeProblem::UnknownScope(kind),
            ));
            return None;
        }
    };
    // A scope's field given with another scope (even null) is refused,
    // not ignored.
    for (field, scope) in [
        ("group", "group"),
        ("handler", "handler"),
        ("jobIds", "jobIds"),
    ] {
        if own != Some(field) && body.contains_key(field) {
            errors.push(FreezeFieldError::new(
                field,
                FreezeProblem::NotForScope(scope),
            ));
        }
    }
    match own {
        None => Some(FreezeScope::All),
        Some("group") => text(body, "group", 64, errors).map(FreezeScope::Group),
        Some("handler") => text(body, "handler", 128, errors).map(FreezeScope::Handler),
        _ => job_ids(body, errors).map(FreezeScope::JobIds),
    }
}

fn job_ids(body: &Map<String, Value>, errors: &mut Vec<FreezeFieldError>) -> Option<Vec<i64>> {
    let problem = match body.get("jobIds") {
        None | Some(Value::Null) => FreezeProblem::Required,
        Some(Value::Array(items)) if items.is_empty() => FreezeProblem::Required,
        Some(Value::Array(items)) if items.len() > JOB_IDS_MAX => {
            FreezeProblem::TooMany { max: JOB_IDS_MAX }
        }
        Some(Value::Array(items)) => {
            let ids: Option<Vec<i64>> = items
                .iter()
                .map(|v| v.as_i64().filter(|id| (1..=ID_MAX).contains(id)))
                .collect();
            match ids {
                Some(mut ids) => {
                    ids.sort_unstable();
                    ids.dedup();
                    return Some(ids);
                }
                None => FreezeProblem::BadId,
            }
        }
        Some(_) => FreezeProblem::WrongType("an array of job ids"),
    };
    errors.push(FreezeFieldError::new("jobIds", problem));
    None
}

/// The `output` of a job's one skipped record for a window: the freeze, its
/// reason, and the fire times it covered, in Chinese and in English.
pub fn frozen_text(freeze: &Freeze, missed: &Missed, tz: Tz) -> String {
    let fmt = |t: DateTime<Utc>| {
        t.with_timezone(&tz)
            .format("%Y-%m-%d %H:%M:%S %:z")
            .to_string()
    };
    let count = if missed.capped {
        format!("{}+", missed.count)
    } else {
        missed.count.to_string()
    };
    let (id, reason) = (freeze.id, &freeze.reason);
    let (first, last) = (fmt(missed.first), fmt(missed.last));
    format!(
        "冻结窗口 #{id}（{reason}）期间跳过了 {count} 次执行：{first} 至 {last}。\nSkipped {count} fire time(s) during freeze #{id} ({reason}): {first} to {last}."
    )
}

/// The first log line of the catch-up run a `run_once` job gets when a
/// window that froze some of its fire times ends.
pub fn catch_up_note(freeze: &Freeze) -> String {
    let (id, reason) = (freeze.id, &freeze.reason);
    format!(
        "冻结窗口 #{id}（{reason}）结束：错过策略为补跑一次，现在补做。\nFreeze #{id} ({reason}) ended: misfire policy is run once: caught up now."
    )
}

#[cfg(test)]
mod tests;
