//! Job params: a JSON object, at most 4000 characters serialized, with the
//! handler schema's defaults filled in and then validated against it.

use std::fmt;
use std::sync::Arc;

use jsonschema::error::ValidationErrorKind;
use serde_json::{Map, Value};

use crate::lang::Lang;

/// Most characters the serialized params may have (SPEC §3).
pub const MAX_PARAMS_CHARS: usize = 4000;

/// A handler's params JSON Schema, compiled once at start-up. It lives with
/// the params it checks; a handler descriptor only carries one.
#[derive(Clone)]
pub struct ParamsSchema {
    raw: Value,
    validator: Arc<jsonschema::Validator>,
}

impl fmt::Debug for ParamsSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ParamsSchema").field(&self.raw).finish()
    }
}

/// Why a params schema cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("the params schema must describe an object")]
    NotAnObject,
    #[error("invalid params schema: {0}")]
    Invalid(String),
}

impl ParamsSchema {
    /// Compiles a schema; no remote `$ref` is ever fetched (the `jsonschema`
    /// crate is built without its resolvers).
    pub fn compile(raw: Value) -> Result<ParamsSchema, SchemaError> {
        if raw.get("type").and_then(Value::as_str) != Some("object") {
            return Err(SchemaError::NotAnObject);
        }
        let validator =
            jsonschema::validator_for(&raw).map_err(|e| SchemaError::Invalid(e.to_string()))?;
        Ok(ParamsSchema {
            raw,
            validator: Arc::new(validator),
        })
    }

    pub fn raw(&self) -> &Value {
        &self.raw
    }

    fn validator(&self) -> &jsonschema::Validator {
        &self.validator
    }
}

/// One problem with the params, located by a JSON pointer under `params`.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamError {
    /// JSON pointer inside the params object, `""` for the object itself.
    pub pointer: String,
    pub problem: ParamProblem,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ParamProblem {
    NotAnObject,
    InvalidJson(String),
    TooLong {
        chars: usize,
    },
    Missing,
    WrongType(String),
    TooSmall(String),
    TooLarge(String),
    TooShort(u64),
    TooLongText(u64),
    NotAllowed(Vec<String>),
    NotInEnum(String),
    /// Any other schema keyword, with the validator's English detail.
    Other(String),
}

impl ParamError {
    /// The field name used in API errors: `params` plus the pointer.
    pub fn field(&self) -> String {
        format!("params{}", self.pointer)
    }

    pub fn is_missing_required(&self) -> bool {
        self.problem == ParamProblem::Missing
    }

    pub fn message(&self, lang: Lang) -> String {
        let name = self.pointer.rsplit('/').next().unwrap_or_default();
        match (&self.problem, lang) {
            (ParamProblem::NotAnObject, Lang::Zh) => {
                "参数必须是一个 JSON 对象，比如 {\"message\":\"hello\"}".into()
            }
            (ParamProblem::NotAnObject, Lang::En) => {
                "Params must be a JSON object, such as {\"message\":\"hello\"}".into()
            }
            (ParamProblem::InvalidJson(e), Lang::Zh) => format!("参数不是合法的 JSON：{e}"),
            (ParamProblem::InvalidJson(e), Lang::En) => format!("Params are not valid JSON: {e}"),
            (ParamProblem::TooLong { chars }, Lang::Zh) => {
                format!("参数最多 {MAX_PARAMS_CHARS} 个字符，现在是 {chars} 个")
            }
            (ParamProblem::TooLong { chars }, Lang::En) => {
                format!("Params may have at most {MAX_PARAMS_CHARS} characters, got {chars}")
            }
            (ParamProblem::Missing, Lang::Zh) => format!("缺少必填参数 {name}"),
            (ParamProblem::Missing, Lang::En) => format!("Required param {name} is missing"),
            (ParamProblem::WrongType(t), Lang::Zh) => format!("参数 {name} 的类型应为 {t}"),
            (ParamProblem::WrongType(t), Lang::En) => format!("Param {name} must be of type {t}"),
            (ParamProblem::TooSmall(l), Lang::Zh) => format!("参数 {name} 不能小于 {l}"),
            (ParamProblem::TooSmall(l), Lang::En) => format!("Param {name} must be at least {l}"),
            (ParamProblem::TooLarge(l), Lang::Zh) => format!("参数 {name} 不能大于 {l}"),
            (ParamProblem::TooLarge(l), Lang::En) => format!("Param {name} must be at most {l}"),
            (ParamProblem::TooShort(n), Lang::Zh) => format!("参数 {name} 至少 {n} 个字符"),
            (ParamProblem::TooShort(n), Lang::En) => {
                format!("Param {name} needs at least {n} characters")
            }
            (ParamProblem::TooLongText(n), Lang::Zh) => format!("参数 {name} 最多 {n} 个字符"),
            (ParamProblem::TooLongText(n), Lang::En) => {
                format!("Param {name} may have at most {n} characters")
            }
            (ParamProblem::NotAllowed(names), Lang::Zh) => {
                format!("不认识的参数：{}", names.join("、"))
            }
            (ParamProblem::NotAllowed(names), Lang::En) => {
                format!("Unknown params: {}", names.join(", "))
            }
            (ParamProblem::NotInEnum(options), Lang::Zh) => {
                format!("参数 {name} 只能是 {options} 之一")
            }
            (ParamProblem::NotInEnum(options), Lang::En) => {
                format!("Param {name} must be one of {options}")
            }
            (ParamProblem::Other(detail), Lang::Zh) => {
                format!("参数 {name} 不符合规则：{detail}")
            }
            (ParamProblem::Other(detail), Lang::En) => {
                format!("Param {name} does not match its rule: {detail}")
            }
        }
    }
}

/// Turns raw input into checked params.
///
/// Missing, `null` or an empty string mean `{}`; a string holding a JSON
/// object is accepted too, since a form's params box sends text. Defaults
/// from the schema are filled in before validation.
pub fn check(
    schema: &ParamsSchema,
    input: Option<&Value>,
) -> Result<Map<String, Value>, Vec<ParamError>> {
    let whole = |problem| {
        vec![ParamError {
            pointer: String::new(),
            problem,
        }]
    };
    let mut params = match input {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(Value::String(text)) if text.trim().is_empty() => Map::new(),
        Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => map,
            Ok(_) => return Err(whole(ParamProblem::NotAnObject)),
            Err(e) => return Err(whole(ParamProblem::InvalidJson(e.to_string()))),
        },
        Some(_) => return Err(whole(ParamProblem::NotAnObject)),
    };
    fill_defaults(schema.raw(), &mut params);
    let value = Value::Object(params);
    let chars = value.to_string().chars().count();
    if chars > MAX_PARAMS_CHARS {
        return Err(whole(ParamProblem::TooLong { chars }));
    }
    let errors: Vec<ParamError> = schema
        .validator()
        .iter_errors(&value)
        .map(|e| to_param_error(e.instance_path().as_str(), e.kind(), &e.to_string()))
        .collect();
    if !errors.is_empty() {
        return Err(errors);
    }
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(whole(ParamProblem::NotAnObject)),
    }
}

fn to_param_error(path: &str, kind: &ValidationErrorKind, detail: &str) -> ParamError {
    let at = |pointer: String, problem| ParamError { pointer, problem };
    let here = path.to_string();
    match kind {
        ValidationErrorKind::Required { property } => {
            let name = property
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| property.to_string());
            at(
                format!("{path}/{}", escape_pointer(&name)),
                ParamProblem::Missing,
            )
        }
        ValidationErrorKind::Type { kind } => {
            let t = match kind {
                jsonschema::error::TypeKind::Single(t) => t.to_string(),
                jsonschema::error::TypeKind::Multiple(set) => format!("{set:?}"),
            };
            at(here, ParamProblem::WrongType(t))
        }
        ValidationErrorKind::Minimum { limit }
        | ValidationErrorKind::ExclusiveMinimum { limit } => {
            at(here, ParamProblem::TooSmall(limit.to_string()))
        }
        ValidationErrorKind::Maximum { limit }
        | ValidationErrorKind::ExclusiveMaximum { limit } => {
            at(here, ParamProblem::TooLarge(limit.to_string()))
        }
        ValidationErrorKind::MinLength { limit } => at(here, ParamProblem::TooShort(*limit)),
        ValidationErrorKind::MaxLength { limit } => at(here, ParamProblem::TooLongText(*limit)),
        ValidationErrorKind::AdditionalProperties { unexpected } => match unexpected.as_slice() {
            [one] => at(
                format!("{path}/{}", escape_pointer(one)),
                ParamProblem::NotAllowed(unexpected.clone()),
            ),
            _ => at(here, ParamProblem::NotAllowed(unexpected.clone())),
        },
        ValidationErrorKind::Enum { options } => {
            at(here, ParamProblem::NotInEnum(options.to_string()))
        }
        _ => at(here, ParamProblem::Other(detail.to_string())),
    }
}

/// Escapes a property name for a JSON pointer (RFC 6901).
fn escape_pointer(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// Fills in `default` values declared under `properties`, recursing into
/// nested objects that are present or that gain a default.
pub fn fill_defaults(schema: &Value, params: &mut Map<String, Value>) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (name, prop) in properties {
        if !params.contains_key(name)
            && let Some(default) = prop.get("default")
        {
            params.insert(name.clone(), default.clone());
        }
        if let Some(Value::Object(nested)) = params.get_mut(name) {
            fill_defaults(prop, nested);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn echo_schema() -> ParamsSchema {
        ParamsSchema::compile(json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "message": {"type": "string", "maxLength": 200, "default": "hello"},
                "delayMs": {"type": "integer", "minimum": 0, "maximum": 600000, "default": 0},
                "mode": {"enum": ["a", "b"]},
                "nested": {
                    "type": "object",
                    "properties": {"depth": {"type": "integer", "default": 3}}
                }
            }
        }))
        .expect("schema")
    }

    fn required_schema() -> ParamsSchema {
        ParamsSchema::compile(json!({
            "type": "object",
            "required": ["target", "retries"],
            "properties": {
                "target": {"type": "string", "minLength": 1},
                "retries": {"type": "integer", "default": 2}
            }
        }))
        .expect("schema")
    }

    #[test]
    fn empty_means_defaults() {
        let schema = echo_schema();
        for input in [
            None,
            Some(json!(null)),
            Some(json!({})),
            Some(json!("")),
            Some(json!("  ")),
        ] {
            let got = check(&schema, input.as_ref()).expect("valid");
            assert_eq!(
                Value::Object(got),
                json!({"message": "hello", "delayMs": 0}),
                "{input:?}"
            );
        }
    }

    #[test]
    fn keeps_given_values_and_fills_nested_defaults() {
        let got = check(
            &echo_schema(),
            Some(&json!({"message": "hi", "nested": {}})),
        )
        .expect("valid");
        assert_eq!(
            Value::Object(got),
            json!({"message": "hi", "delayMs": 0, "nested": {"depth": 3}})
        );
        let got = check(&echo_schema(), Some(&json!("{\"delayMs\": 5}"))).expect("valid");
        assert_eq!(
            Value::Object(got),
            json!({"message": "hello", "delayMs": 5})
        );
    }

    #[test]
    fn errors_name_the_param() {
        let long = "x".repeat(201);
        let cases: Vec<(Value, &str, ParamProblem)> = vec![
            (json!([1]), "params", ParamProblem::NotAnObject),
            (json!(5), "params", ParamProblem::NotAnObject),
            (json!("[1,2]"), "params", ParamProblem::NotAnObject),
            (
                json!({"delayMs": -1}),
                "params/delayMs",
                ParamProblem::TooSmall("0".into()),
            ),
            (
                json!({"delayMs": 600001}),
                "params/delayMs",
                ParamProblem::TooLarge("600000".into()),
            ),
            (
                json!({"delayMs": "5"}),
                "params/delayMs",
                ParamProblem::WrongType("integer".into()),
            ),
            (
                json!({"message": long}),
                "params/message",
                ParamProblem::TooLongText(200),
            ),
            (
                json!({"other": 1}),
                "params/other",
                ParamProblem::NotAllowed(vec!["other".into()]),
            ),
            (
                json!({"mode": "c"}),
                "params/mode",
                ParamProblem::NotInEnum("[\"a\",\"b\"]".into()),
            ),
            (
                json!({"nested": {"depth": "deep"}}),
                "params/nested/depth",
                ParamProblem::WrongType("integer".into()),
            ),
        ];
        for (input, field, problem) in cases {
            let errors = check(&echo_schema(), Some(&input)).expect_err("invalid");
            assert_eq!(errors.len(), 1, "{input}: {errors:?}");
            assert_eq!(errors[0].field(), field, "{input}");
            assert_eq!(errors[0].problem, problem, "{input}");
            assert!(!errors[0].message(Lang::Zh).is_empty());
        }
        let errors = check(&echo_schema(), Some(&json!("{oops"))).expect_err("invalid json");
        assert!(matches!(errors[0].problem, ParamProblem::InvalidJson(_)));
    }

    #[test]
    fn required_without_default_fails_when_missing() {
        let errors = check(&required_schema(), None).expect_err("missing target");
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field(), "params/target");
        assert_eq!(errors[0].message(Lang::Zh), "缺少必填参数 target");
        assert_eq!(
            errors[0].message(Lang::En),
            "Required param target is missing"
        );
        let ok = check(&required_schema(), Some(&json!({"target": "x"}))).expect("valid");
        assert_eq!(Value::Object(ok), json!({"target": "x", "retries": 2}));
    }

    #[test]
    fn length_limit_counts_characters_after_defaults() {
        let schema = ParamsSchema::compile(json!({"type": "object"})).expect("schema");
        // {"k":"…"} is 8 characters plus the text.
        let fits = "汉".repeat(MAX_PARAMS_CHARS - 8);
        assert!(check(&schema, Some(&json!({"k": fits}))).is_ok());
        let over = "汉".repeat(MAX_PARAMS_CHARS - 7);
        let errors = check(&schema, Some(&json!({"k": over}))).expect_err("too long");
        assert_eq!(
            errors[0].problem,
            ParamProblem::TooLong {
                chars: MAX_PARAMS_CHARS + 1
            }
        );
    }
}
