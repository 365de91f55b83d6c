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
//! - [`calls`]: the table of calls waiting for a worker or in flight.
//! - [`server_supervisor`]: the `ServerSupervisor` actor, root of the tree;
//!   [`server_child`]: the names of the children it and its children restart.
//! - [`supervisor`]: the `WorkerSupervisor` actor: owns the worker, restarts it.
//! - [`call_router`]: the `CallRouter` actor: holds the calls, correlates replies.
//! - [`call_request`]: a host's `call` event, checked and decoded.
//! - [`rpc`]: the `/rpc` Socket.IO namespace.
//! - [`forwarder`]: plugin namespaces, forwarded both ways without knowing their events.
//! - [`channel_relay`]: the `ChannelRelay` actors, one carrying `/log` and one
//!   `/trace` to hosts; [`side_relay`]: the handle the worker's pumps send through.
//! - [`side_credits`]: how far behind each host may be on the side channels.
//! - [`side_namespaces`]: the `/log` and `/trace` namespaces hosts listen on.
//! - [`http`]: `/health`, the token gate and the listener.
//! - [`listener`]: a TCP port or a Unix socket to take connections on;
//!   [`stall_limit`]: a connection that gives up on a peer taking no bytes;
//!   [`connection_writes`]: the bytes a connection has written, which
//!   [`host_backlog`] reads to bound what a host's socket holds.
//! - [`upgrade_gate`]: no Socket.IO session without the token on the request.
//! - [`isolation`]: the launcher that runs the server in namespaces of its
//!   own (`bundle isolate`); [`loopback`] raises `lo` inside them.
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

pub mod auth;
pub mod call_request;
pub mod call_router;
pub mod calls;
pub mod channel_relay;
pub mod config;
pub mod connection_writes;
pub mod emit;
pub mod forwarder;
pub mod host_backlog;
pub mod http;
pub mod init_process;
pub mod isolation;
pub mod listener;
pub mod loopback;
pub mod oom_kills;
pub mod raw_event;
pub mod rpc;
pub mod serve;
pub mod server;
pub mod server_child;
pub mod server_supervisor;
pub mod side_credits;
pub mod side_namespaces;
pub mod side_relay;
pub mod stall_limit;
pub mod supervisor;
pub mod syscall_filter;
pub mod upgrade_gate;
pub mod worker;
pub mod worker_pipes;
pub mod worker_process;

pub use config::ServerConfig;
pub use serve::run;
pub use server::{Server, StartError};
pub use server_supervisor::ServerSupervisor;
