//! [`SioError`]: why the client could not connect, join, send or go on.

/// What went wrong with a Socket.IO connection.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum SioError {
    /// The server could not be reached, or did not complete a handshake in time.
    #[error("{0}")]
    Unreachable(String),
    /// The server refused the token.
    #[error("{0}")]
    AuthRejected(String),
    /// The server refused to open a namespace for another reason.
    #[error("{0}")]
    Refused(String),
    /// The connection is gone.
    #[error("{0}")]
    Lost(String),
    /// The server broke the protocol; the connection was closed.
    #[error("the server broke the Socket.IO protocol: {0}")]
    Protocol(String),
    /// An event's payload did not decode.
    #[error("{0}")]
    Malformed(String),
    /// An outgoing payload could not be encoded.
    #[error("{0}")]
    Encode(String),
}
