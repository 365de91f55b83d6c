//! [`Endpoint`]: where a sandbox server listens, the token it wants, and
//! how this host dials it.
//!
//! A local sandbox's server listens on a Unix socket beside its TCP port;
//! the host dials the socket (no TCP stack, no packet filter on loopback)
//! and third-party clients the port. The socket file lies in the sandbox's
//! directory, where code in the sandbox can remove or replace it, so the
//! host checks which process holds the socket before it sends its token,
//! and uses the port otherwise.

use std::io;

use serde_json::json;

use crate::sio::server_stream::ServerStream;

/// Where a sandbox server listens and the token it wants.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    /// `host:port` of the server.
    pub addr: String,
    /// A Unix socket the same server also listens on, which this host
    /// dials instead of `addr` when it is set.
    pub local: Option<LocalSocket>,
    /// The sandbox token.
    pub token: String,
}

/// A server's Unix socket on the host's machine, and the server process
/// that must be at its other end.
#[derive(Debug, Clone)]
pub(crate) struct LocalSocket {
    /// `unix:PATH`.
    pub addr: String,
    /// The server's process id.
    pub server_pid: u32,
}

impl Endpoint {
    /// The connect payload every namespace wants.
    pub(crate) fn auth(&self) -> serde_json::Value {
        json!({ "token": self.token })
    }

    /// Connects to the local socket if there is one and the server holds
    /// it, else to `addr`; returns the stream and the address it reached.
    pub(crate) async fn dial(&self) -> io::Result<(ServerStream, &str)> {
        if let Some(local) = &self.local {
            match ServerStream::connect_to_process(&local.addr, local.server_pid).await {
                Ok(stream) => return Ok((stream, &local.addr)),
                Err(e) => tracing::warn!(
                    local = local.addr,
                    "not using the sandbox's local socket ({e}); connecting over TCP"
                ),
            }
        }
        let stream = ServerStream::connect(&self.addr).await?;
        Ok((stream, &self.addr))
    }
}
