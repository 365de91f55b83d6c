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
    let token = &endpoint.token;
    let unreachable =
        |e: String| RemoteError::new(ErrorKind::ServerUnreachable, format!("{method} {url}: {e}"));
    let exchange = async {
        let (stream, addr) = endpoint.dial().await.map_err(|e| e.to_string())?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let req = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(hyper::header::HOST, ServerStream::authority(addr))
            .header(hyper::header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        let res = sender.send_request(req).await.map_err(|e| e.to_string())?;
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
