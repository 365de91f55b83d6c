//! What a caller can ask of one command: where, with what, for how long.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Bytes of output [`run`](crate::run) keeps per stream unless told otherwise.
///
/// Both streams at the default fit in one message with room to spare; for
/// more, raise it or use [`run_stream`](crate::run_stream), which has no cap.
pub const DEFAULT_OUTPUT_CAP: u64 = 4 << 20;

/// Options for one command; `BashOptions::default()` runs it in the worker's
/// directory with no stdin, no timeout and [`DEFAULT_OUTPUT_CAP`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BashOptions {
    /// Working directory; the worker's own when `None`.
    pub cwd: Option<String>,
    /// Variables added to (or overriding) the inherited environment.
    pub env: BTreeMap<String, String>,
    /// Bytes written to the command's stdin, which is then closed; with
    /// `None` stdin is `/dev/null`.
    #[serde(with = "serde_bytes")]
    pub stdin: Option<Vec<u8>>,
    /// Kill the command's whole process group after this many milliseconds.
    pub timeout_ms: Option<u64>,
    /// Bytes kept per output stream by `run` (the rest is read and counted,
    /// never left in the pipe); [`DEFAULT_OUTPUT_CAP`] when `None`.
    pub output_cap: Option<u64>,
    /// The shell that runs the command with `-c`; `bash` when `None`, or
    /// `/bin/sh` where there is no bash.
    pub shell: Option<String>,
}

impl BashOptions {
    /// The defaults (see [`BashOptions`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs the command in `dir`.
    pub fn cwd(mut self, dir: impl Into<String>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Sets the environment variable `key` for the command.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Feeds `bytes` to the command's stdin.
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }

    /// Kills the command's process group after `limit`.
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout_ms = Some(limit.as_millis().try_into().unwrap_or(u64::MAX));
        self
    }

    /// Keeps at most `bytes` of each output stream in the result.
    pub fn output_cap(mut self, bytes: u64) -> Self {
        self.output_cap = Some(bytes);
        self
    }

    /// Runs the command with `shell -c` instead of bash.
    pub fn shell(mut self, shell: impl Into<String>) -> Self {
        self.shell = Some(shell.into());
        self
    }
}
