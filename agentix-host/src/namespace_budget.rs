//! [`NamespaceBudget`]: how much of a sandbox's plugin traffic one host
//! namespace holds at once, and what it turned away.
//!
//! Each event and request a plugin namespace gets runs as a task of its
//! own, off the receive loop that `/rpc` and `/log` share. A sandbox that
//! emits faster than a handler finishes would otherwise pile up tasks, and
//! their payloads, without bound. So a namespace answers at most
//! [`HANDLER_TASKS`] requests at once, holds at most [`EVENT_LANE_ITEMS`]
//! events waiting for their (ordered) handlers, and [`HANDLER_BYTES`] of
//! all their payloads; past that, an event is dropped and a request
//! answered `Overloaded`, each
//! counted (in [`NamespaceLoad`], in the sandbox's health) and warned of
//! through `tracing`. The receive loop never waits for a namespace.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Most requests one namespace answers at once.
pub const HANDLER_TASKS: usize = 256;
/// Most events that wait for one namespace's handlers (the same bound as
/// the sandbox half's).
pub use agentix_actors::event_lane::EVENT_LANE_ITEMS;
/// Most payload bytes those hold at once (one larger payload passes alone).
pub const HANDLER_BYTES: usize = 64 << 20;
/// The error type of a request turned away because its namespace is full.
pub use agentix_wire::request_envelope::OVERLOADED;

/// One namespace's limits and counts, shared by every connection's join.
#[derive(Debug)]
pub struct NamespaceBudget {
    tasks: Arc<Semaphore>,
    events: Arc<Semaphore>,
    bytes: Arc<Semaphore>,
    dropped_events: AtomicU64,
    overloaded_requests: AtomicU64,
}

/// What a namespace turned away so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct NamespaceLoad {
    /// Events dropped because the namespace was full.
    pub dropped_events: u64,
    /// Requests answered `Overloaded` because the namespace was full.
    pub overloaded_requests: u64,
}

/// A task's place in its namespace, given back when it ends.
#[derive(Debug)]
pub struct Admission {
    _task: OwnedSemaphorePermit,
    _bytes: OwnedSemaphorePermit,
}

impl Default for NamespaceBudget {
    fn default() -> Self {
        NamespaceBudget {
            tasks: Arc::new(Semaphore::new(HANDLER_TASKS)),
            events: Arc::new(Semaphore::new(EVENT_LANE_ITEMS)),
            bytes: Arc::new(Semaphore::new(HANDLER_BYTES)),
            dropped_events: AtomicU64::new(0),
            overloaded_requests: AtomicU64::new(0),
        }
    }
}

impl NamespaceBudget {
    /// A place for a request's task holding `payload` bytes, if the
    /// namespace has room.
    pub fn admit(&self, payload: usize) -> Option<Admission> {
        Self::admit_in(&self.tasks, &self.bytes, payload)
    }

    /// A place on the event lane for an event of `payload` bytes, if the
    /// namespace has room.
    pub fn admit_event(&self, payload: usize) -> Option<Admission> {
        Self::admit_in(&self.events, &self.bytes, payload)
    }

    fn admit_in(
        slots: &Arc<Semaphore>,
        bytes: &Arc<Semaphore>,
        payload: usize,
    ) -> Option<Admission> {
        let held = payload.clamp(1, HANDLER_BYTES) as u32;
        let task = slots.clone().try_acquire_owned().ok()?;
        let bytes = bytes.clone().try_acquire_many_owned(held).ok()?;
        Some(Admission {
            _task: task,
            _bytes: bytes,
        })
    }

    /// Counts an event of `path` dropped, warning at the first and at each
    /// power of two after.
    pub fn event_dropped(&self, path: &str, event: &str) {
        let n = self.dropped_events.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            tracing::warn!(
                path,
                event,
                dropped = n,
                "plugin namespace full ({EVENT_LANE_ITEMS} events or {} MiB waiting): \
                 events dropped",
                HANDLER_BYTES >> 20
            );
        }
    }

    /// Counts a request of `path` answered `Overloaded`, warning as
    /// [`event_dropped`](Self::event_dropped) does.
    pub fn request_overloaded(&self, path: &str, event: &str) {
        let n = self.overloaded_requests.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            tracing::warn!(
                path,
                event,
                overloaded = n,
                "plugin namespace full: requests answered {OVERLOADED}"
            );
        }
    }

    /// What the namespace turned away so far.
    pub fn load(&self) -> NamespaceLoad {
        NamespaceLoad {
            dropped_events: self.dropped_events.load(Ordering::Relaxed),
            overloaded_requests: self.overloaded_requests.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_namespace_admits_nothing_until_a_task_ends() {
        let budget = NamespaceBudget::default();
        let held: Vec<_> = (0..HANDLER_TASKS).map(|_| budget.admit(10)).collect();
        assert!(held.iter().all(Option::is_some));
        assert!(budget.admit(10).is_none());
        drop(held);
        let big = budget
            .admit(usize::MAX)
            .expect("one payload past the budget passes alone");
        assert!(budget.admit(1).is_none(), "the bytes are spent");
        drop(big);
        assert!(budget.admit(1).is_some());
        budget.event_dropped("/p", "e");
        budget.request_overloaded("/p", "r");
        budget.request_overloaded("/p", "r");
        assert_eq!(
            budget.load(),
            NamespaceLoad {
                dropped_events: 1,
                overloaded_requests: 2
            }
        );
    }
}
