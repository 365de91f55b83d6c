//! [`EventLane`]: one plugin namespace's events, handled one at a time in
//! the order they came, on either half.
//!
//! The receive path never waits for it: a turn is queued at once or, past
//! the lane's bound, refused (the caller counts the refusal). One task runs
//! the turns, each handler's call and its future in the event's turn, a
//! panic in either caught and logged. [`EventLane::idle`] tells the receive
//! path that nothing waits before an event, so a handler that only hands
//! the event on (into an actor's mailbox) may run there, without the
//! task's wake-up, and keep the order.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use futures_util::FutureExt;
use tokio::sync::mpsc;

/// Events of one namespace that may wait for their handlers on its
/// ordered lane (the same bound on both halves).
pub const EVENT_LANE_ITEMS: usize = 16_384;

/// A handler's work on one event.
pub type Handled = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What runs in one event's turn.
pub type Turn = Box<dyn FnOnce() -> Handled + Send>;

/// What became of an event handed on on the receive path.
pub enum HandedOn {
    /// Handed on: nothing left to do.
    Done,
    /// It waits for room: this future takes a turn on the lane.
    Waiting(Handled),
    /// The handler panicked.
    Panicked,
}

/// A namespace's ordered, bounded lane of events. Its task starts with the
/// first turn (on the caller's runtime) and ends with the lane.
pub struct EventLane {
    path: Arc<str>,
    bound: usize,
    sender: OnceLock<mpsc::Sender<(Turn, String)>>,
    /// Turns queued or running.
    pending: Arc<AtomicUsize>,
}

impl EventLane {
    /// A lane for namespace `path` holding at most `bound` waiting turns.
    pub fn new(path: Arc<str>, bound: usize) -> Self {
        EventLane {
            path,
            bound,
            sender: OnceLock::new(),
            pending: Arc::default(),
        }
    }

    /// Whether nothing waits on the lane or runs there: an event handled
    /// now cannot overtake one before it.
    pub fn idle(&self) -> bool {
        self.pending.load(Ordering::Acquire) == 0
    }

    /// Queues `turn` for event `name`; `Err(name)` when the lane is full.
    pub fn push(&self, name: String, turn: Turn) -> Result<(), String> {
        self.pending.fetch_add(1, Ordering::AcqRel);
        self.sender().try_send((turn, name)).map_err(|refused| {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            refused.into_inner().1
        })
    }

    fn sender(&self) -> &mpsc::Sender<(Turn, String)> {
        self.sender.get_or_init(|| {
            let (tx, mut rx) = mpsc::channel::<(Turn, String)>(self.bound);
            let (path, pending) = (self.path.clone(), self.pending.clone());
            tokio::spawn(async move {
                while let Some((turn, event)) = rx.recv().await {
                    if !run_caught(turn).await {
                        tracing::error!(path = &*path, event, "namespace handler panicked");
                    }
                    pending.fetch_sub(1, Ordering::AcqRel);
                }
            });
            tx
        })
    }
}

/// Calls `make` and runs its future, a panic in either caught: whether it
/// finished.
pub async fn run_caught<F: Future<Output = ()>>(make: impl FnOnce() -> F) -> bool {
    match std::panic::catch_unwind(AssertUnwindSafe(make)) {
        Ok(fut) => AssertUnwindSafe(fut).catch_unwind().await.is_ok(),
        Err(_) => false,
    }
}

/// Calls a handler that hands its event on at once, here, and polls its
/// future once: done, or still waiting (for room), or panicked.
pub fn hand_on_here(handler: impl FnOnce() -> Handled) -> HandedOn {
    let handed = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let mut handed = handler();
        (&mut handed).now_or_never().is_none().then_some(handed)
    }));
    match handed {
        Ok(None) => HandedOn::Done,
        Ok(Some(waiting)) => HandedOn::Waiting(waiting),
        Err(_) => HandedOn::Panicked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[tokio::test]
    async fn turns_run_in_order_each_to_its_end_and_a_panic_stops_nothing() {
        let lane = EventLane::new(Arc::from("/p"), 64);
        let seen = Arc::new(Mutex::new(Vec::new()));
        for i in 0..20u64 {
            let seen = seen.clone();
            let turn: Turn = Box::new(move || {
                Box::pin(async move {
                    if i == 5 {
                        panic!("a handler broke");
                    }
                    // Earlier turns take longer: run side by side, later
                    // ones would overtake them.
                    tokio::time::sleep(std::time::Duration::from_millis(20 - i)).await;
                    seen.lock().unwrap().push(i);
                })
            });
            lane.push(format!("e{i}"), turn).unwrap();
        }
        while !lane.idle() {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let expected: Vec<u64> = (0..20).filter(|&i| i != 5).collect();
        assert_eq!(*seen.lock().unwrap(), expected);
    }

    #[tokio::test]
    async fn a_full_lane_refuses_and_says_which_event() {
        let lane = EventLane::new(Arc::from("/p"), 1);
        let (release, wait) = tokio::sync::oneshot::channel::<()>();
        let blocker: Turn = Box::new(move || {
            Box::pin(async move {
                let _ = wait.await;
            })
        });
        lane.push("first".into(), blocker).unwrap();
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        // One turn runs, one waits; the next has no room.
        lane.push("second".into(), Box::new(|| Box::pin(async {})))
            .unwrap();
        let refused = lane.push("third".into(), Box::new(|| Box::pin(async {})));
        assert_eq!(refused, Err("third".to_owned()));
        assert!(!lane.idle());
        let _ = release.send(());
    }
}
