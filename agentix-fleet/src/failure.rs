//! [`Failure`] and [`FailureKind`]: why an attempt failed, in classes a
//! pool acts on and a user can match: the task's own error is final; a
//! sandbox that died, a provider that refused and an attempt's deadline
//! are the infrastructure's, and the task runs again on a fresh sandbox.

use agentix_host::ProviderError;
use agentix_wire::errors::{ErrorKind, RemoteError};
use serde::{Deserialize, Serialize};

/// Which class a failure is in; what the pool does about it follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The task's own failure: the remote function returned `Err`,
    /// panicked, or was given arguments it cannot take. Never retried.
    Task,
    /// The sandbox died under the task: its worker or server exited (an OOM
    /// kill among them), the connection or the call was lost. Retried on a
    /// fresh sandbox.
    SandboxDied,
    /// The provider failed to start a sandbox: an engine error, a quota, an
    /// overload, no file descriptors left. Retried.
    Provider,
    /// The provider can never start this sandbox: the bundle, the isolation
    /// or the configuration is wrong. Not retried.
    Setup,
    /// The attempt's deadline passed (retried while the task's own deadline
    /// leaves time) or the task's (final).
    Deadline,
}

impl FailureKind {
    /// Whether a task that failed so runs again on a fresh sandbox.
    pub fn retried(self) -> bool {
        matches!(
            self,
            FailureKind::SandboxDied | FailureKind::Provider | FailureKind::Deadline
        )
    }

    /// The class of a call's error.
    pub fn of_call(error: &RemoteError) -> FailureKind {
        match error.kind {
            ErrorKind::Raised
            | ErrorKind::Panic
            | ErrorKind::UnknownTarget
            | ErrorKind::BadArguments
            | ErrorKind::TypeMismatch
            | ErrorKind::PayloadTooLarge
            | ErrorKind::Cancelled => FailureKind::Task,
            ErrorKind::Timeout => FailureKind::Deadline,
            ErrorKind::AuthRejected => FailureKind::Setup,
            _ => FailureKind::SandboxDied,
        }
    }

    /// The class of a provider's refusal to start a sandbox.
    pub fn of_start(error: &ProviderError) -> FailureKind {
        match error {
            ProviderError::BadBundle { .. }
            | ProviderError::IsolationRefused { .. }
            | ProviderError::UnknownProvider { .. }
            | ProviderError::DuplicateProvider { .. } => FailureKind::Setup,
            _ => FailureKind::Provider,
        }
    }
}

/// One failed attempt, or the task's final failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// Its class.
    pub kind: FailureKind,
    /// The call's error kind, when a call failed (`Raised`, `WorkerExited`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorKind>,
    /// What happened, for a human.
    pub message: String,
    /// The sandbox it happened in, when one had started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
}

impl Failure {
    /// A call's error in sandbox `sandbox`.
    pub fn of_call(error: &RemoteError, sandbox: &str) -> Failure {
        Failure {
            kind: FailureKind::of_call(error),
            error: Some(error.kind),
            message: error.to_string(),
            sandbox: Some(sandbox.to_owned()),
        }
    }

    /// A provider's refusal to start a sandbox.
    pub fn of_start(error: &ProviderError) -> Failure {
        Failure {
            kind: FailureKind::of_start(error),
            error: None,
            message: error.to_string(),
            sandbox: None,
        }
    }

    /// The pool's setup of new sandbox `sandbox` failed with `error`: what
    /// the sandbox's own code refused (`Raised`, a panic) is a `Setup`
    /// failure, not retried; a sandbox that died meanwhile is retried.
    pub fn of_sandbox_setup(error: &RemoteError, sandbox: &str) -> Failure {
        let kind = match FailureKind::of_call(error) {
            FailureKind::Task => FailureKind::Setup,
            other => other,
        };
        Failure {
            kind,
            error: Some(error.kind),
            message: format!("the pool's setup of a new sandbox failed: {error}"),
            sandbox: Some(sandbox.to_owned()),
        }
    }

    /// A deadline that passed in sandbox `sandbox`.
    pub fn deadline(what: &str, sandbox: &str) -> Failure {
        Failure {
            kind: FailureKind::Deadline,
            error: Some(ErrorKind::Timeout),
            message: what.to_owned(),
            sandbox: Some(sandbox.to_owned()),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `EMFILE`, too many open files, on Linux.
    fn libc_emfile() -> i32 {
        24
    }

    #[test]
    fn a_raised_error_is_the_tasks_and_a_dead_worker_the_sandboxs() {
        let raised = RemoteError::new(ErrorKind::Raised, "division by zero");
        assert_eq!(FailureKind::of_call(&raised), FailureKind::Task);
        assert!(!FailureKind::Task.retried());
        for kind in [
            ErrorKind::WorkerExited,
            ErrorKind::ServerExited,
            ErrorKind::ConnectionLost,
            ErrorKind::CallLost,
            ErrorKind::Degraded,
        ] {
            let died = RemoteError::new(kind, "gone");
            assert_eq!(FailureKind::of_call(&died), FailureKind::SandboxDied);
        }
        assert!(FailureKind::SandboxDied.retried());
    }

    #[test]
    fn fd_exhaustion_is_retried_and_a_bad_bundle_is_not() {
        let fds = ProviderError::Io {
            what: "cannot start the sandbox's server".into(),
            source: std::io::Error::from_raw_os_error(libc_emfile()),
        };
        assert_eq!(FailureKind::of_start(&fds), FailureKind::Provider);
        let missing = ProviderError::BadBundle {
            path: "b".into(),
            reason: "no such file".into(),
        };
        assert_eq!(FailureKind::of_start(&missing), FailureKind::Setup);
        let engine = ProviderError::Backend {
            what: "create".into(),
            reason: "engine overloaded".into(),
        };
        assert_eq!(FailureKind::of_start(&engine), FailureKind::Provider);
    }
}
