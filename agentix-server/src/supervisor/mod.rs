//! The `WorkerSupervisor` actor: owns the worker process and every call.
//!
//! Supervised by the [`ServerSupervisor`](crate::server_supervisor::ServerSupervisor),
//! which its [`ChildGuard`] tells when it ends; it supervises the worker
//! process of each generation and one
//! [`NamespaceForwarder`] per plugin namespace (a forwarder that ends is
//! started again on the same path). It starts the worker, restarts it when it dies (by its
//! [`RestartPolicy`]: first at once, then with exponential backoff, at most
//! `max_restarts` within `restart_window`; past that the server reports
//! `degraded` until the window has passed, then tries once more) and calls fail
//! fast), and correlates calls: a call is a message whose reply resolves when
//! the worker's matching result or error frame arrives, so the pending table
//! lives inside this actor and behind no lock. When the worker dies every call
//! in flight ends at once with `WorkerExited`; when this actor itself ends
//! (it panicked, or its parent stopped it) its calls end the same way and
//! its worker is killed. The pipes between it and the worker are pumped by
//! tasks of [`crate::worker_pipes`]; its plugin namespaces (forwarders, and
//! events both ways, bounded) are in `namespaces`.

use std::ffi::OsString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use agentix_actors::errors::{ErrorKind, RemoteError};
use agentix_actors::outbox::Outbox;
use agentix_actors::process;
use agentix_actors::restart_policy::{Restart, RestartPolicy};
use agentix_actors::supervision::ChildGuard;
use agentix_actors::wire::Frame;
use serde::Serialize;
use socketioxide::socket::Sid;
use tokio::sync::mpsc;

use crate::calls::{CallTable, Cancelled, Delivery, NewCall, Origin, PartDelivery};
use crate::config::ServerConfig;
use crate::forwarder::NamespaceForwarder;
use crate::server_child::ServerChild;
use crate::side_relay::SideRelay;
use crate::worker_pipes::{
    self, drain_output, FrameArrived, UnreadOutput, UnreadableReply, WorkerExited,
};
use crate::worker_process::{self, OutputTail};

mod namespaces;

// ---- messages ------------------------------------------------------------

/// Run a call on the worker (queued until one is ready); the outcome goes to `call.reply`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StartCall(pub NewCall);

/// Cancel the call `origin` started; it ends as `Cancelled`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CancelCall(pub Origin);

/// The host consumed part of the stream `origin` started.
#[derive(Message)]
#[rtype(result = "()")]
pub struct AckStream {
    /// Which call.
    pub origin: Origin,
    /// Items consumed since the last ack.
    pub items: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// A host socket went away: cancel its calls.
#[derive(Message)]
#[rtype(result = "()")]
pub struct HostDisconnected(pub Sid);

/// The Socket.IO server exists now: forwarders can be started.
#[derive(Message)]
#[rtype(result = "()")]
pub struct AttachIo(pub socketioxide::SocketIo);

/// Report the worker's state for `/health`.
#[derive(Message)]
#[rtype(result = "Health")]
pub struct ReportHealth;

/// Stop taking calls (server shutdown begins); calls in flight go on.
#[derive(Message)]
#[rtype(result = "()")]
pub struct BeginDrain;

/// Stop the worker for good (server shutdown).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopWorker;

/// Stop this supervisor, as a crash would: its parent starts another.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopSupervisor;

/// Stop the forwarder of namespace `path`, as a crash would: it is started again.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopForwarder(pub String);

// ---- state ---------------------------------------------------------------

/// What `/health` shows.
#[derive(Debug, Clone, Serialize)]
pub struct Health {
    /// `ok`, `starting`, `unresponsive` (the worker does not answer pings
    /// within [`UNRESPONSIVE_AFTER`]), `degraded` or `stopping`.
    pub status: &'static str,
    /// `starting`, `ready`, `unresponsive`, `restarting`, `degraded` or `stopped`.
    pub worker: &'static str,
    /// The current worker's pid, if one runs.
    pub pid: Option<u32>,
    /// The current worker's id.
    pub worker_id: Option<String>,
    /// Restarts since the server started.
    pub restarts: u64,
    /// Calls queued or in flight.
    pub inflight: usize,
    /// Why the last worker ended, if one did.
    pub last_exit: Option<String>,
    /// Restarts allowed within the window, and the window in seconds.
    pub restart_budget: (u32, f64),
    /// Restarts counted within the window now.
    pub recent_restarts: u32,
    /// While degraded: seconds until the worker is tried again.
    pub retry_in_s: Option<f64>,
    /// Milliseconds the worker has left a ping unanswered, if it has.
    pub worker_silent_ms: Option<u64>,
    /// Plugin events from the worker dropped because their hosts fell a
    /// whole forwarder mailbox behind.
    pub plugin_events_dropped: u64,
    /// Plugin events from hosts dropped because the worker fell a whole
    /// pipe queue behind.
    pub host_events_dropped: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Starting,
    Ready,
    Restarting,
    Degraded,
    Draining,
    Stopped,
}

struct Running {
    pid: u32,
    worker_id: String,
    /// Frames to its pipe, in order: a bounded queue with an outbox in
    /// front for what cannot wait (see `agentix_actors::outbox`).
    frames: Outbox,
    tail: OutputTail,
    /// Its stdout and stderr, until someone reads them: the server, at
    /// once for a worker that does not capture its own, else once it died.
    output: UnreadOutput,
}

/// Owns the worker process and the table of calls.
pub struct WorkerSupervisor {
    config: ServerConfig,
    /// Tells the root when this supervisor ends.
    guard: ChildGuard<ServerChild>,
    /// What this incarnation's worker ids start with: unique among the
    /// servers of the process and the incarnations of the supervisor.
    worker_ids: String,
    /// Where the workers' log records, output and spans go.
    side: SideRelay,
    calls: CallTable,
    phase: Phase,
    worker: Option<Running>,
    generation: u64,
    restarts: u64,
    policy: RestartPolicy,
    /// While degraded: when the worker is tried again.
    retry_at: Option<Instant>,
    /// The ping the current worker has not answered yet, and since when.
    unanswered: Option<(u64, Instant)>,
    pings: u64,
    io: Option<socketioxide::SocketIo>,
    /// One forwarder per plugin namespace a worker opened; they outlive
    /// worker restarts (the new worker opens its namespaces again).
    forwarders: std::collections::HashMap<String, Addr<NamespaceForwarder>>,
    /// Namespaces opened before the Socket.IO server was attached.
    early_opens: Vec<String>,
    last_exit: Option<String>,
    start_error: Option<RemoteError>,
    /// Worker events not sent to hosts: a forwarder a whole mailbox behind
    /// (see `forward_to_hosts`), or lagging hosts (counted by forwarders).
    events_dropped: Arc<AtomicU64>,
    /// Hosts' events the worker could not take in time.
    host_events_dropped: u64,
}

impl WorkerSupervisor {
    /// A supervisor that will start `config.worker_command` once started,
    /// relaying what its workers log, print and trace to `side`; its
    /// workers' ids start with `worker_ids`, and `guard` tells its parent
    /// when it ends.
    pub fn new(
        config: ServerConfig,
        side: SideRelay,
        worker_ids: String,
        guard: ChildGuard<ServerChild>,
    ) -> Self {
        WorkerSupervisor {
            policy: RestartPolicy::new(config.max_restarts, config.restart_window),
            config,
            guard,
            worker_ids,
            side,
            calls: CallTable::default(),
            phase: Phase::Starting,
            worker: None,
            generation: 0,
            restarts: 0,
            retry_at: None,
            unanswered: None,
            pings: 0,
            io: None,
            forwarders: std::collections::HashMap::new(),
            early_opens: Vec::new(),
            last_exit: None,
            start_error: None,
            events_dropped: Arc::default(),
            host_events_dropped: 0,
        }
    }

    fn spawn_worker(&mut self, ctx: &mut Context<Self>) {
        self.generation += 1;
        self.unanswered = None;
        let generation = self.generation;
        let worker_id = format!("{}-{}", self.worker_ids, generation);
        self.phase = Phase::Starting;
        let spawned = worker_process::spawn(&self.config.worker_command, &worker_id, &self.side);
        let proc = match spawned {
            Ok(p) => p,
            Err(e) => {
                let err = RemoteError::new(
                    ErrorKind::WorkerStartFailed,
                    format!(
                        "cannot start the worker `{}`: {e}",
                        show_command(&self.config.worker_command)
                    ),
                );
                self.worker_gone(ctx, format!("not started: {e}"), Some(err));
                return;
            }
        };
        tracing::info!(pid = proc.pid, worker_id, "worker started");
        let (pid, tail) = (proc.pid, proc.tail.clone());
        let (tx, rx) = mpsc::channel(WORKER_QUEUE);
        let reports = worker_pipes::Reports {
            frames: ctx.address().recipient(),
            unreadable: ctx.address().recipient(),
            exited: ctx.address().recipient(),
        };
        let output = worker_pipes::start(proc, generation, rx, &self.side, reports);
        self.worker = Some(Running {
            pid,
            worker_id,
            frames: Outbox::new(tx),
            tail,
            output,
        });
        let timeout = self.config.worker_start_timeout;
        ctx.run_later(timeout, move |act, _| {
            if act.phase == Phase::Starting && act.generation == generation {
                if let Some(w) = &act.worker {
                    tracing::error!(
                        pid = w.pid,
                        "worker did not report ready in {timeout:?}; killing it"
                    );
                    process::signal_group(w.pid, libc::SIGKILL);
                }
            }
        });
    }

    /// The worker is gone (exited, or never started): fail its calls and
    /// restart it if the policy allows.
    fn worker_gone(
        &mut self,
        ctx: &mut Context<Self>,
        status: String,
        start_error: Option<RemoteError>,
    ) {
        let was_ready = self.phase == Phase::Ready;
        let gone = self.worker.take();
        if let Some(w) = &gone {
            // What its commands started outlives it otherwise (a `setsid`
            // or a double fork escapes its process group).
            let tag = worker_process::worker_tag(&w.worker_id);
            tokio::task::spawn_blocking(move || process::kill_tagged(&tag));
        }
        let tail = gone.map(|w| w.tail.text()).unwrap_or_default();
        self.last_exit = Some(status.clone());
        if self.phase == Phase::Stopped {
            return;
        }
        if self.phase == Phase::Draining {
            let err = RemoteError::new(
                ErrorKind::WorkerExited,
                format!("the worker died while the server was shutting down ({status})"),
            )
            .with_details(tail_details(&tail));
            for reply in self.calls.take_inflight() {
                reply.fail(err.clone());
            }
            self.phase = Phase::Stopped;
            return;
        }
        let exited = if was_ready {
            RemoteError::new(
                ErrorKind::WorkerExited,
                format!("the worker died mid-call ({status})"),
            )
        } else {
            start_error.unwrap_or_else(|| {
                RemoteError::new(
                    ErrorKind::WorkerStartFailed,
                    format!("the worker exited before it was ready ({status})"),
                )
            })
        };
        let exited = exited.with_details(tail_details(&tail));
        tracing::warn!(%status, "worker gone");
        for reply in self.calls.take_inflight() {
            reply.fail(exited.clone());
        }
        if !was_ready {
            // Calls waiting for this worker would wait for the next one, which
            // may fail the same way: tell them now rather than hang.
            for call in self.calls.take_queued() {
                call.reply.fail(exited.clone());
            }
        }
        self.start_error = Some(exited);

        let now = Instant::now();
        let delay = match self.policy.on_exit(now) {
            Restart::Now => Duration::ZERO,
            Restart::After(delay) => delay,
            Restart::GiveUp { retry_at } => {
                tracing::error!(
                    restarts = self.policy.intensity(),
                    window = ?self.policy.period(),
                    "worker keeps dying; not restarting it until the window has passed (degraded)"
                );
                self.phase = Phase::Degraded;
                self.retry_at = Some(retry_at);
                let err = self.degraded_error();
                for call in self.calls.take_queued() {
                    call.reply.fail(err.clone());
                }
                ctx.run_later(retry_at.saturating_duration_since(now), |act, ctx| {
                    if act.phase == Phase::Degraded {
                        tracing::info!("the restart window has passed; trying the worker again");
                        act.retry_at = None;
                        act.restarts += 1;
                        act.spawn_worker(ctx);
                    }
                });
                return;
            }
        };
        self.restarts += 1;
        self.phase = Phase::Restarting;
        ctx.run_later(delay, |act, ctx| {
            if act.phase == Phase::Restarting {
                act.spawn_worker(ctx);
            }
        });
    }

    fn degraded_error(&self) -> RemoteError {
        let why = self
            .start_error
            .as_ref()
            .map(|e| e.to_string())
            .unwrap_or_default();
        RemoteError::new(
            ErrorKind::Degraded,
            format!(
                "the worker died more than {} times within {:?}; the server stopped \
                 restarting it until that window has passed",
                self.policy.intensity(),
                self.policy.period()
            ),
        )
        .with_details(why)
    }

    fn send_to_worker(&mut self, call: NewCall) {
        let frames = self.calls.start(call);
        let Some(Frame::Call { id, .. }) = frames.last() else {
            unreachable!("CallTable::start ends with the call frame")
        };
        let id = *id;
        let Some(w) = &self.worker else {
            // Gone between the check and now: its exit fails the call.
            return;
        };
        let waiting = w.frames.waiting();
        if waiting >= CALLS_STOP_PAST {
            // A worker this far behind its pipe is wedged or stopped: say
            // so now rather than hold the call's frames too.
            if let Some(reply) = self.calls.finish(id) {
                reply.fail(RemoteError::new(
                    ErrorKind::Degraded,
                    format!("the worker is not reading its pipe ({waiting} frames wait for it)"),
                ));
            }
            return;
        }
        for frame in frames {
            w.frames.push(frame);
        }
    }
}

impl WorkerSupervisor {
    /// Sends `frame` to the current worker, if one runs, behind every
    /// frame sent before it.
    fn send_frame(&self, frame: Frame) {
        if let Some(w) = &self.worker {
            w.frames.push(frame);
        }
    }
}

fn tail_details(tail: &str) -> String {
    if tail.is_empty() {
        String::new()
    } else {
        format!("last worker output:\n{tail}")
    }
}

fn show_command(cmd: &[OsString]) -> String {
    cmd.iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

impl Actor for WorkerSupervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.spawn_worker(ctx);
        ctx.run_interval(PING_EVERY, |act, _| act.ping());
    }
}

/// Frames queued for a worker's pipe before new ones wait in its outbox.
const WORKER_QUEUE: usize = 4096;

/// Frames waiting in a worker's outbox past which hosts' plugin events
/// (which nobody waits for) are dropped.
const HOST_EVENTS_WAIT_PAST: usize = 8_192;

/// Frames waiting in a worker's outbox past which new calls fail at once.
const CALLS_STOP_PAST: usize = 16_384;

/// How often the worker's frame loop is asked to answer.
const PING_EVERY: Duration = Duration::from_secs(1);

/// Silence after which `/health` calls the worker unresponsive: a frozen
/// (stopped, or wedged) worker, which no exit ever reports.
pub const UNRESPONSIVE_AFTER: Duration = Duration::from_secs(3);

impl WorkerSupervisor {
    /// Pings a ready worker, unless the last ping is still unanswered.
    fn ping(&mut self) {
        if self.phase != Phase::Ready || self.unanswered.is_some() {
            return;
        }
        self.pings += 1;
        self.unanswered = Some((self.pings, Instant::now()));
        self.send_frame(Frame::Ping { seq: self.pings });
    }

    /// How long the worker has left a ping unanswered, if it has.
    fn silent_for(&self) -> Option<Duration> {
        self.unanswered.map(|(_, since)| since.elapsed())
    }
}

impl Handler<StartCall> for WorkerSupervisor {
    type Result = ();

    fn handle(&mut self, StartCall(call): StartCall, _: &mut Context<Self>) {
        if self.calls.contains(call.origin) {
            let err = RemoteError::new(
                ErrorKind::Protocol,
                format!(
                    "call id {} is already in use on this connection",
                    call.origin.host_id
                ),
            );
            call.reply.fail(err);
            return;
        }
        if self.calls.len() >= self.config.max_inflight {
            let err = RemoteError::new(
                ErrorKind::Degraded,
                format!(
                    "the server already holds {} calls; try again later",
                    self.calls.len()
                ),
            );
            call.reply.fail(err);
            return;
        }
        match self.phase {
            Phase::Ready => self.send_to_worker(call),
            Phase::Starting | Phase::Restarting => self.calls.queue(call),
            Phase::Degraded => {
                call.reply.fail(self.degraded_error());
            }
            Phase::Draining | Phase::Stopped => call.reply.fail(shutting_down()),
        }
    }
}

impl Handler<CancelCall> for WorkerSupervisor {
    type Result = ();

    fn handle(&mut self, CancelCall(origin): CancelCall, _: &mut Context<Self>) {
        let cancelled = RemoteError::new(ErrorKind::Cancelled, "the call was cancelled");
        match self.calls.cancel(origin) {
            Cancelled::Queued(reply) => {
                reply.fail(cancelled);
            }
            Cancelled::InFlight(id, reply) => {
                self.send_frame(Frame::Cancel { id });
                reply.fail(cancelled);
            }
            Cancelled::Unknown => {
                tracing::debug!(
                    host_id = origin.host_id,
                    "cancel for a call that is not running"
                );
            }
        }
    }
}

impl Handler<AckStream> for WorkerSupervisor {
    type Result = ();

    fn handle(&mut self, ack: AckStream, _: &mut Context<Self>) {
        if let Some((id, items, bytes)) = self.calls.ack(ack.origin, ack.items, ack.bytes) {
            if items > 0 || bytes > 0 {
                self.send_frame(Frame::Ack { id, items, bytes });
            }
        }
    }
}

impl Handler<HostDisconnected> for WorkerSupervisor {
    type Result = ();

    fn handle(&mut self, HostDisconnected(sid): HostDisconnected, ctx: &mut Context<Self>) {
        for origin in self.calls.origins_of(sid) {
            self.handle(CancelCall(origin), ctx);
        }
    }
}

impl Handler<FrameArrived> for WorkerSupervisor {
    type Result = ();

    fn handle(&mut self, msg: FrameArrived, ctx: &mut Context<Self>) {
        if msg.generation != self.generation {
            return;
        }
        match msg.frame {
            Frame::Ready {
                worker_id,
                pid,
                functions,
                version,
                captures_output,
            } => {
                tracing::info!(worker_id, pid, functions, version, "worker ready");
                if !captures_output {
                    if let Some(w) = &self.worker {
                        drain_output(&w.output);
                    }
                }
                if matches!(self.phase, Phase::Draining | Phase::Stopped) {
                    return;
                }
                self.phase = Phase::Ready;
                self.start_error = None;
                for call in self.calls.take_queued() {
                    self.send_to_worker(call);
                }
            }
            Frame::Items { id, items } => match self.calls.deliver(id, items) {
                Delivery::Delivered | Delivery::Unknown => {}
                Delivery::Violation(why) => {
                    tracing::warn!(id, "{why}; ending the call");
                    if let Some(reply) = self.calls.finish(id) {
                        reply.fail(RemoteError::new(ErrorKind::Protocol, why));
                    }
                    self.send_frame(Frame::Cancel { id });
                }
            },
            frame @ (Frame::Result { .. } | Frame::End { .. } | Frame::Error { .. }) => {
                let id = match &frame {
                    Frame::Result { id, .. } | Frame::End { id } | Frame::Error { id, .. } => *id,
                    _ => unreachable!("matched above"),
                };
                if !self.calls.finish_with(id, frame) {
                    // Normal after a cancel raced the result; otherwise a worker bug.
                    tracing::debug!(id, "the worker ended a call that is not running; dropped")
                }
            }
            Frame::Part { id, total, bytes } => {
                let max = self.config.max_message_bytes;
                let error = match self.calls.deliver_part(id, total, bytes.0, max) {
                    PartDelivery::Kept | PartDelivery::Unknown => None,
                    PartDelivery::TooLarge(error) => Some(error),
                    PartDelivery::Violation(why) => {
                        Some(RemoteError::new(ErrorKind::Protocol, why))
                    }
                };
                if let Some(error) = error {
                    tracing::warn!(id, "{}; ending the call", error.message);
                    if let Some(reply) = self.calls.finish(id) {
                        reply.fail(error);
                        self.send_frame(Frame::Cancel { id });
                    }
                }
            }
            Frame::Pong { seq } => {
                if self.unanswered.is_some_and(|(s, _)| s == seq) {
                    self.unanswered = None;
                }
            }
            Frame::SioOpen { path } => self.open_namespace(path, ctx),
            Frame::SioEvent { path, event, data } => self.forward_to_hosts(path, event, data),
            Frame::Call { .. }
            | Frame::Ping { .. }
            | Frame::Cancel { .. }
            | Frame::Ack { .. }
            | Frame::Logs { .. }
            | Frame::Traces { .. } => {
                tracing::warn!("the worker sent a frame only the server may send; dropped");
            }
        }
    }
}

impl Handler<StopSupervisor> for WorkerSupervisor {
    type Result = ();

    fn handle(&mut self, _: StopSupervisor, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

impl Drop for WorkerSupervisor {
    // Runs however this supervisor ends, a panic included: nothing it owned
    // may outlive it, and no call may wait for a reply it can no longer send.
    fn drop(&mut self) {
        if let Some(w) = self.worker.take() {
            process::signal_group(w.pid, libc::SIGKILL);
            let tag = worker_process::worker_tag(&w.worker_id);
            std::thread::spawn(move || process::kill_tagged(&tag));
        }
        self.calls.fail_all(&RemoteError::new(
            ErrorKind::WorkerExited,
            "the server's worker supervisor ended mid-call; a new one starts the worker again",
        ));
    }
}

impl Handler<UnreadableReply> for WorkerSupervisor {
    type Result = ();

    // The frame may have been the call's last: end the call rather than
    // leave it waiting for a reply that was already sent.
    fn handle(&mut self, msg: UnreadableReply, _: &mut Context<Self>) {
        if msg.generation != self.generation {
            return;
        }
        if let Some(reply) = self.calls.finish(msg.id) {
            reply.fail(RemoteError::new(
                ErrorKind::Protocol,
                format!("the worker's reply could not be read: {}", msg.why),
            ));
            self.send_frame(Frame::Cancel { id: msg.id });
        }
    }
}

impl Handler<WorkerExited> for WorkerSupervisor {
    type Result = ();

    fn handle(&mut self, msg: WorkerExited, ctx: &mut Context<Self>) {
        if msg.generation != self.generation {
            return;
        }
        self.worker_gone(ctx, msg.status, None);
    }
}

impl Handler<ReportHealth> for WorkerSupervisor {
    type Result = MessageResult<ReportHealth>;

    fn handle(&mut self, _: ReportHealth, _: &mut Context<Self>) -> Self::Result {
        let silent = self.silent_for();
        let frozen = silent.is_some_and(|d| d >= UNRESPONSIVE_AFTER);
        let (status, worker) = match self.phase {
            Phase::Starting => ("starting", "starting"),
            Phase::Ready if frozen => ("unresponsive", "unresponsive"),
            Phase::Ready => ("ok", "ready"),
            Phase::Restarting => ("starting", "restarting"),
            Phase::Degraded => ("degraded", "degraded"),
            Phase::Draining => ("stopping", "draining"),
            Phase::Stopped => ("stopping", "stopped"),
        };
        MessageResult(Health {
            status,
            worker,
            pid: self.worker.as_ref().map(|w| w.pid),
            worker_id: self.worker.as_ref().map(|w| w.worker_id.clone()),
            restarts: self.restarts,
            inflight: self.calls.len(),
            last_exit: self.last_exit.clone(),
            restart_budget: (self.policy.intensity(), self.policy.period().as_secs_f64()),
            recent_restarts: self.policy.recent(Instant::now()),
            retry_in_s: self
                .retry_at
                .map(|t| t.saturating_duration_since(Instant::now()).as_secs_f64()),
            worker_silent_ms: silent.map(|d| d.as_millis() as u64),
            plugin_events_dropped: self.events_dropped.load(Ordering::Relaxed),
            host_events_dropped: self.host_events_dropped,
        })
    }
}

impl Handler<BeginDrain> for WorkerSupervisor {
    type Result = ();

    fn handle(&mut self, _: BeginDrain, _: &mut Context<Self>) {
        if self.phase == Phase::Stopped {
            return;
        }
        self.phase = Phase::Draining;
        for call in self.calls.take_queued() {
            call.reply.fail(shutting_down());
        }
    }
}

fn shutting_down() -> RemoteError {
    RemoteError::new(
        ErrorKind::ServerExited,
        "the server is shutting down and takes no new calls",
    )
}

impl Handler<StopWorker> for WorkerSupervisor {
    type Result = ();

    fn handle(&mut self, _: StopWorker, ctx: &mut Context<Self>) {
        self.phase = Phase::Stopped;
        self.guard.disarm();
        ctx.stop();
        self.calls.fail_all(&RemoteError::new(
            ErrorKind::ServerExited,
            "the server shut down before the call finished",
        ));
        if let Some(w) = self.worker.take() {
            process::signal_group(w.pid, libc::SIGKILL);
            // Here, not on a task: the server exits right after.
            process::kill_tagged(&worker_process::worker_tag(&w.worker_id));
        }
    }
}
