//! [`NamespaceForwarder`]: one actor per plugin namespace the worker opened.
//!
//! Supervised by the `WorkerSupervisor`, which its [`ChildGuard`] tells
//! when it ends and which then starts another on the same path; it has no
//! children.
//!
//! The server knows no plugin's events or payloads: the forwarder emits
//! whatever the worker sends to every host on its path, in order, and the
//! plugin namespace handler (see [`register`]) passes whatever hosts send on
//! to the worker. A host may connect to a path before the worker opens it:
//! it then gets the events the worker emits once it does. A request the
//! worker makes while no host is on its path is answered at once with a
//! `NoHost` error, through the same route a host's reply takes.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use agentix_actors::request_envelope::{error_reply, request_id, NO_HOST};
use agentix_actors::supervision::{ChildAddr, ChildGuard};
use agentix_actors::wire::check_plugin_path;
use serde_json::Value;
use socketioxide::extract::{Event, SocketRef, TryData};
use socketioxide::handler::ConnectHandler;
use socketioxide::socket::Sid;
use socketioxide::SocketIo;

use crate::auth::{auth_middleware, Token};
use crate::emit::emit_within;

// ---- messages ------------------------------------------------------------

/// A host emitted `event` on plugin namespace `path`: sent to whoever
/// routes host events to the worker (the `WorkerSupervisor`).
#[derive(actix::Message)]
#[rtype(result = "()")]
pub struct HostEvent {
    /// The namespace path.
    pub path: String,
    /// The event name.
    pub event: String,
    /// The payload.
    pub data: serde_json::Value,
}

/// Emit `event` with `data` to every host on the forwarder's path.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ToHosts {
    /// The event name.
    pub event: String,
    /// The payload.
    pub data: Value,
}

/// Stop forwarding (the supervisor then starts a new forwarder).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopForwarding;

// ---- the actor -----------------------------------------------------------

/// Forwards the worker's events on one namespace path to its hosts.
pub struct NamespaceForwarder {
    path: String,
    io: SocketIo,
    /// Where hosts' events go, so an unanswerable request is answered.
    to_worker: Recipient<HostEvent>,
    /// Hosts whose socket stayed full past [`LAG_PATIENCE`].
    lagging: Arc<Mutex<HashSet<Sid>>>,
    /// Events not sent to lagging hosts, shared with `/health`.
    dropped: Arc<AtomicU64>,
    _guard: ChildGuard<String>,
}

impl NamespaceForwarder {
    /// A forwarder for `path` on `io`; replies it makes itself go to
    /// `to_worker`, and `guard` tells its supervisor when it ends.
    pub fn new(
        path: String,
        io: SocketIo,
        to_worker: Recipient<HostEvent>,
        dropped: Arc<AtomicU64>,
        guard: ChildGuard<String>,
    ) -> Self {
        NamespaceForwarder {
            path,
            io,
            to_worker,
            lagging: Arc::default(),
            dropped,
            _guard: guard,
        }
    }
}

impl Handler<StopForwarding> for NamespaceForwarder {
    type Result = ();

    fn handle(&mut self, _: StopForwarding, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

/// Events waiting for a forwarder; past this the supervisor drops new ones
/// rather than hold them. Large, because the supervisor can hand over a
/// burst before the forwarder (on the same arbiter) runs at all.
pub const FORWARDER_MAILBOX: usize = 65_536;

/// How long a host's full socket is waited for before the host counts as
/// lagging: events for it are then dropped (counted) until its socket has
/// room again, so a host that does not read holds nobody else up.
pub const LAG_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

impl Actor for NamespaceForwarder {
    type Context = Context<Self>;
}

impl NamespaceForwarder {
    /// Starts the forwarder with a mailbox of [`FORWARDER_MAILBOX`] from its
    /// first message on.
    pub fn start_bounded(self) -> Addr<Self> {
        NamespaceForwarder::create(|ctx| {
            ctx.set_mailbox_capacity(FORWARDER_MAILBOX);
            self
        })
    }
}

impl Handler<ToHosts> for NamespaceForwarder {
    // Atomic: the next event waits until this one is handed to every host,
    // which keeps the order and lets a full socket slow the worker down.
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, msg: ToHosts, _: &mut Context<Self>) -> Self::Result {
        let hosts = self
            .io
            .of(&self.path)
            .map(|ns| ns.sockets())
            .unwrap_or_default();
        if hosts.is_empty() {
            match request_id(&msg.event, &msg.data) {
                Some(request_id) => {
                    let message = format!(
                        "no host has joined {}: register the namespace on the host first",
                        self.path
                    );
                    let (event, data) = error_reply(&msg.event, request_id, NO_HOST, message);
                    self.to_worker.do_send(HostEvent {
                        path: self.path.clone(),
                        event,
                        data,
                    });
                }
                None => tracing::debug!(
                    path = self.path,
                    event = msg.event,
                    "no host on this namespace; event dropped"
                ),
            }
        }
        let lagging = self.lagging.clone();
        let dropped = self.dropped.clone();
        AtomicResponse::new(Box::pin(
            async move {
                for host in &hosts {
                    let behind = lock(&lagging).contains(&host.id);
                    // A lagging host gets one try; it is back once it takes one.
                    let patience = if behind { Duration::ZERO } else { LAG_PATIENCE };
                    let sent = emit_within(host, &msg.event, &msg.data, patience).await;
                    if sent && behind {
                        lock(&lagging).remove(&host.id);
                    } else if !sent {
                        if !behind {
                            tracing::warn!(socket = %host.id, "a host does not read its plugin events; skipping it until it does");
                            lock(&lagging).insert(host.id);
                        }
                        dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            .into_actor(self),
        ))
    }
}

/// Accepts hosts on any path that is not a core namespace and passes their
/// events to the current `supervisor`.
pub fn register<A>(io: &SocketIo, supervisor: ChildAddr<A>, token: Token)
where
    A: Actor<Context = Context<A>> + Handler<HostEvent>,
{
    // Attached before the connect ack (see `crate::rpc` for why).
    let attach_handlers = move |s: SocketRef| {
        let supervisor = supervisor.clone();
        s.on_fallback(
            move |s: SocketRef, Event(event): Event, TryData(data): TryData<Value>| {
                let path = s.ns().to_owned();
                match data {
                    Ok(data) if check_plugin_path(&path).is_ok() => {
                        supervisor.get().do_send(HostEvent { path, event, data });
                    }
                    Ok(_) => {
                        tracing::debug!(path, event, "event on a path no plugin may use; dropped")
                    }
                    Err(e) => tracing::debug!(path, event, "malformed plugin event dropped: {e}"),
                }
                std::future::ready(())
            },
        );
        std::future::ready(Ok::<(), std::convert::Infallible>(()))
    };
    let on_connect = |_: SocketRef| std::future::ready(());
    let handler = on_connect
        .with(attach_handlers)
        .with(auth_middleware(token));
    if let Err(e) = io.dyn_ns("/{*path}", handler) {
        tracing::error!("cannot accept plugin namespaces: {e}");
    }
}

fn lock(lagging: &Mutex<HashSet<Sid>>) -> std::sync::MutexGuard<'_, HashSet<Sid>> {
    lagging.lock().unwrap_or_else(|p| p.into_inner())
}
