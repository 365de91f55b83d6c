//! [`LocalProvider`]: the embedded default provider.
//!
//! Every server's first process is the bundle run as `launch`, whose first
//! steps (see `agentix_wire::launch_spec`) join the sandbox's cgroup, drop
//! to its uid and tie it to the host's life, then run the role below.
//!
//! By default each sandbox is isolated (see [`crate::isolation`]): the
//! bundle starts as `isolate`, which builds the sandbox's namespaces and
//! runs `serve` inside them, joined to a cgroup of its own on a root host;
//! the host then reaches the server only by its Unix socket, and gives
//! third-party clients a host port leading to it. `Isolation::None` runs
//! `serve` directly, as below.
//!
//! Each sandbox is the bundle run as `serve` (which starts itself again as
//! `worker`) in a private directory under the system temp dir, bound to
//! 127.0.0.1 on a free port, with a fresh random token. The server also
//! listens on a Unix socket in that directory, which the host's own
//! connections use: no TCP stack, no packet filter on loopback, a quarter
//! to a third less CPU per small call; the port stays for third-party
//! clients. Deleting or dropping the sandbox stops both processes and
//! removes the directory; if the host dies without doing so, the server
//! gets SIGTERM from the kernel and does it itself (see [`crate::keeper`]).
//! Each sandbox also has a marker (see [`crate::sandbox_marker`]) naming
//! its host, from which [`Provider::reap`] removes what a dead host left (a
//! cgroup, a directory whose removal failed, a server that outlived it).

use std::io::Read;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use std::sync::Arc;

use agentix_wire::errors::{ErrorKind, RemoteError};
use futures_util::future::BoxFuture;

use agentix_wire::isolation_spec::{IsolationSpec, ISOLATE_ROLE, ISOLATION_REFUSED_EXIT};
use agentix_wire::launch_spec::{LaunchSpec, LAUNCH_ROLE};

/// How long a server whose output closed without a ready line is given to
/// exit, so that its status can say why.
const EXIT_AFTER_SILENCE: std::time::Duration = std::time::Duration::from_secs(2);
use agentix_wire::process;

use crate::cgroup_limits::SandboxCgroup;
use crate::config::SandboxConfig;
use crate::keeper::{self, KeptProcess};
use crate::owner::{Liveness, OwnerId};
use crate::port_forward::PortForward;
use crate::provider::Provider;
use crate::provider_error::ProviderError;
use crate::sandbox::Sandbox;
use crate::sandbox_marker::{self, MarkerDir, SandboxMarker};
use crate::sandbox_registry::SandboxRegistry;
use crate::sandbox_resources::SandboxResources;
use crate::sandbox_state::SandboxState;
use crate::secret::random_hex;
use crate::snapshot::{Snapshot, SnapshotSpec, SnapshotStore};

/// How long a stopping server may take before its process group is killed:
/// the server's default shutdown grace plus time to stop the worker.
const STOP_GRACE: Duration = Duration::from_secs(7);

/// The provider's name in markers and the provider registry.
pub(crate) const PROVIDER_NAME: &str = "local";

/// Room for a path in a Unix socket address (`sun_path`, with its NUL).
const MAX_SOCKET_PATH: usize = 108;

/// Runs sandboxes as local child processes.
#[derive(Debug, Clone, Default)]
pub struct LocalProvider {
    base_dir: Option<PathBuf>,
    markers: MarkerDir,
    owner: Arc<OwnerIdText>,
    sandboxes: SandboxRegistry,
    /// The threads its servers are started from.
    keepers: keeper::Keepers,
}

/// This host's [`OwnerId`], as markers record it: read once per provider.
#[derive(Debug)]
struct OwnerIdText(String);

impl Default for OwnerIdText {
    fn default() -> Self {
        OwnerIdText(OwnerId::current().to_string())
    }
}

impl std::fmt::Display for OwnerIdText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl LocalProvider {
    /// A provider keeping sandbox directories under the system temp dir.
    pub fn new() -> Self {
        LocalProvider::default()
    }

    /// A provider keeping sandbox directories under `dir`.
    pub fn with_base_dir(dir: impl Into<PathBuf>) -> Self {
        LocalProvider {
            base_dir: Some(dir.into()),
            ..LocalProvider::default()
        }
    }

    /// Keeps the sandboxes' markers (see [`crate::sandbox_marker`]) in `dir`
    /// instead of the default; [`Provider::reap`] and the `agentix`
    /// command look there.
    pub fn marker_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.markers = MarkerDir::new(dir);
        self
    }

    /// Where this provider keeps its sandboxes' markers.
    pub fn markers(&self) -> &MarkerDir {
        &self.markers
    }
}

impl Provider for LocalProvider {
    fn create(&self, config: SandboxConfig) -> BoxFuture<'_, Result<Sandbox, ProviderError>> {
        Box::pin(async move {
            let sandbox = self.start(config, None).await?;
            self.sandboxes.add(&sandbox);
            Ok(sandbox)
        })
    }

    fn sandboxes(&self) -> &SandboxRegistry {
        &self.sandboxes
    }

    /// A sandbox whose directory starts as a copy of the snapshot's
    /// (reflinked where the filesystem can), owned by its own user.
    fn create_from<'a>(
        &'a self,
        snapshot: &'a Snapshot,
        config: SandboxConfig,
    ) -> BoxFuture<'a, Result<Sandbox, ProviderError>> {
        Box::pin(async move {
            let seed = snapshot.dir_kept_by(PROVIDER_NAME)?.to_owned();
            let sandbox = self.start(config, Some(seed)).await?;
            self.sandboxes.add(&sandbox);
            Ok(sandbox)
        })
    }

    fn find_snapshot(&self, name_or_id: &str) -> Option<Snapshot> {
        let records = crate::snapshot_record::SnapshotRecords::of(&self.markers);
        Snapshot::find(&records, name_or_id, PROVIDER_NAME)
    }

    /// Removes what dead hosts left, by their markers: a server still
    /// running (its process group and cgroup are killed), its directory,
    /// its cgroup, the marker. A live host's sandboxes are never touched;
    /// a marker whose owner cannot be read is left alone.
    fn reap(&self) -> BoxFuture<'_, Result<usize, ProviderError>> {
        Box::pin(async move {
            let markers = self.markers.list().map_err(|e| {
                io_error(format!("cannot read {}", self.markers.path().display()), e)
            })?;
            let dead: Vec<SandboxMarker> = markers
                .into_iter()
                .filter(|m| m.provider == PROVIDER_NAME)
                .filter(|m| m.owner_id().map(|o| o.liveness()) == Some(Liveness::Dead))
                .collect();
            let records = crate::snapshot_record::SnapshotRecords::of(&self.markers);
            let reaped = tokio::task::spawn_blocking(move || records.reap(PROVIDER_NAME)).await;
            if let Ok(Err(e)) = reaped {
                return Err(io_error("cannot read the snapshot records".to_owned(), e));
            }
            if dead.is_empty() {
                return Ok(0);
            }
            // Side by side: each may wait for a killed process to go.
            let removals = dead.into_iter().map(|marker| {
                let markers = self.markers.clone();
                tokio::task::spawn_blocking(move || reap_one(&marker, &markers))
            });
            let reaped = futures_util::future::join_all(removals)
                .await
                .into_iter()
                .filter(|removed| matches!(removed, Ok(true)))
                .count();
            Ok(reaped)
        })
    }
}

/// Removes one dead owner's sandbox; true when nothing of it is left.
fn reap_one(marker: &SandboxMarker, markers: &MarkerDir) -> bool {
    let cgroup = SandboxCgroup::from_dirs(marker.cgroup.clone());
    // Killed until nothing of it runs (a process forking as its cgroup's
    // list is read outruns one round) and its cgroup is gone.
    let deadline = std::time::Instant::now() + REAP_WAIT;
    let cgroup_gone = loop {
        if marker.process_alive() {
            process::signal_group(marker.pid, libc::SIGKILL);
        }
        cgroup.kill_all();
        if !marker.process_alive() && cgroup.try_remove() {
            break true;
        }
        if std::time::Instant::now() >= deadline {
            tracing::warn!(
                sandbox = %marker.id,
                cgroup = ?marker.cgroup,
                "a dead host's sandbox does not end; its marker stays"
            );
            break false;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    if let Some(root) = crate::isolation::staging_root_of(&marker.dir) {
        remove_staging_root(&root, &marker.id);
    }
    let dir_gone = match std::fs::remove_dir_all(&marker.dir) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(error) => {
            tracing::warn!(
                sandbox = %marker.id,
                dir = %marker.dir.display(),
                %error,
                "a dead host's sandbox directory cannot be removed; its marker stays"
            );
            false
        }
    };
    if !dir_gone || !cgroup_gone {
        return false;
    }
    match markers.remove(&marker.id) {
        Ok(()) => true,
        Err(error) => {
            tracing::warn!(sandbox = %marker.id, %error, "cannot remove a reaped sandbox's marker");
            false
        }
    }
}

/// Removes the staging root `root` of the sandbox `id` if it is there (a
/// killed launcher's); one that cannot be removed is said in the log.
fn remove_staging_root(root: &Path, id: &str) {
    match std::fs::remove_dir_all(root) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => tracing::warn!(
            sandbox = %id,
            root = %root.display(),
            %error,
            "a sandbox's staging root cannot be removed"
        ),
    }
}

/// How long a dead host's sandbox is given to go once killed.
const REAP_WAIT: Duration = Duration::from_secs(5);

impl LocalProvider {
    /// Starts a sandbox for `config`, its directory first filled from
    /// `seed` (a snapshot's directory) if given.
    async fn start(
        &self,
        config: SandboxConfig,
        seed: Option<PathBuf>,
    ) -> Result<Sandbox, ProviderError> {
        // The whole wait counts, a start queued behind others included.
        let ready_by = tokio::time::Instant::now() + config.ready_timeout;
        let bundle = &config.bundle;
        match std::fs::metadata(bundle) {
            Ok(m) if m.is_file() => {}
            Ok(_) => return Err(bad_bundle(bundle, "it is not a file")),
            Err(e) => return Err(bad_bundle(bundle, &e.to_string())),
        }
        let id = random_hex(8);
        let token = random_hex(32);
        let base = self.base_dir.clone().unwrap_or_else(std::env::temp_dir);
        let dir = base.join(format!("agentix-{id}"));
        std::fs::DirBuilder::new()
            .recursive(false)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| io_error(format!("cannot create {}", dir.display()), e))?;
        let uid = config.run_as.uid_for(&id);
        let isolation = config.isolation.namespaces().cloned();
        if isolation.is_some() && uid.is_none() && crate::sandbox_user::host_is_root() {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(ProviderError::IsolationRefused {
                reason: "RunAs::HostUser on a root host would run the sandbox as root, \
                         which namespaces do not contain; use RunAs::Default (an \
                         unprivileged uid of the sandbox's own) or Isolation::None"
                    .into(),
            });
        }
        if let Some(uid) = uid {
            // The sandbox's user owns its directory, and only it (and root).
            if let Err(e) = std::os::unix::fs::chown(&dir, Some(uid), Some(uid)) {
                let _ = std::fs::remove_dir_all(&dir);
                let what = format!("cannot give {} to uid {uid}", dir.display());
                return Err(io_error(what, e));
            }
        }
        if let Some(seed) = seed {
            // Before the server: nothing in the sandbox sees a half copy.
            let (from, to) = (seed.clone(), dir.clone());
            let copied = tokio::task::spawn_blocking(move || {
                crate::tree_copy::copy_tree(&from, &to, &[], uid)
            })
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
            if let Err(e) = copied {
                let _ = std::fs::remove_dir_all(&dir);
                let what = format!("cannot fill {} from {}", dir.display(), seed.display());
                return Err(io_error(what, e));
            }
        }
        let log_path = dir.join("server.log");
        let log = std::fs::File::create(&log_path)
            .map_err(|e| io_error(format!("cannot create {}", log_path.display()), e))?;
        // One limit for both ends: bytes travel as they are.
        let wire_limit = config.max_message_bytes;
        let local_socket = dir.join("host.sock");
        // A path too long for a socket address (a deep base dir) leaves the
        // host on the TCP port.
        let local_socket =
            (local_socket.as_os_str().len() < MAX_SOCKET_PATH).then_some(local_socket);
        if isolation.is_some() && local_socket.is_none() {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(ProviderError::IsolationRefused {
                reason: format!(
                    "the host reaches an isolated sandbox by a Unix socket in its \
                     directory, and {} is too long a path for one; choose a shorter \
                     base directory (LocalProvider::with_base_dir)",
                    dir.display()
                ),
            });
        }
        // A root host limits the isolated sandbox as a whole by a cgroup;
        // otherwise rlimits in its own user namespace do what they can.
        let cgroup = match isolation {
            Some(_) => SandboxCgroup::create(&format!("agentix-{id}"), &config.limits),
            None => None,
        };
        let cgroup_files = match cgroup.as_ref().map(SandboxCgroup::join_files) {
            Some(Err(e)) => {
                cgroup.as_ref().map(SandboxCgroup::remove_soon);
                let _ = std::fs::remove_dir_all(&dir);
                return Err(io_error(
                    format!("cannot open the cgroup of sandbox {id}"),
                    e,
                ));
            }
            Some(Ok(files)) => files,
            None => Vec::new(),
        };

        // Run by path with the host's rights: the drop to the sandbox's uid
        // is the first step after the exec.
        let mut cmd = tokio::process::Command::new(bundle);
        // What a forked child did before its exec, the server's first
        // process does right after it: the start is then a `posix_spawn`,
        // which copies nothing of the host (see `keeper`).
        let launch = LaunchSpec {
            cgroup_files,
            user: uid,
            parent: std::process::id(),
            death_signal: libc::SIGTERM,
        };
        cmd.arg(LAUNCH_ROLE).args(launch.to_args()).arg("--");
        let staging_root = isolation
            .as_ref()
            .and_then(|_| crate::isolation::staging_root_of(&dir));
        if let Some(settings) = &isolation {
            let limits = &config.limits;
            let spec = IsolationSpec {
                writable: std::iter::once(dir.clone())
                    .chain(settings.writable.iter().cloned())
                    .collect(),
                read_only: settings.read_only.clone(),
                hostname: format!("agentix-{id}"),
                host_network: settings.host_network,
                tmp_bytes: settings.tmp_bytes,
                processes: limits.processes.filter(|_| cgroup.is_none()),
                memory_bytes: limits.memory_bytes.filter(|_| cgroup.is_none()),
                remove_after: vec![dir.clone()],
                staging_root: staging_root.clone(),
            };
            cmd.arg(ISOLATE_ROLE).args(spec.to_args()).arg("--");
        }
        cmd.arg("serve")
            .args(["--host", "127.0.0.1", "--port", "0"])
            .arg("--max-message-bytes")
            .arg(wire_limit.to_string())
            // An isolated server cannot remove the directory it is mounted
            // on; its launcher does, once the sandbox has exited.
            .args(
                isolation
                    .is_none()
                    .then_some([std::ffi::OsStr::new("--cleanup-dir"), dir.as_os_str()])
                    .into_iter()
                    .flatten(),
            )
            .args(
                local_socket
                    .iter()
                    .flat_map(|path| [std::ffi::OsStr::new("--local-socket"), path.as_os_str()]),
            )
            .args(&config.server_args)
            // On stdin, not in the environment: sandbox code can read
            // /proc/<server>/environ, never a pipe the server has drained.
            .arg("--token-stdin")
            .env_clear()
            .envs(passed_env(&config))
            // The durable log lives in the sandbox's own private directory
            // (and goes with it) unless the config says where.
            .env(agentix_wire::log_file::ENV_LOG_DIR, dir.join("logs"))
            // The files plugin stays inside the sandbox unless told otherwise.
            .env(
                agentix_wire::wire::ENV_FILES_ROOT,
                config.files_root.as_deref().unwrap_or(&dir),
            )
            // Inside, the host's home and temp dir are not there: the
            // sandbox's own directory and /tmp are.
            .envs(isolation.as_ref().map_or(Vec::new(), |_| {
                vec![
                    ("HOME", dir.as_os_str()),
                    ("TMPDIR", std::ffi::OsStr::new("/tmp")),
                ]
            }))
            .envs(config.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&dir)
            .stderr(log);
        // Before the start: a host killed from here on leaves a marker by
        // which the next one removes what is left.
        let mut marker = SandboxMarker {
            id: format!("local-{id}"),
            provider: PROVIDER_NAME.to_owned(),
            owner: self.owner.to_string(),
            dir: dir.clone(),
            addr: String::new(),
            local_addr: None,
            token: token.clone(),
            pid: 0,
            pid_start: 0,
            cgroup: cgroup
                .as_ref()
                .map(|c| c.dirs().to_vec())
                .unwrap_or_default(),
            created_ms: sandbox_marker::now_ms(),
        };
        self.write_marker(&marker);
        let started = keeper::start(&self.keepers, cmd, format!("{token}\n").into_bytes()).await;
        let (server, ready) = match started {
            Ok(started) => started,
            Err(e) => {
                cgroup.as_ref().map(SandboxCgroup::remove_soon);
                let _ = std::fs::remove_dir_all(&dir);
                let _ = self.markers.remove(&marker.id);
                let who = match uid {
                    Some(uid) => format!(
                        " as uid {uid}, the sandbox's own (the host is root; \
                         SandboxConfig::run_as says otherwise)"
                    ),
                    None => String::new(),
                };
                // Out of descriptors or processes: the host's state, which
                // passes, not the bundle's fault.
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EMFILE | libc::ENFILE | libc::EAGAIN)
                ) {
                    return Err(io_error(
                        format!("cannot start the sandbox's server{who}"),
                        e,
                    ));
                }
                return Err(bad_bundle(bundle, &format!("cannot run it{who}: {e}")));
            }
        };
        let resources = LocalResources {
            server,
            dir,
            base,
            cgroup,
            forward: None,
            staging_root,
            markers: self.markers.clone(),
            id: marker.id.clone(),
        };
        let failed =
            |reason: String, resources: &LocalResources| ProviderError::ServerStartFailed {
                reason,
                output: tail_of(&resources.log_path()),
            };
        let refused = |status: &str| {
            isolation.is_some() && status == format!("exit status {ISOLATION_REFUSED_EXIT}")
        };
        let line = tokio::select! {
            line = ready => line.ok(),
            status = resources.server.wait() => {
                let err = if refused(&status) {
                    ProviderError::IsolationRefused { reason: tail_of(&resources.log_path()) }
                } else {
                    failed(format!("it exited before listening ({status})"), &resources)
                };
                resources.stop().await;
                return Err(err);
            }
            _ = tokio::time::sleep_until(ready_by) => {
                let err = failed(format!("it did not listen within {:?}", config.ready_timeout), &resources);
                resources.stop().await;
                return Err(err);
            }
        };
        let ready = line
            .as_deref()
            .and_then(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["agentix"] == "ready");
        let addr = ready
            .as_ref()
            .and_then(|v| v["addr"].as_str().map(str::to_owned));
        let local_addr = ready
            .as_ref()
            .and_then(|v| v["local_addr"].as_str().map(str::to_owned));
        let Some(addr) = addr else {
            // Its output closed without a ready line: a launcher that could
            // not isolate it is exiting, and its status says so.
            if line.is_none() {
                let exit = tokio::time::timeout(EXIT_AFTER_SILENCE, resources.server.wait()).await;
                if exit.is_ok_and(|status| refused(&status)) {
                    let err = ProviderError::IsolationRefused {
                        reason: tail_of(&resources.log_path()),
                    };
                    resources.stop().await;
                    return Err(err);
                }
            }
            let printed = match &line {
                Some(line) => format!("it printed `{}`", line.trim_end()),
                None => "it printed nothing".to_owned(),
            };
            let err = failed(
                format!(
                    "{printed} instead of the ready line; does its main call \
                     agentix::bundle::main() (or agentix::bundle::dispatch() first thing)?"
                ),
                &resources,
            );
            resources.stop().await;
            return Err(err);
        };
        let mut resources = resources;
        let mut addr = addr;
        let mut server_pid = resources.server.pid;
        if isolation.is_some() {
            // The server's port is in its own network namespace: clients
            // reach it through a port of the host's that leads to its
            // socket, and the host's own connections check that the socket
            // is the server's: the child of PID 1 inside (the init that
            // reaps orphans), under the launcher's keeper.
            let Some(socket) = local_socket.clone() else {
                unreachable!("an isolated sandbox always has its socket")
            };
            let server = process::first_child(server_pid)
                .and_then(process::first_child)
                .and_then(process::first_child);
            match server {
                Some(pid) => server_pid = pid,
                None => {
                    let err = failed(
                        "its server is not where its launcher put it".into(),
                        &resources,
                    );
                    resources.stop().await;
                    return Err(err);
                }
            }
            match PortForward::start(socket, server_pid).await {
                Ok(forward) => {
                    addr = forward.addr().to_string();
                    resources.forward = Some(forward);
                }
                Err(e) => {
                    resources.stop().await;
                    return Err(io_error("cannot open the sandbox's host port".into(), e));
                }
            }
        }
        marker.addr = addr.clone();
        marker.local_addr = local_addr.clone();
        marker.pid = resources.server.pid;
        marker.pid_start = crate::owner::process_start(marker.pid).unwrap_or_default();
        self.write_marker(&marker);
        let sandbox = Sandbox::from_parts(
            format!("local-{id}"),
            addr,
            token,
            config,
            Arc::new(resources),
        );
        Ok(match local_addr {
            Some(local) => sandbox.with_local_addr(local, server_pid),
            None => sandbox,
        })
    }
}

impl LocalProvider {
    /// Writes `marker`; a host that cannot is told in its log, and its
    /// sandboxes run on unmarked (only a SIGKILLed host's cleanup and the
    /// operator's view lack them).
    fn write_marker(&self, marker: &SandboxMarker) {
        if let Err(error) = self.markers.write(marker) {
            tracing::warn!(
                sandbox = %marker.id,
                dir = %self.markers.path().display(),
                %error,
                "cannot write the sandbox's marker"
            );
        }
    }
}

/// What a local sandbox owns: its server process and private directory,
/// and when isolated, its cgroup and host port.
struct LocalResources {
    server: KeptProcess,
    dir: PathBuf,
    /// Where its directory is, and its snapshots go.
    base: PathBuf,
    cgroup: Option<SandboxCgroup>,
    forward: Option<PortForward>,
    /// Where its launcher stages its root, when isolated.
    staging_root: Option<PathBuf>,
    markers: MarkerDir,
    id: String,
}

impl LocalResources {
    /// The server's log file (its stderr), for error reports.
    fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// Stops the server (it stops the worker) and removes the directory; waits.
    async fn stop(&self) {
        SandboxResources::shutdown(self).await;
    }

    fn exited(&self, status: &str) -> RemoteError {
        RemoteError::new(
            ErrorKind::ServerExited,
            format!("the sandbox server exited ({status})"),
        )
        .with_details(tail_of(&self.log_path()))
    }
}

impl SandboxResources for LocalResources {
    fn shutdown(&self) -> BoxFuture<'static, ()> {
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let dir = self.dir.clone();
        let cgroup = self.cgroup.clone();
        // Started now; a second call signals a process that is already
        // stopping and waits for the same exit.
        let removing = cgroup.clone();
        let (markers, id) = (self.markers.clone(), self.id.clone());
        let staging_root = self.staging_root.clone();
        self.server.terminate(STOP_GRACE, move || {
            // Its launcher removed it, unless it was killed first.
            if let Some(root) = &staging_root {
                remove_staging_root(root, &id);
            }
            // The marker goes with the directory: one that stays keeps it,
            // for a later reap.
            remove_dir_reporting(&dir, move || {
                let _ = markers.remove(&id);
            });
            removing.as_ref().map(SandboxCgroup::remove_soon);
            let _ = done_tx.send(());
        });
        Box::pin(async move {
            let _ = done_rx.await;
            if let Some(cgroup) = cgroup {
                cgroup.removed().await;
            }
        })
    }

    fn ended(&self) -> BoxFuture<'static, RemoteError> {
        let server = self.server.clone();
        let log = self.log_path();
        Box::pin(async move {
            let status = server.wait().await;
            RemoteError::new(
                ErrorKind::ServerExited,
                format!("the sandbox server exited ({status})"),
            )
            .with_details(tail_of(&log))
        })
    }

    fn ended_now(&self) -> Option<RemoteError> {
        Some(self.exited(&self.server.exit_status()?))
    }

    fn server_pid(&self) -> Option<u32> {
        Some(self.server.pid)
    }

    fn local_dir(&self) -> Option<&Path> {
        Some(&self.dir)
    }

    /// Copies the sandbox's directory (reflinked where the filesystem
    /// can), less what belongs to its running server (its log, socket and
    /// durable log), into a directory of the snapshot's own beside it.
    fn snapshot<'a>(
        &'a self,
        _: SandboxState<'a>,
        spec: SnapshotSpec,
    ) -> BoxFuture<'a, Result<Snapshot, ProviderError>> {
        let snapshot_id = format!("local-snap-{}", random_hex(8));
        let store = self.base.join(format!("agentix-{snapshot_id}"));
        let (dir, source) = (self.dir.clone(), self.id.clone());
        let markers = self.markers.clone();
        Box::pin(async move {
            let copy_to = store.clone();
            let copied = tokio::task::spawn_blocking(move || {
                std::fs::DirBuilder::new().mode(0o700).create(&copy_to)?;
                let copied = crate::tree_copy::copy_tree(&dir, &copy_to, &SERVER_FILES, None);
                if copied.is_err() {
                    let _ = std::fs::remove_dir_all(&copy_to);
                }
                copied
            })
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
            let bytes = copied.map_err(|e| {
                io_error(
                    format!("cannot snapshot sandbox {source} into {}", store.display()),
                    e,
                )
            })?;
            Ok(Snapshot::from_parts(
                snapshot_id,
                spec,
                PROVIDER_NAME,
                source,
                SnapshotStore::Dir(store),
                bytes,
                remove_snapshot_dir,
            )
            .recorded_in(&markers))
        })
    }
}

/// What a local sandbox's directory holds for its running server, not as
/// its state: the server's log, the host's socket, the durable log.
const SERVER_FILES: [&str; 3] = ["server.log", "host.sock", "logs"];

/// Removes a local snapshot's directory, on a thread of its own (it may
/// hold many files, and is removed from a handle's drop).
fn remove_snapshot_dir(store: &SnapshotStore) {
    if let SnapshotStore::Dir(dir) = store {
        let dir = dir.clone();
        std::thread::spawn(move || remove_dir_reporting(&dir, || {}));
    }
}

/// Removes a sandbox's directory, then runs `removed_then`. When that fails (a file a process that
/// is still exiting holds), it is tried again a few times on a thread of
/// its own (this runs on a keeper thread, which starts the next sandbox),
/// and a directory that stays is said in the log: a leak is never silent.
fn remove_dir_reporting(dir: &Path, removed_then: impl FnOnce() + Send + 'static) {
    let removed = |result: std::io::Result<()>| match result {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    };
    if removed(std::fs::remove_dir_all(dir)).is_ok() {
        removed_then();
        return;
    }
    let dir = dir.to_owned();
    let retry = move || {
        let mut last = None;
        for attempt in 0..5u32 {
            std::thread::sleep(std::time::Duration::from_millis(20 << attempt));
            match removed(std::fs::remove_dir_all(&dir)) {
                Ok(()) => {
                    removed_then();
                    return;
                }
                Err(e) => last = Some(e),
            }
        }
        if let Some(error) = last {
            tracing::error!(
                dir = %dir.display(),
                %error,
                "a deleted sandbox's directory could not be removed"
            );
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("agentix-remove-dir".into())
        .spawn(retry)
    {
        tracing::error!(%e, "cannot start a thread to remove a sandbox's directory");
    }
}

/// The last lines of the file at `path` (empty if it cannot be read).
pub(crate) fn tail_of(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let _ = f.read_to_string(&mut text);
    }
    crate::provider_error::last_lines(&text)
}

fn bad_bundle(path: &Path, reason: &str) -> ProviderError {
    ProviderError::BadBundle {
        path: path.display().to_string(),
        reason: reason.to_owned(),
    }
}

fn io_error(what: String, source: std::io::Error) -> ProviderError {
    ProviderError::Io { what, source }
}

/// The host variables a sandbox gets: [`crate::config::BASE_ENV`], every
/// `LC_*`, and those the config passes through by name.
fn passed_env(config: &SandboxConfig) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    std::env::vars_os()
        .filter(|(name, _)| {
            let name = name.to_string_lossy();
            crate::config::BASE_ENV.contains(&name.as_ref())
                || name.starts_with("LC_")
                || config.pass_env.iter().any(|p| *p == name)
        })
        .collect()
}
