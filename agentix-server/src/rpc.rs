//! The `/rpc` Socket.IO namespace: hosts start and cancel calls here.
//!
//! A host connects with `auth: {"token": ...}`, emits `call {id, target,
//! args}` and `cancel {id}`, and receives exactly one `call:result {id,
//! value}` or `call:error {id, error}` per call. A streaming call (`call`
//! with a `stream` window) receives `call:items {id, items}` events instead,
//! ended by `call:end {id}` or `call:error`, and the host sends `call:ack {id,
//! items, bytes}` as it consumes them. Arguments, results and item batches
//! are CBOR in binary attachments. Each event is handed to the
//! `WorkerSupervisor` mailbox as soon as it is parsed, so calls, acks and
//! cancels from one socket reach it in the order they were sent. A
//! `heartbeat` event is echoed back at once, so hosts can tell a hung or
//! unreachable server from a slow call.
//!
//! The event handlers are attached in a connect middleware, which runs
//! before socketioxide acknowledges the namespace connect: attached in the
//! connect handler, which runs after the ack, they would miss an event the
//! host sends right after joining.

use actix::Addr;
use agentix_actors::errors::{ErrorKind, RemoteError};
use agentix_actors::trace::SpanContext;
use agentix_actors::wire::{
    AckEvent, Attachment, CancelEvent, EndEvent, ErrorEvent, ItemsEvent, ResultEvent, EVENT_ACK,
    EVENT_CALL, EVENT_CANCEL, EVENT_END, EVENT_ERROR, EVENT_HEARTBEAT, EVENT_ITEMS, EVENT_RESULT,
    RPC_NAMESPACE,
};
use serde_json::Value;
use socketioxide::extract::{Event, SocketRef, TryData};
use socketioxide::handler::ConnectHandler;
use socketioxide::SocketIo;
use tokio::sync::{mpsc, oneshot};

use crate::auth::{auth_middleware, Token};
use crate::call_request::CallRequest;
use crate::calls::{NewCall, Origin, Reply, StreamEvent};
use crate::emit::emit;
use crate::raw_event::RawEvent;
use crate::supervisor::{AckStream, CancelCall, HostDisconnected, StartCall, WorkerSupervisor};

/// Registers `/rpc` on `io`, forwarding calls to `supervisor`; no event
/// sent to a host is larger than `max_event_bytes` (the host reads no more).
pub fn register(
    io: &SocketIo,
    supervisor: Addr<WorkerSupervisor>,
    token: Token,
    max_event_bytes: usize,
) {
    let attach_handlers = move |s: SocketRef| {
        attach(s, supervisor.clone(), max_event_bytes);
        std::future::ready(Ok::<(), std::convert::Infallible>(()))
    };
    let on_connect = |_: SocketRef| std::future::ready(());
    // The last `with` runs first: the token, then the handlers, then the ack.
    io.ns(
        RPC_NAMESPACE,
        on_connect
            .with(attach_handlers)
            .with(auth_middleware(token)),
    );
}

fn attach(s: SocketRef, supervisor: Addr<WorkerSupervisor>, max_event_bytes: usize) {
    let sup = supervisor.clone();
    s.on(EVENT_CALL, move |s: SocketRef, raw: RawEvent| {
        let sup = sup.clone();
        async move { on_call(s, sup, raw, max_event_bytes).await }
    });
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

async fn on_call(s: SocketRef, supervisor: Addr<WorkerSupervisor>, raw: RawEvent, max: usize) {
    let parsed = raw
        .into_parts()
        .map_err(|e| ErrorEvent {
            id: 0,
            error: RemoteError::new(ErrorKind::Protocol, format!("malformed call event: {e}")),
        })
        .and_then(|(data, frames)| CallRequest::parse(data, frames));
    let CallRequest {
        id,
        target,
        args,
        stream,
        trace,
    } = match parsed {
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
    let args = Vec::from(args);
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
            if let Some(error) = too_large("the result", &target, value.len(), max) {
                return emit(s, EVENT_ERROR, &ErrorEvent { id, error }).await;
            }
            let value = Attachment::new(value);
            emit(s, EVENT_RESULT, &ResultEvent { id, value }).await
        }
        Err(error) => emit(s, EVENT_ERROR, &ErrorEvent { id, error }).await,
    }
}

/// A `PayloadTooLarge` error if `len` bytes of `what` from `target` are
/// past the `max`-byte message limit: sent as is, the host could not read
/// them and would drop the whole connection.
fn too_large(what: &str, target: &str, len: usize, max: usize) -> Option<RemoteError> {
    (len > max).then(|| {
        RemoteError::new(
            ErrorKind::PayloadTooLarge,
            format!("{what} of `{target}` is {len} bytes, past the {max}-byte message limit"),
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
                let encoded =
                    agentix_actors::cbor::to_vec(&items).and_then(|bytes| {
                        match too_large("a batch of items", target, bytes.len(), max) {
                            Some(error) => Err(error),
                            None => Ok(Attachment::new(bytes)),
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
