//! What the files plugin says about a path: its type, size, mode and time.

use cap_std::fs::{Metadata, MetadataExt as _};

use serde::{Deserialize, Serialize};

/// What kind of thing a path is (symlinks are not followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EntryType {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A socket, fifo or device.
    Other,
}

/// The facts about one path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStat {
    /// The file name (the last path component).
    pub name: String,
    /// File, directory, symlink or other.
    pub entry_type: EntryType,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits (`0o644`), without the file type.
    pub mode: u32,
    /// Last modification, in milliseconds since the Unix epoch.
    pub mtime_ms: i64,
}

impl FileStat {
    pub(crate) fn new(name: String, meta: &Metadata) -> Self {
        let ft = meta.file_type();
        let entry_type = if ft.is_symlink() {
            EntryType::Symlink
        } else if ft.is_dir() {
            EntryType::Dir
        } else if ft.is_file() {
            EntryType::File
        } else {
            EntryType::Other
        };
        FileStat {
            name,
            entry_type,
            size: meta.len(),
            mode: meta.mode() & 0o7777,
            mtime_ms: meta.mtime() * 1000 + meta.mtime_nsec() / 1_000_000,
        }
    }
}
