//! The host side of Agentix: start sandboxes and call into them.
//!
//! Layout:
//! - [`config`]: [`SandboxConfig`], what a sandbox is made of.
//! - [`provider`]: the [`Provider`] trait and [`ProviderError`].
//! - [`local`]: [`LocalProvider`], the embedded default (local child processes).
//! - [`keeper`]: the thread that starts, watches and reaps local server processes.
//! - [`sandbox`]: [`Sandbox`], the handle user code calls through.
//! - [`call`]: [`Call`], one unary call with an optional deadline.
//! - [`stream`]: [`StreamCall`] and [`CallStream`], a streaming call's items.
//! - [`connection`]: the `/rpc` Socket.IO connection and its pending calls.
//! - [`log_replay`]: `/log`, sandbox records replayed into the host's logging.
//! - `namespace_client`: joining `/log`, `/trace` or a plugin namespace.
//! - [`namespace`]: plugin namespaces, host half: handlers and request handlers.
//! - [`trace_replay`]: `/trace`, sandbox spans replayed to the host's processors.
//! - [`logging`]: [`configure_logging`], a readable host default.
//! - `nodelay`: turning off Nagle on the client's socket (why: see there).
//!
//! Works from a plain `#[tokio::main]`: no actix system is needed on the host.

pub mod call;
pub mod config;
pub mod connection;
pub mod keeper;
pub mod local;
pub mod log_replay;
pub mod logging;
pub mod namespace;
mod namespace_client;
mod nodelay;
pub mod provider;
pub mod sandbox;
pub mod stream;
pub mod trace_replay;

pub use call::Call;
pub use config::SandboxConfig;
pub use local::LocalProvider;
pub use log_replay::LogTap;
pub use logging::configure_logging;
pub use namespace::{ClientNamespace, HostNamespace};
pub use provider::{Provider, ProviderError};
pub use sandbox::Sandbox;
pub use stream::{CallStream, StreamCall};
