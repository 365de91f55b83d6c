//! The calls the server knows about: queued for a worker, or in flight.
//!
//! A plain data structure owned by the `CallRouter` actor, so every change
//! to it goes through that actor's mailbox and no lock guards it. Each
//! call is known by the host's `(socket, call id)` and by the id the server
//! gives it on the worker pipe; a call leaves the table exactly once, which is
//! what makes "exactly one terminal reply per call" hold. A streaming call
//! also counts the items the worker produced and the host has not yet
//! acknowledged, so a worker that ignores its window is caught here.

use std::collections::{HashMap, VecDeque};

use agentix_trace::SpanContext;
use agentix_wire::codec::DEFAULT_MAX_FRAME;
use agentix_wire::errors::{ErrorKind, RemoteError};
use agentix_wire::frame_bytes::FrameBytes;
use agentix_wire::part::Partial;
use agentix_wire::wire::{Frame, Window};
use bytes::Bytes;
use serde_bytes::ByteBuf;
use socketioxide::socket::Sid;
use tokio::sync::{mpsc, oneshot};

use crate::call_outcome::{Outcome, ResultPart};
use crate::host_reply::HostReply;

/// What a streaming call delivers, in order; `End` or `Error` comes last.
#[derive(Debug)]
pub enum StreamEvent {
    /// The next items, each CBOR-encoded.
    Items(Vec<ByteBuf>),
    /// The stream ended after its last item.
    End,
    /// The stream ended with this error.
    Error(RemoteError),
}

/// Where a call's outcome goes.
pub enum Reply {
    /// A unary call from a host's socket: the router emits its outcome.
    Host(HostReply),
    /// A unary call whose outcome goes to a oneshot: how the tests of the
    /// table and the router observe outcomes.
    Unary(oneshot::Sender<Outcome>),
    /// A unary call whose result's parts are handed on as they arrive, so a
    /// large result flows to the host while the worker is still sending it;
    /// the outcome then holds only the last piece. Unbounded, but the
    /// message limit the table enforces on a result bounds what it holds.
    /// A `Host` reply that reads parts becomes one at its first part.
    Relayed {
        /// Where the parts go, in order.
        parts: mpsc::UnboundedSender<ResultPart>,
        /// Where the outcome goes, after every part.
        outcome: oneshot::Sender<Outcome>,
    },
    /// A streaming call: items, then `End` or `Error`. Unbounded, but the
    /// window the table enforces bounds what it can hold.
    Stream {
        /// Where events go.
        events: mpsc::UnboundedSender<StreamEvent>,
        /// How far the worker may run ahead.
        window: Window,
    },
}

impl Reply {
    /// Ends the call with `error`.
    pub fn fail(self, error: RemoteError) {
        match self {
            Reply::Host(host) => host.fail(error),
            Reply::Unary(tx) | Reply::Relayed { outcome: tx, .. } => {
                let _ = tx.send(Err(error));
            }
            Reply::Stream { events, .. } => {
                let _ = events.send(StreamEvent::Error(error));
            }
        }
    }

    /// Ends the call to `target` with a worker's terminal frame for it, and
    /// the parts of its result that came before the frame.
    pub fn finish_with(self, frame: Frame, parts: Partial, target: &str) {
        match (self, frame) {
            (Reply::Host(host), Frame::Result { value, .. }) => {
                host.finish(parts.finish(value.0).map_err(incomplete), target);
            }
            (
                Reply::Unary(tx) | Reply::Relayed { outcome: tx, .. },
                Frame::Result { value, .. },
            ) => {
                let _ = tx.send(parts.finish(value.0).map_err(incomplete));
            }
            (Reply::Stream { events, .. }, Frame::End { .. }) => {
                let _ = events.send(StreamEvent::End);
            }
            (reply, Frame::Error { error, .. }) => reply.fail(error),
            (reply, other) => reply.fail(RemoteError::new(
                ErrorKind::Protocol,
                format!(
                    "the worker ended the call with a `{}` frame, which does not fit its shape",
                    frame_name(&other)
                ),
            )),
        }
    }

    fn window(&self) -> Option<Window> {
        match self {
            Reply::Host(_) | Reply::Unary(_) | Reply::Relayed { .. } => None,
            Reply::Stream { window, .. } => Some(*window),
        }
    }
}

fn incomplete(why: String) -> RemoteError {
    RemoteError::new(
        ErrorKind::Protocol,
        format!("the worker's result arrived incomplete: {why}"),
    )
}

fn frame_name(frame: &Frame) -> &'static str {
    match frame {
        Frame::Ready { .. } => "ready",
        Frame::Call { .. } => "call",
        Frame::Ack { .. } => "ack",
        Frame::Cancel { .. } => "cancel",
        Frame::Items { .. } => "items",
        Frame::End { .. } => "end",
        Frame::Logs { .. } => "logs",
        Frame::Traces { .. } => "traces",
        Frame::SioOpen { .. } => "sio_open",
        Frame::SioEvent { .. } => "sio_event",
        Frame::Result { .. } => "result",
        Frame::Part { .. } => "part",
        Frame::Ping { .. } => "ping",
        Frame::Pong { .. } => "pong",
        Frame::Error { .. } => "error",
    }
}

/// What delivering a batch of stream items found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// Passed on to the host.
    Delivered,
    /// No such call (it ended or was cancelled); the items are dropped.
    Unknown,
    /// The call is not a stream, or the worker overran its window: the
    /// call must end with a protocol error.
    Violation(String),
}

/// What receiving a part of a result found.
#[derive(Debug)]
pub(crate) enum PartDelivery {
    /// Kept until the result's last piece, or handed on to the host.
    Kept,
    /// No such call (it ended or was cancelled); the part is dropped.
    Unknown,
    /// The whole result would be past the message limit: the call fails.
    TooLarge(RemoteError),
    /// The parts do not fit the call or each other: a protocol error.
    Violation(String),
}

/// Who asked: the host's socket and its own call id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The host's Socket.IO socket.
    pub socket: Sid,
    /// The id the host gave the call.
    pub host_id: u64,
}

/// A call not yet sent to a worker.
pub struct NewCall {
    /// Who asked.
    pub origin: Origin,
    /// Remote function name.
    pub target: String,
    /// CBOR arguments, in the pieces they arrived in.
    pub args: Vec<Bytes>,
    /// The host's trace context, passed on to the worker.
    pub trace: Option<SpanContext>,
    /// Where the outcome goes.
    pub reply: Reply,
}

struct InFlight {
    origin: Origin,
    reply: Reply,
    /// Stream items (and their bytes) produced but not yet acknowledged.
    outstanding: (u64, u64),
    /// Parts of the result received so far.
    parts: Partial,
    /// The remote function, for the errors its result can cause.
    target: String,
}

/// What cancelling a call found.
pub(crate) enum Cancelled {
    /// It was still queued; here is its reply.
    Queued(Reply),
    /// It was running in the worker under this id; here is its reply.
    InFlight(u64, Reply),
    /// No such call (already finished, or never started).
    Unknown,
}

/// The call router's table of calls.
#[derive(Default)]
pub(crate) struct CallTable {
    next_id: u64,
    inflight: HashMap<u64, InFlight>,
    by_origin: HashMap<Origin, u64>,
    queued: VecDeque<NewCall>,
}

impl CallTable {
    /// An empty table whose worker call ids start after `last_id`.
    pub(crate) fn starting_after(last_id: u64) -> Self {
        CallTable {
            next_id: last_id,
            ..CallTable::default()
        }
    }

    /// Calls queued or in flight.
    pub(crate) fn len(&self) -> usize {
        self.inflight.len() + self.queued.len()
    }

    /// Whether no call is queued or in flight.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `origin` already has a call queued or in flight.
    pub(crate) fn contains(&self, origin: Origin) -> bool {
        self.by_origin.contains_key(&origin) || self.queued.iter().any(|c| c.origin == origin)
    }

    /// Keeps `call` until a worker is ready.
    pub(crate) fn queue(&mut self, call: NewCall) {
        self.queued.push_back(call);
    }

    /// Takes every queued call, oldest first.
    pub(crate) fn take_queued(&mut self) -> Vec<NewCall> {
        self.queued.drain(..).collect()
    }

    /// Records `call` as in flight and returns the frames that start it:
    /// the parts of its arguments, if they came in parts, then the call.
    pub(crate) fn start(&mut self, call: NewCall) -> Vec<Frame> {
        self.next_id += 1;
        let id = self.next_id;
        self.by_origin.insert(call.origin, id);
        let stream = call.reply.window();
        self.inflight.insert(
            id,
            InFlight {
                origin: call.origin,
                reply: call.reply,
                outstanding: (0, 0),
                parts: Partial::default(),
                target: call.target.clone(),
            },
        );
        let mut pieces = call.args;
        let last = pieces.pop().unwrap_or_default();
        let total = (pieces.iter().map(Bytes::len).sum::<usize>() + last.len()) as u64;
        let mut frames: Vec<Frame> = pieces
            .into_iter()
            .map(|bytes| Frame::Part {
                id,
                total,
                bytes: FrameBytes(bytes),
            })
            .collect();
        frames.push(Frame::Call {
            id,
            target: call.target,
            args: FrameBytes(last),
            stream,
            trace: call.trace,
        });
        frames
    }

    /// Keeps a part of worker call `id`'s result, of `total` bytes in all,
    /// if that is within `max`.
    pub(crate) fn deliver_part(
        &mut self,
        id: u64,
        total: u64,
        bytes: Bytes,
        max: usize,
    ) -> PartDelivery {
        let Some(call) = self.inflight.get_mut(&id) else {
            return PartDelivery::Unknown;
        };
        if total > max as u64 {
            return PartDelivery::TooLarge(
                RemoteError::new(
                    ErrorKind::PayloadTooLarge,
                    format!(
                        "the result of `{}` is {total} bytes, past the {max}-byte message limit",
                        call.target
                    ),
                )
                .with_details(
                    "return large data in pieces (a stream, or several calls), or raise \
                     the limit (`max_message_bytes` in SandboxConfig)",
                ),
            );
        }
        if matches!(call.reply, Reply::Host(_)) {
            // A host that reads parts gets each from here on, and the outcome
            // after them; for one that does not, the parts are kept here.
            let mut taken = self.inflight.remove(&id).expect("found above");
            if let Reply::Host(host) = taken.reply {
                taken.reply = match host.relay() {
                    Ok((parts, outcome)) => Reply::Relayed { parts, outcome },
                    Err(host) => Reply::Host(host),
                };
            }
            self.inflight.insert(id, taken);
        }
        let call = self.inflight.get_mut(&id).expect("found above");
        let delivered = match &call.reply {
            Reply::Host(_) | Reply::Unary(_) => call.parts.push(total as usize, bytes),
            Reply::Relayed { parts, .. } => call.parts.pass(total as usize, bytes).map(|bytes| {
                // A receiver that is gone went with its host, whose
                // disconnect ends the call.
                let _ = parts.send(ResultPart { total, bytes });
            }),
            Reply::Stream { .. } => {
                return PartDelivery::Violation("the worker sent a result part for a stream".into())
            }
        };
        match delivered {
            Ok(()) => PartDelivery::Kept,
            Err(why) => PartDelivery::Violation(format!("the worker's result parts: {why}")),
        }
    }

    /// Passes stream items of worker call `id` on, checking its window.
    pub(crate) fn deliver(&mut self, id: u64, items: Vec<ByteBuf>) -> Delivery {
        let Some(call) = self.inflight.get_mut(&id) else {
            return Delivery::Unknown;
        };
        let Reply::Stream { events, window } = &call.reply else {
            return Delivery::Violation("the worker sent stream items for a unary call".into());
        };
        let bytes: u64 = items.iter().map(|i| i.len() as u64).sum();
        call.outstanding.0 = call.outstanding.0.saturating_add(items.len() as u64);
        call.outstanding.1 = call.outstanding.1.saturating_add(bytes);
        // The worker checks for room before each item, so it may overshoot
        // the byte window by one item, which is at most one frame.
        if call.outstanding.0 > window.items
            || call.outstanding.1 > window.bytes.saturating_add(DEFAULT_MAX_FRAME as u64)
        {
            return Delivery::Violation(format!(
                "the worker ran past the stream window ({} items, {} bytes outstanding; window {} items, {} bytes)",
                call.outstanding.0, call.outstanding.1, window.items, window.bytes
            ));
        }
        // The receiver is gone only while the call is being torn down.
        let _ = events.send(StreamEvent::Items(items));
        Delivery::Delivered
    }

    /// Records that the host consumed part of the stream `origin` started;
    /// returns the worker call id and the ack to relay to it, cut down to
    /// what the worker has sent and the host not yet acknowledged: a host
    /// that acks more than it got must not give the worker credit past its
    /// window.
    pub(crate) fn ack(
        &mut self,
        origin: Origin,
        items: u64,
        bytes: u64,
    ) -> Option<(u64, u64, u64)> {
        let id = *self.by_origin.get(&origin)?;
        let call = self.inflight.get_mut(&id)?;
        let items = items.min(call.outstanding.0);
        let bytes = bytes.min(call.outstanding.1);
        call.outstanding.0 -= items;
        call.outstanding.1 -= bytes;
        Some((id, items, bytes))
    }

    /// Removes the call with worker id `id`; `None` if it already ended.
    pub(crate) fn finish(&mut self, id: u64) -> Option<Reply> {
        self.end(id).map(|call| call.reply)
    }

    /// Ends worker call `id` with its terminal `frame`; false if it
    /// already ended.
    pub(crate) fn finish_with(&mut self, id: u64, frame: Frame) -> bool {
        match self.end(id) {
            Some(call) => {
                call.reply.finish_with(frame, call.parts, &call.target);
                true
            }
            None => false,
        }
    }

    fn end(&mut self, id: u64) -> Option<InFlight> {
        let call = self.inflight.remove(&id)?;
        self.by_origin.remove(&call.origin);
        Some(call)
    }

    /// Removes the call `origin` asked for.
    pub(crate) fn cancel(&mut self, origin: Origin) -> Cancelled {
        if let Some(id) = self.by_origin.remove(&origin) {
            let call = self.inflight.remove(&id).expect("indexes agree");
            return Cancelled::InFlight(id, call.reply);
        }
        match self.queued.iter().position(|c| c.origin == origin) {
            Some(at) => Cancelled::Queued(self.queued.remove(at).expect("in range").reply),
            None => Cancelled::Unknown,
        }
    }

    /// Every call of `socket`, queued or in flight.
    pub(crate) fn origins_of(&self, socket: Sid) -> Vec<Origin> {
        let inflight = self.by_origin.keys().filter(|o| o.socket == socket);
        let queued = self.queued.iter().map(|c| &c.origin);
        inflight
            .chain(queued.filter(|o| o.socket == socket))
            .copied()
            .collect()
    }

    /// Removes every in-flight call, with its worker call id.
    pub(crate) fn take_inflight(&mut self) -> Vec<(u64, Reply)> {
        self.by_origin.clear();
        self.inflight.drain().map(|(id, c)| (id, c.reply)).collect()
    }

    /// Ends every call, in flight or queued, with `error` (nothing is left
    /// to answer them).
    pub(crate) fn fail_all(&mut self, error: &RemoteError) {
        for (_, reply) in self.take_inflight() {
            reply.fail(error.clone());
        }
        for call in self.take_queued() {
            call.reply.fail(error.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(socket: Sid, host_id: u64) -> (NewCall, oneshot::Receiver<Outcome>) {
        let (reply, rx) = oneshot::channel();
        let origin = Origin { socket, host_id };
        let call = NewCall {
            origin,
            target: "t".into(),
            args: vec![Bytes::from_static(&[1])],
            trace: None,
            reply: Reply::Unary(reply),
        };
        (call, rx)
    }

    #[test]
    fn streams_deliver_within_their_window_and_acks_reopen_it() {
        let sid = Sid::new();
        let origin = Origin {
            socket: sid,
            host_id: 1,
        };
        let mut table = CallTable::default();
        let (events, mut rx) = mpsc::unbounded_channel();
        let window = Window {
            items: 3,
            bytes: 1 << 20,
        };
        let frame = table.start(NewCall {
            origin,
            target: "t".into(),
            args: vec![],
            trace: None,
            reply: Reply::Stream { events, window },
        });
        let Some(Frame::Call { id, stream, .. }) = frame.into_iter().last() else {
            panic!("not a call frame")
        };
        assert_eq!(stream, Some(window));
        let item = |b: u8| ByteBuf::from(vec![b]);
        assert_eq!(
            table.deliver(id, vec![item(1), item(2)]),
            Delivery::Delivered
        );
        // An ack past what was delivered counts only what was.
        assert_eq!(table.ack(origin, 5, 100), Some((id, 2, 2)));
        assert_eq!(
            table.deliver(id, vec![item(3), item(4), item(5)]),
            Delivery::Delivered
        );
        assert!(matches!(
            table.deliver(id, vec![item(6)]),
            Delivery::Violation(_)
        ));
        assert_eq!(table.deliver(id + 1, vec![item(7)]), Delivery::Unknown);
        let mut got = Vec::new();
        while let Ok(StreamEvent::Items(batch)) = rx.try_recv() {
            got.extend(batch.into_iter().map(|b| b[0]));
        }
        assert_eq!(got, [1, 2, 3, 4, 5]);
        assert!(table.finish_with(id, Frame::End { id }));
        assert!(matches!(rx.try_recv(), Ok(StreamEvent::End)));
    }

    #[test]
    fn a_terminal_frame_of_the_wrong_shape_is_a_protocol_error() {
        let (c, mut rx) = call(Sid::new(), 1);
        let mut table = CallTable::default();
        let Some(Frame::Call { id, .. }) = table.start(c).pop() else {
            panic!("not a call frame")
        };
        assert!(matches!(table.deliver(id, vec![]), Delivery::Violation(_)));
        assert!(table.finish_with(id, Frame::End { id }));
        let err = rx.try_recv().unwrap().unwrap_err();
        assert_eq!(err.kind, ErrorKind::Protocol);
    }

    #[test]
    fn a_call_leaves_the_table_once() {
        let sid = Sid::new();
        let mut table = CallTable::default();
        let (c, _rx) = call(sid, 7);
        let Some(Frame::Call { id, .. }) = table.start(c).pop() else {
            panic!("not a call frame")
        };
        assert!(table.contains(Origin {
            socket: sid,
            host_id: 7
        }));
        assert!(table.finish(id).is_some());
        assert!(table.finish(id).is_none());
        assert!(matches!(
            table.cancel(Origin {
                socket: sid,
                host_id: 7
            }),
            Cancelled::Unknown
        ));
        assert!(table.is_empty());
    }

    #[test]
    fn large_payloads_go_out_in_parts_and_results_come_back_in_parts() {
        let (mut c, mut rx) = call(Sid::new(), 1);
        c.args = vec![Bytes::from_static(b"ab"), Bytes::from_static(b"c")];
        let mut table = CallTable::default();
        let frames = table.start(c);
        assert_eq!(frames.len(), 2);
        let Frame::Part { id, total: 3, .. } = frames[0] else {
            panic!("not a part: {:?}", frames[0])
        };
        let Frame::Call { args, .. } = &frames[1] else {
            panic!("not a call")
        };
        assert_eq!(&args[..], b"c");
        let part = |b: &'static [u8]| Bytes::from_static(b);
        assert!(matches!(
            table.deliver_part(id, 5, part(b"xyz"), 5),
            PartDelivery::Kept
        ));
        let last = Frame::Result {
            id,
            value: FrameBytes::from(b"w!".to_vec()),
        };
        assert!(table.finish_with(id, last));
        let value = rx.try_recv().unwrap().unwrap();
        assert_eq!(value.concat(), b"xyzw!");

        // Parts past their total end the call; so does a part for a stream.
        let (c, _rx) = call(Sid::new(), 2);
        let Some(Frame::Call { id, .. }) = table.start(c).pop() else {
            panic!("not a call frame")
        };
        assert!(matches!(
            table.deliver_part(id, 2, part(b"abc"), 5),
            PartDelivery::Violation(_)
        ));
        match table.deliver_part(id, 6, part(b"abc"), 5) {
            PartDelivery::TooLarge(e) => assert!(e.message.contains("`t`"), "{e}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            table.deliver_part(id + 9, 1, part(b"a"), 5),
            PartDelivery::Unknown
        ));
        let (events, _items) = mpsc::unbounded_channel();
        let window = Window::DEFAULT;
        let stream = NewCall {
            origin: Origin {
                socket: Sid::new(),
                host_id: 3,
            },
            target: "t".into(),
            args: vec![],
            trace: None,
            reply: Reply::Stream { events, window },
        };
        let Some(Frame::Call { id, .. }) = table.start(stream).pop() else {
            panic!("not a call frame")
        };
        assert!(matches!(
            table.deliver_part(id, 1, part(b"a"), 5),
            PartDelivery::Violation(_)
        ));
    }

    /// A call whose result's parts are relayed, with where its outcome and
    /// its parts go.
    fn relayed_call(
        host_id: u64,
    ) -> (
        NewCall,
        oneshot::Receiver<Outcome>,
        mpsc::UnboundedReceiver<ResultPart>,
    ) {
        let (outcome, rx) = oneshot::channel();
        let (parts, passed) = mpsc::unbounded_channel();
        let (mut call, _) = call(Sid::new(), host_id);
        call.reply = Reply::Relayed { parts, outcome };
        (call, rx, passed)
    }

    #[test]
    fn a_relayed_result_hands_each_part_on_as_it_arrives_and_ends_with_the_last() {
        let (relayed, mut rx, mut passed) = relayed_call(1);
        let mut table = CallTable::default();
        let Some(Frame::Call { id, .. }) = table.start(relayed).pop() else {
            panic!("not a call frame")
        };
        let part = |b: &'static [u8]| Bytes::from_static(b);
        assert!(matches!(
            table.deliver_part(id, 6, part(b"ab"), 10),
            PartDelivery::Kept
        ));
        // On its way before the next part, let alone the result, arrives.
        let first = passed.try_recv().unwrap();
        assert_eq!((first.total, &first.bytes[..]), (6, &b"ab"[..]));
        assert!(matches!(
            table.deliver_part(id, 6, part(b"cd"), 10),
            PartDelivery::Kept
        ));
        let last = Frame::Result {
            id,
            value: FrameBytes::from(b"ef".to_vec()),
        };
        assert!(table.finish_with(id, last));
        assert_eq!(&passed.try_recv().unwrap().bytes[..], b"cd");
        assert_eq!(rx.try_recv().unwrap().unwrap(), vec![part(b"ef")]);
        assert!(passed.try_recv().is_err(), "nothing after the outcome");

        // Parts that do not add up to their total fail the call.
        let (short, mut rx, _passed) = relayed_call(2);
        let Some(Frame::Call { id, .. }) = table.start(short).pop() else {
            panic!("not a call frame")
        };
        assert!(matches!(
            table.deliver_part(id, 6, part(b"ab"), 10),
            PartDelivery::Kept
        ));
        let last = Frame::Result {
            id,
            value: FrameBytes::from(b"c".to_vec()),
        };
        assert!(table.finish_with(id, last));
        let error = rx.try_recv().unwrap().unwrap_err();
        assert_eq!(error.kind, ErrorKind::Protocol, "{error}");
    }

    #[test]
    fn cancel_finds_queued_and_inflight_calls_per_socket() {
        let (a, b) = (Sid::new(), Sid::new());
        let mut table = CallTable::default();
        let (c1, _r1) = call(a, 1);
        let (c2, _r2) = call(a, 2);
        let (c3, _r3) = call(b, 1);
        table.start(c1);
        table.queue(c2);
        table.queue(c3);
        let mut mine = table.origins_of(a);
        mine.sort_by_key(|o| o.host_id);
        assert_eq!(mine.iter().map(|o| o.host_id).collect::<Vec<_>>(), [1, 2]);
        assert!(matches!(table.cancel(mine[0]), Cancelled::InFlight(1, _)));
        assert!(matches!(table.cancel(mine[1]), Cancelled::Queued(_)));
        assert_eq!(table.len(), 1);
        assert_eq!(table.take_queued().len(), 1);
        assert!(table.take_inflight().is_empty());
    }
}
