//! Plain HTTP beside Socket.IO: `GET /health`, the token gate, the listener.
//!
//! Every request except `GET /health` must carry the sandbox token, as
//! `Authorization: Bearer <token>` or `?token=<token>`. Socket.IO traffic
//! (`/socket.io/`) is checked per namespace connect instead, with the token in
//! the connect `auth` payload, as every Socket.IO client supports.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use actix::Addr;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::json;

use crate::auth::Token;
use crate::supervisor::{ReportHealth, WorkerSupervisor};

/// The routes Socket.IO does not handle.
#[derive(Clone)]
pub struct HttpRoutes {
    supervisor: Addr<WorkerSupervisor>,
    token: Token,
    started: Instant,
}

impl HttpRoutes {
    /// Routes answering from `supervisor`'s state, guarded by `token`.
    pub fn new(supervisor: Addr<WorkerSupervisor>, token: Token) -> Self {
        HttpRoutes {
            supervisor,
            token,
            started: Instant::now(),
        }
    }

    async fn route(self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        if req.method() == Method::GET && req.uri().path() == "/health" {
            return self.health().await;
        }
        if let Err(e) = self.token.check(presented_token(&req)) {
            return json_response(StatusCode::UNAUTHORIZED, json!({ "error": e.to_string() }));
        }
        json_response(
            StatusCode::NOT_FOUND,
            json!({ "error": format!("no route for {} {}", req.method(), req.uri().path()) }),
        )
    }

    async fn health(&self) -> Response<Full<Bytes>> {
        let uptime_s = self.started.elapsed().as_secs_f64();
        match self.supervisor.send(ReportHealth).await {
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
                    },
                    "inflight": h.inflight,
                    "uptime_s": uptime_s,
                    "version": agentix_actors::VERSION,
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

fn presented_token(req: &Request<Incoming>) -> Option<&str> {
    let header = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    header.or_else(|| {
        req.uri()
            .query()?
            .split('&')
            .find_map(|kv| kv.strip_prefix("token="))
    })
}

fn json_response(status: StatusCode, body: serde_json::Value) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(Bytes::from(body.to_string())));
    *res.status_mut() = status;
    res.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    res
}

impl hyper::service::Service<Request<Incoming>> for HttpRoutes {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { Ok(this.route(req).await) })
    }
}
