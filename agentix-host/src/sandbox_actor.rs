//! [`SandboxActor`]: a sandbox as an actix actor, for programs built of
//! actors.
//!
//! It owns a [`Sandbox`] and answers messages with what the handle's
//! methods return: [`RemoteCall`] (typed, checked by the compiler like
//! `sandbox.remote`), [`CallJson`] (by name), [`StreamTo`] (a streaming
//! call whose items arrive at another actor as [`StreamItem`] messages, each
//! `send().await`ed, so a slow receiver slows the stream's window instead of
//! buffering it) and [`SandboxHealth`]. A message's response resolves with
//! the call's outcome: that is the correlation, by mailbox. Calls run
//! concurrently, each in a future of its own, so a long call holds up no
//! other. Hand out `addr.recipient::<CallJson>()` and friends to actors that
//! should reach the sandbox and nothing else.
//!
//! Supervised by a [`SandboxSupervisor`](crate::sandbox_supervisor::SandboxSupervisor)
//! when one started it (its [`ChildGuard`] reports its end), else by nobody;
//! it has no children. It stops when its sandbox's server ends by itself,
//! and the sandbox is deleted when the actor stops (if the handle owned it).
//!
//! The plain handle stays the fast path: `sandbox.remote(..)` from async
//! code pays no mailbox hop, and an actor costs one (`agentix-bench`
//! reports both, `echo_p50_us` and `actor_echo_p50_us`).

use std::marker::PhantomData;
use std::sync::Arc;

use actix::prelude::*;
use agentix_actors::supervision::ChildGuard;
use agentix_wire::call_args::CallArgs;
use agentix_wire::cbor;
use agentix_wire::errors::RemoteError;
use agentix_wire::remote::{Remote, RemoteStream};
use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::call::Call;
use crate::sandbox::Sandbox;

// ---- messages ------------------------------------------------------------

/// Calls a remote function with its argument tuple; the response is its
/// result, typed as the function declares.
pub struct RemoteCall<O> {
    target: &'static str,
    args: Result<Vec<u8>, RemoteError>,
    _output: PhantomData<fn() -> O>,
}

impl<O> RemoteCall<O> {
    /// A call of `f` with `args` (the tuple, or the bare value of a single
    /// argument), as `sandbox.remote(f, args)` would make it.
    pub fn new<A: Serialize>(f: Remote<A, O>, args: impl CallArgs<A>) -> Self {
        RemoteCall {
            target: f.name(),
            args: cbor::to_vec(&args.into_args()),
            _output: PhantomData,
        }
    }
}

impl<O: 'static> Message for RemoteCall<O> {
    type Result = Result<O, RemoteError>;
}

/// Calls `target` by name with JSON arguments (as `Sandbox::call_json`).
#[derive(Debug, Message)]
#[rtype(result = "Result<serde_json::Value, RemoteError>")]
pub struct CallJson {
    /// The function's wire name.
    pub target: String,
    /// An array (positional), an object (by name) or one bare value.
    pub args: serde_json::Value,
}

/// Starts the streaming function `target` and sends each item to `to`, then
/// [`StreamItem::End`] or [`StreamItem::Failed`]; the response resolves once
/// the last message was handled. Items are the stream's own type `T`
/// ([`StreamTo::of`]), or JSON values for a stream called by name.
pub struct StreamTo<T: Send + 'static = serde_json::Value> {
    /// The function's wire name.
    pub target: String,
    /// Its CBOR-encoded argument tuple.
    args: Result<Vec<u8>, RemoteError>,
    /// Who gets the items.
    pub to: Recipient<StreamItem<T>>,
}

impl<T: Send + 'static> Message for StreamTo<T> {
    type Result = ();
}

impl<T: Send + 'static> StreamTo<T> {
    /// Streams `f` called with `args` to `to`, each item as the stream's
    /// own type.
    pub fn of<A: Serialize>(
        f: RemoteStream<A, T>,
        args: impl CallArgs<A>,
        to: Recipient<StreamItem<T>>,
    ) -> Self {
        StreamTo {
            target: f.name().to_owned(),
            args: cbor::to_vec(&args.into_args()),
            to,
        }
    }
}

impl StreamTo {
    /// Streams `f` called with `args` to `to`, items as JSON values.
    #[deprecated(
        since = "0.2.0",
        note = "use `StreamTo::of`, whose items are the stream's own type"
    )]
    pub fn new<A: Serialize, T>(
        f: RemoteStream<A, T>,
        args: impl CallArgs<A>,
        to: Recipient<StreamItem>,
    ) -> Self {
        StreamTo {
            target: f.name().to_owned(),
            args: cbor::to_vec(&args.into_args()),
            to,
        }
    }

    /// Streams `target` called by name with JSON `args` to `to`.
    pub fn json(
        target: impl Into<String>,
        args: serde_json::Value,
        to: Recipient<StreamItem>,
    ) -> Self {
        StreamTo {
            target: target.into(),
            args: cbor::to_vec(&args),
            to,
        }
    }
}

/// One message of a stream sent to an actor by [`StreamTo`].
#[derive(Debug)]
pub enum StreamItem<T = serde_json::Value> {
    /// The next item.
    Item(T),
    /// The stream ended after its last item.
    End,
    /// The stream ended with this error (no item follows).
    Failed(RemoteError),
}

impl<T: Send + 'static> Message for StreamItem<T> {
    type Result = ();
}

/// The sandbox server's `/health` report.
#[derive(Debug, Message)]
#[rtype(result = "Result<serde_json::Value, RemoteError>")]
pub struct SandboxHealth;

// ---- the actor -----------------------------------------------------------

/// A sandbox behind a mailbox.
pub struct SandboxActor {
    sandbox: Arc<Sandbox>,
    /// Tells a supervisor when this actor ends.
    _guard: Option<ChildGuard<u64>>,
}

impl SandboxActor {
    /// Starts an actor owning `sandbox`: on the caller's arbiter in an
    /// actix program, on a background one otherwise.
    pub fn start(sandbox: Sandbox) -> Addr<SandboxActor> {
        Self::start_supervised(sandbox, None)
    }

    /// Like [`SandboxActor::start`], reporting its end through `guard`.
    pub(crate) fn start_supervised(
        sandbox: Sandbox,
        guard: Option<ChildGuard<u64>>,
    ) -> Addr<SandboxActor> {
        let sandbox = Arc::new(sandbox);
        agentix_actors::actor_home::start_actor(move |_| SandboxActor {
            sandbox,
            _guard: guard,
        })
    }
}

impl Actor for SandboxActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // A sandbox whose server died serves no more calls: stop, so a
        // supervisor can start another. Watched from a task holding a weak
        // address, so the actor still stops (and deletes its sandbox) once
        // nobody holds its address.
        if let Some(ended) = self.sandbox.ended() {
            let me = ctx.address().downgrade();
            actix::spawn(async move {
                let error = ended.await;
                if let Some(me) = me.upgrade() {
                    me.do_send(ServerEnded(error));
                }
            });
        }
    }
}

/// The sandbox's server ended by itself.
#[derive(Message)]
#[rtype(result = "()")]
struct ServerEnded(RemoteError);

impl Handler<ServerEnded> for SandboxActor {
    type Result = ();

    fn handle(&mut self, ServerEnded(error): ServerEnded, ctx: &mut Context<Self>) {
        tracing::warn!(
            sandbox = self.sandbox.id(),
            "the sandbox's server ended: {error}"
        );
        ctx.stop();
    }
}

impl<O: DeserializeOwned + Send + 'static> Handler<RemoteCall<O>> for SandboxActor {
    type Result = ResponseFuture<Result<O, RemoteError>>;

    fn handle(&mut self, msg: RemoteCall<O>, _: &mut Context<Self>) -> Self::Result {
        let sandbox = self.sandbox.clone();
        Box::pin(async move { Call::<O>::new(&*sandbox, msg.target, msg.args).await })
    }
}

impl Handler<CallJson> for SandboxActor {
    type Result = ResponseFuture<Result<serde_json::Value, RemoteError>>;

    fn handle(&mut self, msg: CallJson, _: &mut Context<Self>) -> Self::Result {
        let sandbox = self.sandbox.clone();
        Box::pin(async move { sandbox.call_json(&msg.target, msg.args).await })
    }
}

impl<T: serde::de::DeserializeOwned + Send + 'static> Handler<StreamTo<T>> for SandboxActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: StreamTo<T>, _: &mut Context<Self>) -> Self::Result {
        let sandbox = self.sandbox.clone();
        Box::pin(async move {
            let StreamTo { target, args, to } = msg;
            let call = crate::stream::StreamCall::<T>::new(&*sandbox, target, args);
            let mut items = match call.await {
                Ok(items) => items,
                Err(e) => {
                    let _ = to.send(StreamItem::Failed(e)).await;
                    return;
                }
            };
            while let Some(item) = items.next().await {
                let last = item.is_err();
                let message = match item {
                    Ok(value) => StreamItem::Item(value),
                    Err(e) => StreamItem::Failed(e),
                };
                // Awaited: a receiver that falls behind holds the stream's
                // window, not a buffer here. One that stopped ends it.
                if to.send(message).await.is_err() || last {
                    return;
                }
            }
            let _ = to.send(StreamItem::End).await;
        })
    }
}

impl Handler<SandboxHealth> for SandboxActor {
    type Result = ResponseFuture<Result<serde_json::Value, RemoteError>>;

    fn handle(&mut self, _: SandboxHealth, _: &mut Context<Self>) -> Self::Result {
        let sandbox = self.sandbox.clone();
        Box::pin(async move { sandbox.health().await })
    }
}
