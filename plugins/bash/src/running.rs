//! A started command: its process group, its pipes, and the order in which
//! its output and its exit come out.
//!
//! Both `run` and `run_stream` drive a [`Running`]. It reads stdout and
//! stderr as chunks while they come, so the child never blocks on a full
//! pipe, and it owns the process group: dropping it before the command ended
//! (a cancelled call, a dropped stream) kills the whole group.

use std::os::unix::process::ExitStatusExt as _;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, ChildStderr, ChildStdout, Command};
use tokio::time::Instant;

use crate::error::{BashError, BashErrorKind};
use crate::options::BashOptions;
use crate::outcome::BashExit;
use crate::shell_program::default_shell;

/// Bytes read from a pipe at a time: one output chunk at most.
const CHUNK: usize = 64 << 10;

/// How long output is still collected after the shell exited.
///
/// A background job (`server &`) keeps the pipes open after the shell is
/// gone; the command counts as finished once the shell exits, and whatever
/// that job writes later is not waited for.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(100);

/// What [`Running::next`] yields.
#[derive(Debug)]
pub(crate) enum Output {
    /// A chunk of stdout.
    Stdout(Vec<u8>),
    /// A chunk of stderr.
    Stderr(Vec<u8>),
    /// The command ended; nothing follows.
    Exit(BashExit),
}

/// A command that has been started and not yet fully reported.
pub(crate) struct Running {
    child: Child,
    pgid: u32,
    /// The process tag every process of this command inherits.
    tag: String,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
    deadline: Option<Instant>,
    timed_out: bool,
    exited: Option<ExitStatus>,
    drain_until: Option<Instant>,
    finished: bool,
    stdout_buf: Vec<u8>,
    stderr_buf: Vec<u8>,
    /// Whether this command could have used a warm shell, so the pool is
    /// topped up when it ends.
    refills_pool: bool,
}

impl Running {
    /// Starts `command` with `opts` in a process group of its own.
    pub(crate) async fn start(command: &str, mut opts: BashOptions) -> Result<Self, BashError> {
        if command.contains('\0') {
            return Err(BashError::options("the command contains a NUL byte"));
        }
        if let Some(cwd) = &opts.cwd {
            check_cwd(cwd)?;
        }
        for (key, value) in &opts.env {
            if key.is_empty() || key.contains(['=', '\0']) || value.contains('\0') {
                return Err(BashError::options(format!(
                    "`{key}` is not a valid environment variable name (or its value holds a NUL byte)"
                )));
            }
        }
        let shell = opts
            .shell
            .clone()
            .unwrap_or_else(|| default_shell().to_owned());
        let (mut child, tag) = match crate::warm_shell::hand_over(&shell, command, &opts).await {
            Some(warm) => warm,
            None => cold_start(&shell, command, &opts)?,
        };
        let pgid = child.id().unwrap_or(0);
        // Without bytes to feed, stdin closes at once (a warm shell has it
        // piped): the command reads end-of-file, as from /dev/null.
        let stdin = child.stdin.take();
        if let (Some(bytes), Some(mut stdin)) = (opts.stdin.take(), stdin) {
            // A command that does not read its stdin closes the pipe early;
            // the write error that causes is expected, not a failure.
            tokio::spawn(async move {
                let _ = stdin.write_all(&bytes).await;
            });
        }
        Ok(Running {
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            child,
            pgid,
            tag,
            deadline: opts
                .timeout_ms
                .map(|ms| Instant::now() + Duration::from_millis(ms)),
            timed_out: false,
            exited: None,
            drain_until: None,
            finished: false,
            stdout_buf: vec![0; CHUNK],
            stderr_buf: vec![0; CHUNK],
            refills_pool: crate::warm_shell::serves(&shell, &opts),
        })
    }

    /// The next chunk of output, or the exit once both pipes are done; `None`
    /// after the exit.
    pub(crate) async fn next(&mut self) -> Option<Output> {
        loop {
            if self.finished {
                return None;
            }
            if let Some(status) = self.exited {
                if self.stdout.is_none() && self.stderr.is_none() {
                    self.finished = true;
                    return Some(Output::Exit(BashExit {
                        code: status.code(),
                        signal: status.signal(),
                        timed_out: self.timed_out,
                    }));
                }
            }
            let far = Instant::now() + Duration::from_secs(86_400 * 365);
            let deadline = self
                .deadline
                .filter(|_| self.exited.is_none() && !self.timed_out);
            tokio::select! {
                read = read_some(&mut self.stdout, &mut self.stdout_buf) => {
                    if let Some(chunk) = read {
                        return Some(Output::Stdout(chunk));
                    }
                }
                read = read_some(&mut self.stderr, &mut self.stderr_buf) => {
                    if let Some(chunk) = read {
                        return Some(Output::Stderr(chunk));
                    }
                }
                status = self.child.wait(), if self.exited.is_none() => {
                    // `wait` only fails if the child was already reaped,
                    // which nothing else here does.
                    let status = status.unwrap_or_else(|_| ExitStatus::from_raw(0x7f00));
                    self.exited = Some(status);
                    self.drain_until = Some(Instant::now() + DRAIN_AFTER_EXIT);
                }
                () = tokio::time::sleep_until(deadline.unwrap_or(far)), if deadline.is_some() => {
                    agentix::process::signal_group(self.pgid, libc::SIGKILL);
                    kill_tagged_in_background(&self.tag);
                    self.timed_out = true;
                }
                () = tokio::time::sleep_until(self.drain_until.unwrap_or(far)),
                    if self.drain_until.is_some() =>
                {
                    self.stdout = None;
                    self.stderr = None;
                }
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.refills_pool {
            crate::warm_shell::top_up();
        }
        // Once the shell is reaped its pid may be reused, so only a group
        // whose leader is still ours is killed.
        if self.exited.is_none() && self.pgid != 0 {
            agentix::process::signal_group(self.pgid, libc::SIGKILL);
        }
        // Given up before its end (cancelled, dropped): everything it
        // started goes, setsid'd or not. A command that ran to its end
        // keeps its background jobs (`server &`) until the sandbox goes.
        if !self.finished {
            kill_tagged_in_background(&self.tag);
        }
    }
}

/// Kills every process under `tag`, off the async threads (it walks /proc).
fn kill_tagged_in_background(tag: &str) {
    let tag = tag.to_owned();
    let kill = move || {
        agentix::process::kill_tagged(&tag);
    };
    match tokio::runtime::Handle::try_current() {
        // Unwinding already: a runtime that cannot start a thread panics,
        // and a second panic aborts the worker.
        Ok(_) if std::thread::panicking() => kill(),
        Ok(rt) => {
            rt.spawn_blocking(kill);
        }
        Err(_) => kill(),
    }
}

/// Starts `shell -c command` as `opts` ask, in a process group of its own
/// that dies with the worker.
fn cold_start(
    shell: &str,
    command: &str,
    opts: &BashOptions,
) -> Result<(Child, String), BashError> {
    let mut cmd = Command::new(shell);
    cmd.arg("-c").arg(command);
    let tag = crate::command_env::prepare(&mut cmd);
    cmd.envs(&opts.env);
    if let Some(cwd) = &opts.cwd {
        cmd.current_dir(cwd);
    }
    cmd.stdin(if opts.stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: `child_setup` makes only async-signal-safe calls.
    unsafe {
        cmd.pre_exec(move || agentix::process::child_setup(parent, libc::SIGKILL));
    }
    let child = cmd.spawn().map_err(|e| {
        let kind = if opts.cwd.is_some() && e.kind() == std::io::ErrorKind::PermissionDenied {
            BashErrorKind::WorkingDirectory
        } else {
            BashErrorKind::Shell
        };
        BashError::os(kind, "cannot start the shell", shell, &e)
    })?;
    Ok((child, tag))
}

/// Reads one chunk from `pipe`; `None` (and the pipe closed) at its end. A
/// closed pipe never finishes, so `select!` waits on the others.
async fn read_some<R: AsyncRead + Unpin>(pipe: &mut Option<R>, buf: &mut [u8]) -> Option<Vec<u8>> {
    let Some(reader) = pipe.as_mut() else {
        return std::future::pending().await;
    };
    match reader.read(buf).await {
        Ok(n) if n > 0 => Some(buf[..n].to_vec()),
        _ => {
            *pipe = None;
            None
        }
    }
}

fn check_cwd(cwd: &str) -> Result<(), BashError> {
    let what = "the working directory";
    match std::fs::metadata(cwd) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(BashError {
            kind: BashErrorKind::WorkingDirectory,
            message: format!("{what} `{cwd}` is not a directory"),
            path: Some(cwd.to_owned()),
            os_kind: Some("NotADirectory".to_owned()),
        }),
        Err(e) => Err(BashError::os(
            BashErrorKind::WorkingDirectory,
            what,
            cwd,
            &e,
        )),
    }
}
