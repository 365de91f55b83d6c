//! [`GatewayActor`]: the host half of one sandbox's `/abridge` streams, an
//! actor, and the namespace it answers on.
//!
//! Supervised by nobody of its own: [`crate::Gateway::namespace`] starts it
//! (on the caller's actix arbiter, or the shared background one) and the
//! sandbox's namespace holds its only address, so it stops when the
//! namespace is gone. It has no children: the streams it hears about run
//! as tasks of the sandbox connection's runtime.
//!
//! The actor takes the sandbox's word about running streams (acks and
//! abandons) in the order the sandbox sent it. Requests are not the
//! actor's: a request handler on the connection's own runtime answers a
//! whole request, and a stream's open is taken on the receive path, where
//! it is registered with the streams before the sandbox's next event is
//! read (so an abandon right behind the open finds it) and then runs on
//! that runtime. Each request so saves the two thread hops to the actor's
//! arbiter and back (about a fifth of abridge's overhead, measured), and
//! every upstream connection is read on the runtime that opened it.

use std::convert::Infallible;
use std::sync::Arc;

use agentix::actix::{Actor, Context, Handler};
use agentix::trace;
use agentix::{
    start_actor, HostNamespace, HostNamespaceHandle, JsonText, JsonValue, NamespaceEvent,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::Semaphore;

use crate::exchange::{StreamOpen, UpstreamRequest};
use crate::gateway::Gateway;
use crate::gateway_stream::StreamPumps;
use crate::{EVENT_STREAM, EVENT_STREAM_ABANDON, EVENT_STREAM_ACK, EVENT_UPSTREAM, NAMESPACE};

/// One sandbox's running streams, told of what its agents have read and
/// which of them went away.
pub struct GatewayActor {
    pumps: StreamPumps,
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
        // One per request in flight, whole or streamed: the sandbox's limit.
        let slots = Arc::new(Semaphore::new(self.concurrency()));
        let parent = trace::current();
        let pumps = StreamPumps::default();
        let actor = start_actor({
            let pumps = pumps.clone();
            move |_| GatewayActor { pumps }
        });
        // An agent that goes away drops the answer's future, and with it
        // the upstream request.
        let whole = {
            let (gateway, parent, slots) = (self.clone(), parent.clone(), slots.clone());
            move |request: UpstreamRequest<Box<RawValue>>| {
                let (gateway, parent, slots) = (gateway.clone(), parent.clone(), slots.clone());
                async move {
                    let answer = match slots.try_acquire_owned() {
                        Ok(_slot) => gateway.answer_request(request, parent).await,
                        Err(_) => gateway.busy(request.api),
                    };
                    Ok::<_, Infallible>(answer)
                }
            }
        };
        let gateway = self.clone();
        let open = move |ns: HostNamespaceHandle, envelope: JsonText| {
            let (request_id, open) = read_open(&envelope);
            // Here, not in the task: known to the pumps before the
            // sandbox's next event is read.
            let open = open.map(|open| {
                let control = pumps.register(open.stream_id.clone());
                (open, control)
            });
            let slot = slots.clone().try_acquire_owned().ok();
            let (gateway, parent) = (gateway.clone(), parent.clone());
            async move {
                gateway
                    .open_stream(ns, request_id, open, parent, slot)
                    .await
            }
        };
        HostNamespace::new(NAMESPACE)
            .request_handler_as(EVENT_UPSTREAM, whole)
            .on_text(EVENT_STREAM, open)
            .on_actor([EVENT_STREAM_ACK, EVENT_STREAM_ABANDON], actor.recipient())
    }
}

/// A stream's open as the sandbox sent it (`{request_id, data}`): its
/// request id (`null` if it has none) and the open, its agent's body left
/// as text, or why it is not one.
fn read_open(envelope: &JsonText) -> (JsonValue, Result<StreamOpen<Box<RawValue>>, String>) {
    #[derive(Deserialize)]
    struct Envelope {
        request_id: Option<JsonValue>,
        data: StreamOpen<Box<RawValue>>,
    }
    #[derive(Deserialize)]
    struct IdOnly {
        request_id: Option<JsonValue>,
    }
    match serde_json::from_str::<Envelope>(envelope.as_str()) {
        Ok(Envelope { request_id, data }) => (request_id.unwrap_or_default(), Ok(data)),
        // Read again only to answer the sandbox under its id.
        Err(e) => {
            let request_id = serde_json::from_str::<IdOnly>(envelope.as_str())
                .ok()
                .and_then(|ids| ids.request_id);
            (request_id.unwrap_or_default(), Err(e.to_string()))
        }
    }
}

impl Actor for GatewayActor {
    type Context = Context<Self>;
}

impl Handler<NamespaceEvent<HostNamespaceHandle>> for GatewayActor {
    type Result = ();

    fn handle(&mut self, event: NamespaceEvent<HostNamespaceHandle>, _: &mut Context<Self>) {
        let NamespaceEvent { event, data, .. } = event;
        match event.as_str() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::Api;

    #[test]
    fn a_stream_open_keeps_the_agents_body_as_text_and_a_bad_one_keeps_its_id() {
        let body = r#"{ "model" : "m", "stream": true, "t": 0.10 }"#;
        let envelope = format!(
            r#"{{"request_id": 7, "data": {{"stream_id": "1-1", "request": {{"api": "chat_completions", "body": {body}}}}}}}"#
        );
        let (id, open) = read_open(&JsonText::parse(envelope).unwrap());
        assert_eq!(id, serde_json::json!(7));
        let open = open.unwrap();
        assert_eq!(open.stream_id, "1-1");
        assert_eq!(open.request.api, Api::ChatCompletions);
        assert_eq!(open.request.body.get(), body);

        // No stream id: refused under the sandbox's id, not dropped.
        let bad =
            r#"{"request_id": "r9", "data": {"request": {"api": "chat_completions", "body": {}}}}"#;
        let (id, open) = read_open(&JsonText::parse(bad.into()).unwrap());
        assert_eq!(id, serde_json::json!("r9"));
        assert!(open.unwrap_err().contains("stream_id"));
    }
}
