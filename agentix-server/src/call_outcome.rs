//! What a unary call's worker side hands back: its [`Outcome`], and the
//! [`ResultPart`]s of a large result on their way to the host.
//!
//! Below both the call table and the replies that carry these to hosts.

use agentix_wire::errors::RemoteError;
use bytes::Bytes;

/// How a unary call ends: its CBOR value, in the pieces it arrived in
/// (`agentix_wire::part`), or an error.
pub(crate) type Outcome = Result<Vec<Bytes>, RemoteError>;

/// A part of a unary call's result on its way to the host.
#[derive(Debug)]
pub struct ResultPart {
    /// The whole result's size, as the worker announced it.
    pub total: u64,
    /// This part.
    pub bytes: Bytes,
}
