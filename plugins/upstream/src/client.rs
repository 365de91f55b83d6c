//! [`UpstreamClient`]: kept-alive connections to `http://` and `https://`
//! upstreams (hyper-util's pooling client over rustls), generic over the
//! request body and the resolver.

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::dns::{GaiResolver, Name};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio_rustls::rustls::ClientConfig;

/// Kept-alive connections to upstreams, resolving names with `R`; cheap to
/// clone (clones share the pool).
pub type UpstreamClient<B, R = GaiResolver> = Client<HttpsConnector<HttpConnector<R>>, B>;

/// A client whose TLS is checked by `tls`, resolving with this machine's
/// resolver.
pub fn client<B>(tls: ClientConfig) -> UpstreamClient<B>
where
    B: hyper::body::Body + Send + 'static + Unpin,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    client_resolving(tls, GaiResolver::new())
}

/// A client whose TLS is checked by `tls`, resolving names with `resolver`
/// (a `tower::Service<Name>` answering socket addresses).
pub fn client_resolving<B, R>(tls: ClientConfig, resolver: R) -> UpstreamClient<B, R>
where
    B: hyper::body::Body + Send + 'static + Unpin,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    R: tower_service::Service<Name> + Clone + Send + Sync + 'static,
    R::Response: Iterator<Item = std::net::SocketAddr>,
    R::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    R::Future: Send,
{
    let mut tcp = HttpConnector::new_with_resolver(resolver);
    tcp.set_nodelay(true);
    tcp.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp);
    Client::builder(TokioExecutor::new()).build(connector)
}
