//! An agentix span as OpenTelemetry's SDK exports it: ids from their hex,
//! times from microseconds, attributes from JSON, and the sandbox a span
//! came from as the `agentix.sandbox` attribute.

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agentix::trace::{SpanData as AgentixSpan, SpanStatus};
use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

/// The attribute naming the sandbox a span was replayed from.
pub const SANDBOX_ATTRIBUTE: &str = "agentix.sandbox";

/// `span` for the exporter; `None` if its ids are not OpenTelemetry's
/// (32 and 16 hex digits, as agentix makes them).
pub fn to_otel(span: &AgentixSpan, scope: &InstrumentationScope) -> Option<SpanData> {
    let trace_id = TraceId::from_hex(&span.trace_id).ok()?;
    let span_id = SpanId::from_hex(&span.span_id).ok()?;
    let parent_span_id = match &span.parent_id {
        Some(parent) => SpanId::from_hex(parent).ok()?,
        None => SpanId::INVALID,
    };
    let mut attributes: Vec<KeyValue> = span
        .attributes
        .iter()
        .map(|(key, value)| KeyValue::new(key.clone(), json_value(value)))
        .collect();
    if let Some(sandbox) = &span.origin {
        attributes.push(KeyValue::new(SANDBOX_ATTRIBUTE, sandbox.clone()));
    }
    let mut span_events = SpanEvents::default();
    span_events.events = span
        .events
        .iter()
        .map(|e| {
            let attributes = e
                .attributes
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), json_value(v)))
                .collect();
            Event::new(e.name.clone(), time(e.ts_us), attributes, 0)
        })
        .collect();
    Some(SpanData {
        span_context: SpanContext::new(
            trace_id,
            span_id,
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        parent_span_id,
        // A sandbox span's parent is the host span that made the call.
        parent_span_is_remote: span.origin.is_some(),
        span_kind: SpanKind::Internal,
        name: Cow::Owned(span.name.clone()),
        start_time: time(span.start_us),
        end_time: time(span.end_us.unwrap_or(span.start_us)),
        attributes,
        dropped_attributes_count: 0,
        events: span_events,
        links: SpanLinks::default(),
        status: match &span.status {
            SpanStatus::Unset => Status::Unset,
            SpanStatus::Ok => Status::Ok,
            SpanStatus::Error(message) => Status::error(message.clone()),
        },
        instrumentation_scope: scope.clone(),
    })
}

fn time(us: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(us)
}

/// A JSON attribute as OpenTelemetry's: scalars as themselves, anything
/// else as its JSON text.
fn json_value(value: &serde_json::Value) -> Value {
    match value {
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Value::I64(i),
            (None, Some(f)) => Value::F64(f),
            _ => Value::String(n.to_string().into()),
        },
        serde_json::Value::String(s) => Value::String(s.clone().into()),
        other => Value::String(other.to_string().into()),
    }
}
