//! What a command produced: the collected result of `run` and the events of
//! `run_stream`.

use serde::{Deserialize, Serialize};

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BashExit {
    /// The exit code, when the shell exited on its own.
    pub code: Option<i32>,
    /// The signal that killed the shell, when one did.
    pub signal: Option<i32>,
    /// Whether the timeout killed the command's process group.
    pub timed_out: bool,
}

impl BashExit {
    /// Whether the command exited with code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// The outcome of [`run`](crate::run): how the command ended and what it wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BashResult {
    /// The exit code, when the shell exited on its own.
    pub exit_code: Option<i32>,
    /// The signal that killed the shell, when one did.
    pub signal: Option<i32>,
    /// Whether the timeout killed the command's process group.
    pub timed_out: bool,
    /// What the command wrote to stdout, up to the output cap; raw bytes.
    #[serde(with = "serde_bytes")]
    pub stdout: Vec<u8>,
    /// What the command wrote to stderr, up to the output cap; raw bytes.
    #[serde(with = "serde_bytes")]
    pub stderr: Vec<u8>,
    /// Bytes the command wrote to stdout in all, kept or not.
    pub stdout_bytes: u64,
    /// Bytes the command wrote to stderr in all, kept or not.
    pub stderr_bytes: u64,
    /// Whether stdout was cut at the output cap.
    pub stdout_truncated: bool,
    /// Whether stderr was cut at the output cap.
    pub stderr_truncated: bool,
    /// Wall time from start to exit, in milliseconds.
    pub duration_ms: u64,
}

impl BashResult {
    /// Whether the command exited with code 0.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0)
    }

    /// Stdout as text; invalid UTF-8 becomes U+FFFD.
    pub fn stdout_lossy(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Stderr as text; invalid UTF-8 becomes U+FFFD.
    pub fn stderr_lossy(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// One thing that happened while a streamed command ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BashEvent {
    /// A chunk of stdout, as it was read (not line-buffered).
    Stdout(#[serde(with = "serde_bytes")] Vec<u8>),
    /// A chunk of stderr, as it was read.
    Stderr(#[serde(with = "serde_bytes")] Vec<u8>),
    /// The command ended; always the last event.
    Exit(BashExit),
}
