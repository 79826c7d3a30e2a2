//! Reading JSON object bodies field by field, so that every bad value is a
//! 400 naming its field and saying what is allowed, in Chinese and English
//! (serde's own errors name neither the field nor the rule).
//!
//! Handlers take `web::Json<Value>`: actix reports only what is not JSON
//! at all (see `error::json_error`); everything else is checked here. The
//! `ToSchema` structs in `dto` document the same rules.

use chrono::{DateTime, FixedOffset};
use serde_json::{Map, Value};

use crate::error::{ApiError, ProblemFieldText, Text};
use crate::query::MAX_SAFE_INTEGER;

/// The fields of one JSON object body, with the problems found so far.
pub struct Fields {
    map: Map<String, Value>,
    errors: Vec<ProblemFieldText>,
    known: &'static [&'static str],
}

/// What a field must be, in both languages, for "must be …" messages.
#[derive(Clone, Copy)]
pub struct Kind {
    pub zh: &'static str,
    pub en: &'static str,
}

pub const STRING: Kind = Kind {
    zh: "字符串",
    en: "a string",
};
pub const BOOLEAN: Kind = Kind {
    zh: "true 或 false",
    en: "true or false",
};

impl Fields {
    /// The body's fields; anything but a JSON object is a 400. `known`
    /// lists the fields the body may have: others are reported by
    /// [`Fields::finish`].
    pub fn new(body: Value, known: &'static [&'static str]) -> Result<Fields, ApiError> {
        match body {
            Value::Object(map) => Ok(Fields {
                map,
                errors: Vec::new(),
                known,
            }),
            _ => Err(ApiError::bad_request(
                "请求体必须是一个 JSON 对象",
                "The request body must be a JSON object",
            )),
        }
    }

    /// Records a problem with `field`.
    pub fn fail(&mut self, field: &str, zh: impl Into<String>, en: impl Into<String>) {
        self.errors
            .push(ProblemFieldText::new(field, Text::new(zh, en)));
    }

    /// Refuses `field` with its own reason when the body has it (rather
    /// than as an unknown field).
    pub fn forbid(&mut self, field: &str, zh: impl Into<String>, en: impl Into<String>) {
        if self.map.remove(field).is_some() {
            self.fail(field, zh, en);
        }
    }

    fn required(&mut self, field: &str) {
        self.fail(
            field,
            format!("{field} 必填"),
            format!("{field} is required"),
        );
    }

    fn wrong(&mut self, field: &str, kind: Kind) {
        self.fail(
            field,
            format!("{field} 应为{}", kind.zh),
            format!("{field} must be {}", kind.en),
        );
    }

    /// The value of `field`, `None` when absent or null.
    pub fn value(&self, field: &str) -> Option<Value> {
        match self.map.get(field) {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.clone()),
        }
    }

    /// A string; absent or null is `None`, or a 400 when `required`.
    pub fn string(&mut self, field: &str, required: bool) -> Option<String> {
        match self.map.get(field) {
            None | Some(Value::Null) => {
                if required {
                    self.required(field);
                }
                None
            }
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                self.wrong(field, STRING);
                None
            }
        }
    }

    /// `true` or `false`; absent or null is `None`, or a 400 when `required`.
    pub fn boolean(&mut self, field: &str, required: bool) -> Option<bool> {
        match self.map.get(field) {
            None | Some(Value::Null) => {
                if required {
                    self.required(field);
                }
                None
            }
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => {
                self.wrong(field, BOOLEAN);
                None
            }
        }
    }

    /// A whole number in `min..=max`; absent or null is `None`, or a 400
    /// when `required`.
    pub fn integer(&mut self, field: &str, min: i64, max: i64, required: bool) -> Option<i64> {
        match self.map.get(field) {
            None | Some(Value::Null) => {
                if required {
                    self.required(field);
                }
                None
            }
            Some(v) => match whole(v).filter(|n| (min..=max).contains(n)) {
                Some(n) => Some(n),
                None => {
                    self.fail(
                        field,
                        format!("{field} 应为 {min}–{max} 的整数"),
                        format!("{field} must be a whole number from {min} to {max}"),
                    );
                    None
                }
            },
        }
    }

    /// One of a closed set of codes, exactly (`code` names each value);
    /// absent or null is `None`.
    pub fn one_of<T: Copy>(
        &mut self,
        field: &str,
        allowed: impl IntoIterator<Item = T>,
        code: fn(T) -> &'static str,
    ) -> Option<T> {
        let value = self.map.get(field)?;
        if value.is_null() {
            return None;
        }
        let allowed: Vec<T> = allowed.into_iter().collect();
        if let Some(found) = value
            .as_str()
            .and_then(|s| allowed.iter().copied().find(|a| code(*a) == s))
        {
            return Some(found);
        }
        let list = allowed
            .iter()
            .map(|a| code(*a))
            .collect::<Vec<_>>()
            .join(", ");
        self.fail(
            field,
            format!("{field} 只能是以下之一：{list}"),
            format!("{field} must be one of: {list}"),
        );
        None
    }

    /// An RFC 3339 instant with its offset; absent or null is `None`.
    pub fn instant(&mut self, field: &str) -> Option<DateTime<FixedOffset>> {
        let value = self.map.get(field)?;
        if value.is_null() {
            return None;
        }
        match value.as_str().map(DateTime::parse_from_rfc3339) {
            Some(Ok(t)) => Some(t),
            _ => {
                self.fail(
                    field,
                    format!(
                        "{field} 应为带时区的 RFC 3339 时间（日期必须存在），例如 2026-02-28T08:00:00+08:00"
                    ),
                    format!(
                        "{field} must be an RFC 3339 time with an offset, on a date that exists, such as 2026-02-28T08:00:00+08:00"
                    ),
                );
                None
            }
        }
    }

    /// A list of 1–`max_items` ids (each 1 to 2^53 − 1); every bad item
    /// is named by its index, such as `ids/3`.
    pub fn ids(&mut self, field: &str, max_items: usize) -> Vec<i64> {
        let items = match self.map.get(field) {
            None | Some(Value::Null) => {
                self.required(field);
                return Vec::new();
            }
            Some(Value::Array(items)) if (1..=max_items).contains(&items.len()) => items.clone(),
            Some(_) => {
                self.fail(
                    field,
                    format!("{field} 应为 1–{max_items} 个 id 的数组"),
                    format!("{field} must be an array of 1 to {max_items} ids"),
                );
                return Vec::new();
            }
        };
        let mut ids = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            match whole(item).filter(|n| (1..=MAX_SAFE_INTEGER).contains(n)) {
                Some(id) => ids.push(id),
                None => self.fail(
                    &format!("{field}/{i}"),
                    format!("id 应为 1–{MAX_SAFE_INTEGER} 的整数"),
                    format!("An id is a whole number from 1 to {MAX_SAFE_INTEGER}"),
                ),
            }
        }
        ids
    }

    /// Ends reading: unknown fields and every problem found become one 400.
    pub fn finish(mut self) -> Result<(), ApiError> {
        let unknown: Vec<String> = self
            .map
            .keys()
            .filter(|k| !self.known.contains(&k.as_str()))
            .cloned()
            .collect();
        let list = self.known.join(", ");
        for field in unknown {
            self.fail(
                &field,
                format!("不认识的字段 {field}：只能填写 {list}"),
                format!("Unknown field {field}: only {list} are accepted"),
            );
        }
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(ApiError::validation(self.errors))
        }
    }
}

/// A JSON number that is a whole number (`5` or `5.0`) within `i64`.
fn whole(v: &Value) -> Option<i64> {
    let n = v.as_number()?;
    n.as_i64().or_else(|| {
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() <= MAX_SAFE_INTEGER as f64)
            .map(|f| f as i64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use qiwu_domain::Lang;
    use serde_json::json;

    fn fields_of(e: ApiError) -> Vec<String> {
        e.problem(Lang::Zh)
            .errors
            .into_iter()
            .map(|f| f.field)
            .collect()
    }

    #[test]
    fn every_bad_field_is_named() {
        let mut f = Fields::new(json!({"a": "x", "b": 1, "c": 51, "d": "2026-02-30T00:00:00Z", "ids": [1, 0, "x"], "zz": 1}),
            &["a", "b", "c", "d", "ids", "e"],
        )
        .expect("object");
        assert_eq!(f.boolean("a", true), None);
        assert_eq!(f.string("b", true), None);
        assert_eq!(f.integer("c", 1, 50, false), None);
        assert_eq!(f.instant("d"), None);
        assert_eq!(f.ids("ids", 10), vec![1]);
        assert_eq!(f.string("e", true), None);
        let e = f.finish().expect_err("invalid");
        assert_eq!(
            fields_of(e),
            ["a", "b", "c", "d", "ids/1", "ids/2", "e", "zz"]
        );
    }

    #[test]
    fn good_values_are_read() {
        let mut f = Fields::new(json!({"a": true, "n": 5.0, "t": "2026-02-28T08:00:00+08:00", "s": null, "ids": [9007199254740991_i64]}),
            &["a", "n", "t", "s", "ids"],
        )
        .expect("object");
        assert_eq!(f.boolean("a", true), Some(true));
        assert_eq!(f.integer("n", 1, 50, true), Some(5));
        assert!(f.instant("t").is_some());
        assert_eq!(f.string("s", false), None);
        assert_eq!(f.ids("ids", 1), vec![MAX_SAFE_INTEGER]);
        assert!(f.finish().is_ok());
    }

    #[test]
    fn closed_sets_are_read_exactly() {
        const ALL: [&str; 2] = ["workdays", "exclude"];
        let code: fn(&'static str) -> &'static str = |s| s;
        let mut f = Fields::new(
            json!({"a": "exclude", "b": null, "c": "Exclude", "d": 1, "e": ""}),
            &["a", "b", "c", "d", "e"],
        )
        .expect("object");
        assert_eq!(f.one_of("a", ALL, code), Some("exclude"));
        assert_eq!(f.one_of("b", ALL, code), None);
        assert_eq!(f.one_of("c", ALL, code), None);
        assert_eq!(f.one_of("d", ALL, code), None);
        assert_eq!(f.one_of("e", ALL, code), None);
        assert_eq!(f.one_of("absent", ALL, code), None);
        let e = f.finish().expect_err("invalid");
        assert_eq!(fields_of(e), ["c", "d", "e"]);
    }

    #[test]
    fn only_objects_are_bodies() {
        for body in [json!([1]), json!("x"), json!(null), json!(3)] {
            assert!(Fields::new(body, &[]).is_err());
        }
    }

    #[test]
    fn ids_outside_the_safe_range_are_refused() {
        for bad in [
            json!([]),
            json!([9007199254740992_i64]),
            json!([-1]),
            json!([1.5]),
            json!(5),
        ] {
            let mut f = Fields::new(json!({"ids": bad.clone()}), &["ids"]).expect("object");
            f.ids("ids", 1000);
            assert!(f.finish().is_err(), "{bad}");
        }
    }
}
