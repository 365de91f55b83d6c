//! The files plugin: move files in and out of the sandbox and look around.
//!
//! Link it into the bundle with `agentix::link_plugins!(agentix_files)`. The
//! remote functions below run in the sandbox; the [`transfer`] helpers run
//! on the host and drive them for files of any size with constant memory:
//!
//! ```no_run
//! # async fn demo(sandbox: &agentix::Sandbox) -> Result<(), Box<dyn std::error::Error>> {
//! agentix_files::transfer::upload_from(sandbox, "data.csv", "/work/data.csv").await?;
//! let entries = sandbox.remote(agentix_files::list, "/work".to_string()).await?;
//! agentix_files::transfer::download_to(sandbox, "/work/out.csv", "out.csv").await?;
//! # Ok(()) }
//! ```
//!
//! Every function fails with a [`FileError`] carrying the OS's reason and
//! the path; on the host it is `err.data_as::<FileError>()` of the call's
//! error (the transfer helpers hand it over as [`TransferError::File`]).
//! Uploads are atomic: the content goes to a hidden temporary file in the
//! target's directory and is renamed over the target only when complete.

mod entry;
mod error;
pub mod root;
pub mod transfer;
mod upload_journal;
mod uploads;

// In the root module, which `link_plugins!` links: temporary files a killed
// worker left are removed before the next one takes calls.
agentix::on_worker_start!(upload_journal::clean_left_over);

use std::path::Path;

use agentix::{Blob, Stream};
use tokio::io::AsyncReadExt as _;

pub use entry::{EntryType, FileStat};
pub use error::{FileError, FileErrorKind};
pub use transfer::TransferError;
pub use uploads::{IDLE_LIMIT, MAX_UPLOAD_BYTES};

agentix::plugin_crate!();

/// Bytes per chunk of a download (and of an upload the helpers make).
pub const CHUNK: usize = 1 << 20;

/// The facts about `path`, following symlinks.
#[agentix::remote]
pub async fn stat(path: String) -> Result<FileStat, FileError> {
    stat_of(path).await
}

/// The entries of the directory `dir`, sorted by name (symlinks are listed
/// as such, not followed).
#[agentix::remote]
pub async fn list(dir: String) -> Result<Vec<FileStat>, FileError> {
    blocking(move || {
        let (root, rel) = root::beneath(&dir)?;
        let read = root
            .read_dir(&rel)
            .map_err(|e| FileError::os("list", &dir, &e))?;
        let mut entries = Vec::new();
        for entry in read {
            let entry = entry.map_err(|e| FileError::os("list", &dir, &e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            // An entry removed while listing is simply not listed.
            if let Ok(meta) = entry.metadata() {
                entries.push(FileStat::new(name, &meta));
            }
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    })
    .await
}

/// Creates the directory `path` (and its missing parents with `parents`,
/// where an existing directory is fine too).
#[agentix::remote]
pub async fn mkdir(path: String, parents: bool) -> Result<(), FileError> {
    blocking(move || {
        let (root, rel) = root::beneath(&path)?;
        let made = if parents {
            root.create_dir_all(&rel)
        } else {
            root.create_dir(&rel)
        };
        made.map_err(|e| FileError::os("create the directory", &path, &e))
    })
    .await
}

/// Removes the file or empty directory `path`; with `recursive`, a directory
/// and everything in it.
#[agentix::remote]
pub async fn remove(path: String, recursive: bool) -> Result<(), FileError> {
    blocking(move || {
        let (root, rel) = root::beneath(&path)?;
        if rel == Path::new(".") {
            return Err(FileError::new(
                FileErrorKind::PermissionDenied,
                &path,
                format!("`{path}` is the files root itself, which is not removed"),
            ));
        }
        let meta = root
            .symlink_metadata(&rel)
            .map_err(|e| FileError::os("remove", &path, &e))?;
        let removed = match (meta.is_dir(), recursive) {
            (true, true) => root.remove_dir_all(&rel),
            (true, false) => root.remove_dir(&rel),
            (false, _) => root.remove_file(&rel),
        };
        removed.map_err(|e| FileError::os("remove", &path, &e))
    })
    .await
}

/// Writes `bytes` as the whole content of `path`, atomically; for content
/// that fits in one message (use [`transfer`] for anything larger).
#[agentix::remote]
pub async fn upload(path: String, bytes: Blob) -> Result<FileStat, FileError> {
    let id = uploads::open(&path, None)?;
    let size = bytes.len() as u64;
    if let Err(e) = uploads::write(id, 0, bytes.into_vec()).await {
        uploads::abort(id);
        return Err(e);
    }
    stat_of(uploads::commit(id, size).await?).await
}

/// Starts a chunked upload to `path` (with permission bits `mode`, or those
/// of the file it replaces, or the umask's); returns the upload's id.
#[agentix::remote]
pub async fn upload_open(path: String, mode: Option<u32>) -> Result<u64, FileError> {
    uploads::open(&path, mode)
}

/// Writes one chunk of upload `id` at `offset`; chunks may arrive in any
/// order and several at once.
#[agentix::remote]
pub async fn upload_chunk(id: u64, offset: u64, bytes: Blob) -> Result<(), FileError> {
    uploads::write(id, offset, bytes.into_vec()).await
}

/// Completes upload `id`: if exactly `size` bytes arrived, the file
/// replaces its target at once; otherwise nothing changes and it fails.
#[agentix::remote]
pub async fn upload_commit(id: u64, size: u64) -> Result<FileStat, FileError> {
    stat_of(uploads::commit(id, size).await?).await
}

/// Abandons upload `id` and removes its temporary file; the target is
/// untouched. An unknown id is not an error.
#[agentix::remote]
pub async fn upload_abort(id: u64) {
    uploads::abort(id);
}

/// The content of the file `path`, as chunks of up to [`CHUNK`] bytes.
#[agentix::remote]
pub fn download(path: String) -> impl Stream<Item = Result<Blob, FileError>> + Send {
    agentix::stream::unfold(Download::Start(path), |state| async move {
        match state {
            Download::Start(path) => match open_for_download(&path).await {
                Ok(file) => read_chunk(file, path).await,
                Err(e) => Some((Err(e), Download::Done)),
            },
            Download::Reading(file, path) => read_chunk(file, path).await,
            Download::Done => None,
        }
    })
}

enum Download {
    Start(String),
    Reading(tokio::fs::File, String),
    Done,
}

async fn open_for_download(path: &str) -> Result<tokio::fs::File, FileError> {
    let owned = path.to_owned();
    let file = blocking(move || {
        let (root, rel) = root::beneath(&owned)?;
        root.open(&rel)
            .map(|f| f.into_std())
            .map_err(|e| FileError::os("open", &owned, &e))
    })
    .await?;
    let file = tokio::fs::File::from_std(file);
    let meta = file
        .metadata()
        .await
        .map_err(|e| FileError::os("stat", path, &e))?;
    if meta.is_dir() {
        return Err(FileError::new(
            FileErrorKind::IsADirectory,
            path,
            format!("cannot download `{path}`: it is a directory"),
        ));
    }
    Ok(file)
}

async fn read_chunk(
    mut file: tokio::fs::File,
    path: String,
) -> Option<(Result<Blob, FileError>, Download)> {
    let mut chunk = Vec::with_capacity(CHUNK);
    while chunk.len() < CHUNK {
        // `take` bounds the read, so `chunk` never grows past its capacity.
        let room = (CHUNK - chunk.len()) as u64;
        match (&mut file).take(room).read_to_end(&mut chunk).await {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => return Some((Err(FileError::os("read", &path, &e)), Download::Done)),
        }
    }
    if chunk.is_empty() {
        return None;
    }
    Some((Ok(Blob::from(chunk)), Download::Reading(file, path)))
}

async fn stat_of(path: String) -> Result<FileStat, FileError> {
    blocking(move || {
        let (root, rel) = root::beneath(&path)?;
        let meta = root
            .metadata(&rel)
            .map_err(|e| FileError::os("stat", &path, &e))?;
        Ok(FileStat::new(file_name(&path), &meta))
    })
    .await
}

fn file_name(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.to_owned())
}

/// Runs filesystem work off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, FileError> + Send + 'static,
) -> Result<T, FileError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(FileError::new(
            FileErrorKind::Other,
            "",
            format!("the file operation failed: {e}"),
        ))
    })
}
