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
//! whole request, and a stream's open is registered with the streams by
//! its handler's call, on the receive path, before the sandbox's next
//! event is read (so an abandon right behind the open finds it); its
//! answer then runs on that runtime. Each request so saves the two thread
//! hops to the actor's arbiter and back (about a fifth of abridge's
//! overhead, measured), and every upstream connection is read on the
//! runtime that opened it.

use std::sync::Arc;

use agentix::actix::{Actor, Context, Handler};
use agentix::trace;
use agentix::{start_actor, HostEnd, HostHalf, Received};
use serde_json::value::RawValue;
use tokio::sync::Semaphore;

use crate::exchange::{StreamAbandon, StreamAck, StreamOpen, UpstreamRequest};
use crate::gateway::Gateway;
use crate::gateway_stream::StreamPumps;
use crate::Abridge;

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
    pub fn namespace(&self) -> HostHalf<Abridge> {
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
            move |_, request: UpstreamRequest<Box<RawValue>>, _| {
                let (gateway, parent, slots) = (gateway.clone(), parent.clone(), slots.clone());
                async move {
                    let answer = match slots.try_acquire_owned() {
                        Ok(_slot) => gateway.answer_request(request, parent).await,
                        Err(_) => gateway.busy(request.api),
                    };
                    Ok(answer)
                }
            }
        };
        let gateway = self.clone();
        let open = move |end: HostEnd<Abridge>, open: StreamOpen<Box<RawValue>>, _| {
            // Here, on the receive path, not in the task: known to the
            // pumps before the sandbox's next event is read.
            let control = pumps.register(open.stream_id.clone());
            let slot = slots.clone().try_acquire_owned().ok();
            let (gateway, parent) = (gateway.clone(), parent.clone());
            async move { gateway.open_stream(end, open, control, parent, slot).await }
        };
        HostHalf::<Abridge>::new()
            .answer(whole)
            .answer_then(open)
            .on_actor::<StreamAck>(actor.clone())
            .on_actor::<StreamAbandon>(actor)
    }
}

impl Actor for GatewayActor {
    type Context = Context<Self>;
}

impl Handler<Received<HostEnd<Abridge>, StreamAck>> for GatewayActor {
    type Result = ();

    fn handle(&mut self, ack: Received<HostEnd<Abridge>, StreamAck>, _: &mut Context<Self>) {
        self.pumps.ack(ack.event);
    }
}

impl Handler<Received<HostEnd<Abridge>, StreamAbandon>> for GatewayActor {
    type Result = ();

    fn handle(&mut self, gone: Received<HostEnd<Abridge>, StreamAbandon>, _: &mut Context<Self>) {
        self.pumps.cancel(gone.event);
    }
}
