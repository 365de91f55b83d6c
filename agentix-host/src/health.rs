//! [`fetch`]: a server's `GET /health`, over a plain HTTP/1 connection.
//!
//! One request now and then needs no pooled client (and no TLS stack: a
//! sandbox server speaks plain HTTP on loopback or a private port).

use std::time::Duration;

use agentix_wire::errors::{ErrorKind, RemoteError};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
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
    let url = format!("http://{}/health", endpoint.addr);
    let token = &endpoint.token;
    let unreachable =
        |e: String| RemoteError::new(ErrorKind::ServerUnreachable, format!("GET {url}: {e}"));
    let request = async {
        let (stream, addr) = endpoint.dial().await.map_err(|e| e.to_string())?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let req = Request::get("/health")
            .header(hyper::header::HOST, ServerStream::authority(addr))
            .header(hyper::header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        let res = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let body = http_body_util::Limited::new(res.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok::<Bytes, String>(body)
    };
    let body = tokio::time::timeout(timeout, request)
        .await
        .map_err(|_| unreachable(format!("no answer within {timeout:?}")))?
        .map_err(unreachable)?;
    serde_json::from_slice(&body)
        .map_err(|e| RemoteError::new(ErrorKind::Protocol, format!("/health is not JSON: {e}")))
}
