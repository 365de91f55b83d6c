//! Uploads in progress inside the sandbox: each writes a hidden temporary
//! file next to its target and becomes the target only when committed.
//!
//! Chunks carry their offset and are written with `pwrite`, so a host may
//! keep several in flight. The rename at commit is what makes an upload
//! atomic: until then the target path holds its old content (or nothing),
//! whatever happens to the host. An upload nobody touched for
//! [`IDLE_LIMIT`] is abandoned (its host went away) and its temporary file
//! removed.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::error::{FileError, FileErrorKind};

/// How long an upload may go without a chunk before it is abandoned.
pub const IDLE_LIMIT: Duration = Duration::from_secs(600);

struct Upload {
    file: Arc<File>,
    temp: PathBuf,
    target: String,
    mode: Option<u32>,
    received: Arc<AtomicU64>,
    touched: Instant,
}

fn table() -> &'static Mutex<HashMap<u64, Upload>> {
    static TABLE: OnceLock<Mutex<HashMap<u64, Upload>>> = OnceLock::new();
    TABLE.get_or_init(Mutex::default)
}

fn lock() -> std::sync::MutexGuard<'static, HashMap<u64, Upload>> {
    // A panic while holding the lock leaves the map itself consistent.
    table().lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts an upload to `target`; returns its id.
pub(crate) fn open(target: &str, mode: Option<u32>) -> Result<u64, FileError> {
    reap_idle();
    let path = Path::new(target);
    let Some(name) = path.file_name() else {
        return Err(FileError::new(
            FileErrorKind::InvalidInput,
            target,
            format!("cannot upload to `{target}`: it names no file"),
        ));
    };
    if path.is_dir() {
        return Err(FileError::new(
            FileErrorKind::IsADirectory,
            target,
            format!("cannot upload to `{target}`: it is a directory"),
        ));
    }
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let temp = path.with_file_name(format!(
        ".{}.agentix-upload-{}-{id}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .map_err(|e| {
            let dir = path.parent().map(|p| p.to_string_lossy().into_owned());
            let dir = dir.filter(|d| !d.is_empty()).unwrap_or_else(|| ".".into());
            FileError::os("create a file in", &dir, &e)
        })?;
    lock().insert(
        id,
        Upload {
            file: Arc::new(file),
            temp,
            target: target.to_owned(),
            mode,
            received: Arc::default(),
            touched: Instant::now(),
        },
    );
    Ok(id)
}

/// Writes `bytes` at `offset` of upload `id`.
pub(crate) async fn write(id: u64, offset: u64, bytes: Vec<u8>) -> Result<(), FileError> {
    let (file, received, target) = {
        let mut table = lock();
        let upload = table.get_mut(&id).ok_or_else(|| unknown(id))?;
        upload.touched = Instant::now();
        (
            upload.file.clone(),
            upload.received.clone(),
            upload.target.clone(),
        )
    };
    let len = bytes.len() as u64;
    tokio::task::spawn_blocking(move || file.write_all_at(&bytes, offset))
        .await
        .map_err(|e| FileError::new(FileErrorKind::Other, &target, e.to_string()))?
        .map_err(|e| FileError::os("write", &target, &e))?;
    received.fetch_add(len, Ordering::Relaxed);
    Ok(())
}

/// Makes upload `id` the file at its target, if exactly `size` bytes came;
/// returns the target path.
pub(crate) async fn commit(id: u64, size: u64) -> Result<String, FileError> {
    let upload = lock().remove(&id).ok_or_else(|| unknown(id))?;
    let received = upload.received.load(Ordering::Relaxed);
    if received != size {
        let _ = std::fs::remove_file(&upload.temp);
        return Err(FileError::new(
            FileErrorKind::InvalidInput,
            &upload.target,
            format!(
                "upload to `{}` got {received} bytes, not the {size} announced; nothing was written",
                upload.target
            ),
        ));
    }
    let target = upload.target.clone();
    tokio::task::spawn_blocking(move || finish(upload))
        .await
        .map_err(|e| FileError::new(FileErrorKind::Other, &target, e.to_string()))?
}

fn finish(upload: Upload) -> Result<String, FileError> {
    let fail = |op: &str, e: std::io::Error| {
        let _ = std::fs::remove_file(&upload.temp);
        FileError::os(op, &upload.target, &e)
    };
    let mode = match upload.mode {
        Some(mode) => mode,
        // A new file gets what `creat(0o666)` would give under the umask; a
        // replaced one keeps its permissions.
        None => match std::fs::metadata(&upload.target) {
            Ok(meta) => meta.permissions().mode() & 0o7777,
            Err(_) => 0o666 & !umask(),
        },
    };
    upload
        .file
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(|e| fail("set the mode of", e))?;
    std::fs::rename(&upload.temp, &upload.target).map_err(|e| fail("replace", e))?;
    Ok(upload.target)
}

/// Drops upload `id` and its temporary file; an unknown id is fine.
pub(crate) fn abort(id: u64) {
    if let Some(upload) = lock().remove(&id) {
        let _ = std::fs::remove_file(&upload.temp);
    }
}

/// Removes uploads idle for longer than [`IDLE_LIMIT`].
fn reap_idle() {
    let stale: Vec<Upload> = {
        let mut table = lock();
        let ids: Vec<u64> = table
            .iter()
            .filter(|(_, u)| u.touched.elapsed() > IDLE_LIMIT)
            .map(|(id, _)| *id)
            .collect();
        ids.iter().filter_map(|id| table.remove(id)).collect()
    };
    for upload in stale {
        let _ = std::fs::remove_file(&upload.temp);
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
