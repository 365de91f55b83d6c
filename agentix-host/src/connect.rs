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
}
