//! Why a command could not be started.
//!
//! A command that starts and fails is not an error: it is a result with a
//! non-zero exit code (127 for "command not found", from the shell). These
//! errors are for the cases where there is no command to report on.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Which part of starting the command failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BashErrorKind {
    /// The working directory is missing, not a directory, or not accessible.
    WorkingDirectory,
    /// The shell could not be executed.
    Shell,
    /// The options make no sense (a variable name with `=`, a NUL byte, ...).
    Options,
    /// The operating system refused to start the process.
    Spawn,
}

/// A command that could not be started; travels to the host with its fields
/// (`err.data_as::<BashError>()`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BashError {
    /// Which part failed.
    pub kind: BashErrorKind,
    /// What failed, for a human.
    pub message: String,
    /// The path involved (the working directory or the shell), if any.
    pub path: Option<String>,
    /// The operating system's error kind (`NotFound`, `PermissionDenied`, ...).
    pub os_kind: Option<String>,
}

impl BashError {
    pub(crate) fn options(message: impl Into<String>) -> Self {
        BashError {
            kind: BashErrorKind::Options,
            message: message.into(),
            path: None,
            os_kind: None,
        }
    }

    pub(crate) fn os(kind: BashErrorKind, what: &str, path: &str, e: &std::io::Error) -> Self {
        BashError {
            kind,
            message: format!("{what} `{path}`: {e}"),
            path: Some(path.to_owned()),
            os_kind: Some(format!("{:?}", e.kind())),
        }
    }
}

impl fmt::Display for BashError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for BashError {}
