//! The keepers: a few threads that start, watch and reap local server
//! processes.
//!
//! Every local server is started from one of these long-lived threads,
//! because the kernel's parent-death signal (which makes a server shut down
//! when the host dies, even by SIGKILL or an unhandled SIGTERM) fires when
//! the *thread* that forked it exits. Each runs a small runtime of its own
//! that waits on its children, so exits are noticed and zombies reaped
//! whatever the user's runtime is doing, and `Drop` can hand it a shutdown
//! without blocking. There are several (2 to 4, by the machine's cores) so
//! that starts run side by side: each blocks its thread until the child has
//! exec'd.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use agentix_actors::process;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::runtime::Handle;
use tokio::sync::{oneshot, watch};

/// How many keeper threads start servers side by side: a start blocks its
/// thread until the child has exec'd (its cgroup join included, ~10 ms on a
/// root host with cgroup v1), so one thread made starts serial.
fn keeper_count() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(2, 4)
}

/// The next keeper thread's runtime, round robin.
fn keeper() -> &'static Handle {
    static KEEPERS: OnceLock<Vec<Handle>> = OnceLock::new();
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let keepers = KEEPERS.get_or_init(|| (0..keeper_count()).map(start_keeper).collect());
    &keepers[NEXT.fetch_add(1, Ordering::Relaxed) % keepers.len()]
}

/// Starts keeper thread `n`: a small runtime of its own that runs forever
/// (its exit would fire every child's parent-death signal).
fn start_keeper(n: usize) -> Handle {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(format!("agentix-keeper-{n}"))
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the keeper runtime starts");
            let _ = tx.send(rt.handle().clone());
            rt.block_on(std::future::pending::<()>());
        })
        .expect("the keeper thread starts");
    rx.recv().expect("the keeper thread reports its runtime")
}

/// A child process the keeper started and watches.
#[derive(Debug, Clone)]
pub struct KeptProcess {
    /// Its process id (it leads its own process group).
    pub pid: u32,
    exited: watch::Receiver<Option<String>>,
}

impl KeptProcess {
    /// How it ended ("exit status 1", "killed by signal 9"), once it has.
    pub fn exit_status(&self) -> Option<String> {
        self.exited.borrow().clone()
    }

    /// Waits until it has exited; returns how.
    pub async fn wait(&self) -> String {
        let mut rx = self.exited.clone();
        let status = match rx.wait_for(Option::is_some).await {
            Ok(status) => status.clone().unwrap_or_default(),
            Err(_) => "unknown".to_owned(),
        };
        status
    }

    /// Asks it to stop with SIGTERM, then kills its process group after
    /// `grace`; runs `after` once it is gone. Does not block the caller.
    pub fn terminate(&self, grace: Duration, after: impl FnOnce() + Send + 'static) {
        process::signal_pid(self.pid, libc::SIGTERM);
        let this = self.clone();
        keeper().spawn(async move {
            if tokio::time::timeout(grace, this.wait()).await.is_err() {
                process::signal_group(this.pid, libc::SIGKILL);
                this.wait().await;
            }
            after();
        });
    }
}

/// Starts `cmd` on the keeper thread; it receives SIGTERM if the host dies.
/// `stdin` is written to its standard input, which is then closed (a way
/// to hand it a secret that no environment or command line shows).
///
/// Returns the process and the first line it prints on stdout (its ready
/// line), or `None` if it closed stdout or exited before printing one.
pub async fn start(
    mut cmd: tokio::process::Command,
    stdin: Vec<u8>,
) -> io::Result<(KeptProcess, oneshot::Receiver<String>)> {
    let (started_tx, started_rx) = oneshot::channel();
    keeper().spawn(async move {
        let parent = std::process::id() as libc::pid_t;
        cmd.stdout(std::process::Stdio::piped())
            .stdin(std::process::Stdio::piped())
            .kill_on_drop(false);
        // SAFETY: the closure only makes async-signal-safe syscalls.
        unsafe {
            cmd.pre_exec(move || process::child_setup(parent, libc::SIGTERM));
        }
        let mut child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                let _ = started_tx.send(Err(e));
                return;
            }
        };
        if let Some(mut input) = child.stdin.take() {
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let _ = input.write_all(&stdin).await;
                // Dropping `input` closes the pipe: the child reads to its end.
            });
        }
        let pid = child.id().unwrap_or_default();
        let (exit_tx, exit_rx) = watch::channel(None);
        let (line_tx, line_rx) = oneshot::channel();
        let _ = started_tx.send(Ok((
            KeptProcess {
                pid,
                exited: exit_rx,
            },
            line_rx,
        )));
        if let Some(stdout) = child.stdout.take() {
            tokio::spawn(async move {
                let mut reader = BufReader::new(stdout);
                let mut line = String::new();
                if reader.read_line(&mut line).await.unwrap_or(0) > 0 {
                    let _ = line_tx.send(line.trim_end().to_owned());
                }
                // Keep draining so that a chatty server never blocks on stdout.
                let mut sink = [0u8; 4096];
                while reader.read(&mut sink).await.unwrap_or(0) > 0 {}
            });
        }
        let status = match child.wait().await {
            Ok(status) => process::describe_exit(status),
            Err(e) => format!("lost track of it: {e}"),
        };
        let _ = exit_tx.send(Some(status));
    });
    started_rx
        .await
        .map_err(|_| io::Error::other("the keeper thread is gone"))?
}
