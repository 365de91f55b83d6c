//! [`SandboxMarker`]: what a host writes about each sandbox it starts on
//! this machine, so that once the host is gone another process can find
//! the sandbox, tell whether its owner lives, and remove what is left
//! ([`crate::LocalProvider::reap`]); and so that an operator's tools can
//! list and reach live sandboxes (`agentix ps`, `logs`, `exec`, `call`).
//! The local provider writes one for each sandbox; providers of other
//! crates (Docker) may, naming themselves in [`SandboxMarker::provider`].
//!
//! One JSON file per sandbox in a [`MarkerDir`]: by default
//! `$XDG_RUNTIME_DIR/agentix`, else `/run/agentix` for root, else
//! `<temp dir>/agentix-runtime-<uid>`. The directory is mode 0700 and each
//! file 0600, because a marker holds the sandbox's token: only the host's
//! user (and root) reads it, and no isolated sandbox sees it (those see the
//! host's system directories, their own directory and a private `/tmp`).
//! A directory that another user owns, or that others may enter, is refused.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::json_files;
use crate::owner::{process_running, OwnerId};

/// One sandbox, as its owner recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxMarker {
    /// The sandbox's id (`local-…`).
    pub id: String,
    /// The provider that made it (`local`, `docker`).
    pub provider: String,
    /// The host process that owns it ([`OwnerId`]'s text form).
    pub owner: String,
    /// Its private directory on this machine (empty when it has none).
    pub dir: PathBuf,
    /// Its server's TCP address (empty until it listens).
    pub addr: String,
    /// Its server's Unix socket, when it has one.
    pub local_addr: Option<String>,
    /// Its token: whoever reads the marker may call the sandbox.
    pub token: String,
    /// The process the host started (the server, or the launcher of an
    /// isolated one): it leads the sandbox's process group. 0 until started,
    /// and for a sandbox that is not a process of this machine's.
    pub pid: u32,
    /// That process's start time (`owner::process_start`), so that a recycled
    /// PID is never taken for it.
    pub pid_start: u64,
    /// Its cgroup directories, on a root host.
    pub cgroup: Vec<PathBuf>,
    /// When it was created, in milliseconds since the Unix epoch.
    pub created_ms: u64,
}

impl SandboxMarker {
    /// The owner, parsed.
    pub fn owner_id(&self) -> Option<OwnerId> {
        OwnerId::parse(&self.owner)
    }

    /// Whether the sandbox's first process still runs (the same process:
    /// its PID and start time both match; a zombie has ended).
    pub fn process_alive(&self) -> bool {
        self.pid != 0 && process_running(self.pid, self.pid_start)
    }
}

/// The directory of markers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerDir {
    path: PathBuf,
}

impl Default for MarkerDir {
    fn default() -> Self {
        MarkerDir::new(default_path())
    }
}

impl MarkerDir {
    /// Markers kept in `path` (made, mode 0700, on the first write).
    pub fn new(path: impl Into<PathBuf>) -> MarkerDir {
        MarkerDir { path: path.into() }
    }

    /// Where the markers are.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes (or replaces) `marker`: to a file of its own first, then
    /// renamed, so that a reader never sees half of one.
    pub fn write(&self, marker: &SandboxMarker) -> std::io::Result<()> {
        self.ensure()?;
        json_files::write(&self.path, &marker.id, marker)
    }

    /// Removes sandbox `id`'s marker (nothing when there is none).
    pub fn remove(&self, id: &str) -> std::io::Result<()> {
        json_files::remove(&self.path, id)
    }

    /// Sandbox `id`'s marker, if there is one.
    pub fn read(&self, id: &str) -> Option<SandboxMarker> {
        json_files::read(&self.path, id)
    }

    /// The marker `id` names: its id, or the start of exactly one id;
    /// otherwise why not, as a sentence.
    pub fn find(&self, id: &str) -> Result<SandboxMarker, String> {
        let all = self
            .list()
            .map_err(|e| format!("cannot read {}: {e}", self.path.display()))?;
        json_files::pick(
            all,
            id,
            |m| m.id == id,
            |m| &m.id,
            json_files::Kind {
                noun: "sandbox",
                dir: &self.path,
                listed_by: "agentix ps",
            },
        )
    }

    /// Every marker, oldest first; files that are not markers are skipped.
    /// An absent directory holds none.
    pub fn list(&self) -> std::io::Result<Vec<SandboxMarker>> {
        let mut markers: Vec<SandboxMarker> = json_files::list(&self.path)?;
        markers.sort_by_key(|m| m.created_ms);
        Ok(markers)
    }

    /// Makes the directory (0700) when absent, and refuses one that is not
    /// this user's alone: its markers would give others the tokens.
    pub(crate) fn ensure(&self) -> std::io::Result<()> {
        let made = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.path);
        if let Err(e) = made {
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                return Err(e);
            }
        }
        let meta = std::fs::symlink_metadata(&self.path)?;
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let private = meta.is_dir() && meta.uid() == me && meta.permissions().mode() & 0o077 == 0;
        match private {
            true => Ok(()),
            false => Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "{} must be a directory of uid {me}'s with mode 0700 (it holds \
                     sandbox tokens); remove it or choose another marker directory",
                    self.path.display()
                ),
            )),
        }
    }
}

/// The default marker directory (see the module doc).
pub fn default_path() -> PathBuf {
    if let Some(runtime) = std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        return PathBuf::from(runtime).join("agentix");
    }
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 && Path::new("/run").is_dir() {
        return PathBuf::from("/run/agentix");
    }
    std::env::temp_dir().join(format!("agentix-runtime-{uid}"))
}

/// Milliseconds since the Unix epoch, now (for [`SandboxMarker::created_ms`]).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marker(id: &str, created_ms: u64) -> SandboxMarker {
        SandboxMarker {
            id: id.into(),
            provider: "local".into(),
            owner: OwnerId::current().to_string(),
            dir: "/nowhere".into(),
            addr: "127.0.0.1:1".into(),
            local_addr: None,
            token: "t".into(),
            pid: 0,
            pid_start: 0,
            cgroup: Vec::new(),
            created_ms,
        }
    }

    #[test]
    fn markers_are_private_files_that_read_back_and_go() {
        let dir = std::env::temp_dir().join(format!("agentix-marker-test-{}", std::process::id()));
        let markers = MarkerDir::new(&dir);
        assert!(markers.list().unwrap().is_empty(), "absent holds none");
        markers.write(&marker("local-b", 2)).unwrap();
        markers.write(&marker("local-a", 1)).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let file = dir.join("local-a.json");
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let ids: Vec<String> = markers.list().unwrap().into_iter().map(|m| m.id).collect();
        assert_eq!(ids, ["local-a", "local-b"]);
        assert_eq!(markers.read("local-b"), Some(marker("local-b", 2)));
        assert_eq!(markers.find("local-b").unwrap().id, "local-b");
        assert!(markers
            .find("local-")
            .unwrap_err()
            .contains("more than one"));
        assert!(markers.find("docker-").unwrap_err().contains("agentix ps"));
        markers.remove("local-a").unwrap();
        markers.remove("local-a").unwrap();
        assert_eq!(markers.list().unwrap().len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_directory_others_may_enter_is_refused() {
        let dir = std::env::temp_dir().join(format!("agentix-marker-open-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = MarkerDir::new(&dir)
            .write(&marker("local-x", 0))
            .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(!dir.join("local-x.json").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
