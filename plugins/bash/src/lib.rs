//! The bash plugin: run shell commands inside the sandbox.
//!
//! Link it into the bundle with `agentix::link_plugins!(agentix_bash)` in the
//! bundle's `main`, and call its remote functions from the host like any
//! other:
//!
//! ```no_run
//! use agentix::StreamExt;
//! use agentix_bash::{BashEvent, BashOptions};
//! # async fn demo(sandbox: &agentix::Sandbox) -> Result<(), Box<dyn std::error::Error>> {
//!
//! let out = sandbox.remote(agentix_bash::run, ("ls -l".into(), BashOptions::new())).await?;
//! println!("{}", out.stdout_lossy());
//!
//! let mut events = sandbox.stream(agentix_bash::run_stream, ("make".into(), BashOptions::new())).await?;
//! while let Some(event) = events.next().await {
//!     match event? {
//!         BashEvent::Stdout(chunk) | BashEvent::Stderr(chunk) => print!("{}", String::from_utf8_lossy(&chunk)),
//!         BashEvent::Exit(exit) => println!("exit {:?}", exit.code),
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! Each command runs with `bash -c` in a process group of its own, with the
//! runtime's own `AGENTIX_*` variables removed from its environment and a
//! process tag of its own (`AGENTIX_PROCESS_TAG`) that everything it starts
//! inherits. A timeout, a cancelled call or a dropped stream kills the
//! group and every process under the tag, `setsid`ed or not. The crate is
//! nothing but `#[remote]` functions and the types they exchange, which
//! makes it the model of a plugin.
//!
//! Layout: `running` drives one command, `warm_shell` keeps shells started
//! ahead, `command_env` is the environment both start shells with and
//! `shell_program` the shell they start, `options` / `outcome` / `error`
//! are the types callers see.

mod command_env;
mod error;
mod options;
mod outcome;
mod running;
mod shell_program;
mod warm_shell;

use std::time::Instant;

pub use error::{BashError, BashErrorKind};
pub use options::{BashOptions, DEFAULT_OUTPUT_CAP};
pub use outcome::{BashEvent, BashExit, BashResult};

use running::{Output, Running};

agentix::plugin_crate!();

/// Runs `command` to the end and returns its exit and its output (each
/// stream kept up to the output cap, the rest drained and counted).
#[agentix::remote]
pub async fn run(command: String, opts: BashOptions) -> Result<BashResult, BashError> {
    let started = Instant::now();
    let cap = opts.output_cap.unwrap_or(DEFAULT_OUTPUT_CAP);
    let mut running = Running::start(&command, opts).await?;
    let mut stdout = Captured::new(cap);
    let mut stderr = Captured::new(cap);
    loop {
        match running.next().await {
            Some(Output::Stdout(chunk)) => stdout.push(&chunk),
            Some(Output::Stderr(chunk)) => stderr.push(&chunk),
            Some(Output::Exit(exit)) => {
                return Ok(BashResult {
                    exit_code: exit.code,
                    signal: exit.signal,
                    timed_out: exit.timed_out,
                    stdout_bytes: stdout.total,
                    stderr_bytes: stderr.total,
                    stdout_truncated: stdout.truncated(),
                    stderr_truncated: stderr.truncated(),
                    stdout: stdout.kept,
                    stderr: stderr.kept,
                    duration_ms: started.elapsed().as_millis().try_into().unwrap_or(u64::MAX),
                })
            }
            None => unreachable!("`Running` yields its exit before it ends"),
        }
    }
}

/// Runs `command` and yields its output as it happens, then its exit.
///
/// Chunks come as the command writes them, not line by line; dropping the
/// stream kills the command's process group. The output cap does not apply.
#[agentix::remote]
pub fn run_stream(
    command: String,
    opts: BashOptions,
) -> impl agentix::Stream<Item = Result<BashEvent, BashError>> + Send {
    agentix::stream::unfold(Stream::Start(command, opts), |state| async move {
        let mut running = match state {
            Stream::Start(command, opts) => match Running::start(&command, opts).await {
                Ok(running) => running,
                Err(e) => return Some((Err(e), Stream::Done)),
            },
            Stream::Running(running) => running,
            Stream::Done => return None,
        };
        let event = match running.next().await? {
            Output::Stdout(chunk) => BashEvent::Stdout(chunk),
            Output::Stderr(chunk) => BashEvent::Stderr(chunk),
            Output::Exit(exit) => BashEvent::Exit(exit),
        };
        Some((Ok(event), Stream::Running(running)))
    })
}

/// Where a `run_stream` is: not started yet, running, or failed to start.
#[allow(clippy::large_enum_variant)] // one per stream, moved once per event
enum Stream {
    Start(String, BashOptions),
    Running(Running),
    Done,
}

/// One output stream as `run` keeps it: the first `cap` bytes and a count.
struct Captured {
    kept: Vec<u8>,
    cap: u64,
    total: u64,
}

impl Captured {
    fn new(cap: u64) -> Self {
        Captured {
            kept: Vec::new(),
            cap,
            total: 0,
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        let room = self.cap.saturating_sub(self.kept.len() as u64);
        let take = chunk.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        self.kept.extend_from_slice(&chunk[..take]);
        self.total += chunk.len() as u64;
    }

    fn truncated(&self) -> bool {
        self.total > self.kept.len() as u64
    }
}
