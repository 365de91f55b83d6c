//! [`copy_tree`]: a directory tree copied as it is (files, directories
//! with their modes, symlinks as links), each file a copy-on-write clone
//! where the filesystem has them and a copy elsewhere, optionally given to
//! another owner. Snapshots of local sandboxes are made and restored so,
//! and the bundle's `install` role copies a bundle with it.

use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

/// Copies what `from` holds into `to` (which must exist), leaving out the
/// top-level entries named in `skip`; each copy is owned by `owner` if
/// given (`lchown`, so a link's own owner). Returns the bytes of the
/// files copied.
pub fn copy_tree(from: &Path, to: &Path, skip: &[&str], owner: Option<u32>) -> io::Result<u64> {
    let mut bytes = 0;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_str().is_some_and(|n| skip.contains(&n)) {
            continue;
        }
        bytes += copy_entry(&entry.path(), &to.join(&name), owner)?;
    }
    Ok(bytes)
}

fn copy_entry(from: &Path, to: &Path, owner: Option<u32>) -> io::Result<u64> {
    let meta = std::fs::symlink_metadata(from)?;
    let kind = meta.file_type();
    let bytes = if kind.is_symlink() {
        std::os::unix::fs::symlink(std::fs::read_link(from)?, to)?;
        0
    } else if kind.is_dir() {
        std::fs::DirBuilder::new()
            .mode(meta.permissions().mode() & 0o7777)
            .create(to)?;
        let inside = copy_tree(from, to, &[], owner)?;
        // The mode again: the umask may have taken bits at creation.
        std::fs::set_permissions(to, meta.permissions())?;
        inside
    } else if kind.is_file() {
        reflink_copy::reflink_or_copy(from, to)?;
        std::fs::set_permissions(to, meta.permissions())?;
        meta.len()
    } else {
        // Sockets, pipes and devices are a running sandbox's, not its state.
        return Ok(0);
    };
    if let Some(uid) = owner {
        std::os::unix::fs::lchown(to, Some(uid), Some(uid))?;
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_is_copied_with_its_modes_and_links_and_without_what_is_skipped() {
        let root = std::env::temp_dir().join(format!("tree-copy-{}", std::process::id()));
        let (from, to) = (root.join("from"), root.join("to"));
        std::fs::create_dir_all(from.join("a/b")).unwrap();
        std::fs::create_dir_all(&to).unwrap();
        std::fs::write(from.join("a/b/f"), b"one").unwrap();
        std::fs::set_permissions(from.join("a/b/f"), std::fs::Permissions::from_mode(0o640))
            .unwrap();
        std::os::unix::fs::symlink("a/b/f", from.join("link")).unwrap();
        std::fs::write(from.join("server.log"), b"skip me").unwrap();
        let bytes = copy_tree(&from, &to, &["server.log"], None).unwrap();
        assert_eq!(bytes, 3);
        assert_eq!(std::fs::read(to.join("a/b/f")).unwrap(), b"one");
        let mode = std::fs::metadata(to.join("a/b/f"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o640);
        assert_eq!(
            std::fs::read_link(to.join("link")).unwrap(),
            Path::new("a/b/f")
        );
        assert_eq!(std::fs::read(to.join("link")).unwrap(), b"one");
        assert!(!to.join("server.log").exists());
        std::fs::remove_dir_all(root).unwrap();
    }
}
