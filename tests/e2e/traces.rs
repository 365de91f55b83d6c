//! `/trace`: sandbox spans reach host processors, nested under the host span
//! that made the call; sandbox processors see sandbox spans only.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentix::trace::{self, Processor, SpanData, TraceData, TraceEvent, TraceHub};
use support::{sandbox, wait_until};

/// Keeps every event it receives.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<TraceEvent>>>);

impl Processor for Capture {
    fn on_trace_start(&mut self, t: &TraceData) {
        self.0
            .lock()
            .unwrap()
            .push(TraceEvent::TraceStart(t.clone()));
    }
    fn on_trace_end(&mut self, t: &TraceData) {
        self.0.lock().unwrap().push(TraceEvent::TraceEnd(t.clone()));
    }
    fn on_span_start(&mut self, s: &SpanData) {
        self.0
            .lock()
            .unwrap()
            .push(TraceEvent::SpanStart(s.clone()));
    }
    fn on_span_end(&mut self, s: &SpanData) {
        self.0.lock().unwrap().push(TraceEvent::SpanEnd(s.clone()));
    }
}

impl Capture {
    fn ended_spans(&self, trace_id: &str) -> Vec<SpanData> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                TraceEvent::SpanEnd(s) if s.trace_id == trace_id => Some(s.clone()),
                _ => None,
            })
            .collect()
    }
}

#[tokio::test]
async fn sandbox_spans_nest_under_the_host_span_that_made_the_call() {
    let logs: Arc<Mutex<Vec<agentix::LogRecord>>> = Arc::default();
    let tap = logs.clone();
    let hub = TraceHub::new();
    let capture = Capture::default();
    hub.add_processor(capture.clone());
    let config = agentix::SandboxConfig::new(support::bundle_path())
        .trace_hub(hub.clone())
        .on_log(move |_, r| tap.lock().unwrap().push(r.clone()));
    let sb = support::sandbox_with(config).await;

    let eval = hub.trace("eval");
    let trace_id = eval.id().to_owned();
    let host_step = {
        let _in_eval = eval.enter();
        trace::span("host.step").attr("model", "claude")
    };
    assert_eq!(host_step.trace_id(), trace_id);
    let host_step_id = host_step.id();
    let sandbox_step_id = host_step
        .scope(async { sb.remote(agentix_e2e::traced_step, (3,)).await })
        .await
        .unwrap();
    host_step.add_event("first_token");
    drop(host_step);
    drop(eval);

    wait_until(
        "the sandbox spans at the host",
        Duration::from_secs(10),
        || capture.ended_spans(&trace_id).len() >= 5,
    )
    .await;
    hub.flush().await;
    let spans = capture.ended_spans(&trace_id);
    let host = spans.iter().find(|s| s.name == "host.step").unwrap();
    assert_eq!(host.span_id, host_step_id);
    assert_eq!(host.parent_id, None);
    assert_eq!(host.origin, None, "a host span is local");
    assert_eq!(host.attributes["model"], "claude");
    assert_eq!(host.events[0].name, "first_token");

    let step = spans.iter().find(|s| s.name == "sandbox.step").unwrap();
    assert_eq!(step.span_id, sandbox_step_id);
    assert_eq!(step.parent_id.as_deref(), Some(host_step_id.as_str()));
    assert_eq!(step.origin.as_deref(), Some(sb.id()));
    assert_eq!(step.attributes["children"], 3);
    assert!(step.start_us >= host.start_us && step.end_us <= host.end_us);

    let children: Vec<&SpanData> = spans.iter().filter(|s| s.name == "sandbox.child").collect();
    assert_eq!(children.len(), 3);
    for (i, child) in children.iter().enumerate() {
        assert_eq!(child.parent_id.as_deref(), Some(sandbox_step_id.as_str()));
        assert_eq!(child.attributes["index"], i as u64);
        assert_eq!(child.events.len(), 1);
        assert_eq!(child.events[0].name, "tick");
        assert!(child.end_us.unwrap() >= child.start_us);
    }
    // A record logged inside a span names that span and its trace.
    wait_until(
        "the record logged inside the step",
        Duration::from_secs(10),
        || {
            logs.lock()
                .unwrap()
                .iter()
                .any(|r| r.message == "inside the step")
        },
    )
    .await;
    let inside = logs
        .lock()
        .unwrap()
        .iter()
        .find(|r| r.message == "inside the step")
        .cloned()
        .unwrap();
    assert_eq!(inside.span_id.as_deref(), Some(sandbox_step_id.as_str()));
    assert_eq!(inside.trace_id.as_deref(), Some(trace_id.as_str()));

    let events = capture.0.lock().unwrap().clone();
    assert!(events.iter().any(
        |e| matches!(e, TraceEvent::TraceEnd(t) if t.trace_id == trace_id && t.end_us.is_some())
    ));
    // Every sandbox span was announced before it ended.
    for s in spans.iter().filter(|s| s.origin.is_some()) {
        assert!(events
            .iter()
            .any(|e| matches!(e, TraceEvent::SpanStart(x) if x.span_id == s.span_id)));
    }
}

#[tokio::test]
async fn a_sandbox_processor_sees_only_sandbox_spans() {
    let sb = sandbox().await;
    assert!(sb
        .remote(agentix_e2e::install_sandbox_counter, ())
        .await
        .unwrap());
    let host_span = trace::span("host.outer");
    host_span
        .scope(async { sb.remote(agentix_e2e::traced_step, (2,)).await })
        .await
        .unwrap();
    drop(host_span);
    let (spans, foreign) = sb.remote(agentix_e2e::sandbox_counts, ()).await.unwrap();
    assert_eq!(spans, 3, "one step and two children");
    assert_eq!(foreign, 0, "host spans never reach sandbox processors");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_context_follows_a_task_across_threads() {
    // A multi-thread runtime moves tasks between threads at .await points.
    let hub = TraceHub::new();
    let capture = Capture::default();
    hub.add_processor(capture.clone());
    let outer = hub.span("host.migrating");
    let outer_id = outer.id();
    let trace_id = outer.trace_id();
    let done = outer.scope(async move {
        let mut ids = Vec::new();
        for _ in 0..20 {
            tokio::task::yield_now().await;
            let child = trace::span("host.hop");
            ids.push(child.id());
        }
        ids
    });
    let ids = tokio::spawn(done).await.unwrap();
    drop(outer);
    hub.flush().await;
    let spans = capture.ended_spans(&trace_id);
    for id in ids {
        let hop = spans.iter().find(|s| s.span_id == id).unwrap();
        assert_eq!(hop.parent_id.as_deref(), Some(outer_id.as_str()));
    }
    // And it does not leak out of the scope.
    assert_eq!(trace::current(), None);
}

#[tokio::test]
async fn tracing_spans_in_sandbox_code_join_the_trace_when_selected() {
    let logs: Arc<Mutex<Vec<agentix::LogRecord>>> = Arc::default();
    let tap = logs.clone();
    let config = agentix::SandboxConfig::new(support::bundle_path())
        .tracing_spans("agentix_e2e=info")
        .on_log(move |_, r| tap.lock().unwrap().push(r.clone()));
    let sb = support::sandbox_with(config).await;
    // The sandbox's own hub: its spans, and the host's spans made on it.
    let capture = Capture::default();
    sb.traces().add_processor(capture.clone());

    let step = sb.traces().span("host.instrumented");
    let (trace_id, step_id) = (step.trace_id(), step.id());
    use agentix::prelude::InSpan;
    let done = sb
        .remote(agentix_e2e::instrumented_work, 3u32)
        .in_span(step)
        .await
        .unwrap();
    assert_eq!(done, 3);
    wait_until("the bridged spans", Duration::from_secs(10), || {
        capture
            .ended_spans(&trace_id)
            .iter()
            .filter(|s| s.name == "e2e.inner")
            .count()
            == 3
    })
    .await;
    // The host span's end was queued when the call returned; the
    // processor's lane may not have handled it yet.
    sb.traces().flush().await;
    let spans = capture.ended_spans(&trace_id);
    let host = spans.iter().find(|s| s.name == "host.instrumented");
    assert!(
        host.is_some(),
        "the span `in_span` owned ended with the call"
    );
    let parts: Vec<&SpanData> = spans.iter().filter(|s| s.name == "e2e.part").collect();
    assert_eq!(parts.len(), 3, "one span per #[instrument] call");
    for (i, part) in parts.iter().enumerate() {
        assert_eq!(part.parent_id.as_deref(), Some(step_id.as_str()));
        assert_eq!(part.origin.as_deref(), Some(sb.id()));
        assert_eq!(part.attributes["index"], i as u64);
        assert_eq!(part.attributes["kind"], "unit");
        assert_eq!(part.attributes["code.target"], "agentix_e2e");
        let inner: Vec<&SpanData> = spans
            .iter()
            .filter(|s| s.name == "e2e.inner" && s.parent_id.as_deref() == Some(&part.span_id))
            .collect();
        assert_eq!(inner.len(), 1, "the agentix span nests in the tracing one");
    }
    assert!(
        !spans.iter().any(|s| s.name == "not.forwarded"),
        "a target the host did not select stays out"
    );
    // A record logged inside a bridged span names it.
    wait_until("the records", Duration::from_secs(10), || {
        logs.lock()
            .unwrap()
            .iter()
            .any(|r| r.message == "in part 2")
    })
    .await;
    let record = logs
        .lock()
        .unwrap()
        .iter()
        .find(|r| r.message == "in part 2")
        .cloned()
        .unwrap();
    assert_eq!(record.span_id.as_deref(), Some(parts[2].span_id.as_str()));
}

// Hardening, second round: no websocket message is over 16 MiB, so a span
// whose attribute is larger must be cut to fit, not cost the sandbox its
// host's connection.
#[tokio::test]
async fn a_span_with_a_huge_attribute_arrives_cut_and_the_calls_go_on() {
    let sb = sandbox().await;
    let capture = Capture::default();
    sb.traces().add_processor(capture.clone());
    let bytes = 20usize << 20;
    assert_eq!(
        sb.remote(agentix_e2e::huge_span, bytes).await.unwrap(),
        bytes
    );
    let huge = || {
        capture.0.lock().unwrap().iter().find_map(|e| match e {
            TraceEvent::SpanEnd(s) if s.name == "huge.span" => Some(s.clone()),
            _ => None,
        })
    };
    wait_until("the huge span", Duration::from_secs(10), || {
        huge().is_some()
    })
    .await;
    let span = huge().unwrap();
    let big = span.attributes["big"].as_str().unwrap();
    assert!(big.len() <= (64 << 10) + 32, "{} bytes", big.len());
    assert!(big.ends_with("bytes cut]"));
    assert_eq!(sb.remote(agentix_e2e::add, (2, 2)).await.unwrap(), 4);
}

/// The names of the spans that ended, and where they came from.
fn ended(capture: &Capture) -> Vec<(String, Option<String>)> {
    let mut seen: Vec<_> = capture
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            TraceEvent::SpanEnd(s) => Some((s.name.clone(), s.origin.clone())),
            _ => None,
        })
        .collect();
    seen.sort();
    seen
}

#[tokio::test]
async fn two_hosts_in_one_process_see_only_their_own_sandboxes_spans() {
    let (hub_a, hub_b) = (TraceHub::new(), TraceHub::new());
    let (seen_a, seen_b) = (Capture::default(), Capture::default());
    hub_a.add_processor(seen_a.clone());
    hub_b.add_processor(seen_b.clone());
    // Given in the config for one, in scope where it is created for the other.
    let a = support::sandbox_with(
        agentix::SandboxConfig::new(support::bundle_path()).trace_hub(hub_a.clone()),
    )
    .await;
    let b = hub_b.scope(support::sandbox()).await;
    // A processor of one sandbox's own sees that sandbox only.
    let only_b = Capture::default();
    b.traces().add_processor(only_b.clone());

    let (step_a, step_b) = (hub_a.span("host.a"), hub_b.span("host.b"));
    step_a
        .scope(a.remote(agentix_e2e::traced_step, (1,)))
        .await
        .unwrap();
    step_b
        .scope(b.remote(agentix_e2e::traced_step, (2,)))
        .await
        .unwrap();
    drop((step_a, step_b));
    let (id_a, id_b) = (Some(a.id().to_owned()), Some(b.id().to_owned()));
    wait_until("both sandboxes' spans", Duration::from_secs(10), || {
        ended(&seen_a).len() == 3 && ended(&seen_b).len() == 4
    })
    .await;
    hub_a.flush().await;
    b.traces().flush().await;
    assert_eq!(
        ended(&seen_a),
        [
            ("host.a".to_owned(), None),
            ("sandbox.child".to_owned(), id_a.clone()),
            ("sandbox.step".to_owned(), id_a),
        ]
    );
    let from_b = [
        ("host.b".to_owned(), None),
        ("sandbox.child".to_owned(), id_b.clone()),
        ("sandbox.child".to_owned(), id_b.clone()),
        ("sandbox.step".to_owned(), id_b.clone()),
    ];
    assert_eq!(ended(&seen_b), from_b);
    assert_eq!(
        ended(&only_b),
        from_b[1..],
        "the sandbox's own, not the host's"
    );
    assert_eq!(hub_a.refused() + hub_b.refused(), 0);
}
