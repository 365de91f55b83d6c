//! The trace API in one process: nesting, attributes, events, status, and
//! processors that run behind their mailboxes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentix_actors::trace::{self, Processor, SpanData, SpanStatus, TraceData};

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
    trace::add_processor(seen.clone());

    let eval = trace::trace("eval");
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

    trace::force_flush();
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
    trace::add_processor(trace::JsonLinesProcessor::create(&path).unwrap());
    let t = trace::trace("json-lines");
    let trace_id = t.id().to_owned();
    {
        let _in = t.enter();
        let s = trace::span("written").attr("k", "v");
        s.add_event("e");
    }
    drop(t);
    trace::force_flush();
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
    trace::add_processor(trace::ConsoleProcessor::to_writer(out.clone()));
    let t = trace::trace("console-tree");
    {
        let _in = t.enter();
        let parent = trace::span("console.parent").attr("model", "claude");
        let _in_parent = parent.enter();
        let child = trace::span("console.child");
        child.add_event("first_token");
        child.set_error("boom");
    }
    drop(t);
    trace::force_flush();
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
