//! The `/rpc` Socket.IO namespace: hosts start and cancel calls here.
//!
//! A host connects with `auth: {"token": ...}`, emits `call {id, target,
//! args}` and `cancel {id}`, and receives exactly one `call:result {id,
//! value}` or `call:error {id, error}` per call. A streaming call (`call`
//! with a `stream` window) receives `call:items {id, items}` events instead,
//! ended by `call:end {id}` or `call:error`, and the host sends `call:ack {id,
//! items, bytes}` as it consumes them. Arguments, results and item batches
//! are CBOR in binary attachments; past 1.25 MiB they travel as `call:part`
//! events before the event that carries their last part
//! (`agentix_wire::part`), so they never hold other replies back. A
//! result's parts go on to the host as the worker sends them, each once the
//! host's part window has room; an argument's parts wait here for their
//! call event, which names the function they are for. Each
//! event is handed to the
//! `CallRouter` mailbox as soon as it is parsed, so calls, acks and
//! cancels from one socket reach it in the order they were sent. A
//! `heartbeat` event is echoed back at once, so hosts can tell a hung or
//! unreachable server from a slow call.
//!
//! The event handlers are attached in a connect middleware, which runs
//! before socketioxide acknowledges the namespace connect: attached in the
//! connect handler, which runs after the ack, they would miss an event the
//! host sends right after joining.

use actix::dev::SendError;
use actix::Addr;
use agentix_trace::SpanContext;
use agentix_wire::errors::{ErrorKind, RemoteError};
use agentix_wire::part::{split, PartTable, SPLIT_ABOVE};
use agentix_wire::wire::{
    AckEvent, Attachment, CancelEvent, EndEvent, ErrorEvent, ItemsEvent, PartEvent, ResultEvent,
    EVENT_ACK, EVENT_CALL, EVENT_CANCEL, EVENT_END, EVENT_ERROR, EVENT_HEARTBEAT, EVENT_ITEMS,
    EVENT_PART, EVENT_PART_ACK, EVENT_RESULT, RPC_NAMESPACE,
};
use bytes::Bytes;
use serde_json::Value;
use socketioxide::extract::{Event, SocketRef, TryData};
use socketioxide::handler::ConnectHandler;
use socketioxide::SocketIo;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot, Semaphore};

use agentix_actors::supervision::ChildAddr;

use crate::auth::{auth_middleware, Token};
use crate::call_request::CallRequest;
use crate::call_router::{
    AckStream, CallRouter, CancelCall, HostDisconnected, StartCall, ROUTER_MAILBOX,
};
use crate::calls::{NewCall, Origin, Reply, ResultPart, StreamEvent};
use crate::emit::emit;
use crate::raw_event::RawEvent;

/// Registers `/rpc` on `io`, forwarding calls to `router`; no event
/// sent to a host is larger than `max_event_bytes` (the host reads no more).
pub(crate) fn register(
    io: &SocketIo,
    router: ChildAddr<CallRouter>,
    token: Token,
    max_event_bytes: usize,
) {
    let attach_handlers = move |s: SocketRef| {
        attach(s, router.clone(), max_event_bytes);
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

/// Parts of large arguments this socket sent ahead of their calls; what a
/// host can make the server hold this way is bounded by the message limit.
type SocketParts = Arc<Mutex<PartTable>>;

/// Parts of results sent to this socket and not yet acknowledged, at most.
const PART_WINDOW: usize = 2;

fn attach(s: SocketRef, router: ChildAddr<CallRouter>, max_event_bytes: usize) {
    let parts: SocketParts = Arc::new(Mutex::new(PartTable::new(max_event_bytes)));
    // Shared by every call of the socket: what queues ahead of a small
    // reply is PART_WINDOW parts, however many large results are underway.
    let window = Arc::new(Semaphore::new(PART_WINDOW));
    let acked = window.clone();
    s.on(EVENT_PART_ACK, move |_: SocketRef| {
        if acked.available_permits() < PART_WINDOW {
            acked.add_permits(1);
        }
        std::future::ready(())
    });
    let mine = parts.clone();
    // Not async: a part must be kept before the next event's handler runs.
    s.on(EVENT_PART, move |s: SocketRef, raw: RawEvent| {
        on_part(&s, &mine, raw);
        std::future::ready(())
    });
    let sup = router.clone();
    let mine = parts.clone();
    let sending = window.clone();
    s.on(EVENT_CALL, move |s: SocketRef, raw: RawEvent| {
        let sup = sup.get();
        let parts = mine.clone();
        let window = sending.clone();
        async move { on_call(s, sup, &parts, window, raw, max_event_bytes).await }
    });
    let sup = router.clone();
    s.on(
        EVENT_CANCEL,
        move |s: SocketRef, TryData(data): TryData<Value>| {
            let cancel = match data.map(serde_json::from_value::<CancelEvent>) {
                Ok(Ok(CancelEvent { id })) => {
                    lock(&parts).discard(id);
                    Some(CancelCall(Origin {
                        socket: s.id,
                        host_id: id,
                    }))
                }
                _ => {
                    tracing::warn!(socket = %s.id, "malformed cancel event dropped");
                    None
                }
            };
            let sup = sup.get();
            // Waits for room in the router's mailbox: a cancel is never
            // dropped, and a flood of them waits rather than piles up.
            async move {
                if let Some(cancel) = cancel {
                    let _ = sup.send(cancel).await;
                }
            }
        },
    );
    let sup = router.clone();
    s.on(
        EVENT_ACK,
        move |s: SocketRef, TryData(data): TryData<Value>| {
            let sup = sup.get();
            async move {
                match data.map(serde_json::from_value::<AckEvent>) {
                    Ok(Ok(AckEvent { id, items, bytes })) => {
                        let ack = AckStream {
                            origin: Origin {
                                socket: s.id,
                                host_id: id,
                            },
                            items,
                            bytes,
                        };
                        let _ = sup.send(ack).await;
                    }
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
        // Results waiting to send their next part give up.
        window.close();
        router.get().do_send(HostDisconnected(s.id));
        std::future::ready(())
    });
}

fn lock(parts: &SocketParts) -> std::sync::MutexGuard<'_, PartTable> {
    parts.lock().unwrap_or_else(|p| p.into_inner())
}

/// Keeps a part of a call's arguments until the call event arrives; a part
/// that does not decode or does not fit is logged, and its call then fails
/// with the reason when it arrives.
fn on_part(s: &SocketRef, parts: &SocketParts, raw: RawEvent) {
    let decoded = raw.into_parts().and_then(|(data, frames)| {
        let mut event = serde_json::from_value::<PartEvent>(data)
            .map_err(|e| format!("malformed call:part event: {e}"))?;
        agentix_wire::attachment::resolve(&mut event, frames)?;
        Ok(event)
    });
    match decoded {
        Ok(PartEvent { id, total, bytes }) => {
            if let Err(why) = lock(parts).push(id, total, bytes.into_bytes()) {
                tracing::warn!(socket = %s.id, id, "arguments dropped: {why}");
            }
        }
        Err(why) => tracing::warn!(socket = %s.id, "{why}; dropped"),
    }
}

async fn on_call(
    s: SocketRef,
    router: Addr<CallRouter>,
    parts: &SocketParts,
    window: Arc<Semaphore>,
    raw: RawEvent,
    max: usize,
) {
    let parsed = raw
        .with_payload(CallRequest::parse_text)
        .unwrap_or_else(|e| {
            Err(ErrorEvent {
                id: 0,
                error: RemoteError::new(ErrorKind::Protocol, format!("malformed call event: {e}")),
            })
        });
    let CallRequest {
        id,
        target,
        args,
        stream,
        trace,
        parts: in_parts,
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
    let finished = lock(parts).finish(id, args);
    let args = match finished {
        Ok(pieces) => pieces,
        Err(why) => {
            let error = RemoteError::new(
                ErrorKind::PayloadTooLarge,
                format!("the arguments of `{target}` did not arrive whole: {why}"),
            );
            return emit(&s, EVENT_ERROR, &ErrorEvent::new(id, error)).await;
        }
    };
    match stream {
        None => {
            let window = in_parts.then_some(window);
            let call = UnaryCall {
                origin,
                target,
                args,
                trace,
            };
            unary_call(&s, &router, call, window, max).await
        }
        Some(window) => {
            let (events, rx) = mpsc::unbounded_channel();
            let reply = Reply::Stream { events, window };
            let stream_target = target.clone();
            start_call(
                &router,
                NewCall {
                    origin,
                    target,
                    args,
                    trace,
                    reply,
                },
            );
            relay_stream(&s, &router, origin, &stream_target, rx, max).await;
        }
    }
}

/// A unary call on its way to the worker.
struct UnaryCall {
    origin: Origin,
    target: String,
    args: Vec<Bytes>,
    trace: Option<SpanContext>,
}

/// Runs a unary call and sends its reply; a large result goes out as parts,
/// paced by `window`, when the host asked for parts.
async fn unary_call(
    s: &SocketRef,
    router: &Addr<CallRouter>,
    call: UnaryCall,
    window: Option<Arc<Semaphore>>,
    max: usize,
) {
    let UnaryCall {
        origin,
        target,
        args,
        trace,
    } = call;
    let id = origin.host_id;
    let (outcome_tx, mut outcome) = oneshot::channel();
    // A host that sends parts reads them: the result's parts go on to it as
    // the worker sends them, instead of all at once after the last.
    let (reply, mut relayed) = match &window {
        Some(_) => {
            let (parts, rx) = mpsc::unbounded_channel();
            let reply = Reply::Relayed {
                parts,
                outcome: outcome_tx,
            };
            (reply, Some(rx))
        }
        None => (Reply::Unary(outcome_tx), None),
    };
    start_call(
        router,
        NewCall {
            origin,
            target: target.clone(),
            args,
            trace,
            reply,
        },
    );
    let outcome = match (&mut relayed, &window) {
        (Some(parts), Some(window)) => loop {
            tokio::select! {
                biased;
                Some(part) = parts.recv() => {
                    if !send_part(s, window, id, part).await {
                        return; // the host is gone
                    }
                }
                outcome = &mut outcome => break outcome,
            }
        },
        _ => outcome.await,
    };
    let outcome = outcome.unwrap_or_else(|_| Err(shutting_down()));
    // The router sent every part before the outcome; after an error the
    // host drops the parts it has, so the rest are not sent.
    if let (Some(parts), Some(window), Ok(_)) = (&mut relayed, &window, &outcome) {
        while let Ok(part) = parts.try_recv() {
            if !send_part(s, window, id, part).await {
                return;
            }
        }
    }
    match outcome {
        Ok(mut pieces) => {
            let total: usize = pieces.iter().map(Bytes::len).sum();
            if let Some(error) = too_large("the result", &target, total, max) {
                return emit(s, EVENT_ERROR, &ErrorEvent::new(id, error)).await;
            }
            let Some(window) = window else {
                // One event; Socket.IO attachments carry it in 1 MiB frames.
                let value = Attachment::new(agentix_wire::part::join(pieces));
                return emit(s, EVENT_RESULT, &ResultEvent { id, value }).await;
            };
            if pieces.len() == 1 && total > SPLIT_ABOVE {
                pieces = split(pieces.pop().expect("one piece"));
            }
            let value = Attachment::new(pieces.pop().unwrap_or_default());
            let total = total as u64;
            // One event per part: replies to other calls go out between them.
            for bytes in pieces {
                if !send_part(s, &window, id, ResultPart { total, bytes }).await {
                    return;
                }
            }
            emit(s, EVENT_RESULT, &ResultEvent { id, value }).await
        }
        Err(error) => emit(s, EVENT_ERROR, &ErrorEvent::new(id, error)).await,
    }
}

/// Sends one part of call `id`'s result once the host's window has room;
/// false when the host is gone.
async fn send_part(s: &SocketRef, window: &Semaphore, id: u64, part: ResultPart) -> bool {
    match window.acquire().await {
        // Given back by the host's ack.
        Ok(permit) => permit.forget(),
        Err(_) => return false,
    }
    let ResultPart { total, bytes } = part;
    let bytes = Attachment::new(bytes);
    emit(s, EVENT_PART, &PartEvent { id, total, bytes }).await;
    true
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
    router: &Addr<CallRouter>,
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
                    agentix_wire::cbor::to_vec(&items).and_then(|bytes| {
                        match too_large("a batch of items", target, bytes.len(), max) {
                            Some(error) => Err(error),
                            None => Ok(Attachment::new(bytes)),
                        }
                    });
                let items = match encoded {
                    Ok(items) => items,
                    Err(error) => {
                        // The worker would go on producing for nobody.
                        router.do_send(CancelCall(origin));
                        emit(s, EVENT_ERROR, &ErrorEvent::new(id, error)).await;
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
                emit(s, EVENT_ERROR, &ErrorEvent::new(id, error)).await;
                return;
            }
            None => {
                let error = shutting_down();
                emit(s, EVENT_ERROR, &ErrorEvent::new(id, error)).await;
                return;
            }
        }
    }
}

/// Hands `call` to the router through its bounded mailbox; a call it has
/// no room for is answered at once, `Degraded` (a host that floods calls
/// gets refusals, not a server that holds them all).
fn start_call(router: &Addr<CallRouter>, call: NewCall) {
    match router.try_send(StartCall(call)) {
        Ok(()) => {}
        Err(SendError::Full(StartCall(call))) => call.reply.fail(RemoteError::new(
            ErrorKind::Degraded,
            format!("the server has {ROUTER_MAILBOX} calls waiting to be taken; try again later"),
        )),
        Err(SendError::Closed(StartCall(call))) => call.reply.fail(shutting_down()),
    }
}

fn shutting_down() -> RemoteError {
    RemoteError::new(ErrorKind::ServerExited, "the server is shutting down")
}
