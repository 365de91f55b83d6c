//! A pod's `portforward` subresource: the websocket the API server and
//! kubelet offer (`v4.channel.k8s.io`: each binary message starts with its
//! channel, data `2i` and error `2i+1` for the `i`th port, and the first
//! message of each channel carries the port, little-endian), ended on the
//! pod's loopback by entering its network namespace, as kubelet's runtime
//! does. So a server that listens on the pod's 127.0.0.1 only, in a pod
//! with no network at all, is reached exactly as in a cluster.

use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsFd;

use futures_util::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// The subprotocol the double speaks.
pub const PROTOCOL: &str = "v4.channel.k8s.io";

/// Serves one port-forward of `port` in the network namespace of process
/// `pid` over the upgraded connection `upgraded`.
pub async fn serve(upgraded: hyper::upgrade::Upgraded, pid: i64, port: u16) {
    let mut ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
    let [lo, hi] = port.to_le_bytes();
    if ws.send(Message::binary(vec![0, lo, hi])).await.is_err()
        || ws.send(Message::binary(vec![1, lo, hi])).await.is_err()
    {
        return;
    }
    let connected = tokio::task::spawn_blocking(move || connect_in_namespace(pid, port)).await;
    let tcp = match connected {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(e)) => {
            let words = format!(
                "an error occurred forwarding {port} -> {port}: error forwarding port {port} to \
                 pod, uid : failed to connect to 127.0.0.1:{port} inside namespace: {e}"
            );
            let mut message = vec![1u8];
            message.extend(words.as_bytes());
            let _ = ws.send(Message::binary(message)).await;
            let _ = ws.close(None).await;
            return;
        }
        Err(_) => return,
    };
    let Ok(tcp) = tokio::net::TcpStream::from_std(tcp) else {
        return;
    };
    let (mut from_pod, mut to_pod) = tcp.into_split();
    let (mut ws_out, mut ws_in) = ws.split();
    let up = async move {
        while let Some(Ok(message)) = ws_in.next().await {
            let data = match message {
                Message::Binary(bytes) if bytes.len() > 1 && bytes[0] == 0 => bytes,
                Message::Close(_) => break,
                _ => continue,
            };
            if to_pod.write_all(&data[1..]).await.is_err() {
                break;
            }
        }
        let _ = to_pod.shutdown().await;
    };
    let down = async move {
        let mut buffer = vec![0u8; 64 << 10];
        loop {
            buffer[0] = 0;
            match from_pod.read(&mut buffer[1..]).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let message = Message::binary(buffer[..n + 1].to_vec());
                    if ws_out.send(message).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = ws_out.close().await;
    };
    // Either side ending ends the forward, as kubelet's does.
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

/// A connection to `127.0.0.1:port` in the network namespace of process
/// `pid`, made on a thread of its own that enters the namespace and ends
/// with it (a socket stays in the namespace it was made in).
fn connect_in_namespace(pid: i64, port: u16) -> std::io::Result<std::net::TcpStream> {
    let namespace = std::fs::File::open(format!("/proc/{pid}/ns/net"))?;
    let thread = std::thread::spawn(move || {
        nix::sched::setns(namespace.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(std::io::Error::from)?;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let tcp = std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(5))?;
        tcp.set_nonblocking(true)?;
        Ok(tcp)
    });
    thread
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the namespace thread panicked")))
}
