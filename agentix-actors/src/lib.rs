//! The kernel every Agentix process shares.
//!
//! Layout:
//! - [`wire`]: every frame between server and worker, and every `/rpc` event
//!   between host and server, in one place.
//! - [`attachment`]: bytes that travel beside an event as binary attachments.
//! - [`part`]: large payloads cut into parts, so they never block a hop.
//! - [`codec`]: length-prefixed CBOR framing for the server <-> worker pipes;
//!   [`bulk_lane`] keeps large payloads' parts from blocking them;
//!   [`budgeted_channel`]: a queue bounded in bytes as well as items.
//! - [`cbor`]: CBOR helpers for values and byte blobs.
//! - [`errors`]: the in-band error value every call can end with.
//! - [`log_record`]: one line of what a sandbox logged or printed.
//! - [`log_file`]: the sandbox log file the worker and the server append to.
//! - [`protocol`]: typed namespace protocols, declared once for both halves;
//!   [`sandbox_half`]: a typed protocol's sandbox half, closures or actors.
//! - [`namespace`]: plugin namespaces, sandbox half: handlers, emit, requests;
//!   [`namespace_messages`]: what a namespace actor handles, on either side;
//!   [`event_lane`]: a namespace's events, handled one at a time in order;
//!   [`event_route`]: a namespace's events to an actor, in order, bounded;
//!   [`outbox`]: a namespace's frames to the server, in order, bounded.
//! - [`remote`]: the typed handle `#[remote]` generates for each function;
//!   [`call_args`] lets a one-argument call pass the bare value.
//! - [`registry`]: the link-time registry of remote functions in a worker.
//! - [`invoke`]: argument decoding and outcome encoding around one call.
//! - [`side_channel`]: the worker's side pipe: log records and trace events to the server.
//! - [`output_capture`]: the worker's own stdout and stderr, in order with its logs.
//! - [`span_bridge`]: `tracing` spans in sandbox code as agentix spans.
//! - [`trace`]: traces, spans, processors, and their context across `.await`.
//! - [`worker`]: the worker runtime that serves calls over the frame pipes;
//!   `stream_call` drives one streaming call under its window.
//! - [`worker_context`]: one worker's namespaces and its plugins' state.
//! - [`worker_start`]: plugin code every worker runs before its first call.
//! - [`process`]: small Unix process helpers shared by every spawner;
//!   [`isolation_spec`]: an isolated sandbox's namespaces, as the command
//!   line between the host and the bundle's launcher.
//! - [`send_buffer`]: a host <-> server socket's send buffer, sized for a part.
//! - [`restart_policy`]: when a supervisor restarts a child, as a pure value;
//!   [`supervision`]: how a parent hears that a child ended, and the address
//!   of a child it replaces; [`actor_home`]: where an actor runs, with or
//!   without an actix `System`.

pub mod actor_home;
pub mod attachment;
pub mod budgeted_channel;
pub mod bulk_lane;
pub mod call_args;
pub mod cbor;
pub mod codec;
pub mod errors;
pub mod event_lane;
pub mod event_route;
pub mod frame_bytes;
pub mod invoke;
pub mod isolation_spec;
pub mod json_text;
pub mod log_file;
pub mod log_record;
pub mod namespace;
pub mod namespace_messages;
pub mod outbox;
pub mod output_capture;
pub mod part;
pub mod process;
pub mod protocol;
pub mod raised;
pub mod registry;
pub mod remote;
pub mod request_envelope;
pub mod restart_policy;
mod running_calls;
pub mod sandbox_half;
pub mod send_buffer;
pub mod side_channel;
pub mod span_bridge;
mod stream_call;
pub mod supervision;
pub mod text_cut;
pub mod trace;
pub mod wire;
pub mod worker;
pub mod worker_context;
pub mod worker_start;

pub use call_args::CallArgs;
pub use errors::{ErrorKind, RemoteError};
pub use remote::{Remote, RemoteStream};

/// The version every Agentix process reports (server `/health`, worker hello).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
