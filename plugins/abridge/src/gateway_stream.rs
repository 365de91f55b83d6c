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

use agentix::HostNamespace;
use http_body_util::BodyExt;
use serde_json::json;
use tokio::sync::watch;

use crate::anthropic_stream::StreamTranslator;
use crate::exchange::{StreamAck, StreamCancel, StreamHead, StreamItem, StreamPart, STREAM_WINDOW};
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
    /// the sandbox from a task of its own until it ends or `limit` passes.
    pub async fn start(
        &self,
        ns: HostNamespace,
        stream_id: String,
        opened: Opened,
        limit: Duration,
        translate: Option<StreamTranslator>,
    ) -> StreamHead {
        if opened.status != 200 {
            let (status, retry_after) = (opened.status, opened.retry_after.clone());
            let body = opened
                .whole_body()
                .await
                .unwrap_or_else(|e| json!({"error": {"message": e, "type": "upstream_error"}}));
            return StreamHead {
                status,
                retry_after,
                body: Some(body),
            };
        }
        let (control, watching) = watch::channel(Control::default());
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(stream_id.clone(), control);
        let pumps = self.clone();
        tokio::spawn(async move {
            let connection = opened.connection.clone();
            let mut seq = 0;
            let pumped = tokio::time::timeout(
                limit,
                pump(
                    &ns,
                    &stream_id,
                    opened.body,
                    watching.clone(),
                    &mut seq,
                    translate,
                ),
            )
            .await;
            if pumped.is_err() {
                let why = format!("the upstream did not finish within {limit:?}");
                // Past the window by one at most: the sandbox allows for it.
                let end = item(&stream_id, seq + 1, StreamPart::End(Some(why)));
                let _ = ns.emit(EVENT_STREAM_ITEM, end).await;
            }
            pumps
                .running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&stream_id);
            // Whatever the outcome the upstream connection is done: closing
            // it stops an upstream that is still generating.
            connection.abort();
        });
        StreamHead {
            status: 200,
            retry_after: None,
            body: None,
        }
    }
}

/// Sends the body's whole lines as they arrive (rewritten by `translate`,
/// if given), then the end; stops early when the agent goes away or the
/// sandbox cannot be reached. `seq` is the last item sent.
async fn pump(
    ns: &HostNamespace,
    id: &str,
    mut body: hyper::body::Incoming,
    mut watching: watch::Receiver<Control>,
    seq: &mut u64,
    mut translate: Option<StreamTranslator>,
) {
    let mut pending: Vec<u8> = Vec::new();
    let end = loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            _ = watching.wait_for(|c| c.cancelled) => return,
        };
        let lines = match frame {
            None => {
                let mut rest = String::from_utf8_lossy(&pending).into_owned();
                if let Some(translate) = translate.as_mut() {
                    rest = translate.feed(&rest) + &translate.finish();
                }
                if !rest.is_empty()
                    && !send(ns, id, seq, StreamPart::Lines(rest), &mut watching).await
                {
                    return;
                }
                break None;
            }
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
                String::from_utf8_lossy(&lines).into_owned()
            }
        };
        let lines = match translate.as_mut() {
            Some(translate) => translate.feed(&lines),
            None => lines,
        };
        if !lines.is_empty() && !send(ns, id, seq, StreamPart::Lines(lines), &mut watching).await {
            return;
        }
    };
    send(ns, id, seq, StreamPart::End(end), &mut watching).await;
}

/// Sends the next item once the window allows; false if the stream is over
/// for the sandbox (cancelled, or the sandbox unreachable).
async fn send(
    ns: &HostNamespace,
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
