//! [`fetch`]: a server's `GET /health`, and [`request`] for its other
//! plain-HTTP routes (`POST /pause`, `POST /resume`), over a plain HTTP/1
//! connection.
//!
//! One request now and then needs no pooled client (and no TLS stack: a
//! sandbox server speaks plain HTTP on loopback or a private port).

use std::time::Duration;

use agentix_wire::errors::{ErrorKind, RemoteError};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;

use crate::endpoint::Endpoint;
use crate::sio::server_stream::ServerStream;

/// Largest `/health` body read.
const MAX_BODY: usize = 1 << 20;

/// `GET /health` from the server at `endpoint`, with its token (the full
/// report needs it), within `timeout`.
pub(crate) async fn fetch(
    endpoint: &Endpoint,
    timeout: Duration,
) -> Result<serde_json::Value, RemoteError> {
    request(endpoint, Method::GET, "/health", timeout)
        .await
        .map(|(_, body)| body)
}

/// `method path` to the server at `endpoint`, with its token, within
/// `timeout`: the status and the JSON body.
pub(crate) async fn request(
    endpoint: &Endpoint,
    method: Method,
    path: &str,
    timeout: Duration,
) -> Result<(StatusCode, serde_json::Value), RemoteError> {
    let url = format!("http://{}{path}", endpoint.addr);
    let unreachable =
        |e: String| RemoteError::new(ErrorKind::ServerUnreachable, format!("{method} {url}: {e}"));
    let exchange = async {
        let res = send(endpoint, method.clone(), path).await?;
        let status = res.status();
        let body = http_body_util::Limited::new(res.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok::<_, String>((status, body))
    };
    let (status, body) = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| unreachable(format!("no answer within {timeout:?}")))?
        .map_err(unreachable)?;
    let body = serde_json::from_slice(&body).map_err(|e| {
        RemoteError::new(ErrorKind::Protocol, format!("{path} answered no JSON: {e}"))
    })?;
    Ok((status, body))
}

/// `GET path` from the server at `endpoint`, its body streamed into the
/// file `to` (created, mode 0600); the bytes written. Connecting and the
/// answer's head must come within `timeout`; the body may take as long as
/// it takes, each chunk within `timeout` of the last.
pub(crate) async fn download(
    endpoint: &Endpoint,
    path: &str,
    to: &std::path::Path,
    timeout: Duration,
) -> Result<u64, RemoteError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let url = format!("http://{}{path}", endpoint.addr);
    let failed =
        |e: String| RemoteError::new(ErrorKind::ServerUnreachable, format!("GET {url}: {e}"));
    let head = send(endpoint, Method::GET, path);
    let res = tokio::time::timeout(timeout, head)
        .await
        .map_err(|_| failed(format!("no answer within {timeout:?}")))?
        .map_err(failed)?;
    if !res.status().is_success() {
        let status = res.status();
        let body = http_body_util::Limited::new(res.into_body(), MAX_BODY)
            .collect()
            .await
            .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
            .unwrap_or_default();
        return Err(failed(format!("{status}: {body}")));
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)
        .map_err(|e| failed(format!("cannot create {}: {e}", to.display())))?;
    let mut body = res.into_body();
    let mut written = 0u64;
    loop {
        let frame = tokio::time::timeout(timeout, body.frame())
            .await
            .map_err(|_| failed(format!("the body stalled for {timeout:?}")))?;
        let Some(frame) = frame else { break };
        let frame = frame.map_err(|e| failed(format!("the body broke off: {e}")))?;
        if let Ok(data) = frame.into_data() {
            // Into the page cache: a chunk's write costs less than handing
            // it to a blocking thread.
            file.write_all(&data)
                .map_err(|e| failed(format!("cannot write {}: {e}", to.display())))?;
            written += data.len() as u64;
        }
    }
    file.flush()
        .map_err(|e| failed(format!("cannot write {}: {e}", to.display())))?;
    Ok(written)
}

/// Sends `method path` with the endpoint's token on a connection of its
/// own; the response, its body still to be read.
async fn send(
    endpoint: &Endpoint,
    method: Method,
    path: &str,
) -> Result<hyper::Response<hyper::body::Incoming>, String> {
    let (stream, addr) = endpoint.dial().await.map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, ServerStream::authority(addr))
        .header(
            hyper::header::AUTHORIZATION,
            format!("Bearer {}", endpoint.token),
        )
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    sender.send_request(req).await.map_err(|e| e.to_string())
}
