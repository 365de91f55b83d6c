//! [`BuildError`]: why a bundle could not be built, in words a user acts on.

use std::path::PathBuf;

/// Why building or verifying a bundle failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A program the build runs (cargo, ldd) could not be run or failed.
    #[error("`{command}` failed: {why}")]
    Command {
        /// The command line.
        command: String,
        /// What it printed, or why it could not start.
        why: String,
    },
    /// A program needs a library that cannot be found on this machine.
    #[error("{program} needs {library}, which is not found on this machine (install it, or drop what needs it)")]
    Unresolved {
        /// The program or library that needs it.
        program: PathBuf,
        /// The library's name.
        library: String,
    },
    /// A tool a plugin declares is not on `PATH`.
    #[error("the tool `{tool}` (declared by {declared_by}) is not on PATH")]
    ToolMissing {
        /// The tool's name.
        tool: String,
        /// Which package declared it.
        declared_by: String,
    },
    /// The assembled bundle refers to something it does not contain.
    #[error("the bundle is incomplete: {0}")]
    Incomplete(String),
    /// An ELF file could not be read or rewritten.
    #[error("cannot {what} the ELF file {}: {why}", path.display())]
    Elf {
        /// What was being done (`read`, `rewrite`).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why not.
        why: String,
    },
    /// Reading or writing a file failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl BuildError {
    /// An I/O error about `path`.
    pub fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        BuildError::Io {
            what,
            path: path.into(),
            source,
        }
    }
}
