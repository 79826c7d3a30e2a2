//! Job validation (SPEC §3): every field's rule, each error naming its field.
//!
//! Input is the JSON object a client sent, merged by the caller over the
//! defaults (create) or over the current job (update), so that one function
//! checks the whole job every time.
//!
//! The time rules of issue 11 (`calendar`, `calendarRule`,
//! `misfireGraceMs`, `activeFrom`, `activeUntil`, `maxRuns`, `jitterMs`) are
//! checked by [`validate_with_time_rules`], which the API calls for every
//! create and update; [`validate`] rejects them as unknown fields.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde_json::{Map, Value, json};

use crate::calendar::{Calendar, CalendarRule};
use crate::cron::{CronError, CronExpr};
use crate::handler::HandlerCatalog;
use crate::lang::Lang;
use crate::params::{self, ParamError};
use crate::retry::{RetryBackoff, RetryTiming};
use crate::schedule::{self, MAX_JITTER_MS, Schedule, ScheduleError};

/// The job fields of the alert policy, read by `alert::read_policy` rather
/// than by this module.
pub const ALERT_FIELDS: [&str; 4] = [
    "alertOnFailure",
    "alertAfterConsecutiveFailures",
    "alertOnRecovery",
    "alertChannels",
];

pub const MAX_NAME_CHARS: usize = 64;
pub const MAX_REMARK_CHARS: usize = 500;
pub const MAX_RETRY_COUNT: i64 = 10;
pub const MAX_RETRY_INTERVAL_MS: i64 = 3_600_000;
pub const MAX_TIMEOUT_MS: i64 = 86_400_000;
pub const DEFAULT_CRON: &str = "0 0 0 * * *";
/// Longest wait between two attempts (`retryMaxIntervalMs`): one day.
pub const MAX_RETRY_MAX_INTERVAL_MS: i64 = 86_400_000;
/// `retryMaxIntervalMs` when absent: an hour (the longest fixed interval).
pub const DEFAULT_RETRY_MAX_INTERVAL_MS: i64 = 3_600_000;
/// Longest catch-up window: 30 days (0 means unlimited).
pub const MAX_MISFIRE_GRACE_MS: i64 = 2_592_000_000;
/// Most successful scheduled fires `maxRuns` may allow.
pub const MAX_MAX_RUNS: i64 = 1_000_000_000;
pub const DEFAULT_GROUP: &str = "default";

/// Fields a client may write.
pub const WRITABLE_FIELDS: [&str; 17] = [
    "name",
    "group",
    "handler",
    "params",
    "cron",
    "timezone",
    "enabled",
    "retryCount",
    "retryIntervalMs",
    "timeoutMs",
    "allowConcurrent",
    "misfirePolicy",
    "remark",
    "retryBackoff",
    "retryMaxIntervalMs",
    "retryJitter",
    "overlapPolicy",
];

/// The time rules of issue 11 (see [`validate_with_time_rules`]).
pub const TIME_RULE_FIELDS: [&str; 7] = [
    "calendar",
    "calendarRule",
    "misfireGraceMs",
    "activeFrom",
    "activeUntil",
    "maxRuns",
    "jitterMs",
];

/// Read-only fields a client may echo back; they are ignored.
pub const READ_ONLY_FIELDS: [&str; 17] = [
    "id",
    "version",
    "builtin",
    "createdAt",
    "createdBy",
    "updatedAt",
    "updatedBy",
    "cronDescription",
    "nextFireTimes",
    "notice",
    "recentRuns",
    "groupLabel",
    // Counted by the engine towards `maxRuns`.
    "scheduledSuccesses",
    // The pause is written by `PUT /api/jobs/{id}/enabled` only.
    "pausedReason",
    "pausedBy",
    "pausedAt",
    "pausedUntil",
];

/// What to do with fire times missed while no instance ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MisfirePolicy {
    Skip,
    RunOnce,
}

impl MisfirePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            MisfirePolicy::Skip => "skip",
            MisfirePolicy::RunOnce => "run_once",
        }
    }

    pub fn parse(s: &str) -> Option<MisfirePolicy> {
        match s {
            "skip" => Some(MisfirePolicy::Skip),
            "run_once" => Some(MisfirePolicy::RunOnce),
            _ => None,
        }
    }
}

/// What a fire does while an earlier fire of its job still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverlapPolicy {
    /// Recorded `skipped` (`allowConcurrent: false`).
    Skip,
    /// Both run (`allowConcurrent: true`).
    Allow,
    /// At most one fire waits and starts when the running one ends; a
    /// further one is skipped.
    QueueOne,
    /// The running fire is stopped (`cancelled`) and this one starts once
    /// it really has.
    Replace,
}

impl OverlapPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            OverlapPolicy::Skip => "skip",
            OverlapPolicy::Allow => "allow",
            OverlapPolicy::QueueOne => "queue_one",
            OverlapPolicy::Replace => "replace",
        }
    }

    pub fn parse(s: &str) -> Option<OverlapPolicy> {
        Some(match s {
            "skip" => OverlapPolicy::Skip,
            "allow" => OverlapPolicy::Allow,
            "queue_one" => OverlapPolicy::QueueOne,
            "replace" => OverlapPolicy::Replace,
            _ => return None,
        })
    }

    /// The compatible view: `allowConcurrent` is true only for `allow`.
    pub fn allows_concurrent(self) -> bool {
        self == OverlapPolicy::Allow
    }

    /// The policy `allowConcurrent` stands for when no policy is given.
    pub fn from_allow_concurrent(allow: bool) -> OverlapPolicy {
        if allow {
            OverlapPolicy::Allow
        } else {
            OverlapPolicy::Skip
        }
    }
}

/// A job that passed every rule.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    pub name: String,
    pub group: String,
    pub handler: String,
    pub params: Map<String, Value>,
    pub cron: CronExpr,
    pub timezone: Option<Tz>,
    pub enabled: bool,
    pub retry_count: i32,
    pub retry_interval_ms: i64,
    pub timeout_ms: i64,
    pub allow_concurrent: bool,
    pub misfire_policy: MisfirePolicy,
    pub remark: String,
    /// `retryBackoff`, `retryIntervalMs`, `retryMaxIntervalMs`,
    /// `retryJitter`: the wait before each retry.
    pub retry: RetryTiming,
    /// `overlapPolicy`; `allow_concurrent` is its compatible view.
    pub overlap_policy: OverlapPolicy,
}

/// The JSON object of a new job's defaults (params are filled per handler).
pub fn defaults() -> Map<String, Value> {
    let Value::Object(map) = json!({
        "group": DEFAULT_GROUP,
        "params": {},
        "cron": DEFAULT_CRON,
        "timezone": null,
        "enabled": true,
        "retryCount": 0,
        "retryIntervalMs": 1000,
        "timeoutMs": 60000,
        "allowConcurrent": false,
        "misfirePolicy": "skip",
        "remark": "",
        "retryBackoff": "fixed",
        "retryMaxIntervalMs": DEFAULT_RETRY_MAX_INTERVAL_MS,
        "retryJitter": false,
    }) else {
        return Map::new();
    };
    map
}

/// The JSON object of the time rules' defaults: no calendar, no window, no
/// limit, no jitter, and misses caught up however old (today's behaviour).
pub fn time_rule_defaults() -> Map<String, Value> {
    let Value::Object(map) = json!({
        "calendar": null,
        "calendarRule": null,
        "misfireGraceMs": 0,
        "activeFrom": null,
        "activeUntil": null,
        "maxRuns": null,
        "jitterMs": 0,
    }) else {
        return Map::new();
    };
    map
}

/// A job's time rules (issue 11) that passed every check. The default is
/// today's behaviour: no calendar, window, limit or jitter.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TimeRules {
    /// The calendar's code, with `calendar_rule` set too.
    pub calendar: Option<String>,
    pub calendar_rule: Option<CalendarRule>,
    /// How late a missed fire may still be caught up; 0 = however late.
    pub misfire_grace_ms: i64,
    pub active_from: Option<DateTime<Utc>>,
    pub active_until: Option<DateTime<Utc>>,
    /// After this many successful scheduled fires the job disables itself.
    pub max_runs: Option<i64>,
    pub jitter_ms: i64,
}

impl TimeRules {
    /// The job's schedule: `cron` in `tz` (the job's zone, else the
    /// service's), with `calendar` (the one `self.calendar` names, looked up
    /// by the caller) when the job has one.
    ///
    /// Fails only for rules that [`validate_with_time_rules`] rejects, or a
    /// calendar that is missing although the job names one.
    pub fn schedule(
        &self,
        cron: impl Into<Arc<CronExpr>>,
        tz: Tz,
        calendar: Option<Arc<Calendar>>,
    ) -> Result<Schedule, ScheduleError> {
        let mut schedule = Schedule::new(cron, tz)
            .with_active_window(self.active_from, self.active_until)?
            .with_jitter_ms(self.jitter_ms)?;
        if let (Some(calendar), Some(rule)) = (calendar, self.calendar_rule) {
            schedule = schedule.with_calendar(calendar, rule)?;
        }
        Ok(schedule)
    }
}

/// One invalid field.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub field: String,
    pub problem: JobProblem,
}

#[derive(Debug, Clone, PartialEq)]
pub enum JobProblem {
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
    OutOfRange {
        min: i64,
        max: i64,
    },
    UnknownHandler(String),
    UnknownGroup(String),
    UnknownTimezone(String),
    Cron(CronError),
    UnknownMisfirePolicy(String),
    UnknownRetryBackoff(String),
    UnknownOverlapPolicy(String),
    /// `retryMaxIntervalMs` below `retryIntervalMs`.
    MaxIntervalBelowInterval {
        interval_ms: i64,
    },
    Param(ParamError),
    UnknownCalendar(String),
    UnknownCalendarRule(String),
    /// A rule without a calendar, or a calendar without a rule.
    CalendarRuleAlone,
    CalendarWithoutRule,
    /// `workdays`/`holidays` with a cron that restricts the weekdays.
    RuleNeedsEveryWeekday(CalendarRule),
    /// Not an RFC 3339 time with an offset.
    NotATime(String),
    UntilBeforeFrom,
    /// `jitterMs` not below the cron's shortest period.
    JitterTooLong {
        period_ms: i64,
    },
    /// `alertChannels` names a channel that does not exist.
    UnknownAlertChannel(i64),
    TooManyAlertChannels {
        max: usize,
    },
}

impl FieldError {
    fn new(field: &str, problem: JobProblem) -> FieldError {
        FieldError {
            field: field.to_string(),
            problem,
        }
    }

    pub fn message(&self, lang: Lang) -> String {
        match (&self.problem, lang) {
            (JobProblem::Required, Lang::Zh) => "必填".into(),
            (JobProblem::Required, Lang::En) => "This field is required".into(),
            (JobProblem::UnknownField, Lang::Zh) => format!("不认识的字段 {}", self.field),
            (JobProblem::UnknownField, Lang::En) => format!("Unknown field {}", self.field),
            (JobProblem::WrongType(t), Lang::Zh) => format!("类型应为 {}", type_zh(t)),
            (JobProblem::WrongType(t), Lang::En) => format!("Must be {t}"),
            (JobProblem::Blank, Lang::Zh) => "不能为空".into(),
            (JobProblem::Blank, Lang::En) => "Must not be blank".into(),
            (JobProblem::TooLong { max, chars }, Lang::Zh) => {
                format!("最多 {max} 个字，现在是 {chars} 个")
            }
            (JobProblem::TooLong { max, chars }, Lang::En) => {
                format!("At most {max} characters, got {chars}")
            }
            (JobProblem::ControlCharacter, Lang::Zh) => {
                "不能包含控制字符（换行、制表符等 U+0000–U+001F、U+007F）".into()
            }
            (JobProblem::ControlCharacter, Lang::En) => {
                "Must not contain control characters (line breaks, tabs and the rest of U+0000–U+001F, U+007F)".into()
            }
            (JobProblem::OutOfRange { min, max }, Lang::Zh) => format!("取值范围是 {min}–{max}"),
            (JobProblem::OutOfRange { min, max }, Lang::En) => {
                format!("Must be between {min} and {max}")
            }
            (JobProblem::UnknownHandler(name), Lang::Zh) => {
                format!("处理器 {name} 不存在：只能选择系统已注册的处理器")
            }
            (JobProblem::UnknownHandler(name), Lang::En) => {
                format!("Handler {name} does not exist: only registered handlers can be chosen")
            }
            (JobProblem::UnknownGroup(code), Lang::Zh) => {
                format!("任务分组 {code} 不存在：请先在任务分组里添加")
            }
            (JobProblem::UnknownGroup(code), Lang::En) => {
                format!("Job group {code} does not exist: add it to the job groups first")
            }
            (JobProblem::UnknownTimezone(tz), Lang::Zh) => {
                format!("时区 {tz} 不存在：请填写 IANA 时区名，比如 Asia/Shanghai，或留空")
            }
            (JobProblem::UnknownTimezone(tz), Lang::En) => format!(
                "Time zone {tz} does not exist: use an IANA name such as Asia/Shanghai, or null"
            ),
            (JobProblem::Cron(e), _) => e.message(lang),
            (JobProblem::UnknownMisfirePolicy(p), Lang::Zh) => {
                format!("错过策略 {p} 不存在：只能是 skip 或 run_once")
            }
            (JobProblem::UnknownMisfirePolicy(p), Lang::En) => {
                format!("Misfire policy {p} does not exist: use skip or run_once")
            }
            (JobProblem::UnknownOverlapPolicy(p), Lang::Zh) => {
                format!("重叠策略 {p} 不存在：只能是 skip、allow、queue_one 或 replace")
            }
            (JobProblem::UnknownOverlapPolicy(p), Lang::En) => {
                format!("Overlap policy {p} does not exist: use skip, allow, queue_one or replace")
            }
            (JobProblem::UnknownRetryBackoff(b), Lang::Zh) => {
                format!("重试间隔方式 {b} 不存在：只能是 fixed 或 exponential")
            }
            (JobProblem::UnknownRetryBackoff(b), Lang::En) => {
                format!("Retry backoff {b} does not exist: use fixed or exponential")
            }
            (JobProblem::MaxIntervalBelowInterval { interval_ms }, Lang::Zh) => {
                format!("不能小于重试间隔 retryIntervalMs（{interval_ms} 毫秒）")
            }
            (JobProblem::MaxIntervalBelowInterval { interval_ms }, Lang::En) => {
                format!("Must not be less than retryIntervalMs ({interval_ms} ms)")
            }
            (JobProblem::Param(e), _) => e.message(lang),
            (JobProblem::UnknownCalendar(code), Lang::Zh) => {
                format!("日历 {code} 不存在：请先在日历里添加，或选择内置的 cn-workdays")
            }
            (JobProblem::UnknownCalendar(code), Lang::En) => format!(
                "Calendar {code} does not exist: add it to the calendars first, or choose the built-in cn-workdays"
            ),
            (JobProblem::UnknownCalendarRule(rule), Lang::Zh) => {
                format!("日历规则 {rule} 不存在：只能是 workdays、holidays 或 exclude")
            }
            (JobProblem::UnknownCalendarRule(rule), Lang::En) => {
                format!("Calendar rule {rule} does not exist: use workdays, holidays or exclude")
            }
            (JobProblem::CalendarRuleAlone, Lang::Zh) => {
                "选了日历规则就要同时选择日历（calendar）".into()
            }
            (JobProblem::CalendarRuleAlone, Lang::En) => {
                "A calendar rule needs a calendar (calendar)".into()
            }
            (JobProblem::CalendarWithoutRule, Lang::Zh) => {
                "选了日历就要选择规则：workdays、holidays 或 exclude".into()
            }
            (JobProblem::CalendarWithoutRule, Lang::En) => {
                "A calendar needs a rule: workdays, holidays or exclude".into()
            }
            (JobProblem::RuleNeedsEveryWeekday(rule), Lang::Zh) => format!(
                "日历规则 {rule} 由日历决定哪天触发：Cron 的星期字段请写 *（限制星期几会漏掉调休上班的周末）"
            ),
            (JobProblem::RuleNeedsEveryWeekday(rule), Lang::En) => format!(
                "With calendar rule {rule} the calendar decides the days: write * in the cron's day-of-week field (restricting weekdays would miss make-up working weekends)"
            ),
            (JobProblem::NotATime(text), Lang::Zh) => format!(
                "“{text}”不是带时区的时间：请写成 RFC 3339，比如 2026-01-01T00:00:00+08:00，或留空"
            ),
            (JobProblem::NotATime(text), Lang::En) => format!(
                "`{text}` is not a time with an offset: use RFC 3339 such as 2026-01-01T00:00:00+08:00, or null"
            ),
            (JobProblem::UntilBeforeFrom, Lang::Zh) => "activeUntil 不能早于 activeFrom".into(),
            (JobProblem::UntilBeforeFrom, Lang::En) => {
                "activeUntil cannot be before activeFrom".into()
            }
            (JobProblem::JitterTooLong { period_ms }, Lang::Zh) => format!(
                "必须小于 Cron 的最短间隔 {}（{period_ms} 毫秒）",
                period_text(*period_ms, lang)
            ),
            (JobProblem::JitterTooLong { period_ms }, Lang::En) => format!(
                "Must be less than the cron's shortest period, {} ({period_ms} ms)",
                period_text(*period_ms, lang)
            ),
            (JobProblem::UnknownAlertChannel(id), Lang::Zh) => {
                format!("告警渠道 {id} 不存在：请先在告警渠道里添加")
            }
            (JobProblem::UnknownAlertChannel(id), Lang::En) => {
                format!("Alert channel {id} does not exist: add it to the alert channels first")
            }
            (JobProblem::TooManyAlertChannels { max }, Lang::Zh) => {
                format!("最多选择 {max} 个告警渠道")
            }
            (JobProblem::TooManyAlertChannels { max }, Lang::En) => {
                format!("At most {max} alert channels")
            }
        }
    }
}

/// A period in whole seconds as a person reads it: `15 分钟`, `1 day`.
/// A duration in the largest whole unit (days, hours, minutes, seconds).
pub fn period_text(ms: i64, lang: Lang) -> String {
    let secs = ms / 1000;
    let (n, zh, en) = if secs % 86_400 == 0 {
        (secs / 86_400, "天", "day")
    } else if secs % 3_600 == 0 {
        (secs / 3_600, "小时", "hour")
    } else if secs % 60 == 0 {
        (secs / 60, "分钟", "minute")
    } else {
        (secs, "秒", "second")
    };
    match lang {
        Lang::Zh => format!("{n} {zh}"),
        Lang::En if n == 1 => format!("1 {en}"),
        Lang::En => format!("{n} {en}s"),
    }
}

fn type_zh(t: &str) -> &'static str {
    match t {
        "a string" => "字符串",
        "a boolean" => "布尔值（true 或 false）",
        "an integer" => "整数",
        "a string or null" => "字符串或 null",
        "an integer or null" => "整数或 null",
        "an array" => "数组",
        _ => "其他类型",
    }
}

/// True when `s` holds a control character (U+0000–U+001F or U+007F), which
/// names, remarks and labels refuse.
pub fn has_control(s: &str) -> bool {
    s.chars().any(|c| c <= '\u{1f}' || c == '\u{7f}')
}

/// The manual's rule when an edit changes a job's handler: params that are
/// empty, or still exactly the old handler's defaults, are replaced by the
/// new handler's defaults (returned as `{}`, which validation fills).
/// Anything else is what the user typed and is kept, to be checked against
/// the new handler's schema.
pub fn params_for_new_handler(
    params: Option<&Value>,
    old_handler: &str,
    new_handler: &str,
    catalog: &HandlerCatalog,
) -> Option<Value> {
    if old_handler == new_handler {
        return None;
    }
    let empty = match params {
        None | Some(Value::Null) => true,
        Some(Value::Object(map)) => map.is_empty(),
        Some(Value::String(text)) => {
            let text = text.trim();
            text.is_empty()
                || serde_json::from_str::<Map<String, Value>>(text).is_ok_and(|m| m.is_empty())
        }
        Some(_) => false,
    };
    let old_defaults = catalog
        .get(old_handler)
        .map(|d| Value::Object(d.default_params()));
    let still_defaults = match (params, &old_defaults) {
        (Some(Value::String(text)), Some(defaults)) => {
            serde_json::from_str::<Value>(text.trim()).is_ok_and(|v| &v == defaults)
        }
        (Some(p), Some(defaults)) => p == defaults,
        _ => false,
    };
    (empty || still_defaults).then(|| Value::Object(Map::new()))
}

/// Checks a whole job. `groups` lists the job-group codes that exist.
///
/// The time rules of issue 11 are unknown fields here; see
/// [`validate_with_time_rules`].
pub fn validate(
    input: &Map<String, Value>,
    catalog: &HandlerCatalog,
    groups: &[String],
) -> Result<JobSpec, Vec<FieldError>> {
    let mut errors = Vec::new();
    let spec = validate_into(input, catalog, groups, false, &mut errors);
    match spec {
        Some(spec) if errors.is_empty() => Ok(spec),
        _ => Err(errors),
    }
}

/// Checks a whole job with its time rules (issue 11); `input` is merged
/// over [`defaults`] and [`time_rule_defaults`] (create) or over the current
/// job (update). `calendars` lists the calendar codes that exist (built-in
/// and user).
///
/// The rules that tie fields together: `calendar` and `calendarRule` come
/// together; `workdays` and `holidays` need a cron whose day-of-week field
/// allows every day (the calendar decides the days, and a restricted field
/// would drop make-up working weekends); `activeUntil` is not before
/// `activeFrom`; `jitterMs` is below the cron's shortest period.
pub fn validate_with_time_rules(
    input: &Map<String, Value>,
    catalog: &HandlerCatalog,
    groups: &[String],
    calendars: &[String],
) -> Result<(JobSpec, TimeRules), Vec<FieldError>> {
    let mut errors = Vec::new();
    let spec = validate_into(input, catalog, groups, true, &mut errors);
    // The cron's own errors are already reported; the rules that need it
    // are checked only when it is valid.
    let cron = match input.get("cron") {
        Some(Value::String(c)) => CronExpr::parse(c).ok(),
        _ => None,
    };
    let rules = time_rules(input, cron.as_ref(), calendars, &mut errors);
    match (spec, rules) {
        (Some(spec), Some(rules)) if errors.is_empty() => Ok((spec, rules)),
        _ => Err(errors),
    }
}

fn time_rules(
    input: &Map<String, Value>,
    cron: Option<&CronExpr>,
    calendars: &[String],
    errors: &mut Vec<FieldError>,
) -> Option<TimeRules> {
    let mut v = Reader { input, errors };
    let calendar = v.optional_text("calendar");
    let rule = v.optional_text("calendarRule");
    let misfire_grace_ms = v.integer("misfireGraceMs", 0, MAX_MISFIRE_GRACE_MS);
    let active_from = v.optional_time("activeFrom");
    let active_until = v.optional_time("activeUntil");
    let max_runs = v.optional_integer("maxRuns", 1, MAX_MAX_RUNS);
    let jitter_ms = v.integer("jitterMs", 0, MAX_JITTER_MS);

    let calendar = calendar.and_then(|c| match c {
        Some(code) if !calendars.contains(&code) => {
            errors.push(FieldError::new(
                "calendar",
                JobProblem::UnknownCalendar(code),
            ));
            None
        }
        other => Some(other),
    });
    let rule = rule.and_then(|r| match r {
        None => Some(None),
        Some(text) => match CalendarRule::parse(&text) {
            Some(rule) => Some(Some(rule)),
            None => {
                errors.push(FieldError::new(
                    "calendarRule",
                    JobProblem::UnknownCalendarRule(text),
                ));
                None
            }
        },
    });
    match (&calendar, &rule) {
        (Some(None), Some(Some(_))) => errors.push(FieldError::new(
            "calendarRule",
            JobProblem::CalendarRuleAlone,
        )),
        (Some(Some(_)), Some(None)) => errors.push(FieldError::new(
            "calendarRule",
            JobProblem::CalendarWithoutRule,
        )),
        _ => {}
    }
    if let (Some(cron), Some(Some(rule))) = (cron, rule)
        && let Err(ScheduleError::RuleNeedsEveryWeekday { rule }) = schedule::check_rule(cron, rule)
    {
        errors.push(FieldError::new(
            "cron",
            JobProblem::RuleNeedsEveryWeekday(rule),
        ));
    }
    if let (Some(Some(from)), Some(Some(until))) = (active_from, active_until)
        && schedule::check_window(Some(from), Some(until)).is_err()
    {
        errors.push(FieldError::new("activeUntil", JobProblem::UntilBeforeFrom));
    }
    if let (Some(cron), Some(jitter)) = (cron, jitter_ms)
        && let Err(ScheduleError::JitterTooLong { period_ms, .. }) =
            schedule::check_jitter(cron, jitter)
    {
        errors.push(FieldError::new(
            "jitterMs",
            JobProblem::JitterTooLong { period_ms },
        ));
    }
    Some(TimeRules {
        calendar: calendar?,
        calendar_rule: rule?,
        misfire_grace_ms: misfire_grace_ms?,
        active_from: active_from?,
        active_until: active_until?,
        max_runs: max_runs?,
        jitter_ms: jitter_ms?,
    })
}

/// Checks the fields of SPEC §3, recording errors; `time_rules` says
/// whether the fields of issue 11 are known (checked by the caller).
fn validate_into(
    input: &Map<String, Value>,
    catalog: &HandlerCatalog,
    groups: &[String],
    time_rules: bool,
    errors: &mut Vec<FieldError>,
) -> Option<JobSpec> {
    for key in input.keys() {
        let key = key.as_str();
        let known = WRITABLE_FIELDS.contains(&key)
            || READ_ONLY_FIELDS.contains(&key)
            || (time_rules && TIME_RULE_FIELDS.contains(&key))
            // The alert policy is read by `alert::read_policy`.
            || ALERT_FIELDS.contains(&key);
        if !known {
            errors.push(FieldError::new(key, JobProblem::UnknownField));
        }
    }
    let mut v = Reader { input, errors };

    let name = v.plain_text("name", MAX_NAME_CHARS, true);
    let group = v.text("group", 64, true);
    let handler = v.text("handler", 128, true);
    let cron_text = v.text("cron", 255, true);
    let timezone = v.optional_text("timezone");
    let enabled = v.boolean("enabled");
    let retry_count = v.integer("retryCount", 0, MAX_RETRY_COUNT);
    let retry_interval_ms = v.integer("retryIntervalMs", 0, MAX_RETRY_INTERVAL_MS);
    let timeout_ms = v.integer("timeoutMs", 0, MAX_TIMEOUT_MS);
    let allow_concurrent = v.boolean("allowConcurrent");
    let misfire = v.text("misfirePolicy", 16, true);
    let remark = v.plain_text("remark", MAX_REMARK_CHARS, false);
    // Absent in what older callers send: today's fixed interval.
    let backoff = match input.get("retryBackoff") {
        None | Some(Value::Null) => Some(RetryBackoff::Fixed.as_str().to_string()),
        Some(_) => v.text("retryBackoff", 16, true),
    };
    let max_interval = match input.get("retryMaxIntervalMs") {
        None | Some(Value::Null) => Some(DEFAULT_RETRY_MAX_INTERVAL_MS),
        Some(_) => v.integer("retryMaxIntervalMs", 0, MAX_RETRY_MAX_INTERVAL_MS),
    };
    // `overlapPolicy` wins; without it, `allowConcurrent` says which of
    // today's two behaviours is meant.
    let overlap = match input.get("overlapPolicy") {
        None | Some(Value::Null) => None,
        Some(_) => Some(v.text("overlapPolicy", 16, true)),
    };
    let jitter = match input.get("retryJitter") {
        None | Some(Value::Null) => Some(false),
        Some(_) => v.boolean("retryJitter"),
    };

    if let Some(g) = &group
        && !groups.iter().any(|known| known == g)
    {
        errors.push(FieldError::new(
            "group",
            JobProblem::UnknownGroup(g.clone()),
        ));
    }
    let cron = cron_text.and_then(|c| match CronExpr::parse(&c) {
        Ok(cron) => Some(cron),
        Err(e) => {
            errors.push(FieldError::new("cron", JobProblem::Cron(e)));
            None
        }
    });
    let timezone = match timezone {
        Some(Some(tz)) => match tz.parse::<Tz>() {
            Ok(tz) => Some(Some(tz)),
            Err(_) => {
                errors.push(FieldError::new("timezone", JobProblem::UnknownTimezone(tz)));
                None
            }
        },
        Some(None) => Some(None),
        None => None,
    };
    let backoff = backoff.and_then(|b| match RetryBackoff::parse(&b) {
        Some(b) => Some(b),
        None => {
            errors.push(FieldError::new(
                "retryBackoff",
                JobProblem::UnknownRetryBackoff(b),
            ));
            None
        }
    });
    let max_interval = match (max_interval, retry_interval_ms) {
        (Some(max), Some(interval)) if max < interval => {
            errors.push(FieldError::new(
                "retryMaxIntervalMs",
                JobProblem::MaxIntervalBelowInterval {
                    interval_ms: interval,
                },
            ));
            None
        }
        (max, _) => max,
    };
    let retry = match (backoff, retry_interval_ms, max_interval, jitter) {
        (Some(backoff), Some(interval_ms), Some(max_interval_ms), Some(jitter)) => {
            Some(RetryTiming {
                backoff,
                interval_ms,
                max_interval_ms,
                jitter,
            })
        }
        _ => None,
    };
    let overlap = match overlap {
        None => allow_concurrent.map(OverlapPolicy::from_allow_concurrent),
        Some(text) => text.and_then(|p| match OverlapPolicy::parse(&p) {
            Some(p) => Some(p),
            None => {
                errors.push(FieldError::new(
                    "overlapPolicy",
                    JobProblem::UnknownOverlapPolicy(p),
                ));
                None
            }
        }),
    };
    let misfire = misfire.and_then(|m| match MisfirePolicy::parse(&m) {
        Some(p) => Some(p),
        None => {
            errors.push(FieldError::new(
                "misfirePolicy",
                JobProblem::UnknownMisfirePolicy(m),
            ));
            None
        }
    });
    let params = handler.as_ref().and_then(|h| match catalog.get(h) {
        None => {
            errors.push(FieldError::new(
                "handler",
                JobProblem::UnknownHandler(h.clone()),
            ));
            None
        }
        Some(descriptor) => match params::check(&descriptor.schema, input.get("params")) {
            Ok(p) => Some(p),
            Err(param_errors) => {
                errors.extend(param_errors.into_iter().map(|e| FieldError {
                    field: e.field(),
                    problem: JobProblem::Param(e),
                }));
                None
            }
        },
    });

    match (
        name,
        group,
        handler,
        params,
        cron,
        timezone,
        enabled,
        retry_count,
        retry_interval_ms,
        timeout_ms,
        allow_concurrent,
        misfire,
        remark,
        retry,
        overlap,
    ) {
        (
            Some(name),
            Some(group),
            Some(handler),
            Some(params),
            Some(cron),
            Some(timezone),
            Some(enabled),
            Some(retry_count),
            Some(retry_interval_ms),
            Some(timeout_ms),
            Some(_),
            Some(misfire_policy),
            Some(remark),
            Some(retry),
            Some(overlap_policy),
        ) => Some(JobSpec {
            name,
            group,
            handler,
            params,
            cron,
            timezone,
            enabled,
            // The range check above keeps the count within 0–10.
            retry_count: retry_count as i32,
            retry_interval_ms,
            timeout_ms,
            allow_concurrent: overlap_policy.allows_concurrent(),
            misfire_policy,
            remark,
            retry,
            overlap_policy,
        }),
        _ => None,
    }
}

/// Reads typed fields, recording an error for each bad one.
struct Reader<'a> {
    input: &'a Map<String, Value>,
    errors: &'a mut Vec<FieldError>,
}

impl Reader<'_> {
    fn fail<T>(&mut self, field: &str, problem: JobProblem) -> Option<T> {
        self.errors.push(FieldError::new(field, problem));
        None
    }

    /// A string, trimmed; `required` also rejects blank text.
    fn text(&mut self, field: &str, max: usize, required: bool) -> Option<String> {
        match self.input.get(field) {
            None | Some(Value::Null) if required => self.fail(field, JobProblem::Required),
            None | Some(Value::Null) => Some(String::new()),
            Some(Value::String(s)) => {
                let s = s.trim();
                let chars = s.chars().count();
                if required && s.is_empty() {
                    self.fail(field, JobProblem::Blank)
                } else if chars > max {
                    self.fail(field, JobProblem::TooLong { max, chars })
                } else {
                    Some(s.to_string())
                }
            }
            Some(_) => self.fail(field, JobProblem::WrongType("a string")),
        }
    }

    /// Like [`Reader::text`], refusing control characters anywhere in the
    /// value (also where trimming would remove them).
    fn plain_text(&mut self, field: &str, max: usize, required: bool) -> Option<String> {
        if let Some(Value::String(s)) = self.input.get(field)
            && has_control(s)
        {
            return self.fail(field, JobProblem::ControlCharacter);
        }
        self.text(field, max, required)
    }

    /// A string or null; blank text counts as null.
    fn optional_text(&mut self, field: &str) -> Option<Option<String>> {
        match self.input.get(field) {
            None | Some(Value::Null) => Some(None),
            Some(Value::String(s)) if s.trim().is_empty() => Some(None),
            Some(Value::String(s)) => Some(Some(s.trim().to_string())),
            Some(_) => self.fail(field, JobProblem::WrongType("a string or null")),
        }
    }

    /// An RFC 3339 time with an offset, or null.
    fn optional_time(&mut self, field: &str) -> Option<Option<DateTime<Utc>>> {
        match self.input.get(field) {
            // Only null means "none": a blank text is not a time (the
            // document states the field as a date-time or null).
            None | Some(Value::Null) => Some(None),
            Some(Value::String(s)) => match DateTime::parse_from_rfc3339(s.trim()) {
                Ok(t) => Some(Some(t.with_timezone(&Utc))),
                Err(_) => self.fail(field, JobProblem::NotATime(s.clone())),
            },
            Some(_) => self.fail(field, JobProblem::WrongType("a string or null")),
        }
    }

    /// An integer within `min..=max`, or null.
    fn optional_integer(&mut self, field: &str, min: i64, max: i64) -> Option<Option<i64>> {
        match self.input.get(field) {
            None | Some(Value::Null) => Some(None),
            Some(Value::Number(_)) => self.integer(field, min, max).map(Some),
            Some(_) => self.fail(field, JobProblem::WrongType("an integer or null")),
        }
    }

    fn boolean(&mut self, field: &str) -> Option<bool> {
        match self.input.get(field) {
            Some(Value::Bool(b)) => Some(*b),
            None | Some(Value::Null) => self.fail(field, JobProblem::Required),
            Some(_) => self.fail(field, JobProblem::WrongType("a boolean")),
        }
    }

    fn integer(&mut self, field: &str, min: i64, max: i64) -> Option<i64> {
        match self.input.get(field) {
            None | Some(Value::Null) => self.fail(field, JobProblem::Required),
            Some(Value::Number(n)) => match n.as_i64() {
                Some(i) if (min..=max).contains(&i) => Some(i),
                Some(_) => self.fail(field, JobProblem::OutOfRange { min, max }),
                // Huge or fractional numbers.
                None if n.as_f64().is_some_and(|f| f.fract() == 0.0) => {
                    self.fail(field, JobProblem::OutOfRange { min, max })
                }
                None => self.fail(field, JobProblem::WrongType("an integer")),
            },
            Some(_) => self.fail(field, JobProblem::WrongType("an integer")),
        }
    }
}

#[cfg(test)]
mod tests;
