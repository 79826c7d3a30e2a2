//! Rules of "run once" requests (issue 10, part 5): the `Idempotency-Key`
//! that makes a retried request return the fire it started, the callback
//! URL a fire's end is reported to, and the report itself.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::Lang;

/// How long a caller's key keeps naming its fire; an older one is ignored
/// (and purged), so the key starts a new fire.
pub const KEY_TTL_HOURS: i64 = 24;
/// Longest `Idempotency-Key`, as wide as the column that keeps it.
pub const MAX_KEY_CHARS: usize = 255;
/// Longest callback URL, as wide as `fires.callback_url`.
pub const MAX_CALLBACK_URL_CHARS: usize = 2_048;

/// Why an `Idempotency-Key` is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyProblem {
    Empty,
    TooLong,
    /// Only visible ASCII (`!` to `~`) is allowed: no spaces, no controls,
    /// nothing a proxy might re-encode.
    NotVisibleAscii,
}

impl KeyProblem {
    pub fn message(self, lang: Lang) -> String {
        match (self, lang) {
            (KeyProblem::Empty, Lang::Zh) => "Idempotency-Key 不能为空".into(),
            (KeyProblem::Empty, Lang::En) => "Idempotency-Key must not be empty".into(),
            (KeyProblem::TooLong, Lang::Zh) => {
                format!("Idempotency-Key 最多 {MAX_KEY_CHARS} 个字符")
            }
            (KeyProblem::TooLong, Lang::En) => {
                format!("Idempotency-Key has at most {MAX_KEY_CHARS} characters")
            }
            (KeyProblem::NotVisibleAscii, Lang::Zh) => {
                "Idempotency-Key 只能包含可见 ASCII 字符（! 到 ~，不含空格）".into()
            }
            (KeyProblem::NotVisibleAscii, Lang::En) => {
                "Idempotency-Key may hold only visible ASCII characters (! to ~, no spaces)".into()
            }
        }
    }
}

/// Checks an `Idempotency-Key` header value (as raw bytes: a header that
/// is not even text is refused the same way).
pub fn check_key(value: &[u8]) -> Result<&str, KeyProblem> {
    if value.is_empty() {
        return Err(KeyProblem::Empty);
    }
    if !value.iter().all(|b| (b'!'..=b'~').contains(b)) {
        return Err(KeyProblem::NotVisibleAscii);
    }
    if value.len() > MAX_KEY_CHARS {
        return Err(KeyProblem::TooLong);
    }
    // Visible ASCII is UTF-8.
    std::str::from_utf8(value).map_err(|_| KeyProblem::NotVisibleAscii)
}

/// Why a callback URL is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallbackProblem {
    TooLong,
    /// Not an `http`/`https` URL with a host, or with spaces or controls.
    BadUrl,
}

impl CallbackProblem {
    pub fn message(self, lang: Lang) -> String {
        match (self, lang) {
            (CallbackProblem::TooLong, Lang::Zh) => {
                format!("callbackUrl 最多 {MAX_CALLBACK_URL_CHARS} 个字符")
            }
            (CallbackProblem::TooLong, Lang::En) => {
                format!("callbackUrl has at most {MAX_CALLBACK_URL_CHARS} characters")
            }
            (CallbackProblem::BadUrl, Lang::Zh) => {
                "callbackUrl 应为带主机名的 http 或 https 地址，且不含空白或控制字符".into()
            }
            (CallbackProblem::BadUrl, Lang::En) => {
                "callbackUrl must be an http or https URL with a host, without spaces or control characters".into()
            }
        }
    }
}

/// Checks a callback URL: `http://` or `https://` (lower case), with a
/// host, at most [`MAX_CALLBACK_URL_CHARS`] characters.
pub fn check_callback_url(value: &str) -> Result<(), CallbackProblem> {
    if value.chars().count() > MAX_CALLBACK_URL_CHARS {
        return Err(CallbackProblem::TooLong);
    }
    // Whitespace would be percent-encoded silently by the parser: almost
    // certainly a paste error.
    if value.is_empty() || value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(CallbackProblem::BadUrl);
    }
    // Written in lower case, as the document's pattern says (the parser
    // would accept `HTTPS:` too).
    if !(value.starts_with("http://") || value.starts_with("https://")) {
        return Err(CallbackProblem::BadUrl);
    }
    let url = url::Url::parse(value).map_err(|_| CallbackProblem::BadUrl)?;
    if url.host_str().is_none_or(str::is_empty) {
        return Err(CallbackProblem::BadUrl);
    }
    Ok(())
}

/// What a fire started by run once reports to its callback URL when it
/// ends (after its retries).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallbackReport {
    pub fire_id: i64,
    pub job_id: i64,
    /// The last attempt's run status: `success`, `failed`, `timeout`,
    /// `cancelled` or `skipped`.
    pub status: String,
    /// Attempts made (1 plus the retries).
    pub attempts: u32,
    /// When the first attempt started.
    pub started_at: Option<DateTime<Utc>>,
    /// When the last attempt ended.
    pub finished_at: DateTime<Utc>,
    /// The last attempt's error; null when it has none.
    pub error: Option<String>,
}

impl CallbackReport {
    /// The JSON body POSTed.
    pub fn body(&self) -> String {
        // A struct of plain fields always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn keys_table() {
        let long = "k".repeat(MAX_KEY_CHARS);
        let longer = "k".repeat(MAX_KEY_CHARS + 1);
        let cases: [(&[u8], Result<&str, KeyProblem>); 9] = [
            (b"a", Ok("a")),
            (b"order-42:retry~!", Ok("order-42:retry~!")),
            (long.as_bytes(), Ok(long.as_str())),
            (longer.as_bytes(), Err(KeyProblem::TooLong)),
            (b"", Err(KeyProblem::Empty)),
            (b"two words", Err(KeyProblem::NotVisibleAscii)),
            (b"tab\there", Err(KeyProblem::NotVisibleAscii)),
            ("键".as_bytes(), Err(KeyProblem::NotVisibleAscii)),
            (b"del\x7f", Err(KeyProblem::NotVisibleAscii)),
        ];
        for (value, expected) in cases {
            assert_eq!(check_key(value), expected, "{value:?}");
        }
        for p in [
            KeyProblem::Empty,
            KeyProblem::TooLong,
            KeyProblem::NotVisibleAscii,
        ] {
            assert!(p.message(Lang::Zh).contains("Idempotency-Key"));
            assert!(p.message(Lang::En).contains("Idempotency-Key"));
        }
    }

    #[test]
    fn callback_urls_table() {
        let long = format!("https://h.example/{}", "p".repeat(MAX_CALLBACK_URL_CHARS));
        let cases: [(&str, Result<(), CallbackProblem>); 11] = [
            ("https://hooks.example.com/done?token=x", Ok(())),
            (
                "HTTPS://hooks.example.com/done",
                Err(CallbackProblem::BadUrl),
            ),
            ("http://[::1", Err(CallbackProblem::BadUrl)),
            ("http://127.0.0.1:8080/cb", Ok(())),
            ("ftp://files.example.com/cb", Err(CallbackProblem::BadUrl)),
            ("file:///etc/passwd", Err(CallbackProblem::BadUrl)),
            ("hooks.example.com/cb", Err(CallbackProblem::BadUrl)),
            ("https://", Err(CallbackProblem::BadUrl)),
            ("https://a.example/ b", Err(CallbackProblem::BadUrl)),
            ("", Err(CallbackProblem::BadUrl)),
            (long.as_str(), Err(CallbackProblem::TooLong)),
        ];
        for (value, expected) in cases {
            assert_eq!(check_callback_url(value), expected, "{value}");
        }
        assert!(CallbackProblem::BadUrl.message(Lang::En).contains("https"));
    }

    #[test]
    fn report_body_names_every_field() {
        let at = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 5).unwrap();
        let report = CallbackReport {
            fire_id: 9,
            job_id: 3,
            status: "failed".into(),
            attempts: 3,
            started_at: Some(at),
            finished_at: at,
            error: Some("boom".into()),
        };
        let body: serde_json::Value = serde_json::from_str(&report.body()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "fireId": 9, "jobId": 3, "status": "failed", "attempts": 3,
                "startedAt": "2026-03-01T00:00:05Z", "finishedAt": "2026-03-01T00:00:05Z",
                "error": "boom"
            })
        );
    }
}
