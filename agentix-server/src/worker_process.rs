//! Starting the worker process with its frame pipes, and keeping the tail of
//! what it prints.
//!
//! The worker gets its frame pipes as fds 3 and 4 and its side pipe (logs)
//! as fd 5. Its stdout and stderr are pipes whose read ends it gets too, as
//! fds 6 and 7: it reads its own output, so its lines and its records keep
//! their order (see `agentix_worker::output_capture`). The server keeps the
//! read ends as well, untouched while the worker lives, and reads what is
//! left in them, line by line, once it has died (or at once, for a worker
//! that says it does not capture): a crashed worker's last words are not
//! lost. The last lines are kept so that "the worker died" errors can say
//! why.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use agentix_wire::log_file::{self, SandboxLogFile};
use agentix_wire::log_record::{LogRecord, TARGET_STDERR, TARGET_STDOUT};
use agentix_wire::process;
use agentix_wire::wire::{
    SideBatch, ENV_WORKER_ID, WORKER_FRAME_IN_FD, WORKER_FRAME_OUT_FD, WORKER_SIDE_OUT_FD,
    WORKER_STDERR_FD, WORKER_STDOUT_FD,
};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::net::unix::pipe;
use tokio::task::JoinHandle;

use crate::config::ENV_TOKEN;
use crate::relays::Relays;

/// Lines of worker output kept for error reports.
const TAIL_LINES: usize = 40;

/// A started worker process.
pub(crate) struct WorkerProcess {
    /// Its process id (also its process group id).
    pub pid: u32,
    /// Frames the worker writes.
    pub frames_in: pipe::Receiver,
    /// Frames for the worker.
    pub frames_out: pipe::Sender,
    /// Side-channel frames (logs) the worker writes.
    pub side_in: pipe::Receiver,
    /// The child, to wait on.
    pub child: tokio::process::Child,
    /// The last lines it printed.
    pub tail: OutputTail,
    /// The read ends of its stdout and stderr, for [`WorkerOutput::drain`].
    pub output: WorkerOutput,
}

/// A worker's stdout and stderr as the server holds them.
pub(crate) struct WorkerOutput {
    stdout: OwnedFd,
    stderr: OwnedFd,
    worker_id: String,
    tail: OutputTail,
    logs: Relays,
}

impl WorkerOutput {
    /// Reads both streams to their end, line by line, into the log file and
    /// the relay; the handle ends when both reached end of file.
    pub(crate) fn drain(self) -> JoinHandle<()> {
        let streams = [(self.stdout, Output::Stdout), (self.stderr, Output::Stderr)];
        let tasks: Vec<_> = streams
            .into_iter()
            .filter_map(|(fd, output)| {
                let stream = pipe::Receiver::from_owned_fd(fd).ok()?;
                Some(drain(
                    stream,
                    output,
                    &self.worker_id,
                    self.tail.clone(),
                    self.logs.clone(),
                ))
            })
            .collect();
        tokio::spawn(async move {
            for task in tasks {
                let _ = task.await;
            }
        })
    }
}

/// A worker program named by a path must be an executable file. Checked
/// before the fork because a failed exec is not reported reliably after
/// it: the child's report of it goes to a descriptor of the standard
/// library's, which may have the number one of the worker's pipes is
/// moved to, and the child then aborts instead ("killed by SIGABRT").
fn check_program(program: &std::ffi::OsStr) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    if !program.as_bytes().contains(&b'/') {
        return Ok(()); // looked up on PATH by the exec itself
    }
    let meta = std::fs::metadata(program)?;
    if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
        Ok(())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "not an executable file",
        ))
    }
}

/// Starts `command` as worker `worker_id`; its output goes to `logs`.
pub(crate) fn spawn(
    command: &[OsString],
    worker_id: &str,
    logs: &Relays,
) -> std::io::Result<WorkerProcess> {
    let (program, args) = command.split_first().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "no worker command given")
    })?;
    check_program(program)?;
    let (to_worker_read, to_worker_write) = process::pipe()?;
    let (from_worker_read, from_worker_write) = process::pipe()?;
    let (side_read, side_write) = process::pipe()?;
    let (stdout_read, stdout_write) = process::pipe()?;
    let (stderr_read, stderr_write) = process::pipe()?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env(ENV_WORKER_ID, worker_id)
        .env_remove(ENV_TOKEN)
        .env(process::ENV_PROCESS_TAG, worker_tag(worker_id))
        .envs(huge_page_tunables())
        .stdin(Stdio::null())
        .stdout(Stdio::from(stdout_write))
        .stderr(Stdio::from(stderr_write))
        .kill_on_drop(true);
    let parent = std::process::id() as libc::pid_t;
    let child_in = to_worker_read.as_raw_fd();
    let child_out = from_worker_write.as_raw_fd();
    let child_side = side_write.as_raw_fd();
    let (child_stdout, child_stderr) = (stdout_read.as_raw_fd(), stderr_read.as_raw_fd());
    // SAFETY: the closure only makes async-signal-safe syscalls.
    unsafe {
        cmd.pre_exec(move || {
            process::child_setup(parent, libc::SIGKILL)?;
            let input = process::move_fd_high(child_in)?;
            let output = process::move_fd_high(child_out)?;
            let side = process::move_fd_high(child_side)?;
            let stdout = process::move_fd_high(child_stdout)?;
            let stderr = process::move_fd_high(child_stderr)?;
            process::install_fd(input, WORKER_FRAME_IN_FD)?;
            process::install_fd(output, WORKER_FRAME_OUT_FD)?;
            process::install_fd(side, WORKER_SIDE_OUT_FD)?;
            process::install_fd(stdout, WORKER_STDOUT_FD)?;
            process::install_fd(stderr, WORKER_STDERR_FD)?;
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    drop((to_worker_read, from_worker_write, side_write));
    let pid = child.id().unwrap_or_default();
    let tail = OutputTail::default();
    let output = WorkerOutput {
        stdout: stdout_read,
        stderr: stderr_read,
        worker_id: worker_id.to_owned(),
        tail: tail.clone(),
        logs: logs.clone(),
    };
    Ok(WorkerProcess {
        pid,
        frames_in: pipe::Receiver::from_owned_fd(from_worker_read)?,
        frames_out: pipe::Sender::from_owned_fd(to_worker_write)?,
        side_in: pipe::Receiver::from_owned_fd(side_read)?,
        child,
        tail,
        output,
    })
}

#[derive(Clone, Copy)]
enum Output {
    Stdout,
    Stderr,
}

/// Most lines relayed as one batch.
const MAX_LINES: usize = 256;

/// Reads `stream` to its end, appending each line (a last line without a
/// newline too; invalid UTF-8 replaced) to the sandbox log file and relaying
/// it as a record.
fn drain(
    stream: impl AsyncRead + Unpin + Send + 'static,
    output: Output,
    worker_id: &str,
    tail: OutputTail,
    logs: Relays,
) -> JoinHandle<()> {
    let worker_id = worker_id.to_owned();
    let (level, target) = match output {
        Output::Stdout => ("INFO", TARGET_STDOUT),
        Output::Stderr => ("WARN", TARGET_STDERR),
    };
    tokio::spawn(async move {
        let mut file = SandboxLogFile::new(log_file::dir_from_env());
        let mut reader = BufReader::with_capacity(64 << 10, stream);
        let mut line = Vec::new();
        let mut batch = Vec::new();
        loop {
            line.clear();
            let done = matches!(reader.read_until(b'\n', &mut line).await, Ok(0) | Err(_));
            if !line.is_empty() {
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end_matches(['\n', '\r']).to_owned();
                tail.push(text.clone());
                let mut record = LogRecord::now(level, target, text);
                record.worker_id.clone_from(&worker_id);
                batch.push(record);
            }
            // Relay what was read once no more is waiting in the buffer.
            let flush = done || reader.buffer().is_empty() || batch.len() >= MAX_LINES;
            if flush && !batch.is_empty() {
                file.append(&batch);
                logs.send_logs(SideBatch::encode(&batch)).await;
                batch.clear();
            }
            if done {
                break;
            }
        }
    })
}

/// The last lines a worker printed, shared between its drain tasks.
#[derive(Clone, Default)]
pub(crate) struct OutputTail(Arc<Mutex<VecDeque<String>>>);

impl OutputTail {
    /// Keeps `line` as the newest, dropping the oldest past the limit.
    pub(crate) fn push(&self, line: String) {
        let mut lines = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if lines.len() == TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    /// The kept lines, oldest first, one per line.
    pub(crate) fn text(&self) -> String {
        let lines = self.0.lock().unwrap_or_else(|p| p.into_inner());
        lines
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The allocator tunables the worker starts with: huge pages for its large
/// buffers (a 64 MiB argument or result), unless the sandbox's environment
/// sets tunables of its own; marked so the worker takes them out of what
/// sandbox code inherits.
fn huge_page_tunables() -> Vec<(&'static str, &'static str)> {
    tunables_to_add(std::env::var_os(process::ENV_GLIBC_TUNABLES).is_some())
}

/// What [`huge_page_tunables`] adds when the environment has tunables of
/// its own (`sandbox_has_tunables`) or not.
fn tunables_to_add(sandbox_has_tunables: bool) -> Vec<(&'static str, &'static str)> {
    if sandbox_has_tunables {
        return Vec::new();
    }
    vec![
        (process::ENV_GLIBC_TUNABLES, process::HUGE_PAGE_TUNABLES),
        (process::ENV_TUNABLES_ADDED, "1"),
    ]
}

/// The process tag of worker `worker_id` (see
/// [`agentix_wire::process::ENV_PROCESS_TAG`]).
pub(crate) fn worker_tag(worker_id: &str) -> String {
    format!("w{worker_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worker_gets_huge_page_tunables_unless_the_sandbox_sets_its_own() {
        assert_eq!(
            tunables_to_add(false),
            vec![
                ("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1"),
                ("AGENTIX_TUNABLES_ADDED", "1"),
            ]
        );
        assert!(tunables_to_add(true).is_empty());
    }
}
