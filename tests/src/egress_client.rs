//! A client of the sandbox's egress proxy, run inside the sandbox: a
//! tunnel opened and held open, for the tests of what becomes of tunnels.

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
    let mut reply = Vec::new();
    let mut buf = [0u8; 256];
    while !reply.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the proxy closed the connection".into());
        }
        reply.extend_from_slice(&buf[..n]);
    }
    let status = String::from_utf8_lossy(&reply)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    agentix::WorkerContext::current()
        .ok_or("not in a worker")?
        .state::<Held>()
        .0
        .lock()
        .unwrap()
        .push(stream);
    Ok(status)
}
