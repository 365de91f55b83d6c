//! [`Server`]: one Agentix server inside a running actix `System`.
//!
//! [`Server::start`] binds the listener, starts the actor tree (see
//! [`crate::server_supervisor`]) on the current arbiter, registers the
//! Socket.IO namespaces and takes connections; it hands back the bound
//! address and the root's address. It touches nothing process-wide — no
//! logging subscriber, allocator setting, signal handler or stdout line
//! (those belong to [`crate::serve::run`], the binary's entry point) — so a
//! service can embed several servers in one process, an actix-web app's
//! `System` included.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Addr;
use agentix_actors::supervision::ChildAddr;
use agentix_wire::part::{MAX_SOCKET_MESSAGE_BYTES, SOCKET_READ_BYTES};
use socketioxide::SocketIo;

use crate::auth::Token;
use crate::config::ServerConfig;
use crate::forwarder;
use crate::http::HttpRoutes;
use crate::listener::Listener;
use crate::log_trace_namespaces;
use crate::relay_credits::RelayCredits;
use crate::rpc;
use crate::server_supervisor::{Drain, ServerSupervisor, StopTree};
use crate::supervisor::{AttachIo, Health, ReportHealth, WorkerSupervisor};
use crate::upgrade_gate::UpgradeGate;

/// Room for an event's JSON header beside its largest binary attachment.
const HEADER_SLACK: usize = 64 << 10;

/// Connections open at once; more wait in the listen queue.
const MAX_CONNECTIONS: usize = 1024;

/// How long a connection may take to send its request headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Servers started in this process, so each has ids of its own.
static SERVERS_STARTED: AtomicU64 = AtomicU64::new(0);

/// Why a server did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The config names no worker command.
    #[error("no worker command (use --worker CMD [ARGS..])")]
    NoWorker,
    /// The config has no token and does not say to serve without one.
    #[error(
        "no token (set AGENTIX_TOKEN or pass --token-stdin); \
         --insecure-no-auth serves everyone, on purpose"
    )]
    NoToken,
    /// The address or socket could not be bound.
    #[error("{0}")]
    Bind(String),
}

/// A running server: its listener, its actor tree and its Socket.IO side.
///
/// Dropping it stops the tree (the worker is killed); [`Server::shutdown`]
/// lets calls in flight finish first.
pub struct Server {
    addr: String,
    local_addr: Option<String>,
    root: Addr<ServerSupervisor>,
    worker_supervisor: ChildAddr<WorkerSupervisor>,
    io: SocketIo,
    /// One accepting task per listener.
    accept: Vec<tokio::task::JoinHandle<()>>,
    config: ServerConfig,
    stopped: bool,
}

impl Server {
    /// Binds `config`'s address and starts serving on the current actix
    /// arbiter (the caller must run inside an actix `System`).
    pub async fn start(config: ServerConfig) -> Result<Server, StartError> {
        if config.worker_command.is_empty() {
            return Err(StartError::NoWorker);
        }
        if config.token.is_none() && !config.insecure_no_auth {
            return Err(StartError::NoToken);
        }
        let listener = Listener::bind(config.host, config.port, config.unix.as_deref())
            .await
            .map_err(StartError::Bind)?;
        let addr = listener.addr().map_err(StartError::Bind)?;
        let local = config.local_socket.as_deref().map(Listener::bind_unix);
        let local = local.transpose().map_err(StartError::Bind)?;
        let local_addr = local.as_ref().map(Listener::addr);
        let local_addr = local_addr.transpose().map_err(StartError::Bind)?;
        let server_id = format!(
            "{}-{}",
            std::process::id(),
            SERVERS_STARTED.fetch_add(1, Ordering::Relaxed) + 1
        );
        let token = Token::new(config.token.clone());
        let credits = RelayCredits::default();
        let (root, tree) = ServerSupervisor::start_tree(config.clone(), credits.clone(), server_id);
        let worker_supervisor = tree.worker_supervisor;
        // A message's bytes travel as one binary frame beside a small JSON
        // header; the slack is for that header. Larger payloads travel in
        // parts, so one websocket message past MAX_SOCKET_MESSAGE_BYTES is
        // a peer's oversized JSON, refused on its header before it is read.
        let max_ws_message = config
            .max_message_bytes
            .min(MAX_SOCKET_MESSAGE_BYTES)
            .saturating_add(HEADER_SLACK);
        let (service, io) = SocketIo::builder()
            .with_parser(
                socketioxide::ParserConfig::common()
                    .max_incoming_binary_buf_size(config.max_message_bytes),
            )
            .max_payload(max_ws_message as u64)
            // Socketioxide reads a websocket 4 KiB at a time by default: 256
            // reads per MiB received.
            .ws_read_buffer_size(SOCKET_READ_BYTES)
            .ws_max_message_size(max_ws_message)
            .ws_max_frame_size(max_ws_message)
            .max_buffer_size(4096)
            .ping_interval(config.ping_interval)
            .ping_timeout(config.ping_timeout)
            .build_with_inner_svc(HttpRoutes::new(
                worker_supervisor.clone(),
                credits.clone(),
                token.clone(),
                config.state_dirs.clone(),
            ));
        rpc::register(&io, tree.router, token.clone(), config.max_message_bytes);
        root.do_send(AttachIo(io.clone()));
        forwarder::register(&io, tree.forwarders, token.clone());
        log_trace_namespaces::register(&io, tree.side, credits.clone(), token.clone());
        // Both listeners count against one connection limit.
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        let accept = std::iter::once(listener)
            .chain(local)
            .map(|listener| {
                tokio::spawn(accept_loop(
                    listener,
                    service.clone(),
                    token.clone(),
                    slots.clone(),
                    // A host that takes nothing for as long as its heartbeat
                    // may go unanswered is gone: its session is closed then,
                    // and its connection must go with it.
                    config.ping_interval + config.ping_timeout,
                ))
            })
            .collect();
        Ok(Server {
            addr,
            local_addr,
            root,
            worker_supervisor,
            io,
            accept,
            config,
            stopped: false,
        })
    }

    /// Where it listens: `ip:port`, or `unix:PATH`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The Unix socket it also listens on for a host on the same machine
    /// (`unix:PATH`), if the config named one.
    pub fn local_addr(&self) -> Option<&str> {
        self.local_addr.as_deref()
    }

    /// The root of its actor tree.
    pub fn root(&self) -> &Addr<ServerSupervisor> {
        &self.root
    }

    /// What `/health` reports of the worker; `None` once the tree stopped.
    pub async fn health(&self) -> Option<Health> {
        self.worker_supervisor.get().send(ReportHealth).await.ok()
    }

    /// Hosts connected on `/rpc` now.
    pub fn hosts(&self) -> usize {
        self.io
            .of(agentix_wire::wire::RPC_NAMESPACE)
            .map_or(0, |ns| ns.sockets().len())
    }

    /// Stops taking connections and calls; calls in flight go on.
    pub async fn begin_drain(&self) {
        self.stop_accepting();
        let _ = self.root.send(Drain).await;
    }

    /// Resolves once no call is in flight, or after `grace`.
    pub async fn drained(&self, grace: Duration) {
        let start = Instant::now();
        loop {
            match self.health().await {
                Some(h) if h.inflight == 0 => return,
                Some(h) if start.elapsed() >= grace => {
                    tracing::warn!(
                        inflight = h.inflight,
                        "calls still running after the {grace:?} grace period; stopping them"
                    );
                    return;
                }
                Some(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                None => return,
            }
        }
    }

    fn stop_accepting(&self) {
        for task in &self.accept {
            task.abort();
        }
    }

    /// Drains (up to the config's shutdown grace), then [`Server::stop`]s.
    pub async fn shutdown(self) {
        self.begin_drain().await;
        self.drained(self.config.shutdown_grace).await;
        self.stop().await;
    }

    /// Stops at once: calls still running end with `ServerExited`, the
    /// worker is killed, hosts are disconnected and the cleanup directory
    /// is removed.
    pub async fn stop(mut self) {
        self.stopped = true;
        self.stop_accepting();
        let _ = self.root.send(StopTree).await;
        // Let the call handlers emit the last replies before the sockets close.
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.io.clone().close().await;
        if let Some(dir) = &self.config.cleanup_dir {
            if let Err(e) = std::fs::remove_dir_all(dir) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(dir = %dir.display(), "cannot remove the sandbox directory: {e}");
                }
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if !self.stopped {
            self.stop_accepting();
            self.root.do_send(StopTree);
        }
    }
}

/// The Socket.IO service with the plain HTTP routes beneath it.
type Service = socketioxide::service::SocketIoService<HttpRoutes>;

/// Takes `listener`'s connections while `slots` has room.
async fn accept_loop(
    listener: Listener,
    service: Service,
    token: Token,
    slots: Arc<tokio::sync::Semaphore>,
    stall_limit: Duration,
) {
    // A peer may hold only so many connections, and must send its request
    // headers in time (a slowloris would otherwise keep them all open).
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept(stall_limit).await {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                continue;
            }
        };
        let writes = stream.inner().writes().clone();
        let service = UpgradeGate::new(service.clone(), token.clone(), writes);
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(stream, service)
                .with_upgrades();
            if let Err(e) = conn.await {
                tracing::debug!("connection ended: {e}");
            }
            drop(slot);
        });
    }
}
