//! One processor's lane: the bounded queue in front of a processor, the
//! task that drains it, and the count of what it refused.
//!
//! Traced code only offers an event to the queue: a full queue refuses it
//! and counts the refusal, so a slow processor costs its own events, never
//! the traced code's time and never a runtime thread. A queue's task runs
//! on its hub's delivery runtime; a [`Processor`]'s methods are sync and
//! may block (a file, an exporter), so they run a batch at a time on that
//! runtime's blocking pool, and an actor processor is sent its events from
//! the task itself. Neither costs a thread per processor.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use actix::{Message, Recipient};
use tokio::sync::{mpsc, oneshot};

use super::model::TraceEvent;
use super::processor::{deliver, Processor};

/// What an actor processor handles.
impl Message for TraceEvent {
    type Result = ();
}

/// Events a processor may fall behind by before the next one is refused.
/// Slots are allocated as they fill, so an idle lane costs little.
pub const PROCESSOR_QUEUE: usize = 16_384;

/// Events a sync processor is handed per trip to the blocking pool.
const BATCH: usize = 256;

/// What a lane's task is given, in order.
pub(crate) enum Mail {
    /// An event to handle (boxed: a queued slot is then a pointer, not a
    /// whole span).
    Event(Box<TraceEvent>),
    /// Reply once every earlier mail is handled and the processor flushed.
    Flush(oneshot::Sender<()>),
    /// Flush, shut the processor down, reply, and stop.
    Shutdown(oneshot::Sender<()>),
}

/// Where one processor's events go.
pub(crate) enum Lane {
    /// A queue drained by a task of the hub's.
    Queued {
        /// The queue.
        tx: mpsc::Sender<Mail>,
        /// Events refused: the queue was full or the processor had stopped.
        refused: AtomicU64,
    },
    /// Called where the event is published: for a processor that is itself
    /// a bounded queue whose producer waits (the worker's side pipe), so
    /// nothing is dropped between a sandbox and its host.
    Inline(Mutex<Box<dyn Processor>>),
}

impl Lane {
    /// A queued lane for `processor`, its task started on `runtime`.
    pub(crate) fn for_processor(
        runtime: &tokio::runtime::Handle,
        processor: Box<dyn Processor>,
    ) -> Lane {
        let (tx, rx) = mpsc::channel(PROCESSOR_QUEUE);
        runtime.spawn(drain_into_processor(processor, rx));
        Lane::Queued {
            tx,
            refused: AtomicU64::new(0),
        }
    }

    /// A queued lane for the actor behind `actor`, its task on `runtime`.
    pub(crate) fn for_actor(
        runtime: &tokio::runtime::Handle,
        actor: Recipient<TraceEvent>,
    ) -> Lane {
        let (tx, rx) = mpsc::channel(PROCESSOR_QUEUE);
        runtime.spawn(drain_into_actor(actor, rx));
        Lane::Queued {
            tx,
            refused: AtomicU64::new(0),
        }
    }

    /// Offers `event`; a refusal is counted, and logged at the 1st, 2nd,
    /// 4th, 8th... so a flood of them is visible but not itself a flood.
    pub(crate) fn offer(&self, event: TraceEvent) {
        match self {
            Lane::Inline(processor) => {
                let mut processor = processor.lock().unwrap_or_else(|p| p.into_inner());
                deliver(&mut **processor, &event);
            }
            Lane::Queued { tx, refused } => {
                if let Err(e) = tx.try_send(Mail::Event(Box::new(event))) {
                    let n = refused.fetch_add(1, Ordering::Relaxed) + 1;
                    if n.is_power_of_two() {
                        let why = match e {
                            mpsc::error::TrySendError::Full(_) => "is a whole queue behind",
                            mpsc::error::TrySendError::Closed(_) => "has stopped",
                        };
                        tracing::warn!(
                            refused = n,
                            "a trace processor {why}; its events are being dropped"
                        );
                    }
                }
            }
        }
    }

    /// Events this lane refused so far.
    pub(crate) fn refused(&self) -> u64 {
        match self {
            Lane::Inline(_) => 0,
            Lane::Queued { refused, .. } => refused.load(Ordering::Relaxed),
        }
    }

    /// Puts `what` behind every event queued so far: what to wait on, or
    /// `None` for an inline lane (done here and now).
    pub(crate) fn control(&self, what: Control) -> Option<Pending> {
        match self {
            Lane::Inline(processor) => {
                let mut processor = processor.lock().unwrap_or_else(|p| p.into_inner());
                processor.force_flush();
                if matches!(what, Control::Shutdown) {
                    processor.shutdown();
                }
                None
            }
            Lane::Queued { tx, .. } => {
                let (done, wait) = oneshot::channel();
                let mail = match what {
                    Control::Flush => Mail::Flush(done),
                    Control::Shutdown => Mail::Shutdown(done),
                };
                Some(Pending {
                    tx: tx.clone(),
                    mail,
                    done: wait,
                })
            }
        }
    }
}

/// What a hub asks of all its lanes.
#[derive(Clone, Copy)]
pub(crate) enum Control {
    /// Handle everything queued, then flush.
    Flush,
    /// Flush, then shut the processor down.
    Shutdown,
}

/// A control mail not yet sent, and its reply.
pub(crate) struct Pending {
    tx: mpsc::Sender<Mail>,
    mail: Mail,
    done: oneshot::Receiver<()>,
}

impl Pending {
    /// Sends the mail (waiting for room) and waits for its reply; a
    /// stopped processor replies at once.
    pub(crate) async fn wait(self) {
        if self.tx.send(self.mail).await.is_ok() {
            let _ = self.done.await;
        }
    }
}

/// Hands mail to a sync processor, a batch at a time on the blocking pool.
async fn drain_into_processor(mut processor: Box<dyn Processor>, mut rx: mpsc::Receiver<Mail>) {
    let mut batch = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        let mails = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
        let handled = tokio::task::spawn_blocking(move || {
            let stop = handle_batch(&mut *processor, mails);
            (processor, stop)
        })
        .await;
        match handled {
            Ok((back, false)) => processor = back,
            Ok((_, true)) => return,
            Err(_) => {
                tracing::error!("a trace processor panicked; it gets no more events");
                return;
            }
        }
    }
}

/// Handles `mails` in order: whether the processor was shut down.
fn handle_batch(processor: &mut dyn Processor, mails: Vec<Mail>) -> bool {
    for mail in mails {
        match mail {
            Mail::Event(event) => deliver(processor, &event),
            Mail::Flush(done) => {
                processor.force_flush();
                let _ = done.send(());
            }
            Mail::Shutdown(done) => {
                processor.force_flush();
                processor.shutdown();
                let _ = done.send(());
                return true;
            }
        }
    }
    false
}

/// Sends each event to the actor and waits for it to be handled, so the
/// actor sees them in order and a flush means what it says.
async fn drain_into_actor(actor: Recipient<TraceEvent>, mut rx: mpsc::Receiver<Mail>) {
    while let Some(mail) = rx.recv().await {
        match mail {
            Mail::Event(event) => {
                if actor.send(*event).await.is_err() {
                    tracing::warn!("a trace processor actor stopped; it gets no more events");
                    return;
                }
            }
            Mail::Flush(done) => {
                let _ = done.send(());
            }
            Mail::Shutdown(done) => {
                let _ = done.send(());
                return;
            }
        }
    }
}
