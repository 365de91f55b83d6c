//! The `WorkerSupervisor` actor: starts a worker for each generation.
//!
//! Supervised by the [`ServerSupervisor`](crate::server_supervisor::ServerSupervisor),
//! which its [`ChildGuard`] tells when it ends; it supervises one
//! [`Worker`] actor per generation (the process, and the tasks pumping its
//! pipes) and one [`NamespaceForwarder`](crate::forwarder::NamespaceForwarder)
//! per plugin namespace (a forwarder that ends is started again on the same
//! path; see `namespaces`). It starts the
//! worker and restarts it when it dies, by its [`RestartPolicy`]: first at
//! once, then with exponential backoff, at most `max_restarts` within
//! `restart_window`; past that the server reports `degraded` until the
//! window has passed, then tries once more.
//!
//! Calls are not its business: the [`CallRouter`],
//! its sibling, holds them, and hears from this actor what becomes of the
//! worker ([`WorkerNews`]): ready (with its pipe's queue), gone (its calls
//! in flight end with `WorkerExited`), degraded, draining, stopped. When this
//! actor itself ends (it panicked, or its parent stopped it) its worker is
//! killed and the router told so.

use std::ffi::OsString;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use actix::prelude::*;
use agentix_actors::restart_policy::{Restart, RestartPolicy};
use agentix_actors::supervision::{ChildAddr, ChildGuard};
use agentix_wire::errors::{ErrorKind, RemoteError};
use agentix_wire::wire::Frame;
use serde::Serialize;

use crate::call_router::{CallCount, CallRouter, WorkerNews};
use crate::config::ServerConfig;
use crate::forwarder::{ForwarderCounts, Forwarders, StopForwarding};
use crate::relays::Relays;
use crate::server_child::ServerChild;
use crate::worker::{DrainOutput, KillWorker, Worker, WorkerHandle, WorkerReports};
use crate::worker_pipes::{FrameArrived, WorkerExited};
use crate::worker_process;

mod namespaces;

// ---- messages ------------------------------------------------------------

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

/// Tell the call router what the worker is doing now (it is new, and knows nothing).
#[derive(Message)]
#[rtype(result = "()")]
pub struct RetellWorker;

/// Freeze (`true`) or thaw (`false`) the current worker and every process
/// it started: SIGSTOP, then SIGCONT, to everything under its tag. Calls
/// wait meanwhile (their frames queue for the worker's pipe); the server,
/// its connections and its log go on. Answers how many processes it
/// signalled and whether the worker was paused before, or why not (no
/// worker runs).
#[derive(Message)]
#[rtype(result = "Result<(usize, bool), String>")]
pub struct PauseWorker(pub bool);

/// Stop the forwarder of namespace `path`, as a crash would: it is started again.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopForwarder(pub String);

// ---- state ---------------------------------------------------------------

/// What `/health` shows.
#[derive(Debug, Clone, Serialize)]
pub struct Health {
    /// `ok`, `starting`, `paused` ([`PauseWorker`]), `unresponsive` (the
    /// worker does not answer pings within [`UNRESPONSIVE_AFTER`]),
    /// `degraded` or `stopping`.
    pub status: &'static str,
    /// `starting`, `ready`, `paused`, `unresponsive`, `restarting`,
    /// `degraded` or `stopped`.
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

/// Owns the worker process of each generation.
pub struct WorkerSupervisor {
    config: ServerConfig,
    /// Tells the root when this supervisor ends.
    guard: ChildGuard<ServerChild>,
    /// What this incarnation's worker ids start with: unique among the
    /// servers of the process and the incarnations of the supervisor.
    worker_ids: String,
    /// Where the workers' log records, output and spans go.
    side: Relays,
    /// Holds the calls; told what becomes of the worker.
    router: ChildAddr<CallRouter>,
    /// How many calls it holds, for `/health`.
    calls: CallCount,
    phase: Phase,
    worker: Option<WorkerHandle>,
    generation: u64,
    restarts: u64,
    policy: RestartPolicy,
    /// While degraded: when the worker is tried again.
    retry_at: Option<Instant>,
    /// The ping the current worker has not answered yet, and since when.
    unanswered: Option<(u64, Instant)>,
    /// Whether the current worker is frozen on request ([`PauseWorker`]):
    /// it is not pinged, and `/health` says `paused`.
    paused: bool,
    pings: u64,
    io: Option<socketioxide::SocketIo>,
    /// One forwarder per plugin namespace a worker opened, shared with the
    /// socket handlers; they outlive worker restarts (the new worker opens
    /// its namespaces again).
    forwarders: Forwarders,
    /// Namespaces opened before the Socket.IO server was attached.
    early_opens: Vec<String>,
    last_exit: Option<String>,
    start_error: Option<RemoteError>,
    /// Events the forwarders dropped, both ways.
    forwarder_counts: ForwarderCounts,
}

impl WorkerSupervisor {
    /// A supervisor that will start `config.worker_command` once started,
    /// relaying what its workers log, print and trace to `side` and telling
    /// `router` (whose call count is `calls`) what becomes of them; its
    /// forwarders go in `forwarders` (which the last supervisor emptied
    /// when it ended); its workers' ids start with `worker_ids`, and `guard`
    /// tells its parent when it ends.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: ServerConfig,
        side: Relays,
        router: ChildAddr<CallRouter>,
        calls: CallCount,
        forwarders: Forwarders,
        forwarder_counts: ForwarderCounts,
        worker_ids: String,
        guard: ChildGuard<ServerChild>,
    ) -> Self {
        WorkerSupervisor {
            policy: RestartPolicy::new(config.max_restarts, config.restart_window),
            config,
            guard,
            worker_ids,
            side,
            router,
            calls,
            phase: Phase::Starting,
            worker: None,
            generation: 0,
            restarts: 0,
            retry_at: None,
            unanswered: None,
            paused: false,
            pings: 0,
            io: None,
            forwarders,
            early_opens: Vec::new(),
            last_exit: None,
            start_error: None,
            forwarder_counts,
        }
    }

    fn spawn_worker(&mut self, ctx: &mut Context<Self>) {
        self.generation += 1;
        self.unanswered = None;
        // A new worker starts thawed: the pause was the last one's.
        self.paused = false;
        let generation = self.generation;
        let worker_id = format!("{}-{}", self.worker_ids, generation);
        self.phase = Phase::Starting;
        self.tell_router(WorkerNews::Starting);
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
        let reports = WorkerReports {
            frames: ctx.address().recipient(),
            calls: self.router.clone(),
            exited: ctx.address().recipient(),
        };
        let worker = Worker::start(proc, generation, worker_id, &self.side, reports);
        self.worker = Some(worker);
        let timeout = self.config.worker_start_timeout;
        ctx.run_later(timeout, move |act, _| {
            if act.phase == Phase::Starting && act.generation == generation {
                if let Some(w) = &act.worker {
                    tracing::error!(
                        pid = w.pid,
                        "worker did not report ready in {timeout:?}; killing it"
                    );
                    w.addr.do_send(KillWorker);
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
        // Its `Worker` has killed what its commands left behind.
        let gone = self.worker.take();
        self.tell_forwarders();
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
            self.tell_router(WorkerNews::Gone {
                error: err,
                queued_too: true,
            });
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
        // Calls waiting for a worker that never became ready would wait for
        // the next one, which may fail the same way: they end now too.
        self.tell_router(WorkerNews::Gone {
            error: exited.clone(),
            queued_too: !was_ready,
        });
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
                self.tell_router(WorkerNews::Degraded(self.degraded_error()));
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
}

impl WorkerSupervisor {
    /// Sends `frame` to the current worker, if one runs, behind every
    /// frame sent before it.
    fn send_frame(&self, frame: Frame) {
        if let Some(w) = &self.worker {
            w.frames.push(frame);
        }
    }

    /// Tells the call router what became of the worker.
    fn tell_router(&self, news: WorkerNews) {
        // Its mailbox takes one message per change of the worker's state,
        // which no peer can cause faster than workers start and die.
        self.router.get().do_send(news);
    }

    /// What the call router would have been told by now.
    fn news(&self) -> WorkerNews {
        if let Some(frames) = self.ready_frames() {
            return WorkerNews::Ready {
                generation: self.generation,
                frames,
            };
        }
        match self.phase {
            Phase::Degraded => WorkerNews::Degraded(self.degraded_error()),
            Phase::Draining => WorkerNews::Draining,
            Phase::Stopped => WorkerNews::Stopped(shut_down()),
            _ => WorkerNews::Starting,
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

/// How often the worker's frame loop is asked to answer.
const PING_EVERY: Duration = Duration::from_secs(1);

/// Silence after which `/health` calls the worker unresponsive: a frozen
/// (stopped, or wedged) worker, which no exit ever reports.
pub(crate) const UNRESPONSIVE_AFTER: Duration = Duration::from_secs(3);

impl WorkerSupervisor {
    /// Pings a ready worker, unless the last ping is still unanswered.
    fn ping(&mut self) {
        if self.phase != Phase::Ready || self.unanswered.is_some() || self.paused {
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
                        w.addr.do_send(DrainOutput);
                    }
                }
                if matches!(self.phase, Phase::Draining | Phase::Stopped) {
                    return;
                }
                self.phase = Phase::Ready;
                self.start_error = None;
                self.tell_router(self.news());
                self.tell_forwarders();
            }
            Frame::Pong { seq } => {
                if self.unanswered.is_some_and(|(s, _)| s == seq) {
                    self.unanswered = None;
                }
            }
            Frame::SioOpen { path } => self.open_namespace(path, ctx),
            Frame::SioEvent {
                path,
                event,
                data,
                attachments,
            } => {
                let frames = attachments.into_iter().map(|a| a.0).collect();
                self.forward_to_hosts(path, event, data, frames)
            }
            Frame::Items { .. }
            | Frame::Result { .. }
            | Frame::End { .. }
            | Frame::Error { .. }
            | Frame::Part { .. } => {
                tracing::warn!(
                    "a frame that answers a call reached the worker supervisor; dropped"
                );
            }
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
        // Its forwarders stop with it; the next supervisor starts its own.
        for forwarder in self.forwarders.all() {
            forwarder.do_send(StopForwarding);
        }
        self.forwarders.clear();
        if let Some(w) = self.worker.take() {
            w.kill_in_background();
        }
        if self.phase != Phase::Stopped {
            // Calls queued wait for the worker the next supervisor starts.
            self.tell_router(WorkerNews::Gone {
                error: RemoteError::new(
                    ErrorKind::WorkerExited,
                    "the server's worker supervisor ended mid-call; a new one starts the worker again",
                ),
                queued_too: false,
            });
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

impl Handler<PauseWorker> for WorkerSupervisor {
    type Result = ResponseActFuture<Self, Result<(usize, bool), String>>;

    fn handle(&mut self, PauseWorker(pause): PauseWorker, _: &mut Context<Self>) -> Self::Result {
        let Some(worker) = self.worker.as_ref().filter(|_| self.phase == Phase::Ready) else {
            let why = "no worker is running (it is starting, restarting or stopped)";
            return Box::pin(actix::fut::ready(Err(why.to_owned())));
        };
        let (signal, generation, was_paused) = (worker.signaller(), self.generation, self.paused);
        // Walking /proc takes a while: off the actor's thread.
        let signalled = tokio::task::spawn_blocking(move || signal(pause));
        Box::pin(
            actix::fut::wrap_future::<_, Self>(signalled).map(move |signalled, act, _| {
                let signalled = signalled.map_err(|e| format!("the signals were not sent: {e}"))?;
                if act.generation == generation {
                    act.paused = pause;
                    // Unanswered while frozen; a fresh ping once thawed.
                    act.unanswered = None;
                }
                Ok((signalled, was_paused))
            }),
        )
    }
}

impl Handler<ReportHealth> for WorkerSupervisor {
    type Result = MessageResult<ReportHealth>;

    fn handle(&mut self, _: ReportHealth, _: &mut Context<Self>) -> Self::Result {
        let silent = self.silent_for();
        let frozen = silent.is_some_and(|d| d >= UNRESPONSIVE_AFTER);
        let (status, worker) = match self.phase {
            Phase::Starting => ("starting", "starting"),
            Phase::Ready if self.paused => ("paused", "paused"),
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
            inflight: self.calls.get(),
            last_exit: self.last_exit.clone(),
            restart_budget: (self.policy.intensity(), self.policy.period().as_secs_f64()),
            recent_restarts: self.policy.recent(Instant::now()),
            retry_in_s: self
                .retry_at
                .map(|t| t.saturating_duration_since(Instant::now()).as_secs_f64()),
            worker_silent_ms: silent.map(|d| d.as_millis() as u64),
            plugin_events_dropped: self
                .forwarder_counts
                .to_hosts_dropped
                .load(Ordering::Relaxed),
            host_events_dropped: self
                .forwarder_counts
                .to_worker_dropped
                .load(Ordering::Relaxed),
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
        self.tell_router(WorkerNews::Draining);
    }
}

fn shut_down() -> RemoteError {
    RemoteError::new(
        ErrorKind::ServerExited,
        "the server shut down before the call finished",
    )
}

impl Handler<StopWorker> for WorkerSupervisor {
    type Result = ();

    fn handle(&mut self, _: StopWorker, ctx: &mut Context<Self>) {
        self.phase = Phase::Stopped;
        self.guard.disarm();
        ctx.stop();
        self.tell_router(WorkerNews::Stopped(shut_down()));
        if let Some(w) = self.worker.take() {
            // Here, not on a task: the server exits right after.
            w.kill_now();
        }
    }
}

impl Handler<RetellWorker> for WorkerSupervisor {
    type Result = ();

    fn handle(&mut self, _: RetellWorker, _: &mut Context<Self>) {
        self.tell_router(self.news());
    }
}

#[cfg(test)]
mod tests {
    //! The supervisor driven by messages alone, over a worker command that
    //! cannot start (so no process ever runs): a stub parent, a real router
    //! holding a call, relays with no host.

    use std::ffi::OsString;

    use actix::prelude::*;
    use agentix_actors::supervision::{ChildAddr, ChildEnded, ChildGuard};
    use agentix_wire::errors::ErrorKind;
    use bytes::Bytes;
    use socketioxide::socket::Sid;
    use tokio::sync::oneshot;

    use super::*;
    use crate::call_outcome::Outcome;
    use crate::call_router::StartCall;
    use crate::calls::{NewCall, Origin, Reply};
    use crate::channel_relay::{ChannelRelay, SideChannelKind};
    use crate::relay_credits::RelayCredits;

    /// Stands in for the server supervisor; counts the children that ended.
    #[derive(Default)]
    struct Parent(Vec<ServerChild>);

    impl Actor for Parent {
        type Context = Context<Self>;
    }

    impl Handler<ChildEnded<ServerChild>> for Parent {
        type Result = ();

        fn handle(&mut self, ended: ChildEnded<ServerChild>, _: &mut Context<Self>) {
            self.0.push(ended.child);
        }
    }

    fn guard(child: ServerChild, parent: &Addr<Parent>) -> ChildGuard<ServerChild> {
        ChildGuard::new(child, parent.clone().recipient())
    }

    async fn health(supervisor: &Addr<WorkerSupervisor>) -> Health {
        supervisor.send(ReportHealth).await.unwrap()
    }

    #[actix_rt::test]
    async fn a_worker_that_cannot_start_fails_the_waiting_call_and_after_its_restarts_the_server_is_degraded(
    ) {
        let parent = Parent::default().start();
        let calls = CallCount::default();
        let router = CallRouter::new(
            1,
            16,
            1 << 20,
            calls.clone(),
            guard(ServerChild::CallRouter, &parent),
        )
        .start();
        let relay = |kind, child| {
            let relay =
                ChannelRelay::start(kind, None, RelayCredits::default(), guard(child, &parent));
            ChildAddr::new(relay)
        };
        let side = Relays::new(
            relay(SideChannelKind::Logs, ServerChild::LogRelay),
            relay(SideChannelKind::Traces, ServerChild::TraceRelay),
        );
        // A call that waits for a worker.
        let (reply, waiting) = oneshot::channel::<Outcome>();
        let call = NewCall {
            origin: Origin {
                socket: Sid::new(),
                host_id: 1,
            },
            target: "echo".into(),
            args: vec![Bytes::from_static(b"\x80")],
            trace: None,
            reply: Reply::Unary(reply),
        };
        router.send(StartCall(call)).await.unwrap();

        let config = ServerConfig {
            worker_command: vec![OsString::from("/nonexistent/agentix-no-such-worker")],
            max_restarts: 1,
            restart_window: Duration::from_secs(60),
            ..ServerConfig::default()
        };
        let forwarders = Forwarders::default();
        let supervisor = WorkerSupervisor::new(
            config,
            side,
            ChildAddr::new(router),
            calls,
            forwarders.clone(),
            forwarders.counts(),
            "test".into(),
            guard(ServerChild::WorkerSupervisor, &parent),
        )
        .start();

        let outcome = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the waiting call ends")
            .expect("an outcome");
        let error = outcome.unwrap_err();
        assert_eq!(error.kind, ErrorKind::WorkerStartFailed);
        assert!(
            error
                .message
                .contains("/nonexistent/agentix-no-such-worker"),
            "{error}"
        );
        // One restart, then it gives up until the window has passed.
        let deadline = Instant::now() + Duration::from_secs(5);
        let degraded = loop {
            let now = health(&supervisor).await;
            if now.status == "degraded" || Instant::now() > deadline {
                break now;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert_eq!((degraded.status, degraded.worker), ("degraded", "degraded"));
        assert_eq!(degraded.restarts, 1);
        assert_eq!(degraded.pid, None, "no process was ever started");
        assert!(degraded.retry_in_s.is_some_and(|s| s > 50.0));

        // Stopped on purpose: the parent hears of no failure.
        supervisor.send(StopWorker).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !parent
                .send(Ended)
                .await
                .unwrap()
                .contains(&ServerChild::WorkerSupervisor),
            "a supervisor stopped on purpose is not reported as ended"
        );
    }

    #[derive(Message)]
    #[rtype(result = "Vec<ServerChild>")]
    struct Ended;

    impl Handler<Ended> for Parent {
        type Result = MessageResult<Ended>;

        fn handle(&mut self, _: Ended, _: &mut Context<Self>) -> Self::Result {
            MessageResult(self.0.clone())
        }
    }
}
