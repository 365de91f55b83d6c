//! [`ArrivingStreams`]: the sandbox half's actor that owns every stream
//! whose items are arriving, and passes each item to its agent's response
//! body in order.
//!
//! Supervised by nobody of its own: the endpoint starts it once per worker
//! with the `/abridge` namespace (on the worker's background actix
//! arbiter), and it lives as long as the worker. No children.
//!
//! [`Expect`] is sent before a stream's open request leaves, and items come
//! through the same mailbox, so the table knows a stream before its first
//! item. Items are numbered: one that comes early waits for its turn, and
//! one too far ahead breaks its stream rather than being buffered without
//! bound.

use std::collections::{BTreeMap, HashMap};

use agentix::actix::{Actor, Context, Handler, Message};
use agentix::{NamespaceEvent, SandboxNamespaceHandle};
use tokio::sync::mpsc;

use crate::exchange::{StreamItem, StreamPart, STREAM_WINDOW};

/// Items kept out of order before the stream is given up as broken: the
/// window, and the one end item the host may send past it.
const MOST_EARLY: u64 = STREAM_WINDOW + 1;

/// Starts taking items for stream `id`, to `to_agent` (room for more than
/// the window).
pub struct Expect {
    /// The stream's id.
    pub id: String,
    /// Its items, in order, to the agent's response body.
    pub to_agent: mpsc::Sender<StreamPart>,
}

impl Message for Expect {
    type Result = ();
}

/// Forgets stream `id`: its agent went away, or it ended.
pub struct Forget {
    /// The stream's id.
    pub id: String,
}

impl Message for Forget {
    type Result = ();
}

/// The streams of this worker whose items are arriving, by id.
#[derive(Default)]
pub struct ArrivingStreams {
    streams: HashMap<String, Arriving>,
}

/// One stream's items on their way to the agent.
struct Arriving {
    /// The number of the next item the agent gets.
    next: u64,
    /// Items that came before their turn.
    early: BTreeMap<u64, StreamPart>,
    /// Items in order, to the response body.
    to_agent: mpsc::Sender<StreamPart>,
}

impl Actor for ArrivingStreams {
    type Context = Context<Self>;
}

impl Handler<Expect> for ArrivingStreams {
    type Result = ();

    fn handle(&mut self, expect: Expect, _: &mut Context<Self>) {
        let arriving = Arriving {
            next: 1,
            early: BTreeMap::new(),
            to_agent: expect.to_agent,
        };
        self.streams.insert(expect.id, arriving);
    }
}

impl Handler<Forget> for ArrivingStreams {
    type Result = ();

    fn handle(&mut self, forget: Forget, _: &mut Context<Self>) {
        self.streams.remove(&forget.id);
    }
}

impl Handler<NamespaceEvent<SandboxNamespaceHandle>> for ArrivingStreams {
    type Result = ();

    /// A `stream:item`: puts it in its place and passes on whatever is now
    /// in order.
    fn handle(&mut self, event: NamespaceEvent<SandboxNamespaceHandle>, _: &mut Context<Self>) {
        let item: StreamItem = match serde_json::from_value(event.data) {
            Ok(item) => item,
            Err(e) => {
                tracing::debug!("abridge: malformed stream item dropped: {e}");
                return;
            }
        };
        let Some(stream) = self.streams.get_mut(&item.stream_id) else {
            tracing::debug!(
                stream = item.stream_id,
                "abridge: item for a stream that ended"
            );
            return;
        };
        if stream.take(item.seq, item.part) {
            self.streams.remove(&item.stream_id);
        }
    }
}

impl Arriving {
    /// Takes item `seq`; true when the stream is over (ended, broken, or
    /// its agent gone).
    fn take(&mut self, seq: u64, part: StreamPart) -> bool {
        if seq < self.next {
            return false;
        }
        if seq >= self.next + MOST_EARLY {
            let why = format!(
                "the host sent item {seq} while item {} was awaited",
                self.next
            );
            let _ = self.to_agent.try_send(StreamPart::End(Some(why)));
            return true;
        }
        self.early.insert(seq, part);
        while let Some(part) = self.early.remove(&self.next) {
            self.next += 1;
            let over = matches!(part, StreamPart::End(_));
            // Room is certain: the channel holds more than the window.
            if self.to_agent.try_send(part).is_err() || over {
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_stream() -> (Arriving, mpsc::Receiver<StreamPart>) {
        let (to_agent, agent) = mpsc::channel(2 * STREAM_WINDOW as usize);
        let stream = Arriving {
            next: 1,
            early: BTreeMap::new(),
            to_agent,
        };
        (stream, agent)
    }

    fn lines(text: &str) -> StreamPart {
        StreamPart::Lines(text.into())
    }

    #[test]
    fn items_reach_the_agent_in_order_whatever_order_they_arrive_in() {
        let (mut stream, mut agent) = new_stream();
        assert!(!stream.take(2, lines("b")));
        assert!(agent.try_recv().is_err(), "item 2 waits for item 1");
        assert!(!stream.take(1, lines("a")));
        assert!(!stream.take(1, lines("a again")), "a repeat is ignored");
        assert!(stream.take(3, StreamPart::End(None)));
        let got: Vec<_> = std::iter::from_fn(|| agent.try_recv().ok()).collect();
        assert_eq!(got, vec![lines("a"), lines("b"), StreamPart::End(None)]);
    }

    #[test]
    fn an_item_too_far_ahead_breaks_its_stream() {
        let (mut stream, mut agent) = new_stream();
        assert!(stream.take(1 + MOST_EARLY, lines("far")));
        match agent.try_recv() {
            Ok(StreamPart::End(Some(why))) => assert!(why.contains("while item 1")),
            other => panic!("expected a broken stream, got {other:?}"),
        }
    }
}
