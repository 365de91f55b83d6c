//! [`ChannelRelay`]: the actor that carries one side channel to hosts —
//! the log relay (`/log`) or the trace relay (`/trace`), one of each per
//! server.
//!
//! Supervised by the [`ServerSupervisor`](crate::server_supervisor::ServerSupervisor),
//! which its [`ChildGuard`] tells when it ends and which then starts another
//! (`ServerChild::LogRelay` or `ServerChild::TraceRelay`); it has no children.
//!
//! Batches of log records or trace events come from the worker's side pipe
//! already encoded (and the records already in the sandbox log file); the
//! server's own batches are the worker's stdout and stderr lines, which it
//! appends to that file itself. The relay sends each batch to every host in
//! its namespace, in order, without decoding it. A host acknowledges each
//! batch and may be at most a few batches behind (see
//! [`crate::relay_credits`]), so sending to a slow host waits. The handler
//! that sends is atomic (the next batch waits for it) and the mailbox holds
//! [`QUEUE`] batches, so a slow host makes the side pipe's reader wait,
//! which fills the worker's pipe, which makes the worker's logging wait:
//! nothing is buffered without bound and nothing is lost while a host
//! listens. A host that stops acknowledging altogether is waited for once,
//! then skipped (counted, and told when it is back): it cannot stall the
//! sandbox or other hosts. While no host listens, the newest items are kept
//! (up to [`BACKLOG`]) and replayed to the first host that joins; older ones
//! are counted and the count is reported.
//!
//! A relay that ends loses its backlog and the batches in its mailbox; the
//! sandbox log file has everything.

use std::collections::VecDeque;

use actix::prelude::*;
use agentix_actors::supervision::ChildGuard;
use agentix_wire::log_record::{LogRecord, TARGET_AGENTIX};
use agentix_wire::wire::{
    LogsEvent, SideBatch, TracesEvent, EVENT_RECORDS, EVENT_TRACE_EVENTS, LOG_NAMESPACE,
    TRACE_NAMESPACE,
};
use socketioxide::SocketIo;

use crate::emit::emit;
use crate::relay_credits::{Credit, RelayCredits};
use crate::server_child::ServerChild;

// ---- messages ------------------------------------------------------------

/// Send a batch to the hosts (or keep it while there is none).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Relay(pub SideBatch);

/// A host joined the namespace: it gets the backlog at once.
#[derive(Message)]
#[rtype(result = "()")]
pub struct HostJoined;

/// The Socket.IO server exists now: batches can reach hosts.
#[derive(Message)]
#[rtype(result = "()")]
pub struct RelayTo(pub SocketIo);

/// Stop the relay, as a crash would: its parent starts another.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopRelay;

// ---- the actor -----------------------------------------------------------

/// Items (records or trace events) kept per channel while no host listens.
pub(crate) const BACKLOG: usize = 100_000;

/// Batches waiting in a relay's mailbox before senders wait.
pub(crate) const QUEUE: usize = 4;

/// Which side channel a relay carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SideChannelKind {
    /// `/log`: records and output lines.
    Logs,
    /// `/trace`: span and trace events.
    Traces,
}

/// Carries one side channel's batches to the hosts in its namespace.
pub struct ChannelRelay {
    /// Out only while a delivery (which owns it) runs: handlers are atomic.
    channel: Option<Channel>,
    io: Option<SocketIo>,
    credits: RelayCredits,
    _guard: ChildGuard<ServerChild>,
}

impl ChannelRelay {
    /// Starts a relay of `kind`, reaching hosts through `io` once it has it,
    /// with a mailbox of [`QUEUE`] batches; `guard` tells its parent when it
    /// ends.
    pub fn start(
        kind: SideChannelKind,
        io: Option<SocketIo>,
        credits: RelayCredits,
        guard: ChildGuard<ServerChild>,
    ) -> Addr<Self> {
        let channel = match kind {
            SideChannelKind::Logs => Channel::new(LOG_NAMESPACE, EVENT_RECORDS, |b| {
                Payload::Logs(LogsEvent::from_batch(b))
            }),
            SideChannelKind::Traces => Channel::new(TRACE_NAMESPACE, EVENT_TRACE_EVENTS, |b| {
                Payload::Traces(TracesEvent::from_batch(b))
            }),
        };
        ChannelRelay::create(|ctx| {
            ctx.set_mailbox_capacity(QUEUE);
            ChannelRelay {
                channel: Some(channel),
                io,
                credits,
                _guard: guard,
            }
        })
    }

    /// Delivers `batch` (or just the backlog) in a future that owns the
    /// channel meanwhile, so the next message waits for it.
    fn deliver(&mut self, batch: Option<SideBatch>) -> AtomicResponse<Self, ()> {
        let channel = self.channel.take();
        let io = self.io.clone();
        let credits = self.credits.clone();
        AtomicResponse::new(Box::pin(
            async move {
                let mut channel = channel.expect("handlers are atomic: the channel is home");
                channel.deliver(io.as_ref(), &credits, batch).await;
                channel
            }
            .into_actor(self)
            .map(|channel, act, _| act.channel = Some(channel)),
        ))
    }
}

impl Actor for ChannelRelay {
    type Context = Context<Self>;
}

impl Handler<Relay> for ChannelRelay {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, Relay(batch): Relay, _: &mut Context<Self>) -> Self::Result {
        self.deliver(Some(batch))
    }
}

impl Handler<HostJoined> for ChannelRelay {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, _: HostJoined, _: &mut Context<Self>) -> Self::Result {
        self.deliver(None)
    }
}

impl Handler<RelayTo> for ChannelRelay {
    type Result = ();

    fn handle(&mut self, RelayTo(io): RelayTo, _: &mut Context<Self>) {
        self.io = Some(io);
    }
}

impl Handler<StopRelay> for ChannelRelay {
    type Result = ();

    fn handle(&mut self, _: StopRelay, ctx: &mut Context<Self>) {
        ctx.stop();
    }
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
        credits: &RelayCredits,
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
                crate::relay_credits::LAG_LIMIT
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
    async fn deliver(
        &mut self,
        io: Option<&SocketIo>,
        credits: &RelayCredits,
        batch: Option<SideBatch>,
    ) {
        let hosts = io
            .and_then(|io| io.of(self.namespace))
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
