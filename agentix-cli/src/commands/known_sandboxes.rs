//! The sandboxes this machine's hosts recorded, by their markers
//! (`agentix::sandbox_marker`), and a handle on one of them.

use std::path::PathBuf;
use std::time::Duration;

use agentix::{MarkerDir, Sandbox, SandboxConfig, SandboxMarker};

/// Where the markers are, for the commands that read them.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct MarkerArgs {
    /// The marker directory (default: `$XDG_RUNTIME_DIR/agentix`, else
    /// `/run/agentix` for root, else `<temp>/agentix-runtime-<uid>`, as
    /// hosts use).
    #[arg(long, value_name = "DIR", global = true)]
    markers: Option<PathBuf>,
}

impl MarkerArgs {
    /// The marker directory these arguments name.
    pub(crate) fn dir(&self) -> MarkerDir {
        match &self.markers {
            Some(dir) => MarkerDir::new(dir),
            None => MarkerDir::default(),
        }
    }
}

/// Every recorded sandbox.
pub(crate) fn all(markers: &MarkerDir) -> Result<Vec<SandboxMarker>, String> {
    markers
        .list()
        .map_err(|e| format!("cannot read {}: {e}", markers.path().display()))
}

/// A handle on the sandbox `marker` records, by its Unix socket when it
/// has one (the TCP port of an isolated sandbox is its host's forward,
/// which ends with the host); dropping it leaves the sandbox running.
pub(crate) fn attach(marker: &SandboxMarker) -> Sandbox {
    attach_with(marker, SandboxConfig::new(""))
}

/// [`attach`] with `config`'s settings (a log tap, say); its connect
/// timeout is the commands' own.
pub(crate) fn attach_with(marker: &SandboxMarker, mut config: SandboxConfig) -> Sandbox {
    let addr = marker.local_addr.as_deref().unwrap_or(&marker.addr);
    config.connect_timeout = CONNECT_TIMEOUT;
    Sandbox::attach_with(addr, marker.token.clone(), config)
}

/// How long a command waits to reach a sandbox's server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
