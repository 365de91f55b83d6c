//! [`AuditLog`]: every connection a gateway's sandboxes asked for, one
//! JSON line ([`EgressRecord`]) each, appended to a file.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::egress_record::EgressRecord;

/// An append-only JSON-lines file of [`EgressRecord`]s.
pub struct AuditLog {
    file: Mutex<std::fs::File>,
    path: PathBuf,
    failed: AtomicU64,
}

impl AuditLog {
    /// Appends to `path`, creating it if it does not exist.
    pub fn create(path: impl AsRef<Path>) -> std::io::Result<Self> {
        let path = path.as_ref().to_owned();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        Ok(AuditLog {
            file: Mutex::new(file),
            path,
            failed: AtomicU64::new(0),
        })
    }

    /// The file it appends to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `record` as one line. One `write` of a whole line on an
    /// append-mode file: records of concurrent connections never
    /// interleave, and a line is small enough that writing it inline
    /// costs less than handing it to a writer.
    pub fn write(&self, record: &EgressRecord) {
        let Ok(mut line) = serde_json::to_vec(record) else {
            return;
        };
        line.push(b'\n');
        let written = self
            .file
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .write_all(&line);
        if let Err(e) = written {
            // Logged at the 1st, 2nd, 4th... failure, not every one.
            let failed = self.failed.fetch_add(1, Ordering::Relaxed) + 1;
            if failed.is_power_of_two() {
                tracing::warn!(
                    "egress audit log {}: {failed} record(s) not written: {e}",
                    self.path.display()
                );
            }
        }
    }
}
