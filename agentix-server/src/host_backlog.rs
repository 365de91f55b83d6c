//! [`HostBacklogs`]: how many bytes of plugin events each host's socket
//! may still hold unwritten, so that a host that stops reading costs the
//! server a bounded number of bytes, not 4,096 events of any size.
//!
//! A forwarder's pump adds each event it hands to a host's socket, and
//! counts every byte the host's connection writes as taking them away
//! ([`ConnectionWrites`]). That is exact for a host that stops reading
//! (nothing is written, so everything handed over waits), the case that
//! fills memory; for a host that reads while calls and logs flow too it
//! is generous, and Socket.IO's own limit in packets stays behind it.
//! Hosts whose socket did not open as a websocket (a client that polls
//! first and upgrades later) have no count on the connection they write
//! to, and only that limit.

use std::collections::HashMap;

use socketioxide::extract::SocketRef;
use socketioxide::socket::Sid;

use crate::connection_writes::ConnectionWrites;

/// Bytes of plugin events a host's socket may hold unwritten before new
/// ones for it are dropped (counted, as for a lagging host).
pub(crate) const HOST_SOCKET_EVENT_BYTES: u64 = 8 << 20;

/// The plugin-event bytes each host's socket may hold, by socket.
#[derive(Default)]
pub(crate) struct HostBacklogs {
    hosts: HashMap<Sid, Backlog>,
}

/// One host socket's estimate.
struct Backlog {
    /// Its connection's writes; `None` when they cannot be told.
    writes: Option<ConnectionWrites>,
    /// The writes' total when last looked at.
    written: u64,
    /// Bytes handed over and not yet counted as written.
    waiting: u64,
}

impl HostBacklogs {
    /// Whether `host` may be handed an event of `bytes` now: yes while less
    /// than [`HOST_SOCKET_EVENT_BYTES`] may wait in its socket (one event of
    /// any size passes when nothing waits).
    pub(crate) fn admits(&mut self, host: &SocketRef, bytes: usize) -> bool {
        let backlog = self
            .hosts
            .entry(host.id)
            .or_insert_with(|| Backlog::of(host));
        let Some(writes) = &backlog.writes else {
            return true;
        };
        let total = writes.total();
        let drained = total.saturating_sub(backlog.written);
        backlog.written = total;
        backlog.waiting = backlog.waiting.saturating_sub(drained);
        backlog.waiting == 0 || backlog.waiting + bytes as u64 <= HOST_SOCKET_EVENT_BYTES
    }

    /// Records that `host` was handed an event of `bytes`.
    pub(crate) fn handed(&mut self, host: &SocketRef, bytes: usize) {
        if let Some(backlog) = self.hosts.get_mut(&host.id) {
            backlog.waiting += bytes as u64;
        }
    }

    /// Forgets the hosts not among `hosts` (gone since).
    pub(crate) fn keep_only(&mut self, hosts: &[SocketRef]) {
        if self.hosts.len() > hosts.len() {
            self.hosts
                .retain(|sid, _| hosts.iter().any(|host| host.id == *sid));
        }
    }
}

impl Backlog {
    fn of(host: &SocketRef) -> Backlog {
        let parts = host.req_parts();
        // Only a socket that opened as a websocket writes on the connection
        // its opening request came on.
        let opened_as_websocket = parts
            .uri
            .query()
            .is_some_and(|query| query.split('&').any(|pair| pair == "transport=websocket"));
        let writes = opened_as_websocket
            .then(|| parts.extensions.get::<ConnectionWrites>().cloned())
            .flatten();
        let written = writes.as_ref().map_or(0, ConnectionWrites::total);
        Backlog {
            writes,
            written,
            waiting: 0,
        }
    }
}
