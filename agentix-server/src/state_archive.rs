//! A sandbox's state as a tar archive: written from the directories the
//! server was told hold it (`--state-dir`), for a snapshot (`GET
//! /state.tar`), and unpacked into them before the first worker starts,
//! for a sandbox started from one (`--seed-file`, or `--seed-stdin` when
//! the archive comes through the engine's attach stream).
//!
//! Entries are named by their absolute paths less the leading `/`
//! (`workspace/src/main.rs`). Directories, files and symbolic links are
//! kept, with their modes and modification times; sockets and devices are
//! not (a running sandbox's, not its state). An archive that names
//! anything outside the state directories, or that would write through a
//! link, is refused.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use nix::fcntl::{self, AtFlags, OFlag};
use nix::sys::stat::{self, FchmodatFlags, Mode, UtimensatFlags};
use nix::sys::time::TimeSpec;
use nix::unistd;

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

/// Unpacks the state archive at `path` into the state directories
/// `dirs`; returns how many entries. Every path is resolved from a state
/// directory's own descriptor, never from `/` (in a container whose root is
/// a FUSE overlay, each walk from `/` is a round trip to its daemon), and
/// each file's bytes are copied from a second handle on the archive by
/// `std::io::copy`, which has the kernel copy them (`copy_file_range`, else
/// `sendfile`) where it can.
pub(crate) fn unpack_state_file(path: &Path, dirs: &[PathBuf]) -> io::Result<u64> {
    let (headers, mut data) = (File::open(path)?, File::open(path)?);
    let mut tar = tar::Archive::new(&headers);
    let mut target = StateTarget::open(dirs)?;
    for entry in tar.entries_with_seek()? {
        let entry = entry?;
        let (offset, size) = (entry.raw_file_position(), entry.size());
        target.place(&entry, |out| {
            data.seek(SeekFrom::Start(offset))?;
            match io::copy(&mut (&mut data).take(size), out)? {
                copied if copied == size => Ok(()),
                _ => Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the state archive ends inside a file",
                )),
            }
        })?;
    }
    target.finish()
}

/// Unpacks the tar archive read from `input` (a stream, such as standard
/// input) into the state directories `dirs`; returns how many entries.
pub(crate) fn unpack_state(input: impl Read, dirs: &[PathBuf]) -> io::Result<u64> {
    let mut tar = tar::Archive::new(input);
    let mut target = StateTarget::open(dirs)?;
    for entry in tar.entries()? {
        let mut entry = entry?;
        let header = entry.header().clone();
        let path = entry.path()?.into_owned();
        target.place_parts(&header, &path, |out| io::copy(&mut entry, out).map(drop))?;
    }
    target.finish()
}

/// The state directories being filled from an archive: each opened once,
/// every entry made relative to one of them.
///
/// An archive comes from a sandbox, so it is not trusted. Symbolic links
/// are made last, after every directory and file, and every directory an
/// entry goes through is checked to be one (not a link) before it is
/// used: no entry can be written through a link to outside the state
/// directories. Nothing else runs in the sandbox while it is unpacked.
struct StateTarget<'a> {
    dirs: &'a [PathBuf],
    /// Each state directory's descriptor, opened when first needed.
    handles: Vec<Option<File>>,
    /// Directories (per state directory, relative) known to be real ones.
    checked: HashSet<(usize, PathBuf)>,
    /// Directories made, with their modes and times, set once they are filled.
    made_dirs: Vec<(usize, PathBuf, u32, u64)>,
    /// Links, made once everything else is in place.
    links: Vec<(usize, PathBuf, PathBuf)>,
    unpacked: u64,
}

impl<'a> StateTarget<'a> {
    fn open(dirs: &'a [PathBuf]) -> io::Result<Self> {
        Ok(StateTarget {
            dirs,
            handles: dirs.iter().map(|_| None).collect(),
            checked: HashSet::new(),
            made_dirs: Vec::new(),
            links: Vec::new(),
            unpacked: 0,
        })
    }

    fn place<R: Read>(
        &mut self,
        entry: &tar::Entry<'_, R>,
        write: impl FnOnce(&mut File) -> io::Result<()>,
    ) -> io::Result<()> {
        let path = entry.path()?.into_owned();
        self.place_parts(entry.header(), &path, write)
    }

    /// Places the entry named `name` with `header`; `write` fills a file.
    fn place_parts(
        &mut self,
        header: &tar::Header,
        name: &Path,
        write: impl FnOnce(&mut File) -> io::Result<()>,
    ) -> io::Result<()> {
        let Some((dir, relative)) = self.inside(name)? else {
            // A state directory itself is the new sandbox's (its mount, its
            // owner and mode): only what is inside it comes from the archive.
            return Ok(());
        };
        let mode = header.mode()? & 0o7777;
        let mtime = header.mtime().unwrap_or(0);
        let kind = header.entry_type();
        if let Some(parent) = relative.parent() {
            self.check_dirs(dir, parent)?;
        }
        if kind.is_dir() {
            self.make_dir(dir, &relative, 0o700)?;
            self.checked.insert((dir, relative.clone()));
            self.made_dirs.push((dir, relative, mode, mtime));
        } else if kind.is_file() || kind == tar::EntryType::Continuous {
            let mut out = self.create_file(dir, &relative)?;
            write(&mut out)?;
            out.set_permissions(std::fs::Permissions::from_mode(mode))?;
            set_times(&out, mtime)?;
        } else if kind.is_symlink() {
            let target = header
                .link_name()?
                .ok_or_else(|| refused(format!("the link {} has no target", name.display())))?;
            self.links.push((dir, relative, target.into_owned()));
        } else {
            return Err(refused(format!(
                "the state archive holds {} as a {kind:?} entry, which no state archive does",
                name.display()
            )));
        }
        self.unpacked += 1;
        Ok(())
    }

    /// The descriptor of state directory `dir`.
    fn handle(&mut self, dir: usize) -> io::Result<RawFd> {
        if self.handles[dir].is_none() {
            let path = &self.dirs[dir];
            let opened = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY)
                .open(path)
                .map_err(|e| {
                    io::Error::new(e.kind(), format!("cannot open {}: {e}", path.display()))
                })?;
            self.handles[dir] = Some(opened);
        }
        Ok(self.handles[dir].as_ref().map_or(-1, |f| f.as_raw_fd()))
    }

    /// The state directory `name` lies in (the innermost) and its path
    /// there; `None` for a state directory itself.
    fn inside(&self, name: &Path) -> io::Result<Option<(usize, PathBuf)>> {
        let outside = || {
            refused(format!(
                "the state archive names {}, outside the state directories",
                name.display()
            ))
        };
        if !name
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(outside());
        }
        let absolute = Path::new("/").join(name);
        let (dir, state_dir) = self
            .dirs
            .iter()
            .enumerate()
            .filter(|(_, dir)| absolute.starts_with(dir))
            .max_by_key(|(_, dir)| dir.components().count())
            .ok_or_else(outside)?;
        let relative: PathBuf = absolute
            .strip_prefix(state_dir)
            .map_err(|_| outside())?
            .components()
            .filter(|c| matches!(c, Component::Normal(_)))
            .collect();
        Ok((!relative.as_os_str().is_empty()).then_some((dir, relative)))
    }

    /// Makes sure every directory from the state directory `dir` down to
    /// `relative` is a directory, not a link (making missing ones).
    fn check_dirs(&mut self, dir: usize, relative: &Path) -> io::Result<()> {
        let mut walked = PathBuf::new();
        for part in relative.components() {
            walked.push(part);
            if self.checked.contains(&(dir, walked.clone())) {
                continue;
            }
            match stat::fstatat(
                Some(self.handle(dir)?),
                &walked,
                AtFlags::AT_SYMLINK_NOFOLLOW,
            ) {
                Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {}
                Ok(_) => {
                    return Err(refused(format!(
                        "{} is not a directory in {}",
                        walked.display(),
                        self.dirs[dir].display()
                    )))
                }
                Err(nix::errno::Errno::ENOENT) => self.make_dir(dir, &walked, 0o755)?,
                Err(e) => return Err(e.into()),
            }
            self.checked.insert((dir, walked.clone()));
        }
        Ok(())
    }

    /// Makes the directory `relative` with `mode`, or finds one there.
    fn make_dir(&mut self, dir: usize, relative: &Path, mode: u32) -> io::Result<()> {
        let fd = Some(self.handle(dir)?);
        match stat::mkdirat(fd, relative, Mode::from_bits_truncate(mode)) {
            Ok(()) => Ok(()),
            Err(nix::errno::Errno::EEXIST) => {
                let st = stat::fstatat(fd, relative, AtFlags::AT_SYMLINK_NOFOLLOW)?;
                if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
                    Ok(())
                } else {
                    Err(refused(format!(
                        "{} in {} is already there and not a directory",
                        relative.display(),
                        self.dirs[dir].display()
                    )))
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// A new file at `relative`, replacing one already there; never
    /// written through a link.
    fn create_file(&mut self, dir: usize, relative: &Path) -> io::Result<File> {
        let fd = Some(self.handle(dir)?);
        let flags =
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let open = || fcntl::openat(fd, relative, flags, Mode::from_bits_truncate(0o600));
        let raw = match open() {
            Err(nix::errno::Errno::EEXIST) => {
                unistd::unlinkat(fd, relative, unistd::UnlinkatFlags::NoRemoveDir)?;
                open()?
            }
            opened => opened?,
        };
        // SAFETY: `openat` returned a new descriptor that nothing else owns.
        Ok(unsafe { File::from_raw_fd(raw) })
    }

    /// Makes the links, then gives the directories their modes and times
    /// (making entries in a directory changes its time).
    fn finish(mut self) -> io::Result<u64> {
        for (dir, relative, target) in std::mem::take(&mut self.links) {
            // Checked afresh: a link made here may sit where a later link's
            // directory was expected.
            self.checked.clear();
            if let Some(parent) = relative.parent() {
                self.check_dirs(dir, parent)?;
            }
            let fd = Some(self.handle(dir)?);
            match unistd::symlinkat(&target, fd, &relative) {
                Err(nix::errno::Errno::EEXIST) => {
                    unistd::unlinkat(fd, &relative, unistd::UnlinkatFlags::NoRemoveDir)?;
                    unistd::symlinkat(&target, fd, &relative)?;
                }
                made => made?,
            }
        }
        for (dir, relative, mode, mtime) in std::mem::take(&mut self.made_dirs).into_iter().rev() {
            let fd = Some(self.handle(dir)?);
            let time = TimeSpec::new(i64::try_from(mtime).unwrap_or(0), 0);
            stat::utimensat(fd, &relative, &time, &time, UtimensatFlags::NoFollowSymlink)?;
            // Every directory on the way is a checked one, and no link can
            // take a directory's place, so following is safe here.
            stat::fchmodat(
                fd,
                &relative,
                Mode::from_bits_truncate(mode),
                FchmodatFlags::FollowSymlink,
            )?;
        }
        Ok(self.unpacked)
    }
}

fn set_times(file: &File, mtime: u64) -> io::Result<()> {
    let time = TimeSpec::new(i64::try_from(mtime).unwrap_or(0), 0);
    stat::futimens(file.as_raw_fd(), &time, &time)?;
    Ok(())
}

fn refused(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// Unpacks `tar` from a file (the kernel copies) or from a stream.
    fn unpack_by(from_file: bool, tar: &[u8], dirs: &[PathBuf], scratch: &Path) -> io::Result<u64> {
        if !from_file {
            return unpack_state(tar, dirs);
        }
        let file = scratch.join("archive.tar");
        std::fs::write(&file, tar).unwrap();
        let unpacked = unpack_state_file(&file, dirs);
        std::fs::remove_file(&file).unwrap();
        unpacked
    }

    #[test]
    fn state_round_trips_with_modes_times_and_bytes_from_a_file_or_a_stream() {
        let root = tempfile::tempdir().unwrap();
        let (from, to) = (root.path().join("from"), root.path().join("to"));
        std::fs::create_dir_all(from.join("a/deep")).unwrap();
        std::fs::write(from.join("a/f"), b"state").unwrap();
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(from.join("a/deep/big"), &big).unwrap();
        std::fs::set_permissions(from.join("a/f"), PermissionsExt::from_mode(0o751)).unwrap();
        std::fs::set_permissions(from.join("a/deep"), PermissionsExt::from_mode(0o500)).unwrap();
        std::os::unix::fs::symlink("a/f", from.join("link")).unwrap();
        let old = filetime_of(&from.join("a/f"));
        let mut tar = Vec::new();
        let bytes = write_state(std::slice::from_ref(&from), &mut tar).unwrap();
        assert_eq!(bytes, 5 + big.len() as u64);
        std::fs::set_permissions(from.join("a/deep"), PermissionsExt::from_mode(0o700)).unwrap();
        // Unpacked where it came from, after it is gone, both ways.
        std::fs::rename(&from, &to).unwrap();
        std::fs::create_dir(&from).unwrap();
        for from_file in [true, false] {
            let unpacked = unpack_by(from_file, &tar, std::slice::from_ref(&from), root.path());
            assert_eq!(unpacked.unwrap(), 5, "a, a/deep, a/deep/big, a/f, link");
            assert_eq!(std::fs::read(from.join("a/f")).unwrap(), b"state");
            assert_eq!(std::fs::read(from.join("link")).unwrap(), b"state");
            assert!(std::fs::read(from.join("a/deep/big")).unwrap() == big);
            let mode = |p: &str| std::fs::metadata(from.join(p)).unwrap().mode() & 0o7777;
            assert_eq!((mode("a/f"), mode("a/deep")), (0o751, 0o500));
            assert_eq!(filetime_of(&from.join("a/f")), old);
            std::fs::set_permissions(from.join("a/deep"), PermissionsExt::from_mode(0o700))
                .unwrap();
            std::fs::remove_dir_all(&from).unwrap();
            std::fs::create_dir(&from).unwrap();
        }
        // Not into a directory it was not told of.
        for from_file in [true, false] {
            let err = unpack_by(from_file, &tar, &[to.join("elsewhere")], root.path()).unwrap_err();
            assert!(err.to_string().contains("outside"), "{err}");
        }
    }

    #[test]
    fn an_archive_cut_short_inside_a_file_is_an_error_not_a_short_file() {
        let root = tempfile::tempdir().unwrap();
        let state = root.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::fs::write(state.join("f"), vec![7u8; 100_000]).unwrap();
        let mut tar = Vec::new();
        write_state(std::slice::from_ref(&state), &mut tar).unwrap();
        std::fs::remove_file(state.join("f")).unwrap();
        // The header and half the file's bytes.
        let data_at = tar.windows(4).position(|w| w == [7, 7, 7, 7]).unwrap();
        tar.truncate(data_at + 50_000);
        assert!(unpack_state(&tar[..], std::slice::from_ref(&state)).is_err());
        let file = root.path().join("cut.tar");
        std::fs::write(&file, &tar).unwrap();
        let err = unpack_state_file(&file, std::slice::from_ref(&state)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");
    }

    fn filetime_of(path: &Path) -> i64 {
        std::fs::metadata(path).unwrap().mtime()
    }

    /// An archive whose link points out of the state directory, then a
    /// file "inside" the link: it must not land where the link points.
    fn escaping_archive(name_of_state: &str) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        let mut link = tar::Header::new_gnu();
        link.set_entry_type(tar::EntryType::Symlink);
        link.set_size(0);
        link.set_mode(0o777);
        builder
            .append_link(&mut link, format!("{name_of_state}/out"), "../outside")
            .unwrap();
        let mut file = tar::Header::new_gnu();
        file.set_size(6);
        file.set_mode(0o644);
        builder
            .append_data(
                &mut file,
                format!("{name_of_state}/out/planted"),
                &b"pwned!"[..],
            )
            .unwrap();
        builder.into_inner().unwrap()
    }

    #[test]
    fn nothing_is_written_through_a_link_in_the_archive() {
        let root = tempfile::tempdir().unwrap();
        let (state, outside) = (root.path().join("state"), root.path().join("outside"));
        std::fs::create_dir(&outside).unwrap();
        let tar = escaping_archive(state.strip_prefix("/").unwrap().to_str().unwrap());
        for from_file in [true, false] {
            std::fs::create_dir(&state).unwrap();
            let result = unpack_by(from_file, &tar, std::slice::from_ref(&state), root.path());
            // Made last, the link is not there when the file is placed:
            // the file goes into a directory of the state's own, and the
            // link cannot then replace that directory.
            assert!(!outside.join("planted").exists(), "{result:?}");
            assert!(result.is_err(), "{result:?}");
            assert!(
                std::fs::read(state.join("out/planted")).ok().as_deref() == Some(&b"pwned!"[..]),
                "{result:?}"
            );
            std::fs::remove_dir_all(&state).unwrap();
        }
        // A link already in the state directory is not followed either.
        std::fs::create_dir(&state).unwrap();
        std::os::unix::fs::symlink("../outside", state.join("out")).unwrap();
        let file = root.path().join("archive.tar");
        std::fs::write(&file, &tar).unwrap();
        let err = unpack_state_file(&file, std::slice::from_ref(&state)).unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
        assert!(!outside.join("planted").exists());
    }
}
