//! The host half of a streamed answer: [`StreamPumps`] opens the upstream
//! request and makes the head that answers the sandbox's `stream` request:
//! the status and, when they come within 200 ms (`FIRST_LINES_WAIT`), the first
//! lines, which an agent waits on most. Once the head is sent, a [`Pump`]
//! sends the rest of the body as numbered `stream:item`s, at most
//! [`STREAM_WINDOW`] ahead of what the sandbox has written to its agent.
//! Each item carries the whole lines that have arrived by then, up to
//! 16 KiB, so a burst travels in a few items; a line longer than 64 MiB
//! ends the stream with an error.
//!
//! A stream is registered ([`StreamPumps::register`]) as soon as the sandbox
//! asks for it, so a `stream:abandon` (the agent went away) is heard even
//! while the upstream has not answered yet. A cancel, a lost connection to
//! the sandbox or the gateway's timeout stop the pump, or the open, and
//! close the upstream connection, so the upstream stops generating.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use agentix::HostEnd;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame};
use serde_json::json;
use tokio::sync::watch;

use crate::anthropic_stream::StreamTranslator;
use crate::exchange::{
    StreamAbandon, StreamAck, StreamHead, StreamItem, StreamPart, UpstreamAnswer, STREAM_WINDOW,
};
use crate::observation::Observation;
use crate::upstream::{Opened, MAX_ANSWER};
use crate::Abridge;

/// What the sandbox has said about one stream so far.
#[derive(Debug, Clone, Copy, Default)]
struct Control {
    /// The last item it wrote to the agent.
    acked: u64,
    /// Whether the agent went away.
    cancelled: bool,
}

/// The streams of one sandbox's `/abridge`, by id.
#[derive(Clone, Default)]
pub struct StreamPumps {
    running: Arc<Mutex<HashMap<String, watch::Sender<Control>>>>,
}

impl StreamPumps {
    /// Records a `stream:ack`.
    pub fn ack(&self, ack: StreamAck) {
        self.update(&ack.stream_id, |c| c.acked = c.acked.max(ack.seq));
    }

    /// Records a `stream:abandon`.
    pub fn cancel(&self, cancel: StreamAbandon) {
        self.update(&cancel.stream_id, |c| c.cancelled = true);
    }

    /// Registers a stream the moment the sandbox asks for it, before its
    /// upstream is even asked: a `stream:abandon` that follows at once (the
    /// agent left while the upstream was still silent) then finds it. The
    /// stream stays known until the returned control is dropped.
    pub fn register(&self, stream_id: String) -> StreamControl {
        let (control, watching) = watch::channel(Control::default());
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(stream_id.clone(), control);
        StreamControl {
            stream_id,
            watching,
            pumps: self.clone(),
        }
    }

    fn update(&self, id: &str, change: impl FnOnce(&mut Control)) {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        match running.get(id) {
            Some(control) => control.send_modify(change),
            None => tracing::debug!(stream = id, "word about a stream that has ended"),
        }
    }

    /// The head for an opened upstream answer: on 200 with the [`Pump`]
    /// that sends its body to the sandbox and ends the observation, else
    /// with the observation, to be ended with the head.
    pub async fn start(
        ns: HostEnd<Abridge>,
        control: StreamControl,
        opened: Opened,
        pumping: Pumping,
    ) -> Started {
        if opened.status != 200 {
            let (status, retry_after) = (opened.status, opened.retry_after.clone());
            let limit = pumping.limit;
            let body = match tokio::time::timeout(limit, opened.whole_body()).await {
                Ok(Ok(body)) => body,
                Ok(Err(why)) => json!({"error": {"message": why, "type": "upstream_error"}}),
                Err(_) => json!({"error": {
                    "message": format!("the upstream's error did not arrive within {limit:?}"),
                    "type": "upstream_timeout",
                }}),
            };
            let head = StreamHead::whole(UpstreamAnswer {
                status,
                body,
                retry_after,
            });
            return Started::Answered(head, Box::new(pumping.watch));
        }
        let Pumping {
            limit,
            translate,
            watch,
            slot,
        } = pumping;
        let mut state = PumpState {
            seq: 0,
            translate,
            watch,
            sent: String::new(),
            end: None,
        };
        let mut body = UpstreamLines::new(opened.body);
        // The first lines ride with the head when they come soon: one trip
        // to the sandbox instead of two for the piece an agent waits on.
        let (first, held) =
            match tokio::time::timeout(FIRST_LINES_WAIT, state.next_piece(&mut body)).await {
                Ok(Piece::Lines(lines)) => (Some(lines), None),
                Ok(end) => (None, Some(end)),
                Err(_) => (None, None),
            };
        let head = StreamHead {
            status: 200,
            retry_after: None,
            body: None,
            first,
        };
        let pump = Pump {
            ns,
            control,
            body,
            held,
            state,
            limit,
            slot,
        };
        Started::Streaming(head, Box::new(pump))
    }
}

/// What [`StreamPumps::start`] made of an opened upstream answer.
pub enum Started {
    /// Not a stream: the head carries the whole answer; the exchange's
    /// observation is to be ended with it.
    Answered(StreamHead, Box<Observation>),
    /// A stream: the head, then the pump to run once the head is sent.
    Streaming(StreamHead, Box<Pump>),
}

/// One stream's place among the running ones, from the sandbox's open to
/// the pump's end; dropping it forgets the stream.
pub struct StreamControl {
    stream_id: String,
    watching: watch::Receiver<Control>,
    pumps: StreamPumps,
}

impl StreamControl {
    /// Resolves when the agent has gone away (a `stream:abandon` came); never
    /// otherwise, so it can be raced against the upstream's answer.
    pub async fn cancelled(&self) {
        let mut watching = self.watching.clone();
        if watching.wait_for(|c| c.cancelled).await.is_err() {
            // The sender lives in `running` as long as this control does.
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for StreamControl {
    fn drop(&mut self) {
        self.pumps
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.stream_id);
    }
}

/// One stream's body on its way to the sandbox. Run after the head is
/// sent, so the items never compete with it on the way there.
pub struct Pump {
    ns: HostEnd<Abridge>,
    control: StreamControl,
    body: UpstreamLines,
    /// A piece read before the head was sent, to go first.
    held: Option<Piece>,
    state: PumpState,
    limit: Duration,
    slot: tokio::sync::OwnedSemaphorePermit,
}

impl Pump {
    /// Sends the body as items within the stream's time limit, then ends
    /// the exchange's observation and frees its slot.
    pub async fn run(self) {
        let Pump {
            ns,
            control,
            body,
            held,
            mut state,
            limit,
            slot,
        } = self;
        let stream_id = control.stream_id.clone();
        let watching = control.watching.clone();
        let pumped = tokio::time::timeout(
            limit,
            pump(&ns, &stream_id, body, held, watching, &mut state),
        )
        .await;
        if pumped.is_err() {
            let why = format!("the upstream did not finish within {limit:?}");
            // Past the window by one at most: the sandbox allows for it.
            let end = item(
                &stream_id,
                state.seq + 1,
                StreamPart::End(Some(why.clone())),
            );
            let _ = ns.emit(&end).await;
            state.end = Some(why);
        }
        drop(control);
        drop(slot);
        let sent = state.watch.recording().then_some(state.sent);
        state.watch.end(200, None, sent, state.end).await;
    }
}

/// How long the head waits for the stream's first lines to take them
/// along. A model slow to start gets its headers after this and its first
/// lines as an item; the wait never delays the lines themselves.
const FIRST_LINES_WAIT: Duration = Duration::from_millis(200);

/// How to pump one stream.
pub struct Pumping {
    /// The longest the whole stream may take.
    pub limit: Duration,
    /// Rewrites the events for another API, if the agent speaks one.
    pub translate: Option<StreamTranslator>,
    /// The exchange's span and record.
    pub watch: Observation,
    /// The sandbox's slot for this request, held until the stream ends.
    pub slot: tokio::sync::OwnedSemaphorePermit,
}

/// A pump's progress, kept outside it so a timeout can end the stream.
struct PumpState {
    /// The last item sent.
    seq: u64,
    translate: Option<StreamTranslator>,
    watch: Observation,
    /// What the agent was sent, for the record.
    sent: String,
    /// Why the stream ended early, if it did.
    end: Option<String>,
}

/// What the agent gets next.
enum Piece {
    /// Whole lines, never empty.
    Lines(String),
    /// The end: cleanly (`None`) or why the upstream broke off.
    End(Option<String>),
}

/// The upstream's body, cut into whole lines: an event is never cut
/// inside a character.
struct UpstreamLines {
    body: hyper::body::Incoming,
    /// Bytes past the last whole line.
    pending: Vec<u8>,
    /// How much of `pending` is known to hold no line's end.
    scanned: usize,
    /// Whether the body has ended, cleanly (`pending` then holds its rest).
    ended: bool,
    /// Why the upstream broke off, told once the lines before it are out.
    broken: Option<String>,
    /// Whether the end or the break has been told.
    done: bool,
}

/// Most bytes one read gathers from what the upstream has already sent:
/// a burst (a fast model, a backlog after a slow agent) goes to the
/// sandbox in a few items instead of one per upstream write, and an item
/// stays small enough that a stream's window holds about 1 MiB.
const MOST_GATHERED: usize = 16 << 10;

impl UpstreamLines {
    fn new(body: hyper::body::Incoming) -> Self {
        UpstreamLines {
            body,
            pending: Vec::new(),
            scanned: 0,
            ended: false,
            broken: None,
            done: false,
        }
    }

    fn take(&mut self, frame: Option<Result<Frame<bytes::Bytes>, hyper::Error>>) {
        match frame {
            None => self.ended = true,
            Some(Err(e)) => self.broken = Some(format!("the upstream broke off: {e}")),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    self.pending.extend_from_slice(&data);
                }
            }
        }
    }

    fn reading(&self) -> bool {
        !self.ended && self.broken.is_none()
    }

    /// Takes what the upstream has already sent, up to [`MOST_GATHERED`],
    /// without waiting for more. The body's connection task decodes one
    /// piece at a time, so it gets a turn (a yield) before each look.
    async fn gather(&mut self) {
        while self.reading() && self.pending.len() < MOST_GATHERED {
            let frame = match self.arrived().await {
                Poll::Ready(frame) => frame,
                Poll::Pending => {
                    tokio::task::yield_now().await;
                    match self.arrived().await {
                        Poll::Ready(frame) => frame,
                        Poll::Pending => return,
                    }
                }
            };
            self.take(frame);
        }
    }

    /// The body's next frame if it has come, without waiting for it.
    async fn arrived(&mut self) -> Poll<Option<Result<Frame<bytes::Bytes>, hyper::Error>>> {
        std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut self.body).poll_frame(cx))).await
    }

    /// The next whole lines and whether they are the last; an error if the
    /// upstream broke off, after the whole lines that came before it.
    /// Cancel-safe: what arrived stays in `pending`.
    async fn next(&mut self) -> Option<Result<(String, bool), String>> {
        loop {
            if self.done {
                return None;
            }
            if self.reading() {
                let frame = self.body.frame().await;
                self.take(frame);
                self.gather().await;
            }
            if self.ended {
                self.done = true;
                let rest = std::mem::take(&mut self.pending);
                return Some(Ok((String::from_utf8_lossy(&rest).into_owned(), true)));
            }
            // Only what came since the last look: a long line is scanned
            // once, not once per piece.
            let fresh = &self.pending[self.scanned..];
            if let Some(cut) = fresh.iter().rposition(|&b| b == b'\n') {
                let lines: Vec<u8> = self.pending.drain(..=self.scanned + cut).collect();
                self.scanned = 0;
                return Some(Ok((String::from_utf8_lossy(&lines).into_owned(), false)));
            }
            self.scanned = self.pending.len();
            if let Some(why) = self.broken.take() {
                self.done = true;
                return Some(Err(why));
            }
            if self.pending.len() > MAX_ANSWER {
                // Dropping the body then closes the upstream connection.
                self.done = true;
                self.pending = Vec::new();
                self.scanned = 0;
                return Some(Err(format!(
                    "the upstream sent over {} MiB without ending a line",
                    MAX_ANSWER >> 20
                )));
            }
        }
    }
}

impl PumpState {
    /// The next piece for the agent: lines as it should see them (usage
    /// noted, translated, recorded), or the end. Cancel-safe.
    async fn next_piece(&mut self, body: &mut UpstreamLines) -> Piece {
        loop {
            let (lines, last) = match body.next().await {
                None => return Piece::End(None),
                Some(Err(why)) => return Piece::End(Some(why)),
                Some(Ok(next)) => next,
            };
            note_usage(&lines, &mut self.watch);
            let lines = match self.translate.as_mut() {
                Some(translate) if last => translate.feed(&lines) + &translate.finish(),
                Some(translate) => translate.feed(&lines),
                None => lines,
            };
            if !lines.is_empty() {
                self.watch.first_piece();
                if self.watch.recording() && self.sent.len() < MOST_RECORDED {
                    self.sent.push_str(&lines);
                }
                return Piece::Lines(lines);
            }
        }
    }
}

/// Sends the body's pieces as they arrive, `held` first, then the end;
/// stops early when the agent goes away or the sandbox cannot be reached.
async fn pump(
    ns: &HostEnd<Abridge>,
    id: &str,
    mut body: UpstreamLines,
    mut held: Option<Piece>,
    mut watching: watch::Receiver<Control>,
    state: &mut PumpState,
) {
    loop {
        let piece = match held.take() {
            Some(piece) => piece,
            None => tokio::select! {
                piece = state.next_piece(&mut body) => piece,
                _ = watching.wait_for(|c| c.cancelled) => {
                    state.end = Some("the agent went away".into());
                    return;
                }
            },
        };
        match piece {
            Piece::Lines(lines) => {
                if !send(
                    ns,
                    id,
                    &mut state.seq,
                    StreamPart::Lines(lines),
                    &mut watching,
                )
                .await
                {
                    state.end = Some("the sandbox stopped listening".into());
                    return;
                }
            }
            Piece::End(end) => {
                state.end = end.clone();
                send(ns, id, &mut state.seq, StreamPart::End(end), &mut watching).await;
                return;
            }
        }
    }
}

/// Most of a stream's text kept for its record.
const MOST_RECORDED: usize = 16 << 20;

/// Takes token counts from any OpenAI chunk in `lines` that carries usage.
fn note_usage(lines: &str, watch: &mut Observation) {
    if !lines.contains("\"usage\"") {
        return;
    }
    for data in lines.lines().filter_map(|l| l.strip_prefix("data:")) {
        if let Ok(chunk) = serde_json::from_str::<serde_json::Value>(data.trim()) {
            // OpenAI's last chunk and Anthropic's message_delta carry it at
            // the top, Anthropic's message_start in its message.
            for usage in [&chunk["usage"], &chunk["message"]["usage"]] {
                if usage.is_object() {
                    watch.usage(usage);
                }
            }
        }
    }
}

/// Sends the next item once the window allows; false if the stream is over
/// for the sandbox (cancelled, or the sandbox unreachable).
async fn send(
    ns: &HostEnd<Abridge>,
    id: &str,
    seq: &mut u64,
    part: StreamPart,
    watching: &mut watch::Receiver<Control>,
) -> bool {
    let next = *seq + 1;
    let room = watching
        .wait_for(|c| c.cancelled || next <= c.acked + STREAM_WINDOW)
        .await
        .map(|c| !c.cancelled)
        .unwrap_or(false);
    if !room {
        return false;
    }
    *seq = next;
    ns.emit(&item(id, next, part)).await.is_ok()
}

fn item(id: &str, seq: u64, part: StreamPart) -> StreamItem {
    StreamItem {
        stream_id: id.to_owned(),
        seq,
        part,
    }
}
