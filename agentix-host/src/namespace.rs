//! Plugin namespaces, host half: [`HostNamespace`] and [`HostNamespaceHandle`].
//!
//! ```no_run
//! # use agentix_host::{HostNamespace, Sandbox};
//! # async fn call_upstream(body: serde_json::Value) -> Result<serde_json::Value, String> {
//! #     Ok(body)
//! # }
//! # fn demo(sandbox: &Sandbox) -> Result<(), Box<dyn std::error::Error>> {
//! let ns = HostNamespace::new("/my-plugin")
//!     .on("record", |_ns, data| async move { println!("{data}") })
//!     .request_handler("fetch", |body| async move { call_upstream(body).await });
//! sandbox.register_namespace(ns)?; // before the first remote call
//! # Ok(()) }
//! ```
//!
//! Either half can be an actix actor instead: [`HostNamespace::on_actor`]
//! hands events to a `Handler<NamespaceEvent<HostNamespaceHandle>>` in arrival
//! order, and [`HostNamespace::request_actor`] answers requests with a
//! `Handler<NamespaceRequest<HostNamespaceHandle>>` whose `Ok` / `Err` becomes the
//! reply. The closure builders and the actor ones mix freely.
//!
//! Handlers run off the Socket.IO receive loop, so a slow handler delays
//! neither other namespaces nor call results. A namespace's events are
//! handled one at a time, in the order the sandbox emitted them (progress
//! and deltas count on it), by one task of the namespace's; each request
//! runs as a task of its own, beside the others. A namespace holds a
//! bounded number of both ([`crate::namespace_budget`]), and past that
//! drops events and answers requests `Overloaded`. A
//! `request_handler` unwraps `{request_id, data}`, and replies with
//! `<event>:result {request_id, data}` or `<event>:error {request_id, error:
//! {type, message}}` (also when the handler panics); a
//! `request_handler_text` gets the body as the JSON text the sandbox sent,
//! for a handler that passes a large body on without reading all of it
//! (and `on_text` an event's payload so); a `request_handler_as` gets it
//! read as a type of its own, and a body that is not one is answered
//! with a `BadRequest` error; an `on_request_as` takes a request as an
//! event, on the receive path, and answers it itself.
//! When the sandbox stops waiting for an answer it sends `<event>:cancel
//! {request_id}`: a closure handler's future is then dropped, an actor's
//! [`NamespaceRequest`] sees its `cancelled` token fire, and no reply is
//! sent.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use actix::Recipient;
use agentix_actors::event_lane::{hand_on_here, EventLane, HandedOn, Turn};
use agentix_actors::namespace_messages::{
    actor_event_handlers, NamespaceEvent, NamespaceFault, NamespaceRequest,
};
use agentix_trace::TraceHub;
use agentix_wire::attachment::{Attachment, WithAttachments};
use agentix_wire::errors::{ErrorKind, RemoteError};
use agentix_wire::json_text::JsonText;
use agentix_wire::request_envelope::{
    cancel_event, cancelled_event, error_reply, is_reply, no_handler_reply, reply_outcome,
    request_id, request_key, RemoteSioError,
};
use futures_util::FutureExt;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::connection::connect_error;
use crate::endpoint::Endpoint;
pub(crate) use crate::namespace_budget::OVERLOADED;
use crate::namespace_budget::{NamespaceBudget, NamespaceLoad};
use crate::sio::{Delivery, Incoming, SioClient};

type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;
/// Gets each event undecoded: each kind of handler reads the payload as
/// the type it needs.
type Handler = Arc<dyn Fn(HostNamespaceHandle, Incoming) -> BoxFuture + Send + Sync>;

/// `incoming`'s payload as `T`, or `T::default()` (logged) if it is not one.
fn payload<T>(ns: &HostNamespaceHandle, incoming: Incoming) -> T
where
    T: DeserializeOwned + WithAttachments + Default,
{
    let name = incoming.name().to_owned();
    incoming.decode::<T>().unwrap_or_else(|e| {
        tracing::debug!(
            path = &*ns.path,
            event = name,
            "unreadable payload, passed as null: {e}"
        );
        T::default()
    })
}

/// A request as the sandbox sends it, its body read as `B`.
#[derive(Deserialize)]
struct RequestEnvelope<B> {
    // Missing fields read as `None`.
    request_id: Option<Value>,
    data: Option<B>,
}

impl<B> Default for RequestEnvelope<B> {
    fn default() -> Self {
        RequestEnvelope {
            request_id: None,
            data: None,
        }
    }
}

impl<B> WithAttachments for RequestEnvelope<B> {
    // Binary attachments stay placeholders, as in any JSON value.
    fn attachments_mut(&mut self) -> Vec<&mut Attachment> {
        Vec::new()
    }
}

/// The error type of a request whose body the handler's type cannot hold.
pub(crate) use agentix_actors::protocol::BAD_REQUEST;

/// The request id of a request whose body did not decode, if it has one.
fn unreadable_request_id(incoming: Incoming) -> Option<Value> {
    incoming
        .decode::<RequestEnvelope<IgnoredAny>>()
        .ok()
        .and_then(|envelope| envelope.request_id)
}

/// An event's payload as the JSON text the sandbox sent (`None` for a
/// missing one).
#[derive(Default, Deserialize)]
#[serde(transparent)]
struct TextPayload(Option<Box<RawValue>>);

impl WithAttachments for TextPayload {
    // Binary attachments stay placeholders, as in any JSON value.
    fn attachments_mut(&mut self) -> Vec<&mut Attachment> {
        Vec::new()
    }
}

/// `null`, for a payload or body the sandbox left out.
fn null_text() -> JsonText {
    JsonText::from_value(&Value::Null)
}

/// A host-side plugin namespace: a path and handlers by event name.
#[derive(Clone)]
pub struct HostNamespace {
    pub(crate) path: String,
    handlers: HashMap<String, Handler>,
    /// The events answered as requests: turned away with a reply.
    requests: HashSet<String>,
    /// The events handed on the receive path to an actor's own bounded
    /// queue: no task, so no budget.
    inline: HashSet<String>,
    /// The events whose handler hands them on at once (a typed actor's):
    /// called on the receive path when nothing waits on the event lane.
    handing: HashSet<String>,
    budget: Arc<NamespaceBudget>,
}

/// The live host side of a namespace: emit to the sandbox, ask it.
#[derive(Clone)]
pub struct HostNamespaceHandle {
    client: SioClient,
    path: Arc<str>,
    answering: Answering,
    asking: Asking,
    traces: TraceHub,
}

impl HostNamespaceHandle {
    fn new(
        client: SioClient,
        path: Arc<str>,
        answering: Answering,
        asking: Asking,
        traces: TraceHub,
    ) -> Self {
        HostNamespaceHandle {
            client,
            path,
            answering,
            asking,
            traces,
        }
    }

    /// The sandbox's trace hub: its handlers run with it in scope, so the
    /// spans they make are the sandbox's (and go on to the hub it was
    /// created with).
    pub fn traces(&self) -> &TraceHub {
        &self.traces
    }

    /// The namespace path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Waits until the connection this namespace was joined on is gone (the
    /// sandbox was deleted, died, or the connection was lost): where a
    /// plugin ends what it keeps for the sandbox.
    pub async fn closed(&self) {
        self.client.closed().await;
    }

    /// Emits `event` with `data` as its own type: its
    /// [`Attachment`](agentix_wire::attachment::Attachment)s travel as
    /// binary attachments (the typed halves' events).
    pub(crate) async fn emit_payload<T: Serialize + ?Sized>(
        &self,
        event: &str,
        data: &T,
    ) -> Result<(), RemoteError> {
        self.client
            .emit_attachments(&self.path, event, data)
            .await
            .map_err(|e| {
                let kind = match e {
                    crate::sio::SioError::Encode(_) => ErrorKind::BadArguments,
                    _ => ErrorKind::ConnectionLost,
                };
                RemoteError::new(kind, format!("cannot emit `{event}`: {e}"))
            })
    }

    /// Emits `event` with `data` to the sandbox's namespace.
    pub async fn emit(&self, event: &str, data: Value) -> Result<(), RemoteError> {
        // A JSON value, never the payload's own type: Socket.IO's encoder
        // would spread a tuple struct over several arguments.
        self.client
            .emit(&self.path, event, &data)
            .await
            .map_err(|e| {
                RemoteError::new(
                    ErrorKind::ConnectionLost,
                    format!("cannot emit `{event}`: {e}"),
                )
            })
    }
}

impl HostNamespaceHandle {
    /// Sends `event {request_id, data: body}` to the sandbox and waits up
    /// to `timeout` for `event:result` or `event:error`; a dropped or timed
    /// out request is cancelled in the sandbox (`event:cancel`), and a lost
    /// connection ends it at once.
    pub async fn request<T: Serialize + ?Sized>(
        &self,
        event: &str,
        body: &T,
        timeout: std::time::Duration,
    ) -> Result<Value, RemoteSioError> {
        let request_id = crate::secret::random_hex(8);
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.asking.table().insert(request_id.clone(), tx);
        // Dropped before its reply, the request is forgotten and the
        // sandbox told to stop answering it.
        let mut forget = ForgetAsked {
            ns: self,
            event,
            request_id: Some(request_id.clone()),
        };
        let envelope = json!({ "request_id": request_id, "data": body });
        if let Err(e) = self.client.emit(&self.path, event, &envelope).await {
            forget.request_id = None;
            self.asking.table().remove(&request_id);
            return Err(RemoteSioError::Closed(format!("{}: {e}", self.path)));
        }
        let outcome = tokio::select! {
            reply = rx => Some(reply.unwrap_or_else(|_| Err(RemoteSioError::Closed(self.path.to_string())))),
            _ = self.client.closed() => None,
            () = tokio::time::sleep(timeout) => {
                return Err(RemoteSioError::Timeout {
                    path: self.path.to_string(),
                    event: event.to_owned(),
                    timeout,
                });
            }
        };
        forget.request_id = None;
        self.asking.table().remove(&request_id);
        outcome.unwrap_or_else(|| {
            Err(RemoteSioError::Closed(format!(
                "{}: the connection to the sandbox ended",
                self.path
            )))
        })
    }
}

/// The host's requests to the sandbox waiting for a reply, by request id.
#[derive(Clone, Default)]
struct Asking(Arc<Mutex<HashMap<String, AskedReply>>>);

/// Where a waiting request's reply goes.
type AskedReply = tokio::sync::oneshot::Sender<Result<Value, RemoteSioError>>;

impl Asking {
    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, AskedReply>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// For a request whose caller stopped waiting: forgets it and tells the
/// sandbox (`<event>:cancel {request_id}`), from a task of its own, since
/// sending takes a wait that a drop cannot.
struct ForgetAsked<'a> {
    ns: &'a HostNamespaceHandle,
    event: &'a str,
    request_id: Option<String>,
}

impl Drop for ForgetAsked<'_> {
    fn drop(&mut self) {
        let Some(request_id) = self.request_id.take() else {
            return;
        };
        self.ns.asking.table().remove(&request_id);
        let ns = self.ns.clone();
        let event = cancel_event(self.event);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let cancel = json!({ "request_id": request_id });
                if let Err(e) = ns.emit(&event, cancel).await {
                    tracing::debug!("cancel not sent: {e}");
                }
            });
        }
    }
}

impl HostNamespace {
    /// A namespace at `path` (like `/my-plugin`) with no handlers yet.
    pub fn new(path: impl Into<String>) -> Self {
        HostNamespace {
            path: path.into(),
            handlers: HashMap::new(),
            requests: HashSet::new(),
            inline: HashSet::new(),
            handing: HashSet::new(),
            budget: Arc::default(),
        }
    }

    /// Makes `handler` the one for `event`, of no kind yet (a request or
    /// an actor's event says so after).
    fn set_handler(&mut self, event: String, handler: Handler) {
        self.requests.remove(&event);
        self.inline.remove(&event);
        self.handing.remove(&event);
        self.handlers.insert(event, handler);
    }

    /// What this namespace turned away so far because it was full, over
    /// every connection of its sandbox.
    pub fn load(&self) -> NamespaceLoad {
        self.budget.load()
    }

    /// The same namespace with a budget of its own: one namespace value
    /// registered on many sandboxes (a clone each) is limited and counted
    /// per sandbox.
    pub(crate) fn with_own_budget(mut self) -> Self {
        self.budget = Arc::default();
        self
    }

    /// Runs `handler` for every `event` the sandbox emits.
    pub fn on<F, Fut>(mut self, event: impl Into<String>, handler: F) -> Self
    where
        F: Fn(HostNamespaceHandle, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.set_handler(
            event.into(),
            Arc::new(move |ns, incoming| {
                let data = payload(&ns, incoming);
                Box::pin(handler(ns, data))
            }),
        );
        self
    }

    /// As [`on`](Self::on), each event's payload given as the JSON text the
    /// sandbox sent: checked, not parsed, for a handler that reads only part
    /// of a large payload or passes it on.
    pub fn on_text<F, Fut>(mut self, event: impl Into<String>, handler: F) -> Self
    where
        F: Fn(HostNamespaceHandle, JsonText) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.set_handler(
            event.into(),
            Arc::new(move |ns, incoming| {
                let TextPayload(text) = payload(&ns, incoming);
                Box::pin(handler(ns, text.map_or_else(null_text, JsonText::from_raw)))
            }),
        );
        self
    }

    /// Answers the sandbox's `request(event, body)`: `handler` gets the body
    /// and its `Ok` becomes `<event>:result`, its `Err` (or a panic)
    /// `<event>:error {type, message}`.
    pub fn request_handler<F, Fut, T, E>(self, event: &str, handler: F) -> Self
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        T: Serialize,
        E: std::fmt::Display,
    {
        self.answer_requests(event, value_body, plain_answer(handler))
    }

    /// As [`request_handler`](Self::request_handler), each body read as
    /// `B`, a type of the plugin's own, straight from the packet. A request
    /// whose body is not a `B` is answered `<event>:error {type:
    /// "BadRequest"}` saying why, without reaching `handler`.
    #[deprecated(
        since = "0.2.0",
        note = "declare the request in a protocol (`agentix::namespace_protocol!`) and answer it \
                with `HostHalf::answer`"
    )]
    pub fn request_handler_as<B, F, Fut, T, E>(self, event: &str, handler: F) -> Self
    where
        B: DeserializeOwned + Send + 'static,
        F: Fn(B) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        T: Serialize,
        E: std::fmt::Display,
    {
        self.answer_requests(event, typed_body::<B>, plain_answer(handler))
    }

    /// As [`request_handler`](Self::request_handler), the body given as the
    /// JSON text the sandbox sent: checked, not parsed, for a handler that
    /// passes it on or reads only part of it (an agent's whole history,
    /// say).
    pub fn request_handler_text<F, Fut, T, E>(self, event: &str, handler: F) -> Self
    where
        F: Fn(JsonText) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        T: Serialize,
        E: std::fmt::Display,
    {
        // As the JSON it is: `JsonText`'s own form is a string, for CBOR.
        self.answer_requests(
            event,
            |body: Option<Box<RawValue>>| Ok(body.map_or_else(null_text, JsonText::from_raw)),
            plain_answer(handler),
        )
    }

    /// Answers `event`'s requests with `handler`, which gets each body
    /// decoded as `B` (`None` for a missing or `null` one) and made a `C`
    /// by `read`, and a token the sandbox's cancel fires (the future is
    /// dropped then too). A body that does not decode or read is answered
    /// with a `BadRequest` error.
    pub(crate) fn answer_requests<B, C, R, F, Fut>(
        mut self,
        event: &str,
        read: R,
        handler: F,
    ) -> Self
    where
        B: DeserializeOwned + Send + 'static,
        R: Fn(Option<B>) -> Result<C, String> + Send + Sync + 'static,
        F: Fn(HostNamespaceHandle, C, CancellationToken) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: Into<Answered>,
    {
        let name = event.to_owned();
        let handler = move |ns: HostNamespaceHandle, incoming: Incoming| -> BoxFuture {
            let Some((request_id, body)) = read_request(&name, incoming, &read) else {
                return Box::pin(std::future::ready(()));
            };
            let body = match body {
                Ok(body) => body,
                Err(why) => {
                    let (event, reply) = error_reply(&name, request_id, BAD_REQUEST, why);
                    return Box::pin(async move {
                        if let Err(e) = ns.emit(&event, reply).await {
                            tracing::debug!("reply not sent: {e}");
                        }
                    });
                }
            };
            // Known before the next delivery, so a cancel right behind the
            // request finds it.
            let answer = ns.answering.start(&request_id);
            let made = std::panic::catch_unwind(AssertUnwindSafe(|| {
                handler(ns.clone(), body, answer.token.clone())
            }));
            let name = name.clone();
            Box::pin(async move {
                let outcome = match made {
                    Ok(work) => {
                        let work = AssertUnwindSafe(work).catch_unwind();
                        let Some(outcome) = answer.unless_cancelled(&name, work).await else {
                            return;
                        };
                        outcome
                    }
                    Err(panic) => Err(panic),
                };
                let (outcome, then) = match outcome.map(Into::into) {
                    Ok(Answered { reply, then }) => (Ok(reply), then),
                    Err(panic) => (Err(panic), None),
                };
                let (reply_event, reply) = reply_for(&name, request_id, outcome);
                if let Err(e) = ns.emit(&reply_event, reply).await {
                    tracing::debug!("reply not sent: {e}");
                }
                // The rest of the work, after its reply, in this task.
                if let Some(then) = then {
                    if AssertUnwindSafe(then).catch_unwind().await.is_err() {
                        tracing::error!(event = name, "the work after a reply panicked");
                    }
                }
            })
        };
        self.set_handler(event.to_owned(), Arc::new(handler));
        self.requests.insert(event.to_owned());
        self
    }

    /// Marks `event`'s handler (already set) as one that hands the event on
    /// at once, so it may run on the receive path when nothing waits.
    pub(crate) fn handed_at_once(mut self, event: &str) -> Self {
        self.handing.insert(event.to_owned());
        self
    }

    /// Runs `handler` for each `event`, its payload decoded straight from
    /// the packet as `T` (a payload that is not one is dropped, logged):
    /// the typed halves' events.
    pub(crate) fn on_decoded<T, F, Fut>(mut self, event: &str, handler: F) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(HostNamespaceHandle, T) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.set_handler(
            event.to_owned(),
            Arc::new(move |ns, incoming| {
                let name = incoming.name().to_owned();
                match incoming.decode::<Decoded<T>>() {
                    Ok(Decoded(event)) => Box::pin(handler(ns, event)),
                    Err(e) => {
                        tracing::warn!(
                            path = &*ns.path,
                            event = name,
                            "event dropped: its payload is not the protocol's type: {e}"
                        );
                        Box::pin(std::future::ready(()))
                    }
                }
            }),
        );
        self
    }
}

/// A payload read as the handler's own type, straight from the packet.
#[derive(Deserialize)]
#[serde(transparent)]
struct Decoded<T>(T);

impl<T> WithAttachments for Decoded<T> {
    // Binary attachments stay placeholders, as in any JSON value.
    fn attachments_mut(&mut self) -> Vec<&mut Attachment> {
        Vec::new()
    }
}

/// A request handler's answer: the reply, and the work to run after it is
/// sent, if any.
pub(crate) struct Answered {
    pub(crate) reply: Result<Value, NamespaceFault>,
    pub(crate) then: Option<BoxFuture>,
}

impl From<Result<Value, NamespaceFault>> for Answered {
    fn from(reply: Result<Value, NamespaceFault>) -> Self {
        Answered { reply, then: None }
    }
}

/// A closure answering with `Result<T, E>` as one answering with a JSON
/// reply or a fault named after `E`'s type.
fn plain_answer<C, F, Fut, T, E>(
    handler: F,
) -> impl Fn(HostNamespaceHandle, C, CancellationToken) -> BoxReply + Send + Sync + 'static
where
    F: Fn(C) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    T: Serialize,
    E: std::fmt::Display,
{
    move |_, body, _| {
        let work = handler(body);
        // Turned into plain JSON at once: `T` and `E` need not be `Send`.
        Box::pin(async move {
            match work.await {
                Ok(value) => serde_json::to_value(value)
                    .map_err(|e| NamespaceFault::new("SerializeError", e.to_string())),
                Err(e) => Err(NamespaceFault::new(
                    short_type_name::<E>(),
                    format!("{e:#}"),
                )),
            }
        })
    }
}

/// A request handler's answer, on its way.
type BoxReply = Pin<Box<dyn Future<Output = Result<Value, NamespaceFault>> + Send>>;

impl HostNamespace {
    /// Takes the sandbox's `request(event, body)` as an event its handler
    /// answers itself (emitting `<event>:result` or `<event>:error` with the
    /// request id), for work that must begin before the sandbox's next
    /// event is read: `handler` is called on the receive path with the
    /// request id and the body read as `B`, or why it is not one, and its
    /// future runs as a task. Requests without an id are dropped.
    #[deprecated(
        since = "0.2.0",
        note = "declare the request in a protocol (`agentix::namespace_protocol!`) and answer it \
                with `HostHalf::answer_then`, whose handler is called on the receive path too"
    )]
    pub fn on_request_as<B, F, Fut>(mut self, event: &str, handler: F) -> Self
    where
        B: DeserializeOwned + Send + 'static,
        F: Fn(HostNamespaceHandle, Value, Result<B, String>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let name = event.to_owned();
        self.set_handler(
            event.to_owned(),
            Arc::new(
                move |ns, incoming| match read_request(&name, incoming, typed_body::<B>) {
                    Some((request_id, body)) => Box::pin(handler(ns, request_id, body)),
                    None => Box::pin(std::future::ready(())),
                },
            ),
        );
        self.requests.insert(event.to_owned());
        self
    }
}

/// A request's id and its body made a `C` by `read` (or why it could not
/// be); `None`, logged, for a request without an id, which cannot be
/// answered.
fn read_request<B, C>(
    name: &str,
    incoming: Incoming,
    read: impl Fn(Option<B>) -> Result<C, String>,
) -> Option<(Value, Result<C, String>)>
where
    B: DeserializeOwned,
{
    let (request_id, body) = match incoming.try_decode::<RequestEnvelope<B>>() {
        Ok(RequestEnvelope { request_id, data }) => (request_id, read(data)),
        Err((why, incoming)) => (unreadable_request_id(incoming), Err(why.to_string())),
    };
    match request_id.filter(|id| !id.is_null()) {
        Some(request_id) => Some((request_id, body)),
        None => {
            tracing::debug!(event = name, "request without a request_id; dropped");
            None
        }
    }
}

/// A body as a value (`null` if left out).
fn value_body(body: Option<Value>) -> Result<Value, String> {
    Ok(body.unwrap_or_default())
}

/// A body read as the handler's own `B`: `null` or left out is a `B` only
/// if `B` reads from `null`.
pub(crate) fn typed_body<B: DeserializeOwned>(body: Option<B>) -> Result<B, String> {
    match body {
        Some(body) => Ok(body),
        None => B::deserialize(Value::Null).map_err(|e| format!("the request's body: {e}")),
    }
}

/// The requests one joined namespace is answering, by request id: where a
/// sandbox's `<event>:cancel {request_id}` finds the one to stop. Requests
/// that share an id (a sandbox that reuses one) share its entry: a cancel
/// stops them all, since the sandbox cannot tell them apart either, and the
/// entry stays until the last of them is answered.
#[derive(Clone, Default)]
struct Answering(Arc<Mutex<HashMap<String, Shared>>>);

/// The token of the requests answered under one id, and how many they are.
struct Shared {
    token: CancellationToken,
    requests: usize,
}

/// A request being answered; dropped, it leaves the table.
struct Answer {
    token: CancellationToken,
    key: String,
    answering: Answering,
}

impl Answering {
    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, Shared>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn start(&self, request_id: &Value) -> Answer {
        let key = request_key(request_id);
        let mut table = self.table();
        let shared = table.entry(key.clone()).or_insert_with(|| Shared {
            token: CancellationToken::new(),
            requests: 0,
        });
        shared.requests += 1;
        let token = shared.token.clone();
        drop(table);
        Answer {
            token,
            key,
            answering: self.clone(),
        }
    }

    fn cancel(&self, request_id: &Value) {
        if let Some(shared) = self.table().get(&request_key(request_id)) {
            shared.token.cancel();
        }
    }

    fn finish(&self, key: &str) {
        let mut table = self.table();
        if let Some(shared) = table.get_mut(key) {
            shared.requests -= 1;
            if shared.requests == 0 {
                table.remove(key);
            }
        }
    }
}

impl Answer {
    /// `work`'s output, or `None` once the sandbox cancels the request;
    /// either way the request leaves the table.
    async fn unless_cancelled<F: Future>(self, event: &str, work: F) -> Option<F::Output> {
        let outcome = self.token.run_until_cancelled(work).await;
        if outcome.is_none() {
            tracing::debug!(event, "request cancelled by the sandbox");
        }
        outcome
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        self.answering.finish(&self.key);
    }
}

/// Requests one actor may have in flight before new ones are refused.
pub(crate) const ACTOR_REQUESTS_IN_FLIGHT: usize = 256;

impl HostNamespace {
    /// Hands `events` to the actor behind `actor`, in the order they
    /// arrive, as [`NamespaceEvent`]s (one queue for all of them).
    pub fn on_actor<E: Into<String>>(
        mut self,
        events: impl IntoIterator<Item = E>,
        actor: Recipient<NamespaceEvent<HostNamespaceHandle>>,
    ) -> Self {
        for (event, handler) in actor_event_handlers(events, actor, HostNamespaceHandle::path) {
            self.set_handler(
                event.clone(),
                Arc::new(move |ns, incoming| {
                    let data = payload(&ns, incoming);
                    handler(ns, data);
                    Box::pin(std::future::ready(()))
                }),
            );
            self.inline.insert(event);
        }
        self
    }

    /// Answers the sandbox's `request(event, body)` with the actor behind
    /// `actor`: its `Ok` becomes `<event>:result`, its `Err`
    /// `<event>:error {type, message}`. Past [`ACTOR_REQUESTS_IN_FLIGHT`]
    /// unanswered requests, new ones get an [`OVERLOADED`] error at once.
    pub fn request_actor(
        mut self,
        event: &str,
        actor: Recipient<NamespaceRequest<HostNamespaceHandle>>,
    ) -> Self {
        let slots = Arc::new(tokio::sync::Semaphore::new(ACTOR_REQUESTS_IN_FLIGHT));
        let name = event.to_owned();
        let handler = move |ns: HostNamespaceHandle, incoming: Incoming| -> BoxFuture {
            let name = name.clone();
            let Some((request_id, body)) = read_request(&name, incoming, value_body) else {
                return Box::pin(std::future::ready(()));
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                let message = format!(
                    "the actor answering `{name}` on {} has {ACTOR_REQUESTS_IN_FLIGHT} \
                     requests in flight",
                    ns.path
                );
                let (event, reply) = error_reply(&name, request_id, OVERLOADED, message);
                return Box::pin(async move {
                    if let Err(e) = ns.emit(&event, reply).await {
                        tracing::debug!("reply not sent: {e}");
                    }
                });
            };
            // Any JSON reads as a value.
            let body = body.unwrap_or_default();
            let request = ns.answering.start(&request_id);
            // Sent now, in arrival order; only the answer is awaited.
            let answer = actor.send(NamespaceRequest {
                ns: ns.clone(),
                event: name.clone(),
                body,
                cancelled: request.token.clone(),
            });
            Box::pin(async move {
                let Some(answer) = request.unless_cancelled(&name, answer).await else {
                    return;
                };
                let (event, reply) = match answer {
                    Ok(Ok(data)) => (
                        format!("{name}:result"),
                        json!({ "request_id": request_id, "data": data }),
                    ),
                    Ok(Err(NamespaceFault { type_name, message })) => {
                        error_reply(&name, request_id, type_name, message)
                    }
                    Err(_) => error_reply(
                        &name,
                        request_id,
                        "Unavailable",
                        format!("the actor answering `{name}` on {} has stopped", ns.path),
                    ),
                };
                drop(slot);
                if let Err(e) = ns.emit(&event, reply).await {
                    tracing::debug!("reply not sent: {e}");
                }
            })
        };
        self.set_handler(event.to_owned(), Arc::new(handler));
        self.requests.insert(event.to_owned());
        self
    }
}

fn reply_for(
    name: &str,
    request_id: Value,
    outcome: Result<Result<Value, NamespaceFault>, Box<dyn std::any::Any + Send>>,
) -> (String, Value) {
    match outcome {
        Ok(Ok(data)) => (
            format!("{name}:result"),
            json!({ "request_id": request_id, "data": data }),
        ),
        Ok(Err(NamespaceFault { type_name, message })) => {
            error_reply(name, request_id, type_name, message)
        }
        Err(_) => error_reply(
            name,
            request_id,
            "Panic",
            format!("the `{name}` handler panicked"),
        ),
    }
}

fn short_type_name<E>() -> String {
    let full = std::any::type_name::<E>();
    full.rsplit("::").next().unwrap_or(full).to_owned()
}

/// Replies the receive path queues for one task to send: to unknown
/// requests and to requests a full namespace turns away (a few hundred
/// bytes each). Past this many unsent, a sandbox that does not read them
/// gets none, and its own request timeout ends those requests.
const QUICK_REPLIES: usize = 4096;

/// Joins `namespace` on `client`; its handlers run as tasks, as many as
/// its budget admits.
pub(crate) async fn join(
    client: &SioClient,
    endpoint: &Endpoint,
    namespace: HostNamespace,
    traces: TraceHub,
) -> Result<HostNamespaceHandle, RemoteError> {
    let handlers = Arc::new(namespace.handlers);
    let requests = namespace.requests;
    let inline = namespace.inline;
    let handing = namespace.handing;
    let budget = namespace.budget;
    let path: Arc<str> = Arc::from(namespace.path.as_str());
    let answering = Answering::default();
    let asking = Asking::default();
    let quick = quick_replies(path.clone());
    let ordered = EventLane::new(path.clone(), crate::namespace_budget::EVENT_LANE_ITEMS);
    let on_delivery = {
        let path = path.clone();
        let answering = answering.clone();
        let asking = asking.clone();
        let traces = traces.clone();
        move |delivery: Delivery| {
            let Delivery::Event(incoming) = delivery else {
                return;
            };
            // Handlers are called, and their futures run, in the sandbox's
            // hub: the spans they make are the sandbox's. While no processor
            // anywhere could see a span, the scoping (an allocation or two
            // per event) is skipped.
            let scoped = traces.listening() || TraceHub::unscoped().listening();
            let _in_hub = scoped.then(|| traces.enter());
            let name = incoming.name().to_owned();
            if is_reply(&name) {
                answer_asked(&asking, &path, &name, incoming);
                return;
            }
            let Some(handler) = handlers.get(&name) else {
                let client = incoming.client().clone();
                let data = incoming.decode::<Value>().ok();
                if cancelled_event(&name).is_some() {
                    // Unknown ids are requests already answered.
                    if let Some(request_id) = data.as_ref().and_then(|d| d.get("request_id")) {
                        answering.cancel(request_id);
                    }
                    return;
                }
                match data.and_then(|data| request_id(&name, &data)) {
                    Some(request_id) => {
                        let (event, reply) = no_handler_reply(&path, &name, request_id);
                        if quick.try_send((client, event, reply)).is_err() {
                            tracing::debug!(path = &*path, event = name, "reply not sent: full");
                        }
                    }
                    None => tracing::debug!(
                        path = &*path,
                        event = name,
                        "no handler for this event; dropped"
                    ),
                }
                return;
            };
            if inline.contains(&name) {
                // Handed on as the handler is called; its future is done.
                let ns = HostNamespaceHandle::new(
                    incoming.client().clone(),
                    path.clone(),
                    answering.clone(),
                    asking.clone(),
                    traces.clone(),
                );
                drop(handler(ns, incoming));
                return;
            }
            let is_request = requests.contains(&name);
            let admitted = if is_request {
                budget.admit(incoming.payload_len())
            } else {
                budget.admit_event(incoming.payload_len())
            };
            let Some(admission) = admitted else {
                if !requests.contains(&name) {
                    budget.event_dropped(&path, &name);
                    return;
                }
                budget.request_overloaded(&path, &name);
                let client = incoming.client().clone();
                if let Some(request_id) = unreadable_request_id(incoming) {
                    let message = format!(
                        "{path} is handling {} requests and events already",
                        crate::namespace_budget::HANDLER_TASKS
                    );
                    let (event, reply) = error_reply(&name, request_id, OVERLOADED, message);
                    if quick.try_send((client, event, reply)).is_err() {
                        tracing::debug!(path = &*path, event = name, "reply not sent: full");
                    }
                }
                return;
            };
            let ns = HostNamespaceHandle::new(
                incoming.client().clone(),
                path.clone(),
                answering.clone(),
                asking.clone(),
                traces.clone(),
            );
            if !is_request {
                // In order, after the events before it, the handler itself
                // called in its turn too; the budget bounds the queue, so a
                // full one is a budget spent. A handler that hands the event
                // on at once runs here when nothing waits before it.
                let turn: Turn = if handing.contains(&name) && ordered.idle() {
                    match hand_on_here(|| handler(ns, incoming)) {
                        HandedOn::Done => return,
                        HandedOn::Waiting(waiting) => Box::new(move || {
                            Box::pin(async move {
                                waiting.await;
                                drop(admission);
                            })
                        }),
                        HandedOn::Panicked => {
                            tracing::error!(
                                path = &*path,
                                event = name,
                                "namespace handler panicked"
                            );
                            return;
                        }
                    }
                } else {
                    let handler = handler.clone();
                    Box::new(move || {
                        let handled = handler(ns, incoming);
                        Box::pin(async move {
                            handled.await;
                            drop(admission);
                        })
                    })
                };
                let turn = if scoped {
                    in_hub(traces.clone(), turn)
                } else {
                    turn
                };
                if let Err(name) = ordered.push(name, turn) {
                    budget.event_dropped(&path, &name);
                }
                return;
            }
            let fut = handler(ns, incoming);
            let path = path.clone();
            let task = async move {
                if AssertUnwindSafe(fut).catch_unwind().await.is_err() {
                    tracing::error!(path = &*path, event = name, "namespace handler panicked");
                }
                drop(admission);
            };
            if scoped {
                tokio::spawn(traces.scope(task));
            } else {
                tokio::spawn(task);
            }
        }
    };
    client
        .join(&path, &endpoint.auth(), Arc::new(on_delivery))
        .await
        .map_err(|e| connect_error(endpoint, &format!("cannot join {path}"), e))?;
    Ok(HostNamespaceHandle::new(
        client.clone(),
        path,
        answering,
        asking,
        traces,
    ))
}

/// `turn`, called and run with `traces` in scope.
fn in_hub(traces: TraceHub, turn: Turn) -> Turn {
    Box::new(move || {
        let _in_hub = traces.enter();
        Box::pin(traces.scope(turn()))
    })
}

/// Hands a reply to the request of this host's that waits for it; a reply
/// nobody waits for (another host's, or one that came too late) is dropped.
fn answer_asked(asking: &Asking, path: &str, name: &str, incoming: Incoming) {
    let Ok(mut data) = incoming.decode::<Value>() else {
        tracing::debug!(path, event = name, "unreadable reply; dropped");
        return;
    };
    let Some((id, outcome)) = reply_outcome(name, &mut data) else {
        tracing::debug!(path, event = name, "reply without a request id; dropped");
        return;
    };
    match asking.table().remove(&id) {
        Some(waiting) => {
            let _ = waiting.send(outcome);
        }
        None => tracing::debug!(path, event = name, "reply for no waiting request; dropped"),
    }
}

/// A reply to emit: on which connection, which event, what.
type QuickReply = (SioClient, String, Value);

/// A queue of replies that one task emits on namespace `path`, in order.
/// The task holds no connection while it waits, so it ends with the
/// namespace's receive path, which holds the queue.
fn quick_replies(path: Arc<str>) -> tokio::sync::mpsc::Sender<QuickReply> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<QuickReply>(QUICK_REPLIES);
    tokio::spawn(async move {
        while let Some((client, event, reply)) = rx.recv().await {
            if let Err(e) = client.emit(&path, &event, &reply).await {
                tracing::debug!("reply not sent: {e}");
            }
        }
    });
    tx
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_sharing_an_id_are_all_cancelled_and_leave_the_table_with_the_last() {
        let answering = Answering::default();
        let first = answering.start(&json!("r1"));
        let second = answering.start(&json!("r1"));
        let other = answering.start(&json!("r2"));
        drop(first);
        // The second is still answered under the id: a cancel reaches it.
        answering.cancel(&json!("r1"));
        assert!(second.token.is_cancelled());
        assert!(!other.token.is_cancelled());
        drop(second);
        assert!(!answering.table().contains_key("r1"));
        assert!(answering.table().contains_key("r2"));
        drop(other);
        assert!(answering.table().is_empty());
    }

    #[test]
    fn one_namespace_registered_on_two_sandboxes_has_a_budget_on_each() {
        let shared = HostNamespace::new("/p");
        let first = shared.clone().with_own_budget();
        let second = shared.clone().with_own_budget();
        let held: Vec<_> = (0..crate::namespace_budget::HANDLER_TASKS)
            .map(|_| first.budget.admit(1).unwrap())
            .collect();
        assert!(first.budget.admit(1).is_none(), "the first is full");
        assert!(second.budget.admit(1).is_some(), "the second is not");
        drop(held);
    }

    #[test]
    fn a_cancel_for_an_answered_request_is_ignored() {
        let answering = Answering::default();
        drop(answering.start(&json!(7)));
        answering.cancel(&json!(7));
        let next = answering.start(&json!(7));
        assert!(!next.token.is_cancelled());
    }
}
