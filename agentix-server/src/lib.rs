//! The generic Agentix runtime server.
//!
//! It serves hosts over Socket.IO and `GET /health` on one port, and owns one
//! worker process (the user's bundle) that runs the calls. It knows no remote
//! function and no plugin event: it forwards.
//!
//! Layout:
//! - [`config`]: command-line flags and environment.
//! - [`worker`]: the `Worker` actor, one generation of the worker process;
//!   [`worker_pipes`]: the tasks that pump its pipes;
//! - [`worker_process`]: starting the worker with its frame pipes, capturing its output;
//!   [`oom_kills`] tells an OOM kill from another SIGKILL.
//! - [`auth`]: the sandbox token check and the connect middleware applying it.
//! - [`emit`]: one event to one host, waiting rather than dropping.
//! - [`raw_event`]: an event's JSON and binary frames, undecoded.
//! - [`calls`]: the table of calls waiting for a worker or in flight;
//!   [`call_outcome`]: how a unary call ends; [`host_reply`]: a unary call's
//!   outcome emitted to its host by the router itself.
//! - [`server_supervisor`]: the `ServerSupervisor` actor, root of the tree;
//!   [`server_child`]: the names of the children it and its children restart.
//! - [`supervisor`]: the `WorkerSupervisor` actor: owns the worker, restarts it.
//! - [`call_router`]: the `CallRouter` actor: holds the calls, correlates replies.
//! - [`call_request`]: a host's `call` event, checked and decoded.
//! - [`rpc`]: the `/rpc` Socket.IO namespace; [`inline_handler`]: its
//!   handlers that run where the event is read, with no task each.
//! - [`forwarder`]: plugin namespaces, forwarded both ways without knowing their events.
//! - [`channel_relay`]: the `ChannelRelay` actors, one carrying `/log` and one
//!   `/trace` to hosts; [`relays`]: the handle the worker's pumps send through.
//! - [`relay_credits`]: how far behind each host may be on the side channels.
//! - [`log_trace_namespaces`]: the `/log` and `/trace` namespaces hosts listen on.
//! - [`http`]: `/health`, `/pause`, `/resume`, `/state.tar`, the token gate
//!   and the listener; [`state_archive`]: the sandbox's state as a tar
//!   archive, for snapshots and the sandboxes started from them.
//! - [`listener`]: a TCP port or a Unix socket to take connections on;
//!   [`stall_limit`]: a connection that gives up on a peer taking no bytes;
//!   [`connection_writes`]: the bytes a connection has written, which
//!   [`host_backlog`] reads to bound what a host's socket holds.
//! - [`upgrade_gate`]: no Socket.IO session without the token on the request.
//! - [`isolation`]: the launcher that runs the server in namespaces of its
//!   own (`bundle isolate`); [`loopback`] raises `lo` inside them.
//! - [`stdio_relay`]: `bundle relay`, stdio joined to the server's socket,
//!   for a host that reaches a container only through its engine's API.
//! - [`server`]: [`Server`], which ties them together inside a running actix
//!   `System` (embeddable: nothing process-wide);
//!   [`serve`]: [`run`], the binary's entry point, which owns the process.
//!
//! The actor tree:
//!
//! ```text
//! ServerSupervisor                 root; restarts its children by policy
//! ├── WorkerSupervisor             worker restart policy
//! │   ├── Worker                   one per generation: the process, pumped by worker_pipes
//! │   └── NamespaceForwarder × N   one per plugin namespace the worker opened
//! ├── CallRouter                   call table; replies correlated by mailbox
//! └── ChannelRelay × 2             /log and /trace to hosts
//! ```

mod auth;
mod call_outcome;
mod call_request;
mod call_router;
mod calls;
mod channel_relay;
mod config;
mod connection_writes;
mod emit;
mod forwarder;
mod host_backlog;
mod host_reply;
mod http;
pub mod init_process;
mod inline_handler;
pub mod isolation;
mod listener;
mod log_trace_namespaces;
mod loopback;
mod oom_kills;
mod raw_event;
mod relay_credits;
mod relays;
mod rpc;
mod serve;
mod server;
pub mod server_child;
pub mod server_supervisor;
mod staging_root;
mod stall_limit;
mod state_archive;
pub mod stdio_relay;
mod supervisor;
pub mod syscall_filter;
mod upgrade_gate;
mod worker;
mod worker_pipes;
mod worker_process;

pub use config::{ServerConfig, DEFAULT_MAX_MESSAGE_BYTES, ENV_TOKEN};
pub use serve::run;
pub use server::{Server, StartError};
pub use server_supervisor::ServerSupervisor;
