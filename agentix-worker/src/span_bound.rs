//! [`bound_span`]: a span as one side-channel batch can carry it.
//!
//! A span's attributes are whatever sandbox code gives them. One of tens of
//! MiB, or thousands of them, would make a batch too large for one
//! websocket message and cost the sandbox its host's connection. So before
//! a span leaves the worker, each string value is cut to [`MAX_VALUE_BYTES`]
//! (saying so), a larger array or object becomes its JSON text cut the
//! same way, and attributes past [`MAX_SPAN_BYTES`] in all are left out,
//! counted in `agentix.attributes_cut`.

use std::collections::BTreeMap;

use serde_json::Value;

use agentix_trace::{SpanData, TraceEvent};
use agentix_wire::text_cut::cut_text;

/// Longest attribute value, as a log line's.
pub(crate) const MAX_VALUE_BYTES: usize = 64 << 10;

/// Most bytes of attributes, its events' included, one span carries.
pub(crate) const MAX_SPAN_BYTES: usize = 256 << 10;

/// The attribute that counts what [`bound_span`] left out.
pub(crate) const ATTRIBUTES_CUT: &str = "agentix.attributes_cut";

/// Cuts `span`'s attributes and its events' to fit [`MAX_SPAN_BYTES`].
pub(crate) fn bound_span(span: &mut SpanData) {
    let mut room = MAX_SPAN_BYTES;
    let mut cut = bound_attributes(&mut span.attributes, &mut room);
    for event in &mut span.events {
        cut += bound_attributes(&mut event.attributes, &mut room);
    }
    if cut > 0 {
        span.attributes
            .insert(ATTRIBUTES_CUT.to_owned(), Value::from(cut));
    }
}

/// About the bytes `event` takes in a batch.
pub(crate) fn approx_len(event: &TraceEvent) -> usize {
    match event {
        TraceEvent::TraceStart(_) | TraceEvent::TraceEnd(_) => 256,
        TraceEvent::SpanStart(s) | TraceEvent::SpanEnd(s) => {
            let events: usize = s
                .events
                .iter()
                .map(|e| 64 + attributes_len(&e.attributes))
                .sum();
            256 + s.name.len() + attributes_len(&s.attributes) + events
        }
    }
}

fn attributes_len(attributes: &BTreeMap<String, Value>) -> usize {
    attributes.iter().map(|(k, v)| k.len() + value_len(v)).sum()
}

fn value_len(value: &Value) -> usize {
    match value {
        Value::String(s) => s.len() + 2,
        Value::Array(_) | Value::Object(_) => serde_json::to_string(value).map_or(0, |s| s.len()),
        _ => 16,
    }
}

/// Cuts each value of `attributes`, then leaves out those past `room`;
/// returns how many it left out.
fn bound_attributes(attributes: &mut BTreeMap<String, Value>, room: &mut usize) -> u64 {
    let mut cut = 0;
    attributes.retain(|key, value| {
        if let Value::String(text) = value {
            cut_text(text, MAX_VALUE_BYTES);
        } else if value_len(value) > MAX_VALUE_BYTES {
            let mut text = value.to_string();
            cut_text(&mut text, MAX_VALUE_BYTES);
            *value = Value::String(text);
        }
        let len = key.len() + value_len(value);
        if len > *room {
            cut += 1;
            return false;
        }
        *room -= len;
        true
    });
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_and_many_attributes_are_cut_to_fit_and_counted() {
        let mut span = SpanData {
            trace_id: "t".into(),
            span_id: "s".into(),
            parent_id: None,
            name: "n".into(),
            start_us: 0,
            end_us: None,
            attributes: BTreeMap::new(),
            events: Vec::new(),
            status: Default::default(),
            origin: None,
        };
        span.attributes
            .insert("big".into(), Value::from("x".repeat(20 << 20)));
        span.attributes
            .insert("a_list".into(), Value::from(vec![1u64; 1 << 20]));
        for i in 0..100 {
            span.attributes
                .insert(format!("k{i:03}"), Value::from("y".repeat(10_000)));
        }
        bound_span(&mut span);
        let big = span.attributes["big"].as_str().unwrap();
        assert!(big.len() <= MAX_VALUE_BYTES + 32 && big.ends_with("bytes cut]"));
        assert!(span.attributes["a_list"].is_string());
        let cut = span.attributes[ATTRIBUTES_CUT].as_u64().unwrap();
        assert!(cut > 0 && cut < 100, "{cut}");
        assert!(approx_len(&TraceEvent::SpanEnd(span)) < MAX_SPAN_BYTES + 1024);
    }
}
