//! [`GatewayActor`]: the host half of one sandbox's `/abridge`, an actor.
//!
//! Supervised by nobody of its own: [`crate::Gateway::namespace`] starts it
//! (on the caller's actix arbiter, or the shared background one) and the
//! sandbox's namespace holds its only addresses, so it stops when the
//! namespace is gone. Its children are tasks, not actors: one per request
//! being answered and one pump per open stream ([`StreamPumps`]), each
//! ending with its exchange.
//!
//! Whole answers arrive as [`NamespaceRequest`]s, whose reply the namespace
//! sends back (and whose `cancelled` token, fired when the agent goes away,
//! drops the upstream request); stream opens, acks and abandons arrive as [`NamespaceEvent`]s
//! in the order the sandbox sent them, so an ack never overtakes the open
//! of its stream.

use std::sync::Arc;

use agentix::actix::{Actor, Context, Handler, ResponseFuture};
use agentix::trace::{self, SpanContext};
use agentix::{
    start_actor, HostNamespace, HostNamespaceHandle, JsonValue, NamespaceEvent, NamespaceFault,
    NamespaceRequest,
};
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
    /// The actor for one sandbox, its spans under `parent`.
    pub fn new(gateway: Gateway, parent: Option<SpanContext>) -> Self {
        let slots = Arc::new(Semaphore::new(gateway.concurrency()));
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
        let actor = start_actor({
            let (gateway, parent) = (self.clone(), trace::current());
            move |_| GatewayActor::new(gateway, parent)
        });
        HostNamespace::new(NAMESPACE)
            .request_actor(EVENT_UPSTREAM, actor.clone().recipient())
            .on_actor(
                [EVENT_STREAM, EVENT_STREAM_ACK, EVENT_STREAM_ABANDON],
                actor.recipient(),
            )
    }
}

impl Actor for GatewayActor {
    type Context = Context<Self>;
}

impl Handler<NamespaceRequest<HostNamespaceHandle>> for GatewayActor {
    type Result = ResponseFuture<Result<JsonValue, NamespaceFault>>;

    fn handle(
        &mut self,
        request: NamespaceRequest<HostNamespaceHandle>,
        _: &mut Context<Self>,
    ) -> Self::Result {
        let (gateway, parent) = (self.gateway.clone(), self.parent.clone());
        let slot = self.slots.clone().try_acquire_owned();
        Box::pin(async move {
            let answer = match slot {
                // An agent that goes away cancels: the upstream request is
                // dropped and the slot is free again.
                Ok(_slot) => {
                    gateway
                        .answer_under(request.body, parent, &request.cancelled)
                        .await
                }
                Err(_) => {
                    let api = serde_json::from_value(request.body["api"].clone());
                    gateway.busy(api.unwrap_or(Api::ChatCompletions))
                }
            };
            serde_json::to_value(answer)
                .map_err(|e| NamespaceFault::new("SerializeError", e.to_string()))
        })
    }
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
                agentix::actix::spawn(async move {
                    let request_id = request_id.unwrap_or(JsonValue::Null);
                    gateway
                        .open_stream(ns, request_id, open, parent, slot)
                        .await
                });
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
