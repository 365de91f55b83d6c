//! The messages a plugin namespace actor handles, on either side:
//! [`NamespaceEvent`] for events, [`NamespaceRequest`] for requests whose
//! reply the namespace sends back for it.
//!
//! `N` is the side's handle on the namespace (the sandbox's
//! `SandboxNamespaceHandle`, the host's `HostNamespaceHandle`), so a handler can emit
//! back. A request's `Ok` becomes `<event>:result {request_id, data}`, its
//! `Err` `<event>:error {request_id, error: {type, message}}`; its
//! `cancelled` token fires on the asker's `<event>:cancel`.

use actix::Message;
use serde_json::Value;
pub use tokio_util::sync::CancellationToken;

use crate::event_route::EventRoute;

/// An event the far side emitted on the namespace.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct NamespaceEvent<N: Send + 'static> {
    /// The namespace, to emit on.
    pub ns: N,
    /// The event's name.
    pub event: String,
    /// Its payload.
    pub data: Value,
}

/// A request the far side made on the namespace: the request envelope's
/// `data`, its id kept by the namespace to reply with.
#[derive(Debug, Message)]
#[rtype(result = "Result<Value, NamespaceFault>")]
pub struct NamespaceRequest<N: Send + 'static> {
    /// The namespace, to emit on.
    pub ns: N,
    /// The request's event.
    pub event: String,
    /// The request's body.
    pub body: Value,
    /// Fires when the asking side stops waiting (it went away, or its
    /// timeout passed): no reply is sent after it, so the handler can drop
    /// its work, as `tokio::select!` against `cancelled.cancelled()` does.
    pub cancelled: CancellationToken,
}

/// Why a request failed, as the asking side reads it: `{type, message}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{type_name}: {message}")]
pub struct NamespaceFault {
    /// The error's type, as the asking side sees it.
    pub type_name: String,
    /// What went wrong, for a human.
    pub message: String,
}

impl NamespaceFault {
    /// A fault of type `type_name` saying `message`.
    pub fn new(type_name: impl Into<String>, message: impl Into<String>) -> Self {
        NamespaceFault {
            type_name: type_name.into(),
            message: message.into(),
        }
    }
}

/// What either half's `on_actor` registers: for each of `events`, the
/// event's name and a handler that hands `(ns, data)` to `actor`, all
/// through one route (so the actor sees them in arrival order); `path_of`
/// names the namespace in the error line of an event that had to be
/// dropped.
pub fn actor_event_handlers<N: Send + 'static, E: Into<String>>(
    events: impl IntoIterator<Item = E>,
    actor: actix::Recipient<NamespaceEvent<N>>,
    path_of: fn(&N) -> &str,
) -> Vec<(String, impl Fn(N, Value) + Send + Sync + 'static)> {
    let route = EventRoute::new(actor);
    events
        .into_iter()
        .map(|event| {
            let event: String = event.into();
            let route = route.clone();
            let name = event.clone();
            let handler = move |ns: N, data: Value| {
                let event = name.clone();
                if let Err((event, why)) = route.push(NamespaceEvent { ns, event, data }) {
                    let path = path_of(&event.ns);
                    tracing::error!(path, event = event.event, "event dropped: {why}");
                }
            };
            (event, handler)
        })
        .collect()
}
