//! The `/rpc` Socket.IO connection to one sandbox server, and its calls.
//!
//! Calls are text events (`call`, `cancel` out; `call:result`, `call:error`
//! in) with our own call ids, because the client's binary events and acks are
//! unreliable (see the README). Pending calls live in a concurrent map keyed
//! by call id: the client's receive loop completes them, callers wait on a
//! oneshot (or, for a streaming call, read a channel of events whose length
//! the stream window bounds). A call whose future or stream is dropped sends
//! `cancel`. When the connection or the server dies, every pending call ends
//! at once with that error.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentix_actors::errors::{ErrorKind, RemoteError};
use agentix_actors::wire::{
    AckEvent, CancelEvent, EndEvent, ErrorEvent, ItemsEvent, ResultEvent, Window, EVENT_ACK,
    EVENT_CALL, EVENT_CANCEL, EVENT_END, EVENT_ERROR, EVENT_HEARTBEAT, EVENT_ITEMS, EVENT_RESULT,
    RPC_NAMESPACE,
};
use base64::Engine;
use dashmap::DashMap;
use futures_util::FutureExt;
use rust_socketio::asynchronous::{Client, ClientBuilder};
use rust_socketio::{Payload, TransportType};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

type Outcome = Result<Vec<u8>, RemoteError>;
type Pending = DashMap<u64, Waiter>;

/// What a streaming call receives, in order; `End` or `Error` comes last.
#[derive(Debug)]
pub(crate) enum StreamEvent {
    /// Base64 of a CBOR array of CBOR-encoded items; decoded by the reader,
    /// not in the client's receive loop.
    Items(String),
    /// The stream ended after its last item.
    End,
    /// The stream ended with this error.
    Error(RemoteError),
}

/// Who waits for a call's events.
enum Waiter {
    Unary(oneshot::Sender<Outcome>),
    Stream(mpsc::UnboundedSender<StreamEvent>),
}

impl Waiter {
    fn fail(self, error: RemoteError) {
        match self {
            Waiter::Unary(tx) => {
                let _ = tx.send(Err(error));
            }
            Waiter::Stream(tx) => {
                let _ = tx.send(StreamEvent::Error(error));
            }
        }
    }
}

/// Where a sandbox server listens and the token it wants.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `host:port` of the server.
    pub addr: String,
    /// The sandbox token.
    pub token: String,
}

/// How a connection behaves: limits and liveness checks.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionSettings {
    /// How long opening `/rpc` may take.
    pub connect_timeout: Duration,
    /// Largest call payload, in bytes of CBOR.
    pub max_message_bytes: usize,
    /// How often a heartbeat goes to the server.
    pub heartbeat_interval: Duration,
    /// Silence after which the connection counts as lost.
    pub heartbeat_timeout: Duration,
}

/// A live `/rpc` connection.
pub struct RpcConnection {
    client: Client,
    pending: Arc<Pending>,
    next_id: AtomicU64,
    lost: Arc<Mutex<Option<RemoteError>>>,
    alive: Arc<AtomicBool>,
    max_message_bytes: usize,
    /// When the connection opened; heartbeat times count from here.
    opened: Instant,
    /// Milliseconds after `opened` of the last heartbeat echo.
    last_heard_ms: Arc<AtomicU64>,
}

impl RpcConnection {
    /// Connects to `endpoint` and waits until `/rpc` is open.
    pub async fn connect(
        endpoint: &Endpoint,
        settings: ConnectionSettings,
    ) -> Result<Arc<Self>, RemoteError> {
        let timeout = settings.connect_timeout;
        let opened = Instant::now();
        let last_heard_ms = Arc::new(AtomicU64::new(0));
        let pending: Arc<Pending> = Arc::new(DashMap::new());
        let alive = Arc::new(AtomicBool::new(true));
        let lost = Arc::new(Mutex::new(None));
        let (open_tx, open_rx) = oneshot::channel::<Result<(), String>>();
        let open_tx = Arc::new(Mutex::new(Some(open_tx)));

        let on_result = {
            let pending = pending.clone();
            move |payload: Payload, _: Client| {
                if let Some(ev) = first::<ResultEvent>(payload) {
                    let outcome = B64.decode(ev.value.as_bytes()).map_err(|e| {
                        RemoteError::new(ErrorKind::Protocol, format!("result is not base64: {e}"))
                    });
                    complete(&pending, ev.id, outcome);
                }
                async {}.boxed()
            }
        };
        let on_error = {
            let pending = pending.clone();
            move |payload: Payload, _: Client| {
                if let Some(ev) = first::<ErrorEvent>(payload) {
                    complete(&pending, ev.id, Err(ev.error));
                }
                async {}.boxed()
            }
        };
        let on_items = {
            let pending = pending.clone();
            move |payload: Payload, _: Client| {
                if let Some(ev) = first::<ItemsEvent>(payload) {
                    // Decide under the map's read lock, complete after it:
                    // removing while holding it would deadlock.
                    let unary = match pending.get(&ev.id) {
                        Some(waiter) => match &*waiter {
                            Waiter::Stream(tx) => {
                                let _ = tx.send(StreamEvent::Items(ev.items));
                                false
                            }
                            Waiter::Unary(_) => true,
                        },
                        None => {
                            tracing::debug!(id = ev.id, "items for a stream nobody reads");
                            false
                        }
                    };
                    if unary {
                        let err = RemoteError::new(
                            ErrorKind::Protocol,
                            "the server sent stream items for a unary call",
                        );
                        complete(&pending, ev.id, Err(err));
                    }
                }
                async {}.boxed()
            }
        };
        let on_end = {
            let pending = pending.clone();
            move |payload: Payload, _: Client| {
                if let Some(ev) = first::<EndEvent>(payload) {
                    match pending.remove(&ev.id) {
                        Some((_, Waiter::Stream(tx))) => {
                            let _ = tx.send(StreamEvent::End);
                        }
                        Some((_, unary)) => unary.fail(RemoteError::new(
                            ErrorKind::Protocol,
                            "the server ended a unary call as a stream",
                        )),
                        None => {}
                    }
                }
                async {}.boxed()
            }
        };
        let on_heartbeat = {
            let last_heard_ms = last_heard_ms.clone();
            move |_: Payload, _: Client| {
                last_heard_ms.store(opened.elapsed().as_millis() as u64, Ordering::Release);
                async {}.boxed()
            }
        };
        let on_open = {
            let open_tx = open_tx.clone();
            move |_: Payload, _: Client| {
                if let Some(tx) = open_tx.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    let _ = tx.send(Ok(()));
                }
                async {}.boxed()
            }
        };
        let on_client_error = {
            let open_tx = open_tx.clone();
            let (pending, alive, lost) = (pending.clone(), alive.clone(), lost.clone());
            move |payload: Payload, _: Client| {
                let text = payload_text(&payload);
                match open_tx.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    Some(tx) => {
                        let _ = tx.send(Err(text));
                    }
                    // The client reports a dead transport here and then stops
                    // reading without closing: nothing more will arrive.
                    None if is_transport_failure(&text) => {
                        let err = RemoteError::new(
                            ErrorKind::ConnectionLost,
                            format!("the connection to the server failed: {text}"),
                        );
                        fail_all(&pending, &alive, &lost, err);
                    }
                    None => tracing::debug!("rpc connection error: {text}"),
                }
                async {}.boxed()
            }
        };
        let on_close = {
            let (pending, alive, lost) = (pending.clone(), alive.clone(), lost.clone());
            move |_: Payload, _: Client| {
                let err = RemoteError::new(
                    ErrorKind::ConnectionLost,
                    "the server closed the connection",
                );
                fail_all(&pending, &alive, &lost, err);
                async {}.boxed()
            }
        };

        let url = format!("http://{}/", endpoint.addr);
        let client = ClientBuilder::new(url.clone())
            .namespace(RPC_NAMESPACE)
            .auth(json!({ "token": endpoint.token }))
            .transport_type(TransportType::Websocket)
            .reconnect(false)
            .on(EVENT_RESULT, on_result)
            .on(EVENT_ERROR, on_error)
            .on(EVENT_ITEMS, on_items)
            .on(EVENT_END, on_end)
            .on(EVENT_HEARTBEAT, on_heartbeat)
            .on("open", on_open)
            .on("error", on_client_error)
            .on("close", on_close)
            .connect();
        // A frozen server accepts TCP (the kernel does) but never answers
        // the handshake, so the whole connect is bounded, not just the open.
        let deadline = tokio::time::Instant::now() + timeout;
        let client = match tokio::time::timeout_at(deadline, client).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => {
                return Err(RemoteError::new(
                    ErrorKind::ServerUnreachable,
                    format!("cannot reach the sandbox server at {url}: {e}"),
                ))
            }
            Err(_) => {
                return Err(RemoteError::new(
                    ErrorKind::ServerUnreachable,
                    format!("the sandbox server at {url} did not answer within {timeout:?}"),
                ))
            }
        };
        match tokio::time::timeout_at(deadline, open_rx).await {
            Ok(Ok(Ok(()))) => {
                if let Ok(peer) = endpoint.addr.parse() {
                    crate::nodelay::disable_nagle_towards(peer);
                }
            }
            Ok(Ok(Err(text))) => {
                let _ = client.disconnect().await;
                return Err(if text.contains("auth rejected") {
                    RemoteError::new(
                        ErrorKind::AuthRejected,
                        format!("the sandbox server rejected the token: {text}"),
                    )
                } else {
                    RemoteError::new(
                        ErrorKind::ServerUnreachable,
                        format!("connecting to {RPC_NAMESPACE} failed: {text}"),
                    )
                });
            }
            Ok(Err(_)) | Err(_) => {
                let _ = client.disconnect().await;
                return Err(RemoteError::new(
                    ErrorKind::ServerUnreachable,
                    format!("{RPC_NAMESPACE} did not open within {timeout:?} at {url}"),
                ));
            }
        }
        let conn = Arc::new(RpcConnection {
            client,
            pending,
            next_id: AtomicU64::new(1),
            lost,
            alive,
            max_message_bytes: settings.max_message_bytes,
            opened,
            last_heard_ms,
        });
        conn.last_heard_ms
            .store(opened.elapsed().as_millis() as u64, Ordering::Release);
        tokio::spawn(heartbeat(Arc::downgrade(&conn), settings));
        Ok(conn)
    }

    /// Whether calls can still be made on this connection.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Ends every pending call with `error` and refuses new ones.
    pub fn fail(&self, error: RemoteError) {
        fail_all(&self.pending, &self.alive, &self.lost, error);
    }

    /// Calls `target` with CBOR `args`; returns the CBOR result.
    pub async fn call(self: &Arc<Self>, target: &str, args: &[u8]) -> Outcome {
        self.check_size(target, args)?;
        let (tx, rx) = oneshot::channel();
        let guard = self.start(target, args, None, Waiter::Unary(tx)).await?;
        let outcome = rx.await.unwrap_or_else(|_| Err(self.lost_error()));
        guard.disarm();
        outcome
    }

    /// Starts the streaming call `target` with CBOR `args` under `window`;
    /// its events arrive on the returned channel until the guard is dropped.
    pub(crate) async fn open_stream(
        self: &Arc<Self>,
        target: &str,
        args: &[u8],
        window: Window,
    ) -> Result<(CallGuard, mpsc::UnboundedReceiver<StreamEvent>), RemoteError> {
        self.check_size(target, args)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let guard = self
            .start(target, args, Some(window), Waiter::Stream(tx))
            .await?;
        Ok((guard, rx))
    }

    /// Registers `waiter` under a fresh id and sends the `call` event.
    async fn start(
        self: &Arc<Self>,
        target: &str,
        args: &[u8],
        stream: Option<Window>,
        waiter: Waiter,
    ) -> Result<CallGuard, RemoteError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.pending.insert(id, waiter);
        if !self.is_alive() {
            self.pending.remove(&id);
            return Err(self.lost_error());
        }
        let guard = CallGuard {
            conn: Some(self.clone()),
            id,
        };
        let mut event = json!({ "id": id, "target": target, "args": B64.encode(args) });
        if let Some(window) = stream {
            event["stream"] = json!(window);
        }
        // Made inside a span: the sandbox's spans for this call nest under it.
        if let Some(ctx) = agentix_actors::trace::current() {
            event["trace"] = json!(ctx);
        }
        if let Err(e) = self.client.emit(EVENT_CALL, event).await {
            guard.disarm();
            self.pending.remove(&id);
            let err = RemoteError::new(
                ErrorKind::ConnectionLost,
                format!("cannot send the call to the server: {e}"),
            );
            self.fail(err.clone());
            return Err(err);
        }
        Ok(guard)
    }

    /// Tells the server the host consumed `items` items (`bytes` bytes) of
    /// stream `id`, which lets the worker produce that much more.
    pub(crate) fn ack(self: &Arc<Self>, id: u64, items: u64, bytes: u64) {
        if !self.is_alive() {
            return;
        }
        let client = self.client.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let event = serde_json::to_value(AckEvent { id, items, bytes }).unwrap_or_default();
                if let Err(e) = client.emit(EVENT_ACK, event).await {
                    tracing::debug!(id, "ack not sent: {e}");
                }
            });
        }
    }

    fn check_size(&self, target: &str, args: &[u8]) -> Result<(), RemoteError> {
        if args.len() <= self.max_message_bytes {
            return Ok(());
        }
        Err(RemoteError::new(
            ErrorKind::PayloadTooLarge,
            format!(
                "arguments for `{target}` are {} bytes; the limit is {} bytes",
                args.len(),
                self.max_message_bytes
            ),
        ))
    }

    /// The error every call gets once the connection is gone.
    pub(crate) fn lost_error(&self) -> RemoteError {
        self.lost
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_else(|| {
                RemoteError::new(ErrorKind::ConnectionLost, "the connection is closed")
            })
    }

    /// Closes the connection; pending calls end with `ConnectionLost`.
    pub async fn close(&self) {
        self.fail(RemoteError::new(
            ErrorKind::ConnectionLost,
            "the sandbox was closed",
        ));
        let _ = self.client.disconnect().await;
    }

    /// Like [`RpcConnection::close`], without waiting (for `Drop`): the
    /// server sees the disconnect and cancels this host's calls, including
    /// streams whose readers are still alive.
    pub fn close_in_background(&self, why: &str) {
        self.fail(RemoteError::new(ErrorKind::ConnectionLost, why));
        let client = self.client.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = client.disconnect().await;
            });
        }
    }
}

/// Sends `cancel` for a call whose caller stopped waiting, unless disarmed
/// because the call already ended.
pub(crate) struct CallGuard {
    conn: Option<Arc<RpcConnection>>,
    id: u64,
}

impl CallGuard {
    /// The call ended: dropping the guard no longer cancels it.
    pub(crate) fn disarm(mut self) {
        self.conn = None;
    }

    /// The connection the call runs on.
    pub(crate) fn connection(&self) -> Option<&Arc<RpcConnection>> {
        self.conn.as_ref()
    }

    /// The call's id on the connection.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        conn.pending.remove(&self.id);
        if !conn.is_alive() {
            return;
        }
        let id = self.id;
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let event = serde_json::to_value(CancelEvent { id }).unwrap_or(Value::Null);
                if let Err(e) = conn.client.emit(EVENT_CANCEL, event).await {
                    tracing::debug!(id, "cancel not sent: {e}");
                }
            });
        }
    }
}

fn complete(pending: &Pending, id: u64, outcome: Outcome) {
    match (pending.remove(&id), outcome) {
        (Some((_, Waiter::Unary(tx))), outcome) => {
            let _ = tx.send(outcome);
        }
        (Some((_, stream)), Err(error)) => stream.fail(error),
        (Some((_, stream)), Ok(_)) => stream.fail(RemoteError::new(
            ErrorKind::Protocol,
            "the server ended a streaming call with a single result",
        )),
        (None, _) => tracing::debug!(id, "reply for a call nobody waits for; dropped"),
    }
}

fn fail_all(
    pending: &Pending,
    alive: &AtomicBool,
    lost: &Mutex<Option<RemoteError>>,
    err: RemoteError,
) {
    alive.store(false, Ordering::Release);
    lost.lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(|| err.clone());
    let ids: Vec<u64> = pending.iter().map(|e| *e.key()).collect();
    for id in ids {
        complete(pending, id, Err(err.clone()));
    }
}

/// Sends a heartbeat every interval while the connection lives, and fails it
/// when the server has not echoed one for the timeout: a frozen or vanished
/// machine keeps TCP open, and calls would otherwise wait forever.
async fn heartbeat(conn: std::sync::Weak<RpcConnection>, settings: ConnectionSettings) {
    let mut seq = 0u64;
    loop {
        tokio::time::sleep(settings.heartbeat_interval).await;
        let Some(conn) = conn.upgrade() else { return };
        if !conn.is_alive() {
            return;
        }
        let heard = Duration::from_millis(conn.last_heard_ms.load(Ordering::Acquire));
        let silent = conn.opened.elapsed().saturating_sub(heard);
        if silent > settings.heartbeat_timeout {
            conn.fail(RemoteError::new(
                ErrorKind::ConnectionLost,
                format!(
                    "the server has not answered for {:.1?} (heartbeat timeout {:?}); \
                     it is hung or unreachable",
                    silent, settings.heartbeat_timeout
                ),
            ));
            let _ = conn.client.disconnect().await;
            return;
        }
        seq += 1;
        let client = conn.client.clone();
        drop(conn);
        // A send blocked by a dead peer must not stall the silence check.
        tokio::spawn(async move {
            if let Err(e) = client.emit(EVENT_HEARTBEAT, json!({ "seq": seq })).await {
                tracing::debug!("heartbeat not sent: {e}");
            }
        });
    }
}

/// Whether an error the client reports after opening means the transport
/// is gone (as opposed to one malformed packet).
fn is_transport_failure(text: &str) -> bool {
    ["PING packet", "websocket connection", "IO-Error"]
        .iter()
        .any(|needle| text.contains(needle))
}

pub(crate) fn first<T: DeserializeOwned>(payload: Payload) -> Option<T> {
    #[allow(deprecated)]
    let value = match payload {
        Payload::Text(mut values) if !values.is_empty() => values.swap_remove(0),
        Payload::Text(_) => return None,
        Payload::String(s) => serde_json::from_str(&s).ok()?,
        Payload::Binary(_) => return None,
    };
    match serde_json::from_value(value) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::debug!("malformed event from the server dropped: {e}");
            None
        }
    }
}

fn payload_text(payload: &Payload) -> String {
    #[allow(deprecated)]
    match payload {
        Payload::Text(values) => values
            .iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(" "),
        Payload::String(s) => s.clone(),
        Payload::Binary(b) => format!("<{} binary bytes>", b.len()),
    }
}
