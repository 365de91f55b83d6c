//! [`WarmSet`]: the started, idle sandboxes a pool keeps so that a task
//! claims one without waiting for a create (`Pool::warm`).
//!
//! Up to `target` places, each either a sandbox that is ready or one being
//! started for it: a warmer reserves a place before its create, so however
//! many warmers run, no more than `target` sandboxes are ever warm or on
//! their way. A claim frees a place and wakes a warmer.

use std::collections::VecDeque;
use std::sync::Mutex;

use tokio::sync::Notify;

/// Idle, started items (sandboxes), up to a target.
pub(crate) struct WarmSet<T> {
    target: usize,
    places: Mutex<Places<T>>,
    freed: Notify,
}

struct Places<T> {
    ready: VecDeque<T>,
    /// Places reserved by creates in flight.
    starting: usize,
}

impl<T> WarmSet<T> {
    /// A set keeping up to `target` items (0: none, claims always miss).
    pub(crate) fn new(target: usize) -> WarmSet<T> {
        WarmSet {
            target,
            places: Mutex::new(Places {
                ready: VecDeque::new(),
                starting: 0,
            }),
            freed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Places<T>> {
        self.places.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The place keeping `target` items full.
    pub(crate) fn target(&self) -> usize {
        self.target
    }

    /// A ready item, if there is one; frees its place.
    pub(crate) fn claim(&self) -> Option<T> {
        let claimed = self.lock().ready.pop_front();
        if claimed.is_some() {
            self.freed.notify_one();
        }
        claimed
    }

    /// Reserves a place for an item about to be started; false when every
    /// place is ready or reserved.
    pub(crate) fn reserve(&self) -> bool {
        let mut places = self.lock();
        let free = places.ready.len() + places.starting < self.target;
        if free {
            places.starting += 1;
        }
        free
    }

    /// Fills a reserved place with `item`.
    pub(crate) fn fill(&self, item: T) {
        let mut places = self.lock();
        places.starting -= 1;
        places.ready.push_back(item);
    }

    /// Gives a reserved place back (its start failed).
    pub(crate) fn release(&self) {
        self.lock().starting -= 1;
        self.freed.notify_one();
    }

    /// Waits until a place may be free.
    pub(crate) async fn place_freed(&self) {
        self.freed.notified().await;
    }

    /// Items ready now.
    #[cfg(test)]
    pub(crate) fn ready(&self) -> usize {
        self.lock().ready.len()
    }

    /// Takes every ready item, to be let go.
    pub(crate) fn drain(&self) -> Vec<T> {
        self.lock().ready.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_more_than_the_target_is_ready_or_starting() {
        let set = WarmSet::new(2);
        assert!(set.reserve() && set.reserve());
        assert!(!set.reserve(), "two places, both reserved");
        set.fill("a");
        set.release();
        assert!(set.reserve(), "a released place is free again");
        set.fill("b");
        assert_eq!(set.ready(), 2);
        assert!(!set.reserve());
        assert_eq!(set.claim(), Some("a"));
        assert!(set.reserve(), "a claim frees its place");
        set.fill("c");
        assert_eq!(set.drain(), ["b", "c"]);
        assert_eq!(set.claim(), None);
    }
}
