//! [`EventRoute`]: messages from code that cannot wait (a namespace's
//! dispatch, a log listener) to one actor, in order, through a bounded
//! queue.
//!
//! Such code hands each message over as it arrives and must not wait for
//! a handler (its receive path carries everything else too). A message
//! goes straight into the actor's mailbox while the mailbox has room and
//! nothing is queued before it. Otherwise it goes into a queue of
//! [`ROUTE_QUEUE`] and one task moves the queue into the mailbox, one
//! message after the other, waiting while it is full: the actor sees them
//! in the order they arrived, and a slow actor fills its mailbox, then the
//! queue; past that, messages are dropped with an error line (the caller
//! says what was dropped), never buffered without bound.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use actix::dev::SendError;
use actix::{Message, Recipient};
use tokio::sync::mpsc;

/// Messages that may wait for a busy actor before new ones are dropped.
/// Large, because a receive loop can hand over a whole burst before the
/// pump (often on the same thread) runs at all; the channel allocates as
/// it fills, so the bound costs nothing until it is used.
pub const ROUTE_QUEUE: usize = 65_536;

/// A message for an actor of one [`EventRoute`].
pub trait Routed: Message<Result = ()> + Send + 'static {}

impl<M: Message<Result = ()> + Send + 'static> Routed for M {}

/// Delivers messages to one actor in order; cheap to clone.
pub struct EventRoute<M: Routed> {
    recipient: Recipient<M>,
    /// Started with the first message that must wait, on the runtime that
    /// pushes it.
    queue: Arc<OnceLock<mpsc::Sender<M>>>,
    /// Messages in the queue or being moved from it: while there are any,
    /// a new message queues behind them.
    queued: Arc<AtomicUsize>,
}

impl<M: Routed> Clone for EventRoute<M> {
    fn clone(&self) -> Self {
        EventRoute {
            recipient: self.recipient.clone(),
            queue: self.queue.clone(),
            queued: self.queued.clone(),
        }
    }
}

/// Why [`EventRoute::push`] dropped a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// The actor is [`ROUTE_QUEUE`] messages behind.
    Behind,
    /// The actor has stopped.
    Stopped,
}

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Dropped::Behind => "the actor handling it is a whole queue behind",
            Dropped::Stopped => "the actor handling it has stopped",
        })
    }
}

impl<M: Routed> EventRoute<M> {
    /// A route to `recipient`.
    pub fn new(recipient: Recipient<M>) -> Self {
        EventRoute {
            recipient,
            queue: Arc::new(OnceLock::new()),
            queued: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Queues `msg` for the actor (call it in arrival order, inside a tokio
    /// runtime); gives it back, with the reason, when it had to be dropped,
    /// so the caller can say what was lost.
    pub fn push(&self, msg: M) -> Result<(), (M, Dropped)> {
        // The queue's task hands a message over before it stops counting
        // it, so a message that skips the queue never overtakes one in it.
        let msg = if self.queued.load(Ordering::Acquire) == 0 {
            match self.recipient.try_send(msg) {
                Ok(()) => return Ok(()),
                Err(SendError::Full(msg)) => msg,
                Err(SendError::Closed(msg)) => return Err((msg, Dropped::Stopped)),
            }
        } else {
            msg
        };
        let queue = self.queue.get_or_init(|| {
            let (tx, rx) = mpsc::channel(ROUTE_QUEUE);
            tokio::spawn(pump(self.recipient.clone(), rx, self.queued.clone()));
            tx
        });
        self.queued.fetch_add(1, Ordering::AcqRel);
        queue.try_send(msg).map_err(|e| {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            match e {
                mpsc::error::TrySendError::Full(msg) => (msg, Dropped::Behind),
                mpsc::error::TrySendError::Closed(msg) => (msg, Dropped::Stopped),
            }
        })
    }
}

async fn pump<M: Routed>(
    recipient: Recipient<M>,
    mut queue: mpsc::Receiver<M>,
    queued: Arc<AtomicUsize>,
) {
    while let Some(msg) = queue.recv().await {
        // Straight into the mailbox while it has room: awaiting each
        // handler's reply would cost two thread wakeups per message. A full
        // mailbox is waited on, so order holds and nothing grows unbounded.
        let delivered = match recipient.try_send(msg) {
            Ok(()) => true,
            Err(SendError::Full(msg)) => recipient.send(msg).await.is_ok(),
            Err(SendError::Closed(_)) => false,
        };
        queued.fetch_sub(1, Ordering::AcqRel);
        if !delivered {
            // The queue closes with this task: later pushes say so.
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::namespace_messages::NamespaceEvent;
    use actix::prelude::*;

    #[derive(Default)]
    struct Slow {
        seen: Vec<String>,
    }

    impl Actor for Slow {
        type Context = Context<Self>;
    }

    impl Handler<NamespaceEvent<()>> for Slow {
        type Result = ();
        fn handle(&mut self, msg: NamespaceEvent<()>, _: &mut Context<Self>) {
            std::thread::sleep(std::time::Duration::from_micros(50));
            self.seen.push(msg.data.to_string());
        }
    }

    #[derive(Message)]
    #[rtype(result = "Vec<String>")]
    struct Seen;

    impl Handler<Seen> for Slow {
        type Result = MessageResult<Seen>;
        fn handle(&mut self, _: Seen, _: &mut Context<Self>) -> Self::Result {
            MessageResult(std::mem::take(&mut self.seen))
        }
    }

    #[actix_rt::test]
    async fn a_busy_actor_gets_every_queued_event_in_order() {
        let actor = Slow::default().start();
        let route = EventRoute::new(actor.clone().recipient());
        let mut seen = Vec::new();
        // A burst past the mailbox (some straight in, the rest queued),
        // then, once the queue has drained, more that go straight in again.
        for burst in [0..500, 500..520] {
            let end = burst.end;
            for i in burst {
                let event = NamespaceEvent {
                    ns: (),
                    event: "e".into(),
                    data: serde_json::json!(i),
                };
                route.push(event).unwrap();
            }
            while seen.len() < end {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                seen.extend(actor.send(Seen).await.unwrap());
            }
        }
        let expected: Vec<String> = (0..520).map(|i| i.to_string()).collect();
        assert_eq!(seen, expected);
        assert_eq!(route.queued.load(Ordering::Acquire), 0, "the queue drained");
    }
}
