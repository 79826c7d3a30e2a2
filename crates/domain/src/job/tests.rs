//! Every field rule of SPEC §3, one table row per limit.

use serde_json::{Map, Value, json};

use super::*;
use crate::handler::{HandlerCatalog, HandlerDescriptor};

fn catalog() -> HandlerCatalog {
    let echo = HandlerDescriptor::new(
        "demo.echo",
        ("示例：回显消息", "Example: echo"),
        ("", ""),
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "message": {"type": "string", "maxLength": 200, "default": "hello"},
                "delayMs": {"type": "integer", "minimum": 0, "maximum": 600000, "default": 0}
            }
        }),
    )
    .expect("echo");
    HandlerCatalog::new([echo]).expect("catalog")
}

fn groups() -> Vec<String> {
    vec!["default".into(), "system".into()]
}

/// Defaults plus name and handler, with `patch` applied on top.
fn input(patch: Value) -> Map<String, Value> {
    let mut map = defaults();
    map.insert("name".into(), json!("nightly"));
    map.insert("handler".into(), json!("demo.echo"));
    if let Value::Object(patch) = patch {
        for (k, v) in patch {
            map.insert(k, v);
        }
    }
    map
}

#[test]
fn defaults_make_a_valid_job() {
    let spec = validate(&input(json!({})), &catalog(), &groups()).expect("valid");
    assert_eq!(spec.name, "nightly");
    assert_eq!(spec.group, "default");
    assert_eq!(spec.cron.as_str(), "0 0 0 * * *");
    assert_eq!(spec.timezone, None);
    assert!(spec.enabled);
    assert_eq!(spec.retry_count, 0);
    assert_eq!(spec.retry_interval_ms, 1000);
    assert_eq!(spec.timeout_ms, 60000);
    assert!(!spec.allow_concurrent);
    assert_eq!(spec.misfire_policy, MisfirePolicy::Skip);
    assert_eq!(spec.remark, "");
    assert_eq!(
        Value::Object(spec.params),
        json!({"message": "hello", "delayMs": 0})
    );
}

#[test]
fn accepts_values_at_the_limits() {
    let cases = [
        json!({"name": "x"}),
        json!({"name": "名".repeat(64)}),
        json!({"retryCount": 10, "retryIntervalMs": 3_600_000, "timeoutMs": 86_400_000}),
        json!({"retryCount": 0, "retryIntervalMs": 0, "timeoutMs": 0}),
        json!({"remark": "注".repeat(500)}),
        json!({"timezone": "Asia/Shanghai"}),
        json!({"timezone": ""}),
        json!({"misfirePolicy": "run_once", "group": "system", "allowConcurrent": true}),
        json!({"cron": "*/5 * * * *", "enabled": false}),
        json!({"id": 5, "version": 3, "builtin": true, "createdAt": "x"}),
    ];
    for patch in cases {
        assert!(
            validate(&input(patch.clone()), &catalog(), &groups()).is_ok(),
            "{patch}"
        );
    }
}

#[test]
fn rejects_each_limit_naming_the_field() {
    let cases: Vec<(Value, &str, JobProblem)> = vec![
        (json!({"name": null}), "name", JobProblem::Required),
        (json!({"name": "   "}), "name", JobProblem::Blank),
        (
            json!({"name": "名".repeat(65)}),
            "name",
            JobProblem::TooLong { max: 64, chars: 65 },
        ),
        (
            json!({"name": 5}),
            "name",
            JobProblem::WrongType("a string"),
        ),
        (
            json!({"group": "nope"}),
            "group",
            JobProblem::UnknownGroup("nope".into()),
        ),
        (
            json!({"handler": "rm.rf"}),
            "handler",
            JobProblem::UnknownHandler("rm.rf".into()),
        ),
        (json!({"handler": null}), "handler", JobProblem::Required),
        (
            json!({"cron": "0 0 0 30 2 *"}),
            "cron",
            JobProblem::Cron(CronError::NeverFires),
        ),
        (
            json!({"timezone": "Mars/Base"}),
            "timezone",
            JobProblem::UnknownTimezone("Mars/Base".into()),
        ),
        (
            json!({"timezone": 8}),
            "timezone",
            JobProblem::WrongType("a string or null"),
        ),
        (
            json!({"enabled": "yes"}),
            "enabled",
            JobProblem::WrongType("a boolean"),
        ),
        (
            json!({"retryCount": -1}),
            "retryCount",
            JobProblem::OutOfRange { min: 0, max: 10 },
        ),
        (
            json!({"retryCount": 11}),
            "retryCount",
            JobProblem::OutOfRange { min: 0, max: 10 },
        ),
        (
            json!({"retryCount": 1.5}),
            "retryCount",
            JobProblem::WrongType("an integer"),
        ),
        (
            json!({"retryCount": "1"}),
            "retryCount",
            JobProblem::WrongType("an integer"),
        ),
        (
            json!({"retryIntervalMs": 3_600_001}),
            "retryIntervalMs",
            JobProblem::OutOfRange {
                min: 0,
                max: 3_600_000,
            },
        ),
        (
            json!({"retryIntervalMs": -1}),
            "retryIntervalMs",
            JobProblem::OutOfRange {
                min: 0,
                max: 3_600_000,
            },
        ),
        (
            json!({"timeoutMs": 86_400_001}),
            "timeoutMs",
            JobProblem::OutOfRange {
                min: 0,
                max: 86_400_000,
            },
        ),
        (
            json!({"timeoutMs": 1e30}),
            "timeoutMs",
            JobProblem::OutOfRange {
                min: 0,
                max: 86_400_000,
            },
        ),
        (
            json!({"allowConcurrent": 1}),
            "allowConcurrent",
            JobProblem::WrongType("a boolean"),
        ),
        (
            json!({"misfirePolicy": "fire_all"}),
            "misfirePolicy",
            JobProblem::UnknownMisfirePolicy("fire_all".into()),
        ),
        (
            json!({"remark": "注".repeat(501)}),
            "remark",
            JobProblem::TooLong {
                max: 500,
                chars: 501,
            },
        ),
        (
            json!({"retry_count": 1}),
            "retry_count",
            JobProblem::UnknownField,
        ),
        (
            json!({"name": "a\u{0}b"}),
            "name",
            JobProblem::ControlCharacter,
        ),
        (
            json!({"name": "nightly\n"}),
            "name",
            JobProblem::ControlCharacter,
        ),
        (
            json!({"name": "tab\there"}),
            "name",
            JobProblem::ControlCharacter,
        ),
        (
            json!({"remark": "del\u{7f}"}),
            "remark",
            JobProblem::ControlCharacter,
        ),
        (
            json!({"remark": "line one\r\nline two"}),
            "remark",
            JobProblem::ControlCharacter,
        ),
    ];
    for (patch, field, problem) in cases {
        let errors = validate(&input(patch.clone()), &catalog(), &groups()).expect_err("invalid");
        assert_eq!(errors.len(), 1, "{patch}: {errors:?}");
        assert_eq!(errors[0].field, field, "{patch}");
        assert_eq!(errors[0].problem, problem, "{patch}");
        assert!(!errors[0].message(Lang::Zh).is_empty());
        assert!(!errors[0].message(Lang::En).is_empty());
    }
}

#[test]
fn unknown_handler_message_is_the_manuals() {
    let errors =
        validate(&input(json!({"handler": "x.y"})), &catalog(), &groups()).expect_err("unknown");
    assert_eq!(
        errors[0].message(Lang::Zh),
        "处理器 x.y 不存在：只能选择系统已注册的处理器"
    );
    assert_eq!(
        errors[0].message(Lang::En),
        "Handler x.y does not exist: only registered handlers can be chosen"
    );
}

#[test]
fn params_errors_are_reported_under_params() {
    let errors = validate(
        &input(json!({"params": {"delayMs": 600001, "message": 3}})),
        &catalog(),
        &groups(),
    )
    .expect_err("invalid params");
    let mut fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    fields.sort();
    assert_eq!(fields, ["params/delayMs", "params/message"]);
}

#[test]
fn reports_every_bad_field_at_once() {
    let errors = validate(
        &input(json!({"name": "", "cron": "bad", "retryCount": 99})),
        &catalog(),
        &groups(),
    )
    .expect_err("invalid");
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(fields, ["name", "retryCount", "cron"]);
}

#[test]
fn trims_text_fields() {
    let spec = validate(
        &input(json!({"name": "  nightly  ", "timezone": " UTC "})),
        &catalog(),
        &groups(),
    )
    .expect("valid");
    assert_eq!(spec.name, "nightly");
    assert_eq!(spec.timezone, Some(chrono_tz::UTC));
}

#[test]
fn control_characters_are_only_c0_and_del() {
    let cases = [
        ("plain", false),
        ("名字 · 备注", false),
        ("\u{80}\u{85}\u{a0}", false),
        ("\u{0}", true),
        ("\u{1f}", true),
        ("x\u{7f}", true),
        ("\t", true),
    ];
    for (text, control) in cases {
        assert_eq!(has_control(text), control, "{text:?}");
    }
}

/// Two handlers with different defaults, for the handler-change rule.
fn two_handlers() -> HandlerCatalog {
    let echo = HandlerDescriptor::new(
        "demo.echo",
        ("回显", "Echo"),
        ("", ""),
        json!({"type": "object", "properties": {
            "message": {"type": "string", "default": "hello"},
            "delayMs": {"type": "integer", "default": 0}
        }}),
    )
    .expect("echo");
    let purge = HandlerDescriptor::new(
        "audit.purge",
        ("清理", "Purge"),
        ("", ""),
        json!({"type": "object", "properties": {"batch": {"type": "integer", "default": 5000}}}),
    )
    .expect("purge");
    HandlerCatalog::new([echo, purge]).expect("catalog")
}

#[test]
fn changing_the_handler_swaps_empty_or_default_params() {
    let catalog = two_handlers();
    let swapped = Some(json!({}));
    let cases: Vec<(Option<Value>, &str, &str, Option<Value>)> = vec![
        // The same handler: params are never touched.
        (Some(json!({})), "demo.echo", "demo.echo", None),
        // Empty in any spelling: the new handler's defaults.
        (None, "demo.echo", "audit.purge", swapped.clone()),
        (
            Some(Value::Null),
            "demo.echo",
            "audit.purge",
            swapped.clone(),
        ),
        (Some(json!({})), "demo.echo", "audit.purge", swapped.clone()),
        (
            Some(json!("  ")),
            "demo.echo",
            "audit.purge",
            swapped.clone(),
        ),
        (
            Some(json!("{}")),
            "demo.echo",
            "audit.purge",
            swapped.clone(),
        ),
        // Still the old handler's defaults, as an object or as text.
        (
            Some(json!({"message": "hello", "delayMs": 0})),
            "demo.echo",
            "audit.purge",
            swapped.clone(),
        ),
        (
            Some(json!("{\"delayMs\": 0, \"message\": \"hello\"}")),
            "demo.echo",
            "audit.purge",
            swapped.clone(),
        ),
        // Edited params are the user's: kept, and checked against the new schema.
        (
            Some(json!({"message": "hi", "delayMs": 0})),
            "demo.echo",
            "audit.purge",
            None,
        ),
        (Some(json!({"batch": 10})), "demo.echo", "audit.purge", None),
        // An old handler that is gone has no defaults to compare with.
        (Some(json!({"x": 1})), "gone.handler", "demo.echo", None),
        (
            Some(json!({})),
            "gone.handler",
            "demo.echo",
            swapped.clone(),
        ),
    ];
    for (params, old, new, want) in cases {
        assert_eq!(
            params_for_new_handler(params.as_ref(), old, new, &catalog),
            want,
            "{params:?} {old} → {new}"
        );
    }
}
