//! The `/rpc` Socket.IO namespace: hosts start and cancel calls here.
//!
//! A host connects with `auth: {"token": ...}`, emits `call {id, target,
//! args}` and `cancel {id}`, and receives exactly one `call:result {id,
//! value}` or `call:error {id, error}` per call. A streaming call (`call`
//! with a `stream` window) receives `call:items {id, items}` events instead,
//! ended by `call:end {id}` or `call:error`, and the host sends `call:ack {id,
//! items, bytes}` as it consumes them. Each event is handed to the
//! `WorkerSupervisor` mailbox as soon as it is parsed, so calls, acks and
//! cancels from one socket reach it in the order they were sent. A
//! `heartbeat` event is echoed back at once, so hosts can tell a hung or
//! unreachable server from a slow call.

use std::time::Duration;

use actix::Addr;
use agentix_actors::errors::{ErrorKind, RemoteError};
use agentix_actors::trace::SpanContext;
use agentix_actors::wire::{
    AckEvent, CancelEvent, EndEvent, ErrorEvent, ItemsEvent, ResultEvent, EVENT_ACK, EVENT_CALL,
    EVENT_CANCEL, EVENT_END, EVENT_ERROR, EVENT_HEARTBEAT, EVENT_ITEMS, EVENT_RESULT,
    RPC_NAMESPACE,
};
use base64::Engine;
use serde::Serialize;
use serde_json::Value;
use socketioxide::extract::{Event, SocketRef, TryData};
use socketioxide::handler::ConnectHandler;
use socketioxide::{SendError, SocketError, SocketIo};
use tokio::sync::{mpsc, oneshot};

use crate::auth::{AuthError, Token};
use crate::call_request::CallRequest;
use crate::calls::{NewCall, Origin, Reply, StreamEvent};
use crate::supervisor::{AckStream, CancelCall, HostDisconnected, StartCall, WorkerSupervisor};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Registers `/rpc` on `io`, forwarding calls to `supervisor`; no event
/// sent to a host is larger than `max_event_bytes` (the host reads no more).
pub fn register(
    io: &SocketIo,
    supervisor: Addr<WorkerSupervisor>,
    token: Token,
    max_event_bytes: usize,
) {
    let on_connect = move |s: SocketRef| {
        let supervisor = supervisor.clone();
        async move { attach(s, supervisor, max_event_bytes) }
    };
    io.ns(RPC_NAMESPACE, on_connect.with(auth_middleware(token)));
}

/// A connect middleware that requires `auth: {"token": ...}`.
pub fn auth_middleware(
    token: Token,
) -> impl FnOnce(TryData<Value>) -> std::future::Ready<Result<(), AuthError>>
       + Clone
       + Send
       + Sync
       + 'static {
    move |TryData(auth): TryData<Value>| {
        let presented = auth.ok();
        let presented = presented
            .as_ref()
            .and_then(|a| a.get("token"))
            .and_then(Value::as_str);
        std::future::ready(token.check(presented))
    }
}

fn attach(s: SocketRef, supervisor: Addr<WorkerSupervisor>, max_event_bytes: usize) {
    let sup = supervisor.clone();
    s.on(
        EVENT_CALL,
        move |s: SocketRef, TryData(data): TryData<Value>| {
            let sup = sup.clone();
            async move { on_call(s, sup, data.unwrap_or(Value::Null), max_event_bytes).await }
        },
    );
    let sup = supervisor.clone();
    s.on(
        EVENT_CANCEL,
        move |s: SocketRef, TryData(data): TryData<Value>| {
            let sup = sup.clone();
            async move {
                match data.map(serde_json::from_value::<CancelEvent>) {
                    Ok(Ok(CancelEvent { id })) => sup.do_send(CancelCall(Origin {
                        socket: s.id,
                        host_id: id,
                    })),
                    _ => tracing::warn!(socket = %s.id, "malformed cancel event dropped"),
                }
            }
        },
    );
    let sup = supervisor.clone();
    s.on(
        EVENT_ACK,
        move |s: SocketRef, TryData(data): TryData<Value>| {
            let sup = sup.clone();
            async move {
                match data.map(serde_json::from_value::<AckEvent>) {
                    Ok(Ok(AckEvent { id, items, bytes })) => sup.do_send(AckStream {
                        origin: Origin {
                            socket: s.id,
                            host_id: id,
                        },
                        items,
                        bytes,
                    }),
                    _ => tracing::warn!(socket = %s.id, "malformed ack event dropped"),
                }
            }
        },
    );
    s.on(
        EVENT_HEARTBEAT,
        |s: SocketRef, TryData(data): TryData<Value>| async move {
            emit(&s, EVENT_HEARTBEAT, &data.unwrap_or(Value::Null)).await;
        },
    );
    s.on_fallback(|s: SocketRef, Event(event): Event| {
        tracing::warn!(socket = %s.id, event, "unknown /rpc event dropped");
        std::future::ready(())
    });
    s.on_disconnect(move |s: SocketRef| {
        supervisor.do_send(HostDisconnected(s.id));
        std::future::ready(())
    });
}

async fn on_call(s: SocketRef, supervisor: Addr<WorkerSupervisor>, data: Value, max: usize) {
    let CallRequest {
        id,
        target,
        args,
        stream,
        trace,
    } = match CallRequest::parse(data) {
        Ok(request) => request,
        Err(rejected) => {
            tracing::warn!(socket = %s.id, "{}", rejected.error.message);
            emit(&s, EVENT_ERROR, &rejected).await;
            return;
        }
    };
    let origin = Origin {
        socket: s.id,
        host_id: id,
    };
    match stream {
        None => unary_call(&s, &supervisor, origin, target, args, trace, max).await,
        Some(window) => {
            let (events, rx) = mpsc::unbounded_channel();
            let reply = Reply::Stream { events, window };
            let stream_target = target.clone();
            supervisor.do_send(StartCall(NewCall {
                origin,
                target,
                args,
                trace,
                reply,
            }));
            relay_stream(&s, &supervisor, origin, &stream_target, rx, max).await;
        }
    }
}

async fn unary_call(
    s: &SocketRef,
    supervisor: &Addr<WorkerSupervisor>,
    origin: Origin,
    target: String,
    args: Vec<u8>,
    trace: Option<SpanContext>,
    max: usize,
) {
    let (reply, rx) = oneshot::channel();
    supervisor.do_send(StartCall(NewCall {
        origin,
        target: target.clone(),
        args,
        trace,
        reply: Reply::Unary(reply),
    }));
    let id = origin.host_id;
    match rx.await.unwrap_or_else(|_| Err(shutting_down())) {
        Ok(value) => {
            let encoded = B64.encode(&value);
            if let Some(error) = too_large("the result", &target, value.len(), &encoded, max) {
                return emit(s, EVENT_ERROR, &ErrorEvent { id, error }).await;
            }
            emit(s, EVENT_RESULT, &ResultEvent { id, value: encoded }).await
        }
        Err(error) => emit(s, EVENT_ERROR, &ErrorEvent { id, error }).await,
    }
}

/// Room the JSON envelope and the Socket.IO packet header may take.
const ENVELOPE_BYTES: usize = 1024;

/// A `PayloadTooLarge` error if `encoded` (the base64 of `raw` bytes of
/// `what` from `target`) would make an event past `max` bytes: sent as is,
/// the host could not read it and would drop the whole connection.
fn too_large(
    what: &str,
    target: &str,
    raw: usize,
    encoded: &str,
    max: usize,
) -> Option<RemoteError> {
    (encoded.len() + ENVELOPE_BYTES > max).then(|| {
        RemoteError::new(
            ErrorKind::PayloadTooLarge,
            format!(
                "{what} of `{target}` is {raw} bytes ({} on the wire), past the \
                 {max}-byte message limit",
                encoded.len()
            ),
        )
        .with_details(
            "send large data in pieces (smaller stream items, or several calls), \
             or raise the limit (`max_message_bytes` in SandboxConfig)",
        )
    })
}

/// Emits a streaming call's events in order until its end or error.
async fn relay_stream(
    s: &SocketRef,
    supervisor: &Addr<WorkerSupervisor>,
    origin: Origin,
    target: &str,
    mut rx: mpsc::UnboundedReceiver<StreamEvent>,
    max: usize,
) {
    let id = origin.host_id;
    loop {
        match rx.recv().await {
            Some(StreamEvent::Items(items)) => {
                let encoded = agentix_actors::cbor::to_vec(&items).and_then(|bytes| {
                    let encoded = B64.encode(&bytes);
                    match too_large("a batch of items", target, bytes.len(), &encoded, max) {
                        Some(error) => Err(error),
                        None => Ok(encoded),
                    }
                });
                let items = match encoded {
                    Ok(items) => items,
                    Err(error) => {
                        // The worker would go on producing for nobody.
                        supervisor.do_send(CancelCall(origin));
                        emit(s, EVENT_ERROR, &ErrorEvent { id, error }).await;
                        return;
                    }
                };
                emit(s, EVENT_ITEMS, &ItemsEvent { id, items }).await;
            }
            Some(StreamEvent::End) => {
                emit(s, EVENT_END, &EndEvent { id }).await;
                return;
            }
            Some(StreamEvent::Error(error)) => {
                emit(s, EVENT_ERROR, &ErrorEvent { id, error }).await;
                return;
            }
            None => {
                let error = shutting_down();
                emit(s, EVENT_ERROR, &ErrorEvent { id, error }).await;
                return;
            }
        }
    }
}

fn shutting_down() -> RemoteError {
    RemoteError::new(ErrorKind::ServerExited, "the server is shutting down")
}

/// Emits `data`, waiting while the socket's send queue is full: a reply is
/// never dropped while the socket is connected.
pub async fn emit<T: Serialize + ?Sized>(s: &SocketRef, event: &str, data: &T) {
    let mut backoff = Duration::from_micros(200);
    loop {
        match s.emit(event, data) {
            Ok(()) => return,
            Err(SendError::Socket(SocketError::InternalChannelFull)) => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(20));
            }
            Err(e) => {
                tracing::debug!(socket = %s.id, event, "reply not delivered: {e}");
                return;
            }
        }
    }
}
