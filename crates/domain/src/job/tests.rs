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
        spec.retry,
        crate::RetryTiming {
            backoff: crate::RetryBackoff::Fixed,
            interval_ms: 1000,
            max_interval_ms: 3_600_000,
            jitter: false,
        }
    );
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
            json!({"retryBackoff": "linear"}),
            "retryBackoff",
            JobProblem::UnknownRetryBackoff("linear".into()),
        ),
        (
            json!({"retryBackoff": 2}),
            "retryBackoff",
            JobProblem::WrongType("a string"),
        ),
        (
            json!({"retryMaxIntervalMs": 86_400_001}),
            "retryMaxIntervalMs",
            JobProblem::OutOfRange {
                min: 0,
                max: 86_400_000,
            },
        ),
        (
            json!({"retryIntervalMs": 5000, "retryMaxIntervalMs": 4999}),
            "retryMaxIntervalMs",
            JobProblem::MaxIntervalBelowInterval { interval_ms: 5000 },
        ),
        (
            json!({"retryJitter": "yes"}),
            "retryJitter",
            JobProblem::WrongType("a boolean"),
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

fn calendars() -> Vec<String> {
    vec!["cn-workdays".into(), "acme".into()]
}

/// Defaults (with the time rules') plus name and handler, `patch` on top.
fn timed_input(patch: Value) -> Map<String, Value> {
    let mut map = input(json!({}));
    map.extend(time_rule_defaults());
    if let Value::Object(patch) = patch {
        map.extend(patch);
    }
    map
}

#[test]
fn time_rules_default_to_todays_behaviour() {
    let (spec, rules) =
        validate_with_time_rules(&timed_input(json!({})), &catalog(), &groups(), &calendars())
            .expect("valid");
    assert_eq!(spec.name, "nightly");
    assert_eq!(rules, TimeRules::default());
    // Until jobs store them, the plain validation does not know them.
    let errors = validate(
        &timed_input(json!({"calendar": "cn-workdays", "calendarRule": "workdays"})),
        &catalog(),
        &groups(),
    )
    .expect_err("unknown to validate");
    let mut fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    fields.sort();
    let mut expected = TIME_RULE_FIELDS.to_vec();
    expected.sort();
    assert_eq!(fields, expected);
    assert!(errors.iter().all(|e| e.problem == JobProblem::UnknownField));
}

#[test]
fn accepts_time_rules_at_their_limits() {
    let cases = [
        json!({"calendar": "cn-workdays", "calendarRule": "workdays"}),
        json!({"calendar": "acme", "calendarRule": "holidays", "cron": "0 0 10 1-7 * *"}),
        json!({"calendar": "cn-workdays", "calendarRule": "exclude", "cron": "0 0 10 * * 1-5"}),
        json!({"activeFrom": "2026-01-01T00:00:00+08:00", "activeUntil": "2026-01-01T00:00:00+08:00"}),
        json!({"activeFrom": "2026-01-01T00:00:00Z", "activeUntil": null}),
        json!({"maxRuns": 1}),
        json!({"maxRuns": 1_000_000_000}),
        json!({"misfireGraceMs": 2_592_000_000_i64}),
        json!({"jitterMs": 86_399_999}),
        json!({"cron": "*/5 * * * * *", "jitterMs": 4_999}),
    ];
    for patch in cases {
        assert!(
            validate_with_time_rules(
                &timed_input(patch.clone()),
                &catalog(),
                &groups(),
                &calendars()
            )
            .is_ok(),
            "{patch}"
        );
    }
    let (_, rules) = validate_with_time_rules(
        &timed_input(json!({
            "calendar": "cn-workdays", "calendarRule": "workdays",
            "activeFrom": "2026-01-01T00:00:00+08:00", "maxRuns": 12,
            "misfireGraceMs": 600000, "jitterMs": 30000,
        })),
        &catalog(),
        &groups(),
        &calendars(),
    )
    .expect("valid");
    assert_eq!(
        rules,
        TimeRules {
            calendar: Some("cn-workdays".into()),
            calendar_rule: Some(CalendarRule::Workdays),
            misfire_grace_ms: 600_000,
            active_from: Some(
                chrono::DateTime::parse_from_rfc3339("2025-12-31T16:00:00Z")
                    .expect("time")
                    .with_timezone(&chrono::Utc)
            ),
            active_until: None,
            max_runs: Some(12),
            jitter_ms: 30_000,
        }
    );
    // The rules build the job's schedule.
    let schedule = rules
        .schedule(
            CronExpr::parse("0 0 0 * * *").expect("cron"),
            chrono_tz::Asia::Shanghai,
            Some(std::sync::Arc::clone(
                crate::calendar::builtin::cn_workdays(),
            )),
        )
        .expect("schedule");
    assert_eq!(schedule.jitter_ms(), 30_000);
    assert!(schedule.calendar().is_some());
}

#[test]
fn rejects_each_time_rule_naming_the_field() {
    let max = MAX_JITTER_MS;
    let cases: Vec<(Value, &str, JobProblem)> = vec![
        (
            json!({"calendar": "nope", "calendarRule": "workdays"}),
            "calendar",
            JobProblem::UnknownCalendar("nope".into()),
        ),
        (
            json!({"calendar": "acme", "calendarRule": "weekdays"}),
            "calendarRule",
            JobProblem::UnknownCalendarRule("weekdays".into()),
        ),
        (
            json!({"calendarRule": "workdays"}),
            "calendarRule",
            JobProblem::CalendarRuleAlone,
        ),
        (
            json!({"calendar": "acme"}),
            "calendarRule",
            JobProblem::CalendarWithoutRule,
        ),
        (
            json!({"activeUntil": " "}),
            "activeUntil",
            JobProblem::NotATime(" ".into()),
        ),
        (
            json!({"calendar": 3, "calendarRule": "workdays"}),
            "calendar",
            JobProblem::WrongType("a string or null"),
        ),
        (
            json!({"calendar": "cn-workdays", "calendarRule": "workdays", "cron": "0 0 10 * * 1-5"}),
            "cron",
            JobProblem::RuleNeedsEveryWeekday(CalendarRule::Workdays),
        ),
        (
            json!({"calendar": "cn-workdays", "calendarRule": "holidays", "cron": "0 0 10 * * 0,6"}),
            "cron",
            JobProblem::RuleNeedsEveryWeekday(CalendarRule::Holidays),
        ),
        (
            json!({"activeFrom": "2026-01-01 00:00"}),
            "activeFrom",
            JobProblem::NotATime("2026-01-01 00:00".into()),
        ),
        (
            json!({"activeUntil": "2026-01-01T00:00:00"}),
            "activeUntil",
            JobProblem::NotATime("2026-01-01T00:00:00".into()),
        ),
        (
            json!({"activeFrom": 1_767_225_600_000_i64}),
            "activeFrom",
            JobProblem::WrongType("a string or null"),
        ),
        (
            json!({"activeFrom": "2026-01-01T00:00:00+08:00", "activeUntil": "2025-12-31T15:59:59Z"}),
            "activeUntil",
            JobProblem::UntilBeforeFrom,
        ),
        (
            json!({"maxRuns": 0}),
            "maxRuns",
            JobProblem::OutOfRange {
                min: 1,
                max: MAX_MAX_RUNS,
            },
        ),
        (
            json!({"maxRuns": "3"}),
            "maxRuns",
            JobProblem::WrongType("an integer or null"),
        ),
        (
            json!({"maxRuns": 1.5}),
            "maxRuns",
            JobProblem::WrongType("an integer"),
        ),
        (
            json!({"misfireGraceMs": -1}),
            "misfireGraceMs",
            JobProblem::OutOfRange {
                min: 0,
                max: MAX_MISFIRE_GRACE_MS,
            },
        ),
        (
            json!({"misfireGraceMs": null}),
            "misfireGraceMs",
            JobProblem::Required,
        ),
        (
            json!({"jitterMs": 86_400_000}),
            "jitterMs",
            JobProblem::JitterTooLong {
                period_ms: 86_400_000,
            },
        ),
        (
            json!({"cron": "*/5 * * * * *", "jitterMs": 5_000}),
            "jitterMs",
            JobProblem::JitterTooLong { period_ms: 5_000 },
        ),
        (
            json!({"cron": "0 0 10 * * 1", "jitterMs": max + 1}),
            "jitterMs",
            JobProblem::OutOfRange { min: 0, max },
        ),
    ];
    for (patch, field, problem) in cases {
        let errors = validate_with_time_rules(
            &timed_input(patch.clone()),
            &catalog(),
            &groups(),
            &calendars(),
        )
        .expect_err("invalid");
        assert_eq!(errors.len(), 1, "{patch}: {errors:?}");
        assert_eq!(errors[0].field, field, "{patch}");
        assert_eq!(errors[0].problem, problem, "{patch}");
        assert!(!errors[0].message(Lang::Zh).is_empty());
        assert!(!errors[0].message(Lang::En).is_empty());
    }
    // A bad cron is reported once; the rules that need it wait for it.
    let errors = validate_with_time_rules(
        &timed_input(json!({"cron": "bad", "jitterMs": 5_000})),
        &catalog(),
        &groups(),
        &calendars(),
    )
    .expect_err("invalid");
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(fields, ["cron"]);
}

#[test]
fn time_rule_messages_say_what_to_do() {
    let cases = [
        (
            JobProblem::JitterTooLong { period_ms: 5_000 },
            "必须小于 Cron 的最短间隔 5 秒（5000 毫秒）",
            "Must be less than the cron's shortest period, 5 seconds (5000 ms)",
        ),
        (
            JobProblem::JitterTooLong {
                period_ms: 86_400_000,
            },
            "必须小于 Cron 的最短间隔 1 天（86400000 毫秒）",
            "Must be less than the cron's shortest period, 1 day (86400000 ms)",
        ),
        (
            JobProblem::CalendarWithoutRule,
            "选了日历就要选择规则：workdays、holidays 或 exclude",
            "A calendar needs a rule: workdays, holidays or exclude",
        ),
    ];
    for (problem, zh, en) in cases {
        let e = FieldError {
            field: "x".into(),
            problem,
        };
        assert_eq!(e.message(Lang::Zh), zh);
        assert_eq!(e.message(Lang::En), en);
    }
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

#[test]
fn retry_timing_is_read_and_absent_fields_keep_todays_fixed_interval() {
    let spec = validate(
        &input(
            json!({"retryBackoff": "exponential", "retryIntervalMs": 500,
                      "retryMaxIntervalMs": 8000, "retryJitter": true}),
        ),
        &catalog(),
        &groups(),
    )
    .expect("valid");
    assert_eq!(
        spec.retry,
        crate::RetryTiming {
            backoff: crate::RetryBackoff::Exponential,
            interval_ms: 500,
            max_interval_ms: 8000,
            jitter: true,
        }
    );
    let mut old = input(json!({"retryIntervalMs": 2000}));
    for field in ["retryBackoff", "retryMaxIntervalMs", "retryJitter"] {
        old.remove(field);
    }
    let spec = validate(&old, &catalog(), &groups()).expect("valid");
    assert_eq!(spec.retry.backoff, crate::RetryBackoff::Fixed);
    assert_eq!(spec.retry.interval_ms, 2000);
    assert!(!spec.retry.jitter);
}

#[test]
fn overlap_policy_and_its_compatible_view() {
    use crate::OverlapPolicy::{Allow, QueueOne, Replace, Skip};
    let cases: [(Value, OverlapPolicy, bool); 7] = [
        (json!({}), Skip, false),
        (json!({"allowConcurrent": true}), Allow, true),
        (json!({"overlapPolicy": "allow"}), Allow, true),
        (json!({"overlapPolicy": "queue_one"}), QueueOne, false),
        // The policy wins over the view it replaces.
        (
            json!({"overlapPolicy": "replace", "allowConcurrent": true}),
            Replace,
            false,
        ),
        (
            json!({"overlapPolicy": "skip", "allowConcurrent": true}),
            Skip,
            false,
        ),
        (
            json!({"overlapPolicy": null, "allowConcurrent": true}),
            Allow,
            true,
        ),
    ];
    for (patch, policy, allow) in cases {
        let spec = validate(&input(patch.clone()), &catalog(), &groups()).expect("valid");
        assert_eq!(
            (spec.overlap_policy, spec.allow_concurrent),
            (policy, allow),
            "{patch}"
        );
    }
    let errors = validate(
        &input(json!({"overlapPolicy": "serial"})),
        &catalog(),
        &groups(),
    )
    .expect_err("invalid");
    assert_eq!(errors[0].field, "overlapPolicy");
    assert!(
        errors[0].message(Lang::En).contains("queue_one"),
        "{errors:?}"
    );
}
