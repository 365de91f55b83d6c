//! The trace API in one process: nesting, attributes, events, status,
//! processors that run behind their bounded lanes, and hubs that keep one
//! program's processors from another's spans.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentix_trace::{
    self as trace, Processor, SpanData, SpanStatus, TraceData, TraceHub, PROCESSOR_QUEUE,
};

#[derive(Clone, Default)]
struct Slow {
    starts: Arc<Mutex<Vec<SpanData>>>,
    ends: Arc<Mutex<Vec<SpanData>>>,
    traces: Arc<Mutex<Vec<TraceData>>>,
}

impl Processor for Slow {
    fn on_trace_end(&mut self, t: &TraceData) {
        self.traces.lock().unwrap().push(t.clone());
    }
    fn on_span_start(&mut self, s: &SpanData) {
        self.starts.lock().unwrap().push(s.clone());
    }
    fn on_span_end(&mut self, s: &SpanData) {
        // A slow exporter: the traced code must not wait for it.
        std::thread::sleep(Duration::from_millis(1));
        self.ends.lock().unwrap().push(s.clone());
    }
}

#[test]
fn spans_nest_carry_their_data_and_flush_delivers_everything() {
    let seen = Slow::default();
    let hub = TraceHub::new();
    hub.add_processor(seen.clone());

    let eval = hub.trace("eval");
    let trace_id = eval.id().to_owned();
    let step_id;
    {
        let _in_eval = eval.enter();
        let step = trace::span("agent.step").attr("model", "claude");
        step_id = step.id();
        let _in_step = step.enter();
        for i in 0..200u32 {
            let tool = trace::span("tool").attr("i", i);
            if i == 7 {
                tool.set_error("tool failed");
            }
        }
        step.add_event("first_token");
        step.set_status(SpanStatus::Ok);
    }
    drop(eval);
    assert_eq!(trace::current(), None, "guards restore the outer context");
    assert!(TraceHub::current().is_none(), "and the outer hub");

    hub.force_flush();
    let ends = seen.ends.lock().unwrap().clone();
    let mine: Vec<&SpanData> = ends.iter().filter(|s| s.trace_id == trace_id).collect();
    assert_eq!(mine.len(), 201, "force_flush waits for every queued event");
    let tools: Vec<&&SpanData> = mine.iter().filter(|s| s.name == "tool").collect();
    for (i, t) in tools.iter().enumerate() {
        assert_eq!(t.parent_id.as_deref(), Some(step_id.as_str()));
        assert_eq!(t.attributes["i"], i as u64, "in order");
    }
    assert_eq!(tools[7].status, SpanStatus::Error("tool failed".into()));
    let step = mine.iter().find(|s| s.name == "agent.step").unwrap();
    assert_eq!(step.parent_id, None, "top level of the trace");
    assert_eq!(step.status, SpanStatus::Ok);
    assert_eq!(step.events[0].name, "first_token");
    let starts = seen.starts.lock().unwrap().clone();
    let step_start = starts.iter().find(|s| s.span_id == step_id).unwrap();
    assert_eq!(
        step_start.attributes["model"], "claude",
        "attributes set before first use are in the start event"
    );
    assert!(seen
        .traces
        .lock()
        .unwrap()
        .iter()
        .any(|t| t.trace_id == trace_id && t.end_us.is_some()));
}

#[test]
fn a_span_outside_any_trace_starts_its_own() {
    let a = trace::span("lonely");
    let b = trace::span("other");
    assert_ne!(a.trace_id(), b.trace_id());
    assert_eq!(a.trace_id().len(), 32);
    assert_eq!(a.id().len(), 16);
}

#[test]
fn the_json_lines_processor_writes_every_event() {
    let path = std::env::temp_dir().join(format!("agentix-trace-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let hub = TraceHub::new();
    hub.add_processor(trace::JsonLinesProcessor::create(&path).unwrap());
    let t = hub.trace("json-lines");
    let trace_id = t.id().to_owned();
    {
        let _in = t.enter();
        let s = trace::span("written").attr("k", "v");
        s.add_event("e");
    }
    drop(t);
    hub.force_flush();
    let text = std::fs::read_to_string(&path).unwrap();
    let mine: Vec<trace::TraceEvent> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|e: &trace::TraceEvent| match e {
            trace::TraceEvent::TraceStart(t) | trace::TraceEvent::TraceEnd(t) => {
                t.trace_id == trace_id
            }
            trace::TraceEvent::SpanStart(s) | trace::TraceEvent::SpanEnd(s) => {
                s.trace_id == trace_id
            }
        })
        .collect();
    let kinds: Vec<&str> = mine
        .iter()
        .map(|e| match e {
            trace::TraceEvent::TraceStart(_) => "trace_start",
            trace::TraceEvent::TraceEnd(_) => "trace_end",
            trace::TraceEvent::SpanStart(_) => "span_start",
            trace::TraceEvent::SpanEnd(_) => "span_end",
        })
        .collect();
    assert_eq!(
        kinds,
        ["trace_start", "span_start", "span_end", "trace_end"]
    );
    let trace::TraceEvent::SpanEnd(span) = &mine[2] else {
        unreachable!()
    };
    assert_eq!(span.attributes["k"], "v");
    assert_eq!(span.events[0].name, "e");
    let _ = std::fs::remove_file(&path);
}

/// A writer whose bytes the test can read back.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_console_processor_prints_an_indented_tree() {
    let out = Shared::default();
    let hub = TraceHub::new();
    hub.add_processor(trace::ConsoleProcessor::to_writer(out.clone()));
    let t = hub.trace("console-tree");
    {
        let _in = t.enter();
        let parent = trace::span("console.parent").attr("model", "claude");
        let _in_parent = parent.enter();
        let child = trace::span("console.child");
        child.add_event("first_token");
        child.set_error("boom");
    }
    drop(t);
    hub.force_flush();
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    let child = text.lines().find(|l| l.contains("console.child")).unwrap();
    let parent = text.lines().find(|l| l.contains("console.parent")).unwrap();
    assert!(child.starts_with("[local]     console.child "), "{child}");
    assert!(
        child.contains("events=first_token") && child.contains("error=\"boom\""),
        "{child}"
    );
    assert!(parent.starts_with("[local]   console.parent "), "{parent}");
    assert!(parent.contains("model=\"claude\""), "{parent}");
    assert!(text.contains("trace console-tree ended after"), "{text}");
}

/// Counts the spans that end, by name.
#[derive(Clone, Default)]
struct Names(Arc<Mutex<Vec<String>>>);

impl Processor for Names {
    fn on_span_end(&mut self, s: &SpanData) {
        self.0.lock().unwrap().push(s.name.clone());
    }
}

impl Names {
    fn seen(&self) -> Vec<String> {
        let mut names = self.0.lock().unwrap().clone();
        names.sort();
        names
    }
}

#[tokio::test]
async fn two_hubs_in_one_process_see_only_their_own_spans() {
    let (a, b) = (TraceHub::new(), TraceHub::new());
    let (seen_a, seen_b) = (Names::default(), Names::default());
    a.add_processor(seen_a.clone());
    b.add_processor(seen_b.clone());
    let in_a = a.scope(async {
        // The free functions publish to the hub in scope, across awaits.
        let _s = trace::span("made in a");
        tokio::task::yield_now().await;
        let _t = trace::span("also in a");
    });
    let in_b = b.scope(async {
        let _s = trace::span("made in b");
    });
    tokio::join!(in_a, in_b);
    drop(trace::span("made in no hub"));
    a.flush().await;
    b.flush().await;
    assert_eq!(seen_a.seen(), ["also in a", "made in a"]);
    assert_eq!(seen_b.seen(), ["made in b"]);
}

#[tokio::test]
async fn a_childs_spans_reach_its_parent_and_not_its_sibling() {
    let parent = TraceHub::new();
    let (first, second) = (parent.child(), parent.child());
    let (all, only_first, only_second) = (Names::default(), Names::default(), Names::default());
    parent.add_processor(all.clone());
    first.add_processor(only_first.clone());
    second.add_processor(only_second.clone());
    drop(first.span("first's"));
    drop(second.span("second's"));
    drop(parent.span("parent's"));
    // Flushing a child flushes what it passed on too.
    first.flush().await;
    second.flush().await;
    assert_eq!(all.seen(), ["first's", "parent's", "second's"]);
    assert_eq!(only_first.seen(), ["first's"]);
    assert_eq!(only_second.seen(), ["second's"]);
}

/// Holds its first event until released, then counts every event.
struct Stuck {
    release: std::sync::mpsc::Receiver<()>,
    waited: bool,
    handled: Arc<AtomicUsize>,
}

impl Stuck {
    fn count(&mut self) {
        if !self.waited {
            self.waited = true;
            let _ = self.release.recv();
        }
        self.handled.fetch_add(1, Ordering::SeqCst);
    }
}

impl Processor for Stuck {
    fn on_span_start(&mut self, _: &SpanData) {
        self.count();
    }
    fn on_span_end(&mut self, _: &SpanData) {
        self.count();
    }
}

#[test]
fn a_stuck_processor_costs_its_own_events_counted_never_the_traced_code() {
    let hub = TraceHub::new();
    let (release, held) = std::sync::mpsc::channel();
    let handled = Arc::new(AtomicUsize::new(0));
    hub.add_processor(Stuck {
        release: held,
        waited: false,
        handled: handled.clone(),
    });
    // A start and an end each: more than the lane holds.
    let spans = PROCESSOR_QUEUE;
    // Would never return if traced code waited for the stuck processor.
    for _ in 0..spans {
        drop(hub.span("s"));
    }
    let refused = hub.refused() as usize;
    assert!(
        refused >= PROCESSOR_QUEUE - 256,
        "a full lane refuses: {refused}"
    );
    release.send(()).unwrap();
    hub.force_flush();
    assert_eq!(
        handled.load(Ordering::SeqCst) + refused,
        2 * spans,
        "every event is handled or counted"
    );
    // The lane works again once drained.
    drop(hub.span("after"));
    hub.force_flush();
    assert_eq!(handled.load(Ordering::SeqCst) + refused, 2 * spans + 2);
}

#[test]
fn a_processor_that_panics_stops_alone_and_its_losses_are_counted() {
    struct Panics;
    impl Processor for Panics {
        fn on_span_end(&mut self, _: &SpanData) {
            panic!("a broken exporter");
        }
    }
    let hub = TraceHub::new();
    hub.add_processor(Panics);
    let healthy = Names::default();
    hub.add_processor(healthy.clone());
    drop(hub.span("first"));
    hub.force_flush();
    drop(hub.span("second"));
    hub.force_flush();
    assert_eq!(healthy.seen(), ["first", "second"]);
    assert_eq!(
        hub.refused(),
        2,
        "the start and end the stopped processor missed"
    );
}

#[test]
#[allow(deprecated)]
fn the_free_functions_of_v0_1_still_reach_the_unscoped_hub() {
    let seen = Names::default();
    trace::add_processor(seen.clone());
    drop(trace::span("unscoped-v0.1"));
    trace::force_flush();
    assert!(seen.seen().contains(&"unscoped-v0.1".to_owned()));
}
