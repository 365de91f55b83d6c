//! Plugin namespaces, sandbox half: [`SandboxNamespace`], [`register_namespace`],
//! and the [`SandboxNamespaceHandle`] that emits and makes round-trip requests.
//!
//! ```ignore
//! let ns = agentix::SandboxNamespace::new("/my-plugin")
//!     .on("configure", |ns, data| async move { ns.emit("configured", data); });
//! let ns = agentix::register_namespace(ns)?;
//! let answer = ns.request("fetch", json!({"url": ".."})).await?;
//! ```
//!
//! Events can go to an actix actor instead of a closure: [`SandboxNamespace::on_actor`]
//! hands them to a `Handler<NamespaceEvent<SandboxNamespaceHandle>>` in the order
//! they arrived (see [`crate::event_route`]); start the actor with
//! [`crate::actor_home::start_actor`], which works in a worker.
//!
//! The worker's frame loop dispatches the hosts' events as it reads them,
//! in their order: a reply goes straight to its waiting request (from the
//! namespace's table, which a request enters without waking anyone), an
//! event for an actor straight into the actor's route, and an event for a
//! closure to a task of its own (a panic in one is logged and nothing else
//! stops). Namespaces had a task of their own that did this from a mailbox;
//! on a multi-threaded runtime each hop through it woke a second thread, a
//! large share of a request's time where waking a thread is slow.
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
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures_util::FutureExt;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use actix::Recipient;

use crate::json_text::JsonText;
use crate::namespace_messages::{actor_event_handlers, NamespaceEvent};
use crate::outbox::Outbox;
use crate::request_envelope::{cancel_event, no_handler_reply, request_id};

use crate::wire::{check_plugin_path, Frame};

/// How long [`SandboxNamespaceHandle::request`] waits for a reply by default.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// What runs for an event.
#[derive(Clone)]
enum Handler {
    /// A closure whose future runs as a task of its own.
    Task(Arc<dyn Fn(SandboxNamespaceHandle, Value) -> BoxFuture + Send + Sync>),
    /// Hands the event to an actor's route, at once and in order.
    Actor(Arc<dyn Fn(SandboxNamespaceHandle, Value) + Send + Sync>),
}
type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

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
            Handler::Task(Arc::new(move |ns, data| Box::pin(handler(ns, data)))),
        );
        self
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

/// A request's reply: the value, or the host's error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RemoteSioError {
    /// The host's handler failed: its error type and message.
    #[error("{type_name}: {message}")]
    Raised {
        /// The error's type, as the host named it.
        type_name: String,
        /// Its message.
        message: String,
    },
    /// No reply came within the timeout.
    #[error("no reply to `{event}` on {path} within {timeout:?}")]
    Timeout {
        /// The namespace.
        path: String,
        /// The request's event.
        event: String,
        /// How long it waited.
        timeout: Duration,
    },
    /// The worker is shutting down or the namespace is gone.
    #[error("the namespace {0} is closed")]
    Closed(String),
    /// The reply was not an envelope the protocol allows.
    #[error("malformed reply: {0}")]
    Malformed(String),
}

/// Why a namespace could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// The path is reserved or not a path.
    #[error("{0}")]
    BadPath(String),
    /// Another namespace already has the path.
    #[error("`{0}` is already registered in this worker; a path belongs to one plugin")]
    Duplicate(String),
    /// Not inside a worker started by an Agentix server.
    #[error("namespaces can only be registered inside an Agentix worker")]
    NoWorker,
    /// The host connected already: its set of namespaces is fixed.
    #[error(
        "register host namespaces before the first remote call: the sandbox's \
         connections are planned when it first connects"
    )]
    AfterConnect,
}

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
    /// Frames for the server, in order (see [`crate::outbox`]).
    out: Outbox,
}

struct Registry {
    out: Option<mpsc::Sender<Frame>>,
    namespaces: HashMap<String, Registered>,
}

/// A registered namespace as the frame loop sees it.
struct Registered {
    handle: SandboxNamespaceHandle,
    handlers: HashMap<String, Handler>,
}

fn registry() -> &'static Mutex<Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        Mutex::new(Registry {
            out: None,
            namespaces: HashMap::new(),
        })
    })
}

fn lock() -> std::sync::MutexGuard<'static, Registry> {
    registry().lock().unwrap_or_else(|p| p.into_inner())
}

/// Registers `namespace` in this worker and tells the server to forward it.
pub fn register_namespace(
    namespace: SandboxNamespace,
) -> Result<SandboxNamespaceHandle, RegisterError> {
    check_plugin_path(&namespace.path).map_err(RegisterError::BadPath)?;
    let mut reg = lock();
    let Some(out) = reg.out.clone() else {
        return Err(RegisterError::NoWorker);
    };
    if reg.namespaces.contains_key(&namespace.path) {
        return Err(RegisterError::Duplicate(namespace.path));
    }
    let handle = SandboxNamespaceHandle {
        path: Arc::from(namespace.path.as_str()),
        waiting: Waiting::default(),
        out: Outbox::new(out),
    };
    let registered = Registered {
        handle: handle.clone(),
        handlers: namespace.handlers,
    };
    reg.namespaces.insert(namespace.path.clone(), registered);
    drop(reg);
    handle.out.push(Frame::SioOpen {
        path: namespace.path,
    });
    Ok(handle)
}

/// Called by the worker runtime: where frames for the server go.
pub(crate) fn attach_worker(out: mpsc::Sender<Frame>) {
    lock().out = Some(out);
}

/// Called by the worker's frame loop: a host emitted `event` on `path`.
pub(crate) fn deliver(path: &str, event: String, mut data: Value) {
    let found = lock()
        .namespaces
        .get(path)
        .map(|r| (r.handle.clone(), r.handlers.get(&event).cloned()));
    let Some((ns, handler)) = found else {
        tracing::debug!(path, event, "event for an unregistered namespace; dropped");
        return;
    };
    if let Some(outcome) = reply_outcome(&event, &mut data) {
        let id = data.get("request_id").and_then(Value::as_str).unwrap_or("");
        let reply = ns.waiting_table().remove(id);
        match reply {
            Some(reply) => {
                let _ = reply.send(outcome);
            }
            None => tracing::debug!(path, event, "reply for an unknown request id; dropped"),
        }
        return;
    }
    match handler {
        Some(Handler::Actor(hand_over)) => hand_over(ns, data),
        Some(Handler::Task(handler)) => {
            // The closure itself runs here: a panic in it must not end the
            // frame loop.
            let made = std::panic::catch_unwind(AssertUnwindSafe(|| handler(ns.clone(), data)));
            let Ok(fut) = made else {
                tracing::error!(path, event, "namespace handler panicked");
                return;
            };
            tokio::spawn(async move {
                if AssertUnwindSafe(fut).catch_unwind().await.is_err() {
                    tracing::error!(path = ns.path(), event, "namespace handler panicked");
                }
            });
        }
        None => match request_id(&event, &data) {
            Some(request_id) => {
                let (event, reply) = no_handler_reply(&ns.path, &event, request_id);
                ns.emit(event, reply);
            }
            None => tracing::debug!(path, event, "no handler for this event; dropped"),
        },
    }
}

impl SandboxNamespaceHandle {
    /// The namespace path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Emits `event` with `data` to every host on this namespace, without
    /// waiting: events reach hosts in the order they were emitted (see
    /// [`crate::outbox`] for what a burst past the pipe's room costs).
    pub fn emit(&self, event: impl Into<String>, data: Value) {
        self.out.push(self.event_frame(event.into(), data));
    }

    /// Like [`SandboxNamespaceHandle::emit`], but waits while the pipe to the
    /// server is full: for producers that would otherwise outrun it.
    pub async fn emit_paced(&self, event: impl Into<String>, data: Value) {
        self.out.send(self.event_frame(event.into(), data)).await;
    }

    fn event_frame(&self, event: String, data: Value) -> Frame {
        self.text_frame(event, JsonText::from_value(&data))
    }

    fn text_frame(&self, event: String, data: JsonText) -> Frame {
        Frame::SioEvent {
            path: self.path.to_string(),
            event,
            data,
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

    async fn ask<T: serde::Serialize + ?Sized>(
        &self,
        event: &str,
        body: &T,
        timeout: Duration,
    ) -> Result<Value, RemoteSioError> {
        let request_id = crate::trace::random_id(16);
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

/// For `x:result` / `x:error` events carrying a request id: the outcome.
/// A result's data is taken out of `data`, not copied: it may be large.
fn reply_outcome(event: &str, data: &mut Value) -> Option<Result<Value, RemoteSioError>> {
    data.get("request_id")?;
    if event.ends_with(":result") {
        return Some(Ok(data
            .get_mut("data")
            .map(Value::take)
            .unwrap_or_default()));
    }
    if event.ends_with(":error") {
        let error = data.get("error");
        let text = |key: &str| {
            error
                .and_then(|e| e.get(key))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        return Some(match (text("type"), text("message")) {
            (Some(type_name), Some(message)) => Err(RemoteSioError::Raised { type_name, message }),
            _ => Err(RemoteSioError::Malformed(format!(
                "`{event}` needs error: {{type, message}}, got {data}"
            ))),
        });
    }
    None
}
