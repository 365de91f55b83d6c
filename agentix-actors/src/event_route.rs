//! [`EventRoute`]: a plugin namespace's events to one actor, in order,
//! through a bounded queue.
//!
//! A namespace dispatches each event as it arrives and must not wait for a
//! handler (the receive path carries every other event too). An actor's
//! events go into a queue of [`ROUTE_QUEUE`] and one task hands them to its
//! mailbox with `send().await`, one after the other: the actor sees them in
//! the order they arrived, and a slow actor fills its mailbox, then the
//! queue; past that, events are dropped with an error line naming the
//! path and event, never buffered without bound.

use std::sync::{Arc, OnceLock};

use actix::Recipient;
use tokio::sync::mpsc;

use crate::namespace_messages::NamespaceEvent;

/// Events that may wait for a busy actor before new ones are dropped.
pub const ROUTE_QUEUE: usize = 1024;

/// Delivers events to one actor in order; cheap to clone.
pub struct EventRoute<N: Send + 'static> {
    recipient: Recipient<NamespaceEvent<N>>,
    /// Started with the first event, on the runtime that dispatches it.
    queue: Arc<OnceLock<mpsc::Sender<NamespaceEvent<N>>>>,
}

impl<N: Send + 'static> Clone for EventRoute<N> {
    fn clone(&self) -> Self {
        EventRoute {
            recipient: self.recipient.clone(),
            queue: self.queue.clone(),
        }
    }
}

impl<N: Send + 'static> EventRoute<N> {
    /// A route to `recipient`.
    pub fn new(recipient: Recipient<NamespaceEvent<N>>) -> Self {
        EventRoute {
            recipient,
            queue: Arc::new(OnceLock::new()),
        }
    }

    /// Queues `event` for the actor (call it in arrival order, inside a
    /// tokio runtime); logs and drops it when the queue is full or the
    /// actor has stopped.
    pub fn push(&self, path: &str, event: NamespaceEvent<N>) {
        let queue = self.queue.get_or_init(|| {
            let (tx, rx) = mpsc::channel(ROUTE_QUEUE);
            tokio::spawn(pump(self.recipient.clone(), rx));
            tx
        });
        if let Err(e) = queue.try_send(event) {
            let (why, event) = match e {
                mpsc::error::TrySendError::Full(event) => ("its queue is full", event),
                mpsc::error::TrySendError::Closed(event) => ("it has stopped", event),
            };
            tracing::error!(
                path,
                event = event.event,
                "event dropped: the actor handling it falls behind or is gone ({why})"
            );
        }
    }
}

async fn pump<N: Send + 'static>(
    recipient: Recipient<NamespaceEvent<N>>,
    mut queue: mpsc::Receiver<NamespaceEvent<N>>,
) {
    while let Some(event) = queue.recv().await {
        let name = event.event.clone();
        if recipient.send(event).await.is_err() {
            tracing::error!(
                event = name,
                "the actor handling this namespace's events has stopped"
            );
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        for i in 0..500 {
            let event = NamespaceEvent {
                ns: (),
                event: "e".into(),
                data: serde_json::json!(i),
            };
            route.push("/p", event);
        }
        let mut seen = Vec::new();
        while seen.len() < 500 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            seen.extend(actor.send(Seen).await.unwrap());
        }
        let expected: Vec<String> = (0..500).map(|i| i.to_string()).collect();
        assert_eq!(seen, expected);
    }
}
