//! The journal of temporary upload files, so that a worker cleans up what
//! a killed one left behind.
//!
//! Every upload's temporary file is recorded, NUL-terminated, in
//! `uploads.journal` in the sandbox's state directory before the file is
//! created. When a worker starts, it removes every recorded file that is
//! still there and empties the journal; so does the last upload in progress
//! when it ends. Without a trusted state directory there is no journal, and
//! only abandoned uploads are cleaned (after their idle limit).

use std::io::Write as _;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

/// Marks the names of temporary upload files: nothing else is removed.
pub(crate) const TEMP_MARK: &str = ".agentix-upload-";

fn journal() -> Option<PathBuf> {
    Some(agentix::state_dir()?.join("uploads.journal"))
}

/// Records `temp` before it is created.
pub(crate) fn record(temp: &Path) {
    let Some(path) = journal() else {
        return;
    };
    let opened = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path);
    if let Ok(mut file) = opened {
        let mut line = temp.as_os_str().as_bytes().to_vec();
        line.push(0);
        let _ = file.write_all(&line);
    }
}

/// Empties the journal (no upload is in progress).
pub(crate) fn clear() {
    if let Some(path) = journal() {
        let _ = std::fs::write(path, b"");
    }
}

/// Removes the temporary files a previous worker left, then empties the
/// journal; run when a worker starts.
pub(crate) fn clean_left_over() {
    let Some(path) = journal() else {
        return;
    };
    let Ok(recorded) = std::fs::read(&path) else {
        return;
    };
    for entry in recorded.split(|&b| b == 0).filter(|e| !e.is_empty()) {
        let temp = Path::new(std::ffi::OsStr::from_bytes(entry));
        let ours = temp
            .file_name()
            .is_some_and(|n| n.to_string_lossy().contains(TEMP_MARK));
        if ours {
            crate::root::remove_beneath(temp);
        }
    }
    clear();
}
