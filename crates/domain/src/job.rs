//! Job validation (SPEC §3): every field's rule, each error naming its field.
//!
//! Input is the JSON object a client sent, merged by the caller over the
//! defaults (create) or over the current job (update), so that one function
//! checks the whole job every time.

use chrono_tz::Tz;
use serde_json::{Map, Value, json};

use crate::cron::{CronError, CronExpr};
use crate::handler::HandlerCatalog;
use crate::lang::Lang;
use crate::params::{self, ParamError};

pub const MAX_NAME_CHARS: usize = 64;
pub const MAX_REMARK_CHARS: usize = 500;
pub const MAX_RETRY_COUNT: i64 = 10;
pub const MAX_RETRY_INTERVAL_MS: i64 = 3_600_000;
pub const MAX_TIMEOUT_MS: i64 = 86_400_000;
pub const DEFAULT_CRON: &str = "0 0 0 * * *";
pub const DEFAULT_GROUP: &str = "default";

/// Fields a client may write.
pub const WRITABLE_FIELDS: [&str; 13] = [
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
];

/// Read-only fields a client may echo back; they are ignored.
pub const READ_ONLY_FIELDS: [&str; 12] = [
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
    }) else {
        return Map::new();
    };
    map
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
    Param(ParamError),
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
            (JobProblem::Param(e), _) => e.message(lang),
        }
    }
}

fn type_zh(t: &str) -> &'static str {
    match t {
        "a string" => "字符串",
        "a boolean" => "布尔值（true 或 false）",
        "an integer" => "整数",
        "a string or null" => "字符串或 null",
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
pub fn validate(
    input: &Map<String, Value>,
    catalog: &HandlerCatalog,
    groups: &[String],
) -> Result<JobSpec, Vec<FieldError>> {
    let mut errors = Vec::new();
    for key in input.keys() {
        if !WRITABLE_FIELDS.contains(&key.as_str()) && !READ_ONLY_FIELDS.contains(&key.as_str()) {
            errors.push(FieldError::new(key, JobProblem::UnknownField));
        }
    }
    let mut v = Reader {
        input,
        errors: &mut errors,
    };

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
            Some(allow_concurrent),
            Some(misfire_policy),
            Some(remark),
        ) if errors.is_empty() => Ok(JobSpec {
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
            allow_concurrent,
            misfire_policy,
            remark,
        }),
        _ => Err(errors),
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
