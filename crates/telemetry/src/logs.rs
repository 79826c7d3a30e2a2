//! Log lines on stderr, as today's text or (`QIWU_LOG_FORMAT=json`) one
//! JSON object per line with the fields of the event and of its spans (the
//! request id of a request's lines among them) and, while tracing, the
//! `trace_id` and `span_id` of the span it happened in.

use std::fmt;

use serde_json::{Map, Value};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, JsonFields};
use tracing_subscriber::fmt::{FmtContext, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

use crate::TelemetryError;

/// `QIWU_LOG_FORMAT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl LogFormat {
    /// Reads `QIWU_LOG_FORMAT` (`text`, the default, or `json`).
    pub fn from_env() -> Result<LogFormat, TelemetryError> {
        LogFormat::parse(std::env::var("QIWU_LOG_FORMAT").ok().as_deref())
    }

    pub fn parse(value: Option<&str>) -> Result<LogFormat, TelemetryError> {
        match value.map(str::trim) {
            None | Some("") | Some("text") => Ok(LogFormat::Text),
            Some("json") => Ok(LogFormat::Json),
            Some(other) => Err(TelemetryError::Variable {
                name: "QIWU_LOG_FORMAT",
                problem: format!("{other:?} is not a log format: use text or json"),
            }),
        }
    }
}

/// Writes each event as one JSON object: `timestamp` (RFC 3339, UTC),
/// `level`, `target`, `message`, the event's other fields under `fields`,
/// the spans it happened in under `spans` (outermost first, each with its
/// `name` and fields), `request_id` when a span carries one, and
/// `trace_id`/`span_id` while tracing.
pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: format::Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut line = Map::new();
        line.insert(
            "timestamp".into(),
            chrono::Utc::now()
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
                .into(),
        );
        line.insert("level".into(), meta.level().as_str().into());
        line.insert("target".into(), meta.target().into());
        let mut fields = Map::new();
        event.record(&mut Visitor(&mut fields));
        if let Some(message) = fields.remove("message") {
            line.insert("message".into(), message);
        }
        if !fields.is_empty() {
            line.insert("fields".into(), Value::Object(fields));
        }
        let mut spans = Vec::new();
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let mut entry = Map::new();
                entry.insert("name".into(), span.name().into());
                let extensions = span.extensions();
                if let Some(stored) = extensions.get::<FormattedFields<N>>()
                    && let Ok(Value::Object(map)) = serde_json::from_str::<Value>(stored)
                {
                    if let Some(id) = map.get("request_id") {
                        line.insert("request_id".into(), id.clone());
                    }
                    entry.extend(map);
                }
                spans.push(Value::Object(entry));
            }
        }
        if !spans.is_empty() {
            line.insert("spans".into(), Value::Array(spans));
        }
        if let Some((trace_id, span_id)) = crate::trace::current_ids() {
            line.insert("trace_id".into(), trace_id.into());
            line.insert("span_id".into(), span_id.into());
        }
        writeln!(writer, "{}", Value::Object(line))
    }
}

/// The span field formatter that goes with [`JsonLines`].
pub fn json_fields() -> JsonFields {
    JsonFields::new()
}

/// Collects an event's fields as JSON values.
struct Visitor<'a>(&'a mut Map<String, Value>);

impl tracing::field::Visit for Visitor<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), format!("{value:?}").into());
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_f64(&mut self, field: &tracing::field::Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_error(
        &mut self,
        field: &tracing::field::Field,
        value: &(dyn std::error::Error + 'static),
    ) {
        self.0.insert(field.name().into(), value.to_string().into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_named_strictly() {
        assert_eq!(LogFormat::parse(None).expect("ok"), LogFormat::Text);
        assert_eq!(LogFormat::parse(Some("text")).expect("ok"), LogFormat::Text);
        assert_eq!(LogFormat::parse(Some("json")).expect("ok"), LogFormat::Json);
        let err = LogFormat::parse(Some("JSON5")).expect_err("bad");
        assert!(err.to_string().contains("QIWU_LOG_FORMAT"), "{err}");
    }
}
