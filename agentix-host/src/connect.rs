//! [`Connect`]: what a call needs of the sandbox it is made on, so that
//! calls and streams sit below the [`Sandbox`](crate::Sandbox) handle that
//! makes them instead of importing it.

use std::sync::Arc;
use std::time::Duration;

use agentix_actors::errors::RemoteError;
use futures_util::future::BoxFuture;

use crate::connection::RpcConnection;

/// A sandbox's `/rpc` connection, opened on demand, and its call defaults.
pub trait Connect: Sync {
    /// The live connection, opened (and every namespace joined) if needed.
    fn connection(&self) -> BoxFuture<'_, Result<Arc<RpcConnection>, RemoteError>>;

    /// The deadline of unary calls that set none.
    fn call_timeout(&self) -> Option<Duration>;

    /// The error a call that lost its connection ends with: `lost`, or why
    /// the server ended when it did (the connection's reset can reach the
    /// host before the provider's word that the sandbox is gone).
    fn why_lost(&self, lost: RemoteError) -> BoxFuture<'_, RemoteError> {
        Box::pin(std::future::ready(lost))
    }
}
