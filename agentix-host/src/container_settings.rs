//! [`ContainerSettings`]: what a container provider makes of a sandbox (the
//! local provider ignores them), with its [`ContainerMount`]s and its
//! [`ContainerNetwork`].

use std::path::PathBuf;
use std::time::Duration;

/// The container a sandbox runs in, for providers that make one.
///
/// Hardened by default: every capability dropped, `no-new-privileges`, a
/// read-only root filesystem (with a tmpfs `/tmp` and working directory),
/// and `SandboxConfig::limits` for memory and processes. Each can be
/// changed here; the book's security chapter (docs/src/security.md) says what each change opens.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerSettings {
    /// The base image; the bundle is mounted into it.
    pub image: Option<String>,
    /// A bundle image (`agentix build --image NAME`) to take the bundle from
    /// instead of the config's bundle directory: for an engine on another
    /// machine, which cannot see that directory. Its content is copied into
    /// a volume once per bundle digest.
    pub bundle_image: Option<String>,
    /// CPUs the container may use (`1.5` is one and a half); `None` takes
    /// `SandboxConfig::limits`.
    pub cpus: Option<f64>,
    /// Memory limit in bytes, the worker OOM-killed past it; `None` takes
    /// `SandboxConfig::limits`.
    pub memory_bytes: Option<i64>,
    /// Most processes the container may hold at once; `None` takes
    /// `SandboxConfig::limits`.
    pub pids_limit: Option<i64>,
    /// Capabilities given back (`NET_BIND_SERVICE`, say); every other one
    /// is dropped. Empty by default: the server needs none.
    pub capabilities: Vec<String>,
    /// Lets a program gain privileges through setuid bits or file
    /// capabilities (`sudo` in the image); off by default.
    pub allow_new_privileges: bool,
    /// Lets sandbox code write the image's filesystem (its changes are lost
    /// with the container); off by default, when only `/tmp`, the working
    /// directory and mounts are writable.
    pub writable_root: bool,
    /// The engine's runtime for the container (`runsc` for gVisor, under
    /// the name it is registered with); `None` is the engine's default.
    pub runtime: Option<String>,
    /// Size of the tmpfs `/tmp` (and of a tmpfs working directory), in
    /// bytes; `None` is half the memory limit (1 GiB with none). A tmpfs
    /// is memory: bounded below the limit, filling it is a full disk, not
    /// an OOM kill of the server.
    pub tmp_bytes: Option<u64>,
    /// The user to run as (`1000`, `1000:1000`, a name the image knows).
    pub user: Option<String>,
    /// The working directory inside the container; with a read-only root
    /// it is a tmpfs, `/workspace` unless set.
    pub workdir: Option<String>,
    /// Host directories mounted into the container.
    pub mounts: Vec<ContainerMount>,
    /// The network the container is on.
    pub network: ContainerNetwork,
    /// The engine platform to run the image as (`linux/amd64`,
    /// `linux/arm64`); the bundle must be built for its architecture.
    pub platform: Option<String>,
    /// Deleted after this long even if its handle lives.
    pub lifetime: Option<Duration>,
    /// The server stops once no host has been connected for this long, so
    /// a host that dies leaves no container running for longer (`None`:
    /// the provider's default, 5 minutes for `DockerProvider`).
    pub idle_exit: Option<Duration>,
}

impl ContainerSettings {
    /// The working directory of a container with a read-only root, unless
    /// [`ContainerSettings::workdir`] names another: a tmpfs (or a pod's
    /// `emptyDir`) of the sandbox's.
    pub const DEFAULT_WORKDIR: &'static str = "/workspace";
    /// Size of `/tmp` and the working directory when there is no memory
    /// limit to take half of.
    pub const DEFAULT_TMP_BYTES: u64 = 1 << 30;
    /// How long a container's server waits for a host before it stops,
    /// unless [`ContainerSettings::idle_exit`] says otherwise.
    pub const DEFAULT_IDLE_EXIT: Duration = Duration::from_secs(300);

    /// How long the server waits for a host before it stops.
    pub fn idle_exit_or_default(&self) -> Duration {
        self.idle_exit.unwrap_or(Self::DEFAULT_IDLE_EXIT)
    }

    /// The container's memory limit: its own setting, else the sandbox's
    /// `limits.memory_bytes`.
    pub fn memory_limit(&self, limits: &crate::SandboxLimits) -> Option<i64> {
        self.memory_bytes
            .or(limits.memory_bytes.map(|bytes| bytes as i64))
    }

    /// Size of `/tmp` and the working directory: the setting, else half the
    /// memory limit (at least 1 MiB; counted against that limit, like any
    /// tmpfs, so filling it is a full disk, not an OOM kill), else
    /// [`ContainerSettings::DEFAULT_TMP_BYTES`].
    pub fn tmp_bytes_or_default(&self, limits: &crate::SandboxLimits) -> u64 {
        self.tmp_bytes.unwrap_or(match self.memory_limit(limits) {
            Some(limit) => (limit / 2).max(1 << 20) as u64,
            None => Self::DEFAULT_TMP_BYTES,
        })
    }
}

/// A host directory mounted into a sandbox's container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerMount {
    /// The directory on the engine's machine.
    pub host: PathBuf,
    /// Where it appears in the container.
    pub container: String,
    /// Whether the sandbox may only read it.
    pub read_only: bool,
}

/// The network a sandbox's container is on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ContainerNetwork {
    /// The default: no network where the host reaches the server through
    /// its socket (a root host of an engine on its machine), the engine's
    /// bridge where it needs a published port (any other host).
    #[default]
    Auto,
    /// The engine's default bridge: the sandbox can reach out; the host
    /// reaches its server on a port published on 127.0.0.1 only.
    Bridge,
    /// No network at all, not even to the host: the host reaches the
    /// server through a Unix socket on a directory mounted from the host,
    /// so the engine must run on the host's machine.
    None,
    /// A network the user made (`docker network create`), by name; the
    /// server's port is published as on the bridge.
    Named(String),
}
