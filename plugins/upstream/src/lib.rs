//! The HTTP client that plugin gateways on the host use to reach their
//! upstreams (abridge's LLM APIs, egress's named routes): one place for
//! how TLS is checked and connections are kept.
//!
//! [`tls`] builds the rustls configuration (Mozilla's roots and any private
//! CA a gateway adds); [`client`] builds a pooling hyper client on it,
//! resolving names with this machine's resolver or one the gateway gives;
//! [`error_chain`] turns the client's terse errors into a readable line.

pub mod client;
pub mod error_chain;
pub mod tls;

pub use client::{client, client_resolving, UpstreamClient};
pub use error_chain::causes;
pub use tls::client_config;
