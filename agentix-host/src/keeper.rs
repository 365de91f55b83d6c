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
//!
//! A [`Keepers`] value owns its threads: a `LocalProvider` holds one, and
//! so does every process started on it, until it has exited. The threads
//! stop once nothing holds them, which is after the last of their children
//! is gone (their exit cannot signal a child that still runs).

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use agentix_wire::process;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::runtime::Handle;
use tokio::sync::{oneshot, watch};

/// How many keeper threads start servers side by side: a start blocks its
/// thread until the child has exec'd, so one thread made starts serial.
fn keeper_count() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(2, 4)
}

/// A few keeper threads, started on first use; clones share them, and the
/// threads stop when the last clone (a process started on them included)
/// is dropped.
#[derive(Clone, Default)]
pub(crate) struct Keepers {
    threads: Arc<OnceLock<KeeperThreads>>,
}

impl std::fmt::Debug for Keepers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keepers")
            .field("started", &self.threads.get().is_some())
            .finish()
    }
}

/// The threads' runtimes, and what stops them (dropped with the last clone).
struct KeeperThreads {
    handles: Vec<Handle>,
    next: AtomicUsize,
    _stop: Vec<oneshot::Sender<()>>,
}

impl Keepers {
    /// The next keeper thread's runtime, round robin.
    fn next(&self) -> io::Result<Handle> {
        if self.threads.get().is_none() {
            let started = (0..keeper_count())
                .map(start_keeper)
                .collect::<io::Result<Vec<_>>>()?;
            let (handles, stop) = started.into_iter().unzip();
            // Another caller may have won the race: its threads are used,
            // these stop as `stop` is dropped.
            let _ = self.threads.set(KeeperThreads {
                handles,
                next: AtomicUsize::new(0),
                _stop: stop,
            });
        }
        let threads = self.threads.get().expect("set above");
        let n = threads.next.fetch_add(1, Ordering::Relaxed);
        Ok(threads.handles[n % threads.handles.len()].clone())
    }
}

/// Starts keeper thread `n`: a small runtime of its own that runs until
/// its stop sender is dropped.
fn start_keeper(n: usize) -> io::Result<(Handle, oneshot::Sender<()>)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let handle = rt.handle().clone();
    let (stop, stopped) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name(format!("agentix-keeper-{n}"))
        .spawn(move || {
            let _ = rt.block_on(stopped);
        })?;
    Ok((handle, stop))
}

/// A child process the keeper started and watches.
#[derive(Clone)]
pub(crate) struct KeptProcess {
    /// Its process id (it leads its own process group).
    pub pid: u32,
    exited: watch::Receiver<Option<String>>,
    /// The keeper thread it was started on (its parent-death signal is
    /// that thread's).
    home: Handle,
    /// Keeps the threads running while a handle can still ask `home` to
    /// terminate it and clean up after.
    _keepers: Keepers,
}

impl std::fmt::Debug for KeptProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptProcess")
            .field("pid", &self.pid)
            .field("exited", &*self.exited.borrow())
            .finish_non_exhaustive()
    }
}

impl KeptProcess {
    /// How it ended ("exit status 1", "killed by signal 9"), once it has.
    pub(crate) fn exit_status(&self) -> Option<String> {
        self.exited.borrow().clone()
    }

    /// Waits until it has exited; returns how.
    pub(crate) async fn wait(&self) -> String {
        let mut rx = self.exited.clone();
        let status = match rx.wait_for(Option::is_some).await {
            Ok(status) => status.clone().unwrap_or_default(),
            Err(_) => "unknown".to_owned(),
        };
        status
    }

    /// Asks it to stop with SIGTERM, then kills its process group after
    /// `grace`; runs `after` once it is gone. Does not block the caller.
    pub(crate) fn terminate(&self, grace: Duration, after: impl FnOnce() + Send + 'static) {
        process::signal_pid(self.pid, libc::SIGTERM);
        let this = self.clone();
        self.home.spawn(async move {
            if tokio::time::timeout(grace, this.wait()).await.is_err() {
                process::signal_group(this.pid, libc::SIGKILL);
                this.wait().await;
            }
            after();
        });
    }
}

/// Starts `cmd` on one of `keepers`' threads. `cmd` is a bundle's
/// `launch` command line (`agentix_wire::launch_spec`), whose first step
/// after the exec ties the process to the keeper thread that spawned it:
/// it receives SIGTERM if the host dies.
/// `stdin` is written to its standard input, which is then closed (a way
/// to hand it a secret that no environment or command line shows).
///
/// Returns the process and the first line it prints on stdout (its ready
/// line), or `None` if it closed stdout or exited before printing one.
pub(crate) async fn start(
    keepers: &Keepers,
    mut cmd: tokio::process::Command,
    stdin: Vec<u8>,
) -> io::Result<(KeptProcess, oneshot::Receiver<String>)> {
    let (started_tx, started_rx) = oneshot::channel();
    let home = keepers.next()?;
    // Held until the child has exited: the threads outlive their children.
    let held = keepers.clone();
    let task_home = home.clone();
    home.spawn(async move {
        cmd.stdout(std::process::Stdio::piped())
            .stdin(std::process::Stdio::piped())
            .kill_on_drop(false)
            // Set by the spawn itself: with no code to run between fork and
            // exec, the standard library starts the child with
            // `posix_spawn`, which shares the host's memory until the exec
            // instead of copying its page tables (and making every page the
            // host writes afterwards a private copy): 1.5 ms against 55 ms
            // per start from a host with 1 GiB touched.
            .process_group(0);
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
                home: task_home,
                _keepers: held.clone(),
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
        drop(held);
    });
    started_rx
        .await
        .map_err(|_| io::Error::other("the keeper thread is gone"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process's keeper threads, by name (the only test here that
    /// starts any).
    fn keeper_threads() -> usize {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .filter(|name| name.starts_with("agentix-keeper"))
            .count()
    }

    #[tokio::test]
    async fn the_threads_outlive_their_last_child_and_then_stop() {
        assert_eq!(keeper_threads(), 0, "started on first use only");
        let keepers = Keepers::default();
        let mut cmd = tokio::process::Command::new("sh");
        cmd.args(["-c", "echo ready; sleep 0.5"]);
        let (child, ready) = start(&keepers, cmd, Vec::new()).await.unwrap();
        assert_eq!(ready.await.unwrap(), "ready");
        let threads = keeper_threads();
        assert!(threads >= 2, "{threads} keeper threads");
        // The provider and the handle go; the child runs on, and so must
        // its thread, whose exit would signal it.
        let pid = child.pid;
        drop((keepers, child));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(keeper_threads(), threads);
        assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
        // Once it has exited, nothing holds them.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while keeper_threads() > 0 {
            assert!(std::time::Instant::now() < deadline, "the keepers stay");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }
}
