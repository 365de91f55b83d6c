//! How a container started from a snapshot gets the snapshot's state
//! archive ([`Seed`]), and where a snapshot keeps it ([`SnapshotFiles`]).
//!
//! On a root host with the engine on this machine, the archive's directory
//! is mounted read-only into the container, readable only by a group of
//! the snapshot's own that the container joins (`GroupAdd`): the server
//! reads it at disk speed. Otherwise it is written to the container's
//! standard input after the token, through the engine's attach stream.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use agentix::{ProviderError, RunAs};

/// Where the snapshot's directory is mounted in a container.
pub const SEED_MOUNT: &str = "/agentix-seed";

/// How a new container gets its snapshot's state.
#[derive(Debug, Clone)]
pub enum Seed {
    /// Written to its standard input after the token.
    Stdin(PathBuf),
    /// Its directory mounted at [`SEED_MOUNT`], the archive `file` in it
    /// readable by the group `gid`, which the container joins.
    Mounted {
        /// The snapshot's directory.
        dir: PathBuf,
        /// The archive's file name.
        file: String,
        /// The group that may read it.
        gid: u32,
    },
}

impl Seed {
    /// The seed for a container from the snapshot directory `dir`: mounted
    /// when `mountable` (a root host, the engine on this machine) and the
    /// files are a group's, else through standard input.
    pub fn from_dir(dir: &Path, mountable: bool) -> Result<Seed, ProviderError> {
        let missing = |reason: String| ProviderError::Backend {
            what: format!("start a container from the snapshot in {}", dir.display()),
            reason,
        };
        let file = std::fs::read_dir(dir)
            .map_err(|e| missing(e.to_string()))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|name| name.starts_with("state-") && name.ends_with(".tar"))
            .ok_or_else(|| missing("it holds no state archive".into()))?;
        let gid = std::fs::metadata(dir.join(&file))
            .map_err(|e| missing(e.to_string()))?
            .gid();
        Ok(if mountable && gid != 0 {
            Seed::Mounted {
                dir: dir.to_owned(),
                file,
                gid,
            }
        } else {
            Seed::Stdin(dir.join(file))
        })
    }
}

/// A new snapshot's directory and the path its archive is written to.
pub struct SnapshotFiles {
    /// The directory.
    pub dir: PathBuf,
    /// The archive, by a name no one can guess.
    pub archive: PathBuf,
    /// The group that may read it (a root host's), if any.
    gid: Option<u32>,
}

impl SnapshotFiles {
    /// Makes snapshot `id`'s directory: the host's alone, or on a root
    /// host also traversable by a group of the snapshot's own.
    pub fn create(id: &str) -> Result<SnapshotFiles, ProviderError> {
        let dir = std::env::temp_dir().join(format!("agentix-{id}"));
        let io = |what: String| move |e| ProviderError::Io { what, source: e };
        let gid = agentix::host_is_root()
            .then(|| RunAs::Default.container_uid_for(id))
            .flatten();
        std::fs::DirBuilder::new()
            .mode(if gid.is_some() { 0o710 } else { 0o700 })
            .create(&dir)
            .map_err(io(format!("cannot create {}", dir.display())))?;
        if let Some(gid) = gid {
            std::os::unix::fs::chown(&dir, None, Some(gid))
                .map_err(io(format!("cannot give {} to group {gid}", dir.display())))?;
        }
        let archive = dir.join(format!("state-{}.tar", agentix::random_hex(16)));
        Ok(SnapshotFiles { dir, archive, gid })
    }

    /// Lets the group read the written archive.
    pub fn share(&self) -> Result<(), ProviderError> {
        let Some(gid) = self.gid else {
            return Ok(());
        };
        let io = |e| ProviderError::Io {
            what: format!("cannot share {} with group {gid}", self.archive.display()),
            source: e,
        };
        std::os::unix::fs::chown(&self.archive, None, Some(gid)).map_err(io)?;
        std::fs::set_permissions(&self.archive, std::fs::Permissions::from_mode(0o640)).map_err(io)
    }
}
