//! [`SandboxLogFile`]: `$AGENTIX_LOG_DIR/sandbox-<worker-id>.log`.
//!
//! Both the worker (its `tracing`/`log` records) and the server (the
//! worker's stdout and stderr lines) append to it, whole lines per write with
//! `O_APPEND`, so what a sandbox logged stays on disk inside it even when no
//! host was connected or the worker was killed.
//!
//! The directory is trusted only if it is a real directory (not a symlink)
//! owned by this user that nobody else may write, and files are opened
//! without following a symlink: a shared, pre-creatable directory such as
//! `/tmp/agentix` could otherwise point the sandbox's output at any file
//! the user can write. (The local provider puts it in the sandbox's own
//! private directory, removed with the sandbox.)

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;

use crate::log_record::LogRecord;

/// Environment variable naming the directory for sandbox log files.
pub const ENV_LOG_DIR: &str = "AGENTIX_LOG_DIR";
/// Where log files go when `AGENTIX_LOG_DIR` is not set.
pub const DEFAULT_LOG_DIR: &str = "/tmp/agentix";

/// The log directory from the environment: `AGENTIX_LOG_DIR`, empty to
/// disable, unset for the default.
pub fn dir_from_env() -> Option<PathBuf> {
    match std::env::var_os(ENV_LOG_DIR) {
        Some(dir) if dir.is_empty() => None,
        Some(dir) => Some(dir.into()),
        None => Some(DEFAULT_LOG_DIR.into()),
    }
}

/// The sandbox's log directory, made if missing, if it is set and trusted:
/// the place for other state of the sandbox that must outlive a worker.
pub fn private_dir() -> Option<PathBuf> {
    let dir = dir_from_env()?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .ok()?;
    check_private_dir(&dir).ok()?;
    Some(dir)
}

/// Refuses `dir` unless it is a directory of this user that nobody else may
/// write (planting a symlink in it takes writing it).
fn check_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(dir)?;
    // SAFETY: geteuid has no failure mode and touches no memory.
    let me = unsafe { libc::geteuid() };
    let why = if !meta.file_type().is_dir() {
        "it is not a directory (a symlink is not followed)"
    } else if meta.uid() != me {
        "another user owns it"
    } else if meta.mode() & 0o022 != 0 {
        "others may write it"
    } else {
        return Ok(());
    };
    Err(std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        format!("refusing the log directory {}: {why}", dir.display()),
    ))
}

/// The log file of the worker that produced the records being appended.
pub struct SandboxLogFile {
    dir: Option<PathBuf>,
    current: Option<(String, std::fs::File)>,
}

impl SandboxLogFile {
    /// Appends under `dir` (none: appends nothing).
    pub fn new(dir: Option<PathBuf>) -> Self {
        SandboxLogFile { dir, current: None }
    }

    /// Appends `records`, one line each, to their worker's file.
    pub fn append(&mut self, records: &[LogRecord]) {
        let Some(dir) = self.dir.clone() else { return };
        let mut text = String::new();
        for r in records {
            let switch = self
                .current
                .as_ref()
                .is_none_or(|(id, _)| *id != r.worker_id);
            if switch {
                self.flush(&mut text);
                let path = dir.join(format!("sandbox-{}.log", file_safe(&r.worker_id)));
                // Logs may hold secrets: private directory, private files.
                let opened = std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&dir)
                    .and_then(|()| check_private_dir(&dir))
                    .and_then(|()| {
                        std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .mode(0o600)
                            .custom_flags(libc::O_NOFOLLOW)
                            .open(&path)
                    });
                match opened {
                    Ok(f) => self.current = Some((r.worker_id.clone(), f)),
                    Err(e) => {
                        eprintln!(
                            "agentix: cannot open the sandbox log file {}: {e}",
                            path.display()
                        );
                        self.dir = None;
                        return;
                    }
                }
            }
            r.write_line(&mut text);
            text.push('\n');
        }
        self.flush(&mut text);
    }

    fn flush(&mut self, text: &mut String) {
        if let Some((_, f)) = &mut self.current {
            if !text.is_empty() {
                if let Err(e) = f.write_all(text.as_bytes()) {
                    eprintln!("agentix: cannot write the sandbox log file: {e}");
                }
            }
        }
        text.clear();
    }
}

fn file_safe(id: &str) -> String {
    let id: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if id.is_empty() {
        "unknown".to_owned()
    } else {
        id
    }
}
