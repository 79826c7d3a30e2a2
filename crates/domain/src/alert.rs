//! Alerts (issue 10, part 1): a job's alert policy, the pure decision of
//! which alerts a fire's final end raises, and the alert channels super
//! administrators manage.
//!
//! The decision sees only the policy, the job's alert state (failed fires
//! in a row, whether a failure was alerted and not yet followed by a
//! success) and how the fire ended, so every rule is a table row in the
//! tests below.

use serde_json::{Map, Value, json};

use crate::job::{FieldError, JobProblem};
use crate::lang::Lang;

/// The job fields of the alert policy (listed with the job's other fields,
/// which must know every field a job body may carry).
pub use crate::job::ALERT_FIELDS;

/// Most consecutive failed fires `alertAfterConsecutiveFailures` may name.
pub const MAX_CONSECUTIVE_FAILURES: i64 = 1_000;
/// Most channels one job may name.
pub const MAX_JOB_CHANNELS: usize = 20;

/// A job's alert policy. The default is today's behaviour: no failure,
/// streak or recovery alerts (timeouts still alert on every timed-out
/// attempt, SPEC §5), and the default channels.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AlertPolicy {
    /// Alert when a fire ends `failed` or `timeout` after its retries.
    pub on_failure: bool,
    /// Alert when this many fires in a row ended failed; 0 = off.
    pub after_consecutive_failures: u32,
    /// Alert on the first success after an alerted failure.
    pub on_recovery: bool,
    /// The channels to alert on; empty = the default channels.
    pub channels: Vec<i64>,
}

/// The JSON object of the policy's defaults.
pub fn policy_defaults() -> Map<String, Value> {
    let Value::Object(map) = json!({
        "alertOnFailure": false,
        "alertAfterConsecutiveFailures": 0,
        "alertOnRecovery": false,
        "alertChannels": [],
    }) else {
        return Map::new();
    };
    map
}

/// Reads the policy from a job's JSON (merged over [`policy_defaults`] or
/// the stored job). `channels` lists the ids of the channels that exist.
pub fn read_policy(
    input: &Map<String, Value>,
    channels: &[i64],
) -> Result<AlertPolicy, Vec<FieldError>> {
    let mut errors = Vec::new();
    let mut fail = |field: &str, problem: JobProblem| {
        errors.push(FieldError {
            field: field.to_string(),
            problem,
        });
    };
    let boolean = |field: &str, fail: &mut dyn FnMut(&str, JobProblem)| match input.get(field) {
        Some(Value::Bool(b)) => *b,
        None | Some(Value::Null) => false,
        Some(_) => {
            fail(field, JobProblem::WrongType("a boolean"));
            false
        }
    };
    let on_failure = boolean("alertOnFailure", &mut fail);
    let on_recovery = boolean("alertOnRecovery", &mut fail);
    let field = "alertAfterConsecutiveFailures";
    let after = match input.get(field) {
        None | Some(Value::Null) => 0,
        Some(Value::Number(n)) => match n.as_i64() {
            Some(i) if (0..=MAX_CONSECUTIVE_FAILURES).contains(&i) => i as u32,
            Some(_) => {
                fail(
                    field,
                    JobProblem::OutOfRange {
                        min: 0,
                        max: MAX_CONSECUTIVE_FAILURES,
                    },
                );
                0
            }
            None if n.as_f64().is_some_and(|f| f.fract() == 0.0) => {
                fail(
                    field,
                    JobProblem::OutOfRange {
                        min: 0,
                        max: MAX_CONSECUTIVE_FAILURES,
                    },
                );
                0
            }
            None => {
                fail(field, JobProblem::WrongType("an integer"));
                0
            }
        },
        Some(_) => {
            fail(field, JobProblem::WrongType("an integer"));
            0
        }
    };
    let mut ids = Vec::new();
    match input.get("alertChannels") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            if items.len() > MAX_JOB_CHANNELS {
                fail(
                    "alertChannels",
                    JobProblem::TooManyAlertChannels {
                        max: MAX_JOB_CHANNELS,
                    },
                );
            }
            for (i, item) in items.iter().enumerate().take(MAX_JOB_CHANNELS) {
                let at = format!("alertChannels[{i}]");
                match item.as_i64() {
                    Some(id) if channels.contains(&id) => {
                        // Naming a channel twice is harmless: it is kept once.
                        if !ids.contains(&id) {
                            ids.push(id);
                        }
                    }
                    Some(id) => fail(&at, JobProblem::UnknownAlertChannel(id)),
                    None => fail(&at, JobProblem::WrongType("an integer")),
                }
            }
        }
        Some(_) => fail("alertChannels", JobProblem::WrongType("an array")),
    }
    if errors.is_empty() {
        Ok(AlertPolicy {
            on_failure,
            after_consecutive_failures: after,
            on_recovery,
            channels: ids,
        })
    } else {
        Err(errors)
    }
}

/// What the engine keeps per job between fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AlertState {
    /// Fires in a row that ended `failed` or `timeout`.
    pub failed_in_a_row: u32,
    /// A failure of the current streak was alerted (a failure, streak or
    /// timeout alert), so its end is worth a recovery alert.
    pub alerted: bool,
}

impl AlertState {
    /// Nothing to remember: a success changes nothing and raises nothing,
    /// so the engine need not touch the database.
    pub fn is_clear(self) -> bool {
        self == AlertState::default()
    }
}

/// How a fire ended, after its retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FireEnd {
    Success,
    Failed,
    /// The last attempt timed out (its timeout alert was already raised).
    Timeout,
    /// Skipped (overlap, held elsewhere): neither a success nor a failure.
    Skipped,
}

/// The alerts this service raises besides the timeout alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertKind {
    Failure,
    ConsecutiveFailures,
    Recovery,
}

impl AlertKind {
    /// The notification template of the alert.
    pub fn template(self) -> &'static str {
        match self {
            AlertKind::Failure => crate::notify::FAILURE_ALERT,
            AlertKind::ConsecutiveFailures => crate::notify::CONSECUTIVE_FAILURES_ALERT,
            AlertKind::Recovery => crate::notify::RECOVERY_ALERT,
        }
    }

    /// The word used in coalescing keys and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::Failure => "failure",
            AlertKind::ConsecutiveFailures => "consecutive",
            AlertKind::Recovery => "recovery",
        }
    }
}

/// What a fire's end raises and the state it leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlertDecision {
    pub alert: Option<AlertKind>,
    pub next: AlertState,
}

/// Decides the alert of a fire's final end.
///
/// - A failure (`failed` or `timeout`) extends the streak. When the streak
///   reaches `after_consecutive_failures` that is the alert (it says more
///   than a plain failure alert, so it replaces it for that fire); else a
///   failure alert when `on_failure`. The streak counts on past the
///   threshold without alerting again until it is broken.
/// - A success ends the streak, with a recovery alert when a failure of
///   it was alerted and `on_recovery`.
/// - A skip changes nothing.
pub fn decide(policy: &AlertPolicy, state: AlertState, end: FireEnd) -> AlertDecision {
    match end {
        FireEnd::Skipped => AlertDecision {
            alert: None,
            next: state,
        },
        FireEnd::Success => AlertDecision {
            alert: (state.alerted && policy.on_recovery).then_some(AlertKind::Recovery),
            next: AlertState::default(),
        },
        FireEnd::Failed | FireEnd::Timeout => {
            let streak = state.failed_in_a_row.saturating_add(1);
            let alert = if policy.after_consecutive_failures > 0
                && streak == policy.after_consecutive_failures
            {
                Some(AlertKind::ConsecutiveFailures)
            } else if policy.on_failure {
                Some(AlertKind::Failure)
            } else {
                None
            };
            AlertDecision {
                alert,
                next: AlertState {
                    failed_in_a_row: streak,
                    alerted: state.alerted || alert.is_some() || end == FireEnd::Timeout,
                },
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Channels
// ---------------------------------------------------------------------------

/// Where an alert goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelKind {
    /// The super administrators' inbox (and the `notify.webhook_url`
    /// delivery it has always had).
    Inbox,
    /// A generic webhook, signed like `notify.dispatch`'s deliveries.
    Webhook,
    /// A DingTalk custom robot.
    Dingtalk,
    /// A WeCom group robot.
    Wecom,
    /// A Feishu/Lark custom bot.
    Feishu,
}

impl ChannelKind {
    pub const ALL: [ChannelKind; 5] = [
        ChannelKind::Inbox,
        ChannelKind::Webhook,
        ChannelKind::Dingtalk,
        ChannelKind::Wecom,
        ChannelKind::Feishu,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ChannelKind::Inbox => "inbox",
            ChannelKind::Webhook => "webhook",
            ChannelKind::Dingtalk => "dingtalk",
            ChannelKind::Wecom => "wecom",
            ChannelKind::Feishu => "feishu",
        }
    }

    pub fn parse(s: &str) -> Option<ChannelKind> {
        ChannelKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Whether the channel POSTs to a URL (all but the inbox).
    pub fn needs_url(self) -> bool {
        self != ChannelKind::Inbox
    }

    /// The query parameter the robot's URL must carry, if any.
    fn url_token(self) -> Option<&'static str> {
        match self {
            ChannelKind::Dingtalk => Some("access_token"),
            ChannelKind::Wecom => Some("key"),
            _ => None,
        }
    }
}

pub const MAX_CHANNEL_NAME_CHARS: usize = 64;
pub const MAX_CHANNEL_URL_CHARS: usize = 2_000;
pub const MAX_CHANNEL_SECRET_CHARS: usize = 512;

/// A channel as a super administrator wrote it, already checked. `url` and
/// `secret` are `None` when the write left them as stored.
#[derive(Clone, PartialEq, Eq)]
pub struct ChannelSpec {
    pub name: String,
    pub kind: ChannelKind,
    pub enabled: bool,
    pub is_default: bool,
    pub url: Option<String>,
    /// `Some(None)` clears the secret.
    pub secret: Option<Option<String>>,
}

// Robot URLs carry tokens and secrets sign messages: `Debug` (and so any
// log line) says only whether they are there.
impl std::fmt::Debug for ChannelSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelSpec")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("enabled", &self.enabled)
            .field("is_default", &self.is_default)
            .field("url", &self.url.as_ref().map(|_| "…"))
            .field(
                "secret",
                &self.secret.as_ref().map(|s| s.as_ref().map(|_| "…")),
            )
            .finish()
    }
}

/// Why a channel field is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelProblem {
    Required,
    UnknownField,
    WrongType(&'static str),
    Blank,
    TooLong {
        max: usize,
    },
    ControlCharacter,
    UnknownKind(String),
    /// Not an http(s) URL with a host.
    BadUrl,
    /// A robot URL without its token parameter.
    UrlWithoutToken(&'static str),
    /// The inbox has no URL or secret.
    NotForInbox,
}

/// One refused field of a channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelFieldError {
    pub field: String,
    pub problem: ChannelProblem,
}

impl ChannelFieldError {
    pub fn message(&self, lang: Lang) -> String {
        use ChannelProblem as P;
        match (&self.problem, lang) {
            (P::Required, Lang::Zh) => "必填".into(),
            (P::Required, Lang::En) => "This field is required".into(),
            (P::UnknownField, Lang::Zh) => format!("不认识的字段 {}", self.field),
            (P::UnknownField, Lang::En) => format!("Unknown field {}", self.field),
            (P::WrongType(t), Lang::Zh) => match *t {
                "a boolean" => "类型应为布尔值（true 或 false）".into(),
                "a string or null" => "类型应为字符串或 null".into(),
                _ => "类型应为字符串".into(),
            },
            (P::WrongType(t), Lang::En) => format!("Must be {t}"),
            (P::Blank, Lang::Zh) => "不能为空".into(),
            (P::Blank, Lang::En) => "Must not be blank".into(),
            (P::TooLong { max }, Lang::Zh) => format!("最多 {max} 个字符"),
            (P::TooLong { max }, Lang::En) => format!("At most {max} characters"),
            (P::ControlCharacter, Lang::Zh) => "不能包含控制字符（换行、制表符等）".into(),
            (P::ControlCharacter, Lang::En) => {
                "Must not contain control characters (line breaks, tabs…)".into()
            }
            (P::UnknownKind(k), Lang::Zh) => {
                format!("渠道类型 {k} 不存在：只能是 inbox、webhook、dingtalk、wecom 或 feishu")
            }
            (P::UnknownKind(k), Lang::En) => format!(
                "Channel kind {k} does not exist: use inbox, webhook, dingtalk, wecom or feishu"
            ),
            (P::BadUrl, Lang::Zh) => "必须是以 http:// 或 https:// 开头、带主机名的网址".into(),
            (P::BadUrl, Lang::En) => "Must be an http:// or https:// URL with a host".into(),
            (P::UrlWithoutToken(t), Lang::Zh) => {
                format!("请粘贴机器人的完整 Webhook 地址（带 {t}= 参数）")
            }
            (P::UrlWithoutToken(t), Lang::En) => {
                format!("Paste the robot's whole webhook URL (with its {t}= parameter)")
            }
            (P::NotForInbox, Lang::Zh) => "站内信渠道没有地址和密钥，请不要填写".into(),
            (P::NotForInbox, Lang::En) => "The inbox channel has no URL or secret".into(),
        }
    }
}

/// Fields a channel body may carry.
const CHANNEL_FIELDS: [&str; 6] = ["name", "kind", "enabled", "isDefault", "url", "secret"];
/// Read-only fields a client may echo back; ignored.
const CHANNEL_READ_ONLY: [&str; 9] = [
    "id",
    "version",
    "target",
    "hasUrl",
    "hasSecret",
    "createdAt",
    "createdBy",
    "updatedAt",
    "updatedBy",
];

/// Checks a channel body. `stored` is the channel an update changes (its
/// kind, and whether it holds a URL), `None` for a create. Absent `url`
/// and `secret` keep what is stored; `secret: null` or `""` clears it.
/// `kind` cannot change on an update (the URL and secret belong to it).
pub fn validate_channel(
    input: &Map<String, Value>,
    stored: Option<(ChannelKind, bool)>,
) -> Result<ChannelSpec, Vec<ChannelFieldError>> {
    let mut errors = Vec::new();
    let mut fail = |field: &str, problem: ChannelProblem| {
        errors.push(ChannelFieldError {
            field: field.to_string(),
            problem,
        });
    };
    for key in input.keys() {
        if !CHANNEL_FIELDS.contains(&key.as_str()) && !CHANNEL_READ_ONLY.contains(&key.as_str()) {
            fail(key, ChannelProblem::UnknownField);
        }
    }
    let name = match input.get("name") {
        None | Some(Value::Null) => {
            fail("name", ChannelProblem::Required);
            None
        }
        Some(Value::String(s)) if crate::job::has_control(s) => {
            fail("name", ChannelProblem::ControlCharacter);
            None
        }
        Some(Value::String(s)) if s.trim().is_empty() => {
            fail("name", ChannelProblem::Blank);
            None
        }
        Some(Value::String(s)) if s.trim().chars().count() > MAX_CHANNEL_NAME_CHARS => {
            fail(
                "name",
                ChannelProblem::TooLong {
                    max: MAX_CHANNEL_NAME_CHARS,
                },
            );
            None
        }
        Some(Value::String(s)) => Some(s.trim().to_string()),
        Some(_) => {
            fail("name", ChannelProblem::WrongType("a string"));
            None
        }
    };
    let kind = match (input.get("kind"), stored) {
        (None | Some(Value::Null), Some((kind, _))) => Some(kind),
        (None | Some(Value::Null), None) => {
            fail("kind", ChannelProblem::Required);
            None
        }
        (Some(Value::String(s)), _) => match ChannelKind::parse(s.trim()) {
            Some(kind) => Some(kind),
            None => {
                fail("kind", ChannelProblem::UnknownKind(s.clone()));
                None
            }
        },
        (Some(_), _) => {
            fail("kind", ChannelProblem::WrongType("a string"));
            None
        }
    };
    let mut flag = |field: &str, default: bool| match input.get(field) {
        None | Some(Value::Null) => default,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            fail(field, ChannelProblem::WrongType("a boolean"));
            default
        }
    };
    let enabled = flag("enabled", true);
    let is_default = flag("isDefault", false);
    let url = match input.get("url") {
        None => None,
        Some(Value::Null) => Some(String::new()),
        Some(Value::String(s)) => Some(s.trim().to_string()),
        Some(_) => {
            fail("url", ChannelProblem::WrongType("a string"));
            None
        }
    };
    let secret = match input.get("secret") {
        None => None,
        Some(Value::Null) => Some(None),
        Some(Value::String(s)) if s.trim().is_empty() => Some(None),
        Some(Value::String(s)) if s.trim().chars().count() > MAX_CHANNEL_SECRET_CHARS => {
            fail(
                "secret",
                ChannelProblem::TooLong {
                    max: MAX_CHANNEL_SECRET_CHARS,
                },
            );
            None
        }
        Some(Value::String(s)) if crate::job::has_control(s.trim()) => {
            fail("secret", ChannelProblem::ControlCharacter);
            None
        }
        Some(Value::String(s)) => Some(Some(s.trim().to_string())),
        Some(_) => {
            fail("secret", ChannelProblem::WrongType("a string or null"));
            None
        }
    };
    if let Some(kind) = kind {
        if let Some((stored_kind, _)) = stored
            && stored_kind != kind
        {
            fail(
                "kind",
                ChannelProblem::UnknownKind(kind.as_str().to_string()),
            );
        }
        if !kind.needs_url() {
            if url.as_deref().is_some_and(|u| !u.is_empty()) {
                fail("url", ChannelProblem::NotForInbox);
            }
            if matches!(secret, Some(Some(_))) {
                fail("secret", ChannelProblem::NotForInbox);
            }
        } else {
            let has_stored_url = stored.is_some_and(|(_, has)| has);
            match url.as_deref() {
                None if has_stored_url => {}
                None | Some("") => fail("url", ChannelProblem::Required),
                Some(u) => {
                    if let Err(problem) = check_url(kind, u) {
                        fail("url", problem);
                    }
                }
            }
        }
    }
    match (name, kind) {
        (Some(name), Some(kind)) if errors.is_empty() => Ok(ChannelSpec {
            name,
            kind,
            enabled,
            is_default,
            url: url.filter(|u| !u.is_empty()),
            secret,
        }),
        _ => Err(errors),
    }
}

fn check_url(kind: ChannelKind, value: &str) -> Result<(), ChannelProblem> {
    if value.chars().count() > MAX_CHANNEL_URL_CHARS {
        return Err(ChannelProblem::TooLong {
            max: MAX_CHANNEL_URL_CHARS,
        });
    }
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ChannelProblem::BadUrl);
    }
    let url = url::Url::parse(value).map_err(|_| ChannelProblem::BadUrl)?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
        return Err(ChannelProblem::BadUrl);
    }
    if let Some(token) = kind.url_token()
        && !url.query_pairs().any(|(k, v)| k == token && !v.is_empty())
    {
        return Err(ChannelProblem::UrlWithoutToken(token));
    }
    Ok(())
}

/// What a channel's URL may show in responses: scheme and host only, as
/// robot URLs carry their token in the path or query.
pub fn url_target(value: &str) -> String {
    match url::Url::parse(value) {
        Ok(url) => match url.port() {
            Some(port) => format!("{}://{}:{port}", url.scheme(), url.host_str().unwrap_or("")),
            None => format!("{}://{}", url.scheme(), url.host_str().unwrap_or("")),
        },
        Err(_) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(on_failure: bool, after: u32, on_recovery: bool) -> AlertPolicy {
        AlertPolicy {
            on_failure,
            after_consecutive_failures: after,
            on_recovery,
            channels: vec![],
        }
    }

    fn state(failed_in_a_row: u32, alerted: bool) -> AlertState {
        AlertState {
            failed_in_a_row,
            alerted,
        }
    }

    #[test]
    fn decisions_table() {
        use AlertKind::*;
        use FireEnd::*;
        let cases: &[(
            AlertPolicy,
            AlertState,
            FireEnd,
            Option<AlertKind>,
            AlertState,
        )] = &[
            // Defaults: nothing but the state, timeouts mark it alerted.
            (
                policy(false, 0, false),
                state(0, false),
                Success,
                None,
                state(0, false),
            ),
            (
                policy(false, 0, false),
                state(0, false),
                Failed,
                None,
                state(1, false),
            ),
            (
                policy(false, 0, false),
                state(0, false),
                Timeout,
                None,
                state(1, true),
            ),
            (
                policy(false, 0, true),
                state(1, true),
                Success,
                Some(Recovery),
                state(0, false),
            ),
            // Failure alerts on every failed fire.
            (
                policy(true, 0, false),
                state(0, false),
                Failed,
                Some(Failure),
                state(1, true),
            ),
            (
                policy(true, 0, false),
                state(4, true),
                Timeout,
                Some(Failure),
                state(5, true),
            ),
            (
                policy(true, 0, false),
                state(4, true),
                Success,
                None,
                state(0, false),
            ),
            // Recovery only after an alerted failure.
            (
                policy(false, 0, true),
                state(3, false),
                Success,
                None,
                state(0, false),
            ),
            (
                policy(true, 0, true),
                state(1, true),
                Success,
                Some(Recovery),
                state(0, false),
            ),
            (
                policy(true, 0, true),
                state(0, false),
                Success,
                None,
                state(0, false),
            ),
            // N in a row: once, at the N-th, replacing the failure alert.
            (
                policy(false, 3, false),
                state(1, false),
                Failed,
                None,
                state(2, false),
            ),
            (
                policy(false, 3, false),
                state(2, false),
                Failed,
                Some(ConsecutiveFailures),
                state(3, true),
            ),
            (
                policy(false, 3, false),
                state(3, true),
                Failed,
                None,
                state(4, true),
            ),
            (
                policy(true, 3, false),
                state(2, false),
                Timeout,
                Some(ConsecutiveFailures),
                state(3, true),
            ),
            (
                policy(true, 3, false),
                state(3, true),
                Failed,
                Some(Failure),
                state(4, true),
            ),
            (
                policy(false, 1, true),
                state(0, false),
                Failed,
                Some(ConsecutiveFailures),
                state(1, true),
            ),
            (
                policy(false, 3, true),
                state(7, true),
                Success,
                Some(Recovery),
                state(0, false),
            ),
            // A skip is neither.
            (
                policy(true, 1, true),
                state(2, true),
                Skipped,
                None,
                state(2, true),
            ),
            (
                policy(true, 1, true),
                state(0, false),
                Skipped,
                None,
                state(0, false),
            ),
            // The streak never overflows.
            (
                policy(false, 0, false),
                state(u32::MAX, false),
                Failed,
                None,
                state(u32::MAX, false),
            ),
        ];
        for (i, (p, s, end, alert, next)) in cases.iter().enumerate() {
            let d = decide(p, *s, *end);
            assert_eq!(d.alert, *alert, "case {i}: {p:?} {s:?} {end:?}");
            assert_eq!(d.next, *next, "case {i}: {p:?} {s:?} {end:?}");
        }
        assert!(state(0, false).is_clear());
        assert!(!state(1, false).is_clear());
        assert!(!state(0, true).is_clear());
    }

    fn map(v: Value) -> Map<String, Value> {
        let Value::Object(m) = v else {
            panic!("object")
        };
        m
    }

    #[test]
    fn policy_fields_table() {
        let known = [3, 5];
        let ok: &[(Value, AlertPolicy)] = &[
            (json!({}), AlertPolicy::default()),
            (Value::Object(policy_defaults()), AlertPolicy::default()),
            (
                json!({"alertOnFailure": true, "alertAfterConsecutiveFailures": 1000, "alertOnRecovery": true, "alertChannels": [5, 3, 5]}),
                AlertPolicy {
                    on_failure: true,
                    after_consecutive_failures: 1000,
                    on_recovery: true,
                    channels: vec![5, 3],
                },
            ),
            (
                json!({"alertChannels": null, "alertOnFailure": null}),
                AlertPolicy::default(),
            ),
        ];
        for (input, want) in ok {
            assert_eq!(
                read_policy(&map(input.clone()), &known).as_ref(),
                Ok(want),
                "{input}"
            );
        }
        let bad: &[(Value, &str, JobProblem)] = &[
            (
                json!({"alertOnFailure": "yes"}),
                "alertOnFailure",
                JobProblem::WrongType("a boolean"),
            ),
            (
                json!({"alertOnRecovery": 1}),
                "alertOnRecovery",
                JobProblem::WrongType("a boolean"),
            ),
            (
                json!({"alertAfterConsecutiveFailures": -1}),
                "alertAfterConsecutiveFailures",
                JobProblem::OutOfRange { min: 0, max: 1000 },
            ),
            (
                json!({"alertAfterConsecutiveFailures": 1001}),
                "alertAfterConsecutiveFailures",
                JobProblem::OutOfRange { min: 0, max: 1000 },
            ),
            (
                json!({"alertAfterConsecutiveFailures": 1.5}),
                "alertAfterConsecutiveFailures",
                JobProblem::WrongType("an integer"),
            ),
            (
                json!({"alertChannels": 3}),
                "alertChannels",
                JobProblem::WrongType("an array"),
            ),
            (
                json!({"alertChannels": [4]}),
                "alertChannels[0]",
                JobProblem::UnknownAlertChannel(4),
            ),
            (
                json!({"alertChannels": [3, "5"]}),
                "alertChannels[1]",
                JobProblem::WrongType("an integer"),
            ),
            (
                json!({"alertChannels": vec![3; 21]}),
                "alertChannels",
                JobProblem::TooManyAlertChannels { max: 20 },
            ),
        ];
        for (input, field, problem) in bad {
            let errors = read_policy(&map(input.clone()), &known).expect_err("invalid");
            assert_eq!(errors.len(), 1, "{input}: {errors:?}");
            assert_eq!(errors[0].field, *field, "{input}");
            assert_eq!(errors[0].problem, *problem, "{input}");
            assert!(!errors[0].message(Lang::Zh).is_empty());
            assert!(!errors[0].message(Lang::En).is_empty());
        }
    }

    /// What an update changes: the stored kind, and whether a URL is set.
    type Stored = Option<(ChannelKind, bool)>;

    #[test]
    fn channel_bodies_table() {
        let ding = "https://oapi.dingtalk.com/robot/send?access_token=abc";
        let wecom = "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k-1";
        let ok = validate_channel(
            &map(json!({"name": " 值班群 ", "kind": "dingtalk", "url": ding, "secret": "SEC1"})),
            None,
        )
        .expect("valid");
        assert_eq!(ok.name, "值班群");
        assert_eq!(ok.kind, ChannelKind::Dingtalk);
        assert!(ok.enabled && !ok.is_default);
        assert_eq!(ok.url.as_deref(), Some(ding));
        assert_eq!(ok.secret, Some(Some("SEC1".into())));
        let shown = format!("{ok:?}");
        assert!(
            !shown.contains("SEC1") && !shown.contains("access_token"),
            "{shown}"
        );
        let inbox = validate_channel(
            &map(json!({"name": "管理员", "kind": "inbox", "isDefault": true})),
            None,
        )
        .expect("inbox");
        assert!(inbox.is_default && inbox.url.is_none());
        // An update keeps the stored URL and secret when they are absent.
        let kept = validate_channel(
            &map(json!({"name": "群", "enabled": false, "id": 4, "hasSecret": true})),
            Some((ChannelKind::Wecom, true)),
        )
        .expect("update");
        assert_eq!(
            (kept.kind, kept.url, kept.secret, kept.enabled),
            (ChannelKind::Wecom, None, None, false)
        );
        assert_eq!(
            validate_channel(
                &map(json!({"name": "x", "secret": null})),
                Some((ChannelKind::Feishu, true))
            )
            .expect("clear")
            .secret,
            Some(None)
        );

        let bad: &[(Value, Stored, &str, ChannelProblem)] = &[
            (
                json!({"kind": "inbox"}),
                None,
                "name",
                ChannelProblem::Required,
            ),
            (
                json!({"name": " ", "kind": "inbox"}),
                None,
                "name",
                ChannelProblem::Blank,
            ),
            (
                json!({"name": "a\nb", "kind": "inbox"}),
                None,
                "name",
                ChannelProblem::ControlCharacter,
            ),
            (
                json!({"name": "x".repeat(65), "kind": "inbox"}),
                None,
                "name",
                ChannelProblem::TooLong { max: 64 },
            ),
            (json!({"name": "n"}), None, "kind", ChannelProblem::Required),
            (
                json!({"name": "n", "kind": "slack"}),
                None,
                "kind",
                ChannelProblem::UnknownKind("slack".into()),
            ),
            (
                json!({"name": "n", "kind": "webhook"}),
                None,
                "url",
                ChannelProblem::Required,
            ),
            (
                json!({"name": "n", "kind": "webhook", "url": "ftp://x"}),
                None,
                "url",
                ChannelProblem::BadUrl,
            ),
            (
                json!({"name": "n", "kind": "feishu", "url": "http://"}),
                None,
                "url",
                ChannelProblem::BadUrl,
            ),
            (
                json!({"name": "n", "kind": "dingtalk", "url": "https://oapi.dingtalk.com/robot/send"}),
                None,
                "url",
                ChannelProblem::UrlWithoutToken("access_token"),
            ),
            (
                json!({"name": "n", "kind": "wecom", "url": wecom.replace("key=k-1", "key=")}),
                None,
                "url",
                ChannelProblem::UrlWithoutToken("key"),
            ),
            (
                json!({"name": "n", "kind": "inbox", "url": "https://e.com"}),
                None,
                "url",
                ChannelProblem::NotForInbox,
            ),
            (
                json!({"name": "n", "kind": "inbox", "secret": "s"}),
                None,
                "secret",
                ChannelProblem::NotForInbox,
            ),
            (
                json!({"name": "n", "kind": "inbox", "enabled": "no"}),
                None,
                "enabled",
                ChannelProblem::WrongType("a boolean"),
            ),
            (
                json!({"name": "n", "kind": "inbox", "colour": 1}),
                None,
                "colour",
                ChannelProblem::UnknownField,
            ),
            (
                json!({"name": "n", "kind": "webhook"}),
                Some((ChannelKind::Webhook, false)),
                "url",
                ChannelProblem::Required,
            ),
            (
                json!({"name": "n", "kind": "feishu"}),
                Some((ChannelKind::Webhook, true)),
                "kind",
                ChannelProblem::UnknownKind("feishu".into()),
            ),
            (
                json!({"name": "n", "kind": "webhook", "url": "https://e.com", "secret": "s".repeat(513)}),
                None,
                "secret",
                ChannelProblem::TooLong { max: 512 },
            ),
        ];
        for (input, stored, field, problem) in bad {
            let errors = validate_channel(&map(input.clone()), *stored).expect_err("invalid");
            assert_eq!(errors.len(), 1, "{input}: {errors:?}");
            assert_eq!(errors[0].field, *field, "{input}");
            assert_eq!(errors[0].problem, *problem, "{input}");
            assert!(!errors[0].message(Lang::Zh).is_empty());
            assert!(!errors[0].message(Lang::En).is_empty());
        }
    }

    #[test]
    fn targets_hide_tokens() {
        assert_eq!(
            url_target("https://oapi.dingtalk.com/robot/send?access_token=abc"),
            "https://oapi.dingtalk.com"
        );
        assert_eq!(
            url_target("http://127.0.0.1:9000/open-apis/bot/v2/hook/secret-token"),
            "http://127.0.0.1:9000"
        );
        assert_eq!(url_target("nonsense"), "");
        for kind in ChannelKind::ALL {
            assert_eq!(ChannelKind::parse(kind.as_str()), Some(kind));
        }
    }
}
