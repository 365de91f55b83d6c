//! The `/log` Socket.IO namespace: hosts join it to receive `records` events.
//!
//! Joining needs the sandbox token, like `/rpc`. The namespace takes no
//! events from hosts; a host that joins gets the records kept while no host
//! listened, then every new one (see [`crate::log_relay`]).

use agentix_actors::wire::LOG_NAMESPACE;
use socketioxide::extract::{Event, SocketRef};
use socketioxide::handler::ConnectHandler;
use socketioxide::SocketIo;

use crate::auth::Token;
use crate::log_relay::LogRelay;
use crate::rpc::auth_middleware;

/// Registers `/log` on `io`; hosts that join get what `logs` relays.
pub fn register(io: &SocketIo, logs: LogRelay, token: Token) {
    let on_connect = move |s: SocketRef| {
        s.on_fallback(|s: SocketRef, Event(event): Event| {
            tracing::warn!(socket = %s.id, event, "/log takes no events from hosts; dropped");
            std::future::ready(())
        });
        logs.host_joined();
        std::future::ready(())
    };
    io.ns(LOG_NAMESPACE, on_connect.with(auth_middleware(token)));
}
