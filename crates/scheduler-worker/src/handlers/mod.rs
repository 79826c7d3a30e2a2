//! The built-in handlers' descriptors: the whitelist the API offers.

use qiwu_domain::{HandlerCatalog, HandlerDescriptor, HandlerError};
use serde_json::json;

/// `demo.echo`: waits `delayMs`, then returns `message`.
fn demo_echo() -> Result<HandlerDescriptor, HandlerError> {
    HandlerDescriptor::new(
        "demo.echo",
        ("示例：回显消息", "Example: echo a message"),
        (
            "等待 delayMs 毫秒（收到停止通知时立即停止），然后原样返回 message。",
            "Waits delayMs milliseconds (stopping at once when told to), then returns message.",
        ),
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "message": {
                    "type": "string",
                    "maxLength": 200,
                    "default": "hello",
                    "title": "message",
                    "description": "The text to return"
                },
                "delayMs": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": 600000,
                    "default": 0,
                    "title": "delayMs",
                    "description": "Milliseconds to wait first"
                }
            }
        }),
    )
}

/// `audit.purge`: deletes expired runs, audit entries and notifications.
fn audit_purge() -> Result<HandlerDescriptor, HandlerError> {
    HandlerDescriptor::new(
        "audit.purge",
        ("清理过期日志", "Purge expired logs"),
        (
            "按 audit.retention_days（默认 180 天）分批（每批 5000 条）彻底删除过期的执行记录、操作日志和站内信。",
            "Deletes, in batches of 5000, runs, audit entries and notifications older than the audit.retention_days setting (default 180).",
        ),
        json!({"type": "object", "additionalProperties": false, "properties": {}}),
    )
}

/// `notify.dispatch`: delivers pending notifications through the outbox.
fn notify_dispatch() -> Result<HandlerDescriptor, HandlerError> {
    HandlerDescriptor::new(
        "notify.dispatch",
        ("派发待发送通知", "Dispatch pending notifications"),
        (
            "补发还没发出或发送失败的通知，每条最多尝试 3 次。",
            "Delivers pending or failed notifications, at most 3 attempts each.",
        ),
        json!({"type": "object", "additionalProperties": false, "properties": {}}),
    )
}

/// The catalog of handlers compiled into this binary.
pub fn builtin_catalog() -> Result<HandlerCatalog, HandlerError> {
    HandlerCatalog::new([demo_echo()?, audit_purge()?, notify_dispatch()?])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_catalog_is_valid() {
        let catalog = builtin_catalog().expect("catalog");
        let names: Vec<&str> = catalog.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["audit.purge", "demo.echo", "notify.dispatch"]);
        let echo = catalog.get("demo.echo").expect("echo");
        assert_eq!(
            serde_json::Value::Object(echo.default_params()),
            json!({"message": "hello", "delayMs": 0})
        );
    }
}
