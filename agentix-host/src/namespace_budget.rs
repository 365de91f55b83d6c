//! [`NamespaceBudget`]: how much of a sandbox's plugin traffic one host
//! namespace holds at once, and what it turned away.
//!
//! Each event and request a plugin namespace gets runs as a task of its
//! own, off the receive loop that `/rpc` and `/log` share. A sandbox that
//! emits faster than a handler finishes would otherwise pile up tasks, and
//! their payloads, without bound. So a namespace takes at most
//! [`HANDLER_TASKS`] at once and [`HANDLER_BYTES`] of their payloads; past
//! that, an event is dropped and a request answered `Overloaded`, each
//! counted (in [`NamespaceLoad`], in the sandbox's health) and warned of
//! through `tracing`. The receive loop never waits for a namespace.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Most events and requests one namespace handles at once.
pub const HANDLER_TASKS: usize = 256;
/// Most payload bytes those hold at once (one larger payload passes alone).
pub const HANDLER_BYTES: usize = 64 << 20;
/// The error type of a request turned away because its namespace is full.
pub const OVERLOADED: &str = "Overloaded";

/// One namespace's limits and counts, shared by every connection's join.
#[derive(Debug)]
pub struct NamespaceBudget {
    tasks: Arc<Semaphore>,
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
            bytes: Arc::new(Semaphore::new(HANDLER_BYTES)),
            dropped_events: AtomicU64::new(0),
            overloaded_requests: AtomicU64::new(0),
        }
    }
}

impl NamespaceBudget {
    /// A place for a task holding `payload` bytes, if the namespace has room.
    pub fn admit(&self, payload: usize) -> Option<Admission> {
        let bytes = payload.clamp(1, HANDLER_BYTES) as u32;
        let task = self.tasks.clone().try_acquire_owned().ok()?;
        let bytes = self.bytes.clone().try_acquire_many_owned(bytes).ok()?;
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
                "plugin namespace full ({HANDLER_TASKS} handlers or {} MiB at once): \
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
