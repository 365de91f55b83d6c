//! [`RelayCredits`]: how many side-channel batches each host has not yet
//! acknowledged, and which hosts stopped acknowledging.
//!
//! A host acks every `records` or `events` batch once it has handled it; the
//! relay sends a host at most [`WINDOW`] unacknowledged batches. Without
//! this, a slow host would let batches pile up in the socket's send queue
//! (thousands of packets) instead of slowing the sandbox down.
//!
//! A slow host is waited for, so it sees everything; a host that has not
//! acknowledged for [`LAG_LIMIT`] is lagging: it is not waited for again
//! (its batches are counted, not sent) until it acknowledges once more. So
//! one listener that stops reading costs the sandbox one wait, not its
//! logging, while the sandbox's durable log file keeps every record.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use socketioxide::extract::SocketRef;
use socketioxide::socket::Sid;
use tokio::sync::Notify;

/// Batches a host may be behind by.
pub(crate) const WINDOW: usize = 4;

/// How long a host may leave a full window unacknowledged before it counts
/// as lagging.
pub(crate) const LAG_LIMIT: Duration = Duration::from_secs(5);

/// What became of one batch for one host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credit {
    /// The host has room: send it.
    Granted,
    /// The host stopped acknowledging: count the batch, do not send it.
    Lagging,
    /// The host went away.
    Gone,
}

#[derive(Default)]
struct HostState {
    outstanding: usize,
    lagging: bool,
    /// Items not sent to this host while it lagged, not yet reported to it.
    unreported: u64,
}

/// Outstanding batches per host socket, shared by the relay and the ack
/// handlers.
#[derive(Clone, Default)]
pub struct RelayCredits {
    hosts: Arc<Mutex<HashMap<Sid, HostState>>>,
    freed: Arc<Notify>,
    dropped: Arc<AtomicU64>,
}

impl RelayCredits {
    /// Takes room for one batch to `host`, waiting while it is merely slow.
    pub async fn take(&self, host: &SocketRef) -> Credit {
        let started = Instant::now();
        loop {
            let freed = self.freed.notified();
            {
                let mut hosts = self.hosts();
                let state = hosts.entry(host.id).or_default();
                if state.outstanding < WINDOW {
                    state.outstanding += 1;
                    state.lagging = false;
                    return Credit::Granted;
                }
                if state.lagging {
                    return Credit::Lagging;
                }
                if started.elapsed() >= LAG_LIMIT {
                    state.lagging = true;
                    tracing::warn!(
                        socket = %host.id,
                        "a side-channel listener stopped acknowledging; its live feed \
                         is suspended until it does (the log file keeps everything)"
                    );
                    return Credit::Lagging;
                }
            }
            if !host.connected() {
                self.forget(host.id);
                return Credit::Gone;
            }
            // Re-check now and then: a host can vanish without acking.
            let _ = tokio::time::timeout(Duration::from_millis(200), freed).await;
        }
    }

    /// `items` items were not sent to the lagging `host`.
    pub fn not_sent(&self, host: Sid, items: u64) {
        if let Some(state) = self.hosts().get_mut(&host) {
            state.unreported = state.unreported.saturating_add(items);
        }
        self.dropped.fetch_add(items, Ordering::Relaxed);
    }

    /// Items `host` missed while it lagged, to tell it now (and forget).
    pub fn take_unreported(&self, host: Sid) -> u64 {
        self.hosts()
            .get_mut(&host)
            .map(|s| std::mem::take(&mut s.unreported))
            .unwrap_or(0)
    }

    /// Items not sent to lagging listeners since the server started.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// `host` handled one batch.
    pub fn ack(&self, host: Sid) {
        if let Some(state) = self.hosts().get_mut(&host) {
            state.outstanding = state.outstanding.saturating_sub(1);
        }
        self.freed.notify_waiters();
    }

    /// `host` disconnected.
    pub fn forget(&self, host: Sid) {
        self.hosts().remove(&host);
        self.freed.notify_waiters();
    }

    fn hosts(&self) -> std::sync::MutexGuard<'_, HashMap<Sid, HostState>> {
        self.hosts.lock().unwrap_or_else(|p| p.into_inner())
    }
}
