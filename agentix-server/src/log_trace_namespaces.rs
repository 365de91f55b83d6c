//! The `/log` and `/trace` Socket.IO namespaces: hosts join them to receive
//! `records` and `events`.
//!
//! Joining needs the sandbox token, like `/rpc`. The only event they take
//! from hosts is `ack`, one per batch handled; a host that joins gets what
//! was kept while no host listened, then everything new (see
//! [`crate::relays`]). Handlers are attached before the connect ack
//! (see [`crate::rpc`] for why).

use agentix_wire::wire::{EVENT_SIDE_ACK, LOG_NAMESPACE, TRACE_NAMESPACE};
use socketioxide::extract::{Event, SocketRef};
use socketioxide::handler::ConnectHandler;
use socketioxide::SocketIo;

use crate::auth::{auth_middleware, Token};
use crate::relay_credits::RelayCredits;
use crate::relays::Relays;

/// Registers `/log` and `/trace` on `io`; hosts that join get what `relay`
/// relays, and acknowledge each batch (`ack`) to `credits`.
pub(crate) fn register(io: &SocketIo, relay: Relays, credits: RelayCredits, token: Token) {
    for namespace in [LOG_NAMESPACE, TRACE_NAMESPACE] {
        let relay = relay.clone();
        let credits = credits.clone();
        let attach_handlers = move |s: SocketRef| {
            let acks = credits.clone();
            s.on(EVENT_SIDE_ACK, move |s: SocketRef| {
                acks.ack(s.id);
                std::future::ready(())
            });
            let gone = credits.clone();
            s.on_disconnect(move |s: SocketRef| {
                gone.forget(s.id);
                std::future::ready(())
            });
            s.on_fallback(move |s: SocketRef, Event(event): Event| {
                tracing::warn!(socket = %s.id, event, namespace, "takes no events from hosts; dropped");
                std::future::ready(())
            });
            std::future::ready(Ok::<(), std::convert::Infallible>(()))
        };
        // Past the ack: the backlog goes to a host that can take it.
        let on_connect = move |_: SocketRef| {
            relay.host_joined();
            std::future::ready(())
        };
        io.ns(
            namespace,
            on_connect
                .with(attach_handlers)
                .with(auth_middleware(token.clone())),
        );
    }
}
