//! [`run`]: the server binary's entry point, and everything process-wide.
//!
//! It installs the logging subscriber (`AGENTIX_SERVER_LOG`, default
//! `info`, on stderr) and the allocator settings, builds the actix
//! `System`, starts one [`Server`] and prints one JSON line on stdout,
//! `{"agentix":"ready","addr":..,"pid":..}`, which is how a provider learns
//! the port it got (`addr` is `ip:port`, or `unix:PATH` with `--unix`;
//! with `--local-socket`, `local_addr` is `unix:PATH` as well). On
//! SIGTERM or SIGINT (also sent when the parent dies: see the local
//! provider), or once no host has been connected for the config's idle
//! limit, it stops taking calls, lets the calls in flight finish for up to
//! the shutdown grace period (a second signal cuts it short), stops the
//! worker, removes its cleanup directory and exits.

use std::io::Write;
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};

use crate::config::ServerConfig;
use crate::server::{Server, StartError};

/// Runs the server until SIGTERM/SIGINT; returns the process exit code.
pub fn run(config: ServerConfig) -> i32 {
    init_tracing();
    agentix_wire::process::tune_allocator();
    // Before the first worker: sandbox code never sees a half state.
    let seeded = match (&config.seed_file, config.seed_stdin) {
        (Some(path), _) => Some(crate::state_archive::unpack_state_file(
            path,
            &config.state_dirs,
        )),
        (None, true) => Some(crate::state_archive::unpack_state(
            std::io::stdin().lock(),
            &config.state_dirs,
        )),
        (None, false) => None,
    };
    match seeded {
        Some(Ok(entries)) => tracing::info!(entries, "the sandbox's state is unpacked"),
        Some(Err(e)) => {
            eprintln!("agentix-server: cannot unpack the sandbox's state: {e}");
            return 2;
        }
        None => {}
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
    let server = match Server::start(config.clone()).await {
        Ok(server) => server,
        Err(e) => {
            eprintln!("agentix-server: {e}");
            return match e {
                StartError::NoWorker | StartError::NoToken => 2,
                StartError::Bind(_) => 1,
            };
        }
    };
    let mut ready = serde_json::json!({
        "agentix": "ready",
        "addr": server.addr(),
        "pid": std::process::id(),
    });
    if let Some(local) = server.local_addr() {
        ready["local_addr"] = local.into();
    }
    {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{ready}");
        let _ = stdout.flush();
    }
    tracing::info!(addr = server.addr(), "agentix-server listening");

    tokio::select! {
        _ = sigterm.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = sigint.recv() => tracing::info!("SIGINT: shutting down"),
        idle = no_host_for(&server, config.idle_exit) => {
            tracing::info!("no host connected for {idle:?}: shutting down")
        }
    }
    server.begin_drain().await;
    tokio::select! {
        _ = server.drained(config.shutdown_grace) => {}
        _ = sigterm.recv() => tracing::info!("second signal: not waiting for calls in flight"),
        _ = sigint.recv() => tracing::info!("second signal: not waiting for calls in flight"),
    }
    server.stop().await;
    0
}

/// Resolves once no host has had `/rpc` open for `limit` (checked every
/// second); never without a limit.
async fn no_host_for(server: &Server, limit: Option<Duration>) -> Duration {
    let Some(limit) = limit else {
        return std::future::pending().await;
    };
    let check = Duration::from_secs(1).min(limit);
    let mut idle_since = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(check).await;
        if server.hosts() > 0 {
            idle_since = tokio::time::Instant::now();
        } else if idle_since.elapsed() >= limit {
            return limit;
        }
    }
}
