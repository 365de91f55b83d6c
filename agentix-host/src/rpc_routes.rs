//! [`Route`]: the receive path of `/rpc`, which hands each event from the
//! server (results, errors, parts, stream items and ends, heartbeats) to
//! the pending call it names, and ends a call with `Protocol` when an event
//! that names it does not decode.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use agentix_wire::errors::{ErrorKind, RemoteError};
use agentix_wire::part::PartTable;
use agentix_wire::wire::{
    EndEvent, ErrorEvent, ItemsEvent, PartAckEvent, PartEvent, ResultEvent, EVENT_END, EVENT_ERROR,
    EVENT_HEARTBEAT, EVENT_ITEMS, EVENT_PART, EVENT_PART_ACK, EVENT_RESULT, RPC_NAMESPACE,
};

use crate::pending_calls::{complete, Pending, StreamEvent, Waiter};
use crate::sio::{Incoming, SioClient};

/// What the receive path of `/rpc` routes events with.
pub(crate) struct Route<'a> {
    /// The calls waiting.
    pub(crate) pending: &'a Pending,
    /// Parts of results that came ahead of their `call:result`.
    pub(crate) parts: &'a Mutex<PartTable>,
    /// When the server was last heard, in ms after `opened`.
    pub(crate) last_heard_ms: &'a AtomicU64,
    /// When the connection opened.
    pub(crate) opened: Instant,
}

impl Route<'_> {
    /// Routes one `/rpc` event to the call it belongs to.
    pub(crate) fn event(&self, incoming: Incoming) {
        let pending = self.pending;
        match incoming.name() {
            EVENT_PART => {
                let client = incoming.client().clone();
                match decode::<PartEvent>(incoming) {
                    Ok(ev) => {
                        // Acknowledged whatever becomes of it: the server
                        // waits for the ack before it sends more parts.
                        ack_part(&client, ev.id);
                        self.part(ev);
                    }
                    Err(e) => {
                        if let Some(id) = e.id {
                            ack_part(&client, id);
                        }
                        malformed(pending, e)
                    }
                }
            }
            EVENT_RESULT => match decode::<ResultEvent>(incoming) {
                Ok(ev) => {
                    let pieces = self.parts().finish(ev.id, ev.value.into_bytes());
                    let outcome = pieces.map_err(|why| {
                        RemoteError::new(
                            ErrorKind::Protocol,
                            format!("the result arrived incomplete: {why}"),
                        )
                    });
                    complete(pending, ev.id, outcome)
                }
                Err(e) => malformed(pending, e),
            },
            EVENT_ERROR => match decode::<ErrorEvent>(incoming) {
                Ok(ev) => {
                    self.parts().discard(ev.id);
                    complete(pending, ev.id, Err(ev.error))
                }
                Err(e) => malformed(pending, e),
            },
            _ => on_stream_event(pending, self.last_heard_ms, self.opened, incoming),
        }
    }

    fn parts(&self) -> std::sync::MutexGuard<'_, PartTable> {
        self.parts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps a part of a result; a part past the message limit ends its call.
    fn part(&self, ev: PartEvent) {
        if !self.pending.contains_key(&ev.id) {
            // Its caller gave up: the rest of the result is not wanted either.
            return;
        }
        if let Err(why) = self.parts().push(ev.id, ev.total, ev.bytes.into_bytes()) {
            let error = RemoteError::new(
                ErrorKind::PayloadTooLarge,
                format!("the result could not be received: {why}"),
            );
            complete(self.pending, ev.id, Err(error));
        }
    }
}

/// Tells the server a part of call `id`'s result arrived, so that it sends
/// the next.
fn ack_part(client: &SioClient, id: u64) {
    let client = client.clone();
    tokio::spawn(async move {
        let ack = PartAckEvent { id };
        if let Err(e) = client.emit(RPC_NAMESPACE, EVENT_PART_ACK, &ack).await {
            tracing::debug!(id, "part ack not sent: {e}");
        }
    });
}

/// Routes the other `/rpc` events: stream items and ends, heartbeats.
fn on_stream_event(
    pending: &Pending,
    last_heard_ms: &AtomicU64,
    opened: Instant,
    incoming: Incoming,
) {
    match incoming.name() {
        EVENT_ITEMS => match decode::<ItemsEvent>(incoming) {
            Ok(ev) => on_items(pending, ev),
            Err(e) => malformed(pending, e),
        },
        EVENT_END => match decode::<EndEvent>(incoming) {
            Ok(ev) => match pending.remove(&ev.id) {
                Some((_, Waiter::Stream(tx))) => {
                    let _ = tx.send(StreamEvent::End);
                }
                Some((_, unary)) => unary.fail(RemoteError::new(
                    ErrorKind::Protocol,
                    "the server ended a unary call as a stream",
                )),
                None => {}
            },
            Err(e) => malformed(pending, e),
        },
        EVENT_HEARTBEAT => {
            last_heard_ms.store(opened.elapsed().as_millis() as u64, Ordering::Release);
        }
        other => tracing::debug!(event = other, "unknown /rpc event from the server; dropped"),
    }
}

fn on_items(pending: &Pending, ev: ItemsEvent) {
    // Decide under the map's read lock, complete after it: removing while
    // holding it would deadlock.
    let unary = match pending.get(&ev.id) {
        Some(waiter) => match &*waiter {
            Waiter::Stream(tx) => {
                let _ = tx.send(StreamEvent::Items(ev.items.into_bytes()));
                false
            }
            Waiter::Unary(_) => true,
        },
        None => {
            tracing::debug!(id = ev.id, "items for a stream nobody reads");
            false
        }
    };
    if unary {
        let err = RemoteError::new(
            ErrorKind::Protocol,
            "the server sent stream items for a unary call",
        );
        complete(pending, ev.id, Err(err));
    }
}

/// An event that did not decode: the call it names (if it names one) ends
/// with `Protocol`, since its real reply may have been this event.
fn malformed(pending: &Pending, error: MalformedEvent) {
    tracing::warn!("a malformed event from the server: {}", error.why);
    if let Some(id) = error.id {
        complete(
            pending,
            id,
            Err(RemoteError::new(
                ErrorKind::Protocol,
                format!("the server's reply could not be read: {}", error.why),
            )),
        );
    }
}

/// Why an event did not decode, and the call id it carried if one was readable.
struct MalformedEvent {
    why: String,
    id: Option<u64>,
}

/// Decodes an `/rpc` event's payload, or says why not and which call it named.
fn decode<T>(incoming: Incoming) -> Result<T, MalformedEvent>
where
    T: serde::de::DeserializeOwned + agentix_wire::wire::WithAttachments,
{
    #[derive(serde::Deserialize)]
    struct Named {
        id: u64,
    }
    let id = serde_json::from_str::<(serde::de::IgnoredAny, Named)>(incoming.json())
        .ok()
        .map(|(_, named)| named.id);
    incoming.decode().map_err(|e| MalformedEvent {
        why: e.to_string(),
        id,
    })
}
