//! Host-side helpers that move whole files through the files plugin's
//! remote functions, in chunks, with constant memory on both ends.
//!
//! Uploads read the local file a chunk at a time and keep [`IN_FLIGHT`]
//! chunk calls going at once (each carries its offset, so they may land in
//! any order); the sandbox commits with a rename only once every byte is
//! there. Downloads write the chunks of a flow-controlled stream to a
//! temporary file next to the local target and rename it at the end, so the
//! target is never half written on either side.

use std::io;
use std::path::{Path, PathBuf};

use agentix::{Blob, RemoteError, Sandbox, StreamExt as _};
use futures_util::TryStreamExt as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::{FileError, FileStat, CHUNK};

/// Chunk calls an upload keeps in flight.
///
/// With 4, the machine sat partly idle between chunks (a profile of the
/// bench's transfers showed both CPUs idle 39% of the time); with 8,
/// `files_upload_mb_per_s` went from 277 to 334 MB/s (medians of 4
/// alternating runs, 8 faster in each of 8 pairs). 16 moved no further and
/// held more memory.
pub const IN_FLIGHT: usize = 8;

/// Download chunks the sandbox may send ahead of the host's writes.
const DOWNLOAD_WINDOW: u64 = 8;

/// Why a transfer failed.
#[derive(Debug)]
pub enum TransferError {
    /// The sandbox's filesystem refused (not found, permission denied, ...).
    File(FileError),
    /// The call itself failed (connection lost, cancelled, worker died, ...).
    Remote(RemoteError),
    /// The host's own file could not be read or written.
    Local {
        /// The host path.
        path: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
}

impl TransferError {
    /// Turns an I/O error on the host path `path` into a `Local` error.
    fn local(path: &Path) -> impl Fn(io::Error) -> TransferError + Copy + '_ {
        move |source| TransferError::Local {
            path: path.to_owned(),
            source,
        }
    }
}

impl From<RemoteError> for TransferError {
    fn from(e: RemoteError) -> Self {
        match e.data_as::<FileError>() {
            Ok(file) if e.type_name.ends_with("FileError") => TransferError::File(file),
            _ => TransferError::Remote(e),
        }
    }
}

impl std::fmt::Display for TransferError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TransferError::File(e) => write!(f, "in the sandbox: {e}"),
            TransferError::Remote(e) => write!(f, "{e}"),
            TransferError::Local { path, source } => {
                write!(f, "on the host: `{}`: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for TransferError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TransferError::File(e) => Some(e),
            TransferError::Remote(e) => Some(e),
            TransferError::Local { source, .. } => Some(source),
        }
    }
}

/// Uploads `bytes` as the file `remote`: one call if it fits in a chunk,
/// chunked otherwise.
pub async fn upload_bytes(
    sandbox: &Sandbox,
    bytes: &[u8],
    remote: &str,
) -> Result<FileStat, TransferError> {
    if bytes.len() <= CHUNK {
        let blob = Blob::from(bytes.to_vec());
        return Ok(sandbox
            .remote(crate::upload, (remote.to_owned(), blob))
            .await?);
    }
    // Chunks by index: a closure taking a borrowed slice would make this
    // future non-Send (a higher-ranked lifetime the compiler cannot prove
    // for tokio::spawn).
    let chunk_at = move |start: usize| {
        let end = (start + CHUNK).min(bytes.len());
        Ok::<_, TransferError>((start as u64, bytes[start..end].to_vec()))
    };
    let chunks = futures_util::stream::iter((0..bytes.len()).step_by(CHUNK).map(chunk_at));
    upload_chunks(sandbox, remote, None, bytes.len() as u64, chunks).await
}

/// Uploads the host file `local` as the file `remote`, keeping its
/// permission bits.
pub async fn upload_from(
    sandbox: &Sandbox,
    local: impl AsRef<Path>,
    remote: &str,
) -> Result<FileStat, TransferError> {
    use std::os::unix::fs::PermissionsExt as _;
    let local = local.as_ref();
    let file = tokio::fs::File::open(local)
        .await
        .map_err(TransferError::local(local))?;
    let meta = file.metadata().await.map_err(TransferError::local(local))?;
    let mode = meta.permissions().mode() & 0o7777;
    let chunks =
        futures_util::stream::try_unfold((file, 0u64), move |(mut file, offset)| async move {
            let mut chunk = Vec::with_capacity(CHUNK);
            (&mut file)
                .take(CHUNK as u64)
                .read_to_end(&mut chunk)
                .await
                .map_err(TransferError::local(local))?;
            if chunk.is_empty() {
                return Ok(None);
            }
            let next = offset + chunk.len() as u64;
            Ok(Some(((offset, chunk), (file, next))))
        });
    upload_chunks(sandbox, remote, Some(mode), meta.len(), chunks).await
}

async fn upload_chunks(
    sandbox: &Sandbox,
    remote: &str,
    mode: Option<u32>,
    size: u64,
    chunks: impl futures_util::Stream<Item = Result<(u64, Vec<u8>), TransferError>>,
) -> Result<FileStat, TransferError> {
    let id = sandbox
        .remote(crate::upload_open, (remote.to_owned(), mode))
        .await?;
    let written = chunks
        .map_ok(|(offset, chunk)| async move {
            sandbox
                .remote(crate::upload_chunk, (id, offset, Blob::from(chunk)))
                .await
                .map_err(TransferError::from)
        })
        .try_buffer_unordered(IN_FLIGHT)
        .try_collect::<()>()
        .await;
    let outcome = match written {
        // A local file that changed size while being read is refused by
        // the size check at commit rather than stored half old, half new.
        Ok(()) => sandbox
            .remote(crate::upload_commit, (id, size))
            .await
            .map_err(TransferError::from),
        Err(e) => Err(e),
    };
    if outcome.is_err() {
        let _ = sandbox.remote(crate::upload_abort, (id,)).await;
    }
    outcome
}

/// Starts the download of the sandbox file `remote`, with room for
/// [`DOWNLOAD_WINDOW`] chunks ahead of the reader.
async fn download_chunks(
    sandbox: &Sandbox,
    remote: &str,
) -> Result<agentix::CallStream<Blob>, RemoteError> {
    sandbox
        .stream(crate::download, (remote.to_owned(),))
        .window(DOWNLOAD_WINDOW, DOWNLOAD_WINDOW * CHUNK as u64)
        .await
}

/// The whole content of the sandbox file `remote`, in memory.
pub async fn download_bytes(sandbox: &Sandbox, remote: &str) -> Result<Vec<u8>, TransferError> {
    let mut chunks = download_chunks(sandbox, remote).await?;
    let mut bytes = Vec::new();
    while let Some(chunk) = chunks.next().await {
        bytes.extend_from_slice(&chunk?);
    }
    Ok(bytes)
}

/// Downloads the sandbox file `remote` to the host path `local`, replacing
/// it only once the whole content arrived; returns the bytes written.
pub async fn download_to(
    sandbox: &Sandbox,
    remote: &str,
    local: impl AsRef<Path>,
) -> Result<u64, TransferError> {
    let local = local.as_ref();
    let name = local.file_name().map(|n| n.to_string_lossy().into_owned());
    // Unpredictable, and created only if nothing (a planted symlink
    // included) is there yet: see `download_into`.
    let temp = local.with_file_name(format!(
        ".{}.agentix-download-{}-{}",
        name.unwrap_or_default(),
        std::process::id(),
        agentix_unique()
    ));
    let outcome = download_into(sandbox, remote, &temp).await;
    let outcome = match outcome {
        Ok(n) => tokio::fs::rename(&temp, local)
            .await
            .map(|()| n)
            .map_err(TransferError::local(local)),
        Err(e) => Err(e),
    };
    if outcome.is_err() {
        let _ = tokio::fs::remove_file(&temp).await;
    }
    outcome
}

async fn download_into(sandbox: &Sandbox, remote: &str, temp: &Path) -> Result<u64, TransferError> {
    let local_err = TransferError::local(temp);
    let mut chunks = download_chunks(sandbox, remote).await?;
    let mut file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(temp)
        .await
        .map_err(local_err)?;
    let mut written = 0u64;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk?;
        file.write_all(&chunk).await.map_err(local_err)?;
        written += chunk.len() as u64;
    }
    file.flush().await.map_err(local_err)?;
    Ok(written)
}

/// A number no other download of this process uses, hard to guess from
/// outside (nanoseconds of the clock, and a counter).
fn agentix_unique() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{nanos:x}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}
