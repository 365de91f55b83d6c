//! Helpers the end-to-end tests share: start a sandbox, wait for a condition.

#![allow(dead_code)]

pub(crate) mod fake_server;
pub(crate) mod raw_socket;

use std::time::{Duration, Instant};

use agentix::{LocalProvider, Provider, Sandbox, SandboxConfig};

/// This test binary, run again for the one ignored test `name` alone: a
/// child process that plays a host (to be killed, to run out of
/// descriptors, to meet a kernel that refuses namespaces).
pub(crate) fn child_test(name: &str) -> std::process::Command {
    let mut command = std::process::Command::new(std::env::current_exe().expect("own path"));
    command.args(["--exact", name, "--ignored", "--nocapture"]);
    command
}

/// The bundle binary built from this package.
pub(crate) fn bundle_path() -> &'static str {
    env!("CARGO_BIN_EXE_e2e-bundle")
}

/// The interop venv's python (python-socketio, cbor2, the openai and
/// anthropic SDKs), set up on first use by `tests/interop/setup-venv.sh`.
pub(crate) fn python() -> std::path::PathBuf {
    let tests = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let setup = std::process::Command::new(tests.join("interop/setup-venv.sh"))
        .status()
        .expect("run tests/interop/setup-venv.sh");
    assert!(
        setup.success(),
        "the interop venv could not be created (needs python3 with venv and PyPI access)"
    );
    tests.join("../target/interop-venv/bin/python")
}

/// A fresh local sandbox running the e2e bundle.
pub(crate) async fn sandbox() -> Sandbox {
    sandbox_with(SandboxConfig::new(bundle_path())).await
}

/// `config` as a plain process tree (`Isolation::None`): for tests of
/// process mechanics that follow the sandbox's pids from the host, or that
/// share scratch files with it, which an isolated sandbox has its own of.
pub(crate) fn plain(config: SandboxConfig) -> SandboxConfig {
    config.isolation(agentix::Isolation::None)
}

/// A fresh plain local sandbox running the e2e bundle (see [`plain`]).
pub(crate) async fn plain_sandbox() -> Sandbox {
    sandbox_with(plain(SandboxConfig::new(bundle_path()))).await
}

/// A fresh local sandbox with `config`.
pub(crate) async fn sandbox_with(config: SandboxConfig) -> Sandbox {
    LocalProvider::new()
        .session(config)
        .await
        .expect("the e2e sandbox starts")
}

/// A fresh local sandbox that runs the interop venv's python: a plain
/// process tree as the host's user, since that python lives under the host
/// user's home (pyenv), which an isolated sandbox does not see, and the
/// test plays the agent's peers on the host's 127.0.0.1.
pub(crate) async fn python_sandbox() -> Sandbox {
    sandbox_with(
        SandboxConfig::new(bundle_path())
            .isolation(agentix::Isolation::None)
            .run_as(agentix::RunAs::HostUser),
    )
    .await
}

/// A fresh isolated sandbox on the host's network: for tests that play,
/// from the host, a client of a service the sandbox runs on 127.0.0.1.
pub(crate) async fn host_network_sandbox() -> Sandbox {
    let isolation =
        agentix::Isolation::Namespaces(agentix::NamespaceIsolation::default().host_network());
    sandbox_with(SandboxConfig::new(bundle_path()).isolation(isolation)).await
}

/// The next value on `rx` within 10 s; panics naming `what` if none comes.
pub(crate) async fn next_event<T>(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<T>,
    what: &str,
) -> T {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing came within 10 s"))
        .unwrap_or_else(|| panic!("{what}: the channel closed"))
}

/// Polls `cond` every 10 ms until it holds; panics naming `what` after `limit`.
pub(crate) async fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > limit {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The worker pid `/health` reports, once the worker is ready.
pub(crate) async fn worker_pid_from_health(sandbox: &Sandbox) -> u32 {
    let start = Instant::now();
    loop {
        let health = sandbox.health().await.expect("/health answers");
        if health["worker"]["state"] == "ready" {
            return health["worker"]["pid"].as_u64().expect("a pid") as u32;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "worker never ready: {health}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls the async `cond` every 10 ms until it holds; panics naming `what`
/// after 10 s.
pub(crate) async fn wait_until_async<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let limit = Duration::from_secs(10);
    let start = Instant::now();
    while !cond().await {
        if start.elapsed() > limit {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Where the launcher of the local sandbox with directory `dir` stages its
/// root: on the memory filesystem, named after the directory (every
/// machine of this project's kind has a writable tmpfs at /dev/shm).
pub(crate) fn staging_root(dir: &std::path::Path) -> std::path::PathBuf {
    let name = dir.file_name().unwrap().to_string_lossy();
    std::path::Path::new("/dev/shm").join(format!("{name}-root"))
}

/// A fresh empty directory for files a test's remote calls write.
pub(crate) fn scratch_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "agentix-e2e-{name}-{}-{}",
        std::process::id(),
        agentix_e2e::now_nanos()
    ));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    // Sandboxes of a root host run as uids of their own: they share the
    // directory as /tmp is shared.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777))
        .expect("scratch dir mode");
    dir
}

/// A server started by hand (not by a provider), as a remote machine's
/// would be: the child process, its address and token.
pub(crate) struct HandStartedServer {
    pub(crate) child: std::process::Child,
    pub(crate) addr: String,
    pub(crate) token: String,
}

impl HandStartedServer {
    /// Starts the e2e bundle as `serve` with `extra` flags; waits until it listens.
    pub(crate) fn start(extra: &[&str]) -> Self {
        use std::io::BufRead;
        let token = format!("hand-{}", agentix_e2e::now_nanos());
        let mut child = std::process::Command::new(bundle_path())
            .arg("serve")
            .args(extra)
            .env("AGENTIX_TOKEN", &token)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the bundle starts as a server");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the ready line");
        let ready: serde_json::Value = serde_json::from_str(&line).expect("a JSON ready line");
        let addr = ready["addr"].as_str().expect("an address").to_owned();
        HandStartedServer { child, addr, token }
    }
}

impl Drop for HandStartedServer {
    fn drop(&mut self) {
        // SIGKILL works on a stopped process too; the worker follows it.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The resident memory of process `pid`, in KiB (0 once it is gone).
pub(crate) fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Stops `pid` with SIGSTOP and returns once every thread of it is stopped.
///
/// `kill` returns before the stop takes: the kernel wakes one thread to
/// begin the group stop, and until it runs another thread can still serve
/// a request that arrives meanwhile.
pub(crate) async fn freeze(pid: u32) {
    agentix_wire::process::signal_pid(pid, libc::SIGSTOP);
    let all_stopped = || {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return false;
        };
        tasks.flatten().all(|task| {
            std::fs::read_to_string(task.path().join("stat"))
                .ok()
                .and_then(|stat| {
                    // The state follows the parenthesised name, which may hold spaces.
                    let state = stat.rsplit_once(") ")?.1.chars().next()?;
                    Some(state == 'T' || state == 't')
                })
                .unwrap_or(true)
        })
    };
    wait_until("the process to stop", Duration::from_secs(10), all_stopped).await;
}

/// How many sockets process `pid` holds open, read from `/proc/PID/fd`.
pub(crate) fn open_sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.flatten()
                .filter(|fd| {
                    std::fs::read_link(fd.path())
                        .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"))
                })
                .count()
        })
        .unwrap_or(0)
}
