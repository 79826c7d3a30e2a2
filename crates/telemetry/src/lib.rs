//! Observability shared by the API, the engine and the binary: Prometheus
//! metrics ([`metrics`]), OpenTelemetry traces ([`trace`]) and the log
//! subscriber ([`logs`]). It depends on neither the API nor the engine, so
//! both can use it.

pub mod logs;
pub mod metrics;
pub mod trace;

use std::time::Duration;

use tracing::Level;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

pub use logs::LogFormat;
pub use metrics::metrics;
pub use trace::TraceConfig;

/// Span names the OpenTelemetry layer leaves out (probes hit every few
/// seconds and would drown the traces).
pub const UNTRACED_SPAN: &str = "http.probe";

/// Why observability could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("{name}: {problem}")]
    Variable { name: &'static str, problem: String },
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(String),
    #[error("cannot install the log subscriber: {0}")]
    Subscriber(String),
}

/// What [`init`] set up; [`Telemetry::shutdown`] flushes the traces.
pub struct Telemetry {
    pipeline: Option<trace::Pipeline>,
}

impl Telemetry {
    /// True when spans are exported.
    pub fn tracing(&self) -> bool {
        self.pipeline.is_some()
    }

    /// Exports the spans still queued (at most `limit`).
    pub async fn shutdown(self, limit: Duration) {
        if let Some(pipeline) = self.pipeline {
            pipeline.shutdown(limit).await;
        }
    }
}

/// Installs the global log subscriber (`RUST_LOG` filter, default `info`,
/// in `format`) and, when `traces` is set, the OpenTelemetry layer for the
/// spans of this project's crates. Call inside the tokio runtime.
pub fn init(
    format: LogFormat,
    traces: Option<(&TraceConfig, &str)>,
) -> Result<Telemetry, TelemetryError> {
    type Boxed = Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let fmt: Boxed = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .fmt_fields(logs::json_fields())
            .event_format(logs::JsonLines)
            .with_filter(filter)
            .boxed(),
    };
    let mut layers = vec![fmt];
    let mut pipeline = None;
    if let Some((config, role)) = traces {
        let (started, tracer) = trace::start(config, role)?;
        pipeline = Some(started);
        // Only this project's spans (and the events inside them), never
        // those of the HTTP and database libraries, or the export itself.
        let ours = tracing_subscriber::filter::filter_fn(|meta| {
            meta.target().starts_with("qiwu")
                && meta.name() != UNTRACED_SPAN
                && (meta.is_span() || *meta.level() <= Level::INFO)
        });
        layers.push(
            tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_location(false)
                .with_threads(false)
                .with_filter(ours)
                .boxed(),
        );
    }
    tracing_subscriber::registry()
        .with(layers)
        .try_init()
        .map_err(|e| TelemetryError::Subscriber(e.to_string()))?;
    Ok(Telemetry { pipeline })
}
