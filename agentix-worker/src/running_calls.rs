//! [`RunningCalls`]: the worker's table of the calls it runs, by call id,
//! where cancels and stream acks find their call.
//!
//! A call that ends does not tell the frame loop: that message woke the
//! loop's task after every call, and on a multi-threaded runtime the
//! scheduler then woke a second thread to take one of the two tasks it had
//! queued, often the frame writer with the call's result. Ended calls are
//! swept out instead when the table has doubled since the last sweep, so
//! it holds at most twice the calls still running, plus a few.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::task::AbortHandle;

use crate::stream_call::Credit;

/// A call the worker is running (or ran, until the next sweep).
pub(crate) struct RunningCall {
    /// Aborts the call's task.
    pub(crate) task: AbortHandle,
    /// Present for a streaming call: where acks go.
    pub(crate) credit: Option<Arc<Credit>>,
}

/// Fewest entries the table holds before it sweeps out ended calls.
const SWEEP_FROM: usize = 64;

/// The calls of one frame loop, by id.
pub(crate) struct RunningCalls {
    calls: HashMap<u64, RunningCall>,
    sweep_at: usize,
}

impl Default for RunningCalls {
    fn default() -> Self {
        RunningCalls {
            calls: HashMap::new(),
            sweep_at: SWEEP_FROM,
        }
    }
}

impl RunningCalls {
    /// Adds call `id`, first sweeping out ended calls if the table has grown
    /// enough since the last sweep.
    pub(crate) fn insert(&mut self, id: u64, call: RunningCall) {
        if self.calls.len() >= self.sweep_at {
            self.calls.retain(|_, c| !c.task.is_finished());
            self.sweep_at = (2 * self.calls.len()).max(SWEEP_FROM);
        }
        self.calls.insert(id, call);
    }

    /// Call `id`, if it still runs.
    pub(crate) fn running(&self, id: u64) -> Option<&RunningCall> {
        self.calls.get(&id).filter(|c| !c.task.is_finished())
    }

    /// Takes call `id` out of the table if it still runs.
    pub(crate) fn take_running(&mut self, id: u64) -> Option<RunningCall> {
        let call = self.calls.remove(&id)?;
        (!call.task.is_finished()).then_some(call)
    }

    /// Aborts every call still running.
    pub(crate) fn abort_all(&self) {
        for call in self.calls.values() {
            call.task.abort();
        }
    }

    /// How many entries the table holds, ended calls not yet swept included.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.calls.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(task: &tokio::task::JoinHandle<()>) -> RunningCall {
        RunningCall {
            task: task.abort_handle(),
            credit: None,
        }
    }

    #[tokio::test]
    async fn ended_calls_are_swept_and_running_ones_kept() {
        let mut table = RunningCalls::default();
        let forever = tokio::spawn(std::future::pending::<()>());
        table.insert(0, call(&forever));
        for id in 1..10_000 {
            let done = tokio::spawn(async {});
            let handle = done.abort_handle();
            done.await.unwrap();
            table.insert(
                id,
                RunningCall {
                    task: handle,
                    credit: None,
                },
            );
            assert!(table.len() <= 2 * SWEEP_FROM + 1, "{} entries", table.len());
        }
        assert!(table.running(0).is_some());
        assert!(
            table.running(9_999).is_none(),
            "an ended call is not running"
        );
        assert!(table.take_running(9_999).is_none());
        let taken = table.take_running(0).expect("still running");
        taken.task.abort();
        assert!(table.running(0).is_none());
    }
}
