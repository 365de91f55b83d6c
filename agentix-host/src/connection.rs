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
//! `Protocol`, so no call waits for a reply that will never come. The table
//! of waiting calls is [`crate::pending_calls`]; the receive path that
//! completes them, [`crate::rpc_routes`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentix_wire::errors::{ErrorKind, RemoteError};
use agentix_wire::part::{self, PartTable};
use agentix_wire::wire::{
    AckEvent, Attachment, CallEvent, CancelEvent, PartEvent, Window, EVENT_ACK, EVENT_CALL,
    EVENT_CANCEL, EVENT_HEARTBEAT, EVENT_PART, RPC_NAMESPACE,
};
use bytes::Bytes;
use dashmap::DashMap;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use crate::endpoint::Endpoint;
pub(crate) use crate::pending_calls::StreamEvent;
use crate::pending_calls::{fail_all, Pending, Waiter};
use crate::rpc_routes::Route;
use crate::sio::{ClientSettings, Delivery, SioClient, SioError};

type Outcome = Result<Bytes, RemoteError>;

/// How a connection behaves: limits and liveness checks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionSettings {
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
pub(crate) struct RpcConnection {
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
    pub(crate) async fn connect(
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
    pub(crate) fn client(&self) -> &SioClient {
        &self.client
    }

    /// Whether calls can still be made on this connection.
    pub(crate) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire) && !self.client.is_closed()
    }

    /// Ends every pending call with `error` and refuses new ones.
    pub(crate) fn fail(&self, error: RemoteError) {
        fail_all(&self.pending, &self.alive, &self.lost, error);
    }

    /// Calls `target` with CBOR `args`; returns the CBOR result.
    pub(crate) async fn call(self: &Arc<Self>, target: &str, args: Vec<u8>) -> Outcome {
        self.call_in_pieces(target, args).await.map(part::join)
    }

    /// Like [`RpcConnection::call`], with the result as the pieces it
    /// arrived in (one unless it was large), for a caller that decodes them
    /// without joining them first.
    pub(crate) async fn call_in_pieces(
        self: &Arc<Self>,
        target: &str,
        args: Vec<u8>,
    ) -> Result<Vec<Bytes>, RemoteError> {
        self.check_size(target, &args)?;
        let (tx, rx) = oneshot::channel();
        let guard = self.start(target, args, None, Waiter::Unary(tx)).await?;
        let arrived = rx.await.unwrap_or_else(|_| Err(self.lost_error()));
        guard.disarm();
        arrived
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
        let trace = agentix_trace::current();
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
        trace: Option<agentix_trace::SpanContext>,
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
            self.client
                .emit_attachments(RPC_NAMESPACE, EVENT_PART, &event)
                .await?;
        }
        let event = CallEvent {
            id,
            target: target.to_owned(),
            args: Attachment::new(last),
            stream,
            trace,
            parts: true,
        };
        self.client
            .emit_attachments(RPC_NAMESPACE, EVENT_CALL, &event)
            .await
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
    pub(crate) async fn close(&self) {
        let why = "the sandbox was closed";
        self.fail(RemoteError::new(ErrorKind::ConnectionLost, why));
        self.client.disconnect(SioError::Lost(why.into())).await;
    }

    /// Like [`RpcConnection::close`], without waiting (for `Drop`): the
    /// server sees the disconnect and cancels this host's calls, including
    /// streams whose readers are still alive.
    pub(crate) fn close_in_background(&self, why: &str) {
        self.fail(RemoteError::new(ErrorKind::ConnectionLost, why));
        self.client
            .disconnect_in_background(SioError::Lost(why.into()));
    }
}

/// How many times a websocket whose `/rpc` join went unanswered is
/// replaced by a new one within the connect timeout.
const JOIN_ATTEMPTS: u32 = 4;

/// Opens a websocket and joins `/rpc` on it with `handler`. A join that
/// gets no answer at all is tried again on a fresh websocket, each attempt
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
        // Through the local socket when the server holds one (see
        // `Endpoint::dial`).
        let client = SioClient::connect_via(endpoint.dial(), &endpoint.token, settings.client())
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
