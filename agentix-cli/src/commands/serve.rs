//! `agentix serve`: a local sandbox started by hand, for trying a bundle
//! with `agentix call`, `exec` and `logs`. Its id goes to stdout (one
//! line, for scripts); it is deleted on Ctrl-C or SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;

use agentix::{Isolation, LocalProvider, Provider, SandboxConfig};

use super::known_sandboxes::MarkerArgs;

/// What `agentix serve` takes.
#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// The bundle binary (default: this command itself, a sandbox with the
    /// bash plugin).
    bundle: Option<PathBuf>,
    /// A plain process tree, without the isolated tier's namespaces.
    #[arg(long)]
    plain: bool,
    /// A variable for the sandbox's processes, `NAME=VALUE` (repeatable);
    /// `RUST_LOG=debug` makes its log say more.
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = name_and_value)]
    env: Vec<(String, String)>,
    #[command(flatten)]
    markers: MarkerArgs,
}

pub(crate) async fn run(args: ServeArgs) -> Result<ExitCode, String> {
    let bundle = match args.bundle {
        Some(bundle) => bundle,
        None => std::env::current_exe()
            .map_err(|e| format!("cannot find this command's binary: {e}"))?,
    };
    let mut config = SandboxConfig::new(bundle);
    if args.plain {
        config = config.isolation(Isolation::None);
    }
    for (name, value) in args.env {
        config = config.env(name, value);
    }
    let provider = LocalProvider::new().marker_dir(args.markers.dir().path());
    let sandbox = provider.session(config).await.map_err(|e| e.to_string())?;
    // Said once its worker takes calls, not only once its server listens.
    let deadline = tokio::time::Instant::now() + READY_WAIT;
    loop {
        let status = sandbox.health().await.map(|h| h["status"].clone());
        match status {
            Ok(status) if status == "ok" => break,
            Ok(status) if status != "starting" => {
                return Err(format!("sandbox {} is {status}", sandbox.id()));
            }
            _ if tokio::time::Instant::now() >= deadline => {
                return Err(format!(
                    "sandbox {}'s worker is not ready after {READY_WAIT:?}",
                    sandbox.id()
                ));
            }
            _ => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
        }
    }
    println!("{}", sandbox.id());
    eprintln!(
        "agentix serve: sandbox {} listens on {} (Ctrl-C deletes it)",
        sandbox.id(),
        sandbox.addr()
    );
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot watch for SIGTERM: {e}"))?;
    let ended = sandbox.ended();
    let code = tokio::select! {
        _ = tokio::signal::ctrl_c() => ExitCode::SUCCESS,
        _ = terminate.recv() => ExitCode::SUCCESS,
        error = async move { match ended { Some(ended) => ended.await, None => std::future::pending().await } } => {
            eprintln!("agentix serve: the sandbox ended: {error}");
            ExitCode::FAILURE
        }
    };
    sandbox.delete().await;
    Ok(code)
}

/// How long a served sandbox's worker may take to be ready.
const READY_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Splits `NAME=VALUE`.
fn name_and_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!("`{text}` is not NAME=VALUE")),
    }
}
