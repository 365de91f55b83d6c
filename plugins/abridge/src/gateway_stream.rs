//! The host half of a streamed answer: [`StreamPumps`] opens the upstream
//! request, answers the sandbox's `stream` request with the status, then
//! pumps the body to the sandbox as numbered `stream:item`s, at most
//! [`STREAM_WINDOW`] ahead of what the sandbox has written to its agent.
//!
//! A `stream:cancel` (the agent went away), a lost connection to the
//! sandbox or the gateway's timeout stop the pump and close the upstream
//! connection, so the upstream stops generating.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentix::HostNamespaceHandle;
use http_body_util::BodyExt;
use serde_json::json;
use tokio::sync::watch;

use crate::anthropic_stream::StreamTranslator;
use crate::exchange::{StreamAck, StreamCancel, StreamHead, StreamItem, StreamPart, STREAM_WINDOW};
use crate::observation::Observation;
use crate::upstream::Opened;
use crate::EVENT_STREAM_ITEM;

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

    /// Records a `stream:cancel`.
    pub fn cancel(&self, cancel: StreamCancel) {
        self.update(&cancel.stream_id, |c| c.cancelled = true);
    }

    fn update(&self, id: &str, change: impl FnOnce(&mut Control)) {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        match running.get(id) {
            Some(control) => control.send_modify(change),
            None => tracing::debug!(stream = id, "word about a stream that has ended"),
        }
    }

    /// The head for an opened upstream answer; on 200 its body is pumped to
    /// the sandbox from a task of its own, which also ends the observation
    /// (else it is handed back to be ended with the head).
    pub async fn start(
        &self,
        ns: HostNamespaceHandle,
        stream_id: String,
        opened: Opened,
        pumping: Pumping,
    ) -> (StreamHead, Option<Observation>) {
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
            let head = StreamHead {
                status,
                retry_after,
                body: Some(body),
            };
            return (head, Some(pumping.watch));
        }
        let (control, watching) = watch::channel(Control::default());
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(stream_id.clone(), control);
        let pumps = self.clone();
        tokio::spawn(async move {
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
            let pumped = tokio::time::timeout(
                limit,
                pump(&ns, &stream_id, opened.body, watching.clone(), &mut state),
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
                let _ = ns.emit(EVENT_STREAM_ITEM, end).await;
                state.end = Some(why);
            }
            pumps
                .running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&stream_id);
            drop(slot);
            let sent = state.watch.recording().then_some(state.sent);
            state.watch.end(200, None, sent, state.end).await;
        });
        let head = StreamHead {
            status: 200,
            retry_after: None,
            body: None,
        };
        (head, None)
    }
}

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

/// Sends the body's whole lines as they arrive (rewritten by the state's
/// translator, if any), then the end; stops early when the agent goes away
/// or the sandbox cannot be reached.
async fn pump(
    ns: &HostNamespaceHandle,
    id: &str,
    mut body: hyper::body::Incoming,
    mut watching: watch::Receiver<Control>,
    state: &mut PumpState,
) {
    let mut pending: Vec<u8> = Vec::new();
    let end = loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            _ = watching.wait_for(|c| c.cancelled) => {
                state.end = Some("the agent went away".into());
                return;
            }
        };
        let (lines, last) = match frame {
            None => (String::from_utf8_lossy(&pending).into_owned(), true),
            Some(Err(e)) => break Some(format!("the upstream broke off: {e}")),
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                pending.extend_from_slice(&data);
                // Whole lines only: an event is never cut inside a character.
                let Some(cut) = pending.iter().rposition(|&b| b == b'\n') else {
                    continue;
                };
                let lines: Vec<u8> = pending.drain(..=cut).collect();
                (String::from_utf8_lossy(&lines).into_owned(), false)
            }
        };
        note_usage(&lines, &mut state.watch);
        let lines = match state.translate.as_mut() {
            Some(translate) if last => translate.feed(&lines) + &translate.finish(),
            Some(translate) => translate.feed(&lines),
            None => lines,
        };
        if !lines.is_empty() {
            state.watch.first_piece();
            if state.watch.recording() && state.sent.len() < MOST_RECORDED {
                state.sent.push_str(&lines);
            }
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
        if last {
            break None;
        }
    };
    state.end = end.clone();
    send(ns, id, &mut state.seq, StreamPart::End(end), &mut watching).await;
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
    ns: &HostNamespaceHandle,
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
    ns.emit(EVENT_STREAM_ITEM, item(id, next, part))
        .await
        .is_ok()
}

fn item(id: &str, seq: u64, part: StreamPart) -> serde_json::Value {
    serde_json::to_value(StreamItem {
        stream_id: id.to_owned(),
        seq,
        part,
    })
    .unwrap_or(serde_json::Value::Null)
}
