//! [`ServerSupervisor`]: the root of a server's actor tree.
//!
//! Supervised by nobody: whoever started the server (see
//! [`crate::server::Server`]) holds its address. It supervises the
//! [`WorkerSupervisor`], which in turn supervises the worker process of each
//! generation and one [`NamespaceForwarder`](crate::forwarder::NamespaceForwarder)
//! per plugin namespace, and the side relay (`/log`, `/trace`; a task whose
//! own loop runs it again, see [`crate::side_relay`]). When the worker supervisor ends — it panicked, or
//! was told to stop by [`RestartChild`] — the root logs why and starts a new
//! one by its own [`RestartPolicy`] (its calls end with `WorkerExited`, its
//! worker is killed, and the new one starts a new worker); every socket
//! handler reaches the new incarnation through the same [`ChildAddr`], so
//! hosts keep their connections.

use std::time::{Duration, Instant};

use actix::prelude::*;
use agentix_actors::restart_policy::{Restart, RestartPolicy};
use agentix_actors::supervision::{ChildAddr, ChildEnded, ChildGuard};
use socketioxide::SocketIo;

use crate::config::ServerConfig;
use crate::server_child::ServerChild;
use crate::side_relay::SideRelay;
use crate::supervisor::{
    AttachIo, BeginDrain, StopForwarder, StopSupervisor, StopWorker, WorkerSupervisor,
};

// ---- messages ------------------------------------------------------------

/// Stops `child` as if it had crashed, so that its parent restarts it: an
/// operator's way to reset part of the tree (and how the tree is tested).
#[derive(Message)]
#[rtype(result = "()")]
pub struct RestartChild(pub ServerChild);

/// How often the root restarted the worker's supervisor.
#[derive(Message)]
#[rtype(result = "u64")]
pub struct SupervisorRestarts;

/// How often the side relay (`/log`, `/trace`) was started again.
#[derive(Message)]
#[rtype(result = "u64")]
pub struct RelayRestarts;

/// Shutdown has begun: take no new calls, let those in flight finish.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Drain;

/// Stop the tree: the worker is killed and nothing is restarted.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopTree;

// ---- the actor -----------------------------------------------------------

/// Restarts of the worker's supervisor allowed within [`RESTART_PERIOD`].
const RESTART_INTENSITY: u32 = 5;
/// The window those restarts are counted over.
const RESTART_PERIOD: Duration = Duration::from_secs(60);

/// The root of one server's actor tree.
pub struct ServerSupervisor {
    config: ServerConfig,
    /// Unique among the servers of the process; worker ids start with it.
    server_id: String,
    side: SideRelay,
    io: Option<SocketIo>,
    worker_supervisor: ChildAddr<WorkerSupervisor>,
    incarnation: u64,
    policy: RestartPolicy,
    restarts: u64,
    stopping: bool,
}

impl ServerSupervisor {
    /// Starts the tree on the current arbiter: the root and the worker's
    /// supervisor (which starts the worker). Returns the root's address and
    /// the shared address of the worker's supervisor, for socket handlers.
    pub fn start_tree(
        config: ServerConfig,
        side: SideRelay,
        server_id: String,
    ) -> (Addr<ServerSupervisor>, ChildAddr<WorkerSupervisor>) {
        let mut child = None;
        let root = ServerSupervisor::create(|ctx| {
            let first = start_worker_supervisor(&config, &side, &server_id, 1, ctx.address());
            let shared = ChildAddr::new(first);
            child = Some(shared.clone());
            ServerSupervisor {
                config,
                server_id,
                side,
                io: None,
                worker_supervisor: shared,
                incarnation: 1,
                policy: RestartPolicy::new(RESTART_INTENSITY, RESTART_PERIOD),
                restarts: 0,
                stopping: false,
            }
        });
        (root, child.expect("set by create"))
    }

    fn restart_worker_supervisor(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        self.incarnation += 1;
        self.restarts += 1;
        let addr = start_worker_supervisor(
            &self.config,
            &self.side,
            &self.server_id,
            self.incarnation,
            ctx.address(),
        );
        if let Some(io) = &self.io {
            addr.do_send(AttachIo(io.clone()));
        }
        self.worker_supervisor.replace(addr);
    }
}

fn start_worker_supervisor(
    config: &ServerConfig,
    side: &SideRelay,
    server_id: &str,
    incarnation: u64,
    root: Addr<ServerSupervisor>,
) -> Addr<WorkerSupervisor> {
    let guard = ChildGuard::new(ServerChild::WorkerSupervisor, root.recipient());
    // Worker ids name log files: letters, digits and dashes only.
    let worker_ids = format!("{server_id}-{incarnation}");
    WorkerSupervisor::new(config.clone(), side.clone(), worker_ids, guard).start()
}

impl Actor for ServerSupervisor {
    type Context = Context<Self>;
}

impl Handler<ChildEnded<ServerChild>> for ServerSupervisor {
    type Result = ();

    fn handle(&mut self, msg: ChildEnded<ServerChild>, ctx: &mut Context<Self>) {
        if self.stopping || msg.child != ServerChild::WorkerSupervisor {
            return;
        }
        let how = if msg.panicked { "panicked" } else { "stopped" };
        match self.policy.on_exit(Instant::now()) {
            Restart::Now => {
                tracing::error!("the worker supervisor {how}; starting a new one");
                self.restart_worker_supervisor(ctx);
            }
            Restart::After(delay) => {
                tracing::error!("the worker supervisor {how}; starting a new one in {delay:?}");
                ctx.run_later(delay, |act, ctx| act.restart_worker_supervisor(ctx));
            }
            Restart::GiveUp { retry_at } => {
                let wait = retry_at.saturating_duration_since(Instant::now());
                tracing::error!(
                    "the worker supervisor {how} more than {RESTART_INTENSITY} times within \
                     {RESTART_PERIOD:?}; trying again in {wait:?}"
                );
                ctx.run_later(wait, |act, ctx| act.restart_worker_supervisor(ctx));
            }
        }
    }
}

impl Handler<AttachIo> for ServerSupervisor {
    type Result = ();

    fn handle(&mut self, AttachIo(io): AttachIo, _: &mut Context<Self>) {
        self.worker_supervisor.get().do_send(AttachIo(io.clone()));
        self.io = Some(io);
    }
}

impl Handler<RestartChild> for ServerSupervisor {
    type Result = ();

    fn handle(&mut self, RestartChild(child): RestartChild, _: &mut Context<Self>) {
        tracing::info!(?child, "restarting on request");
        let supervisor = self.worker_supervisor.get();
        match child {
            ServerChild::WorkerSupervisor => supervisor.do_send(StopSupervisor),
            ServerChild::Forwarder(path) => supervisor.do_send(StopForwarder(path)),
            ServerChild::SideRelay => {
                let side = self.side.clone();
                actix::spawn(async move { side.restart().await });
            }
        }
    }
}

impl Handler<SupervisorRestarts> for ServerSupervisor {
    type Result = u64;

    fn handle(&mut self, _: SupervisorRestarts, _: &mut Context<Self>) -> u64 {
        self.restarts
    }
}

impl Handler<RelayRestarts> for ServerSupervisor {
    type Result = u64;

    fn handle(&mut self, _: RelayRestarts, _: &mut Context<Self>) -> u64 {
        self.side.restarts()
    }
}

impl Handler<Drain> for ServerSupervisor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Drain, _: &mut Context<Self>) -> Self::Result {
        let supervisor = self.worker_supervisor.get();
        Box::pin(async move {
            let _ = supervisor.send(BeginDrain).await;
        })
    }
}

impl Handler<StopTree> for ServerSupervisor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: StopTree, ctx: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
        ctx.stop();
        let supervisor = self.worker_supervisor.get();
        Box::pin(async move {
            let _ = supervisor.send(StopWorker).await;
        })
    }
}
