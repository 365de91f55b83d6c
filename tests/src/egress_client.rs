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
/// `proxy`, sends `GET /` on each and reads each to its end: the number
/// of bytes each answer had, in order.
#[agentix::remote]
pub async fn fetch_through_many(
    proxy: String,
    target: String,
    tunnels: u32,
) -> Result<Vec<u64>, String> {
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
        let mut answer = Vec::new();
        stream
            .read_to_end(&mut answer)
            .await
            .map_err(|e| e.to_string())?;
        Ok(answer.len() as u64)
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
