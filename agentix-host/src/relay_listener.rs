//! [`listen`]: joining a side channel (`/log`, `/trace`) on a sandbox's
//! websocket, its batches handled off the receive path.
//!
//! The reader hands each batch to a task of the channel's own through a
//! small bounded queue, and the task acknowledges a batch once it has
//! handled it (on a blocking thread: log sinks are plain callbacks). The
//! server sends a host at most a few unacknowledged batches, so the queue
//! never fills and a slow log sink holds back neither calls nor the other
//! channel, only its own sandbox's logging. The queue holds
//! at most [`QUEUE_BYTES`] as well: a batch past that (a peer that sends
//! huge ones) is dropped, warned of, and acknowledged all the same, so the
//! server's window is not left short.

use agentix_wire::budgeted_channel::{budgeted_channel, PayloadLen};
use agentix_wire::errors::RemoteError;
use agentix_wire::wire::EVENT_SIDE_ACK;
use serde_json::json;

use crate::connection::connect_error;
use crate::endpoint::Endpoint;
use crate::sio::{Delivery, Incoming, SioClient};

/// Batches queued for a channel's task; more than the server may send
/// unacknowledged.
const QUEUE: usize = 16;
/// Most bytes of batches queued for a channel's task (the server's are a
/// few hundred KiB each).
const QUEUE_BYTES: usize = 32 << 20;

/// What a channel's task gets: a batch to handle and acknowledge, or the
/// acknowledgement of one that did not fit.
enum Queued {
    Batch(Incoming),
    Dropped(SioClient),
}

impl PayloadLen for Queued {
    fn payload_len(&self) -> usize {
        match self {
            Queued::Batch(incoming) => incoming.payload_len(),
            Queued::Dropped(_) => 0,
        }
    }
}

/// Joins `namespace` on `client`; each `event` goes to `on_batch` on a
/// task of its own, in order, then is acknowledged.
pub(crate) async fn listen(
    client: &SioClient,
    endpoint: &Endpoint,
    namespace: &'static str,
    event: &'static str,
    mut on_batch: impl FnMut(Incoming) + Send + 'static,
) -> Result<(), RemoteError> {
    let (tx, mut rx) = budgeted_channel::<Queued>(QUEUE, QUEUE_BYTES);
    let handler = move |delivery: Delivery| match delivery {
        Delivery::Event(incoming) if incoming.name() == event => {
            let (client, bytes) = (incoming.client().clone(), incoming.payload_len());
            if tx.try_send(Queued::Batch(incoming)).is_ok() {
                return;
            }
            tracing::warn!(
                namespace,
                bytes,
                "a batch did not fit the queue (the server sent more or larger unacknowledged \
                 batches than it may); it was dropped"
            );
            let _ = tx.try_send(Queued::Dropped(client));
        }
        Delivery::Event(incoming) => {
            tracing::debug!(namespace, event = incoming.name(), "unknown event; dropped")
        }
        Delivery::Closed(_) => {}
    };
    tokio::spawn(async move {
        while let Some(queued) = rx.recv().await {
            let client = match queued {
                Queued::Batch(incoming) => {
                    let client = incoming.client().clone();
                    // On a blocking thread: a log sink that blocks (writes a
                    // file, waits on a lock) must not hold a runtime thread
                    // and the tasks queued behind it on that thread.
                    let handled = tokio::task::spawn_blocking(move || {
                        on_batch(incoming);
                        on_batch
                    });
                    match handled.await {
                        Ok(handler) => on_batch = handler,
                        Err(e) => {
                            tracing::error!(
                                namespace,
                                "the {namespace} handler panicked: {e}; no more is handled"
                            );
                            return;
                        }
                    }
                    client
                }
                Queued::Dropped(client) => client,
            };
            // Handled: the server may send one more batch.
            if let Err(e) = client.emit(namespace, EVENT_SIDE_ACK, &json!({})).await {
                tracing::debug!(namespace, "side-channel ack not sent: {e}");
            }
        }
    });
    client
        .join(namespace, &endpoint.auth(), std::sync::Arc::new(handler))
        .await
        .map_err(|e| connect_error(endpoint, &format!("cannot join {namespace}"), e))
}
