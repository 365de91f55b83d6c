//! [`Processor`]s and the mailboxes that feed them.
//!
//! Each registered processor gets a thread of its own and a bounded mailbox:
//! traced code only enqueues, so a slow processor never slows it (until the
//! processor is a whole mailbox behind, when enqueueing waits rather than
//! dropping). [`force_flush`] waits until every event enqueued before it has
//! been handled. They are mailbox threads rather than actix actors because
//! traced code is often sync and must never need a runtime to enqueue.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::RwLock;

use super::model::{SpanData, TraceData, TraceEvent};

/// Events a processor may fall behind by before traced code waits. The
/// mailbox's slots are allocated and touched up front, in every process
/// that registers a processor (every worker does), so it stays small and
/// events are boxed.
const MAILBOX: usize = 2_048;

/// Receives trace and span lifecycle events. Every method has an empty
/// default, so a processor implements only what it needs.
pub trait Processor: Send + 'static {
    /// A trace started.
    fn on_trace_start(&mut self, _trace: &TraceData) {}
    /// A trace ended.
    fn on_trace_end(&mut self, _trace: &TraceData) {}
    /// A span started.
    fn on_span_start(&mut self, _span: &SpanData) {}
    /// A span ended.
    fn on_span_end(&mut self, _span: &SpanData) {}
    /// Deliver anything buffered (called by [`force_flush`]).
    fn force_flush(&mut self) {}
    /// Release resources; no event follows (called by [`shutdown`]).
    fn shutdown(&mut self) {}
}

enum Mail {
    Event(Box<TraceEvent>),
    Flush(SyncSender<()>),
    Shutdown(SyncSender<()>),
}

static MAILBOXES: RwLock<Vec<SyncSender<Mail>>> = RwLock::new(Vec::new());
static REGISTERED: AtomicUsize = AtomicUsize::new(0);

/// Registers `processor` for every trace event of this process from now on.
pub fn add_processor(mut processor: impl Processor) {
    let (tx, rx) = sync_channel::<Mail>(MAILBOX);
    let spawned = std::thread::Builder::new()
        .name("agentix-trace".into())
        .spawn(move || {
            for mail in rx {
                match mail {
                    Mail::Event(event) => deliver(&mut processor, &event),
                    Mail::Flush(done) => {
                        processor.force_flush();
                        let _ = done.send(());
                    }
                    Mail::Shutdown(done) => {
                        processor.shutdown();
                        let _ = done.send(());
                        return;
                    }
                }
            }
        });
    if let Err(e) = spawned {
        eprintln!("agentix: cannot start a trace processor thread: {e}");
        return;
    }
    MAILBOXES
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .push(tx);
    REGISTERED.fetch_add(1, Ordering::Release);
}

fn deliver(processor: &mut impl Processor, event: &TraceEvent) {
    match event {
        TraceEvent::TraceStart(t) => processor.on_trace_start(t),
        TraceEvent::TraceEnd(t) => processor.on_trace_end(t),
        TraceEvent::SpanStart(s) => processor.on_span_start(s),
        TraceEvent::SpanEnd(s) => processor.on_span_end(s),
    }
}

/// Whether any processor would see an event (lets tracing skip the work).
pub(crate) fn anyone_listening() -> bool {
    REGISTERED.load(Ordering::Acquire) > 0
}

/// Hands `event` to every processor.
pub fn publish(event: TraceEvent) {
    if !anyone_listening() {
        return;
    }
    let boxes = MAILBOXES.read().unwrap_or_else(|p| p.into_inner());
    if let Some((last, rest)) = boxes.split_last() {
        for tx in rest {
            let _ = tx.send(Mail::Event(Box::new(event.clone())));
        }
        // A processor that panicked has no mailbox any more; skip it.
        let _ = last.send(Mail::Event(Box::new(event)));
    }
}

/// Waits until every processor has handled every event published before
/// this call, then has run its `force_flush`.
pub fn force_flush() {
    for done in broadcast(Mail::Flush) {
        let _ = done.recv();
    }
}

/// Flushes and shuts down every processor; later events go nowhere.
pub fn shutdown() {
    for done in broadcast(Mail::Shutdown) {
        let _ = done.recv();
    }
    MAILBOXES.write().unwrap_or_else(|p| p.into_inner()).clear();
    REGISTERED.store(0, Ordering::Release);
}

fn broadcast(make: fn(SyncSender<()>) -> Mail) -> Vec<std::sync::mpsc::Receiver<()>> {
    let boxes = MAILBOXES.read().unwrap_or_else(|p| p.into_inner());
    boxes
        .iter()
        .filter_map(|tx| {
            let (done_tx, done_rx) = sync_channel(1);
            tx.send(make(done_tx)).ok().map(|()| done_rx)
        })
        .collect()
}
