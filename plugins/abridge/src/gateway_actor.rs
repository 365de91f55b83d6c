//! [`GatewayActor`]: the host half of one sandbox's `/abridge` streams, an
//! actor, and the namespace it answers on.
//!
//! Supervised by nobody of its own: [`crate::Gateway::namespace`] starts it
//! (on the caller's actix arbiter, or the shared background one) and the
//! sandbox's namespace holds its only address, so it stops when the
//! namespace is gone. Its children are tasks, not actors: one per stream
//! being opened and one pump per open stream ([`StreamPumps`]), each ending
//! with its exchange.
//!
//! Stream opens, acks and abandons arrive as [`NamespaceEvent`]s in the
//! order the sandbox sent them, so an ack never overtakes the open of its
//! stream. Whole answers are not the actor's: they need no order among
//! themselves, and a request handler on the connection's own runtime
//! answers one without the two thread hops to the actor's arbiter and back
//! (about a fifth of abridge's overhead per request, measured).

use std::convert::Infallible;
use std::sync::Arc;

use agentix::actix::{Actor, Context, Handler};
use agentix::trace::{self, SpanContext};
use agentix::{start_actor, HostNamespace, HostNamespaceHandle, JsonValue, NamespaceEvent};
use tokio::sync::Semaphore;

use crate::exchange::{Api, StreamOpen};
use crate::gateway::Gateway;
use crate::gateway_stream::StreamPumps;
use crate::{EVENT_STREAM, EVENT_STREAM_ABANDON, EVENT_STREAM_ACK, EVENT_UPSTREAM, NAMESPACE};

/// One sandbox's gateway: its upstream, its open streams and its share of
/// the concurrency limit.
pub struct GatewayActor {
    gateway: Gateway,
    /// The span each exchange's span goes under.
    parent: Option<SpanContext>,
    pumps: StreamPumps,
    /// One per request in flight, whole or streamed: the sandbox's limit.
    slots: Arc<Semaphore>,
}

impl GatewayActor {
    /// The actor for one sandbox, its spans under `parent`, its streams
    /// taking their places from `slots` (shared with its whole answers).
    fn new(gateway: Gateway, parent: Option<SpanContext>, slots: Arc<Semaphore>) -> Self {
        GatewayActor {
            gateway,
            parent,
            pumps: StreamPumps::default(),
            slots,
        }
    }
}

// Beside the actor it starts, so the gateway's own file need not know it.
impl Gateway {
    /// The host half of `/abridge`: register it on the sandbox with
    /// `sandbox.register_namespace(..)`. Each exchange's span goes under the
    /// span current here (a rollout's, say). Call it once per sandbox: the
    /// concurrency limit is the namespace's, and each call starts a
    /// [`GatewayActor`] of its own (on the caller's actix arbiter, or the
    /// shared background one) that ends with the namespace.
    pub fn namespace(&self) -> HostNamespace {
        let slots = Arc::new(Semaphore::new(self.concurrency()));
        let parent = trace::current();
        let actor = start_actor({
            let (gateway, parent, slots) = (self.clone(), parent.clone(), slots.clone());
            move |_| GatewayActor::new(gateway, parent, slots)
        });
        // Whole answers need no order among themselves, so they are not
        // the actor's: answered on the connection's own runtime, a request
        // saves the two thread hops to the actor's arbiter and back. An
        // agent that goes away drops the answer's future, and with it the
        // upstream request.
        let gateway = self.clone();
        let whole = move |body: JsonValue| {
            let (gateway, parent, slots) = (gateway.clone(), parent.clone(), slots.clone());
            async move {
                let answer = match slots.try_acquire_owned() {
                    Ok(_slot) => gateway.answer_under(body, parent).await,
                    Err(_) => {
                        let api = serde_json::from_value(body["api"].clone());
                        gateway.busy(api.unwrap_or(Api::ChatCompletions))
                    }
                };
                Ok::<_, Infallible>(answer)
            }
        };
        HostNamespace::new(NAMESPACE)
            .request_handler(EVENT_UPSTREAM, whole)
            .on_actor(
                [EVENT_STREAM, EVENT_STREAM_ACK, EVENT_STREAM_ABANDON],
                actor.recipient(),
            )
    }
}

impl Actor for GatewayActor {
    type Context = Context<Self>;
}

impl Handler<NamespaceEvent<HostNamespaceHandle>> for GatewayActor {
    type Result = ();

    fn handle(&mut self, event: NamespaceEvent<HostNamespaceHandle>, _: &mut Context<Self>) {
        let NamespaceEvent { ns, event, data } = event;
        match event.as_str() {
            EVENT_STREAM => {
                let mut envelope = data;
                let request_id = envelope.get("request_id").cloned();
                // Known to the pumps from here on, in the order the sandbox
                // sent its events: a cancel right behind the open finds it.
                let open = serde_json::from_value::<StreamOpen>(envelope["data"].take())
                    .map(|open| {
                        let control = self.pumps.register(open.stream_id.clone());
                        (open, control)
                    })
                    .map_err(|e| e.to_string());
                let (gateway, parent) = (self.gateway.clone(), self.parent.clone());
                let slot = self.slots.clone().try_acquire_owned().ok();
                // Its own task: opening waits on the upstream's head.
                let stream = async move {
                    let request_id = request_id.unwrap_or(JsonValue::Null);
                    gateway
                        .open_stream(ns, request_id, open, parent, slot)
                        .await
                };
                agentix::actix::spawn(stream);
            }
            EVENT_STREAM_ACK => match serde_json::from_value(data) {
                Ok(ack) => self.pumps.ack(ack),
                Err(e) => tracing::debug!("abridge: malformed stream ack dropped: {e}"),
            },
            EVENT_STREAM_ABANDON => match serde_json::from_value(data) {
                Ok(cancel) => self.pumps.cancel(cancel),
                Err(e) => tracing::debug!("abridge: malformed stream abandon dropped: {e}"),
            },
            other => tracing::debug!(event = other, "abridge: unknown event dropped"),
        }
    }
}
