//! Trace processors as actors: [`add_actor_processor`] registers a
//! `Handler<TraceEvent>` as a processor.
//!
//! It gets a processor's mailbox thread like any other, which hands each
//! event to the actor with `send` and waits for it to be handled: the actor
//! sees every event in order, and one that falls behind makes the thread
//! wait, which fills the processor's bounded mailbox, which makes traced
//! code wait (as a slow [`Processor`](super::Processor) does), so nothing
//! is dropped and nothing grows. `force_flush` returns once the actor has
//! handled every event published before it.

use actix::{Message, Recipient};

use super::model::{SpanData, TraceData, TraceEvent};
use super::processor::{add_processor, Processor};

impl Message for TraceEvent {
    type Result = ();
}

/// Registers the actor behind `actor` for every trace event of this
/// process from now on. It must not run on a thread that traces while it
/// waits for its own events (the processor thread is its own, so any actix
/// arbiter qualifies).
pub fn add_actor_processor(actor: Recipient<TraceEvent>) {
    add_processor(ActorProcessor { actor, gone: false });
}

struct ActorProcessor {
    actor: Recipient<TraceEvent>,
    /// The actor stopped: later events have nobody to go to.
    gone: bool,
}

impl ActorProcessor {
    fn deliver(&mut self, event: TraceEvent) {
        if self.gone {
            return;
        }
        if futures_executor::block_on(self.actor.send(event)).is_err() {
            tracing::warn!("a trace processor actor stopped; its events are not delivered");
            self.gone = true;
        }
    }
}

impl Processor for ActorProcessor {
    fn on_trace_start(&mut self, trace: &TraceData) {
        self.deliver(TraceEvent::TraceStart(trace.clone()));
    }

    fn on_trace_end(&mut self, trace: &TraceData) {
        self.deliver(TraceEvent::TraceEnd(trace.clone()));
    }

    fn on_span_start(&mut self, span: &SpanData) {
        self.deliver(TraceEvent::SpanStart(span.clone()));
    }

    fn on_span_end(&mut self, span: &SpanData) {
        self.deliver(TraceEvent::SpanEnd(span.clone()));
    }
}
