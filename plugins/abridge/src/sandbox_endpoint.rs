//! The sandbox half: an OpenAI-compatible HTTP endpoint on 127.0.0.1 that
//! forwards every request to the host over `/abridge` ([`serve`], [`stop`]);
//! streamed requests go through [`crate::sandbox_stream`].
//!
//! It runs as tasks of the worker's runtime, so it outlives the call that
//! started it and ends with [`stop`] or the worker. Any API key is
//! accepted: the host holds the real one.

use std::convert::Infallible;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use agentix::protocol::Protocol;
use agentix::{JsonText, SandboxEnd, SandboxHalf};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::arriving_streams::Arrivals;
use crate::exchange::{Api, StreamItem, UpstreamAnswer, UpstreamRequest};
use crate::sandbox_stream::{host_failed, relay, whole, AgentBody};
use crate::Abridge;

/// Largest request body an agent may send, unless set.
pub const DEFAULT_MAX_REQUEST_BYTES: u64 = 32 << 20;
/// How long a request waits for the host, unless set: past the gateway's
/// own default timeout, so the host's 504 arrives first.
pub const DEFAULT_HOST_TIMEOUT_MS: u64 = 660_000;

/// How the endpoint serves ([`serve_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointOptions {
    /// The port on 127.0.0.1; 0 for any free one.
    pub port: u16,
    /// Largest request body an agent may send; past it, a 413.
    pub max_request_bytes: u64,
    /// How long a request waits for the host before the agent gets a 504;
    /// keep it past the gateway's timeout.
    pub host_timeout_ms: u64,
}

impl Default for EndpointOptions {
    fn default() -> Self {
        EndpointOptions {
            port: 0,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            host_timeout_ms: DEFAULT_HOST_TIMEOUT_MS,
        }
    }
}

/// What every connection of the running endpoint shares.
#[derive(Clone)]
struct Serving {
    handle: SandboxEnd<Abridge>,
    arrivals: Arrivals,
    max_request_bytes: usize,
    host_timeout: Duration,
}

/// Why the endpoint could not start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbridgeError {
    /// What went wrong.
    pub message: String,
}

impl std::fmt::Display for AbridgeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for AbridgeError {}

/// What one worker's endpoint keeps, in its
/// [`WorkerContext`](agentix::WorkerContext): the namespace and the
/// arriving streams its items go to, opened on the first [`serve`], and the
/// running endpoint's URL and what stops it.
#[derive(Default)]
struct EndpointState {
    opened: OnceLock<(SandboxEnd<Abridge>, Arrivals)>,
    running: Mutex<Option<(String, tokio::sync::watch::Sender<bool>)>>,
}

impl EndpointState {
    fn running(
        &self,
    ) -> std::sync::MutexGuard<'_, Option<(String, tokio::sync::watch::Sender<bool>)>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// This worker's endpoint state.
fn endpoint_state() -> Result<std::sync::Arc<EndpointState>, AbridgeError> {
    agentix::WorkerContext::current()
        .map(|worker| worker.state::<EndpointState>())
        .ok_or_else(|| AbridgeError {
            message: "the abridge endpoint runs in an Agentix worker".into(),
        })
}

/// Starts the endpoint on 127.0.0.1:`port` (0: any free port) and returns
/// its base URL (`http://127.0.0.1:PORT/v1`), for `OPENAI_BASE_URL`; if it
/// already runs, returns its URL.
#[agentix::remote]
pub async fn serve(port: u16) -> Result<String, AbridgeError> {
    start(EndpointOptions {
        port,
        ..EndpointOptions::default()
    })
    .await
}

/// [`serve`] with every option.
#[agentix::remote]
pub async fn serve_with(options: EndpointOptions) -> Result<String, AbridgeError> {
    start(options).await
}

async fn start(options: EndpointOptions) -> Result<String, AbridgeError> {
    let port = options.port;
    let state = endpoint_state()?;
    if let Some((url, _)) = state.running().as_ref() {
        return Ok(url.clone());
    }
    let (handle, arrivals) = match state.opened.get() {
        Some(opened) => opened.clone(),
        None => {
            let arrivals = Arrivals::start();
            let handle = SandboxHalf::<Abridge>::new()
                .on_actor::<StreamItem>(arrivals.actor().clone())
                .register()
                .map_err(|e| AbridgeError {
                    message: format!("cannot open {}: {e}", Abridge::PATH),
                })?;
            state.opened.get_or_init(|| (handle, arrivals)).clone()
        }
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|e| AbridgeError {
            message: format!("cannot listen on 127.0.0.1:{port}: {e}"),
        })?;
    let addr = listener.local_addr().map_err(|e| AbridgeError {
        message: e.to_string(),
    })?;
    let url = format!("http://{addr}/v1");
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let serving = Serving {
        handle,
        arrivals,
        max_request_bytes: usize::try_from(options.max_request_bytes).unwrap_or(usize::MAX),
        host_timeout: Duration::from_millis(options.host_timeout_ms),
    };
    tokio::spawn(accept(listener, serving, stop_rx));
    *state.running() = Some((url.clone(), stop_tx));
    tracing::info!(%url, "abridge endpoint listening");
    Ok(url)
}

/// Stops the endpoint; whether it was running.
#[agentix::remote]
pub async fn stop() -> bool {
    let Ok(state) = endpoint_state() else {
        return false;
    };
    let running = state.running().take();
    match running {
        Some((_, stopping)) => {
            let _ = stopping.send(true);
            true
        }
        None => false,
    }
}

async fn accept(
    listener: tokio::net::TcpListener,
    serving: Serving,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    // A stream's pieces are small: without this, each waits
                    // for the agent's delayed ACK (about 40 ms).
                    let _ = stream.set_nodelay(true);
                    stream
                }
                Err(e) => {
                    tracing::warn!("abridge: accept failed: {e}");
                    continue;
                }
            },
            _ = stopping.changed() => return,
        };
        let serving = serving.clone();
        let service = hyper::service::service_fn(move |request| {
            let serving = serving.clone();
            async move { Ok::<_, Infallible>(respond(&serving, request).await) }
        });
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Whether the agent's body holds `"stream": true`, read without building
/// the rest of it.
fn asks_for_a_stream(body: &JsonText) -> bool {
    #[derive(Deserialize)]
    struct Streaming {
        #[serde(default)]
        stream: Option<Value>,
    }
    serde_json::from_str::<Streaming>(body.as_str())
        .is_ok_and(|b| b.stream == Some(Value::Bool(true)))
}

/// One agent request, answered.
async fn respond(serving: &Serving, request: Request<Incoming>) -> Response<AgentBody> {
    let (handle, host_timeout) = (&serving.handle, serving.host_timeout);
    let path = request.uri().path().trim_end_matches('/').to_owned();
    let method = request.method().clone();
    let api = match (method, path.as_str()) {
        (Method::POST, "/v1/chat/completions") => Api::ChatCompletions,
        (Method::GET, "/v1/models") => Api::Models,
        (Method::POST, "/v1/messages") => Api::Messages,
        (Method::POST, "/v1/messages/count_tokens") => Api::CountTokens,
        (method, path) => {
            return whole(UpstreamAnswer::error(
                404,
                "not_found",
                format!(
                    "abridge serves POST /v1/chat/completions, POST /v1/messages, \
                 POST /v1/messages/count_tokens and GET /v1/models, not {method} {path}"
                ),
            ))
        }
    };
    let body = if api == Api::Models {
        JsonText::from_value(&Value::Null)
    } else {
        let bytes = match Limited::new(request.into_body(), serving.max_request_bytes)
            .collect()
            .await
        {
            Ok(collected) => collected.to_bytes(),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                return whole(UpstreamAnswer::error(
                    413,
                    "invalid_request",
                    format!(
                        "the request body is larger than this endpoint's limit of {} bytes",
                        serving.max_request_bytes
                    ),
                ))
            }
            Err(e) => {
                return whole(UpstreamAnswer::error(
                    400,
                    "invalid_request",
                    format!("the request body could not be read: {e}"),
                ))
            }
        };
        // Checked, not parsed: the host reads the body, this half only
        // needs to know whether it asks for a stream.
        match serde_json::from_slice::<Box<RawValue>>(&bytes) {
            Ok(body) => JsonText::from_raw(body),
            Err(e) => {
                return whole(UpstreamAnswer::error(
                    400,
                    "invalid_request",
                    format!("the request body is not JSON: {e}"),
                ))
            }
        }
    };
    let streamed = asks_for_a_stream(&body);
    // The agent's text moves into the request as it is: never copied.
    let request = UpstreamRequest {
        api,
        body: body.into_raw(),
    };
    if streamed {
        return relay(handle, &serving.arrivals, request, host_timeout).await;
    }
    let answer = match handle.request_with_timeout(&request, host_timeout).await {
        Ok(answer) => answer,
        Err(e) => host_failed(e, host_timeout),
    };
    whole(answer)
}
