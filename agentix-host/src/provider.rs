//! The [`Provider`] trait: where sandboxes come from.

use std::future::Future;

use crate::config::SandboxConfig;
use crate::sandbox::Sandbox;

/// Why a provider could not create or delete a sandbox.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The bundle binary does not exist or cannot be run.
    #[error("bundle `{path}` cannot be used: {reason}")]
    BadBundle {
        /// The configured bundle path.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The server process did not start listening.
    #[error("the sandbox server did not start: {reason}{}", tail_suffix(.output))]
    ServerStartFailed {
        /// What happened.
        reason: String,
        /// The last lines the server printed.
        output: String,
    },
    /// An operating-system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

fn tail_suffix(output: &str) -> String {
    if output.is_empty() {
        String::new()
    } else {
        format!("\nlast server output:\n{output}")
    }
}

/// Creates and deletes sandboxes.
pub trait Provider: Send + Sync {
    /// Starts a sandbox for `config`; it lives until deleted or dropped.
    fn create(
        &self,
        config: SandboxConfig,
    ) -> impl Future<Output = Result<Sandbox, ProviderError>> + Send;

    /// Starts a sandbox that is deleted when the returned handle is dropped,
    /// on every path out of the caller's scope (return, `?`, panic).
    fn session(
        &self,
        config: SandboxConfig,
    ) -> impl Future<Output = Result<Sandbox, ProviderError>> + Send {
        self.create(config)
    }
}
