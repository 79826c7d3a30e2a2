//! Traces: `tracing` spans exported over OTLP by OpenTelemetry, configured
//! only by the standard `OTEL_*` variables and off unless an endpoint is
//! set.
//!
//! - `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
//!   turns tracing on; `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`
//!   keep it off.
//! - `OTEL_EXPORTER_OTLP_PROTOCOL` (or `…_TRACES_PROTOCOL`): `http/protobuf`
//!   (the default) or `grpc`. Headers, timeout and compression variables are
//!   read by the exporter itself. gRPC goes over TLS to an `https://`
//!   endpoint (or one without a scheme unless `…_INSECURE=true`), checked
//!   against the system's roots or `SSL_CERT_FILE`.
//! - `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`: the resource
//!   (`service.name` defaults to `qiwu-scheduler`).
//! - `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG`: read by the SDK.
//! - `OTEL_BSP_MAX_QUEUE_SIZE`, `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`,
//!   `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_BSP_EXPORT_TIMEOUT`: the export queue.
//!
//! Ended spans go into a bounded queue that a task on the process's tokio
//! runtime exports in batches; a full queue drops the span and counts it
//! (`qiwu_trace_spans_dropped_total`), so exporting never blocks a fire or a
//! request. When tracing is off no exporter, queue or OpenTelemetry layer
//! exists, and the helpers here return at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    SdkTracer, SdkTracerProvider, SpanData, SpanExporter, SpanProcessor,
};
use tokio::sync::{mpsc, oneshot};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::TelemetryError;
use crate::metrics::metrics;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// True once traces are exported (an OTLP endpoint is configured).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    HttpProtobuf,
    Grpc,
}

/// The bounded export queue (the `OTEL_BSP_*` variables).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueConfig {
    pub max_queue: usize,
    pub max_batch: usize,
    pub delay: Duration,
    pub export_timeout: Duration,
}

/// What the variables ask for; `None` from [`TraceConfig::from_env`] when
/// tracing stays off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceConfig {
    pub protocol: Protocol,
    /// gRPC over TLS (the endpoint is `https://`).
    pub tls: bool,
    pub queue: QueueConfig,
}

fn var(name: &str, get: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    get(name)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

fn number(
    name: &'static str,
    default: u64,
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<u64, TelemetryError> {
    match var(name, get) {
        None => Ok(default),
        Some(v) => {
            v.parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| TelemetryError::Variable {
                    name,
                    problem: format!("{v:?} is not a positive whole number"),
                })
        }
    }
}

/// Whether a gRPC export is encrypted: the endpoint's scheme says so, and
/// an endpoint without one is `https` unless `…_INSECURE` is `true` (the
/// OTLP exporter's rule).
fn grpc_tls(get: &dyn Fn(&str) -> Option<String>) -> bool {
    let endpoint = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", get)
        .or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT", get))
        .unwrap_or_default();
    match endpoint.split_once("://") {
        Some((scheme, _)) if !scheme.contains(['/', '?', '#']) => {
            scheme.eq_ignore_ascii_case("https")
        }
        _ => !var("OTEL_EXPORTER_OTLP_TRACES_INSECURE", get)
            .or_else(|| var("OTEL_EXPORTER_OTLP_INSECURE", get))
            .is_some_and(|v| v.eq_ignore_ascii_case("true")),
    }
}

impl TraceConfig {
    /// Reads the process environment.
    pub fn from_env() -> Result<Option<TraceConfig>, TelemetryError> {
        TraceConfig::from_vars(&|name| std::env::var(name).ok())
    }

    /// Reads the variables through `get` (tests pass a map).
    pub fn from_vars(
        get: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<TraceConfig>, TelemetryError> {
        if var("OTEL_SDK_DISABLED", get).is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        match var("OTEL_TRACES_EXPORTER", get).as_deref() {
            None | Some("otlp") => {}
            Some("none") => return Ok(None),
            Some(other) => {
                return Err(TelemetryError::Variable {
                    name: "OTEL_TRACES_EXPORTER",
                    problem: format!("{other:?} is not supported: use otlp or none"),
                });
            }
        }
        if var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", get).is_none()
            && var("OTEL_EXPORTER_OTLP_ENDPOINT", get).is_none()
        {
            return Ok(None);
        }
        let (name, protocol) = match var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", get) {
            Some(p) => ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", Some(p)),
            None => (
                "OTEL_EXPORTER_OTLP_PROTOCOL",
                var("OTEL_EXPORTER_OTLP_PROTOCOL", get),
            ),
        };
        let protocol = match protocol.as_deref() {
            None | Some("http/protobuf") => Protocol::HttpProtobuf,
            Some("grpc") => Protocol::Grpc,
            Some(other) => {
                return Err(TelemetryError::Variable {
                    name,
                    problem: format!("{other:?} is not supported: use http/protobuf or grpc"),
                });
            }
        };
        let max_queue = number("OTEL_BSP_MAX_QUEUE_SIZE", 2048, get)?;
        let max_batch = number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512, get)?.min(max_queue);
        let queue = QueueConfig {
            max_queue: usize::try_from(max_queue).unwrap_or(usize::MAX),
            max_batch: usize::try_from(max_batch).unwrap_or(usize::MAX),
            delay: Duration::from_millis(number("OTEL_BSP_SCHEDULE_DELAY", 1000, get)?),
            export_timeout: Duration::from_millis(number("OTEL_BSP_EXPORT_TIMEOUT", 30_000, get)?),
        };
        let tls = protocol == Protocol::Grpc && grpc_tls(get);
        Ok(Some(TraceConfig {
            protocol,
            tls,
            queue,
        }))
    }
}

/// The running export pipeline; [`Pipeline::shutdown`] flushes it.
pub struct Pipeline {
    provider: SdkTracerProvider,
    flush: mpsc::UnboundedSender<oneshot::Sender<()>>,
}

impl Pipeline {
    /// Exports what is queued (waiting at most `limit`) and stops.
    pub async fn shutdown(self, limit: Duration) {
        let (done, flushed) = oneshot::channel();
        if self.flush.send(done).is_ok() {
            let _ = tokio::time::timeout(limit, flushed).await;
        }
        let _ = self.provider.shutdown();
        ENABLED.store(false, Ordering::Relaxed);
    }
}

/// Builds the exporter and the tracer; must run inside the tokio runtime
/// (the export task is spawned on it).
pub(crate) fn start(
    config: &TraceConfig,
    role: &str,
) -> Result<(Pipeline, SdkTracer), TelemetryError> {
    let resource = resource(role);
    let (tx, rx) = mpsc::channel(config.queue.max_queue);
    let (flush, flushes) = mpsc::unbounded_channel();
    match config.protocol {
        Protocol::HttpProtobuf => {
            use opentelemetry_otlp::WithHttpConfig;
            let mut exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_http_client(HttpClient::new()?)
                .build()
                .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
            exporter.set_resource(&resource);
            tokio::spawn(export_loop(exporter, rx, flushes, config.queue));
        }
        Protocol::Grpc => {
            use opentelemetry_otlp::WithTonicConfig;
            let mut builder = opentelemetry_otlp::SpanExporter::builder().with_tonic();
            if config.tls {
                // tonic trusts no root by default: the system's (or
                // SSL_CERT_FILE's), as for Redis.
                builder = builder.with_tls_config(
                    opentelemetry_otlp::tonic_types::transport::ClientTlsConfig::new()
                        .with_native_roots(),
                );
            }
            let mut exporter = builder
                .build()
                .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
            exporter.set_resource(&resource);
            tokio::spawn(export_loop(exporter, rx, flushes, config.queue));
        }
    }
    let provider = SdkTracerProvider::builder()
        .with_resource(resource)
        .with_span_processor(QueueProcessor { tx })
        .build();
    let tracer = provider.tracer("qiwu-scheduler");
    ENABLED.store(true, Ordering::Relaxed);
    Ok((Pipeline { provider, flush }, tracer))
}

/// The standard detectors (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`),
/// our service name when neither names one, the role and the instance.
fn resource(role: &str) -> Resource {
    let detected = Resource::builder().build();
    let mut builder =
        Resource::builder().with_attribute(KeyValue::new("qiwu.role", role.to_string()));
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.trim().is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| v.contains("service.name="));
    if !named {
        builder = builder.with_service_name("qiwu-scheduler");
    }
    let has_instance = detected
        .get(&opentelemetry::Key::new("service.instance.id"))
        .is_some();
    if !has_instance
        && let Ok(instance) = std::env::var("QIWU_INSTANCE_ID")
        && !instance.trim().is_empty()
    {
        builder = builder.with_attribute(KeyValue::new("service.instance.id", instance));
    }
    builder.build()
}

/// Hands ended, sampled spans to the export task without ever waiting.
#[derive(Debug)]
struct QueueProcessor {
    tx: mpsc::Sender<SpanData>,
}

impl SpanProcessor for QueueProcessor {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        match self.tx.try_send(span) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => metrics().span_dropped("queue_full", 1),
            Err(mpsc::error::TrySendError::Closed(_)) => metrics().span_dropped("shutdown", 1),
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// Exports queued spans in batches of at most `max_batch`, at least every
/// `delay` while any wait; a flush request exports everything at once.
async fn export_loop<E: SpanExporter>(
    exporter: E,
    mut spans: mpsc::Receiver<SpanData>,
    mut flushes: mpsc::UnboundedReceiver<oneshot::Sender<()>>,
    queue: QueueConfig,
) {
    let mut batch: Vec<SpanData> = Vec::with_capacity(queue.max_batch);
    let mut deadline = tokio::time::Instant::now() + queue.delay;
    loop {
        tokio::select! {
            span = spans.recv() => match span {
                Some(span) => {
                    if batch.is_empty() {
                        deadline = tokio::time::Instant::now() + queue.delay;
                    }
                    batch.push(span);
                    if batch.len() >= queue.max_batch {
                        export(&exporter, &mut batch, queue.export_timeout).await;
                    }
                }
                None => {
                    export(&exporter, &mut batch, queue.export_timeout).await;
                    return;
                }
            },
            () = tokio::time::sleep_until(deadline), if !batch.is_empty() => {
                export(&exporter, &mut batch, queue.export_timeout).await;
            }
            Some(done) = flushes.recv() => {
                while let Ok(span) = spans.try_recv() {
                    batch.push(span);
                    if batch.len() >= queue.max_batch {
                        export(&exporter, &mut batch, queue.export_timeout).await;
                    }
                }
                export(&exporter, &mut batch, queue.export_timeout).await;
                let _ = done.send(());
            }
        }
    }
}

async fn export<E: SpanExporter>(exporter: &E, batch: &mut Vec<SpanData>, limit: Duration) {
    if batch.is_empty() {
        return;
    }
    let spans = std::mem::take(batch);
    let count = spans.len() as u64;
    let failure = match tokio::time::timeout(limit, exporter.export(spans)).await {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {} ms", limit.as_millis()),
    };
    metrics().span_dropped("export_failed", count);
    // Logged outside any span, so the warning is not itself traced.
    tracing::warn!(target: "otel_export", spans = count, error = %failure, "cannot export spans");
}

/// The OTLP/HTTP exporter's client: the workspace's async reqwest, driven
/// by the export task on the process's runtime.
#[derive(Debug, Clone)]
struct HttpClient(reqwest::Client);

impl HttpClient {
    fn new() -> Result<HttpClient, TelemetryError> {
        reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map(HttpClient)
            .map_err(|e| TelemetryError::Exporter(e.to_string()))
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for HttpClient {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let (parts, body) = request.into_parts();
        let response = self
            .0
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body)
            .send()
            .await?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.bytes().await?;
        let mut out = http::Response::builder().status(status).body(body)?;
        *out.headers_mut() = headers;
        Ok(out)
    }
}

/// The W3C trace context of a `traceparent` (and `tracestate`) header, if
/// tracing is on and it is valid.
fn extract(traceparent: &str, tracestate: Option<&str>) -> Option<Context> {
    let mut carrier = HashMap::with_capacity(2);
    carrier.insert("traceparent".to_string(), traceparent.to_string());
    if let Some(state) = tracestate {
        carrier.insert("tracestate".to_string(), state.to_string());
    }
    let cx = TraceContextPropagator::new().extract(&carrier);
    cx.span().span_context().is_valid().then_some(cx)
}

/// Makes `span` a child of the remote span a `traceparent` names. Call it
/// before the span is entered; does nothing when tracing is off or the
/// header is invalid.
pub fn set_parent(span: &tracing::Span, traceparent: &str, tracestate: Option<&str>) {
    if !enabled() {
        return;
    }
    if let Some(cx) = extract(traceparent, tracestate) {
        let _ = span.set_parent(cx);
    }
}

/// The `traceparent` header naming `span`, for outgoing calls and for a
/// fire queued by a request; `None` when tracing is off.
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    if !enabled() {
        return None;
    }
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier: HashMap<String, String> = HashMap::with_capacity(2);
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    carrier.remove("traceparent")
}

/// The trace id of `span` (32 lowercase hex digits) when it is sampled, so
/// it can be looked up in the tracing backend; `None` when tracing is off.
pub fn trace_id(span: &tracing::Span) -> Option<String> {
    if !enabled() {
        return None;
    }
    let cx = span.context();
    let span_ref = cx.span();
    let sc = span_ref.span_context();
    (sc.is_valid() && sc.is_sampled()).then(|| sc.trace_id().to_string())
}

/// Renames `span` in traces (an HTTP span learns its route template only
/// once the request was routed); nothing when tracing is off.
pub fn rename(span: &tracing::Span, name: String) {
    if enabled() {
        span.context().span().update_name(name);
    }
}

/// Adds an event with integer attributes to the current span (a job lock
/// acquired, renewed, lost); nothing when tracing is off.
pub fn event(name: &'static str, attributes: &[(&'static str, i64)]) {
    if !enabled() {
        return;
    }
    let attributes = attributes
        .iter()
        .map(|(k, v)| KeyValue::new(*k, *v))
        .collect();
    tracing::Span::current().add_event(name, attributes);
}

/// The current span's trace and span ids, for log lines.
pub(crate) fn current_ids() -> Option<(String, String)> {
    if !enabled() {
        return None;
    }
    let span = tracing::Span::current();
    if span.is_none() {
        return None;
    }
    let cx = span.context();
    let span_ref = cx.span();
    let sc = span_ref.span_context();
    sc.is_valid()
        .then(|| (sc.trace_id().to_string(), sc.span_id().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> Result<Option<TraceConfig>, TelemetryError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        TraceConfig::from_vars(&|name| map.get(name).cloned())
    }

    #[test]
    fn off_unless_an_endpoint_is_set() {
        assert_eq!(config(&[]).expect("ok"), None);
        assert_eq!(config(&[("OTEL_SERVICE_NAME", "x")]).expect("ok"), None);
        let on = config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")])
            .expect("ok")
            .expect("on");
        assert_eq!(on.protocol, Protocol::HttpProtobuf);
        assert_eq!(on.queue.max_queue, 2048);
        assert_eq!(on.queue.max_batch, 512);
        for off in [
            [
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x"),
                ("OTEL_SDK_DISABLED", "true"),
            ],
            [
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x"),
                ("OTEL_TRACES_EXPORTER", "none"),
            ],
        ] {
            assert_eq!(config(&off).expect("ok"), None, "{off:?}");
        }
    }

    #[test]
    fn protocols_and_queue_variables() {
        let grpc = config(&[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://x:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "100"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "500"),
            ("OTEL_BSP_SCHEDULE_DELAY", "200"),
        ])
        .expect("ok")
        .expect("on");
        assert_eq!(grpc.protocol, Protocol::Grpc);
        assert_eq!(grpc.queue.max_queue, 100);
        assert_eq!(
            grpc.queue.max_batch, 100,
            "a batch is never bigger than the queue"
        );
        assert_eq!(grpc.queue.delay, Duration::from_millis(200));
        let cases: [(&str, &str, &str); 3] = [
            (
                "OTEL_EXPORTER_OTLP_PROTOCOL",
                "http/json",
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "0", "OTEL_BSP_MAX_QUEUE_SIZE"),
            ("OTEL_TRACES_EXPORTER", "zipkin", "OTEL_TRACES_EXPORTER"),
        ];
        for (name, value, named) in cases {
            let err = config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x"), (name, value)])
                .expect_err(value);
            assert!(err.to_string().contains(named), "{err}");
        }
    }

    #[test]
    fn grpc_uses_tls_as_the_endpoint_says() {
        let cases: [(&[(&str, &str)], bool); 7] = [
            (&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317")], false),
            (&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4317")], true),
            (&[("OTEL_EXPORTER_OTLP_ENDPOINT", "HTTPS://c:4317")], true),
            (&[("OTEL_EXPORTER_OTLP_ENDPOINT", "c:4317")], true),
            (
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "c:4317"),
                    ("OTEL_EXPORTER_OTLP_INSECURE", "true"),
                ],
                false,
            ),
            (
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
                    ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://t:4317"),
                ],
                true,
            ),
            (
                &[
                    ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "t:4317"),
                    ("OTEL_EXPORTER_OTLP_TRACES_INSECURE", "TRUE"),
                ],
                false,
            ),
        ];
        for (vars, tls) in cases {
            let mut vars = vars.to_vec();
            vars.push(("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"));
            let on = config(&vars).expect("ok").expect("on");
            assert_eq!(on.tls, tls, "{vars:?}");
        }
        // HTTP's client follows the scheme itself.
        let http = config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318")])
            .expect("ok")
            .expect("on");
        assert!(!http.tls);
    }

    #[test]
    fn helpers_do_nothing_while_off() {
        let span = tracing::info_span!("x");
        set_parent(
            &span,
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            None,
        );
        assert_eq!(traceparent(&span), None);
        assert_eq!(trace_id(&span), None);
    }

    #[test]
    fn traceparent_headers_are_parsed_strictly() {
        assert!(
            extract(
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                None
            )
            .is_some()
        );
        for bad in [
            "",
            "garbage",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        ] {
            assert!(extract(bad, None).is_none(), "{bad:?}");
        }
    }
}
