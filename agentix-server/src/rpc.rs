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
//! cancels from one socket reach it in the order they were sent; the
//! router emits a unary call's outcome itself ([`HostReply`]), and only a
//! stream has a task here that relays its events. A
//! `heartbeat` event is echoed back at once, so hosts can tell a hung or
//! unreachable server from a slow call.
//!
//! The event handlers are attached in a connect middleware, which runs
//! before socketioxide acknowledges the namespace connect: attached in the
//! connect handler, which runs after the ack, they would miss an event the
//! host sends right after joining.

use actix::dev::SendError;
use actix::Addr;
use agentix_wire::errors::{ErrorKind, RemoteError};
use agentix_wire::part::PartTable;
use agentix_wire::wire::{
    AckEvent, Attachment, CancelEvent, EndEvent, ErrorEvent, ItemsEvent, PartEvent, EVENT_ACK,
    EVENT_CALL, EVENT_CANCEL, EVENT_END, EVENT_ERROR, EVENT_HEARTBEAT, EVENT_ITEMS, EVENT_PART,
    EVENT_PART_ACK, RPC_NAMESPACE,
};
use serde_json::Value;
use socketioxide::extract::{Event, SocketRef, TryData};
use socketioxide::handler::{ConnectHandler, Value as SioValue};
use socketioxide::SocketIo;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, Semaphore};

use agentix_actors::supervision::ChildAddr;

use crate::auth::{auth_middleware, Token};
use crate::call_request::CallRequest;
use crate::call_router::{
    AckStream, CallRouter, CancelCall, HostDisconnected, StartCall, ROUTER_MAILBOX,
};
use crate::calls::{NewCall, Origin, Reply, StreamEvent};
use crate::emit::{emit, emit_soon};
use crate::host_reply::{shutting_down, too_large, HostReply};
use crate::inline_handler::Inline;
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
    s.on(
        EVENT_PART_ACK,
        Inline(move |_: SocketRef, _: SioValue| {
            if acked.available_permits() < PART_WINDOW {
                acked.add_permits(1);
            }
        }),
    );
    let mine = parts.clone();
    // Inline: a part must be kept before the next event's handler runs.
    s.on(
        EVENT_PART,
        Inline(move |s: SocketRef, v: SioValue| on_part(&s, &mine, RawEvent::from(v))),
    );
    let sup = router.clone();
    let mine = parts.clone();
    let sending = window.clone();
    // Inline: a call reaches the router before the next event is read, and
    // a unary call needs no task here (the router emits its outcome).
    s.on(
        EVENT_CALL,
        Inline(move |s: SocketRef, v: SioValue| {
            let to = Caller {
                router: sup.get(),
                window: &sending,
                max: max_event_bytes,
            };
            on_call(s, &to, &mine, RawEvent::from(v))
        }),
    );
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

/// Where a socket's calls go, and how their results come back.
struct Caller<'a> {
    router: Addr<CallRouter>,
    /// The host's window of unacknowledged result parts.
    window: &'a Arc<Semaphore>,
    /// The message limit: no event to the host is larger.
    max: usize,
}

/// Decodes a call event and hands the call to the router; a call that
/// cannot start is answered with its error.
fn on_call(s: SocketRef, to: &Caller<'_>, parts: &SocketParts, raw: RawEvent) {
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
            return emit_soon(s, EVENT_ERROR, rejected);
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
            return emit_soon(s, EVENT_ERROR, ErrorEvent::new(id, error));
        }
    };
    let Some(window) = stream else {
        // A host that sends parts reads them: the result's parts go on to
        // it as the worker sends them, instead of all at once after the last.
        let parts_window = in_parts.then(|| to.window.clone());
        let reply = Reply::Host(HostReply::new(s, id, parts_window, to.max));
        let call = NewCall {
            origin,
            target,
            args,
            trace,
            reply,
        };
        return start_call(&to.router, call);
    };
    let (events, rx) = mpsc::unbounded_channel();
    let call = NewCall {
        origin,
        target: target.clone(),
        args,
        trace,
        reply: Reply::Stream { events, window },
    };
    start_call(&to.router, call);
    let (router, max) = (to.router.clone(), to.max);
    tokio::spawn(async move { relay_stream(&s, &router, origin, &target, rx, max).await });
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
