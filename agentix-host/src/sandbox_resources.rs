//! [`SandboxResources`]: what a provider keeps for a sandbox it started, as
//! the [`Sandbox`](crate::Sandbox) handle sees it.
//!
//! A provider outside this crate builds a handle with
//! [`Sandbox::from_parts`](crate::Sandbox::from_parts) from the server's
//! endpoint and one of these: the handle deletes the sandbox through it when
//! dropped or deleted, and reports a server that ended by itself with the
//! reason the provider gives.

use std::path::Path;

use agentix_wire::errors::RemoteError;
use futures_util::future::BoxFuture;

use crate::provider_error::ProviderError;
use crate::sandbox_state::SandboxState;
use crate::snapshot::{Snapshot, SnapshotSpec};

/// How to delete one sandbox, and what its provider can tell about it.
pub trait SandboxResources: Send + Sync + 'static {
    /// Starts deleting the sandbox at once (processes, containers, files)
    /// and resolves when it is gone. Called again, it deletes nothing more
    /// and resolves when the first deletion is done.
    fn shutdown(&self) -> BoxFuture<'static, ()>;

    /// Resolves, with the error calls should end with, once the sandbox's
    /// server has ended by itself; never, if the provider cannot tell.
    fn ended(&self) -> BoxFuture<'static, RemoteError> {
        Box::pin(std::future::pending())
    }

    /// That error, if the server has already ended.
    fn ended_now(&self) -> Option<RemoteError> {
        None
    }

    /// The server's process id, when it runs on this machine.
    fn server_pid(&self) -> Option<u32> {
        None
    }

    /// The sandbox's directory on this machine, if it has one.
    fn local_dir(&self) -> Option<&Path> {
        None
    }

    /// Captures the sandbox's state (its work is paused meanwhile, by
    /// [`Sandbox::snapshot`](crate::Sandbox::snapshot)) into a snapshot
    /// the provider keeps. The default: this provider cannot.
    fn snapshot<'a>(
        &'a self,
        state: SandboxState<'a>,
        spec: SnapshotSpec,
    ) -> BoxFuture<'a, Result<Snapshot, ProviderError>> {
        let _ = (state, spec);
        Box::pin(std::future::ready(Err(ProviderError::Backend {
            what: "snapshot a sandbox".into(),
            reason: "this provider does not take snapshots".into(),
        })))
    }
}
