//! The chat robots alerts go to, each as its platform documents it:
//!
//! - DingTalk custom robot: a `markdown` message; with a signing secret
//!   the URL gets `timestamp` (Unix ms) and `sign` = URL-encoded base64 of
//!   HMAC-SHA256 keyed by the secret over `"{timestamp}\n{secret}"`. The
//!   answer is HTTP 200 with `errcode` 0.
//! - WeCom group robot: a `markdown` message POSTed to the URL with its
//!   `key`; the answer is HTTP 200 with `errcode` 0.
//! - Feishu/Lark custom bot: a `text` message; with a signing secret the
//!   body gets `timestamp` (Unix seconds, a string) and `sign` = base64 of
//!   HMAC-SHA256 keyed by `"{timestamp}\n{secret}"` over an empty message.
//!   The answer is HTTP 200 with `code` 0 (older bots: `StatusCode` 0).
//!
//! The body is built when the alert is stored (the outbox keeps it); the
//! timestamp and signature are added at each send, as the platforms refuse
//! signatures more than an hour old.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

/// Longest text put in one robot message. WeCom's markdown takes 4096
/// bytes; the others more, and an alert needs far less.
const MAX_TEXT_BYTES: usize = 4_000;

/// The DingTalk `markdown` message of an alert.
pub fn dingtalk_body(title: &str, body: &str) -> String {
    json!({
        "msgtype": "markdown",
        "markdown": {
            "title": title,
            "text": cut_bytes(&format!("#### {title}\n\n{body}"), MAX_TEXT_BYTES),
        },
    })
    .to_string()
}

/// The WeCom `markdown` message of an alert.
pub fn wecom_body(title: &str, body: &str) -> String {
    json!({
        "msgtype": "markdown",
        "markdown": {
            "content": cut_bytes(&format!("**{title}**\n{body}"), MAX_TEXT_BYTES),
        },
    })
    .to_string()
}

/// The Feishu `text` message of an alert (the signature is added at send).
pub fn feishu_body(title: &str, body: &str) -> String {
    json!({
        "msg_type": "text",
        "content": {
            "text": cut_bytes(&format!("{title}\n{body}"), MAX_TEXT_BYTES),
        },
    })
    .to_string()
}

fn cut_bytes(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    // HMAC takes keys of any length, so this cannot fail.
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(key) else {
        return Vec::new();
    };
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

/// DingTalk's `sign` before URL encoding.
pub fn dingtalk_sign(secret: &str, timestamp_ms: i64) -> String {
    let to_sign = format!("{timestamp_ms}\n{secret}");
    STANDARD.encode(hmac_sha256(secret.as_bytes(), to_sign.as_bytes()))
}

/// The URL a DingTalk message is POSTed to: the robot's, plus `timestamp`
/// and the URL-encoded `sign` when the robot has a signing secret.
pub fn dingtalk_url(url: &str, secret: Option<&str>, timestamp_ms: i64) -> String {
    let Some(secret) = secret else {
        return url.to_string();
    };
    let sign: String =
        url::form_urlencoded::byte_serialize(dingtalk_sign(secret, timestamp_ms).as_bytes())
            .collect();
    let joiner = if url.contains('?') { '&' } else { '?' };
    format!("{url}{joiner}timestamp={timestamp_ms}&sign={sign}")
}

/// Feishu's `sign`: the key is `"{timestamp}\n{secret}"`, the message empty.
pub fn feishu_sign(secret: &str, timestamp_s: i64) -> String {
    let key = format!("{timestamp_s}\n{secret}");
    STANDARD.encode(hmac_sha256(key.as_bytes(), b""))
}

/// A stored Feishu body with `timestamp` and `sign` added when the bot has
/// a signing secret.
pub fn feishu_signed(payload: &str, secret: Option<&str>, timestamp_s: i64) -> String {
    let Some(secret) = secret else {
        return payload.to_string();
    };
    match serde_json::from_str::<Value>(payload) {
        Ok(Value::Object(mut map)) => {
            map.insert("timestamp".into(), Value::from(timestamp_s.to_string()));
            map.insert("sign".into(), Value::from(feishu_sign(secret, timestamp_s)));
            Value::Object(map).to_string()
        }
        // Only a row written outside this service can hold anything else;
        // sent as it is, the bot's answer says what is wrong.
        _ => payload.to_string(),
    }
}

/// Whether a robot's answer (HTTP 200) accepted the message: DingTalk and
/// WeCom answer `errcode` 0, Feishu `code` 0 (or `StatusCode` 0).
pub fn accepted(answer: &str) -> Result<(), String> {
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(answer) else {
        return Err(format!(
            "the robot's answer is not JSON: {}",
            cut_bytes(answer, 200)
        ));
    };
    let code = ["errcode", "code", "StatusCode"]
        .iter()
        .find_map(|k| map.get(*k).and_then(Value::as_i64));
    match code {
        Some(0) => Ok(()),
        Some(code) => {
            let message = ["errmsg", "msg", "StatusMessage"]
                .iter()
                .find_map(|k| map.get(*k).and_then(Value::as_str))
                .unwrap_or("");
            Err(format!(
                "the robot refused the message: {code} {}",
                cut_bytes(message, 200)
            ))
        }
        None => Err(format!(
            "the robot's answer has no result code: {}",
            cut_bytes(answer, 200)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_table() {
        let cases = [
            (r#"{"errcode":0,"errmsg":"ok"}"#, true),
            (r#"{"code":0,"msg":"success","data":{}}"#, true),
            (r#"{"StatusCode":0,"StatusMessage":"success"}"#, true),
            (r#"{"errcode":310000,"errmsg":"sign not match"}"#, false),
            (
                r#"{"code":19021,"msg":"sign match fail or timestamp is not within one hour from current time"}"#,
                false,
            ),
            (r#"{"ok":true}"#, false),
            ("<html>", false),
        ];
        for (answer, ok) in cases {
            assert_eq!(accepted(answer).is_ok(), ok, "{answer}");
        }
        assert!(
            accepted(r#"{"errcode":93000,"errmsg":"invalid webhook url"}"#)
                .unwrap_err()
                .contains("93000 invalid webhook url")
        );
    }

    #[test]
    fn bodies_are_the_documented_messages() {
        let ding: Value = serde_json::from_str(&dingtalk_body("任务失败：报表", "正文")).unwrap();
        assert_eq!(ding["msgtype"], "markdown");
        assert_eq!(ding["markdown"]["title"], "任务失败：报表");
        assert_eq!(ding["markdown"]["text"], "#### 任务失败：报表\n\n正文");
        let wecom: Value = serde_json::from_str(&wecom_body("T", "B")).unwrap();
        assert_eq!(
            wecom,
            json!({"msgtype": "markdown", "markdown": {"content": "**T**\nB"}})
        );
        let feishu: Value = serde_json::from_str(&feishu_body("T", "B")).unwrap();
        assert_eq!(
            feishu,
            json!({"msg_type": "text", "content": {"text": "T\nB"}})
        );
        // Long texts are cut on a character boundary.
        let long = wecom_body("T", &"告".repeat(3000));
        let v: Value = serde_json::from_str(&long).unwrap();
        assert!(v["markdown"]["content"].as_str().unwrap().len() <= MAX_TEXT_BYTES);
    }

    #[test]
    fn unsigned_robots_are_left_as_they_are() {
        assert_eq!(
            dingtalk_url("https://x/robot/send?access_token=a", None, 1),
            "https://x/robot/send?access_token=a"
        );
        assert_eq!(feishu_signed("{\"a\":1}", None, 1), "{\"a\":1}");
        let signed = dingtalk_url(
            "https://x/robot/send?access_token=a",
            Some("SEC"),
            1_700_000_000_000,
        );
        assert!(
            signed.starts_with("https://x/robot/send?access_token=a&timestamp=1700000000000&sign=")
        );
        // The base64 signature is URL-encoded: no bare `+`, `/` or `=`.
        let sign = signed.split("&sign=").nth(1).unwrap();
        assert!(!sign.contains(['+', '/', '=']), "{sign}");
        assert_eq!(
            url::form_urlencoded::parse(format!("s={sign}").as_bytes())
                .next()
                .unwrap()
                .1,
            dingtalk_sign("SEC", 1_700_000_000_000)
        );
    }
}
