//! Uploads in progress inside the sandbox: each writes a hidden temporary
//! file next to its target and becomes the target only when committed.
//!
//! Chunks carry their offset and are written with `pwrite`, so a host may
//! keep several in flight. The rename at commit is what makes an upload
//! atomic: until then the target path holds its old content (or nothing),
//! whatever happens to the host. An upload nobody touched for
//! [`IDLE_LIMIT`] is abandoned (its host went away) and its temporary file
//! removed. A commit succeeds only if every byte of the announced size was
//! written exactly once: chunks that overlap, or reach past
//! [`MAX_UPLOAD_BYTES`], are refused, and a gap fails the commit.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{FileExt as _, PermissionsExt as _};
use std::path::PathBuf;

use cap_std::fs::{Dir, MetadataExt as _, OpenOptions, OpenOptionsExt as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::error::{FileError, FileErrorKind};
use crate::root;
use crate::upload_journal::{self, TEMP_MARK};

/// How long an upload may go without a chunk before it is abandoned.
pub const IDLE_LIMIT: Duration = Duration::from_secs(600);

/// The largest file an upload may make (a chunk may not reach past it).
pub const MAX_UPLOAD_BYTES: u64 = 1 << 40;

struct Upload {
    file: Arc<File>,
    /// The files root both paths are relative to.
    root: &'static Dir,
    temp: PathBuf,
    /// The target as the caller named it (for errors) and beneath the root.
    target: String,
    target_rel: PathBuf,
    mode: Option<u32>,
    coverage: Coverage,
    touched: Instant,
}

/// The byte ranges of an upload written so far, and those being written.
#[derive(Default)]
struct Coverage {
    /// Written ranges, disjoint and merged: start -> end.
    done: std::collections::BTreeMap<u64, u64>,
    /// Ranges whose write is under way.
    pending: Vec<(u64, u64)>,
}

impl Coverage {
    /// Claims `start..end` for a write, unless some byte of it is written
    /// or being written already.
    fn claim(&mut self, start: u64, end: u64) -> Result<(), (u64, u64)> {
        let overlaps = |&(s, e): &(u64, u64)| s < end && start < e;
        if let Some(hit) = self.pending.iter().find(|r| overlaps(r)) {
            return Err(*hit);
        }
        // The written range starting last before `end` is the only one
        // that can overlap, the ranges being disjoint.
        if let Some((&s, &e)) = self.done.range(..end).next_back() {
            if overlaps(&(s, e)) {
                return Err((s, e));
            }
        }
        self.pending.push((start, end));
        Ok(())
    }

    /// The write of `start..end` ended; `ok` says whether it succeeded.
    fn settle(&mut self, start: u64, end: u64, ok: bool) {
        self.pending.retain(|&r| r != (start, end));
        if !ok || start == end {
            return;
        }
        let (mut start, mut end) = (start, end);
        if let Some((&s, &e)) = self.done.range(..=start).next_back() {
            if e == start {
                self.done.remove(&s);
                start = s;
            }
        }
        if let Some(e) = self.done.remove(&end) {
            end = e;
        }
        self.done.insert(start, end);
    }

    /// Whether exactly `0..size` was written, each byte once.
    fn covers(&self, size: u64) -> bool {
        self.pending.is_empty()
            && match (size, self.done.len()) {
                (0, 0) => true,
                (_, 1) => self.done.get(&0) == Some(&size),
                _ => false,
            }
    }

    fn written(&self) -> u64 {
        self.done.iter().map(|(s, e)| e - s).sum()
    }
}

/// The uploads of one worker, by id: kept in its
/// [`WorkerContext`](agentix::WorkerContext), so they end with it.
#[derive(Default)]
struct Uploads(Mutex<HashMap<u64, Upload>>);

impl Uploads {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Upload>> {
        // A panic while holding the lock leaves the map itself consistent.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// This worker's uploads; outside a worker (code that calls the plugin's
/// functions directly), a table of this thread's own.
fn uploads() -> Arc<Uploads> {
    match agentix::WorkerContext::current() {
        Some(worker) => worker.state::<Uploads>(),
        None => {
            thread_local! {
                static OUTSIDE: Arc<Uploads> = Arc::default();
            }
            OUTSIDE.with(Arc::clone)
        }
    }
}

/// Starts an upload to `target`; returns its id.
pub(crate) fn open(target: &str, mode: Option<u32>) -> Result<u64, FileError> {
    let uploads = uploads();
    reap_idle();
    let (root, path) = root::beneath(target)?;
    let Some(name) = path.file_name() else {
        return Err(FileError::new(
            FileErrorKind::InvalidInput,
            target,
            format!("cannot upload to `{target}`: it names no file"),
        ));
    };
    if root.metadata(&path).is_ok_and(|m| m.is_dir()) {
        return Err(FileError::new(
            FileErrorKind::IsADirectory,
            target,
            format!("cannot upload to `{target}`: it is a directory"),
        ));
    }
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let temp = path.with_file_name(format!(
        ".{}{TEMP_MARK}{}-{id}",
        name.to_string_lossy(),
        std::process::id()
    ));
    // Recorded and created under the table's lock, so that the journal is
    // never emptied between the two (see `forget_finished`).
    let mut table = uploads.lock();
    if let Some(absolute) = root::absolute(&temp) {
        upload_journal::record(&absolute);
    }
    let file = root
        .open_with(
            &temp,
            OpenOptions::new().write(true).create_new(true).mode(0o600),
        )
        .map(|f| f.into_std())
        .map_err(|e| {
            // Named as the caller named the target.
            let named = std::path::Path::new(target);
            let dir = named.parent().map(|p| p.to_string_lossy().into_owned());
            let dir = dir.filter(|d| !d.is_empty()).unwrap_or_else(|| ".".into());
            FileError::os("create a file in", &dir, &e)
        })?;
    table.insert(
        id,
        Upload {
            file: Arc::new(file),
            root,
            temp,
            target: target.to_owned(),
            target_rel: path,
            mode,
            coverage: Coverage::default(),
            touched: Instant::now(),
        },
    );
    Ok(id)
}

/// Writes `bytes` at `offset` of upload `id`.
pub(crate) async fn write(id: u64, offset: u64, bytes: Vec<u8>) -> Result<(), FileError> {
    let uploads = uploads();
    let len = bytes.len() as u64;
    let (file, target, end) = {
        let mut table = uploads.lock();
        let upload = table.get_mut(&id).ok_or_else(|| unknown(id))?;
        upload.touched = Instant::now();
        let target = upload.target.clone();
        let refuse = |why: String| FileError::new(FileErrorKind::InvalidInput, &target, why);
        let end = offset
            .checked_add(len)
            .filter(|&end| end <= MAX_UPLOAD_BYTES)
            .ok_or_else(|| {
                refuse(format!(
                    "a chunk at offset {offset} of {len} bytes reaches past the \
                     {MAX_UPLOAD_BYTES}-byte upload limit"
                ))
            })?;
        upload.coverage.claim(offset, end).map_err(|(s, e)| {
            refuse(format!(
                "bytes {offset}..{end} of the upload to `{target}` overlap bytes {s}..{e}, \
                 already written: each byte is written once"
            ))
        })?;
        (upload.file.clone(), target, end)
    };
    let written = tokio::task::spawn_blocking(move || file.write_all_at(&bytes, offset)).await;
    let ok = matches!(written, Ok(Ok(())));
    if let Some(upload) = uploads.lock().get_mut(&id) {
        upload.coverage.settle(offset, end, ok);
    }
    written
        .map_err(|e| FileError::new(FileErrorKind::Other, &target, e.to_string()))?
        .map_err(|e| FileError::os("write", &target, &e))
}

/// Makes upload `id` the file at its target, if every byte of `size` and
/// no other came, each once; returns the target path.
pub(crate) async fn commit(id: u64, size: u64) -> Result<String, FileError> {
    let uploads = uploads();
    let upload = uploads.lock().remove(&id).ok_or_else(|| unknown(id))?;
    if !upload.coverage.covers(size) {
        upload.remove_temp();
        return Err(FileError::new(
            FileErrorKind::InvalidInput,
            &upload.target,
            format!(
                "upload to `{}` got {} bytes in {} ranges, not bytes 0..{size} each once; \
                 nothing was written",
                upload.target,
                upload.coverage.written(),
                upload.coverage.done.len()
            ),
        ));
    }
    let target = upload.target.clone();
    let finished = tokio::task::spawn_blocking(move || finish(upload))
        .await
        .map_err(|e| FileError::new(FileErrorKind::Other, &target, e.to_string()));
    forget_finished();
    finished?
}

fn finish(upload: Upload) -> Result<String, FileError> {
    let fail = |op: &str, e: std::io::Error| {
        upload.remove_temp();
        FileError::os(op, &upload.target, &e)
    };
    let mode = match upload.mode {
        Some(mode) => mode,
        // A new file gets what `creat(0o666)` would give under the umask; a
        // replaced one keeps its permissions.
        None => match upload.root.metadata(&upload.target_rel) {
            Ok(meta) => meta.mode() & 0o7777,
            Err(_) => 0o666 & !umask(),
        },
    };
    upload
        .file
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(|e| fail("set the mode of", e))?;
    upload
        .root
        .rename(&upload.temp, upload.root, &upload.target_rel)
        .map_err(|e| fail("replace", e))?;
    Ok(upload.target)
}

/// Drops upload `id` and its temporary file; an unknown id is fine.
pub(crate) fn abort(id: u64) {
    let uploads = uploads();
    let removed = uploads.lock().remove(&id);
    if let Some(upload) = removed {
        upload.remove_temp();
        forget_finished();
    }
}

/// Empties the journal of temporary files once no upload is in progress.
fn forget_finished() {
    let uploads = uploads();
    let table = uploads.lock();
    if table.is_empty() {
        // Under the lock: an upload starting now records itself after this.
        upload_journal::clear();
    }
}

/// Removes uploads idle for longer than [`IDLE_LIMIT`].
fn reap_idle() {
    let uploads = uploads();
    let stale: Vec<Upload> = {
        let mut table = uploads.lock();
        let ids: Vec<u64> = table
            .iter()
            .filter(|(_, u)| u.touched.elapsed() > IDLE_LIMIT)
            .map(|(id, _)| *id)
            .collect();
        ids.iter().filter_map(|id| table.remove(id)).collect()
    };
    if !stale.is_empty() {
        for upload in stale {
            upload.remove_temp();
        }
        forget_finished();
    }
}

impl Upload {
    fn remove_temp(&self) {
        let _ = self.root.remove_file(&self.temp);
    }
}

fn unknown(id: u64) -> FileError {
    FileError::new(
        FileErrorKind::InvalidInput,
        "",
        format!("no upload {id} is in progress (committed, aborted or abandoned)"),
    )
}

fn umask() -> u32 {
    static UMASK: OnceLock<u32> = OnceLock::new();
    *UMASK.get_or_init(|| {
        // /proc tells the umask without the race of setting it to read it.
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                let line = s.lines().find(|l| l.starts_with("Umask:"))?;
                u32::from_str_radix(line.split_whitespace().nth(1)?, 8).ok()
            })
            .unwrap_or(0o022)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coverage_counts_each_byte_once_and_needs_all_of_them() {
        let mut c = Coverage::default();
        c.claim(0, 8).unwrap();
        c.settle(0, 8, true);
        // The same 8 bytes again: refused, so 16 can never be committed.
        assert_eq!(c.claim(0, 8), Err((0, 8)));
        assert_eq!(c.claim(4, 12), Err((0, 8)));
        assert!(!c.covers(16));
        c.claim(16, 24).unwrap();
        c.settle(16, 24, true);
        assert!(!c.covers(24), "a gap at 8..16");
        c.claim(8, 16).unwrap();
        assert!(!c.covers(24), "a write still under way");
        assert_eq!(c.claim(10, 12), Err((8, 16)), "overlaps one in flight");
        c.settle(8, 16, true);
        assert!(c.covers(24));
        assert!(!c.covers(25));
        assert_eq!(c.done.len(), 1, "adjacent ranges merge");
    }

    #[test]
    fn a_failed_write_claims_nothing_and_empty_uploads_cover_zero() {
        let mut c = Coverage::default();
        assert!(c.covers(0));
        c.claim(0, 4).unwrap();
        c.settle(0, 4, false);
        assert!(c.covers(0));
        c.claim(0, 4).unwrap();
    }
}
