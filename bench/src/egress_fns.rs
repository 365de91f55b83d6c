//! The remote functions of the `egress` section: clients of the sandbox's
//! egress proxy, timed inside the sandbox.

use std::sync::Mutex;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Opens a tunnel to `target` through the proxy at `proxy` (the URL
/// `serve_proxy` returned, its credential in it): the stream once the
/// proxy said 200 (the proxy sends nothing of the upstream's before the
/// client has written).
async fn tunnel(proxy: &str, target: &str) -> std::io::Result<TcpStream> {
    use base64::Engine;
    let (credential, address) = proxy
        .trim_start_matches("http://")
        .split_once('@')
        .ok_or_else(|| std::io::Error::other("no credential in the proxy URL"))?;
    let credential = base64::engine::general_purpose::STANDARD.encode(credential);
    let mut stream = TcpStream::connect(address).await?;
    stream.set_nodelay(true)?;
    let head = format!(
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\
         Proxy-Authorization: Basic {credential}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 256];
    while !reply.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Err(std::io::Error::other("the proxy closed the connection"));
        }
        reply.extend_from_slice(&buf[..n]);
    }
    if !reply.starts_with(b"HTTP/1.1 200") {
        return Err(std::io::Error::other(
            String::from_utf8_lossy(&reply).into_owned(),
        ));
    }
    Ok(stream)
}

fn p50(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Median µs of `n` tunnels opened to `target` through `proxy`, and of `n`
/// direct connections to `direct`, alternating.
#[agentix::remote]
pub(crate) async fn egress_connects(
    proxy: String,
    target: String,
    direct: String,
    n: u32,
) -> Result<(f64, f64), String> {
    let (mut through, mut straight) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let start = Instant::now();
        let stream = tunnel(&proxy, &target).await.map_err(|e| e.to_string())?;
        through.push(start.elapsed().as_secs_f64() * 1e6);
        drop(stream);
        let start = Instant::now();
        let stream = TcpStream::connect(&direct)
            .await
            .map_err(|e| e.to_string())?;
        straight.push(start.elapsed().as_secs_f64() * 1e6);
        drop(stream);
    }
    Ok((p50(through), p50(straight)))
}

/// Downloads what `target` sends for `GET /` through a tunnel: MB/s.
#[agentix::remote]
pub(crate) async fn egress_download(proxy: String, target: String) -> Result<f64, String> {
    let mut stream = tunnel(&proxy, &target).await.map_err(|e| e.to_string())?;
    let start = Instant::now();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: upstream\r\n\r\n")
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 256 << 10];
    let mut total = 0usize;
    loop {
        match stream.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => total += n,
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(total as f64 / start.elapsed().as_secs_f64() / 1e6)
}

/// Tunnels this worker holds open for the host to measure.
#[derive(Default)]
struct HeldTunnels(Mutex<Vec<TcpStream>>);

/// Opens `n` tunnels to `target` and keeps them open (until
/// [`egress_release`]).
#[agentix::remote]
pub(crate) async fn egress_hold(proxy: String, target: String, n: u32) -> Result<u32, String> {
    let held = agentix::WorkerContext::current()
        .ok_or("not in a worker")?
        .state::<HeldTunnels>();
    for _ in 0..n {
        let stream = tunnel(&proxy, &target).await.map_err(|e| e.to_string())?;
        held.0.lock().unwrap().push(stream);
    }
    Ok(n)
}

/// Closes the tunnels [`egress_hold`] opened.
#[agentix::remote]
pub(crate) async fn egress_release() -> u32 {
    let Some(worker) = agentix::WorkerContext::current() else {
        return 0;
    };
    let held = worker.state::<HeldTunnels>();
    let mut streams = held.0.lock().unwrap();
    let n = streams.len() as u32;
    streams.clear();
    n
}
