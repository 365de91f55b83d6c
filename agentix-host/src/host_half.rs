//! A typed protocol's host half: [`HostHalf`] says what handles each event
//! and request the sandbox sends (closures or actors), and [`HostEnd`]
//! sends the protocol's own events and requests to the sandbox.
//!
//! It is sugar over [`crate::namespace`], which keeps the order and bounds:
//! the namespace's events, closures' and actors' alike, are handled one at
//! a time in the order the sandbox sent them; requests run side by side,
//! within the namespace's budget ([`crate::namespace_budget`]), and the
//! sandbox's cancel stops one at once.
//!
//! ```no_run
//! # use serde::{Deserialize, Serialize};
//! # #[derive(Serialize, Deserialize)] pub struct Configure { level: u32 }
//! # #[derive(Serialize, Deserialize)] pub struct Progress { done: u64 }
//! # agentix_actors::namespace_protocol! {
//! #     pub struct MyPlugin = "/my-plugin";
//! #     to_sandbox { events [Configure] requests [] }
//! #     to_host { events [Progress] requests [] }
//! # }
//! # async fn run(sandbox: agentix_host::Sandbox) -> Result<(), Box<dyn std::error::Error>> {
//! use agentix_host::HostHalf;
//!
//! sandbox.register_namespace(HostHalf::<MyPlugin>::new().on(|_end, p: Progress| async move {
//!     println!("{} done", p.done);
//! }))?;
//! sandbox.namespace::<MyPlugin>().await?.emit(&Configure { level: 3 }).await?;
//! # Ok(()) }
//! ```
//!
//! An actor half is started by the host program (for example with
//! `agentix::start_actor`), which is its supervisor, one per sandbox when
//! it keeps per-sandbox state; it handles a [`Received`] for each event
//! type and an [`Asked`] for each request type it is given.

use std::future::Future;
use std::time::Duration;

use actix::Recipient;
use agentix_actors::namespace_messages::NamespaceFault;
use agentix_actors::protocol::{
    actor_stopped, hand_to_actor, read_reply, reply_value, Asked, Event, NamespaceEnd, Protocol,
    ProtocolMarker, Received, ReplyThen, Request, ToHost, ToSandbox,
};
use agentix_wire::errors::RemoteError;
use agentix_wire::request_envelope::RemoteSioError;
use agentix_wire::request_envelope::DEFAULT_REQUEST_TIMEOUT;
use tokio_util::sync::CancellationToken;

use crate::namespace::{typed_body, Answered, HostNamespace, HostNamespaceHandle};

/// The host's typed handle on protocol `P`'s namespace of one sandbox's
/// connection: sends what `P` lets the host send.
pub struct HostEnd<P> {
    handle: HostNamespaceHandle,
    protocol: ProtocolMarker<P>,
}

impl<P> Clone for HostEnd<P> {
    fn clone(&self) -> Self {
        HostEnd {
            handle: self.handle.clone(),
            protocol: ProtocolMarker::default(),
        }
    }
}

impl<P: Protocol> NamespaceEnd for HostEnd<P> {
    type Protocol = P;
    type Receives = ToHost;
}

impl<P: Protocol> HostEnd<P> {
    pub(crate) fn new(handle: HostNamespaceHandle) -> Self {
        HostEnd {
            handle,
            protocol: ProtocolMarker::default(),
        }
    }

    /// Sends `event` to the sandbox; events reach it in the order sent.
    pub async fn emit<E: Event<P, ToSandbox>>(&self, event: &E) -> Result<(), RemoteError> {
        self.handle.emit_payload(E::NAME, event).await
    }

    /// Asks the sandbox and waits for its reply, at most
    /// [`DEFAULT_REQUEST_TIMEOUT`]; dropping the future cancels the request
    /// in the sandbox.
    pub async fn request<R: Request<P, ToSandbox>>(
        &self,
        request: &R,
    ) -> Result<R::Reply, RemoteSioError> {
        self.request_with_timeout(request, DEFAULT_REQUEST_TIMEOUT)
            .await
    }

    /// [`HostEnd::request`] waiting at most `timeout`.
    pub async fn request_with_timeout<R: Request<P, ToSandbox>>(
        &self,
        request: &R,
        timeout: Duration,
    ) -> Result<R::Reply, RemoteSioError> {
        let reply = self.handle.request(R::NAME, request, timeout).await?;
        read_reply(R::NAME, reply)
    }

    /// The untyped handle underneath, for what the protocol does not cover.
    pub fn untyped(&self) -> &HostNamespaceHandle {
        &self.handle
    }

    /// Waits until the sandbox's connection is gone (see
    /// [`HostNamespaceHandle::closed`]).
    pub async fn closed(&self) {
        self.handle.closed().await;
    }

    /// The sandbox's trace hub (see [`HostNamespaceHandle::traces`]).
    pub fn traces(&self) -> &agentix_trace::TraceHub {
        self.handle.traces()
    }
}

/// Builds protocol `P`'s host half: what handles each event and request
/// the sandbox sends. Register it with `Sandbox::register_namespace`.
pub struct HostHalf<P> {
    namespace: HostNamespace,
    protocol: ProtocolMarker<P>,
}

impl<P> Clone for HostHalf<P> {
    fn clone(&self) -> Self {
        HostHalf {
            namespace: self.namespace.clone(),
            protocol: ProtocolMarker::default(),
        }
    }
}

impl<P: Protocol> Default for HostHalf<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P> From<HostHalf<P>> for HostNamespace {
    fn from(half: HostHalf<P>) -> HostNamespace {
        half.namespace
    }
}

impl<P: Protocol> HostHalf<P> {
    /// A half at `P::PATH` handling nothing yet.
    pub fn new() -> Self {
        HostHalf {
            namespace: HostNamespace::new(P::PATH),
            protocol: ProtocolMarker::default(),
        }
    }

    /// Runs `handler` for each `E` the sandbox sends, one at a time, in
    /// order.
    pub fn on<E, F, Fut>(mut self, handler: F) -> Self
    where
        E: Event<P, ToHost>,
        F: Fn(HostEnd<P>, E) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.namespace = self
            .namespace
            .on_decoded(E::NAME, move |ns, event| handler(HostEnd::new(ns), event));
        self
    }

    /// Answers each `R` the sandbox sends with `handler`'s reply or fault;
    /// the token fires, and the future is dropped, when the sandbox
    /// cancels.
    pub fn answer<R, F, Fut>(mut self, handler: F) -> Self
    where
        R: Request<P, ToHost>,
        F: Fn(HostEnd<P>, R, CancellationToken) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R::Reply, NamespaceFault>> + Send + 'static,
    {
        // Read straight from the packet: a body may hold raw JSON
        // (`Box<RawValue>`) passed on unparsed.
        self.namespace = self.namespace.answer_requests(
            R::NAME,
            typed_body::<R>,
            move |ns, request, cancelled| {
                let work = handler(HostEnd::new(ns), request, cancelled);
                async move { reply_value(work.await?) }
            },
        );
        self
    }

    /// Answers each `R` the sandbox sends with `handler`'s [`ReplyThen`]:
    /// its reply is sent, then its `then` work runs in the same task (a
    /// stream's body after its head, say), so nothing it sends can overtake
    /// the reply.
    pub fn answer_then<R, F, Fut>(mut self, handler: F) -> Self
    where
        R: Request<P, ToHost>,
        F: Fn(HostEnd<P>, R, CancellationToken) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ReplyThen<R::Reply>> + Send + 'static,
    {
        self.namespace = self.namespace.answer_requests(
            R::NAME,
            typed_body::<R>,
            move |ns, request, cancelled| {
                let work = handler(HostEnd::new(ns), request, cancelled);
                async move {
                    let ReplyThen { reply, then } = work.await;
                    Answered {
                        reply: reply.and_then(reply_value),
                        then,
                    }
                }
            },
        );
        self
    }

    /// Hands each `E` the sandbox sends to `actor` as a [`Received`], into
    /// its mailbox in order with the namespace's other events (see
    /// [`hand_to_actor`] for what keeps an async handler in order).
    pub fn on_actor<E>(self, actor: impl Into<Recipient<Received<HostEnd<P>, E>>>) -> Self
    where
        E: Event<P, ToHost>,
    {
        let actor = actor.into();
        let handed = self.on(move |ns, event: E| {
            hand_to_actor(&actor, Received { ns, event }, P::PATH, E::NAME)
        });
        HostHalf {
            namespace: handed.namespace.handed_at_once(E::NAME),
            protocol: ProtocolMarker::default(),
        }
    }

    /// Answers each `R` the sandbox sends with `actor`, as an [`Asked`].
    pub fn answer_actor<R>(self, actor: impl Into<Recipient<Asked<HostEnd<P>, R>>>) -> Self
    where
        R: Request<P, ToHost>,
    {
        let actor = actor.into();
        self.answer(move |ns, request: R, cancelled| {
            let asked = actor.send(Asked {
                ns,
                request,
                cancelled,
            });
            async move {
                asked
                    .await
                    .unwrap_or_else(|_| Err(actor_stopped(R::NAME, P::PATH)))
            }
        })
    }
}
