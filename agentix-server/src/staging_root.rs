//! Where the isolated launcher builds a sandbox's root before it pivots
//! into it: a directory of empty mount points (`bin`, `dev`, `proc`, `tmp`,
//! the sandbox's own directory), made for each sandbox and removed after.
//!
//! On a disk filesystem those few directories cost a start more than its
//! namespaces do: ext4 searches its inode tables for room for every new
//! directory, which was 11% of all the machine's CPU over 300 isolated
//! starts. So the root is staged on a memory filesystem (`/dev/shm`) when
//! the machine has one this user may write; otherwise the namespaces crate
//! stages it in the temp directory as before.
//!
//! The directory is private to the launcher's user (mode 0700, a random
//! name, under the sticky `/dev/shm`), and the sandbox never sees it: once
//! it has pivoted into its new root, the host's filesystem is unmounted
//! from its view.

use std::path::{Path, PathBuf};

use nix::sys::statfs::{statfs, TMPFS_MAGIC};

/// The memory filesystem a root is staged on, when it is one.
const MEMORY_FS: &str = "/dev/shm";

/// A sandbox's staging root on a memory filesystem; [`StagingRoot::remove`]
/// takes it away once the sandbox has exited.
#[derive(Debug)]
pub(crate) struct StagingRoot {
    dir: PathBuf,
}

impl StagingRoot {
    /// A fresh staging root on the memory filesystem for the sandbox
    /// `name` (its hostname, which its directory is named after too, so an
    /// operator can tell whose it is), or `None` when there is no memory
    /// filesystem to write (the caller then lets the namespaces crate
    /// choose).
    pub(crate) fn on_memory_fs(name: &str) -> Option<StagingRoot> {
        Self::in_dir(Path::new(MEMORY_FS), name)
    }

    /// A fresh staging root in `parent` if `parent` is a memory filesystem
    /// this process may write.
    fn in_dir(parent: &Path, name: &str) -> Option<StagingRoot> {
        let fs = statfs(parent).ok()?;
        if fs.filesystem_type() != TMPFS_MAGIC {
            return None;
        }
        // A name that is not one path component is not used.
        let name = if name.is_empty() || name.contains('/') || name.starts_with('.') {
            "agentix"
        } else {
            name
        };
        let dir = tempfile::Builder::new()
            .prefix(&format!("{name}-root-"))
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir_in(parent)
            .ok()?;
        // Kept past this value: the launcher exits by `process::exit`,
        // which runs no destructor, so removal is explicit.
        Some(StagingRoot { dir: dir.keep() })
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

    #[test]
    fn a_root_is_staged_privately_on_a_memory_fs_and_removed() {
        let root = StagingRoot::on_memory_fs("agentix-0123")
            .expect("a Linux machine of this project's kind has a writable tmpfs at /dev/shm");
        let path = root.path().to_path_buf();
        assert_eq!(path.parent(), Some(Path::new(MEMORY_FS)));
        let file_name = path.file_name().unwrap().to_str().unwrap();
        assert!(file_name.starts_with("agentix-0123-root-"), "{file_name}");
        let mode = std::fs::metadata(&path).unwrap();
        assert!(mode.is_dir());
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            0o700
        );
        std::fs::create_dir_all(path.join("tmp/agentix-x")).unwrap();
        root.remove();
        assert!(!path.exists());
    }

    #[test]
    fn a_name_that_is_not_one_component_is_not_used() {
        for name in ["../escape", "", ".hidden", "a/b"] {
            let root = StagingRoot::on_memory_fs(name).expect("a writable /dev/shm");
            let path = root.path().to_path_buf();
            assert_eq!(path.parent(), Some(Path::new(MEMORY_FS)), "{name:?}");
            let file_name = path.file_name().unwrap().to_str().unwrap();
            assert!(file_name.starts_with("agentix-root-"), "{file_name}");
            root.remove();
        }
    }

    #[test]
    fn a_disk_or_virtual_filesystem_is_not_staged_on() {
        // /proc is never a tmpfs, so the refusal is the filesystem check's.
        assert!(statfs(Path::new("/proc")).unwrap().filesystem_type() != TMPFS_MAGIC);
        assert!(StagingRoot::in_dir(Path::new("/proc"), "agentix-0123").is_none());
    }
}
