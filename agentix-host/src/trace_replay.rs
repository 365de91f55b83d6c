//! `/trace` on the host: sandbox trace events replayed to the sandbox's
//! trace hub.
//!
//! Each event is published to the sandbox's hub (its own processors, then
//! the hub the program created it with) with `origin` set to the sandbox
//! id, so a host processor sees its own spans and its sandboxes', ids,
//! parents, times, attributes and events intact.

use std::sync::Arc;

use agentix_trace::TraceHub;
use agentix_wire::errors::RemoteError;
use agentix_wire::wire::{TracesEvent, EVENT_TRACE_EVENTS, TRACE_NAMESPACE};

use crate::endpoint::Endpoint;
use crate::relay_listener;
use crate::sio::SioClient;

/// Joins `/trace` on `client`; events go to `hub`.
pub(crate) async fn listen(
    client: &SioClient,
    endpoint: &Endpoint,
    sandbox_id: Arc<str>,
    hub: TraceHub,
) -> Result<(), RemoteError> {
    relay_listener::listen(
        client,
        endpoint,
        TRACE_NAMESPACE,
        EVENT_TRACE_EVENTS,
        move |incoming| {
            if !hub.listening() {
                return;
            }
            let events = match incoming.decode::<TracesEvent>().map_err(|e| e.to_string()) {
                Ok(batch) => batch.decode(),
                Err(e) => Err(e),
            };
            match events {
                Ok(events) => {
                    for event in events {
                        hub.publish(event.with_origin(&sandbox_id));
                    }
                }
                Err(e) => tracing::warn!("a /trace batch from the sandbox is unreadable: {e}"),
            }
        },
    )
    .await
}
