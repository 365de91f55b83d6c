//! Where the isolated launcher builds a sandbox's root before it pivots
//! into it: a directory of empty mount points (`bin`, `dev`, `proc`, `tmp`,
//! the sandbox's own directory), made for each sandbox and removed after.
//!
//! On a disk filesystem those few directories cost a start more than its
//! namespaces do: ext4 searches its inode tables for room for every new
//! directory, which was 11% of all the machine's CPU over 300 isolated
//! starts. So the root is staged on a memory filesystem (`/dev/shm`) when
//! the machine has one this user may write; otherwise the namespaces crate
//! stages it in the temp directory.
//!
//! The host names the directory (`IsolationSpec::staging_root`), so that it
//! can remove it itself when the launcher was killed before it could. It is
//! private to the launcher's user: made fresh with mode 0700 under the
//! sticky `/dev/shm` (a name that exists already, whoever made it, is not
//! used), and the sandbox never sees it: once it has pivoted into its new
//! root, the host's filesystem is unmounted from its view.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use nix::sys::statfs::{statfs, TMPFS_MAGIC};

/// A sandbox's staging root on a memory filesystem; [`StagingRoot::remove`]
/// takes it away once the sandbox has exited.
#[derive(Debug)]
pub(crate) struct StagingRoot {
    dir: PathBuf,
}

impl StagingRoot {
    /// Makes the directory `dir` the host named, or `None` when its parent
    /// is not a memory filesystem this process may write or `dir` exists
    /// already (the caller then lets the namespaces crate choose).
    pub(crate) fn make(dir: &Path) -> Option<StagingRoot> {
        let parent = dir.parent()?;
        let fs = statfs(parent).ok()?;
        if fs.filesystem_type() != TMPFS_MAGIC {
            return None;
        }
        // Fails on any name that exists, a link included: never one that
        // someone else made.
        std::fs::DirBuilder::new().mode(0o700).create(dir).ok()?;
        Some(StagingRoot {
            dir: dir.to_owned(),
        })
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.dir
    }

    /// Removes the directory (its mount points are plain empty directories
    /// once the sandbox's mount namespace is gone).
    pub(crate) fn remove(self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name under /dev/shm that no other test uses.
    fn shm_name(test: &str) -> PathBuf {
        PathBuf::from(format!(
            "/dev/shm/agentix-test-{}-{test}-root",
            std::process::id()
        ))
    }

    #[test]
    fn a_root_is_staged_privately_on_a_memory_fs_and_removed() {
        let dir = shm_name("private");
        let root = StagingRoot::make(&dir)
            .expect("a Linux machine of this project's kind has a writable tmpfs at /dev/shm");
        assert_eq!(root.path(), dir);
        let mode = std::fs::symlink_metadata(&dir).unwrap();
        assert!(mode.is_dir());
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            0o700
        );
        std::fs::create_dir_all(dir.join("tmp/agentix-x")).unwrap();
        root.remove();
        assert!(!dir.exists());
    }

    #[test]
    fn a_name_that_exists_is_not_used_and_left_as_it_was() {
        let taken = shm_name("taken");
        std::fs::create_dir(&taken).unwrap();
        std::fs::write(taken.join("theirs"), b"kept").unwrap();
        assert!(StagingRoot::make(&taken).is_none());
        assert_eq!(std::fs::read(taken.join("theirs")).unwrap(), b"kept");
        std::fs::remove_dir_all(&taken).unwrap();

        let link = shm_name("link");
        std::os::unix::fs::symlink("/tmp", &link).unwrap();
        assert!(StagingRoot::make(&link).is_none());
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        std::fs::remove_file(&link).unwrap();
    }

    #[test]
    fn a_disk_or_virtual_filesystem_is_not_staged_on() {
        // /proc is never a tmpfs, so the refusal is the filesystem check's.
        assert!(statfs(Path::new("/proc")).unwrap().filesystem_type() != TMPFS_MAGIC);
        assert!(StagingRoot::make(Path::new("/proc/agentix-0123-root")).is_none());
        assert!(StagingRoot::make(Path::new("/")).is_none());
    }
}
