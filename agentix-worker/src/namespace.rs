//! Plugin namespaces, sandbox half: [`SandboxNamespace`], registered in its
//! worker (`crate::worker_context::register_namespace`), and the
//! [`SandboxNamespaceHandle`] that emits and makes round-trip requests.
//!
//! ```no_run
//! # use agentix_worker::namespace::SandboxNamespace;
//! # use agentix_worker::worker_context::register_namespace;
//! # use serde_json::json;
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let ns = SandboxNamespace::new("/my-plugin")
//!     .on("configure", |ns, data| async move { ns.emit("configured", data); });
//! let ns = register_namespace(ns)?;
//! let answer = ns.request("fetch", json!({"url": ".."})).await?;
//! # Ok(()) }
//! ```
//!
//! Events can go to an actix actor instead of a closure: [`SandboxNamespace::on_actor`]
//! hands them to a `Handler<NamespaceEvent<SandboxNamespaceHandle>>` in the order
//! they arrived (see [`agentix_actors::event_route`]); start the actor with
//! [`agentix_actors::actor_home::start_actor`], which works in a worker.
//!
//! The worker's frame loop dispatches the hosts' messages as it reads them,
//! in their order, never waiting: a reply goes straight to its waiting
//! request (from the namespace's table, which a request enters without
//! waking anyone); an event for an actor straight into the actor's route;
//! an event for a closure onto the namespace's ordered lane, where one task
//! runs the handlers one at a time in arrival order (progress and deltas
//! count on it; [`EVENT_LANE_ITEMS`] wait at most, past which an event is
//! dropped, counted and logged); a request to a task of its own, at most
//! [`REQUESTS_IN_FLIGHT`] at once (past that it is answered `Overloaded`),
//! and a `<event>:cancel` stops its request's handler at once. A panic in a
//! handler is logged (a request's is answered `Panic`) and nothing else
//! stops.
//!
//! The envelope of a request is `{request_id, data}` on the event; the reply
//! is `<event>:result {request_id, data}` or `<event>:error {request_id,
//! error: {type, message}}`. A request its caller stops waiting for (the
//! future dropped, or its timeout passed) is followed by `<event>:cancel
//! {request_id}`, on which the host stops its handler.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use actix::Recipient;

use agentix_actors::event_lane::{hand_on_here, EventLane, HandedOn, Turn};
use agentix_actors::namespace_messages::{actor_event_handlers, NamespaceEvent, NamespaceFault};
use agentix_wire::json_text::JsonText;
use agentix_wire::outbox::Outbox;
pub use agentix_wire::request_envelope::RemoteSioError;
use agentix_wire::request_envelope::{
    cancel_event, cancelled_event, error_reply, no_handler_reply, reply_outcome, request_id,
    request_key, OVERLOADED,
};
use tokio_util::sync::CancellationToken;

use agentix_wire::attachment::{resolving, to_raw_value_collecting};
use agentix_wire::frame_bytes::FrameBytes;
use agentix_wire::wire::{check_plugin_path, Frame};
use bytes::Bytes;

pub use agentix_actors::event_lane::EVENT_LANE_ITEMS;
pub use agentix_wire::request_envelope::DEFAULT_REQUEST_TIMEOUT;
/// Requests one namespace answers at once.
pub const REQUESTS_IN_FLIGHT: usize = 256;

/// What runs for an event.
#[derive(Clone)]
enum Handler {
    /// A closure called, and its future run, on the namespace's ordered lane.
    Event(EventHandler),
    /// A closure that hands the event on at once (into an actor's
    /// mailbox): called on the receive path when nothing waits on the
    /// lane (no task hop), in its turn on the lane otherwise; a future it
    /// returns unfinished (the mailbox is full) waits on the lane.
    Handing(EventHandler),
    /// Hands the event to an actor's route, at once and in order.
    Actor(Arc<dyn Fn(SandboxNamespaceHandle, Value) + Send + Sync>),
    /// Answers a request: gets its body and a token the asker's cancel
    /// fires; the future's output is the reply.
    Request(
        Arc<dyn Fn(SandboxNamespaceHandle, Value, CancellationToken) -> ReplyFuture + Send + Sync>,
    ),
}
pub(crate) type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;
/// A request handler's answer, on its way.
pub(crate) type ReplyFuture = Pin<Box<dyn Future<Output = Result<Value, NamespaceFault>> + Send>>;

/// A sandbox-side plugin namespace: a path and handlers by event name.
pub struct SandboxNamespace {
    path: String,
    handlers: HashMap<String, Handler>,
}

impl SandboxNamespace {
    /// A namespace at `path` (like `/my-plugin`) with no handlers yet.
    pub fn new(path: impl Into<String>) -> Self {
        SandboxNamespace {
            path: path.into(),
            handlers: HashMap::new(),
        }
    }

    /// Runs `handler` for every `event` a host emits (names may contain `:`).
    pub fn on<F, Fut>(mut self, event: impl Into<String>, handler: F) -> Self
    where
        F: Fn(SandboxNamespaceHandle, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.handlers.insert(
            event.into(),
            Handler::Event(Arc::new(move |ns, data| Box::pin(handler(ns, data)))),
        );
        self
    }

    /// Answers the hosts' requests named `event` with `handler`: its `Ok`
    /// is sent back as `<event>:result`, its `Err` as `<event>:error`; the
    /// token fires when the asker cancels, and the future is dropped then.
    pub(crate) fn answer<F>(mut self, event: impl Into<String>, handler: F) -> Self
    where
        F: Fn(SandboxNamespaceHandle, Value, CancellationToken) -> ReplyFuture
            + Send
            + Sync
            + 'static,
    {
        self.handlers
            .insert(event.into(), Handler::Request(Arc::new(handler)));
        self
    }

    /// Runs `handler` for every `event`, which it hands on at once (see
    /// `Handler::Handing`): the typed halves' actors.
    pub(crate) fn on_handing<F>(mut self, event: impl Into<String>, handler: F) -> Self
    where
        F: Fn(SandboxNamespaceHandle, Value) -> BoxFuture + Send + Sync + 'static,
    {
        self.handlers
            .insert(event.into(), Handler::Handing(Arc::new(handler)));
        self
    }

    /// The namespace's path.
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl SandboxNamespace {
    /// Hands `events` to the actor behind `actor`, in the order they
    /// arrive, as [`NamespaceEvent`]s (one queue for all of them).
    pub fn on_actor<E: Into<String>>(
        mut self,
        events: impl IntoIterator<Item = E>,
        actor: Recipient<NamespaceEvent<SandboxNamespaceHandle>>,
    ) -> Self {
        for (event, handler) in actor_event_handlers(events, actor, SandboxNamespaceHandle::path) {
            self.handlers
                .insert(event, Handler::Actor(Arc::new(handler)));
        }
        self
    }
}

pub use agentix_wire::register_error::RegisterError;

/// Where each waiting request's reply goes, by request id.
type WaitingTable = HashMap<String, oneshot::Sender<Result<Value, RemoteSioError>>>;
/// A namespace's waiting requests, shared by its handles and the frame loop.
type Waiting = Arc<Mutex<WaitingTable>>;

/// A registered namespace: emit to its hosts, make requests.
#[derive(Clone)]
pub struct SandboxNamespaceHandle {
    path: Arc<str>,
    /// Requests sent and not yet answered or forgotten.
    waiting: Waiting,
    /// Frames for the server, in order (see [`agentix_wire::outbox`]).
    out: Outbox,
    /// The hosts' requests being answered, and the closures' events.
    inbound: Arc<Inbound>,
}

/// A closure handling events.
type EventHandler = Arc<dyn Fn(SandboxNamespaceHandle, Value) -> BoxFuture + Send + Sync>;

/// What a namespace is doing for its hosts: the requests it answers, by
/// request id, each with the token a cancel fires; room for more; and the
/// ordered lane its closures' events wait on.
struct Inbound {
    answering: Mutex<HashMap<String, CancellationToken>>,
    room: Arc<tokio::sync::Semaphore>,
    lane: EventLane,
    dropped_events: std::sync::atomic::AtomicU64,
}

impl Inbound {
    fn new(path: Arc<str>) -> Self {
        Inbound {
            answering: Mutex::default(),
            room: Arc::new(tokio::sync::Semaphore::new(REQUESTS_IN_FLIGHT)),
            lane: EventLane::new(path, EVENT_LANE_ITEMS),
            dropped_events: Default::default(),
        }
    }
}

impl Inbound {
    fn answering(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.answering.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `turn` for `event` on the lane; a full lane drops it, counted.
    fn queue(&self, path: &str, event: String, turn: Turn) {
        if let Err(event) = self.lane.push(event, turn) {
            self.event_dropped(path, &event);
        }
    }

    fn event_dropped(&self, path: &str, event: &str) {
        let n = self
            .dropped_events
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        if n.is_power_of_two() {
            tracing::error!(
                path,
                event,
                dropped = n,
                "event dropped: {EVENT_LANE_ITEMS} events wait for this namespace's handlers"
            );
        }
    }
}

/// The namespaces one worker registered, by path, and where their frames
/// go: what the worker's frame loop delivers the hosts' messages through.
/// Owned by the worker's [`crate::worker_context::WorkerContext`].
pub(crate) struct NamespaceTable {
    out: mpsc::Sender<Frame>,
    namespaces: Mutex<HashMap<String, Registered>>,
}

/// A registered namespace as the frame loop sees it.
struct Registered {
    handle: SandboxNamespaceHandle,
    handlers: HashMap<String, Handler>,
}

impl NamespaceTable {
    /// A table whose namespaces send their frames to `out`.
    pub(crate) fn new(out: mpsc::Sender<Frame>) -> Self {
        NamespaceTable {
            out,
            namespaces: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Registered>> {
        self.namespaces.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers `namespace` and tells the server to forward it.
    pub(crate) fn register(
        &self,
        namespace: SandboxNamespace,
    ) -> Result<SandboxNamespaceHandle, RegisterError> {
        check_plugin_path(&namespace.path).map_err(RegisterError::BadPath)?;
        let mut namespaces = self.lock();
        if namespaces.contains_key(&namespace.path) {
            return Err(RegisterError::Duplicate(namespace.path));
        }
        let handle = SandboxNamespaceHandle {
            path: Arc::from(namespace.path.as_str()),
            waiting: Waiting::default(),
            out: Outbox::new(self.out.clone()),
            inbound: Arc::new(Inbound::new(Arc::from(namespace.path.as_str()))),
        };
        let registered = Registered {
            handle: handle.clone(),
            handlers: namespace.handlers,
        };
        namespaces.insert(namespace.path.clone(), registered);
        drop(namespaces);
        handle.out.push(Frame::SioOpen {
            path: namespace.path,
        });
        Ok(handle)
    }

    /// Called by the worker's frame loop: a host emitted `event` on `path`.
    pub(crate) fn deliver(&self, path: &str, event: String, data: Value, frames: Vec<Bytes>) {
        let found = self
            .lock()
            .get(path)
            .map(|r| (r.handle.clone(), r.handlers.get(&event).cloned()));
        match found {
            Some((ns, handler)) => deliver(ns, handler, path, event, data, frames),
            None => unregistered(&self.out, path, &event, &data),
        }
    }
}

/// A host emitted `event` on `path`, which `ns` registered with `handler`
/// for it (if any); a typed handler reads the payload's attachments from
/// `frames` when it is called.
fn deliver(
    ns: SandboxNamespaceHandle,
    handler: Option<Handler>,
    path: &str,
    event: String,
    mut data: Value,
    frames: Vec<Bytes>,
) {
    if let Some((id, outcome)) = reply_outcome(&event, &mut data) {
        let reply = ns.waiting_table().remove(&id);
        match reply {
            Some(reply) => {
                let _ = reply.send(outcome);
            }
            None => tracing::debug!(path, event, "reply for an unknown request id; dropped"),
        }
        return;
    }
    if cancelled_event(&event).is_some() {
        // Unknown ids are requests already answered.
        if let Some(id) = data.get("request_id") {
            if let Some(token) = ns.inbound.answering().get(&request_key(id)) {
                token.cancel();
            }
        }
        return;
    }
    match handler {
        Some(Handler::Actor(hand_over)) => resolving(&frames, || hand_over(ns, data)),
        Some(Handler::Handing(handler)) if ns.inbound.lane.idle() => {
            // Nothing before it waits: handed on here, without a task hop.
            let inbound = ns.inbound.clone();
            match hand_on_here(|| resolving(&frames, || handler(ns, data))) {
                HandedOn::Done => {}
                HandedOn::Waiting(waiting) => inbound.queue(path, event, Box::new(move || waiting)),
                HandedOn::Panicked => tracing::error!(path, event, "namespace handler panicked"),
            }
        }
        Some(Handler::Event(handler) | Handler::Handing(handler)) => {
            // The closure itself is called in the event's turn too, on the
            // lane: a panic in it must not end the frame loop.
            let inbound = ns.inbound.clone();
            let turn = move || resolving(&frames, || handler(ns, data));
            inbound.queue(path, event, Box::new(turn));
        }
        Some(Handler::Request(handler)) => answer(ns, event, data, frames, handler),
        None => match request_id(&event, &data) {
            Some(request_id) => {
                let (event, reply) = no_handler_reply(&ns.path, &event, request_id);
                ns.emit(event, reply);
            }
            None => tracing::debug!(path, event, "no handler for this event; dropped"),
        },
    }
}

/// A message for a namespace this worker has not registered: a request is
/// answered `NoHandler` at once (its asker need not wait out its timeout),
/// anything else dropped.
fn unregistered(out: &mpsc::Sender<Frame>, path: &str, event: &str, data: &Value) {
    match request_id(event, data) {
        Some(request_id) => {
            let (event, reply) = no_handler_reply(path, event, request_id);
            Outbox::new(out.clone()).push(Frame::SioEvent {
                path: path.to_owned(),
                event,
                data: JsonText::from_value(&reply),
                attachments: Vec::new(),
            });
        }
        None => tracing::debug!(path, event, "event for an unregistered namespace; dropped"),
    }
}

/// Answers a host's request `event` with `handler`, as a task of its own;
/// a full namespace answers `Overloaded` at once.
fn answer(
    ns: SandboxNamespaceHandle,
    event: String,
    mut data: Value,
    frames: Vec<Bytes>,
    handler: Arc<
        dyn Fn(SandboxNamespaceHandle, Value, CancellationToken) -> ReplyFuture + Send + Sync,
    >,
) {
    let Some(request_id) = request_id(&event, &data).filter(|id| !id.is_null()) else {
        tracing::debug!(
            path = ns.path(),
            event,
            "request without a request_id; dropped"
        );
        return;
    };
    let Ok(room) = ns.inbound.room.clone().try_acquire_owned() else {
        let message = format!(
            "{} is answering {REQUESTS_IN_FLIGHT} requests already",
            ns.path
        );
        let (event, reply) = error_reply(&event, request_id, OVERLOADED, message);
        ns.emit(event, reply);
        return;
    };
    let body = data.get_mut("data").map(Value::take).unwrap_or_default();
    let key = request_key(&request_id);
    let token = CancellationToken::new();
    // Entered before the next message is read, so a cancel right behind
    // the request finds it.
    ns.inbound.answering().insert(key.clone(), token.clone());
    let made = std::panic::catch_unwind(AssertUnwindSafe(|| {
        resolving(&frames, || handler(ns.clone(), body, token.clone()))
    }));
    tokio::spawn(async move {
        let outcome = match made {
            Ok(work) => {
                token
                    .run_until_cancelled(AssertUnwindSafe(work).catch_unwind())
                    .await
            }
            Err(panic) => Some(Err(panic)),
        };
        ns.inbound.answering().remove(&key);
        drop(room);
        let (event, reply) = match outcome {
            None => {
                tracing::debug!(path = ns.path(), event, "request cancelled by the host");
                return;
            }
            Some(Ok(Ok(data))) => (
                format!("{event}:result"),
                json!({ "request_id": request_id, "data": data }),
            ),
            Some(Ok(Err(NamespaceFault { type_name, message }))) => {
                error_reply(&event, request_id, type_name, message)
            }
            Some(Err(_)) => {
                let message = format!("the `{event}` handler panicked");
                error_reply(&event, request_id, "Panic", message)
            }
        };
        ns.emit(event, reply);
    });
}

impl SandboxNamespaceHandle {
    /// The namespace path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Emits `event` with `data` to every host on this namespace, without
    /// waiting: events reach hosts in the order they were emitted (see
    /// [`agentix_wire::outbox`] for what a burst past the pipe's room costs).
    pub fn emit(&self, event: impl Into<String>, data: Value) {
        self.out.push(self.event_frame(event.into(), data));
    }

    /// Like [`SandboxNamespaceHandle::emit`], but waits while the pipe to the
    /// server is full: for producers that would otherwise outrun it.
    pub async fn emit_paced(&self, event: impl Into<String>, data: Value) {
        self.out.send(self.event_frame(event.into(), data)).await;
    }

    /// Emits `event` with `data` written straight to JSON (no value built).
    /// A payload JSON cannot hold (a map with keys that are not strings) is
    /// not sent; an error line says why.
    pub(crate) fn emit_json<T: serde::Serialize + ?Sized>(&self, event: &str, data: &T) {
        if let Some(frame) = self.json_frame(event, data) {
            self.out.push(frame);
        }
    }

    /// [`Self::emit_json`], waiting while the pipe to the server is full.
    pub(crate) async fn emit_json_paced<T: serde::Serialize + ?Sized>(
        &self,
        event: &str,
        data: &T,
    ) {
        if let Some(frame) = self.json_frame(event, data) {
            self.out.send(frame).await;
        }
    }

    fn json_frame<T: serde::Serialize + ?Sized>(&self, event: &str, data: &T) -> Option<Frame> {
        match to_raw_value_collecting(data) {
            Ok((raw, frames)) => Some(Frame::SioEvent {
                path: self.path.to_string(),
                event: event.to_owned(),
                data: JsonText::from_raw(raw),
                attachments: frames.into_iter().map(FrameBytes).collect(),
            }),
            Err(e) => {
                tracing::error!(path = self.path(), event, "event not sent: not JSON: {e}");
                None
            }
        }
    }

    fn event_frame(&self, event: String, data: Value) -> Frame {
        self.text_frame(event, JsonText::from_value(&data))
    }

    fn text_frame(&self, event: String, data: JsonText) -> Frame {
        Frame::SioEvent {
            path: self.path.to_string(),
            event,
            data,
            attachments: Vec::new(),
        }
    }

    /// Sends `event {request_id, data: body}` to the host and waits for
    /// `event:result` or `event:error`, at most [`DEFAULT_REQUEST_TIMEOUT`].
    pub async fn request(&self, event: &str, body: Value) -> Result<Value, RemoteSioError> {
        self.request_with_timeout(event, body, DEFAULT_REQUEST_TIMEOUT)
            .await
    }

    /// How many of this namespace's requests wait for a reply now.
    pub async fn waiting_requests(&self) -> usize {
        self.waiting_table().len()
    }

    fn waiting_table(&self) -> std::sync::MutexGuard<'_, WaitingTable> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends `event` with `body` as a request and waits up to `timeout` for
    /// the host's reply (see [`SandboxNamespaceHandle::request`]).
    pub async fn request_with_timeout(
        &self,
        event: &str,
        body: Value,
        timeout: Duration,
    ) -> Result<Value, RemoteSioError> {
        self.ask(event, &body, timeout).await
    }

    /// [`SandboxNamespaceHandle::request_with_timeout`] for a body that is
    /// already JSON text: it goes out as it is, never built into a value
    /// (an agent's request of megabytes, say).
    pub async fn request_text_with_timeout(
        &self,
        event: &str,
        body: &JsonText,
        timeout: Duration,
    ) -> Result<Value, RemoteSioError> {
        self.ask(event, body.raw(), timeout).await
    }

    pub(crate) async fn ask<T: serde::Serialize + ?Sized>(
        &self,
        event: &str,
        body: &T,
        timeout: Duration,
    ) -> Result<Value, RemoteSioError> {
        let request_id = agentix_trace::random_id(16);
        let (tx, rx) = oneshot::channel();
        let closed = || RemoteSioError::Closed(self.path.to_string());
        self.waiting_table().insert(request_id.clone(), tx);
        // Dropped before its reply or its timeout, the request is
        // forgotten too, not left waiting for ever, and the host is told
        // to stop answering it.
        let mut forget = ForgetOnDrop {
            ns: self,
            event,
            request_id: Some(request_id.clone()),
        };
        let envelope = JsonText::to_json(&RequestEnvelope {
            request_id: &request_id,
            data: body,
        });
        self.out.push(self.text_frame(event.to_owned(), envelope));
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(reply)) => {
                forget.request_id = None;
                reply
            }
            Ok(Err(_)) => Err(closed()),
            Err(_) => {
                drop(forget);
                Err(RemoteSioError::Timeout {
                    path: self.path.to_string(),
                    event: event.to_owned(),
                    timeout,
                })
            }
        }
    }
}

/// A request as it goes out: `{request_id, data}`.
#[derive(serde::Serialize)]
struct RequestEnvelope<'a, T: ?Sized> {
    request_id: &'a str,
    data: &'a T,
}

/// For a request whose caller stopped waiting (dropped or timed out):
/// forgets it here and emits `<event>:cancel {request_id}`, so the host
/// stops working on an answer nobody reads.
struct ForgetOnDrop<'a> {
    ns: &'a SandboxNamespaceHandle,
    event: &'a str,
    request_id: Option<String>,
}

impl Drop for ForgetOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(request_id) = self.request_id.take() {
            self.ns.waiting_table().remove(&request_id);
            self.ns.emit(
                cancel_event(self.event),
                json!({ "request_id": request_id }),
            );
        }
    }
}
