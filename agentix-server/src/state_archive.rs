//! A sandbox's state as a tar archive: written from the directories the
//! server was told hold it (`--state-dir`), for a snapshot (`GET
//! /state.tar`), and unpacked into them before the first worker starts,
//! for a sandbox started from one (`--seed-stdin`).
//!
//! Entries are named by their absolute paths less the leading `/`
//! (`workspace/src/main.rs`); directories, files and symbolic links are
//! kept with their modes, sockets and devices are not (a running
//! sandbox's, not its state). An archive that names anything outside the
//! state directories is refused whole.

use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};

/// Writes the state directories `dirs` (absolute paths) as one tar archive
/// to `out`; returns the bytes of the files in it.
pub(crate) fn write_state(dirs: &[PathBuf], out: impl Write) -> io::Result<u64> {
    let mut archive = tar::Builder::new(out);
    archive.follow_symlinks(false);
    let mut bytes = 0;
    for dir in dirs {
        if std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
            bytes += append(&mut archive, dir)?;
        }
    }
    archive.into_inner()?.flush()?;
    Ok(bytes)
}

fn append<W: Write>(archive: &mut tar::Builder<W>, path: &Path) -> io::Result<u64> {
    let meta = std::fs::symlink_metadata(path)?;
    let name = path.strip_prefix("/").unwrap_or(path);
    let kind = meta.file_type();
    if kind.is_dir() {
        archive.append_dir(name, path)?;
        let mut bytes = 0;
        for entry in std::fs::read_dir(path)? {
            bytes += append(archive, &entry?.path())?;
        }
        Ok(bytes)
    } else if kind.is_file() || kind.is_symlink() {
        archive.append_path_with_name(path, name)?;
        Ok(if kind.is_file() { meta.len() } else { 0 })
    } else {
        Ok(0)
    }
}

/// Unpacks the tar archive `input` into the state directories `dirs`:
/// every entry must lie inside one of them. Returns how many entries.
pub(crate) fn unpack_state(input: impl Read, dirs: &[PathBuf]) -> io::Result<u64> {
    let mut archive = tar::Archive::new(input);
    archive.set_preserve_permissions(true);
    archive.set_overwrite(true);
    let mut unpacked = 0;
    for entry in archive.entries()? {
        let mut entry = entry?;
        let name = entry.path()?.into_owned();
        let inside = name
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
            && dirs
                .iter()
                .any(|dir| Path::new("/").join(&name).starts_with(dir));
        if !inside {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the state archive names {}, outside the state directories",
                    name.display()
                ),
            ));
        }
        // A state directory itself is the new sandbox's (its mount, its
        // owner and mode): only what is inside it comes from the archive.
        if dirs.iter().any(|dir| Path::new("/").join(&name) == *dir) {
            continue;
        }
        entry.unpack_in("/")?;
        unpacked += 1;
    }
    Ok(unpacked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_and_an_archive_reaching_outside_is_refused() {
        let root = std::env::temp_dir().join(format!("state-archive-{}", std::process::id()));
        let (from, to) = (root.join("from"), root.join("to"));
        std::fs::create_dir_all(from.join("a")).unwrap();
        std::fs::write(from.join("a/f"), b"state").unwrap();
        std::os::unix::fs::symlink("a/f", from.join("link")).unwrap();
        let mut tar = Vec::new();
        assert_eq!(
            write_state(std::slice::from_ref(&from), &mut tar).unwrap(),
            5
        );
        // Unpacked where it came from, after it is gone.
        std::fs::rename(&from, &to).unwrap();
        std::fs::create_dir(&from).unwrap();
        assert_eq!(
            unpack_state(&tar[..], std::slice::from_ref(&from)).unwrap(),
            3
        );
        assert_eq!(std::fs::read(from.join("a/f")).unwrap(), b"state");
        assert_eq!(std::fs::read(from.join("link")).unwrap(), b"state");
        // Not into a directory it was not told of.
        let err = unpack_state(&tar[..], &[to.join("elsewhere")]).unwrap_err();
        assert!(err.to_string().contains("outside"), "{err}");
        std::fs::remove_dir_all(root).unwrap();
    }
}
