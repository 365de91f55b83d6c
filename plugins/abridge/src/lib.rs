//! abridge: agents in the sandbox call LLMs through the host.
//!
//! Inside the sandbox, [`serve`] starts an OpenAI-compatible HTTP endpoint
//! on 127.0.0.1 and returns its base URL; any agent that speaks the OpenAI
//! API (`OPENAI_BASE_URL=<url>`, any key) talks to it. Each request crosses
//! to the host on the `/abridge` namespace, where a [`Gateway`] calls the
//! real upstream (`Gateway::openai`: OpenAI, vLLM, SGLang, any compatible
//! server; `Gateway::anthropic`: Anthropic's API) with the key only the
//! host holds, and the answer comes back on the same namespace while the
//! agent keeps running.
//!
//! ```no_run
//! # use agentix_abridge::Gateway;
//! # async fn host(sandbox: &agentix::Sandbox, key: String) -> Result<(), Box<dyn std::error::Error>> {
//! // host
//! let gateway = Gateway::openai("http://127.0.0.1:8000/v1").key(key);
//! sandbox.register_namespace(gateway.namespace())?;
//! let url = sandbox.remote(agentix_abridge::serve, 0u16).await?;
//! // in the sandbox: OPENAI_BASE_URL=$url OPENAI_API_KEY=placeholder agent ...
//! # Ok(()) }
//! ```
//!
//! Upstream errors keep their meaning inside the sandbox: a 429 stays a
//! 429 with its `Retry-After`, any 4xx or 5xx is passed through, an
//! upstream that cannot be reached is a 502 and one that does not answer in
//! time a 504, each with an OpenAI-style error body.
//!
//! A request with `"stream": true` streams: each piece of the upstream's
//! server-sent events reaches the agent as it arrives, paced by the agent
//! (a window of [`exchange::STREAM_WINDOW`] pieces), and an agent that
//! disconnects closes the upstream connection.
//!
//! An agent that speaks Anthropic's Messages API (`POST /v1/messages`,
//! `POST /v1/messages/count_tokens`, `ANTHROPIC_BASE_URL=<url without
//! /v1>`) is served by either: to an OpenAI-compatible upstream,
//! [`anthropic`] and [`anthropic_stream`] translate requests, answers,
//! errors and stream events ([`upstream_shape`] says what goes where).
//!
//! Upstreams are reached over plain HTTP or TLS (rustls, the public roots
//! and any a gateway adds).
//!
//! Layout: [`Abridge`] is the namespace's protocol and [`exchange`] the
//! types that cross it; [`sandbox_endpoint`]
//! and [`sandbox_stream`] the sandbox half, whose stream items an
//! [`arriving_streams`] actor puts in order; [`gateway`], its
//! [`gateway_actor`], [`gateway_stream`] and [`upstream`] the host half.

pub mod anthropic;
pub mod anthropic_stream;
pub mod arriving_streams;
pub mod exchange;
pub mod exchange_log;
pub mod gateway;
pub mod gateway_actor;
pub mod gateway_stream;
pub mod observation;
pub mod sandbox_endpoint;
pub mod sandbox_stream;
pub mod upstream;
pub mod upstream_shape;

pub use exchange_log::{Exchange, ExchangeLog, JsonLinesRecorder, Recorder};
pub use gateway::Gateway;
pub use sandbox_endpoint::{serve, serve_with, stop, AbridgeError, EndpointOptions};
pub use upstream_shape::UpstreamShape;

agentix::plugin_crate!();

use exchange::{
    StreamAbandon, StreamAck, StreamHead, StreamItem, StreamOpen, UpstreamAnswer, UpstreamRequest,
};
use serde_json::value::RawValue;

agentix::namespace_protocol! {
    /// What abridge's two halves say on `/abridge`: the sandbox half asks
    /// for each agent request (`upstream`) or opens a stream (`stream`),
    /// acknowledges what it wrote and abandons what its agent left; the
    /// host half sends a stream's items. Bodies travel as the JSON text
    /// the agent wrote (`Box<RawValue>`), parsed by the host alone.
    pub struct Abridge = "/abridge";
    to_sandbox {
        events [StreamItem as "stream:item"]
        requests []
    }
    to_host {
        events [StreamAck as "stream:ack", StreamAbandon as "stream:abandon"]
        requests [
            UpstreamRequest<Box<RawValue>> as "upstream" => UpstreamAnswer,
            StreamOpen<Box<RawValue>> as "stream" => StreamHead,
        ]
    }
}

/// The namespace both halves meet on.
#[deprecated(
    since = "0.2.0",
    note = "use `<Abridge as agentix::protocol::Protocol>::PATH`"
)]
pub const NAMESPACE: &str = "/abridge";
/// The request the sandbox half sends for each HTTP request.
#[deprecated(
    since = "0.2.0",
    note = "use the `Abridge` protocol's `UpstreamRequest`"
)]
pub const EVENT_UPSTREAM: &str = "upstream";
/// The request that opens a streamed answer ([`exchange::StreamOpen`]).
#[deprecated(since = "0.2.0", note = "use the `Abridge` protocol's `StreamOpen`")]
pub const EVENT_STREAM: &str = "stream";
/// A piece of a streamed answer, host to sandbox ([`exchange::StreamItem`]).
#[deprecated(since = "0.2.0", note = "use the `Abridge` protocol's `StreamItem`")]
pub const EVENT_STREAM_ITEM: &str = "stream:item";
/// Items written to the agent, sandbox to host ([`exchange::StreamAck`]).
#[deprecated(since = "0.2.0", note = "use the `Abridge` protocol's `StreamAck`")]
pub const EVENT_STREAM_ACK: &str = "stream:ack";
/// The agent went away, sandbox to host ([`exchange::StreamAbandon`]).
#[deprecated(since = "0.2.0", note = "use the `Abridge` protocol's `StreamAbandon`")]
pub const EVENT_STREAM_ABANDON: &str = "stream:abandon";
