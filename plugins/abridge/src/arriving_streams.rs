//! [`ArrivingStreams`]: the sandbox half's actor that owns every stream
//! whose items are arriving, and passes each item to its agent's response
//! body in order; [`Arrivals`]: what the endpoint holds of it.
//!
//! Supervised by nobody of its own: the endpoint starts it once per worker
//! with the `/abridge` namespace (on the worker's background actix
//! arbiter), and it lives as long as the worker. No children.
//!
//! A stream is entered in a table the endpoint shares with the actor
//! ([`Arrivals::expect`]) before its open request leaves, so it is known
//! before its first item comes; the actor takes it out of the table at that
//! item and owns it from then on. Entering it wakes no thread: told by
//! message, the arbiter's thread woke on the agent's way to its first
//! piece, and on a busy machine took the CPU from the request it was woken
//! for. Items are numbered: one that comes early waits for its turn, and
//! one too far ahead breaks its stream rather than being buffered without
//! bound.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use agentix::actix::{Actor, Addr, Context, Handler, Message};
use agentix::{Received, SandboxEnd};
use tokio::sync::mpsc;

use crate::exchange::{StreamItem, StreamPart, STREAM_WINDOW};
use crate::Abridge;

/// Items kept out of order before the stream is given up as broken: the
/// window, and the one end item the host may send past it.
const MOST_EARLY: u64 = STREAM_WINDOW + 1;

/// Streams whose open has left and whose first item the actor has not
/// taken yet: each one's way to its agent's response body, by id.
type Expected = Arc<Mutex<ExpectedStreams>>;
type ExpectedStreams = HashMap<String, mpsc::Sender<StreamPart>>;

/// Forgets stream `id`, which the actor took: its agent went away.
struct Forget {
    id: String,
}

impl Message for Forget {
    type Result = ();
}

/// The arriving streams of this worker, as the endpoint holds them; cheap
/// to clone.
#[derive(Clone)]
pub struct Arrivals {
    actor: Addr<ArrivingStreams>,
    expected: Expected,
}

impl Arrivals {
    /// Starts the actor, on the background arbiter of a worker.
    pub fn start() -> Self {
        let expected = Expected::default();
        let actor = agentix::start_actor({
            let expected = expected.clone();
            move |_| ArrivingStreams::new(expected)
        });
        Arrivals { actor, expected }
    }

    /// The actor, which takes the namespace's `stream:item`s.
    pub fn actor(&self) -> &Addr<ArrivingStreams> {
        &self.actor
    }

    /// Enters stream `id`, whose items go to `to_agent` (room for more than
    /// the window); call it before the stream's open leaves.
    pub fn expect(&self, id: String, to_agent: mpsc::Sender<StreamPart>) {
        lock(&self.expected).insert(id, to_agent);
    }

    /// Forgets stream `id`, which its agent left before its end.
    pub fn forget(&self, id: String) {
        // Still in the table, or taken by the actor at its first item.
        if lock(&self.expected).remove(&id).is_none() {
            self.actor.do_send(Forget { id });
        }
    }

    /// Forgets stream `id`, which ended: its end went through the actor,
    /// which let it go then, or it never had items (the upstream answered
    /// with an error), so only the table may hold it.
    pub fn ended(&self, id: &str) {
        lock(&self.expected).remove(id);
    }
}

fn lock(expected: &Expected) -> std::sync::MutexGuard<'_, ExpectedStreams> {
    expected.lock().unwrap_or_else(|p| p.into_inner())
}

/// The streams of this worker whose items are arriving, by id.
pub struct ArrivingStreams {
    streams: HashMap<String, Arriving>,
    expected: Expected,
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

impl ArrivingStreams {
    fn new(expected: Expected) -> Self {
        ArrivingStreams {
            streams: HashMap::new(),
            expected,
        }
    }

    /// Puts `item` in its place and passes on whatever is now in order.
    fn arrive(&mut self, item: StreamItem) {
        let id = item.stream_id;
        if !self.streams.contains_key(&id) {
            let Some(to_agent) = lock(&self.expected).remove(&id) else {
                tracing::debug!(stream = id, "abridge: item for a stream that ended");
                return;
            };
            let arriving = Arriving {
                next: 1,
                early: BTreeMap::new(),
                to_agent,
            };
            self.streams.insert(id.clone(), arriving);
        }
        let over = self
            .streams
            .get_mut(&id)
            .is_some_and(|stream| stream.take(item.seq, item.part));
        if over {
            self.streams.remove(&id);
        }
    }
}

impl Actor for ArrivingStreams {
    type Context = Context<Self>;
}

impl Handler<Forget> for ArrivingStreams {
    type Result = ();

    fn handle(&mut self, forget: Forget, _: &mut Context<Self>) {
        self.streams.remove(&forget.id);
    }
}

impl Handler<Received<SandboxEnd<Abridge>, StreamItem>> for ArrivingStreams {
    type Result = ();

    fn handle(&mut self, item: Received<SandboxEnd<Abridge>, StreamItem>, _: &mut Context<Self>) {
        self.arrive(item.event);
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

    fn item(id: &str, seq: u64, part: StreamPart) -> StreamItem {
        StreamItem {
            stream_id: id.into(),
            seq,
            part,
        }
    }

    #[test]
    fn a_stream_entered_before_its_open_gets_its_items_and_no_other_does() {
        let expected = Expected::default();
        let mut actor = ArrivingStreams::new(expected.clone());
        let (to_agent, mut agent) = mpsc::channel(2 * STREAM_WINDOW as usize);
        lock(&expected).insert("s".into(), to_agent);
        actor.arrive(item("other", 1, lines("not ours")));
        actor.arrive(item("s", 2, lines("b")));
        assert!(
            lock(&expected).is_empty(),
            "the first item takes the stream"
        );
        actor.arrive(item("s", 1, lines("a")));
        actor.arrive(item("s", 3, StreamPart::End(None)));
        assert!(actor.streams.is_empty(), "an ended stream is forgotten");
        actor.arrive(item("s", 4, lines("late")));
        let got: Vec<_> = std::iter::from_fn(|| agent.try_recv().ok()).collect();
        assert_eq!(got, vec![lines("a"), lines("b"), StreamPart::End(None)]);
    }

    #[test]
    fn a_stream_forgotten_before_its_first_item_leaves_nothing_behind() {
        let arrivals = Arrivals::start();
        let (to_agent, _agent) = mpsc::channel(2 * STREAM_WINDOW as usize);
        arrivals.expect("s".into(), to_agent);
        arrivals.forget("s".into());
        assert!(lock(&arrivals.expected).is_empty());
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
