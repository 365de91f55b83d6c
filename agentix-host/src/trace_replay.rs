//! `/trace` on the host: sandbox trace events replayed to the host's
//! processors.
//!
//! Each event is published to this process's trace processors with
//! `origin` set to the sandbox id, so a host processor sees its own spans
//! and every sandbox's, ids, parents, times, attributes and events intact.

use std::sync::Arc;

use agentix_actors::errors::RemoteError;
use agentix_actors::trace;
use agentix_actors::wire::{TracesEvent, EVENT_TRACE_EVENTS, TRACE_NAMESPACE};

use crate::endpoint::Endpoint;
use crate::side_listener;
use crate::sio::SioClient;

/// Joins `/trace` on `client`; events go to the host's processors.
pub(crate) async fn listen(
    client: &SioClient,
    endpoint: &Endpoint,
    sandbox_id: Arc<str>,
) -> Result<(), RemoteError> {
    side_listener::listen(
        client,
        endpoint,
        TRACE_NAMESPACE,
        EVENT_TRACE_EVENTS,
        move |incoming| {
            let events = match incoming.decode::<TracesEvent>().map_err(|e| e.to_string()) {
                Ok(batch) => batch.decode(),
                Err(e) => Err(e),
            };
            match events {
                Ok(events) => {
                    for event in events {
                        trace::publish(event.with_origin(&sandbox_id));
                    }
                }
                Err(e) => tracing::warn!("a /trace batch from the sandbox is unreadable: {e}"),
            }
        },
    )
    .await
}
