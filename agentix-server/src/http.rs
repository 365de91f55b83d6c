//! Plain HTTP beside Socket.IO: `GET /health`, `POST /pause` and
//! `POST /resume`, `GET /state.tar` (the state directories as one tar
//! archive, streamed), the token gate, the listener.
//!
//! Every request except `GET /health` must carry the sandbox token, as
//! `Authorization: Bearer <token>` (never in the URL, where logs and
//! proxies keep it). `GET /health` without it says only the status; the
//! full report (pids, worker id, restarts, last exit) needs the token.
//! Socket.IO traffic (`/socket.io/`) is checked per namespace connect
//! instead, with the token in the connect `auth` payload, as every
//! Socket.IO client supports.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use agentix_actors::supervision::ChildAddr;
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::json;

use crate::auth::Token;
use crate::relay_credits::RelayCredits;
use crate::supervisor::{PauseWorker, ReportHealth, WorkerSupervisor};

/// The routes Socket.IO does not handle.
#[derive(Clone)]
pub(crate) struct HttpRoutes {
    supervisor: ChildAddr<WorkerSupervisor>,
    credits: RelayCredits,
    token: Token,
    started: Instant,
    /// What `GET /state.tar` archives.
    state_dirs: std::sync::Arc<[std::path::PathBuf]>,
}

/// A response body: a whole one, or an archive streamed as it is written.
type Body = BoxBody<Bytes, std::io::Error>;

impl HttpRoutes {
    /// Routes answering from `supervisor`'s and the side channels' state
    /// (`credits`), guarded by `token`.
    pub(crate) fn new(
        supervisor: ChildAddr<WorkerSupervisor>,
        credits: RelayCredits,
        token: Token,
        state_dirs: Vec<std::path::PathBuf>,
    ) -> Self {
        HttpRoutes {
            supervisor,
            credits,
            token,
            started: Instant::now(),
            state_dirs: state_dirs.into(),
        }
    }

    async fn route(self, req: Request<Incoming>) -> Response<Body> {
        let authorized = self.token.check(presented_token(&req));
        if req.method() == Method::GET && req.uri().path() == "/health" {
            return self.health(authorized.is_ok()).await;
        }
        if let Err(e) = authorized {
            return json_response(StatusCode::UNAUTHORIZED, json!({ "error": e.to_string() }));
        }
        let pause = match (req.method(), req.uri().path()) {
            (&Method::POST, "/pause") => Some(true),
            (&Method::POST, "/resume") => Some(false),
            _ => None,
        };
        if let Some(pause) = pause {
            return self.pause(pause).await;
        }
        if req.method() == Method::GET && req.uri().path() == "/state.tar" {
            return self.state_archive();
        }
        json_response(
            StatusCode::NOT_FOUND,
            json!({ "error": format!("no route for {} {}", req.method(), req.uri().path()) }),
        )
    }

    /// `GET /state.tar`: the state directories as one tar archive, written
    /// on a blocking thread and streamed in chunks as it is (a bounded
    /// queue: the writer waits for a slow reader). Meant for a paused
    /// sandbox, whose files do not change meanwhile.
    fn state_archive(&self) -> Response<Body> {
        if self.state_dirs.is_empty() {
            return json_response(
                StatusCode::CONFLICT,
                json!({ "error": "this server was given no state directories (--state-dir)" }),
            );
        }
        let (chunks, body) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(8);
        let dirs = self.state_dirs.clone();
        tokio::task::spawn_blocking(move || {
            let out = ChunkWriter {
                chunks: chunks.clone(),
                buffer: Vec::with_capacity(ARCHIVE_CHUNK),
            };
            if let Err(e) = crate::state_archive::write_state(&dirs, out) {
                // The body ends in an error, which the client sees as a
                // broken transfer rather than a short archive.
                let _ = chunks.blocking_send(Err(e));
            }
        });
        let frames = futures_util::StreamExt::map(tokio_stream_of(body), |chunk| {
            chunk.map(hyper::body::Frame::data)
        });
        let mut res = Response::new(BodyExt::boxed(StreamBody::new(frames)));
        res.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/x-tar"),
        );
        res
    }

    /// `POST /pause` and `POST /resume`: the worker's processes frozen or
    /// thawed ([`PauseWorker`]).
    async fn pause(&self, pause: bool) -> Response<Body> {
        match self.supervisor.get().send(PauseWorker(pause)).await {
            Ok(Ok((processes, was_paused))) => json_response(
                StatusCode::OK,
                json!({ "paused": pause, "processes": processes, "was_paused": was_paused }),
            ),
            Ok(Err(why)) => json_response(StatusCode::CONFLICT, json!({ "error": why })),
            Err(_) => json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({ "error": "the server is stopping" }),
            ),
        }
    }

    async fn health(&self, full: bool) -> Response<Body> {
        let uptime_s = self.started.elapsed().as_secs_f64();
        match self.supervisor.get().send(ReportHealth).await {
            Ok(h) if !full => json_response(StatusCode::OK, json!({ "status": h.status })),
            Ok(h) => json_response(
                StatusCode::OK,
                json!({
                    "status": h.status,
                    "worker": {
                        "state": h.worker,
                        "pid": h.pid,
                        "id": h.worker_id,
                        "restarts": h.restarts,
                        "last_exit": h.last_exit,
                        "silent_ms": h.worker_silent_ms,
                        "restart_budget": {
                            "restarts": h.restart_budget.0,
                            "window_s": h.restart_budget.1,
                            "recent": h.recent_restarts,
                            "retry_in_s": h.retry_in_s,
                        },
                    },
                    "inflight": h.inflight,
                    "side_channels": {
                        "not_sent_to_lagging_listeners": self.credits.dropped(),
                    },
                    "plugin_events_not_sent_to_lagging_hosts": h.plugin_events_dropped,
                    "plugin_events_not_sent_to_lagging_worker": h.host_events_dropped,
                    "uptime_s": uptime_s,
                    "version": agentix_wire::VERSION,
                    "pid": std::process::id(),
                }),
            ),
            Err(_) => json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({ "status": "stopping", "uptime_s": uptime_s }),
            ),
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme
/// is case-insensitive, as HTTP says).
pub(crate) fn presented_token<B>(req: &Request<B>) -> Option<&str> {
    let value = req
        .headers()
        .get(hyper::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start())
}

/// Bytes of the archive sent at once.
const ARCHIVE_CHUNK: usize = 256 << 10;

/// A `Write` that hands its bytes on in chunks of [`ARCHIVE_CHUNK`].
struct ChunkWriter {
    chunks: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    buffer: Vec<u8>,
}

impl std::io::Write for ChunkWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() >= ARCHIVE_CHUNK {
            self.flush()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buffer,
            Vec::with_capacity(ARCHIVE_CHUNK),
        ));
        self.chunks
            .blocking_send(Ok(chunk))
            .map_err(|_| std::io::Error::other("the client went away"))
    }
}

/// A receiver as a stream (what `StreamBody` takes).
fn tokio_stream_of<T>(
    mut receiver: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> {
    futures_util::stream::poll_fn(move |cx| receiver.poll_recv(cx))
}

fn json_response(status: StatusCode, body: serde_json::Value) -> Response<Body> {
    let whole = Full::new(Bytes::from(body.to_string())).map_err(|never| match never {});
    let mut res = Response::new(BodyExt::boxed(whole));
    *res.status_mut() = status;
    res.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    res
}

impl hyper::service::Service<Request<Incoming>> for HttpRoutes {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { Ok(this.route(req).await) })
    }
}
