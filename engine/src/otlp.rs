//! OpenTelemetry export of every statement's span tree (docs/runtime.md, "OpenTelemetry"):
//! with `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) set, the spans
//! a run's trace records (the statement, then parse, bind, lower, plan, execute, envelope or
//! pack) are sent over OTLP/HTTP (protobuf) by the OpenTelemetry SDK's exporter when the
//! statement ends, whether or not JSON traces are written. A W3C `traceparent` given with the
//! request ([`with_traceparent`]: the HTTP header, MCP `_meta.traceparent`) parents the
//! statement's span and gives it its trace id.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SpanData, SpanExporter};
use serde_json::Value;

use crate::trace::Trace;

tokio::task_local! {
    static PARENT: SpanContext;
}

/// The process's exporter: made once, from the environment, the first time a statement ends.
static EXPORTER: OnceLock<Option<Arc<Otlp>>> = OnceLock::new();

/// An OTLP/HTTP span exporter and what its spans say produced them.
pub(crate) struct Otlp {
    /// The SDK exporter is not to be called concurrently.
    exporter: tokio::sync::Mutex<opentelemetry_otlp::SpanExporter>,
    scope: InstrumentationScope,
}

/// The process's exporter, when the environment names an OTLP endpoint. An endpoint the
/// exporter cannot be built for is said once on stderr, and nothing is exported.
pub(crate) fn exporter() -> Option<Arc<Otlp>> {
    EXPORTER
        .get_or_init(|| {
            let endpoint = [
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|e| !e.is_empty()))?;
            // The exporter's client is hyper's plain-HTTP one (no TLS stack in the build).
            if endpoint.starts_with("https://") {
                eprintln!(
                    "signalql: no OpenTelemetry export: {endpoint} is https; signalql sends \
                     OTLP over plain HTTP (a local collector)"
                );
                return None;
            }
            use opentelemetry_otlp::WithExportConfig;
            let built = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .build();
            match built {
                Ok(mut exporter) => {
                    let resource = opentelemetry_sdk::Resource::builder_empty()
                        .with_service_name("signalql")
                        .build();
                    exporter.set_resource(&resource);
                    let scope = InstrumentationScope::builder("signalql")
                        .with_version(env!("CARGO_PKG_VERSION"))
                        .build();
                    Some(Arc::new(Otlp {
                        exporter: tokio::sync::Mutex::new(exporter),
                        scope,
                    }))
                }
                Err(e) => {
                    eprintln!("signalql: no OpenTelemetry export: {e}");
                    None
                }
            }
        })
        .clone()
}

/// Runs `statement` with the W3C `traceparent` (`00-<trace id>-<span id>-<flags>`) as the
/// parent of the spans it exports; a missing or malformed one leaves the statement a root.
pub async fn with_traceparent<F: Future>(traceparent: Option<&str>, statement: F) -> F::Output {
    use opentelemetry::propagation::TextMapPropagator;
    let parent = traceparent.and_then(|t| {
        let carrier = HashMap::from([("traceparent".to_string(), t.to_string())]);
        let cx = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier);
        let span = cx.span().span_context().clone();
        span.is_valid().then_some(span)
    });
    match parent {
        Some(p) => PARENT.scope(p, statement).await,
        None => statement.await,
    }
}

impl Otlp {
    /// Sends `trace`'s spans. A failed send is said on stderr; the statement's answer stands.
    pub(crate) async fn export(&self, trace: &Trace) {
        let spans = self.spans(trace);
        let exporter = self.exporter.lock().await;
        if let Err(e) = exporter.export(spans).await {
            eprintln!("signalql: OpenTelemetry export failed: {e}");
        }
    }

    /// `trace`'s spans as OpenTelemetry spans: new span ids, the statement's parent (if the
    /// request had one) and its trace id, else a new trace.
    fn spans(&self, trace: &Trace) -> Vec<SpanData> {
        let ids = RandomIdGenerator::default();
        let parent = PARENT.try_with(Clone::clone).ok();
        let trace_id = parent
            .as_ref()
            .map_or_else(|| ids.new_trace_id(), SpanContext::trace_id);
        let span_ids: HashMap<&str, SpanId> = trace
            .spans
            .iter()
            .map(|s| (s.id.as_str(), ids.new_span_id()))
            .collect();
        trace
            .spans
            .iter()
            .map(|s| {
                let root = s.parent_id.is_none();
                let (parent_span_id, remote) = match (&s.parent_id, &parent) {
                    (Some(p), _) => (span_ids.get(p.as_str()).copied(), false),
                    (None, Some(p)) => (Some(p.span_id()), true),
                    (None, None) => (None, false),
                };
                let start = time_of(&s.start);
                let end = start + Duration::from_secs_f64(s.elapsed_ms.max(0.0) / 1e3);
                let mut attributes: Vec<KeyValue> =
                    s.attrs.iter().map(|(k, v)| attribute(k, v)).collect();
                let mut status = Status::Unset;
                if root {
                    attributes.extend([
                        KeyValue::new("signalql.statement", trace.statement.clone()),
                        KeyValue::new("signalql.surface", trace.surface.clone()),
                        KeyValue::new("signalql.plan_cache", trace.plan_cache.clone()),
                        KeyValue::new("signalql.trace_id", trace.id.clone()),
                    ]);
                    if let Some(p) = &trace.principal {
                        attributes.push(KeyValue::new("signalql.principal", p.clone()));
                    }
                    if let Some(e) = &trace.error {
                        let code = e["code"].as_str().unwrap_or_default().to_string();
                        attributes.push(KeyValue::new("signalql.error.code", code));
                        status =
                            Status::error(e["message"].as_str().unwrap_or_default().to_string());
                    }
                }
                SpanData {
                    span_context: SpanContext::new(
                        trace_id,
                        span_ids[s.id.as_str()],
                        TraceFlags::SAMPLED,
                        false,
                        TraceState::NONE,
                    ),
                    parent_span_id: parent_span_id.unwrap_or(SpanId::INVALID),
                    parent_span_is_remote: remote,
                    span_kind: if root && parent.is_some() {
                        SpanKind::Server
                    } else {
                        SpanKind::Internal
                    },
                    name: s.name.clone().into(),
                    start_time: start,
                    end_time: end,
                    attributes,
                    dropped_attributes_count: 0,
                    events: Default::default(),
                    links: Default::default(),
                    status,
                    instrumentation_scope: self.scope.clone(),
                }
            })
            .collect()
    }
}

/// A span's RFC 3339 start as a system time (the epoch if it does not read as one).
fn time_of(rfc3339: &str) -> SystemTime {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .map(SystemTime::from)
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// A trace attribute as an OpenTelemetry one: numbers, booleans and strings as themselves,
/// anything else as its JSON text.
fn attribute(key: &str, value: &Value) -> KeyValue {
    let key = format!("signalql.{key}");
    match value {
        Value::Bool(b) => KeyValue::new(key, *b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => KeyValue::new(key, i),
            None => KeyValue::new(key, n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => KeyValue::new(key, s.clone()),
        other => KeyValue::new(key, other.to_string()),
    }
}
