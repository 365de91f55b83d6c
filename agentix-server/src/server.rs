//! [`run`]: the server's life from bind to shutdown, on the actix runtime.
//!
//! Once listening it prints one JSON line on stdout, `{"agentix":"ready",
//! "addr":..,"pid":..}`, which is how a provider learns the port it got
//! (`addr` is `ip:port`, or `unix:PATH` with `--unix`). On
//! SIGTERM or SIGINT (also sent when the parent dies: see the local provider)
//! it stops taking calls, lets the calls in flight finish for up to the
//! shutdown grace period (a second signal cuts it short), stops the worker,
//! removes its cleanup directory and exits.

use std::io::Write;
use std::time::{Duration, Instant};

use actix::{Actor, Addr};
use socketioxide::SocketIo;
use tokio::signal::unix::{signal, SignalKind};

use crate::auth::Token;
use crate::config::ServerConfig;
use crate::forwarder;
use crate::http::HttpRoutes;
use crate::listener::Listener;
use crate::rpc;
use crate::side_credits::SideCredits;
use crate::side_namespaces;
use crate::side_relay::SideRelay;
use crate::supervisor::{AttachIo, BeginDrain, ReportHealth, StopWorker, WorkerSupervisor};
use crate::upgrade_gate::UpgradeGate;

/// Room for an event's JSON header beside its largest binary attachment.
const HEADER_SLACK: usize = 64 << 10;

/// Connections open at once; more wait in the listen queue.
const MAX_CONNECTIONS: usize = 1024;

/// How long a connection may take to send its request headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes read from a host's websocket per read.
const WS_READ_BUFFER: usize = 128 << 10;

/// Runs the server until SIGTERM/SIGINT; returns the process exit code.
pub fn run(config: ServerConfig) -> i32 {
    init_tracing();
    agentix_actors::process::tune_allocator();
    if config.worker_command.is_empty() {
        eprintln!("agentix-server: no worker command (use --worker CMD [ARGS..])");
        return 2;
    }
    if config.token.is_none() && !config.insecure_no_auth {
        eprintln!(
            "agentix-server: no token (set AGENTIX_TOKEN or pass --token-stdin); \
             --insecure-no-auth serves everyone, on purpose"
        );
        return 2;
    }
    actix_rt::System::new().block_on(serve(config))
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGENTIX_SERVER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

async fn serve(config: ServerConfig) -> i32 {
    let listener = match Listener::bind(config.host, config.port, config.unix.as_deref()).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("agentix-server: {e}");
            return 1;
        }
    };
    let addr = match listener.addr() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("agentix-server: {e}");
            return 1;
        }
    };
    let (mut sigterm, mut sigint) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(t), Ok(i)) => (t, i),
        _ => {
            eprintln!("agentix-server: cannot install signal handlers");
            return 1;
        }
    };
    let token = Token::new(config.token.clone());
    let (side, log_inbox) = SideRelay::channel();
    let supervisor = WorkerSupervisor::new(config.clone(), side.clone()).start();
    let credits = SideCredits::default();
    // A message's bytes travel as one binary frame beside a small JSON
    // header; the slack is for that header.
    let max_frame = config.max_message_bytes.saturating_add(HEADER_SLACK);
    let (service, io) = SocketIo::builder()
        .with_parser(
            socketioxide::ParserConfig::common()
                .max_incoming_binary_buf_size(config.max_message_bytes),
        )
        .max_payload(max_frame as u64)
        // Socketioxide reads a websocket 4 KiB at a time by default: 256
        // reads per MiB received.
        .ws_read_buffer_size(WS_READ_BUFFER)
        .ws_max_message_size(max_frame)
        .ws_max_frame_size(max_frame)
        .max_buffer_size(4096)
        .ping_interval(config.ping_interval)
        .ping_timeout(config.ping_timeout)
        .build_with_inner_svc(HttpRoutes::new(
            supervisor.clone(),
            credits.clone(),
            token.clone(),
        ));
    rpc::register(
        &io,
        supervisor.clone(),
        token.clone(),
        config.max_message_bytes,
    );
    supervisor.do_send(AttachIo(io.clone()));
    forwarder::register(&io, supervisor.clone().recipient(), token.clone());
    side_namespaces::register(&io, side, credits.clone(), token);
    log_inbox.start(io.clone(), credits);

    let ready = serde_json::json!({
        "agentix": "ready",
        "addr": addr,
        "pid": std::process::id(),
    });
    {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{ready}");
        let _ = stdout.flush();
    }
    tracing::info!(%addr, "agentix-server listening");

    let gate_token = Token::new(config.token.clone());
    // A peer may hold only so many connections, and must send its request
    // headers in time (a slowloris would otherwise keep them all open).
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let accept = tokio::spawn(async move {
        loop {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let stream = match listener.accept().await {
                Ok(conn) => conn,
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    continue;
                }
            };
            let service = UpgradeGate::new(service.clone(), gate_token.clone());
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
    });

    tokio::select! {
        _ = sigterm.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = sigint.recv() => tracing::info!("SIGINT: shutting down"),
        idle = no_host_for(&io, config.idle_exit) => {
            tracing::info!("no host connected for {idle:?}: shutting down")
        }
    }
    accept.abort();
    let _ = supervisor.send(BeginDrain).await;
    tokio::select! {
        _ = drained(&supervisor, config.shutdown_grace) => {}
        _ = sigterm.recv() => tracing::info!("second signal: not waiting for calls in flight"),
        _ = sigint.recv() => tracing::info!("second signal: not waiting for calls in flight"),
    }
    shutdown(&supervisor, &io, &config).await;
    0
}

/// Returns once no call is in flight, or after `grace`.
/// Resolves once no host has had `/rpc` open for `limit` (checked every
/// second); never without a limit.
async fn no_host_for(io: &SocketIo, limit: Option<Duration>) -> Duration {
    let Some(limit) = limit else {
        return std::future::pending().await;
    };
    let check = Duration::from_secs(1).min(limit);
    let mut idle_since = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(check).await;
        let hosts = io
            .of(agentix_actors::wire::RPC_NAMESPACE)
            .map_or(0, |ns| ns.sockets().len());
        if hosts > 0 {
            idle_since = tokio::time::Instant::now();
        } else if idle_since.elapsed() >= limit {
            return limit;
        }
    }
}

async fn drained(supervisor: &Addr<WorkerSupervisor>, grace: Duration) {
    let start = Instant::now();
    loop {
        match supervisor.send(ReportHealth).await {
            Ok(h) if h.inflight == 0 => return,
            Ok(h) if start.elapsed() >= grace => {
                tracing::warn!(
                    inflight = h.inflight,
                    "calls still running after the {grace:?} grace period; stopping them"
                );
                return;
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(_) => return,
        }
    }
}

async fn shutdown(supervisor: &Addr<WorkerSupervisor>, io: &SocketIo, config: &ServerConfig) {
    let _ = supervisor.send(StopWorker).await;
    // Let the call handlers emit the last replies before the sockets close.
    tokio::time::sleep(Duration::from_millis(50)).await;
    io.close().await;
    if let Some(dir) = &config.cleanup_dir {
        if let Err(e) = std::fs::remove_dir_all(dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %dir.display(), "cannot remove the sandbox directory: {e}");
            }
        }
    }
}
