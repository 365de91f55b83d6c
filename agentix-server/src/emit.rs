//! [`emit`]: one event to one host socket, never dropped for a full queue;
//! [`emit_soon`]: the same from code that cannot wait; [`emit_within`]: the
//! same, giving up on a socket that stays full.
//!
//! Shared by every namespace that sends to hosts (`/rpc`, `/log`, `/trace`,
//! plugin forwarders).

use std::time::Duration;

use serde::Serialize;
use socketioxide::extract::SocketRef;
use socketioxide::{SendError, SocketError};

/// Emits `data`, waiting while the socket's send queue is full: a reply is
/// never dropped while the socket is connected.
pub(crate) async fn emit<T: Serialize + ?Sized>(s: &SocketRef, event: &str, data: &T) {
    let mut backoff = Duration::from_micros(200);
    loop {
        match s.emit(event, data) {
            Ok(()) => return,
            Err(SendError::Socket(SocketError::InternalChannelFull)) => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(20));
            }
            Err(e) => {
                tracing::debug!(socket = %s.id, event, "reply not delivered: {e}");
                return;
            }
        }
    }
}

/// Emits `data` now, or, while the socket's send queue is full, from a task
/// that waits as [`emit`] does: for callers that must not wait, such as an
/// actor's handler.
pub(crate) fn emit_soon<T: Serialize + Send + Sync + 'static>(
    s: SocketRef,
    event: &'static str,
    data: T,
) {
    match s.emit(event, &data) {
        Ok(()) => {}
        Err(SendError::Socket(SocketError::InternalChannelFull)) => {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn(async move { emit(&s, event, &data).await })),
                // Only from a router dropped as the server's runtime goes,
                // when its hosts' connections go too; a spawn would panic.
                Err(_) => tracing::debug!(socket = %s.id, event, "reply not delivered: no runtime"),
            }
        }
        Err(e) => tracing::debug!(socket = %s.id, event, "reply not delivered: {e}"),
    }
}

/// Emits `data` like [`emit`], but gives up once the socket's send queue
/// has stayed full for `patience`; says whether the event went out.
pub(crate) async fn emit_within<T: Serialize + ?Sized>(
    s: &SocketRef,
    event: &str,
    data: &T,
    patience: Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + patience;
    let mut backoff = Duration::from_micros(200);
    loop {
        match s.emit(event, data) {
            Ok(()) => return true,
            Err(SendError::Socket(SocketError::InternalChannelFull)) => {
                if tokio::time::Instant::now() >= deadline {
                    return false;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(20));
            }
            Err(e) => {
                tracing::debug!(socket = %s.id, event, "event not delivered: {e}");
                return true;
            }
        }
    }
}
