//! [`RpcConnection`]: `/rpc` on a sandbox's websocket, and its calls.
//!
//! Calls are events with our own call ids (`call`, `cancel`, `call:ack`
//! out; `call:result`, `call:error`, `call:items`, `call:end` in), their
//! arguments, results and item batches CBOR bytes in binary attachments.
//! Pending calls live in a concurrent map keyed by call id: the client's
//! reader completes them, callers wait on a oneshot (or, for a streaming
//! call, read a channel of events whose length the stream window bounds).
//! A call whose future or stream is dropped sends `cancel`. When the
//! connection or the server dies, every pending call ends at once with that
//! error. A malformed event that names its call ends that call with
//! `Protocol`, so no call waits for a reply that will never come.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentix_actors::errors::{ErrorKind, RemoteError};
use agentix_actors::part::{self, PartTable};
use agentix_actors::wire::{
    AckEvent, Attachment, CallEvent, CancelEvent, EndEvent, ErrorEvent, ItemsEvent, PartAckEvent,
    PartEvent, ResultEvent, Window, EVENT_ACK, EVENT_CALL, EVENT_CANCEL, EVENT_END, EVENT_ERROR,
    EVENT_HEARTBEAT, EVENT_ITEMS, EVENT_PART, EVENT_PART_ACK, EVENT_RESULT, RPC_NAMESPACE,
};
use bytes::Bytes;
use dashmap::DashMap;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use crate::sio::{ClientSettings, Delivery, Incoming, SioClient, SioError};

type Outcome = Result<Bytes, RemoteError>;
/// A unary call's result as it arrived: its pieces, joined by the caller
/// rather than on the connection's receive path.
type Arrived = Result<Vec<Bytes>, RemoteError>;
type Pending = DashMap<u64, Waiter>;

/// What a streaming call receives, in order; `End` or `Error` comes last.
#[derive(Debug)]
pub(crate) enum StreamEvent {
    /// A CBOR array of CBOR-encoded items; decoded by the reader of the
    /// stream, not on the connection's receive path.
    Items(Bytes),
    /// The stream ended after its last item.
    End,
    /// The stream ended with this error.
    Error(RemoteError),
}

/// Who waits for a call's events.
enum Waiter {
    Unary(oneshot::Sender<Arrived>),
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

impl Endpoint {
    /// The connect payload every namespace wants.
    pub(crate) fn auth(&self) -> serde_json::Value {
        json!({ "token": self.token })
    }
}

/// How a connection behaves: limits and liveness checks.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionSettings {
    /// How long connecting and opening each namespace may take.
    pub connect_timeout: Duration,
    /// Largest call payload, in bytes of CBOR.
    pub max_message_bytes: usize,
    /// How often a heartbeat goes to the server.
    pub heartbeat_interval: Duration,
    /// Silence after which the connection counts as lost.
    pub heartbeat_timeout: Duration,
}

impl ConnectionSettings {
    pub(crate) fn client(&self) -> ClientSettings {
        ClientSettings {
            connect_timeout: self.connect_timeout,
            max_message_bytes: self.max_message_bytes,
        }
    }
}

/// A live `/rpc` namespace on a sandbox's websocket.
pub struct RpcConnection {
    client: SioClient,
    pending: Arc<Pending>,
    next_id: AtomicU64,
    lost: Arc<Mutex<Option<RemoteError>>>,
    alive: Arc<AtomicBool>,
    max_message_bytes: usize,
    /// When the connection opened; heartbeat times count from here.
    opened: Instant,
    /// Milliseconds after `opened` of the last heartbeat echo.
    last_heard_ms: Arc<AtomicU64>,
    /// Held while one call's arguments go out in parts: the server keeps
    /// parts of one payload at a time, and calls with small arguments go
    /// out between the parts.
    sending_parts: tokio::sync::Mutex<()>,
}

/// The error kind and message a failed connect or join becomes.
pub(crate) fn connect_error(endpoint: &Endpoint, what: &str, e: SioError) -> RemoteError {
    match e {
        SioError::AuthRejected(m) => RemoteError::new(ErrorKind::AuthRejected, m),
        SioError::Lost(m) => RemoteError::new(ErrorKind::ConnectionLost, m),
        other => RemoteError::new(
            ErrorKind::ServerUnreachable,
            format!("{what} at {}: {other}", endpoint.addr),
        ),
    }
}

impl RpcConnection {
    /// Opens a websocket to `endpoint` and joins `/rpc` on it; the client
    /// is returned too, for the other namespaces to join.
    pub async fn connect(
        endpoint: &Endpoint,
        settings: ConnectionSettings,
    ) -> Result<Arc<Self>, RemoteError> {
        let opened = Instant::now();
        let pending: Arc<Pending> = Arc::new(DashMap::new());
        let alive = Arc::new(AtomicBool::new(true));
        let lost = Arc::new(Mutex::new(None));
        let last_heard_ms = Arc::new(AtomicU64::new(0));
        let handler = {
            let (pending, alive, lost) = (pending.clone(), alive.clone(), lost.clone());
            let last_heard_ms = last_heard_ms.clone();
            let parts = Mutex::new(PartTable::new(settings.max_message_bytes));
            Arc::new(move |delivery: Delivery| match delivery {
                Delivery::Event(incoming) => {
                    let route = Route {
                        pending: &pending,
                        parts: &parts,
                        last_heard_ms: &last_heard_ms,
                        opened,
                    };
                    route.event(incoming);
                }
                Delivery::Closed(e) => {
                    let kind = match e {
                        SioError::AuthRejected(_) => ErrorKind::AuthRejected,
                        _ => ErrorKind::ConnectionLost,
                    };
                    fail_all(
                        &pending,
                        &alive,
                        &lost,
                        RemoteError::new(kind, e.to_string()),
                    );
                }
            })
        };
        let client = open_rpc(endpoint, settings, handler).await?;
        let conn = Arc::new(RpcConnection {
            client,
            pending,
            next_id: AtomicU64::new(1),
            lost,
            alive,
            max_message_bytes: settings.max_message_bytes,
            opened,
            last_heard_ms,
            sending_parts: tokio::sync::Mutex::new(()),
        });
        conn.last_heard_ms
            .store(opened.elapsed().as_millis() as u64, Ordering::Release);
        tokio::spawn(heartbeat(Arc::downgrade(&conn), settings));
        Ok(conn)
    }

    /// The websocket this connection runs on.
    pub fn client(&self) -> &SioClient {
        &self.client
    }

    /// Whether calls can still be made on this connection.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire) && !self.client.is_closed()
    }

    /// Ends every pending call with `error` and refuses new ones.
    pub fn fail(&self, error: RemoteError) {
        fail_all(&self.pending, &self.alive, &self.lost, error);
    }

    /// Calls `target` with CBOR `args`; returns the CBOR result.
    pub async fn call(self: &Arc<Self>, target: &str, args: Vec<u8>) -> Outcome {
        self.check_size(target, &args)?;
        let (tx, rx) = oneshot::channel();
        let guard = self.start(target, args, None, Waiter::Unary(tx)).await?;
        let arrived = rx.await.unwrap_or_else(|_| Err(self.lost_error()));
        guard.disarm();
        arrived.map(part::join)
    }

    /// Starts the streaming call `target` with CBOR `args` under `window`;
    /// its events arrive on the returned channel until the guard is dropped.
    pub(crate) async fn open_stream(
        self: &Arc<Self>,
        target: &str,
        args: Vec<u8>,
        window: Window,
    ) -> Result<(CallGuard, mpsc::UnboundedReceiver<StreamEvent>), RemoteError> {
        self.check_size(target, &args)?;
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
        args: Vec<u8>,
        stream: Option<Window>,
        waiter: Waiter,
    ) -> Result<CallGuard, RemoteError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.pending.insert(id, waiter);
        if !self.is_alive() {
            self.pending.remove(&id);
            return Err(self.lost_error());
        }
        // Armed before sending: a caller that gives up while the call is
        // still being written cancels it once it has gone out.
        let guard = CallGuard {
            conn: Some(self.clone()),
            id,
        };
        // Made inside a span: the sandbox's spans for this call nest under it.
        let trace = agentix_actors::trace::current();
        if let Err(e) = self.send_call(id, target, args, stream, trace).await {
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

    /// Sends the `call` event, after its arguments' parts if they are large.
    async fn send_call(
        &self,
        id: u64,
        target: &str,
        args: Vec<u8>,
        stream: Option<Window>,
        trace: Option<agentix_actors::trace::SpanContext>,
    ) -> Result<(), SioError> {
        let total = args.len() as u64;
        // Most calls are small: no piece list, no lock.
        let (pieces, last, _sending) = if args.len() <= part::SPLIT_ABOVE {
            (Vec::new(), Bytes::from(args), None)
        } else {
            let mut pieces = part::split(args.into());
            let last = pieces.pop().unwrap_or_default();
            (pieces, last, Some(self.sending_parts.lock().await))
        };
        for bytes in pieces {
            let bytes = Attachment::new(bytes);
            let event = PartEvent { id, total, bytes };
            self.client.emit(RPC_NAMESPACE, EVENT_PART, &event).await?;
        }
        let event = CallEvent {
            id,
            target: target.to_owned(),
            args: Attachment::new(last),
            stream,
            trace,
            parts: true,
        };
        self.client.emit(RPC_NAMESPACE, EVENT_CALL, &event).await
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
                let event = AckEvent { id, items, bytes };
                if let Err(e) = client.emit(RPC_NAMESPACE, EVENT_ACK, &event).await {
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
        )
        .with_details(
            "send large data in pieces (agentix_files::transfer for files), or raise \
             `max_message_bytes` in SandboxConfig",
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

    /// Closes the connection, every namespace on it; pending calls end with
    /// `ConnectionLost`.
    pub async fn close(&self) {
        let why = "the sandbox was closed";
        self.fail(RemoteError::new(ErrorKind::ConnectionLost, why));
        self.client.disconnect(SioError::Lost(why.into())).await;
    }

    /// Like [`RpcConnection::close`], without waiting (for `Drop`): the
    /// server sees the disconnect and cancels this host's calls, including
    /// streams whose readers are still alive.
    pub fn close_in_background(&self, why: &str) {
        self.fail(RemoteError::new(ErrorKind::ConnectionLost, why));
        self.client
            .disconnect_in_background(SioError::Lost(why.into()));
    }
}

/// How many times a websocket whose `/rpc` join went unanswered is
/// replaced by a new one within the connect timeout.
const JOIN_ATTEMPTS: u32 = 4;

/// Opens a websocket and joins `/rpc` on it with `handler`. A join that
/// gets no answer at all (seen, rarely, on a loaded machine, with the
/// server healthy) is tried again on a fresh websocket, each attempt
/// getting its share of the connect timeout, rather than costing the whole
/// timeout and the call.
async fn open_rpc(
    endpoint: &Endpoint,
    settings: ConnectionSettings,
    handler: crate::sio::Handler,
) -> Result<SioClient, RemoteError> {
    let attempt_limit = settings.connect_timeout / JOIN_ATTEMPTS;
    let auth = endpoint.auth();
    let mut attempt = 1;
    loop {
        let client = SioClient::connect(&endpoint.addr, &endpoint.token, settings.client())
            .await
            .map_err(|e| connect_error(endpoint, "cannot reach the sandbox server", e))?;
        let join = client.join(RPC_NAMESPACE, &auth, handler.clone());
        let outcome = match tokio::time::timeout(attempt_limit, join).await {
            Ok(outcome) => outcome,
            Err(_) if attempt < JOIN_ATTEMPTS => {
                tracing::warn!(
                    addr = endpoint.addr,
                    attempt,
                    "/rpc was not accepted within {attempt_limit:?}; trying a new connection"
                );
                client.disconnect_in_background(SioError::Lost("the join went unanswered".into()));
                attempt += 1;
                continue;
            }
            Err(_) => Err(SioError::Unreachable(format!(
                "{RPC_NAMESPACE} was not accepted within {:?}",
                settings.connect_timeout
            ))),
        };
        return match outcome {
            Ok(()) => Ok(client),
            Err(e) => {
                client.disconnect_in_background(SioError::Lost("the join failed".into()));
                Err(connect_error(endpoint, "cannot open /rpc", e))
            }
        };
    }
}

/// What the receive path of `/rpc` routes events with.
struct Route<'a> {
    pending: &'a Pending,
    /// Parts of results that came ahead of their `call:result`.
    parts: &'a Mutex<PartTable>,
    last_heard_ms: &'a AtomicU64,
    opened: Instant,
}

impl Route<'_> {
    /// Routes one `/rpc` event to the call it belongs to.
    fn event(&self, incoming: Incoming) {
        let pending = self.pending;
        match incoming.name() {
            EVENT_PART => {
                let client = incoming.client().clone();
                match decode::<PartEvent>(incoming) {
                    Ok(ev) => {
                        // Acknowledged whatever becomes of it: the server
                        // waits for the ack before it sends more parts.
                        ack_part(&client, ev.id);
                        self.part(ev);
                    }
                    Err(e) => {
                        if let Some(id) = e.id {
                            ack_part(&client, id);
                        }
                        malformed(pending, e)
                    }
                }
            }
            EVENT_RESULT => match decode::<ResultEvent>(incoming) {
                Ok(ev) => {
                    let pieces = self.parts().finish(ev.id, ev.value.into_bytes());
                    let outcome = pieces.map_err(|why| {
                        RemoteError::new(
                            ErrorKind::Protocol,
                            format!("the result arrived incomplete: {why}"),
                        )
                    });
                    complete(pending, ev.id, outcome)
                }
                Err(e) => malformed(pending, e),
            },
            EVENT_ERROR => match decode::<ErrorEvent>(incoming) {
                Ok(ev) => {
                    self.parts().discard(ev.id);
                    complete(pending, ev.id, Err(ev.error))
                }
                Err(e) => malformed(pending, e),
            },
            _ => on_stream_event(pending, self.last_heard_ms, self.opened, incoming),
        }
    }

    fn parts(&self) -> std::sync::MutexGuard<'_, PartTable> {
        self.parts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps a part of a result; a part past the message limit ends its call.
    fn part(&self, ev: PartEvent) {
        if !self.pending.contains_key(&ev.id) {
            // Its caller gave up: the rest of the result is not wanted either.
            return;
        }
        if let Err(why) = self.parts().push(ev.id, ev.total, ev.bytes.into_bytes()) {
            let error = RemoteError::new(
                ErrorKind::PayloadTooLarge,
                format!("the result could not be received: {why}"),
            );
            complete(self.pending, ev.id, Err(error));
        }
    }
}

/// Tells the server a part of call `id`'s result arrived, so that it sends
/// the next.
fn ack_part(client: &SioClient, id: u64) {
    let client = client.clone();
    tokio::spawn(async move {
        let ack = PartAckEvent { id };
        if let Err(e) = client.emit(RPC_NAMESPACE, EVENT_PART_ACK, &ack).await {
            tracing::debug!(id, "part ack not sent: {e}");
        }
    });
}

/// Routes the other `/rpc` events: stream items and ends, heartbeats.
fn on_stream_event(
    pending: &Pending,
    last_heard_ms: &AtomicU64,
    opened: Instant,
    incoming: Incoming,
) {
    match incoming.name() {
        EVENT_ITEMS => match decode::<ItemsEvent>(incoming) {
            Ok(ev) => on_items(pending, ev),
            Err(e) => malformed(pending, e),
        },
        EVENT_END => match decode::<EndEvent>(incoming) {
            Ok(ev) => match pending.remove(&ev.id) {
                Some((_, Waiter::Stream(tx))) => {
                    let _ = tx.send(StreamEvent::End);
                }
                Some((_, unary)) => unary.fail(RemoteError::new(
                    ErrorKind::Protocol,
                    "the server ended a unary call as a stream",
                )),
                None => {}
            },
            Err(e) => malformed(pending, e),
        },
        EVENT_HEARTBEAT => {
            last_heard_ms.store(opened.elapsed().as_millis() as u64, Ordering::Release);
        }
        other => tracing::debug!(event = other, "unknown /rpc event from the server; dropped"),
    }
}

fn on_items(pending: &Pending, ev: ItemsEvent) {
    // Decide under the map's read lock, complete after it: removing while
    // holding it would deadlock.
    let unary = match pending.get(&ev.id) {
        Some(waiter) => match &*waiter {
            Waiter::Stream(tx) => {
                let _ = tx.send(StreamEvent::Items(ev.items.into_bytes()));
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
        complete(pending, ev.id, Err(err));
    }
}

/// An event that did not decode: the call it names (if it names one) ends
/// with `Protocol`, since its real reply may have been this event.
fn malformed(pending: &Pending, error: MalformedEvent) {
    tracing::warn!("a malformed event from the server: {}", error.why);
    if let Some(id) = error.id {
        complete(
            pending,
            id,
            Err(RemoteError::new(
                ErrorKind::Protocol,
                format!("the server's reply could not be read: {}", error.why),
            )),
        );
    }
}

/// Why an event did not decode, and the call id it carried if one was readable.
struct MalformedEvent {
    why: String,
    id: Option<u64>,
}

/// Decodes an `/rpc` event's payload, or says why not and which call it named.
fn decode<T>(incoming: Incoming) -> Result<T, MalformedEvent>
where
    T: serde::de::DeserializeOwned + agentix_actors::wire::WithAttachments,
{
    #[derive(serde::Deserialize)]
    struct Named {
        id: u64,
    }
    let id = serde_json::from_str::<(serde::de::IgnoredAny, Named)>(incoming.json())
        .ok()
        .map(|(_, named)| named.id);
    incoming.decode().map_err(|e| MalformedEvent {
        why: e.to_string(),
        id,
    })
}

fn complete(pending: &Pending, id: u64, outcome: Arrived) {
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
                let event = CancelEvent { id };
                if let Err(e) = conn.client.emit(RPC_NAMESPACE, EVENT_CANCEL, &event).await {
                    tracing::debug!(id, "cancel not sent: {e}");
                }
            });
        }
    }
}

/// Sends a heartbeat every interval while the connection lives, and fails it
/// when the server has not echoed one for the timeout: a server whose
/// process is alive but stuck still answers Engine.IO pings from its
/// runtime, and calls would otherwise wait forever.
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
            let why = format!(
                "the server has not answered for {:.1?} (heartbeat timeout {:?}); \
                 it is hung or unreachable",
                silent, settings.heartbeat_timeout
            );
            conn.fail(RemoteError::new(ErrorKind::ConnectionLost, why.clone()));
            conn.client.disconnect(SioError::Lost(why)).await;
            return;
        }
        seq += 1;
        let client = conn.client.clone();
        drop(conn);
        // A send blocked by a dead peer must not stall the silence check.
        tokio::spawn(async move {
            if let Err(e) = client
                .emit(RPC_NAMESPACE, EVENT_HEARTBEAT, &json!({ "seq": seq }))
                .await
            {
                tracing::debug!("heartbeat not sent: {e}");
            }
        });
    }
}
