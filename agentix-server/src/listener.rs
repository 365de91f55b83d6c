//! [`Listener`]: where the server takes connections: a TCP port, or a Unix
//! socket for a sandbox with no network at all (a container on network
//! `none` is reached through a socket on a mounted directory) or for a host
//! on the same machine (beside the TCP port).

use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agentix_wire::quiet_unix_stream::QuietUnixStream;
use agentix_wire::send_buffer::widen_send_buffer;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};

use crate::stall_limit::StallLimit;

/// A bound listening socket.
pub(crate) enum Listener {
    /// A TCP port.
    Tcp(TcpListener),
    /// A Unix socket at this path.
    Unix(UnixListener, PathBuf),
}

/// One accepted connection, as hyper serves it.
pub(crate) trait Connection: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Connection for T {}

impl Listener {
    /// Binds the Unix socket `unix` if given, else `host:port`.
    pub(crate) async fn bind(
        host: IpAddr,
        port: u16,
        unix: Option<&Path>,
    ) -> Result<Listener, String> {
        match unix {
            Some(path) => Listener::bind_unix(path),
            None => TcpListener::bind((host, port))
                .await
                .map(Listener::Tcp)
                .map_err(|e| format!("cannot bind {host}:{port}: {e}")),
        }
    }

    /// Binds the Unix socket at `path`, replacing one a dead server left.
    pub(crate) fn bind_unix(path: &Path) -> Result<Listener, String> {
        // A socket left by a server that died would make bind fail.
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot replace {}: {e}", path.display())),
        }
        let listener =
            UnixListener::bind(path).map_err(|e| format!("cannot bind {}: {e}", path.display()))?;
        // The host may run as another user than the sandbox; the token, not
        // the file mode, decides who is served.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
            .map_err(|e| format!("cannot open {} to the host: {e}", path.display()))?;
        Ok(Listener::Unix(listener, path.to_owned()))
    }

    /// The address hosts dial, as the ready line reports it: `ip:port`, or
    /// `unix:PATH`.
    pub(crate) fn addr(&self) -> Result<String, String> {
        match self {
            Listener::Tcp(l) => l
                .local_addr()
                .map(|a| a.to_string())
                .map_err(|e| e.to_string()),
            Listener::Unix(_, path) => Ok(format!("unix:{}", path.display())),
        }
    }

    /// The next connection; it ends once a write to its peer has made no
    /// progress for `stall_limit` (see [`StallLimit`]).
    pub(crate) async fn accept(
        &self,
        stall_limit: Duration,
    ) -> std::io::Result<TokioIo<StallLimit<Box<dyn Connection>>>> {
        let stream: Box<dyn Connection> = match self {
            Listener::Tcp(l) => {
                let (stream, _) = l.accept().await?;
                // Small packets must not wait for the peer's delayed ACK.
                let _ = stream.set_nodelay(true);
                widen_send_buffer(&stream);
                Box::new(stream)
            }
            Listener::Unix(l, _) => {
                let stream = l.accept().await?.0;
                widen_send_buffer(&stream);
                // Not woken by each of the host's reads, only its messages.
                Box::new(QuietUnixStream::from_tokio(stream)?)
            }
        };
        Ok(TokioIo::new(StallLimit::new(stream, stall_limit)))
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}
