//! [`Connect`]: what a call needs of the sandbox it is made on, so that
//! calls and streams sit below the [`Sandbox`](crate::Sandbox) handle that
//! makes them instead of importing it.

use std::sync::Arc;
use std::time::Duration;

use agentix_wire::errors::RemoteError;
use futures_util::future::BoxFuture;

use crate::connection::RpcConnection;

/// A sandbox's `/rpc` connection, opened on demand, and its call defaults.
pub(crate) trait Connect: Sync {
    /// The live connection, opened (and every namespace joined) if needed.
    fn connection(&self) -> BoxFuture<'_, Result<Arc<RpcConnection>, RemoteError>>;

    /// The deadline of unary calls that set none.
    fn call_timeout(&self) -> Option<Duration>;

    /// Resolves with why the sandbox's server ended, once it has; `None`
    /// when its provider cannot tell.
    fn server_ended(&self) -> Option<BoxFuture<'static, RemoteError>> {
        None
    }

    /// The error a call that lost its connection ends with: `lost`, or why
    /// the server ended when it did (the connection's reset can reach the
    /// host before the provider's word that the sandbox is gone).
    fn why_lost(&self, lost: RemoteError) -> BoxFuture<'static, RemoteError> {
        explain_lost(lost, self.server_ended())
    }
}

/// How long a call whose connection was lost waits for the provider to say
/// whether the server ended, so that it ends with that cause
/// (`ServerExited`, an OOM kill) rather than with the reset it saw first.
const ENDED_GRACE: Duration = Duration::from_secs(2);

/// `lost`, or what `server_ended` resolves with within [`ENDED_GRACE`].
pub(crate) fn explain_lost(
    lost: RemoteError,
    server_ended: Option<BoxFuture<'static, RemoteError>>,
) -> BoxFuture<'static, RemoteError> {
    Box::pin(async move {
        match server_ended {
            Some(ended) => tokio::time::timeout(ENDED_GRACE, ended)
                .await
                .unwrap_or(lost),
            None => lost,
        }
    })
}
