//! [`ServerSupervisor`]: the root of a server's actor tree.
//!
//! Supervised by nobody: whoever started the server (see
//! [`crate::server::Server`]) holds its address. It supervises the
//! [`WorkerSupervisor`], which in turn supervises the worker process of each
//! generation and one [`NamespaceForwarder`](crate::forwarder::NamespaceForwarder)
//! per plugin namespace; the [`CallRouter`], which holds the calls; and the
//! two [`ChannelRelay`]s, which carry `/log` and `/trace` to hosts.
//!
//! When a child ends — it panicked, or was told to stop by [`RestartChild`]
//! — the root logs why and starts a new one by its [`RestartPolicy`] (one
//! budget for all its children, as in OTP). A new worker supervisor kills
//! the old worker's calls with `WorkerExited` and starts a new worker; a new
//! call router ends the old one's calls with `CallLost` (the worker cancels
//! them) and is told by the worker supervisor where the worker stands.
//! Every socket handler reaches the new incarnation through the same
//! [`ChildAddr`], so hosts keep their connections.

use std::time::{Duration, Instant};

use actix::prelude::*;
use agentix_actors::restart_policy::{Restart, RestartPolicy};
use agentix_actors::supervision::{ChildAddr, ChildEnded, ChildGuard};
use socketioxide::SocketIo;

use crate::call_router::{CallCount, CallRouter, StopRouter};
use crate::channel_relay::{ChannelRelay, RelayTo, SideChannelKind, StopRelay};
use crate::config::ServerConfig;
use crate::forwarder::{ForwarderCounts, Forwarders};
use crate::relay_credits::RelayCredits;
use crate::relays::Relays;
use crate::server_child::ServerChild;
use crate::supervisor::{
    AttachIo, BeginDrain, RetellWorker, StopForwarder, StopSupervisor, StopWorker, WorkerSupervisor,
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

/// How often the root restarted the call router.
#[derive(Message)]
#[rtype(result = "u64")]
pub struct RouterRestarts;

/// How often the root restarted the log and trace relays, together.
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

/// Restarts of the root's children allowed within [`RESTART_PERIOD`].
const RESTART_INTENSITY: u32 = 5;
/// The window those restarts are counted over.
const RESTART_PERIOD: Duration = Duration::from_secs(60);

/// The root of one server's actor tree.
pub struct ServerSupervisor {
    config: ServerConfig,
    /// Unique among the servers of the process; worker ids start with it.
    server_id: String,
    side: Relays,
    logs: ChildAddr<ChannelRelay>,
    traces: ChildAddr<ChannelRelay>,
    credits: RelayCredits,
    relay_restarts: u64,
    io: Option<SocketIo>,
    worker_supervisor: ChildAddr<WorkerSupervisor>,
    incarnation: u64,
    router: ChildAddr<CallRouter>,
    router_incarnation: u64,
    calls: CallCount,
    forwarders: Forwarders,
    forwarder_counts: ForwarderCounts,
    policy: RestartPolicy,
    restarts: u64,
    router_restarts: u64,
    stopping: bool,
}

/// The shared addresses of a tree's children, for socket handlers.
pub struct TreeAddrs {
    /// The worker's supervisor.
    pub worker_supervisor: ChildAddr<WorkerSupervisor>,
    /// The call router.
    pub router: ChildAddr<CallRouter>,
    /// The plugin namespaces' forwarders, by path.
    pub forwarders: Forwarders,
    /// The log and trace relays.
    pub side: Relays,
}

impl ServerSupervisor {
    /// Starts the tree on the current arbiter: the root, the call router
    /// and the worker's supervisor (which starts the worker). Returns the
    /// root's address and the shared addresses of its children.
    pub fn start_tree(
        config: ServerConfig,
        credits: RelayCredits,
        server_id: String,
    ) -> (Addr<ServerSupervisor>, TreeAddrs) {
        let mut children = None;
        let root = ServerSupervisor::create(|ctx| {
            let relay = |kind, child| {
                let guard = ChildGuard::new(child, ctx.address().recipient());
                ChildAddr::new(ChannelRelay::start(kind, None, credits.clone(), guard))
            };
            let logs = relay(SideChannelKind::Logs, ServerChild::LogRelay);
            let traces = relay(SideChannelKind::Traces, ServerChild::TraceRelay);
            let side = Relays::new(logs.clone(), traces.clone());
            let calls = CallCount::default();
            let forwarders = Forwarders::default();
            let forwarder_counts = forwarders.counts();
            let router = ChildAddr::new(start_router(&config, &calls, 1, ctx.address()));
            let tree = Tree {
                config: &config,
                side: &side,
                server_id: &server_id,
                router: &router,
                calls: &calls,
                forwarders: &forwarders,
                forwarder_counts: &forwarder_counts,
            };
            let worker_supervisor = ChildAddr::new(tree.start_worker_supervisor(1, ctx.address()));
            children = Some(TreeAddrs {
                worker_supervisor: worker_supervisor.clone(),
                router: router.clone(),
                forwarders: forwarders.clone(),
                side: side.clone(),
            });
            ServerSupervisor {
                config,
                server_id,
                side,
                logs,
                traces,
                credits,
                relay_restarts: 0,
                io: None,
                worker_supervisor,
                incarnation: 1,
                router,
                router_incarnation: 1,
                calls,
                forwarders,
                forwarder_counts,
                policy: RestartPolicy::new(RESTART_INTENSITY, RESTART_PERIOD),
                restarts: 0,
                router_restarts: 0,
                stopping: false,
            }
        });
        (root, children.expect("set by create"))
    }

    fn tree(&self) -> Tree<'_> {
        Tree {
            config: &self.config,
            side: &self.side,
            server_id: &self.server_id,
            router: &self.router,
            calls: &self.calls,
            forwarders: &self.forwarders,
            forwarder_counts: &self.forwarder_counts,
        }
    }

    fn restart_worker_supervisor(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        self.incarnation += 1;
        self.restarts += 1;
        let addr = self
            .tree()
            .start_worker_supervisor(self.incarnation, ctx.address());
        if let Some(io) = &self.io {
            addr.do_send(AttachIo(io.clone()));
        }
        self.worker_supervisor.replace(addr);
    }

    fn restart_router(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        self.router_incarnation += 1;
        self.router_restarts += 1;
        let addr = start_router(
            &self.config,
            &self.calls,
            self.router_incarnation,
            ctx.address(),
        );
        self.router.replace(addr);
        // The new router knows no worker yet: it waits for this.
        self.worker_supervisor.get().do_send(RetellWorker);
    }

    fn restart_relay(&mut self, child: ServerChild, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        let (kind, addr) = match child {
            ServerChild::LogRelay => (SideChannelKind::Logs, &self.logs),
            ServerChild::TraceRelay => (SideChannelKind::Traces, &self.traces),
            _ => return,
        };
        self.relay_restarts += 1;
        let guard = ChildGuard::new(child, ctx.address().recipient());
        let relay = ChannelRelay::start(kind, self.io.clone(), self.credits.clone(), guard);
        addr.replace(relay);
    }

    /// Restarts `child` when the policy allows; `how` it ended is logged.
    fn restart(&mut self, child: ServerChild, how: &str, ctx: &mut Context<Self>) {
        let shown = format!("{child:?}");
        let restart = move |act: &mut Self, ctx: &mut Context<Self>| match child {
            ServerChild::CallRouter => act.restart_router(ctx),
            ServerChild::WorkerSupervisor => act.restart_worker_supervisor(ctx),
            relay @ (ServerChild::LogRelay | ServerChild::TraceRelay) => {
                act.restart_relay(relay, ctx)
            }
            ServerChild::Forwarder(_) => {}
        };
        match self.policy.on_exit(Instant::now()) {
            Restart::Now => {
                tracing::error!(
                    child = shown,
                    "a child of the root {how}; starting a new one"
                );
                restart(self, ctx);
            }
            Restart::After(delay) => {
                tracing::error!(
                    child = shown,
                    "a child of the root {how}; starting a new one in {delay:?}"
                );
                ctx.run_later(delay, restart);
            }
            Restart::GiveUp { retry_at } => {
                let wait = retry_at.saturating_duration_since(Instant::now());
                tracing::error!(
                    child = shown,
                    "a child of the root {how}, and children ended more than \
                     {RESTART_INTENSITY} times within {RESTART_PERIOD:?}; trying again in {wait:?}"
                );
                ctx.run_later(wait, restart);
            }
        }
    }
}

/// What starting a child of the tree takes.
struct Tree<'a> {
    config: &'a ServerConfig,
    side: &'a Relays,
    server_id: &'a str,
    router: &'a ChildAddr<CallRouter>,
    calls: &'a CallCount,
    forwarders: &'a Forwarders,
    forwarder_counts: &'a ForwarderCounts,
}

impl Tree<'_> {
    fn start_worker_supervisor(
        &self,
        incarnation: u64,
        root: Addr<ServerSupervisor>,
    ) -> Addr<WorkerSupervisor> {
        let guard = ChildGuard::new(ServerChild::WorkerSupervisor, root.recipient());
        // Worker ids name log files: letters, digits and dashes only.
        let worker_ids = format!("{}-{incarnation}", self.server_id);
        WorkerSupervisor::new(
            self.config.clone(),
            self.side.clone(),
            self.router.clone(),
            self.calls.clone(),
            self.forwarders.clone(),
            self.forwarder_counts.clone(),
            worker_ids,
            guard,
        )
        .start()
    }
}

fn start_router(
    config: &ServerConfig,
    calls: &CallCount,
    incarnation: u64,
    root: Addr<ServerSupervisor>,
) -> Addr<CallRouter> {
    let guard = ChildGuard::new(ServerChild::CallRouter, root.recipient());
    let router = CallRouter::new(
        incarnation,
        config.max_inflight,
        config.max_message_bytes,
        calls.clone(),
        guard,
    );
    CallRouter::create(|ctx| {
        ctx.set_mailbox_capacity(crate::call_router::ROUTER_MAILBOX);
        router
    })
}

impl Actor for ServerSupervisor {
    type Context = Context<Self>;
}

impl Handler<ChildEnded<ServerChild>> for ServerSupervisor {
    type Result = ();

    fn handle(&mut self, msg: ChildEnded<ServerChild>, ctx: &mut Context<Self>) {
        let ours = !matches!(msg.child, ServerChild::Forwarder(_));
        if self.stopping || !ours {
            return;
        }
        let how = if msg.panicked { "panicked" } else { "stopped" };
        self.restart(msg.child, how, ctx);
    }
}

impl Handler<AttachIo> for ServerSupervisor {
    type Result = ();

    fn handle(&mut self, AttachIo(io): AttachIo, _: &mut Context<Self>) {
        self.worker_supervisor.get().do_send(AttachIo(io.clone()));
        // Sent before any batch could need it: no host can have joined yet.
        self.logs.get().do_send(RelayTo(io.clone()));
        self.traces.get().do_send(RelayTo(io.clone()));
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
            ServerChild::CallRouter => self.router.get().do_send(StopRouter),
            ServerChild::Forwarder(path) => supervisor.do_send(StopForwarder(path)),
            ServerChild::LogRelay => self.logs.get().do_send(StopRelay),
            ServerChild::TraceRelay => self.traces.get().do_send(StopRelay),
        }
    }
}

impl Handler<SupervisorRestarts> for ServerSupervisor {
    type Result = u64;

    fn handle(&mut self, _: SupervisorRestarts, _: &mut Context<Self>) -> u64 {
        self.restarts
    }
}

impl Handler<RouterRestarts> for ServerSupervisor {
    type Result = u64;

    fn handle(&mut self, _: RouterRestarts, _: &mut Context<Self>) -> u64 {
        self.router_restarts
    }
}

impl Handler<RelayRestarts> for ServerSupervisor {
    type Result = u64;

    fn handle(&mut self, _: RelayRestarts, _: &mut Context<Self>) -> u64 {
        self.relay_restarts
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
