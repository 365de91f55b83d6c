//! [`SandboxState`]: what a provider taking a snapshot is given of the
//! sandbox: its id, and its state as its server archives it (`GET
//! /state.tar`: the directories it was told hold the state).

use std::path::Path;
use std::time::Duration;

use agentix_wire::errors::RemoteError;

use crate::endpoint::Endpoint;

/// One sandbox's state, as its server serves it.
pub struct SandboxState<'a> {
    id: &'a str,
    endpoint: &'a Endpoint,
    timeout: Duration,
}

impl<'a> SandboxState<'a> {
    /// Sandbox `id`'s, from its server at `endpoint`, each step within
    /// `timeout`.
    pub(crate) fn new(id: &'a str, endpoint: &'a Endpoint, timeout: Duration) -> Self {
        SandboxState {
            id,
            endpoint,
            timeout,
        }
    }

    /// The sandbox's id.
    pub fn sandbox_id(&self) -> &str {
        self.id
    }

    /// Writes the state as one tar archive to the new file `to`; the
    /// archive's bytes. Pause the sandbox first for a consistent state.
    pub async fn download(&self, to: &Path) -> Result<u64, RemoteError> {
        crate::health::download(self.endpoint, "/state.tar", to, self.timeout).await
    }
}
