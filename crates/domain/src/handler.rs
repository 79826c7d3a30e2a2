//! Handler descriptors: what the API shows about a registered handler, and
//! the compiled params schema every job of that handler is checked against.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::lang::Lang;
use crate::params::{self, ParamsSchema, SchemaError};

/// Why a handler cannot be registered.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    #[error("handler {name}: invalid params schema: {reason}")]
    InvalidSchema { name: String, reason: String },
    #[error("handler {name}: the params schema must describe an object")]
    NotAnObjectSchema { name: String },
    #[error("handler {name}: default params do not validate: {reason}")]
    InvalidDefaults { name: String, reason: String },
    #[error("handler name {0:?} is not a dotted lower-case name such as `audit.purge`")]
    InvalidName(String),
    #[error("handler {0} is registered twice")]
    Duplicate(String),
}

/// What is known about one registered handler.
#[derive(Debug, Clone)]
pub struct HandlerDescriptor {
    pub name: String,
    pub title_zh: String,
    pub title_en: String,
    pub description_zh: String,
    pub description_en: String,
    pub schema: ParamsSchema,
}

impl HandlerDescriptor {
    /// Builds a descriptor, checking the name and that the schema's own
    /// defaults form valid params.
    pub fn new(
        name: &str,
        (title_zh, title_en): (&str, &str),
        (description_zh, description_en): (&str, &str),
        schema: Value,
    ) -> Result<HandlerDescriptor, HandlerError> {
        if !is_handler_name(name) {
            return Err(HandlerError::InvalidName(name.to_string()));
        }
        let schema = ParamsSchema::compile(schema).map_err(|e| match e {
            SchemaError::NotAnObject => HandlerError::NotAnObjectSchema {
                name: name.to_string(),
            },
            SchemaError::Invalid(reason) => HandlerError::InvalidSchema {
                name: name.to_string(),
                reason,
            },
        })?;
        let descriptor = HandlerDescriptor {
            name: name.to_string(),
            title_zh: title_zh.to_string(),
            title_en: title_en.to_string(),
            description_zh: description_zh.to_string(),
            description_en: description_en.to_string(),
            schema,
        };
        if let Err(errors) = params::check(&descriptor.schema, None) {
            let reason = errors
                .iter()
                .map(|e| e.message(Lang::En))
                .collect::<Vec<_>>()
                .join("; ");
            // A handler whose empty params fail only for required params
            // without defaults is fine: jobs must then supply them.
            if errors.iter().any(|e| !e.is_missing_required()) {
                return Err(HandlerError::InvalidDefaults {
                    name: name.to_string(),
                    reason,
                });
            }
        }
        Ok(descriptor)
    }

    pub fn title(&self, lang: Lang) -> &str {
        lang.pick(&self.title_zh, &self.title_en)
    }

    pub fn description(&self, lang: Lang) -> &str {
        lang.pick(&self.description_zh, &self.description_en)
    }

    /// The params a new job starts with: the schema's defaults.
    pub fn default_params(&self) -> Map<String, Value> {
        let mut map = Map::new();
        params::fill_defaults(self.schema.raw(), &mut map);
        map
    }
}

/// `audit.purge`, `wf.task.remind`: dotted segments of lower-case letters,
/// digits and `_`, each starting with a letter.
pub fn is_handler_name(name: &str) -> bool {
    name.len() <= 128
        && name.split('.').count() >= 2
        && name.split('.').all(|seg| {
            seg.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                && seg
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
}

/// The whitelist of handlers, fixed at start-up.
#[derive(Debug, Clone, Default)]
pub struct HandlerCatalog {
    handlers: BTreeMap<String, HandlerDescriptor>,
}

impl HandlerCatalog {
    pub fn new(
        descriptors: impl IntoIterator<Item = HandlerDescriptor>,
    ) -> Result<HandlerCatalog, HandlerError> {
        let mut handlers = BTreeMap::new();
        for d in descriptors {
            if handlers.contains_key(&d.name) {
                return Err(HandlerError::Duplicate(d.name));
            }
            handlers.insert(d.name.clone(), d);
        }
        Ok(HandlerCatalog { handlers })
    }

    pub fn get(&self, name: &str) -> Option<&HandlerDescriptor> {
        self.handlers.get(name)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.handlers.contains_key(name)
    }

    /// Handlers ordered by name.
    pub fn iter(&self) -> impl Iterator<Item = &HandlerDescriptor> {
        self.handlers.values()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn handler_names() {
        let cases = [
            ("audit.purge", true),
            ("wf.task.remind", true),
            ("demo.echo_2", true),
            ("audit", false),
            ("Audit.purge", false),
            ("audit..purge", false),
            ("audit.2purge", false),
            ("audit.purge;rm", false),
            ("", false),
        ];
        for (name, want) in cases {
            assert_eq!(is_handler_name(name), want, "{name}");
        }
    }

    #[test]
    fn rejects_bad_schemas_and_duplicates() {
        let bad = HandlerDescriptor::new("a.b", ("", ""), ("", ""), json!({"type": "string"}));
        assert!(matches!(bad, Err(HandlerError::NotAnObjectSchema { .. })));
        let bad = HandlerDescriptor::new(
            "a.b",
            ("", ""),
            ("", ""),
            json!({"type": "object", "properties": {"n": {"type": "integer", "default": "x"}}}),
        );
        assert!(matches!(bad, Err(HandlerError::InvalidDefaults { .. })));
        let ok = HandlerDescriptor::new("a.b", ("", ""), ("", ""), json!({"type": "object"}))
            .expect("valid");
        let dup = HandlerCatalog::new([ok.clone(), ok]);
        assert!(matches!(dup, Err(HandlerError::Duplicate(_))));
    }
}
