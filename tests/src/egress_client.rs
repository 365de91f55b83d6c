//! A client of the sandbox's egress proxy, run inside the sandbox: a
//! tunnel opened and held open (never read), and many tunnels at once,
//! for the tests of what becomes of tunnels.

use std::sync::Mutex;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Tunnels this worker holds open.
#[derive(Default)]
struct Held(Mutex<Vec<TcpStream>>);

/// Opens a tunnel to `target` through the proxy at `proxy` (the URL
/// `serve_proxy` returned) and keeps it open in this worker; the proxy's
/// status line.
#[agentix::remote]
pub async fn hold_tunnel(proxy: String, target: String) -> Result<String, String> {
    let (stream, status) = connect(&proxy, &target).await?;
    agentix::WorkerContext::current()
        .ok_or("not in a worker")?
        .state::<Held>()
        .0
        .lock()
        .unwrap()
        .push(stream);
    Ok(status)
}

/// Opens `tunnels` tunnels to `target` at once through the proxy at
/// `proxy`, sends `GET /` on each and reads each to its end: the SHA-256
/// (hex) of each answer's body, in order.
#[agentix::remote]
pub async fn fetch_through_many(
    proxy: String,
    target: String,
    tunnels: u32,
) -> Result<Vec<String>, String> {
    let fetches = (0..tunnels).map(|_| async {
        let (mut stream, status) = connect(&proxy, &target).await?;
        if !status.starts_with("HTTP/1.1 200") {
            return Err(status);
        }
        let request = format!("GET / HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        // To the end its `Content-Length` gives, as HTTP clients read,
        // not to the connection's end: under gVisor a tokio reader can
        // miss an end that arrives with the last bytes (its epoll reports
        // no `EPOLLRDHUP`).
        let mut answer = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        let body = loop {
            if let Some(at) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&answer[..at]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .ok_or("an answer without a Content-Length")?;
                if answer.len() >= at + 4 + length {
                    break &answer[at + 4..at + 4 + length];
                }
            }
            let n = stream.read(&mut buf).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Err(format!("the answer broke off after {} bytes", answer.len()));
            }
            answer.extend_from_slice(&buf[..n]);
        };
        use sha2::Digest;
        Ok(format!("{:x}", sha2::Sha256::digest(body)))
    });
    futures_util::future::try_join_all(fetches).await
}

/// A `CONNECT` to `target` through the proxy at `proxy` (the URL
/// `serve_proxy` returned): the stream, and the proxy's status line.
async fn connect(proxy: &str, target: &str) -> Result<(TcpStream, String), String> {
    use base64::Engine;
    let (credential, address) = proxy
        .trim_start_matches("http://")
        .split_once('@')
        .ok_or("no credential in the proxy URL")?;
    let credential = base64::engine::general_purpose::STANDARD.encode(credential);
    let mut stream = TcpStream::connect(address)
        .await
        .map_err(|e| e.to_string())?;
    let head = format!(
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Basic {credential}\r\n\r\n"
    );
    stream
        .write_all(head.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    // Byte by byte: what follows the head is the tunnel's, not ours.
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    while !reply.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut byte).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err(format!(
                "the proxy closed the connection: {}",
                String::from_utf8_lossy(&reply)
            ));
        }
        reply.push(byte[0]);
    }
    let status = String::from_utf8_lossy(&reply)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    Ok((stream, status))
}
