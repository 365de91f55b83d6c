//! [`UpgradeGate`]: no Socket.IO session without the token on the HTTP
//! request itself.
//!
//! Socket.IO checks the token only when a client joins a namespace, after
//! its websocket is open, and an open websocket may send messages of the
//! full message limit (256 MiB by default) before it joins anything. So
//! requests to `/socket.io/` must carry `Authorization: Bearer <token>`,
//! and one that does not gets `401` before any session, buffer or upgrade
//! exists. (Every Socket.IO client can add headers to its connect: the
//! host's does, python-socketio takes `headers=`.)

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::{Request, Response, StatusCode};
use serde_json::json;

use crate::auth::Token;
use crate::connection_writes::ConnectionWrites;
use crate::http::presented_token;

/// Wraps the Socket.IO service `inner`, turning away unauthenticated
/// requests to it, on one connection.
#[derive(Clone)]
pub(crate) struct UpgradeGate<S> {
    inner: S,
    token: Token,
    writes: ConnectionWrites,
}

impl<S> UpgradeGate<S> {
    /// `inner` behind a check of `token`, for a connection whose bytes
    /// written are counted in `writes` (given to each Socket.IO request in
    /// its extensions, where a host's socket finds it).
    pub(crate) fn new(inner: S, token: Token, writes: ConnectionWrites) -> Self {
        UpgradeGate {
            inner,
            token,
            writes,
        }
    }
}

impl<S, B, ResBody> hyper::service::Service<Request<B>> for UpgradeGate<S>
where
    S: hyper::service::Service<Request<B>, Response = Response<ResBody>, Error = Infallible>,
    S::Future: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<Either<ResBody, Full<Bytes>>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, mut req: Request<B>) -> Self::Future {
        if req.uri().path().starts_with("/socket.io") {
            if let Err(e) = self.token.check(presented_token(&req)) {
                let body = json!({ "error": format!("{e} (send Authorization: Bearer <token>)") });
                let mut res =
                    Response::new(Either::Right(Full::new(Bytes::from(body.to_string()))));
                *res.status_mut() = StatusCode::UNAUTHORIZED;
                return Box::pin(std::future::ready(Ok(res)));
            }
            req.extensions_mut().insert(self.writes.clone());
        }
        let call = self.inner.call(req);
        Box::pin(async move {
            let res = call.await?;
            Ok(res.map(Either::Left))
        })
    }
}
