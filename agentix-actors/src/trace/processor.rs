//! [`Processor`]: what receives trace and span events, and the free
//! functions of v0.1 that register one on [`TraceHub::unscoped`].

use super::hub::TraceHub;
use super::model::{SpanData, TraceData, TraceEvent};

/// Receives trace and span lifecycle events. Every method has an empty
/// default, so a processor implements only what it needs. Its methods run
/// on a blocking pool, a batch at a time, so they may write files or
/// export; one that falls a whole queue behind loses events (counted by
/// [`TraceHub::refused`]), the traced code never waits for it.
pub trait Processor: Send + 'static {
    /// A trace started.
    fn on_trace_start(&mut self, _trace: &TraceData) {}
    /// A trace ended.
    fn on_trace_end(&mut self, _trace: &TraceData) {}
    /// A span started.
    fn on_span_start(&mut self, _span: &SpanData) {}
    /// A span ended.
    fn on_span_end(&mut self, _span: &SpanData) {}
    /// Deliver anything buffered (called by [`TraceHub::flush`]).
    fn force_flush(&mut self) {}
    /// Release resources; no event follows (called by [`TraceHub::shutdown`]).
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

/// Registers `processor` on the hub of spans made where no hub is in scope.
#[deprecated(
    since = "0.2.0",
    note = "use a TraceHub the program owns: `hub.add_processor(p)`, and give it to sandboxes with `SandboxConfig::trace_hub`"
)]
pub fn add_processor(processor: impl Processor) {
    TraceHub::unscoped().add_processor(processor);
}

/// Hands `event` to the processors of [`TraceHub::unscoped`].
#[deprecated(since = "0.2.0", note = "use `TraceHub::publish` on the program's hub")]
pub fn publish(event: TraceEvent) {
    TraceHub::unscoped().publish(event);
}

/// Waits until the processors of [`TraceHub::unscoped`] have handled every
/// event published before, and have flushed.
#[deprecated(since = "0.2.0", note = "use `hub.flush().await` on the program's hub")]
pub fn force_flush() {
    TraceHub::unscoped().force_flush();
}

/// Flushes and shuts down the processors of [`TraceHub::unscoped`].
#[deprecated(since = "0.2.0", note = "use `hub.shutdown().await` on the program's hub")]
pub fn shutdown() {
    futures_executor::block_on(TraceHub::unscoped().shutdown());
}
