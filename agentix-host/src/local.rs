//! [`LocalProvider`]: the embedded default provider.
//!
//! Each sandbox is the bundle run as `serve` (which starts itself again as
//! `worker`) in a private directory under the system temp dir, bound to
//! 127.0.0.1 on a free port, with a fresh random token. The server also
//! listens on a Unix socket in that directory, which the host's own
//! connections use: no TCP stack, no packet filter on loopback, a quarter
//! to a third less CPU per small call; the port stays for third-party
//! clients. Deleting or dropping
//! the sandbox stops both processes and removes the directory; if the host
//! dies without doing so, the server gets SIGTERM from the kernel and does it
//! itself (see [`crate::keeper`]).

use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use std::sync::Arc;

use agentix_actors::errors::{ErrorKind, RemoteError};
use futures_util::future::BoxFuture;

use crate::config::SandboxConfig;
use crate::keeper::{self, KeptProcess};
use crate::provider::Provider;
use crate::provider_error::ProviderError;
use crate::sandbox::Sandbox;
use crate::sandbox_registry::SandboxRegistry;
use crate::sandbox_resources::SandboxResources;
use crate::secret::random_hex;

/// How long a stopping server may take before its process group is killed:
/// the server's default shutdown grace plus time to stop the worker.
const STOP_GRACE: Duration = Duration::from_secs(7);

/// Room for a path in a Unix socket address (`sun_path`, with its NUL).
const MAX_SOCKET_PATH: usize = 108;

/// Runs sandboxes as local child processes.
#[derive(Debug, Clone, Default)]
pub struct LocalProvider {
    base_dir: Option<PathBuf>,
    sandboxes: SandboxRegistry,
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
            sandboxes: SandboxRegistry::new(),
        }
    }
}

impl Provider for LocalProvider {
    fn create(&self, config: SandboxConfig) -> BoxFuture<'_, Result<Sandbox, ProviderError>> {
        Box::pin(async move {
            let sandbox = self.start(config).await?;
            self.sandboxes.add(&sandbox);
            Ok(sandbox)
        })
    }

    fn sandboxes(&self) -> &SandboxRegistry {
        &self.sandboxes
    }
}

impl LocalProvider {
    async fn start(&self, config: SandboxConfig) -> Result<Sandbox, ProviderError> {
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
        if let Some(uid) = uid {
            // The sandbox's user owns its directory, and only it (and root).
            if let Err(e) = std::os::unix::fs::chown(&dir, Some(uid), Some(uid)) {
                let _ = std::fs::remove_dir_all(&dir);
                let what = format!("cannot give {} to uid {uid}", dir.display());
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

        // Run by descriptor: the sandbox's user may not reach the bundle's
        // path (a checkout under /root), only read and run the file.
        let program = match uid {
            Some(_) => match BundleFile::open(bundle) {
                Ok(file) => Some(file),
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(bad_bundle(bundle, &format!("cannot open it: {e}")));
                }
            },
            None => None,
        };
        let mut cmd = match &program {
            Some(file) => {
                let mut cmd = tokio::process::Command::new(file.path());
                cmd.arg0(bundle);
                cmd
            }
            None => tokio::process::Command::new(bundle),
        };
        if let Some(uid) = uid {
            cmd.uid(uid).gid(uid);
        }
        cmd.arg("serve")
            .args(["--host", "127.0.0.1", "--port", "0"])
            .arg("--max-message-bytes")
            .arg(wire_limit.to_string())
            .arg("--cleanup-dir")
            .arg(&dir)
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
            .env(agentix_actors::log_file::ENV_LOG_DIR, dir.join("logs"))
            // The files plugin stays inside the sandbox unless told otherwise.
            .env(
                agentix_actors::wire::ENV_FILES_ROOT,
                config.files_root.as_deref().unwrap_or(&dir),
            )
            .envs(config.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&dir)
            .stderr(log);
        let started = keeper::start(cmd, format!("{token}\n").into_bytes()).await;
        drop(program);
        let (server, ready) = match started {
            Ok(started) => started,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                let who = match uid {
                    Some(uid) => format!(
                        " as uid {uid}, the sandbox's own (the host is root; \
                         SandboxConfig::run_as says otherwise)"
                    ),
                    None => String::new(),
                };
                return Err(bad_bundle(bundle, &format!("cannot run it{who}: {e}")));
            }
        };
        let resources = LocalResources { server, dir };
        let failed =
            |reason: String, resources: &LocalResources| ProviderError::ServerStartFailed {
                reason,
                output: tail_of(&resources.log_path()),
            };
        let line = tokio::select! {
            line = ready => line.ok(),
            status = resources.server.wait() => {
                let err = failed(format!("it exited before listening ({status})"), &resources);
                resources.stop().await;
                return Err(err);
            }
            _ = tokio::time::sleep(config.ready_timeout) => {
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
        let sandbox = Sandbox::from_parts(
            format!("local-{id}"),
            addr,
            token,
            config,
            Arc::new(resources),
        );
        Ok(match (local_addr, sandbox.server_pid()) {
            (Some(local), Some(pid)) => sandbox.with_local_addr(local, pid),
            _ => sandbox,
        })
    }
}

/// The bundle opened by the host, run through `/proc/self/fd/N`: a
/// program started so needs to read and run the file, not to reach its
/// path. Close-on-exec: the kernel opens the program before it closes the
/// descriptor, so the server keeps no copy.
struct BundleFile(std::fs::File);

impl BundleFile {
    fn open(path: &Path) -> std::io::Result<BundleFile> {
        std::fs::File::open(path).map(BundleFile)
    }

    fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.0.as_raw_fd()))
    }
}

/// What a local sandbox owns: its server process and private directory.
struct LocalResources {
    server: KeptProcess,
    dir: PathBuf,
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
        // Started now; a second call signals a process that is already
        // stopping and waits for the same exit.
        self.server.terminate(STOP_GRACE, move || {
            let _ = std::fs::remove_dir_all(&dir);
            let _ = done_tx.send(());
        });
        Box::pin(async move {
            let _ = done_rx.await;
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
