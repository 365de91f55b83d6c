//! `agentix`: the command line. `agentix build` makes a self-contained
//! bundle from a cargo package; `ps`, `logs`, `exec`, `call` and `reap` let
//! an operator see and act on the sandboxes of this machine; `serve` starts
//! one by hand. `agentix --help` and `agentix <command> --help` say
//! everything.
//!
//! The binary is a bundle too (it links the bash plugin): a provider
//! starts it as `serve --host …`, `serve --unix …`, `worker` or `isolate`,
//! which [`bundle_role`] tells from the operator's `agentix serve`.

mod commands;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use commands::{build, call, exec, logs, pause, ps, reap, serve};

/// Agentix's command line.
#[derive(Parser)]
#[command(name = "agentix", version, about = "Agentix's command line")]
struct Cli {
    #[command(subcommand)]
    command: Commands,
}

#[derive(Subcommand)]
enum Commands {
    /// Builds a cargo package's bundle binary in release and assembles a
    /// self-contained bundle directory from it.
    ///
    /// The bundle holds the binary and the system tools its dependencies
    /// declare (`[package.metadata.agentix] tools = [..]`, as agentix-bash
    /// declares bash) in bin/, every shared library they load with the
    /// dynamic loader in lib/, and bundle.json (name, version, target,
    /// entry, tools, SHA-256 of every file). Programs are rewritten to load
    /// from /agentix/lib, where providers mount the bundle, so the bundle
    /// runs in any base image of this architecture, an empty one included.
    /// Needs `ldd` (glibc's) on this machine.
    Build(build::BuildArgs),
    /// Lists the sandboxes of this machine: every one a host recorded (local
    /// and Docker), and Docker containers of Agentix that no host recorded;
    /// with --snapshots, the snapshots hosts took.
    Ps(ps::PsArgs),
    /// Prints a sandbox's log: what it logged and printed.
    Logs(logs::LogsArgs),
    /// Runs a shell command in a sandbox (through its bash plugin), with
    /// its output live; exits with the command's status.
    Exec(exec::ExecArgs),
    /// Calls a sandbox's function by name with JSON arguments; prints the
    /// JSON result.
    Call(call::CallArgs),
    /// Freezes a sandbox's work (its worker and every process it started);
    /// calls wait until `agentix resume`.
    Pause(pause::PauseArgs),
    /// Thaws what `agentix pause` froze.
    Resume(pause::PauseArgs),
    /// Removes what hosts that died left: their local sandboxes (processes,
    /// directories, cgroups), their containers and their unnamed
    /// snapshots; with --snapshot NAME, that snapshot, whoever took it.
    Reap(reap::ReapArgs),
    /// Starts a local sandbox from a bundle (by default this binary, a
    /// sandbox with the bash plugin), prints its id, and keeps it until
    /// Ctrl-C.
    Serve(serve::ServeArgs),
}

fn main() -> ExitCode {
    if bundle_role() {
        agentix::bundle::dispatch_with(announce_worker);
    }
    let cli = Cli::parse();
    let (name, result) = match cli.command {
        Commands::Build(args) => ("build", build::run(args)),
        Commands::Ps(args) => ("ps", run_async(ps::run(args))),
        Commands::Logs(args) => ("logs", run_async(logs::run(args))),
        Commands::Exec(args) => ("exec", run_async(exec::run(args))),
        Commands::Call(args) => ("call", run_async(call::run(args))),
        Commands::Pause(args) => ("pause", run_async(pause::run(args, true))),
        Commands::Resume(args) => ("resume", run_async(pause::run(args, false))),
        Commands::Reap(args) => ("reap", run_async(reap::run(args))),
        Commands::Serve(args) => ("serve", run_async(serve::run(args))),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("agentix {name}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Whether a provider started this binary as a bundle: `worker`, `isolate`,
/// `launch`, or `serve` followed by one of the server's listening flags (which every
/// provider puts first); the operator's `agentix serve` takes a bundle path
/// or its own flags instead.
fn bundle_role() -> bool {
    let args: Vec<String> = std::env::args().skip(1).take(2).collect();
    match args.first().map(String::as_str) {
        Some(role) if agentix::bundle::is_sandbox_role(role) => true,
        Some("serve") => matches!(
            args.get(1).map(String::as_str),
            Some("--host" | "--port" | "--unix" | "--local-socket")
        ),
        _ => false,
    }
}

/// Run in each worker of a sandbox of this binary: its first log line, so
/// that `agentix logs` shows when each worker started (a restart adds one).
fn announce_worker() {
    eprintln!(
        "agentix shell sandbox: worker {} ready, with the bash plugin",
        std::process::id()
    );
}

/// Runs an async command on a runtime of its own.
fn run_async(
    command: impl std::future::Future<Output = Result<ExitCode, String>>,
) -> Result<ExitCode, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?
        .block_on(command)
}
