//! The sandbox half of a streamed answer: [`relay`] asks the host to open
//! the upstream stream, answers the agent with the head's status and the
//! first lines it may carry, then writes the `stream:item`s the host sends
//! to the agent as server-sent events, in their order, as they come.
//!
//! The items go through the
//! [`ArrivingStreams`](crate::arriving_streams::ArrivingStreams) actor,
//! which passes them on in their order. The agent's pace sets the host's:
//! an acknowledgement goes back every few items written, and the host sends
//! no more than [`STREAM_WINDOW`] past it. An agent that disconnects drops
//! the response body, which tells the host to drop the upstream request.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agentix::{RemoteSioError, SandboxEnd, StreamExt};
use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::Response;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::arriving_streams::Arrivals;
use crate::exchange::{
    Api, StreamAbandon, StreamAck, StreamOpen, StreamPart, UpstreamAnswer, UpstreamRequest,
    STREAM_WINDOW,
};
use crate::Abridge;

/// A response body the endpoint sends: whole or streamed.
pub type AgentBody = UnsyncBoxBody<Bytes, Infallible>;

/// Items written between two acknowledgements.
const ACK_EVERY: u64 = STREAM_WINDOW / 4;
/// The number of this worker's next stream.
static NEXT_STREAM: AtomicU64 = AtomicU64::new(1);

/// Forgets a stream and, unless it ended, tells the host to stop it.
struct Abandon {
    id: String,
    handle: SandboxEnd<Abridge>,
    arrivals: Arrivals,
    ended: bool,
}

impl Drop for Abandon {
    fn drop(&mut self) {
        if self.ended {
            self.arrivals.ended(&self.id);
            return;
        }
        self.arrivals.forget(self.id.clone());
        self.handle.emit(&StreamAbandon {
            stream_id: self.id.clone(),
        });
    }
}

/// Answers a streamed request: the upstream's error whole, or its events
/// as they arrive.
pub async fn relay(
    handle: &SandboxEnd<Abridge>,
    arrivals: &Arrivals,
    request: UpstreamRequest<Box<RawValue>>,
    host_timeout: Duration,
) -> Response<AgentBody> {
    // Unique among this worker's streams and those of the worker before it
    // (the host may still be ending one of those).
    let id = format!(
        "{}-{}",
        std::process::id(),
        NEXT_STREAM.fetch_add(1, Ordering::Relaxed)
    );
    let api = request.api;
    let (to_agent, arriving) = mpsc::channel((2 * STREAM_WINDOW) as usize);
    // Before the open leaves: the first item comes after its answer.
    arrivals.expect(id.clone(), to_agent);
    let mut abandon = Abandon {
        id: id.clone(),
        handle: handle.clone(),
        arrivals: arrivals.clone(),
        ended: false,
    };
    let open = StreamOpen {
        stream_id: id,
        request,
    };
    let head = match handle.request_with_timeout(&open, host_timeout).await {
        Ok(head) => head,
        Err(e) => return whole(host_failed(e, host_timeout)),
    };
    if head.status != 200 {
        abandon.ended = true;
        return whole(UpstreamAnswer {
            status: head.status,
            body: head.body.unwrap_or(Value::Null),
            retry_after: head.retry_after,
        });
    }
    // The first lines, when they came with the head, go out with the
    // headers; they are not an item, so acknowledgements count without them.
    let first = head.first.map(|lines| Ok(Frame::data(Bytes::from(lines))));
    let items = agentix::stream::unfold(Some((arriving, abandon, 0u64)), move |state| async move {
        let (mut arriving, mut abandon, mut written) = state?;
        let part = arriving
            .recv()
            .await
            .unwrap_or_else(|| StreamPart::End(Some("the host stopped sending the stream".into())));
        let text = match part {
            StreamPart::Lines(lines) => lines,
            StreamPart::End(None) => {
                abandon.ended = true;
                return None;
            }
            StreamPart::End(Some(why)) => {
                abandon.ended = true;
                let event = Frame::data(Bytes::from(broken_stream_event(api, &why)));
                return Some((Ok(event), None));
            }
        };
        written += 1;
        if written % ACK_EVERY == 0 {
            abandon.handle.emit(&StreamAck {
                stream_id: abandon.id.clone(),
                seq: written,
            });
        }
        let event = Frame::data(Bytes::from(text));
        Some((Ok(event), Some((arriving, abandon, written))))
    });
    let events = agentix::stream::iter(first).chain(items);
    Response::builder()
        .header(hyper::header::CONTENT_TYPE, "text/event-stream")
        .header(hyper::header::CACHE_CONTROL, "no-cache")
        .body(BodyExt::boxed_unsync(StreamBody::new(events)))
        .unwrap_or_else(|_| Response::new(empty()))
}

/// The event that tells the agent its stream broke off, in its API's words.
fn broken_stream_event(api: Api, why: &str) -> String {
    match api {
        Api::Messages | Api::CountTokens => {
            let error = json!({"type": "error", "error": {"type": "api_error", "message": why}});
            format!("event: error\ndata: {error}\n\n")
        }
        Api::ChatCompletions | Api::Models => {
            let error = json!({"error": {"message": why, "type": "upstream_error"}});
            format!("data: {error}\n\n")
        }
    }
}

/// The answer when the host could not be asked.
pub fn host_failed(e: RemoteSioError, host_timeout: Duration) -> UpstreamAnswer {
    match e {
        RemoteSioError::Timeout { .. } => UpstreamAnswer::error(
            504,
            "upstream_timeout",
            format!("the host did not answer within {host_timeout:?}"),
        ),
        e => UpstreamAnswer::error(
            502,
            "gateway_unreachable",
            format!(
                "the host's abridge gateway did not answer ({e}); register \
                 a Gateway's namespace() on this sandbox"
            ),
        ),
    }
}

/// A whole JSON answer.
pub fn whole(answer: UpstreamAnswer) -> Response<AgentBody> {
    let status =
        hyper::StatusCode::from_u16(answer.status).unwrap_or(hyper::StatusCode::BAD_GATEWAY);
    let mut response = Response::builder()
        .status(status)
        .header(hyper::header::CONTENT_TYPE, "application/json");
    if let Some(retry_after) = &answer.retry_after {
        response = response.header(hyper::header::RETRY_AFTER, retry_after.as_str());
    }
    let body = http_body_util::Full::new(Bytes::from(answer.body.to_string()));
    response
        .body(BodyExt::boxed_unsync(body))
        .unwrap_or_else(|_| Response::new(empty()))
}

fn empty() -> AgentBody {
    BodyExt::boxed_unsync(http_body_util::Empty::new())
}
