//! The host's side of a tunnel to a named route: an HTTP server on one
//! end of an in-memory pipe (the tunnel's bytes are its connection) whose
//! each request goes to the route's upstream with the route's headers,
//! over the client `agentix-upstream` shares with the other gateways.
//! Bodies stream both ways; dropping the tunnel drops the upstream
//! request with it.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderName};
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::rt::TokioIo;
use tokio::io::DuplexStream;

use crate::host_name::HostName;
use crate::protocol::CHUNK;
use crate::resolver::Resolve;
use crate::route::EgressRoute;

/// The client routes reach their upstreams with: the gateway's resolver,
/// its TLS roots.
pub type RouteClient = agentix_upstream::UpstreamClient<Incoming, ResolveWith>;

/// A response to the sandbox: the upstream's, or the gateway's own error.
type RouteBody = Either<Incoming, Full<Bytes>>;

/// The gateway's [`Resolve`] as the client's resolver.
#[derive(Clone)]
pub struct ResolveWith(pub Arc<dyn Resolve>);

impl tower_service::Service<Name> for ResolveWith {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = io::Error;
    type Future = BoxFuture<'static, io::Result<Self::Response>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let resolver = self.0.clone();
        Box::pin(async move {
            let name = HostName::parse(name.as_str())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
            let found = resolver.resolve(&name).await?;
            // The client puts the URL's port on each address.
            let addresses: Vec<_> = found.into_iter().map(|ip| SocketAddr::new(ip, 0)).collect();
            Ok(addresses.into_iter())
        })
    }
}

/// Opens a tunnel to `route`: the returned end carries the sandbox's
/// requests to a server that forwards them.
pub fn open_route(route: Arc<EgressRoute>, client: Result<RouteClient, String>) -> DuplexStream {
    let (tunnel, server) = tokio::io::duplex(CHUNK);
    tokio::spawn(async move {
        let service = hyper::service::service_fn(move |request| {
            forward(request, route.clone(), client.clone())
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(server), service)
            .await;
    });
    tunnel
}

/// Headers that belong to one hop, or carry the proxy's own credential:
/// never passed on.
const NOT_PASSED: [HeaderName; 7] = [
    header::HOST,
    header::CONNECTION,
    header::AUTHORIZATION,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

async fn forward(
    request: Request<Incoming>,
    route: Arc<EgressRoute>,
    client: Result<RouteClient, String>,
) -> Result<Response<RouteBody>, Infallible> {
    let client = match client {
        Ok(client) => client,
        Err(why) => return Ok(error(StatusCode::BAD_GATEWAY, &why)),
    };
    let (mut parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let url = format!("{}{path}", route.base);
    parts.uri = match url.parse() {
        Ok(uri) => uri,
        Err(e) => return Ok(error(StatusCode::BAD_REQUEST, &format!("`{url}`: {e}"))),
    };
    for name in &NOT_PASSED {
        parts.headers.remove(name);
    }
    for (name, value) in &route.headers {
        parts.headers.insert(name.clone(), value.clone());
    }
    parts.version = hyper::Version::HTTP_11;
    match client.request(Request::from_parts(parts, body)).await {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            parts.headers.remove(header::CONNECTION);
            Ok(Response::from_parts(parts, Either::Left(body)))
        }
        Err(e) => {
            let why = format!(
                "route `{}` cannot reach {}: {}",
                route.name,
                route.base,
                agentix_upstream::causes(&e)
            );
            Ok(error(StatusCode::BAD_GATEWAY, &why))
        }
    }
}

fn error(status: StatusCode, why: &str) -> Response<RouteBody> {
    let mut response = Response::new(Either::Right(Full::new(Bytes::from(format!("{why}\n")))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain"),
    );
    response
}
