//! [`SideCredits`]: how many side-channel batches each host has not yet
//! acknowledged.
//!
//! A host acks every `records` or `events` batch once it has handled it; the
//! relay sends a host at most [`WINDOW`] unacknowledged batches. Without
//! this, a slow host would let batches pile up in the socket's send queue
//! (thousands of packets) instead of slowing the sandbox down.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use socketioxide::extract::SocketRef;
use socketioxide::socket::Sid;
use tokio::sync::Notify;

/// Batches a host may be behind by.
pub const WINDOW: usize = 4;

/// Outstanding batches per host socket, shared by the relay and the ack
/// handlers.
#[derive(Clone, Default)]
pub struct SideCredits {
    outstanding: Arc<Mutex<HashMap<Sid, usize>>>,
    freed: Arc<Notify>,
}

impl SideCredits {
    /// Waits until `host` has room for one more batch and takes it; returns
    /// `false` if the host went away meanwhile.
    pub async fn take(&self, host: &SocketRef) -> bool {
        loop {
            let freed = self.freed.notified();
            {
                let mut map = self.outstanding.lock().unwrap_or_else(|p| p.into_inner());
                let n = map.entry(host.id).or_default();
                if *n < WINDOW {
                    *n += 1;
                    return true;
                }
            }
            if !host.connected() {
                self.forget(host.id);
                return false;
            }
            // Re-check now and then: a host can vanish without acking.
            let _ = tokio::time::timeout(Duration::from_millis(200), freed).await;
        }
    }

    /// `host` handled one batch.
    pub fn ack(&self, host: Sid) {
        let mut map = self.outstanding.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&host) {
            *n = n.saturating_sub(1);
        }
        drop(map);
        self.freed.notify_waiters();
    }

    /// `host` disconnected.
    pub fn forget(&self, host: Sid) {
        self.outstanding
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&host);
        self.freed.notify_waiters();
    }
}
