//! [`Isolation`]: how a local sandbox is kept apart from the host and from
//! the other sandboxes, and [`NamespaceIsolation`], the settings of the
//! default tier.
//!
//! The default gives each sandbox its own user, mount, PID, IPC, UTS and
//! network namespaces (built in the bundle by its launcher, see
//! `agentix_server::isolation`): the host's system directories read-only,
//! its own directory and `/tmp` writable, nothing else of the host's files,
//! no process but its own, no network but its own `lo`, and limits (see
//! `SandboxConfig::limits`). `Isolation::None` is the plain process tree,
//! for trusted code only.

use std::path::{Path, PathBuf};

/// The memory filesystem isolated sandboxes' roots are staged on.
const STAGING_FS: &str = "/dev/shm";

/// How a local sandbox is kept apart from the host and other sandboxes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Isolation {
    /// Namespaces of its own (the default); creating the sandbox fails,
    /// saying why, where the kernel refuses unprivileged user namespaces.
    Namespaces(NamespaceIsolation),
    /// A plain process tree of the host's user (or the `RunAs` uid): sandbox
    /// code sees the host's files and network. For trusted code only.
    None,
}

impl Default for Isolation {
    fn default() -> Self {
        Isolation::Namespaces(NamespaceIsolation::default())
    }
}

impl Isolation {
    /// The namespace settings, unless the sandbox is a plain process tree.
    pub fn namespaces(&self) -> Option<&NamespaceIsolation> {
        match self {
            Isolation::Namespaces(settings) => Some(settings),
            Isolation::None => None,
        }
    }
}

/// What an isolated local sandbox may see beyond its own directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceIsolation {
    /// Host paths the sandbox may read and run, at the same path inside (a
    /// dataset, a virtualenv, a toolchain).
    pub read_only: Vec<PathBuf>,
    /// Host directories the sandbox may also write, at the same path inside.
    pub writable: Vec<PathBuf>,
    /// Shares the host's network: the sandbox reaches whatever the host
    /// reaches, services on the host's 127.0.0.1 included. Off by default.
    pub host_network: bool,
    /// Size of the sandbox's own `/tmp`, in bytes (1 GiB by default).
    pub tmp_bytes: u64,
}

impl Default for NamespaceIsolation {
    fn default() -> Self {
        NamespaceIsolation {
            read_only: Vec::new(),
            writable: Vec::new(),
            host_network: false,
            tmp_bytes: 1 << 30,
        }
    }
}

impl NamespaceIsolation {
    /// Lets the sandbox read (and run) `path`.
    pub fn read_only(mut self, path: impl Into<PathBuf>) -> Self {
        self.read_only.push(path.into());
        self
    }

    /// Lets the sandbox write the directory `dir`.
    pub fn writable(mut self, dir: impl Into<PathBuf>) -> Self {
        self.writable.push(dir.into());
        self
    }

    /// Shares the host's network with the sandbox (see the field).
    pub fn host_network(mut self) -> Self {
        self.host_network = true;
        self
    }
}

/// Where the launcher of the sandbox whose directory is `dir` stages its
/// root, named after that directory (when `/dev/shm` is a tmpfs it may
/// write; see `agentix_server::isolation`). The launcher removes it after
/// the sandbox; the host removes it too, for a launcher that was killed
/// first, and so does a reap of a dead host's sandbox.
pub(crate) fn staging_root_of(dir: &Path) -> Option<PathBuf> {
    let name = dir.file_name()?.to_str()?;
    Some(Path::new(STAGING_FS).join(format!("{name}-root")))
}
