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
use rust_socketio::asynchronous::Client;

use crate::connection::{ConnectionSettings, Endpoint};
use crate::log_replay::join;

/// Joins `/trace` on `endpoint`; events go to the host's processors.
pub(crate) async fn listen(
    endpoint: &Endpoint,
    settings: ConnectionSettings,
    sandbox_id: Arc<str>,
) -> Result<Client, RemoteError> {
    join(
        endpoint,
        settings,
        TRACE_NAMESPACE,
        EVENT_TRACE_EVENTS,
        move |payload| {
            let Some(batch) = crate::connection::first::<TracesEvent>(payload) else {
                return;
            };
            match batch.decode() {
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
