//! [`ConnectionWrites`]: how many bytes one accepted connection has handed
//! to the kernel, counted by its [`StallLimit`](crate::stall_limit::StallLimit)
//! and carried to Socket.IO in the extensions of the requests made on it.
//!
//! Socket.IO queues a host's packets in a channel bounded by their number
//! only, and says nothing of how far its writer has got. The count of bytes
//! written is what tells the server that a host has stopped taking them
//! (see [`crate::host_backlog`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes one connection has written so far; cheap to clone, shared by the
/// connection and whoever watches it.
#[derive(Clone, Debug, Default)]
pub(crate) struct ConnectionWrites(Arc<AtomicU64>);

impl ConnectionWrites {
    /// Counts `bytes` more written.
    pub(crate) fn add(&self, bytes: usize) {
        self.0.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Bytes written since the connection was accepted.
    pub(crate) fn total(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}
