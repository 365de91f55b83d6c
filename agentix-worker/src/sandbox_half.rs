//! A typed protocol's sandbox half: [`SandboxHalf`] says what handles each
//! event and request the hosts send (closures or actors), and
//! [`SandboxEnd`] sends the protocol's own events and requests to the hosts.
//!
//! It is sugar over [`crate::namespace`], which keeps the order and bounds:
//! the namespace's events, closures' and actors' alike, are handled one at
//! a time in the order the host sent them; requests run side by side, at
//! most [`crate::namespace::REQUESTS_IN_FLIGHT`] at once, and a host's
//! cancel stops one at once.
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
//! use agentix_worker::sandbox_half::SandboxHalf;
//!
//! let end = SandboxHalf::<MyPlugin>::new()
//!     .on(|end, Configure { level }| async move {
//!         end.emit(&Progress { done: u64::from(level) });
//!     })
//!     .register()?;
//! # Ok::<(), agentix_worker::namespace::RegisterError>(())
//! ```
//!
//! Only what the protocol lets this half send or receive compiles: an
//! event the protocol sends the other way, a handler for a payload type it
//! does not declare, or a reply of the wrong type are type errors.
//!
//! ```compile_fail,E0277
//! # use serde::{Deserialize, Serialize};
//! # #[derive(Serialize, Deserialize)] pub struct Configure { level: u32 }
//! # #[derive(Serialize, Deserialize)] pub struct Progress { done: u64 }
//! # agentix_actors::namespace_protocol! {
//! #     pub struct MyPlugin = "/my-plugin";
//! #     to_sandbox { events [Configure] requests [] }
//! #     to_host { events [Progress] requests [] }
//! # }
//! fn report(end: &agentix_worker::sandbox_half::SandboxEnd<MyPlugin>) {
//!     // `Configure` goes from the host to the sandbox, not back.
//!     end.emit(&Configure { level: 1 });
//! }
//! ```
//!
//! ```compile_fail,E0277
//! # use serde::{Deserialize, Serialize};
//! # #[derive(Serialize, Deserialize)] pub struct Configure { level: u32 }
//! # #[derive(Serialize, Deserialize)] pub struct Progress { done: u64 }
//! # agentix_actors::namespace_protocol! {
//! #     pub struct MyPlugin = "/my-plugin";
//! #     to_sandbox { events [Configure] requests [] }
//! #     to_host { events [Progress] requests [] }
//! # }
//! // The host never sends `Progress`: there is nothing to handle.
//! let half = agentix_worker::sandbox_half::SandboxHalf::<MyPlugin>::new()
//!     .on(|_end, _p: Progress| async {});
//! ```
//!
//! ```compile_fail,E0271
//! # use serde::{Deserialize, Serialize};
//! # #[derive(Serialize, Deserialize)] pub struct Fetch { url: String }
//! # #[derive(Serialize, Deserialize)] pub struct Fetched { status: u16 }
//! # agentix_actors::namespace_protocol! {
//! #     pub struct MyPlugin = "/my-plugin";
//! #     to_sandbox { events [] requests [Fetch => Fetched] }
//! #     to_host { events [] requests [] }
//! # }
//! use agentix_actors::namespace_messages::NamespaceFault;
//! // `Fetch` is answered with a `Fetched`, not a number.
//! let half = agentix_worker::sandbox_half::SandboxHalf::<MyPlugin>::new()
//!     .answer(|_end, _f: Fetch, _cancelled| async { Ok::<u16, NamespaceFault>(200) });
//! ```
//!
//! An actor half is started by the bundle's plugin code (in a worker,
//! [`agentix_actors::actor_home::start_actor`]), which is its supervisor; it handles
//! a [`Received`] for each event type and an [`Asked`] for each request
//! type it is given.

use std::future::Future;
use std::time::Duration;

use actix::Recipient;
use tokio_util::sync::CancellationToken;

use crate::namespace::{
    RegisterError, SandboxNamespace, SandboxNamespaceHandle, DEFAULT_REQUEST_TIMEOUT,
};
use crate::worker_context::{register_namespace, WorkerContext};
use agentix_actors::namespace_messages::NamespaceFault;
use agentix_actors::protocol::{
    actor_stopped, hand_to_actor, read_body, read_event, read_reply, reply_value, Asked, Event,
    NamespaceEnd, Protocol, ProtocolMarker, Received, Request, ToHost, ToSandbox,
};
use agentix_wire::request_envelope::RemoteSioError;

/// The sandbox's typed handle on protocol `P`'s namespace: sends what `P`
/// lets the sandbox send.
pub struct SandboxEnd<P> {
    handle: SandboxNamespaceHandle,
    protocol: ProtocolMarker<P>,
}

impl<P> Clone for SandboxEnd<P> {
    fn clone(&self) -> Self {
        SandboxEnd {
            handle: self.handle.clone(),
            protocol: ProtocolMarker::default(),
        }
    }
}

impl<P: Protocol> NamespaceEnd for SandboxEnd<P> {
    type Protocol = P;
    type Receives = ToSandbox;
}

impl<P: Protocol> SandboxEnd<P> {
    fn new(handle: SandboxNamespaceHandle) -> Self {
        SandboxEnd {
            handle,
            protocol: ProtocolMarker::default(),
        }
    }

    /// Sends `event` to every host on the namespace without waiting; events
    /// reach hosts in the order they were sent.
    pub fn emit<E: Event<P, ToHost>>(&self, event: &E) {
        self.handle.emit_json(E::NAME, event);
    }

    /// Like [`SandboxEnd::emit`], but waits while the pipe to the server is
    /// full: for producers that would otherwise outrun it.
    pub async fn emit_paced<E: Event<P, ToHost>>(&self, event: &E) {
        self.handle.emit_json_paced(E::NAME, event).await;
    }

    /// Asks the host and waits for its reply, at most
    /// [`DEFAULT_REQUEST_TIMEOUT`]; dropping the future cancels the request
    /// on the host.
    pub async fn request<R: Request<P, ToHost>>(
        &self,
        request: &R,
    ) -> Result<R::Reply, RemoteSioError> {
        self.request_with_timeout(request, DEFAULT_REQUEST_TIMEOUT)
            .await
    }

    /// [`SandboxEnd::request`] waiting at most `timeout`.
    pub async fn request_with_timeout<R: Request<P, ToHost>>(
        &self,
        request: &R,
        timeout: Duration,
    ) -> Result<R::Reply, RemoteSioError> {
        let reply = self.handle.ask(R::NAME, request, timeout).await?;
        read_reply(R::NAME, reply)
    }

    /// The untyped handle underneath, for what the protocol does not cover.
    pub fn untyped(&self) -> &SandboxNamespaceHandle {
        &self.handle
    }
}

/// Builds protocol `P`'s sandbox half: what handles each event and request
/// the hosts send. [`SandboxHalf::register`] makes it live.
pub struct SandboxHalf<P> {
    namespace: SandboxNamespace,
    protocol: ProtocolMarker<P>,
}

impl<P: Protocol> Default for SandboxHalf<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Protocol> SandboxHalf<P> {
    /// A half at `P::PATH` handling nothing yet.
    pub fn new() -> Self {
        SandboxHalf {
            namespace: SandboxNamespace::new(P::PATH),
            protocol: ProtocolMarker::default(),
        }
    }

    /// Runs `handler` for each `E` the hosts send, one at a time, in order.
    pub fn on<E, F, Fut>(mut self, handler: F) -> Self
    where
        E: Event<P, ToSandbox>,
        F: Fn(SandboxEnd<P>, E) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.namespace = self.namespace.on(E::NAME, move |ns, data| {
            let handled = read_event::<E>(ns.path(), E::NAME, data)
                .map(|event| handler(SandboxEnd::new(ns), event));
            async move {
                if let Some(handled) = handled {
                    handled.await;
                }
            }
        });
        self
    }

    /// Answers each `R` the hosts send with `handler`'s reply or fault; the
    /// token fires, and the future is dropped, when the host cancels.
    pub fn answer<R, F, Fut>(mut self, handler: F) -> Self
    where
        R: Request<P, ToSandbox>,
        F: Fn(SandboxEnd<P>, R, CancellationToken) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R::Reply, NamespaceFault>> + Send + 'static,
    {
        self.namespace = self.namespace.answer(R::NAME, move |ns, body, cancelled| {
            let work = read_body::<R>(R::NAME, body)
                .map(|request| handler(SandboxEnd::new(ns), request, cancelled));
            Box::pin(async move { reply_value(work?.await?) })
        });
        self
    }

    /// Hands each `E` the hosts send to `actor` as a [`Received`], into its
    /// mailbox in order with the namespace's other events (see
    /// [`hand_to_actor`] for what keeps an async handler in order).
    pub fn on_actor<E>(mut self, actor: impl Into<Recipient<Received<SandboxEnd<P>, E>>>) -> Self
    where
        E: Event<P, ToSandbox>,
    {
        let actor = actor.into();
        self.namespace = self.namespace.on_handing(E::NAME, move |ns, data| {
            match read_event::<E>(ns.path(), E::NAME, data) {
                Some(event) => {
                    let ns = SandboxEnd::new(ns);
                    hand_to_actor(&actor, Received { ns, event }, P::PATH, E::NAME)
                }
                None => Box::pin(std::future::ready(())),
            }
        });
        self
    }

    /// Answers each `R` the hosts send with `actor`, as an [`Asked`].
    pub fn answer_actor<R>(self, actor: impl Into<Recipient<Asked<SandboxEnd<P>, R>>>) -> Self
    where
        R: Request<P, ToSandbox>,
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

    /// Registers the half in the worker running this code, so hosts can
    /// join it.
    pub fn register(self) -> Result<SandboxEnd<P>, RegisterError> {
        register_namespace(self.namespace).map(SandboxEnd::new)
    }

    /// Registers the half in `worker`.
    pub fn register_in(self, worker: &WorkerContext) -> Result<SandboxEnd<P>, RegisterError> {
        worker.register(self.namespace).map(SandboxEnd::new)
    }
}
