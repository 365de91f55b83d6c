//! [`PortForward`]: a TCP port on the host's 127.0.0.1 that leads to an
//! isolated sandbox's Unix socket.
//!
//! An isolated sandbox's server listens in a network namespace of its own,
//! where no host client can reach its port. The host's own connections use
//! the server's Unix socket in the sandbox directory; this keeps
//! `Sandbox::addr()` a TCP address for third-party clients (a stock
//! Socket.IO client, `curl /health`) by copying each connection's bytes to
//! a fresh connection on that socket, once the socket is shown to be the
//! server's: sandbox code can replace the socket file with a listener of
//! its own, which must never see a client's bytes (its token first).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::{TcpListener, UnixStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

/// Most connections forwarded at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 256;

/// A forwarding port; dropping it closes the port and every connection.
#[derive(Debug)]
pub(crate) struct PortForward {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl PortForward {
    /// Listens on a free port of 127.0.0.1 and forwards to `socket`, when
    /// process `server` (as the host numbers it) holds it.
    pub(crate) async fn start(socket: PathBuf, server: u32) -> std::io::Result<PortForward> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(accept(listener, socket, server));
        Ok(PortForward { addr, task })
    }

    /// The host's end: `127.0.0.1:<port>`.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for PortForward {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept(listener: TcpListener, socket: PathBuf, server: u32) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let mut client = match listener.accept().await {
            Ok((client, _)) => client,
            Err(_) => {
                // Out of descriptors, say: try again soon, not in a spin.
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        // Reap the finished ones so the set holds live connections only.
        while connections.try_join_next().is_some() {}
        let socket = socket.clone();
        connections.spawn(async move {
            let _slot = slot;
            let _ = client.set_nodelay(true);
            let Ok(mut upstream) = UnixStream::connect(&socket).await else {
                return;
            };
            let holder = upstream.peer_cred().ok().and_then(|cred| cred.pid());
            if holder != Some(server as i32) {
                tracing::warn!(
                    socket = %socket.display(),
                    "the sandbox's socket is not its server's (held by {holder:?}); \
                     a client of its port was turned away"
                );
                return;
            }
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        });
    }
}
