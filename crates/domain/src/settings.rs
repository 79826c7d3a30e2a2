//! Operator settings: the keys this service knows, what each means, which
//! values are valid, and how a stored value is read (SPEC §7, §8).
//!
//! Only the keys listed in [`SETTINGS`] can be read or written over the API;
//! anything else is someone else's setting and is refused.

use crate::lang::Lang;

/// How many days runs, audit entries and notifications are kept.
pub const RETENTION_DAYS: &str = "audit.retention_days";
/// Where `notify.dispatch` delivers notifications; empty for nowhere.
pub const WEBHOOK_URL: &str = "notify.webhook_url";
/// The link alerts give to a run: a URL with `{runId}` (and optionally
/// `{jobId}`), such as the admin console's run page; empty for the API path.
pub const RUN_LINK: &str = "notify.run_link";

/// The retention when the setting is missing or invalid (the seed's default).
pub const DEFAULT_RETENTION_DAYS: u32 = 180;
pub const MIN_RETENTION_DAYS: u32 = 1;
pub const MAX_RETENTION_DAYS: u32 = 36_500;
/// Longest webhook URL accepted; longer ones are a typo or an abuse.
pub const MAX_WEBHOOK_URL_CHARS: usize = 2_000;

/// One known setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettingDef {
    pub key: &'static str,
    /// The value in effect while nothing is stored.
    pub default: &'static str,
    pub description_zh: &'static str,
    pub description_en: &'static str,
}

impl SettingDef {
    pub fn description(&self, lang: Lang) -> &'static str {
        lang.pick(self.description_zh, self.description_en)
    }
}

/// Every setting this service reads, in the order the API lists them.
pub const SETTINGS: [SettingDef; 3] = [
    SettingDef {
        key: RETENTION_DAYS,
        default: "180",
        description_zh: "执行记录、操作日志和站内信的保留天数（1–36500，填写无效时按 180 天），到期后由内置任务“清理过期日志”彻底删除。",
        description_en: "Days runs, audit entries and notifications are kept (1–36500; anything invalid means 180); the built-in job “Purge expired logs” deletes older ones.",
    },
    SettingDef {
        key: WEBHOOK_URL,
        default: "",
        description_zh: "站内信的 Webhook 地址（http 或 https）。填写后，新通知由内置任务“派发待发送通知”签名后推送到这个地址；留空表示不推送。",
        description_en: "Webhook URL (http or https) for notifications. When set, the built-in job “Dispatch pending notifications” delivers new notifications there, signed; empty means no delivery.",
    },
    SettingDef {
        key: RUN_LINK,
        default: "",
        description_zh: "告警里执行记录的链接（http 或 https，须包含 {runId}，可以包含 {jobId}），比如管理后台的执行记录页 https://admin.example.com/scheduler/runs/{runId}；留空时为接口地址 /api/runs/{runId}。",
        description_en: "The link alerts give to a run (http or https, with {runId} and optionally {jobId}), such as the admin console's run page https://admin.example.com/scheduler/runs/{runId}; empty means the API path /api/runs/{runId}.",
    },
];

/// The definition of a known key.
pub fn find(key: &str) -> Option<&'static SettingDef> {
    SETTINGS.iter().find(|s| s.key == key)
}

/// The retention in days a stored value means: 1–36 500, and 180 for
/// anything missing or invalid (so a typo never deletes everything).
pub fn retention_days(raw: Option<&str>) -> u32 {
    raw.and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|d| (MIN_RETENTION_DAYS..=MAX_RETENTION_DAYS).contains(d))
        .unwrap_or(DEFAULT_RETENTION_DAYS)
}

/// The webhook URL a stored value means; `None` when delivery is off.
pub fn webhook_url(raw: Option<&str>) -> Option<String> {
    let v = raw?.trim();
    check_webhook_url(v).ok().flatten()
}

/// The link to run `run_id` of job `job_id` that alerts give, from the
/// stored `notify.run_link`; the API path when it is empty or invalid.
pub fn run_link(raw: Option<&str>, run_id: i64, job_id: i64) -> String {
    match raw.map(str::trim) {
        Some(template) if check_run_link(template).is_ok_and(|t| t.is_some()) => template
            .replace("{runId}", &run_id.to_string())
            .replace("{jobId}", &job_id.to_string()),
        _ => format!("/api/runs/{run_id}"),
    }
}

/// `Ok(None)` for empty, `Ok(Some(template))` for an http(s) URL holding
/// `{runId}`.
fn check_run_link(value: &str) -> Result<Option<String>, SettingProblem> {
    if value.is_empty() {
        return Ok(None);
    }
    if !value.contains("{runId}") {
        return Err(SettingProblem::RunLink);
    }
    let example = value.replace("{runId}", "1").replace("{jobId}", "1");
    match check_webhook_url(&example) {
        Ok(Some(_)) => Ok(Some(value.to_string())),
        Ok(None) | Err(SettingProblem::WebhookUrl) => Err(SettingProblem::RunLink),
        Err(other) => Err(other),
    }
}

/// Why a value cannot be stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettingProblem {
    /// Not a whole number of days within the range.
    RetentionDays,
    /// Not an http(s) URL with a host.
    WebhookUrl,
    /// Not an http(s) URL with a host and `{runId}`.
    RunLink,
    /// Longer than the setting allows.
    TooLong { max: usize },
}

impl SettingProblem {
    pub fn message(&self, lang: Lang) -> String {
        match (self, lang) {
            (SettingProblem::RetentionDays, Lang::Zh) => {
                format!("保留天数必须是 {MIN_RETENTION_DAYS}–{MAX_RETENTION_DAYS} 之间的整数")
            }
            (SettingProblem::RetentionDays, Lang::En) => format!(
                "The retention must be a whole number of days from {MIN_RETENTION_DAYS} to {MAX_RETENTION_DAYS}"
            ),
            (SettingProblem::WebhookUrl, Lang::Zh) => {
                "Webhook 地址必须留空，或者是以 http:// 或 https:// 开头、带主机名的网址".into()
            }
            (SettingProblem::WebhookUrl, Lang::En) => {
                "The webhook URL must be empty or an http:// or https:// URL with a host".into()
            }
            (SettingProblem::RunLink, Lang::Zh) => {
                "执行记录链接必须留空，或者是以 http:// 或 https:// 开头、带主机名、包含 {runId} 的网址".into()
            }
            (SettingProblem::RunLink, Lang::En) => {
                "The run link must be empty or an http:// or https:// URL with a host and {runId}".into()
            }
            (SettingProblem::TooLong { max }, Lang::Zh) => format!("最多 {max} 个字符"),
            (SettingProblem::TooLong { max }, Lang::En) => format!("At most {max} characters"),
        }
    }
}

/// Checks a value for a known key and returns it in the form to store
/// (trimmed; a number without sign or leading zeros). `None` for an
/// unknown key: the caller answers 404.
pub fn validate(key: &str, value: &str) -> Option<Result<String, SettingProblem>> {
    let value = value.trim();
    match key {
        RETENTION_DAYS => Some(
            value
                .parse::<u32>()
                .ok()
                .filter(|_| value.bytes().all(|b| b.is_ascii_digit()))
                .filter(|d| (MIN_RETENTION_DAYS..=MAX_RETENTION_DAYS).contains(d))
                .map(|d| d.to_string())
                .ok_or(SettingProblem::RetentionDays),
        ),
        WEBHOOK_URL => Some(check_webhook_url(value).map(|u| u.unwrap_or_default())),
        RUN_LINK => Some(check_run_link(value).map(|u| u.unwrap_or_default())),
        _ => None,
    }
}

/// `Ok(None)` for empty, `Ok(Some(url))` for a usable http(s) URL.
fn check_webhook_url(value: &str) -> Result<Option<String>, SettingProblem> {
    if value.is_empty() {
        return Ok(None);
    }
    if value.chars().count() > MAX_WEBHOOK_URL_CHARS {
        return Err(SettingProblem::TooLong {
            max: MAX_WEBHOOK_URL_CHARS,
        });
    }
    // Whitespace inside would be percent-encoded silently by the parser;
    // it is almost certainly a paste error, so refuse it.
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(SettingProblem::WebhookUrl);
    }
    let url = url::Url::parse(value).map_err(|_| SettingProblem::WebhookUrl)?;
    let has_host = url.host_str().is_some_and(|h| !h.is_empty());
    if !matches!(url.scheme(), "http" | "https") || !has_host {
        return Err(SettingProblem::WebhookUrl);
    }
    Ok(Some(value.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_days_table() {
        let cases: [(Option<&str>, u32); 16] = [
            (None, 180),
            (Some(""), 180),
            (Some("   "), 180),
            (Some("1"), 1),
            (Some("30"), 30),
            (Some(" 30 "), 30),
            (Some("36500"), 36_500),
            (Some("36501"), 180),
            (Some("0"), 180),
            (Some("-5"), 180),
            (Some("abc"), 180),
            (Some("3.5"), 180),
            (Some("1e3"), 180),
            (Some("99999999999999999999"), 180),
            (Some("180"), 180),
            (Some("７"), 180),
        ];
        for (raw, want) in cases {
            assert_eq!(retention_days(raw), want, "{raw:?}");
        }
    }

    #[test]
    fn validate_retention_days() {
        let ok = [
            ("1", "1"),
            (" 365 ", "365"),
            ("007", "7"),
            ("36500", "36500"),
        ];
        for (input, stored) in ok {
            assert_eq!(
                validate(RETENTION_DAYS, input),
                Some(Ok(stored.into())),
                "{input}"
            );
        }
        for bad in ["", "0", "36501", "-1", "+5", "1.0", "ten", "1 2"] {
            assert_eq!(
                validate(RETENTION_DAYS, bad),
                Some(Err(SettingProblem::RetentionDays)),
                "{bad}"
            );
        }
    }

    #[test]
    fn validate_webhook_url() {
        let ok = [
            ("", ""),
            ("  ", ""),
            (
                "https://hooks.example.com/qiwu",
                "https://hooks.example.com/qiwu",
            ),
            ("http://127.0.0.1:9000/x?y=1", "http://127.0.0.1:9000/x?y=1"),
            (" HTTPS://Example.com ", "HTTPS://Example.com"),
        ];
        for (input, stored) in ok {
            assert_eq!(
                validate(WEBHOOK_URL, input),
                Some(Ok(stored.into())),
                "{input}"
            );
        }
        for bad in [
            "example.com",
            "ftp://example.com/x",
            "javascript:alert(1)",
            "http://",
            "http://exa mple.com",
            "file:///etc/passwd",
        ] {
            assert_eq!(
                validate(WEBHOOK_URL, bad),
                Some(Err(SettingProblem::WebhookUrl)),
                "{bad}"
            );
        }
        let long = format!("https://e.com/{}", "a".repeat(MAX_WEBHOOK_URL_CHARS));
        assert_eq!(
            validate(WEBHOOK_URL, &long),
            Some(Err(SettingProblem::TooLong {
                max: MAX_WEBHOOK_URL_CHARS
            }))
        );
        assert_eq!(
            webhook_url(Some(" https://e.com ")),
            Some("https://e.com".into())
        );
        assert_eq!(webhook_url(Some("nonsense")), None);
        assert_eq!(webhook_url(Some("")), None);
        assert_eq!(webhook_url(None), None);
    }

    #[test]
    fn run_links_table() {
        let ok = [
            ("", ""),
            (
                " https://admin.example.com/scheduler/runs/{runId} ",
                "https://admin.example.com/scheduler/runs/{runId}",
            ),
            (
                "http://a/jobs/{jobId}/runs/{runId}",
                "http://a/jobs/{jobId}/runs/{runId}",
            ),
        ];
        for (input, stored) in ok {
            assert_eq!(
                validate(RUN_LINK, input),
                Some(Ok(stored.into())),
                "{input}"
            );
        }
        for bad in [
            "https://a/runs",
            "ftp://a/{runId}",
            "{runId}",
            "https://a b/{runId}",
        ] {
            assert_eq!(
                validate(RUN_LINK, bad),
                Some(Err(SettingProblem::RunLink)),
                "{bad}"
            );
        }
        assert_eq!(run_link(None, 7, 3), "/api/runs/7");
        assert_eq!(run_link(Some(""), 7, 3), "/api/runs/7");
        assert_eq!(run_link(Some("https://a/runs"), 7, 3), "/api/runs/7");
        assert_eq!(
            run_link(Some("https://a/j/{jobId}/r/{runId}?x={runId}"), 7, 3),
            "https://a/j/3/r/7?x=7"
        );
    }

    #[test]
    fn unknown_keys_and_descriptions() {
        assert_eq!(validate("core.default_timezone", "UTC"), None);
        assert!(find("audit.retention_days").is_some());
        assert!(find("nope").is_none());
        for s in SETTINGS {
            assert!(!s.description(Lang::Zh).is_empty());
            assert!(!s.description(Lang::En).is_empty());
            // Every default is itself a valid value.
            assert_eq!(validate(s.key, s.default), Some(Ok(s.default.to_string())));
        }
    }
}
