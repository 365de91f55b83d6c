//! [`SideRelay`]: everything the sandbox logged, printed or traced, to hosts.
//!
//! Batches of log records and trace events come from the worker's side pipe
//! already encoded (and the records already in the sandbox log file); the
//! server's own batches are the worker's stdout and stderr lines, which it
//! appends to that file itself. The relay sends log batches to every host on
//! `/log` and trace batches to every host on `/trace`, in order, without
//! decoding them. It runs as one task fed by a bounded channel. A host
//! acknowledges each batch and may be at most a few batches behind (see
//! [`crate::side_credits`]), so sending to a slow host waits, which fills the
//! channel, which makes the readers wait, which fills the worker's pipes,
//! which makes the worker's logging wait. So nothing is buffered without
//! bound and nothing is lost while a host listens. A host that stops
//! acknowledging altogether is waited for once, then skipped (counted, and
//! told when it is back): it cannot stall the sandbox or other hosts. While no host listens, the
//! newest items are kept (up to [`BACKLOG`]) and replayed to the first host
//! that joins; older ones are counted and the count is reported.
//!
//! (A task rather than an actor: delivery must await the socket and keep
//! order, which an actix handler cannot do without giving up one of them.)
//! It is supervised all the same: the task that owns its inbox runs it, and
//! runs it again with a fresh backlog when it panics or when the root of the
//! server's tree restarts it ([`SideRelay::restart`]); batches waiting in
//! the inbox are kept, and the sandbox log file has everything.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures_util::FutureExt;

use agentix_actors::log_record::{LogRecord, TARGET_AGENTIX};
use agentix_actors::wire::{
    LogsEvent, SideBatch, TracesEvent, EVENT_RECORDS, EVENT_TRACE_EVENTS, LOG_NAMESPACE,
    TRACE_NAMESPACE,
};
use socketioxide::SocketIo;
use tokio::sync::mpsc;

use crate::emit::emit;
use crate::side_credits::{Credit, SideCredits};

/// Items (records or trace events) kept per channel while no host listens.
pub const BACKLOG: usize = 100_000;
/// Batches waiting for the relay before readers wait.
const QUEUE: usize = 4;

enum Relayed {
    Logs(SideBatch),
    Traces(SideBatch),
    HostJoined,
    Restart,
}

/// A handle to the relay task; cheap to clone.
#[derive(Clone)]
pub struct SideRelay {
    tx: mpsc::Sender<Relayed>,
    restarts: Arc<AtomicU64>,
}

/// The relay's input, until [`SideRelayInbox::start`] gives it a task.
pub struct SideRelayInbox {
    rx: mpsc::Receiver<Relayed>,
    restarts: Arc<AtomicU64>,
}

impl SideRelayInbox {
    /// Starts delivering to `/log` and `/trace` on `io`.
    pub fn start(self, io: SocketIo, credits: SideCredits) {
        tokio::spawn(supervise(io, credits, self.rx, self.restarts));
    }
}

/// Runs the relay until its inbox closes, again after each end that is
/// not that one.
async fn supervise(
    io: SocketIo,
    credits: SideCredits,
    mut rx: mpsc::Receiver<Relayed>,
    restarts: Arc<AtomicU64>,
) {
    loop {
        let run = AssertUnwindSafe(relay(&io, &credits, &mut rx))
            .catch_unwind()
            .await;
        match run {
            Ok(Ended::InboxClosed) => return,
            Ok(Ended::Restart) => tracing::info!("the side relay starts again, on request"),
            Err(_) => {
                tracing::error!("the side relay panicked; it starts again (its backlog is lost)")
            }
        }
        restarts.fetch_add(1, Ordering::Relaxed);
    }
}

/// Why one run of the relay ended.
enum Ended {
    InboxClosed,
    Restart,
}

impl SideRelay {
    /// A relay handle and its inbox; batches sent before the inbox starts
    /// wait in it (the socket layer needs the handle before it exists).
    pub fn channel() -> (Self, SideRelayInbox) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let restarts = Arc::new(AtomicU64::new(0));
        let relay = SideRelay {
            tx,
            restarts: restarts.clone(),
        };
        (relay, SideRelayInbox { rx, restarts })
    }

    /// Ends the relay's current run after what is queued before this, so
    /// that its supervisor starts it again with a fresh backlog.
    pub async fn restart(&self) {
        let _ = self.tx.send(Relayed::Restart).await;
    }

    /// How many times the relay was started again.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// Relays a batch of log records, waiting while the relay is behind.
    pub async fn send_logs(&self, batch: SideBatch) {
        if batch.count > 0 {
            let _ = self.tx.send(Relayed::Logs(batch)).await;
        }
    }

    /// Relays a batch of trace events, waiting while the relay is behind.
    pub async fn send_traces(&self, batch: SideBatch) {
        if batch.count > 0 {
            let _ = self.tx.send(Relayed::Traces(batch)).await;
        }
    }

    /// A host joined `/log` or `/trace`: it gets the backlog at once.
    pub fn host_joined(&self) {
        let _ = self.tx.try_send(Relayed::HostJoined);
    }
}

async fn relay(io: &SocketIo, credits: &SideCredits, rx: &mut mpsc::Receiver<Relayed>) -> Ended {
    let mut logs = Channel::new(LOG_NAMESPACE, EVENT_RECORDS, |b| {
        Payload::Logs(LogsEvent::from_batch(b))
    });
    let mut traces = Channel::new(TRACE_NAMESPACE, EVENT_TRACE_EVENTS, |b| {
        Payload::Traces(TracesEvent::from_batch(b))
    });
    while let Some(msg) = rx.recv().await {
        match msg {
            Relayed::Logs(batch) => logs.deliver(io, credits, Some(batch)).await,
            Relayed::Traces(batch) => traces.deliver(io, credits, Some(batch)).await,
            Relayed::HostJoined => {
                logs.deliver(io, credits, None).await;
                traces.deliver(io, credits, None).await;
            }
            Relayed::Restart => return Ended::Restart,
        }
    }
    Ended::InboxClosed
}

/// An event payload ready to emit.
enum Payload {
    Logs(LogsEvent),
    Traces(TracesEvent),
}

impl Payload {
    async fn emit_to(&self, host: &socketioxide::extract::SocketRef, event: &str) {
        match self {
            Payload::Logs(e) => emit(host, event, e).await,
            Payload::Traces(e) => emit(host, event, e).await,
        }
    }
}

/// One side-channel namespace: its backlog while no host listens.
struct Channel {
    namespace: &'static str,
    event: &'static str,
    wrap: fn(SideBatch) -> Payload,
    backlog: VecDeque<SideBatch>,
    backlog_items: usize,
    dropped: u64,
}

impl Channel {
    /// Tells a listener that is back how many records it missed while it
    /// lagged (on `/log`; on `/trace` the server's log says it), with the
    /// credit it was just given; returns the credit for the batch itself.
    async fn report_missed(
        &self,
        host: &socketioxide::extract::SocketRef,
        credits: &SideCredits,
    ) -> Credit {
        let missed = credits.take_unreported(host.id);
        if missed == 0 {
            return Credit::Granted;
        }
        tracing::warn!(socket = %host.id, namespace = self.namespace, missed, "a lagging listener is back");
        if self.namespace != LOG_NAMESPACE {
            return Credit::Granted;
        }
        let notice = LogRecord::now(
            "WARN",
            TARGET_AGENTIX,
            format!(
                "{missed} log records were not sent to this listener: it stopped \
                 acknowledging for {:?}; the sandbox's log file has them",
                crate::side_credits::LAG_LIMIT
            ),
        );
        (self.wrap)(SideBatch::encode(&[notice]))
            .emit_to(host, self.event)
            .await;
        credits.take(host).await
    }

    fn new(namespace: &'static str, event: &'static str, wrap: fn(SideBatch) -> Payload) -> Self {
        Channel {
            namespace,
            event,
            wrap,
            backlog: VecDeque::new(),
            backlog_items: 0,
            dropped: 0,
        }
    }

    /// Sends the backlog and `batch` to every host in the namespace, or
    /// keeps them while there is none.
    async fn deliver(&mut self, io: &SocketIo, credits: &SideCredits, batch: Option<SideBatch>) {
        let hosts = io
            .of(self.namespace)
            .map(|ns| ns.sockets())
            .unwrap_or_default();
        if hosts.is_empty() {
            if let Some(batch) = batch {
                self.backlog_items += batch.count as usize;
                self.backlog.push_back(batch);
            }
            while self.backlog_items > BACKLOG {
                let Some(old) = self.backlog.pop_front() else {
                    break;
                };
                self.backlog_items -= old.count as usize;
                self.dropped += u64::from(old.count);
            }
            return;
        }
        let mut pending: Vec<SideBatch> = Vec::new();
        if self.dropped > 0 {
            tracing::warn!(
                namespace = self.namespace,
                dropped = self.dropped,
                "side-channel items were dropped while no host listened"
            );
            if self.namespace == LOG_NAMESPACE {
                let notice = LogRecord::now(
                    "WARN",
                    TARGET_AGENTIX,
                    format!(
                        "{} earlier log records were dropped: no host was listening \
                         and the backlog holds {BACKLOG}",
                        self.dropped
                    ),
                );
                pending.push(SideBatch::encode(&[notice]));
            }
            self.dropped = 0;
        }
        pending.extend(self.backlog.drain(..));
        self.backlog_items = 0;
        pending.extend(batch);
        for batch in pending {
            let count = u64::from(batch.count);
            let payload = (self.wrap)(batch);
            for host in &hosts {
                let mut credit = credits.take(host).await;
                if credit == Credit::Granted {
                    credit = self.report_missed(host, credits).await;
                }
                match credit {
                    Credit::Granted => payload.emit_to(host, self.event).await,
                    Credit::Lagging => credits.not_sent(host.id, count),
                    Credit::Gone => {}
                }
            }
        }
        if self.backlog.capacity() > 1024 {
            self.backlog = VecDeque::new();
        }
    }
}
