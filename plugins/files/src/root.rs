//! The files root: every path the files functions take is resolved beneath
//! one directory, and nothing (`..`, an absolute symlink, a symlink to a
//! parent) leads out of it.
//!
//! The root is `AGENTIX_FILES_ROOT` (the local provider sets it to the
//! sandbox's own directory unless `SandboxConfig::files_root` says
//! otherwise), or `/` when it is not set (a container's filesystem is its
//! own). Resolution is `cap-std`'s, which on Linux walks each path with
//! `openat2(RESOLVE_BENEATH)` from a descriptor of the root, so a symlink
//! planted while a call runs cannot redirect it either.
//!
//! Relative paths are relative to the root; an absolute path must name a
//! place inside it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cap_std::ambient_authority;
use cap_std::fs::Dir;

use crate::error::{FileError, FileErrorKind};

pub use agentix::ENV_FILES_ROOT;

/// The root directory, opened once per worker.
struct Root {
    path: PathBuf,
    dir: Dir,
}

fn root() -> Result<&'static Root, FileError> {
    static ROOT: OnceLock<Result<Root, String>> = OnceLock::new();
    let opened = ROOT.get_or_init(|| {
        let named = std::env::var_os(ENV_FILES_ROOT)
            .filter(|r| !r.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/"));
        let path = std::fs::canonicalize(&named)
            .map_err(|e| format!("the files root {} cannot be used: {e}", named.display()))?;
        let dir = Dir::open_ambient_dir(&path, ambient_authority())
            .map_err(|e| format!("the files root {} cannot be opened: {e}", path.display()))?;
        Ok(Root { path, dir })
    });
    opened
        .as_ref()
        .map_err(|why| FileError::new(FileErrorKind::Other, "", why.clone()))
}

/// `path` resolved beneath the files root: the root's directory and the
/// path relative to it.
pub(crate) fn beneath(path: &str) -> Result<(&'static Dir, PathBuf), FileError> {
    let root = root()?;
    Ok((&root.dir, relative_to(&root.path, path)?))
}

/// The absolute path of `relative` (a path [`beneath`] gave).
pub(crate) fn absolute(relative: &Path) -> Option<PathBuf> {
    Some(root().ok()?.path.join(relative))
}

/// Removes the file at absolute path `path` if it is beneath the root
/// (never following a symlink out of it); anything else is left alone.
pub(crate) fn remove_beneath(path: &Path) {
    let Ok(root) = root() else {
        return;
    };
    if let Ok(relative) = path.strip_prefix(&root.path) {
        let _ = root.dir.remove_file(relative);
    }
}

/// `path` relative to `root`, or why it is outside it. Purely lexical: the
/// walk beneath the root refuses `..` and symlinks that lead out.
fn relative_to(root: &Path, path: &str) -> Result<PathBuf, FileError> {
    let p = Path::new(path);
    let relative = if p.is_absolute() {
        p.strip_prefix(root).map_err(|_| {
            FileError::new(
                FileErrorKind::PermissionDenied,
                path,
                format!(
                    "`{path}` is outside the sandbox's files root `{}`; give a path inside it \
                     or relative to it",
                    root.display()
                ),
            )
        })?
    } else {
        p
    };
    Ok(match relative.as_os_str().is_empty() {
        true => PathBuf::from("."),
        false => relative.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_path_is_inside_the_root_or_refused(path in "(/|\\.\\./|[a-z]{1,3}/|/srv/box/?){0,6}[a-z.]{0,4}") {
            let root = Path::new("/srv/box");
            match relative_to(root, &path) {
                Ok(rel) => {
                    prop_assert!(rel.is_relative(), "{rel:?}");
                    if Path::new(&path).is_absolute() {
                        prop_assert!(Path::new(&path).starts_with(root));
                        prop_assert_eq!(root.join(&rel).components().filter(|c| *c != std::path::Component::CurDir).collect::<PathBuf>(),
                            Path::new(&path).components().collect::<PathBuf>());
                    }
                }
                Err(e) => {
                    prop_assert_eq!(e.kind, FileErrorKind::PermissionDenied);
                    prop_assert!(!Path::new(&path).starts_with(root));
                }
            }
        }
    }

    #[test]
    fn paths_inside_the_root_become_relative_and_others_are_refused() {
        let root = Path::new("/srv/box");
        let rel = |p: &str| relative_to(root, p).map(|r| r.to_string_lossy().into_owned());
        assert_eq!(rel("/srv/box/a/b").unwrap(), "a/b");
        assert_eq!(rel("/srv/box").unwrap(), ".");
        assert_eq!(rel("a/b").unwrap(), "a/b");
        assert_eq!(rel("").unwrap(), ".");
        for outside in ["/etc/shadow", "/srv/boxer/x", "/srv"] {
            let err = rel(outside).unwrap_err();
            assert_eq!(err.kind, FileErrorKind::PermissionDenied, "{outside}");
            assert!(err.message.contains("outside"), "{err:?}");
        }
        // `..` stays in the relative path: the walk beneath the root refuses it.
        assert_eq!(rel("/srv/box/../x").unwrap(), "../x");
        let everything = Path::new("/");
        assert_eq!(
            relative_to(everything, "/etc/hosts").unwrap(),
            PathBuf::from("etc/hosts")
        );
    }
}
