//! The calls waiting on one `/rpc` connection: who waits for each call id
//! ([`Waiter`]), what a streaming call receives ([`StreamEvent`]), and how a
//! call is completed or every call failed at once.
//!
//! A concurrent map: the connection's receive path completes calls while
//! callers add and remove theirs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use agentix_wire::errors::{ErrorKind, RemoteError};
use bytes::Bytes;
use dashmap::DashMap;
use tokio::sync::{mpsc, oneshot};

/// A unary call's result as it arrived: its pieces, joined by the caller
/// rather than on the connection's receive path.
pub(crate) type Arrived = Result<Vec<Bytes>, RemoteError>;
/// The calls waiting, by call id.
pub(crate) type Pending = DashMap<u64, Waiter>;

/// What a streaming call receives, in order; `End` or `Error` comes last.
#[derive(Debug)]
pub(crate) enum StreamEvent {
    /// A CBOR array of CBOR-encoded items; decoded by the reader of the
    /// stream, not on the connection's receive path.
    Items(Bytes),
    /// The stream ended after its last item.
    End,
    /// The stream ended with this error.
    Error(RemoteError),
}

/// Who waits for a call's events.
pub(crate) enum Waiter {
    /// A unary call's caller.
    Unary(oneshot::Sender<Arrived>),
    /// A streaming call's reader.
    Stream(mpsc::UnboundedSender<StreamEvent>),
}

impl Waiter {
    /// Ends the wait with `error`.
    pub(crate) fn fail(self, error: RemoteError) {
        match self {
            Waiter::Unary(tx) => {
                let _ = tx.send(Err(error));
            }
            Waiter::Stream(tx) => {
                let _ = tx.send(StreamEvent::Error(error));
            }
        }
    }
}

/// Completes call `id` with `outcome`.
pub(crate) fn complete(pending: &Pending, id: u64, outcome: Arrived) {
    match (pending.remove(&id), outcome) {
        (Some((_, Waiter::Unary(tx))), outcome) => {
            let _ = tx.send(outcome);
        }
        (Some((_, stream)), Err(error)) => stream.fail(error),
        (Some((_, stream)), Ok(_)) => stream.fail(RemoteError::new(
            ErrorKind::Protocol,
            "the server ended a streaming call with a single result",
        )),
        (None, _) => tracing::debug!(id, "reply for a call nobody waits for; dropped"),
    }
}

/// Ends every pending call with `err` and marks the connection dead.
pub(crate) fn fail_all(
    pending: &Pending,
    alive: &AtomicBool,
    lost: &Mutex<Option<RemoteError>>,
    err: RemoteError,
) {
    alive.store(false, Ordering::Release);
    lost.lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(|| err.clone());
    let ids: Vec<u64> = pending.iter().map(|e| *e.key()).collect();
    for id in ids {
        complete(pending, id, Err(err.clone()));
    }
}
