//! Requests to an upstream, over plain HTTP or TLS, on kept-alive
//! connections ([`UpstreamClient`], the client `agentix-upstream` shares
//! with the other gateways):
//! [`send`] answers one whole as an [`UpstreamAnswer`] whatever happens
//! (the upstream's own status and body, or 502 when it cannot be reached
//! and 504 when it does not answer in time); [`open`] stops at the
//! headers, for a stream. A response body dropped before its end closes
//! its connection, which is how an abandoned stream stops the upstream.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request};

use crate::exchange::UpstreamAnswer;

/// Largest upstream answer read (a long completion with logprobs fits),
/// and longest line of a stream.
pub const MAX_ANSWER: usize = 64 << 20;

/// What to send.
pub struct Outgoing<'a> {
    /// `GET` or `POST`.
    pub method: Method,
    /// The full URL (`http://host:port/v1/chat/completions`).
    pub url: &'a str,
    /// Headers that carry the key (and the API version, for Anthropic).
    pub headers: Vec<(&'static str, String)>,
    /// The JSON body of a `POST`.
    pub body: Option<Vec<u8>>,
    /// How long the upstream may take to answer in full.
    pub timeout: Duration,
    /// The `Accept` header: JSON, or server-sent events for a stream.
    pub accept: &'static str,
    /// The connections to use.
    pub client: &'a UpstreamClient,
}

/// Kept-alive connections to upstreams, shared by a gateway's clones.
pub type UpstreamClient = agentix_upstream::UpstreamClient<Full<Bytes>>;

/// Sends `out` and turns every outcome into an answer for the agent.
pub async fn send(out: Outgoing<'_>) -> UpstreamAnswer {
    let timeout = out.timeout;
    match tokio::time::timeout(timeout, exchange(out)).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(unreachable)) => UpstreamAnswer::error(502, "upstream_unreachable", unreachable),
        Err(_) => UpstreamAnswer::error(
            504,
            "upstream_timeout",
            format!("the upstream did not answer within {timeout:?}"),
        ),
    }
}

async fn exchange(out: Outgoing<'_>) -> Result<UpstreamAnswer, String> {
    let opened = open(out).await?;
    let (status, retry_after) = (opened.status, opened.retry_after.clone());
    let body = opened.whole_body().await?;
    Ok(UpstreamAnswer {
        status,
        body,
        retry_after,
    })
}

/// An upstream response whose body is still to be read.
pub struct Opened {
    /// Its HTTP status.
    pub status: u16,
    /// Its `Retry-After`, if any.
    pub retry_after: Option<String>,
    /// The body, read as it arrives; dropping it early closes the
    /// connection.
    pub body: Incoming,
}

impl Opened {
    /// The whole body as JSON; a body that is not JSON (an HTML error page)
    /// becomes an OpenAI-style error carrying its text.
    pub async fn whole_body(self) -> Result<serde_json::Value, String> {
        let bytes = Limited::new(self.body, MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| format!("the upstream's answer broke off: {e}"))?
            .to_bytes();
        Ok(serde_json::from_slice(&bytes).unwrap_or_else(|_| {
            serde_json::json!({
                "error": {
                    "message": String::from_utf8_lossy(&bytes),
                    "type": "upstream_error",
                }
            })
        }))
    }
}

/// Sends `out` and returns once the upstream's status and headers are in.
pub async fn open(out: Outgoing<'_>) -> Result<Opened, String> {
    let uri: hyper::Uri = out
        .url
        .parse()
        .map_err(|e| format!("`{}` is not a URL: {e}", out.url))?;
    let secure = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => return Err(format!("`{}` is neither http:// nor https://", out.url)),
    };
    let authority = uri
        .authority()
        .map(|a| a.to_string())
        .ok_or_else(|| format!("`{}` has no host", out.url))?;
    let mut request = Request::builder()
        .method(out.method)
        .uri(uri)
        .header(hyper::header::ACCEPT, out.accept);
    for (name, value) in out.headers {
        request = request.header(name, value);
    }
    let body = match out.body {
        Some(body) => {
            request = request.header(hyper::header::CONTENT_TYPE, "application/json");
            Bytes::from(body)
        }
        None => Bytes::new(),
    };
    let request = request
        .body(Full::new(body))
        .map_err(|e| format!("the request cannot be built: {e}"))?;
    let response = out.client.request(request).await.map_err(|e| {
        let over = if secure { " over TLS" } else { "" };
        if e.is_connect() {
            format!(
                "cannot connect to the upstream at {authority}{over}: {}",
                agentix_upstream::causes(&e)
            )
        } else {
            format!(
                "the upstream at {authority} dropped the request: {}",
                agentix_upstream::causes(&e)
            )
        }
    })?;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(hyper::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    Ok(Opened {
        status,
        retry_after,
        body: response.into_body(),
    })
}
