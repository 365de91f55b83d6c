//! The one error every files function returns: what the OS said, and where.

use std::fmt;
use std::io;

use serde::{Deserialize, Serialize};

/// The operating system's reason, as a value to match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileErrorKind {
    /// No such file or directory.
    NotFound,
    /// The sandbox user may not do this.
    PermissionDenied,
    /// Something is already at that path.
    AlreadyExists,
    /// A directory where a file was expected.
    IsADirectory,
    /// A file where a directory was expected.
    NotADirectory,
    /// The directory still has entries (use a recursive remove).
    DirectoryNotEmpty,
    /// The disk is full.
    StorageFull,
    /// The filesystem is read-only.
    ReadOnlyFilesystem,
    /// The request itself is wrong (an unknown upload, a size mismatch, ...).
    InvalidInput,
    /// Anything else; the message has the details.
    Other,
}

impl From<io::ErrorKind> for FileErrorKind {
    fn from(kind: io::ErrorKind) -> Self {
        match kind {
            io::ErrorKind::NotFound => FileErrorKind::NotFound,
            io::ErrorKind::PermissionDenied => FileErrorKind::PermissionDenied,
            io::ErrorKind::AlreadyExists => FileErrorKind::AlreadyExists,
            io::ErrorKind::IsADirectory => FileErrorKind::IsADirectory,
            io::ErrorKind::NotADirectory => FileErrorKind::NotADirectory,
            io::ErrorKind::DirectoryNotEmpty => FileErrorKind::DirectoryNotEmpty,
            io::ErrorKind::StorageFull => FileErrorKind::StorageFull,
            io::ErrorKind::ReadOnlyFilesystem => FileErrorKind::ReadOnlyFilesystem,
            io::ErrorKind::InvalidInput => FileErrorKind::InvalidInput,
            _ => FileErrorKind::Other,
        }
    }
}

/// A failed file operation; reaches the host with its fields, so
/// `err.data_as::<FileError>()` gives it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileError {
    /// The OS's reason.
    pub kind: FileErrorKind,
    /// The path the operation failed on.
    pub path: String,
    /// What failed, for a human.
    pub message: String,
}

impl FileError {
    /// The error for `op` failing on `path` with the OS error `e`.
    pub(crate) fn os(op: &str, path: &str, e: &io::Error) -> Self {
        FileError {
            kind: e.kind().into(),
            path: path.to_owned(),
            message: format!("cannot {op} `{path}`: {e}"),
        }
    }

    /// An error of `kind` on `path` that the OS did not raise.
    pub(crate) fn new(kind: FileErrorKind, path: &str, message: impl Into<String>) -> Self {
        FileError {
            kind,
            path: path.to_owned(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FileError {}
