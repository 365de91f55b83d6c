//! [`ServerStream`]: the byte stream to a sandbox server, over TCP
//! (`ip:port`) or a Unix socket (`unix:PATH`, for a sandbox with no
//! network, or a local one's host), as the server's ready line names its
//! address.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use agentix_wire::quiet_unix_stream::QuietUnixStream;
use agentix_wire::send_buffer::widen_send_buffer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

/// The prefix of a Unix socket address.
const UNIX_PREFIX: &str = "unix:";

/// A connection to a sandbox server.
pub(crate) enum ServerStream {
    /// Over TCP.
    Tcp(TcpStream),
    /// Over a Unix socket, woken by the server's messages only (not by
    /// its reads).
    Unix(QuietUnixStream),
}

impl ServerStream {
    /// Connects to `addr`: `host:port`, or `unix:PATH`.
    pub(crate) async fn connect(addr: &str) -> io::Result<ServerStream> {
        match addr.strip_prefix(UNIX_PREFIX) {
            Some(path) => Ok(ServerStream::Unix(QuietUnixStream::from_tokio(
                connect_unix(path).await?,
            )?)),
            None => {
                let tcp = TcpStream::connect(addr).await?;
                // Small packets (a call, a pong) must not wait for the
                // peer's delayed ACK of the previous one.
                let _ = tcp.set_nodelay(true);
                widen_send_buffer(&tcp);
                Ok(ServerStream::Tcp(tcp))
            }
        }
    }

    /// Connects to the Unix socket `addr` (`unix:PATH`) and checks that
    /// process `pid` holds its other end: a socket file is only a path,
    /// which whoever can write its directory may replace with a listener
    /// of their own, and the host must not hand its token to that.
    pub(crate) async fn connect_to_process(addr: &str, pid: u32) -> io::Result<ServerStream> {
        let path = addr.strip_prefix(UNIX_PREFIX).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{addr} is not unix:PATH"),
            )
        })?;
        let stream = connect_unix(path).await?;
        let peer = stream.peer_cred()?.pid();
        if peer != Some(pid as i32) {
            let peer = peer.map_or_else(
                || "an unknown process".to_owned(),
                |p| format!("process {p}"),
            );
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{addr} is served by {peer}, not by the sandbox server (process {pid})"),
            ));
        }
        Ok(ServerStream::Unix(QuietUnixStream::from_tokio(stream)?))
    }

    /// What an HTTP request to `addr` names as its host: the address
    /// itself, or `localhost` for a Unix socket.
    pub(crate) fn authority(addr: &str) -> &str {
        if addr.starts_with(UNIX_PREFIX) {
            "localhost"
        } else {
            addr
        }
    }
}

/// Connects to the Unix socket at `path`, with a send buffer for a part.
async fn connect_unix(path: &str) -> io::Result<UnixStream> {
    let stream = UnixStream::connect(path).await?;
    widen_send_buffer(&stream);
    Ok(stream)
}

impl AsyncRead for ServerStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerStream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            ServerStream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ServerStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ServerStream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            ServerStream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ServerStream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            ServerStream::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerStream::Tcp(s) => Pin::new(s).poll_flush(cx),
            ServerStream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerStream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            ServerStream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
