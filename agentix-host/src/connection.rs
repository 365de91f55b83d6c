//! The `/rpc` Socket.IO connection to one sandbox server, and its calls.
//!
//! Calls are text events (`call`, `cancel` out; `call:result`, `call:error`
//! in) with our own call ids, because the client's binary events and acks are
//! unreliable (see the README). Pending calls live in a concurrent map keyed
//! by call id: the client's receive loop completes them, callers wait on a
//! oneshot. A call whose future is dropped sends `cancel`. When the connection
//! or the server dies, every pending call ends at once with that error.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentix_actors::errors::{ErrorKind, RemoteError};
use agentix_actors::wire::{
    CancelEvent, ErrorEvent, ResultEvent, EVENT_CALL, EVENT_CANCEL, EVENT_ERROR, EVENT_RESULT,
    RPC_NAMESPACE,
};
use base64::Engine;
use dashmap::DashMap;
use futures_util::FutureExt;
use rust_socketio::asynchronous::{Client, ClientBuilder};
use rust_socketio::{Payload, TransportType};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::sync::oneshot;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

type Outcome = Result<Vec<u8>, RemoteError>;
type Pending = DashMap<u64, oneshot::Sender<Outcome>>;

/// Where a sandbox server listens and the token it wants.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `host:port` of the server.
    pub addr: String,
    /// The sandbox token.
    pub token: String,
}

/// A live `/rpc` connection.
pub struct RpcConnection {
    client: Client,
    pending: Arc<Pending>,
    next_id: AtomicU64,
    lost: Arc<Mutex<Option<RemoteError>>>,
    alive: Arc<AtomicBool>,
    max_message_bytes: usize,
}

impl RpcConnection {
    /// Connects to `endpoint` and waits until `/rpc` is open.
    pub async fn connect(
        endpoint: &Endpoint,
        timeout: Duration,
        max_message_bytes: usize,
    ) -> Result<Arc<Self>, RemoteError> {
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
            move |payload: Payload, _: Client| {
                let text = payload_text(&payload);
                match open_tx.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    Some(tx) => {
                        let _ = tx.send(Err(text));
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
            .on("open", on_open)
            .on("error", on_client_error)
            .on("close", on_close)
            .connect()
            .await
            .map_err(|e| {
                RemoteError::new(
                    ErrorKind::ServerUnreachable,
                    format!("cannot reach the sandbox server at {url}: {e}"),
                )
            })?;
        match tokio::time::timeout(timeout, open_rx).await {
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
        Ok(Arc::new(RpcConnection {
            client,
            pending,
            next_id: AtomicU64::new(1),
            lost,
            alive,
            max_message_bytes,
        }))
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
        if args.len() > self.max_message_bytes {
            return Err(RemoteError::new(
                ErrorKind::PayloadTooLarge,
                format!(
                    "arguments for `{target}` are {} bytes; the limit is {} bytes",
                    args.len(),
                    self.max_message_bytes
                ),
            ));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.insert(id, tx);
        if !self.is_alive() {
            self.pending.remove(&id);
            return Err(self.lost_error());
        }
        let mut guard = CancelOnDrop {
            conn: Some(self.clone()),
            id,
        };
        let event = json!({ "id": id, "target": target, "args": B64.encode(args) });
        if let Err(e) = self.client.emit(EVENT_CALL, event).await {
            guard.conn = None;
            self.pending.remove(&id);
            let err = RemoteError::new(
                ErrorKind::ConnectionLost,
                format!("cannot send the call to the server: {e}"),
            );
            self.fail(err.clone());
            return Err(err);
        }
        let outcome = rx.await.unwrap_or_else(|_| Err(self.lost_error()));
        guard.conn = None;
        outcome
    }

    fn lost_error(&self) -> RemoteError {
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
}

/// Sends `cancel` for a call whose caller stopped waiting.
struct CancelOnDrop {
    conn: Option<Arc<RpcConnection>>,
    id: u64,
}

impl Drop for CancelOnDrop {
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
    match pending.remove(&id) {
        Some((_, tx)) => {
            let _ = tx.send(outcome);
        }
        None => tracing::debug!(id, "reply for a call nobody waits for; dropped"),
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

fn first<T: DeserializeOwned>(payload: Payload) -> Option<T> {
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
