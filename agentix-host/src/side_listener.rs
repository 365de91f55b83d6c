//! [`listen`]: joining a side channel (`/log`, `/trace`) on a sandbox's
//! websocket, its batches handled off the receive path.
//!
//! The reader hands each batch to a task of the channel's own through a
//! small bounded queue, and the task acknowledges a batch once it has
//! handled it. The server sends a host at most a few unacknowledged batches,
//! so the queue never fills and a slow log sink holds back neither calls
//! nor the other channel, only its own sandbox's logging.

use agentix_actors::errors::RemoteError;
use agentix_actors::wire::EVENT_SIDE_ACK;
use serde_json::json;
use tokio::sync::mpsc;

use crate::connection::connect_error;
use crate::endpoint::Endpoint;
use crate::sio::{Delivery, Incoming, SioClient};

/// Batches queued for a channel's task; more than the server may send
/// unacknowledged.
const QUEUE: usize = 16;

/// Joins `namespace` on `client`; each `event` goes to `on_batch` on a
/// task of its own, in order, then is acknowledged.
pub(crate) async fn listen(
    client: &SioClient,
    endpoint: &Endpoint,
    namespace: &'static str,
    event: &'static str,
    mut on_batch: impl FnMut(Incoming) + Send + 'static,
) -> Result<(), RemoteError> {
    let (tx, mut rx) = mpsc::channel::<Incoming>(QUEUE);
    let handler = move |delivery: Delivery| match delivery {
        Delivery::Event(incoming) if incoming.name() == event => {
            if tx.try_send(incoming).is_err() {
                tracing::warn!(
                    namespace,
                    "the server sent more unacknowledged batches than it may; one was dropped"
                );
            }
        }
        Delivery::Event(incoming) => {
            tracing::debug!(namespace, event = incoming.name(), "unknown event; dropped")
        }
        Delivery::Closed(_) => {}
    };
    tokio::spawn(async move {
        while let Some(incoming) = rx.recv().await {
            let client = incoming.client().clone();
            on_batch(incoming);
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
