//! The kernel's wire layer: every frame and event Agentix processes send
//! each other, how they are encoded and framed, the error value a call can
//! end with, and the Unix plumbing that carries them (pipes, process
//! groups, the allocator's large buffers). It builds on `agentix-trace`
//! (a call carries its span context) and nothing else of Agentix's.
//!
//! Layout:
//! - [`wire`]: every frame between server and worker, and every `/rpc` event
//!   between host and server, in one place.
//! - [`attachment`]: bytes that travel beside an event as binary attachments;
//!   [`placeholder_json`]: an event passed on with its attachments in place.
//! - [`part`]: large payloads cut into parts, so they never block a hop.
//! - [`codec`]: length-prefixed CBOR framing for the server <-> worker pipes;
//!   [`bulk_lane`] keeps large payloads' parts from blocking them;
//!   [`budgeted_channel`]: a queue bounded in bytes as well as items;
//!   [`frame_bytes`]: a frame's bytes as CBOR carries them.
//! - [`cbor`]: CBOR helpers for values and byte blobs; [`json_text`]: JSON
//!   kept as the text it came as.
//! - [`errors`]: the in-band error value every call can end with;
//!   [`raised`]: how a function's own error type becomes one;
//!   [`text_cut`]: cutting text to a size, saying so.
//! - [`remote`]: the typed handle `#[remote]` generates for each function;
//!   [`call_args`] lets a one-argument call pass the bare value.
//! - [`request_envelope`]: a namespace request's `:result` / `:error` reply;
//!   [`register_error`]: why a namespace could not be registered;
//!   [`outbox`]: a namespace's frames to the server, in order, bounded.
//! - [`log_record`]: one line of what a sandbox logged or printed;
//!   [`log_file`]: the sandbox log file the worker and the server append to.
//! - [`process`]: small Unix process helpers shared by every spawner;
//!   [`isolation_spec`]: an isolated sandbox's namespaces, as the command
//!   line between the host and the bundle's launcher;
//!   [`send_buffer`]: a host <-> server socket's send buffer, sized for a part.

pub mod attachment;
pub mod budgeted_channel;
mod bulk_lane;
pub mod call_args;
pub mod cbor;
pub mod codec;
mod command_flags;
pub mod errors;
pub mod frame_bytes;
pub mod isolation_spec;
pub mod json_text;
pub mod launch_spec;
pub mod log_file;
pub mod log_record;
pub mod outbox;
pub mod part;
pub mod placeholder_json;
pub mod process;
pub mod quiet_unix_stream;
pub mod raised;
pub mod register_error;
pub mod remote;
pub mod request_envelope;
pub mod send_buffer;
pub mod text_cut;
pub mod wire;

pub use call_args::CallArgs;
pub use errors::{ErrorKind, RemoteError};
pub use remote::{Remote, RemoteStream};

/// The version every Agentix process reports (server `/health`, worker hello).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
