//! [`OwnRuntimeClient`]: the HTTP client the OTLP exporter posts through.
//!
//! The SDK's batch processor runs exports on a thread of its own, outside
//! any async runtime, and hyper needs one; so each request runs on a small
//! runtime this client owns, and the exporter only awaits its answer. One
//! connection per export (an export is a batch, once a second at most) needs
//! no pool, and plain HTTP to a collector on the host's network needs no TLS
//! stack; for TLS, put a collector in front.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};

/// Largest response body read from a collector.
const MAX_RESPONSE: usize = 1 << 20;

/// Posts requests over HTTP/1.1 from a runtime of its own.
#[derive(Debug)]
pub struct OwnRuntimeClient {
    runtime: tokio::runtime::Runtime,
    timeout: Duration,
}

impl OwnRuntimeClient {
    /// A client whose requests give up after `timeout`.
    pub fn new(timeout: Duration) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("agentix-otlp")
            .enable_all()
            .build()?;
        Ok(OwnRuntimeClient { runtime, timeout })
    }
}

#[async_trait::async_trait]
impl HttpClient for OwnRuntimeClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let timeout = self.timeout;
        let sent = self
            .runtime
            .spawn(async move { tokio::time::timeout(timeout, post(request)).await });
        match sent.await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(format!("no answer from the collector within {timeout:?}").into()),
            Err(e) => Err(format!("the export task failed: {e}").into()),
        }
    }
}

/// Sends `request` on a fresh connection and reads the whole answer.
async fn post(request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
    let uri = request.uri().clone();
    let host = uri.host().ok_or("the collector's address has no host")?;
    let port = uri.port_u16().unwrap_or(80);
    if uri.scheme_str() == Some("https") {
        return Err("this exporter speaks plain HTTP; put a collector in front for TLS".into());
    }
    let stream = tokio::net::TcpStream::connect((host, port)).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let (mut parts, body) = request.into_parts();
    if !parts.headers.contains_key(hyper::header::HOST) {
        let authority = uri.authority().map(|a| a.as_str()).unwrap_or(host);
        parts
            .headers
            .insert(hyper::header::HOST, authority.parse()?);
    }
    let response = sender
        .send_request(Request::from_parts(parts, Full::new(body)))
        .await?;
    let (parts, body) = response.into_parts();
    let body = Limited::new(body, MAX_RESPONSE).collect().await?.to_bytes();
    Ok(Response::from_parts(parts, body))
}
