//! [`Processor`]: what receives trace and span events.

use super::model::{SpanData, TraceData, TraceEvent};

/// Receives trace and span lifecycle events. Every method has an empty
/// default, so a processor implements only what it needs. Its methods run
/// on a blocking pool, a batch at a time, so they may write files or
/// export; one that falls a whole queue behind loses events (counted by
/// `TraceHub::refused`), the traced code never waits for it.
pub trait Processor: Send + 'static {
    /// A trace started.
    fn on_trace_start(&mut self, _trace: &TraceData) {}
    /// A trace ended.
    fn on_trace_end(&mut self, _trace: &TraceData) {}
    /// A span started.
    fn on_span_start(&mut self, _span: &SpanData) {}
    /// A span ended.
    fn on_span_end(&mut self, _span: &SpanData) {}
    /// Deliver anything buffered (called by `TraceHub::flush`).
    fn force_flush(&mut self) {}
    /// Release resources; no event follows (called by `TraceHub::shutdown`).
    fn shutdown(&mut self) {}
}

/// Calls the method of `processor` that `event` is for.
pub(crate) fn deliver(processor: &mut dyn Processor, event: &TraceEvent) {
    match event {
        TraceEvent::TraceStart(t) => processor.on_trace_start(t),
        TraceEvent::TraceEnd(t) => processor.on_trace_end(t),
        TraceEvent::SpanStart(s) => processor.on_span_start(s),
        TraceEvent::SpanEnd(s) => processor.on_span_end(s),
    }
}
