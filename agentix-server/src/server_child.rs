//! [`ServerChild`]: the names of the restartable children of a server's
//! actor tree, shared by the parents that restart them and by
//! [`RestartChild`](crate::server_supervisor::RestartChild).

/// A restartable child of the server's tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerChild {
    /// The worker's supervisor (and with it the worker process).
    WorkerSupervisor,
    /// The call router (and with it the calls in flight).
    CallRouter,
    /// The forwarder of plugin namespace `path`.
    Forwarder(String),
    /// The relay of `/log` to hosts.
    LogRelay,
    /// The relay of `/trace` to hosts.
    TraceRelay,
}
