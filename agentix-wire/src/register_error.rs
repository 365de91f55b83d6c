//! [`RegisterError`]: why a plugin namespace could not be registered, on
//! either half.

/// Why a namespace could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// The path is reserved or not a path.
    #[error("{0}")]
    BadPath(String),
    /// Another namespace already has the path.
    #[error("`{0}` is already registered in this worker; a path belongs to one plugin")]
    Duplicate(String),
    /// Not inside a worker started by an Agentix server.
    #[error("namespaces can only be registered inside an Agentix worker")]
    NoWorker,
    /// The host connected already: its set of namespaces is fixed.
    #[error(
        "register host namespaces before the first remote call: the sandbox's \
         connections are planned when it first connects"
    )]
    AfterConnect,
}
