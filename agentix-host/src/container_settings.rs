//! [`ContainerSettings`]: what a container provider makes of a sandbox (the
//! local provider ignores them).

use std::path::PathBuf;
use std::time::Duration;

/// The container a sandbox runs in, for providers that make one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerSettings {
    /// The base image; the bundle is mounted into it.
    pub image: Option<String>,
    /// A bundle image (`agentix build --image NAME`) to take the bundle from
    /// instead of the config's bundle directory: for an engine on another
    /// machine, which cannot see that directory. Its content is copied into
    /// a volume once per bundle digest.
    pub bundle_image: Option<String>,
    /// CPUs the container may use (`1.5` is one and a half).
    pub cpus: Option<f64>,
    /// Memory limit in bytes; the worker is OOM-killed past it.
    pub memory_bytes: Option<i64>,
    /// Most processes the container may hold at once.
    pub pids_limit: Option<i64>,
    /// The user to run as (`1000`, `1000:1000`, a name the image knows).
    pub user: Option<String>,
    /// The working directory inside the container.
    pub workdir: Option<String>,
    /// Host directories mounted into the container.
    pub mounts: Vec<ContainerMount>,
    /// Deleted after this long even if its handle lives.
    pub lifetime: Option<Duration>,
    /// The server stops once no host has been connected for this long, so
    /// a host that dies leaves no container running for longer (`None`:
    /// the provider's default, 5 minutes for `DockerProvider`).
    pub idle_exit: Option<Duration>,
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
