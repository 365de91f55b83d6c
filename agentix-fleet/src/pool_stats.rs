//! [`PoolStats`]: a pool's counters, as a snapshot a service can export;
//! `StatsCounters` is what the pool's lanes update.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// A pool's state at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PoolStats {
    /// Tasks in this run, those a resumed record already held excluded.
    pub tasks: u64,
    /// Tasks the record already held, not run again.
    pub skipped: u64,
    /// Tasks that ended with a value.
    pub done: u64,
    /// Tasks that ended with a failure.
    pub failed: u64,
    /// Attempts that failed and were retried, over the whole run.
    pub retries: u64,
    /// Tasks waiting before a retry now.
    pub retrying: u64,
    /// Work functions running now.
    pub running: u64,
    /// Sandbox creates in flight now.
    pub starting: u64,
    /// The throttle's current limit on creates in flight.
    pub start_limit: u64,
    /// Sandboxes alive now, busy or idle (warm ones included).
    pub sandboxes: u64,
    /// Warm sandboxes: started, idle, ready for a task to claim.
    pub warm: u64,
    /// Sandboxes created over the run.
    pub created: u64,
}

impl PoolStats {
    /// Tasks that have not ended yet.
    pub fn remaining(&self) -> u64 {
        self.tasks.saturating_sub(self.done + self.failed)
    }
}

/// The live counters behind [`PoolStats`].
#[derive(Debug, Default)]
pub(crate) struct StatsCounters {
    pub(crate) tasks: AtomicU64,
    pub(crate) skipped: AtomicU64,
    pub(crate) done: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) retrying: AtomicU64,
    pub(crate) running: AtomicU64,
    pub(crate) starting: AtomicU64,
    pub(crate) sandboxes: AtomicU64,
    pub(crate) warm: AtomicU64,
    pub(crate) created: AtomicU64,
}

impl StatsCounters {
    /// The counters now, with the throttle's `start_limit`.
    pub(crate) fn snapshot(&self, start_limit: usize) -> PoolStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PoolStats {
            tasks: get(&self.tasks),
            skipped: get(&self.skipped),
            done: get(&self.done),
            failed: get(&self.failed),
            retries: get(&self.retries),
            retrying: get(&self.retrying),
            running: get(&self.running),
            starting: get(&self.starting),
            start_limit: start_limit as u64,
            sandboxes: get(&self.sandboxes),
            warm: get(&self.warm),
            created: get(&self.created),
        }
    }
}

/// Adds one to `counter` until the guard drops: a gauge of what is
/// happening now.
pub(crate) struct Gauge<'a>(&'a AtomicU64);

impl<'a> Gauge<'a> {
    pub(crate) fn up(counter: &'a AtomicU64) -> Gauge<'a> {
        counter.fetch_add(1, Ordering::Relaxed);
        Gauge(counter)
    }
}

impl Drop for Gauge<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
