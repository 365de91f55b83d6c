//! Two processors users expect: a console printer and a JSON-lines writer.

use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::path::Path;

use super::model::{SpanData, SpanStatus, TraceData, TraceEvent};
use super::processor::Processor;

/// Prints each span as it ends, indented under its parent, on stderr (or
/// any writer): `[origin] name 12.3ms model="claude" events=first_token`.
pub struct ConsoleProcessor {
    depth: HashMap<String, usize>,
    out: Box<dyn Write + Send>,
}

impl Default for ConsoleProcessor {
    fn default() -> Self {
        ConsoleProcessor::to_writer(std::io::stderr())
    }
}

impl ConsoleProcessor {
    /// A printer on stderr.
    pub fn new() -> Self {
        ConsoleProcessor::default()
    }

    /// A printer on `out`.
    pub fn to_writer(out: impl Write + Send + 'static) -> Self {
        ConsoleProcessor {
            depth: HashMap::new(),
            out: Box::new(out),
        }
    }

    fn print(&mut self, line: &str) {
        let _ = writeln!(self.out, "{line}");
    }
}

impl Processor for ConsoleProcessor {
    fn on_trace_start(&mut self, t: &TraceData) {
        let line = format!(
            "[{}] trace {} ({})",
            origin(&t.origin),
            t.name,
            short(&t.trace_id)
        );
        self.print(&line);
    }

    fn on_trace_end(&mut self, t: &TraceData) {
        let ms = t.end_us.unwrap_or(t.start_us).saturating_sub(t.start_us) as f64 / 1e3;
        let line = format!(
            "[{}] trace {} ended after {ms:.1}ms",
            origin(&t.origin),
            t.name
        );
        self.print(&line);
    }

    fn on_span_start(&mut self, s: &SpanData) {
        let depth = s
            .parent_id
            .as_ref()
            .and_then(|p| self.depth.get(p))
            .map_or(1, |d| d + 1);
        self.depth.insert(s.span_id.clone(), depth);
    }

    fn on_span_end(&mut self, s: &SpanData) {
        let depth = self.depth.remove(&s.span_id).unwrap_or(1);
        let ms = s.end_us.unwrap_or(s.start_us).saturating_sub(s.start_us) as f64 / 1e3;
        let mut line = format!(
            "[{}] {}{} {ms:.1}ms",
            origin(&s.origin),
            "  ".repeat(depth),
            s.name
        );
        for (k, v) in &s.attributes {
            line.push_str(&format!(" {k}={v}"));
        }
        if !s.events.is_empty() {
            let names: Vec<&str> = s.events.iter().map(|e| e.name.as_str()).collect();
            line.push_str(&format!(" events={}", names.join(",")));
        }
        if let SpanStatus::Error(m) = &s.status {
            line.push_str(&format!(" error={m:?}"));
        }
        self.print(&line);
    }

    fn force_flush(&mut self) {
        let _ = self.out.flush();
    }
}

fn origin(origin: &Option<String>) -> &str {
    origin.as_deref().unwrap_or("local")
}

fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

/// Appends every event as one JSON line (`{"kind": "span_end", "data":
/// {..}}`) to a file; flushed at each trace end, `force_flush` and `shutdown`.
pub struct JsonLinesProcessor {
    out: BufWriter<std::fs::File>,
}

impl JsonLinesProcessor {
    /// A writer appending to `path` (created if missing).
    pub fn create(path: impl AsRef<Path>) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(JsonLinesProcessor {
            out: BufWriter::new(file),
        })
    }

    fn write(&mut self, event: TraceEvent) {
        if let Ok(line) = serde_json::to_string(&event) {
            let _ = writeln!(self.out, "{line}");
        }
    }
}

impl Processor for JsonLinesProcessor {
    fn on_trace_start(&mut self, t: &TraceData) {
        self.write(TraceEvent::TraceStart(t.clone()));
    }

    fn on_trace_end(&mut self, t: &TraceData) {
        self.write(TraceEvent::TraceEnd(t.clone()));
        let _ = self.out.flush();
    }

    fn on_span_start(&mut self, s: &SpanData) {
        self.write(TraceEvent::SpanStart(s.clone()));
    }

    fn on_span_end(&mut self, s: &SpanData) {
        self.write(TraceEvent::SpanEnd(s.clone()));
    }

    fn force_flush(&mut self) {
        let _ = self.out.flush();
    }

    fn shutdown(&mut self) {
        let _ = self.out.flush();
    }
}
