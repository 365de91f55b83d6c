//! The host side of Agentix: start sandboxes and call into them.
//!
//! Layout:
//! - [`config`]: [`SandboxConfig`], what a sandbox is made of;
//!   [`bundle_digest`]: a bundle's identity, for keying what is made from it.
//! - [`provider`]: the [`Provider`] trait; [`provider_error`]: [`ProviderError`];
//!   [`sandbox_info`]: [`SandboxInfo`];
//!   [`provider_registry`]: providers by name.
//! - [`sandbox_resources`]: [`SandboxResources`], how a provider deletes a
//!   sandbox (and snapshots it: `sandbox_state`, [`SandboxState`]);
//!   [`detached_shutdown`]: a deletion on a runtime of its own;
//!   [`end_report`]: [`EndReport`], how a sandbox watched from afar ended.
//! - [`sandbox_registry`]: [`SandboxRegistry`], a provider's live sandboxes.
//! - [`secret`]: random sandbox ids and tokens.
//! - [`socket_forward`]: [`SocketForward`], a host socket whose connections
//!   a provider carries to a server it cannot dial (through an engine's API
//!   or a cluster's port-forward).
//! - [`container_settings`]: what a container provider makes of a sandbox.
//! - [`local`]: [`LocalProvider`], the embedded default (local child processes);
//!   [`isolation`]: [`Isolation`], how a local sandbox is kept apart from the
//!   host; [`sandbox_limits`]: [`SandboxLimits`], what a sandbox may use;
//!   `cgroup_limits`: a root host's cgroup per sandbox; `port_forward`: an
//!   isolated sandbox's TCP address on the host.
//! - [`fd_limit`]: the process's open-file limit, which many sandboxes reach.
//! - [`owner`]: [`OwnerId`], the host process a sandbox belongs to, for reaping;
//!   [`sandbox_marker`] and [`snapshot_record`] record what each host
//!   started, as files of a `json_files` directory.
//! - [`keeper`]: the threads that start, watch and reap local server processes.
//! - [`sandbox`]: [`Sandbox`], the handle user code calls through;
//!   [`sandbox_actor`]: [`SandboxActor`], the same sandbox behind a mailbox;
//!   [`sandbox_supervisor`]: [`SandboxSupervisor`], which starts another when its server dies.
//! - [`call`]: [`Call`], one unary call with an optional deadline.
//! - [`stream`]: [`StreamCall`] and [`CallStream`], a streaming call's items.
//! - [`sio`]: the Socket.IO client: one websocket, every namespace, binary attachments.
//! - [`connection`]: `/rpc` on that websocket and its pending calls;
//!   [`connect`]: what calls need of a sandbox (so they sit below it).
//! - `health`: `GET /health`, `POST /pause` and `/resume` over plain HTTP/1.
//! - [`snapshot`]: [`Snapshot`], a sandbox's state to start others from;
//!   [`snapshot_record`]: what is written of each, so it is listed,
//!   opened again and reaped;
//!   [`tree_copy`]: a directory tree copied (reflinked where it can be), as
//!   local snapshots are made and restored and a bundle is installed into
//!   a pod's volume.
//! - `relay_listener`: joining `/log` or `/trace`, batches handled off the receive path.
//! - [`log_replay`]: `/log`, sandbox records replayed into the host's logging;
//!   [`log_sink`]: the same records to a sink actor.
//! - [`namespace`]: plugin namespaces, host half: handlers and request handlers;
//!   [`host_half`]: a typed protocol's host half, closures or actors.
//! - [`trace_replay`]: `/trace`, sandbox spans replayed to the host's processors.
//! - [`logging`]: [`configure_logging`], a readable host default.
//!
//! Works from a plain `#[tokio::main]`: no actix system is needed on the host
//! (its actors run on a background arbiter then).

pub mod bundle_digest;
mod call;
pub(crate) mod cgroup_limits;
mod config;
mod connect;
mod connection;
mod container_settings;
pub mod detached_shutdown;
pub mod end_report;
mod endpoint;
pub mod fd_limit;
mod health;
mod host_half;
mod isolation;
mod json_files;
mod keeper;
mod local;
mod log_replay;
mod log_sink;
mod logging;
mod namespace;
pub mod namespace_budget;
pub mod owner;
mod pending_calls;
pub(crate) mod port_forward;
mod provider;
mod provider_error;
mod provider_registry;
mod relay_listener;
mod rpc_routes;
mod sandbox;
pub mod sandbox_actor;
mod sandbox_info;
mod sandbox_limits;
pub mod sandbox_marker;
mod sandbox_registry;
mod sandbox_resources;
mod sandbox_state;
pub mod sandbox_supervisor;
pub mod sandbox_user;
pub mod secret;
mod sio;
pub mod snapshot;
pub mod snapshot_record;
pub mod socket_forward;
mod stream;
mod trace_replay;
pub mod tree_copy;

pub use call::Call;
pub use config::{SandboxConfig, BASE_ENV};
pub use container_settings::{ContainerMount, ContainerNetwork, ContainerSettings};
pub use detached_shutdown::shutdown_detached;
pub use end_report::EndReport;
pub use fd_limit::{fd_limit, raise_fd_limit};
pub use host_half::{HostEnd, HostHalf};
pub use isolation::{Isolation, NamespaceIsolation};
pub use local::LocalProvider;
pub use log_replay::LogTap;
pub use log_sink::SandboxLog;
pub use logging::configure_logging;
pub use namespace::{HostNamespace, HostNamespaceHandle};
pub use namespace_budget::NamespaceLoad;
pub use owner::{Liveness, OwnerId};
pub use provider::Provider;
pub use provider_error::{last_lines, ProviderError};
pub use provider_registry::{provider, provider_names, ProviderFactory};
pub use sandbox::Sandbox;
pub use sandbox_actor::SandboxActor;
pub use sandbox_info::SandboxInfo;
pub use sandbox_limits::SandboxLimits;
pub use sandbox_marker::{MarkerDir, SandboxMarker};
pub use sandbox_registry::SandboxRegistry;
pub use sandbox_resources::SandboxResources;
pub use sandbox_state::SandboxState;
pub use sandbox_supervisor::SandboxSupervisor;
pub use sandbox_user::RunAs;
pub use snapshot::{Snapshot, SnapshotSpec, SnapshotStore};
pub use snapshot_record::{SnapshotRecord, SnapshotRecords};
pub use socket_forward::SocketForward;
pub use stream::{CallStream, StreamCall};
