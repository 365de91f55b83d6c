//! The kernel's worker layer: the runtime inside a sandbox that serves
//! calls over the frame pipes, the link-time registry of remote functions,
//! the side pipe that carries logs, output and spans to the server, and
//! the sandbox half of plugin namespaces. It builds on `agentix-wire`,
//! `agentix-trace` and `agentix-actors`.
//!
//! Layout:
//! - [`worker`]: the worker runtime that serves calls over the frame pipes;
//!   `running_calls` and `stream_call` track and drive its calls.
//! - [`worker_context`]: one worker's namespaces and its plugins' state;
//!   [`worker_start`]: plugin code every worker runs before its first call.
//! - [`registry`]: the link-time registry of remote functions in a worker;
//!   [`invoke`]: argument decoding and outcome encoding around one call.
//! - [`side_pipe`]: the worker's side pipe: log records and trace events
//!   to the server; [`output_capture`]: the worker's own stdout and stderr,
//!   in order with its logs; [`span_bound`]: a span cut to what one batch
//!   carries; [`span_bridge`]: `tracing` spans in sandbox code as agentix
//!   spans.
//! - [`namespace`]: plugin namespaces, sandbox half: handlers, emit,
//!   requests; [`sandbox_half`]: a typed protocol's sandbox half, closures
//!   or actors.

pub mod invoke;
pub mod namespace;
pub mod output_capture;
pub mod registry;
mod running_calls;
pub mod sandbox_half;
mod side_pipe;
mod span_bound;
mod span_bridge;
mod stream_call;
pub mod worker;
pub mod worker_context;
pub mod worker_start;
