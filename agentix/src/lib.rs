//! Call functions inside sandboxes as if they were local async functions.
//!
//! This facade re-exports what user code needs:
//! - in a crate shared by host and bundle: [`remote`] and [`Blob`] (and
//!   [`stream`], [`Stream`] and [`StreamExt`] for streaming functions);
//! - in the host program: [`LocalProvider`], [`SandboxConfig`], [`Sandbox`],
//!   [`configure_logging`], [`HostNamespace`]; in a program of actors,
//!   [`SandboxActor`] and its messages ([`RemoteCall`], [`CallJson`],
//!   [`StreamTo`]) and [`SandboxSupervisor`];
//! - in the bundle binary: [`bundle::main`] (or [`bundle::main_with`] to run
//!   setup, such as [`register_namespace`], in every worker);
//! - in a crate shared by a plugin's two halves: [`namespace_protocol!`],
//!   the typed events and requests each half may send; then
//!   [`SandboxHalf`] / [`SandboxEnd`] in the bundle and [`HostHalf`] /
//!   [`HostEnd`] in the host, as closures or as actors handling
//!   [`Received`] and [`Asked`];
//! - anywhere: [`trace`] for traces and spans; [`actix`], [`start_actor`]
//!   and the untyped [`NamespaceEvent`] / [`NamespaceRequest`] messages for
//!   plugin namespaces written as actors;
//! - in a service that runs sandbox servers in its own actix `System`:
//!   [`server`] (`agentix::server::Server`).
//!
//! `use agentix::prelude::*;` brings the traits and types a host needs.
//!
//! ```no_run
//! use agentix::prelude::*;
//!
//! #[agentix::remote]
//! pub async fn shout(input: String) -> String { input.to_uppercase() }
//!
//! # async fn host(bundle: &str) -> Result<(), Box<dyn std::error::Error>> {
//! let provider = LocalProvider::new();
//! let sandbox = provider.session(SandboxConfig::new(bundle)).await?;
//! assert_eq!(sandbox.remote(shout, "hi".to_string()).await?, "HI");
//! # Ok(()) }
//! # fn main() {}
//! ```

pub mod bundle;

pub use actix;
pub use agentix_actors::actor_home::start_actor;
pub use agentix_actors::namespace_messages::{
    CancellationToken, NamespaceEvent, NamespaceFault, NamespaceRequest,
};
pub use agentix_actors::namespace_protocol;
pub use agentix_actors::protocol::{self, Asked, Received};
pub use agentix_actors::restart_policy::RestartPolicy;
pub use agentix_fleet as fleet;
pub use agentix_host::bundle_digest;
pub use agentix_host::namespace_budget::{self, NamespaceLoad};
pub use agentix_host::owner;
pub use agentix_host::sandbox_actor::{
    CallJson, RemoteCall, SandboxActor, SandboxHealth, StreamItem, StreamTo,
};
pub use agentix_host::sandbox_marker::{self, MarkerDir, SandboxMarker};
pub use agentix_host::sandbox_supervisor::{SandboxRestarts, SandboxSupervisor, StopSupervising};
pub use agentix_host::sandbox_user::{host_is_root, SANDBOX_UID_BASE};
pub use agentix_host::{
    configure_logging, fd_limit, last_lines, provider, provider_names, raise_fd_limit,
    secret::random_hex, shutdown_detached, Call, CallStream, ContainerMount, ContainerNetwork,
    ContainerSettings, EndReport, HostEnd, HostHalf, HostNamespace, HostNamespaceHandle, Isolation,
    Liveness, LocalProvider, LogTap, NamespaceIsolation, OwnerId, Provider, ProviderError, RunAs,
    Sandbox, SandboxConfig, SandboxInfo, SandboxLimits, SandboxLog, SandboxRegistry,
    SandboxResources, SandboxState, Snapshot, SnapshotRecord, SnapshotRecords, SnapshotSpec,
    SnapshotStore, SocketForward, StreamCall, BASE_ENV,
};
pub use agentix_macros::remote;
pub use agentix_trace as trace;
pub use agentix_wire::attachment::Attachment;
pub use agentix_wire::call_args::CallArgs;
pub use agentix_wire::cbor::Blob;
pub use agentix_wire::errors::{DataError, ErrorKind, RemoteError};
pub use agentix_wire::json_text::JsonText;
pub use agentix_wire::log_record::LogRecord;
pub use agentix_wire::process;
pub use agentix_wire::remote::{Remote, RemoteStream};
pub use agentix_wire::wire::Window;
pub use agentix_wire::wire::ENV_FILES_ROOT;
pub use agentix_worker::namespace::{
    RegisterError, RemoteSioError, SandboxNamespace, SandboxNamespaceHandle,
};
pub use agentix_worker::sandbox_half::{SandboxEnd, SandboxHalf};
pub use agentix_worker::worker_context::{register_namespace, WorkerContext};
pub use futures_util::{stream, Stream, StreamExt};
pub use serde_json::Value as JsonValue;

/// The sandbox server: [`Server`](server::Server) embeds it in a running
/// actix `System`, [`run`](server::run) is a bundle's entry point, and the
/// rest are the messages its supervision tree answers. (v0.1 exported the
/// whole server crate here; its internals are its own now.)
pub mod server {
    pub use agentix_server::server_child::{self, ServerChild};
    pub use agentix_server::server_supervisor::{
        self, Drain, RelayRestarts, RestartChild, RouterRestarts, ServerSupervisor, StopTree,
        SupervisorRestarts, TreeAddrs,
    };
    pub use agentix_server::syscall_filter;
    pub use agentix_server::{
        run, Server, ServerConfig, StartError, DEFAULT_MAX_MESSAGE_BYTES, ENV_TOKEN,
    };
}

/// What host code needs in scope, in one line: `use agentix::prelude::*;`
/// (the [`Provider`] trait for `create`/`session`, [`StreamExt`] for
/// reading streams, [`trace::InSpan`] for `fut.in_span(span)`, and the
/// types every call site names).
pub mod prelude {
    pub use crate::trace::InSpan;
    pub use crate::{
        Blob, ErrorKind, LocalProvider, Provider, RemoteError, Sandbox, SandboxConfig, StreamExt,
    };
}

/// Items the `#[remote]` expansion refers to; not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use agentix_host::ProviderFactory;
    pub use agentix_wire::raised::{RaisePlain, RaiseWithData, Raised};
    pub use agentix_wire::remote::Fallible;
    pub use agentix_worker::invoke;
    pub use agentix_worker::registry::{Invoke, RemoteFn};
    pub use agentix_worker::worker_start::WorkerStart;
    pub use inventory;
}

/// Registers a provider under `name` for [`provider`]: `make` is a
/// `fn() -> Result<Box<dyn Provider>, ProviderError>` that configures it
/// from environment variables. Put it in the provider crate's root module
/// (which `link_plugins!` links).
#[macro_export]
macro_rules! register_provider {
    ($name:expr, $make:path) => {
        $crate::__private::inventory::submit! {
            $crate::__private::ProviderFactory {
                name: $name,
                registered_by: module_path!(),
                make: $make,
            }
        }
    };
}

/// Inside a sandbox: its private directory for state that must outlive a
/// worker (the durable log directory), if it is set and nobody else may
/// write it.
pub fn state_dir() -> Option<std::path::PathBuf> {
    agentix_wire::log_file::private_dir()
}

/// Runs `f` (a `fn()`) in every worker before it takes calls: the place for
/// a plugin to clean up what a killed worker left behind.
#[macro_export]
macro_rules! on_worker_start {
    ($f:path) => {
        $crate::__private::inventory::submit! {
            $crate::__private::WorkerStart { run: $f }
        }
    };
}

/// Marks the root module of a crate of `#[remote]` functions (a plugin) so
/// that a bundle can link it with [`link_plugins!`].
///
/// Functions are registered when their object code is linked, and a linker
/// only takes code that something refers to. A bundle that never names a
/// plugin's items would silently lose its functions; this macro gives the
/// bundle something to name. Keep the plugin's `#[remote]` functions in the
/// module that invokes it (its root).
#[macro_export]
macro_rules! plugin_crate {
    () => {
        /// Referenced by `agentix::link_plugins!` to link this crate's
        /// remote functions into a bundle.
        #[doc(hidden)]
        #[inline(never)]
        pub fn __agentix_link() {}
    };
}

/// Links the remote functions of plugin crates into this bundle: put
/// `agentix::link_plugins!(agentix_bash, agentix_files);` in the bundle's
/// `main`, before `agentix::bundle::main()` or `dispatch()`.
#[macro_export]
macro_rules! link_plugins {
    ($($krate:ident),+ $(,)?) => {
        ::core::hint::black_box([$($krate::__agentix_link as fn()),+])
    };
}
