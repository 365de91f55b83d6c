//! [`Outcome`]: how one task ended, after every attempt it took.

use std::time::Duration;

use crate::failure::Failure;

/// Where a task's time went.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timings {
    /// From the run's start until a lane took the task.
    pub queued: Duration,
    /// Waiting for sandboxes to start, over every attempt.
    pub start: Duration,
    /// In the work function, over every attempt.
    pub call: Duration,
    /// From the run's start until the task ended.
    pub total: Duration,
}

/// How a task ended: its value or its final failure, and every failed
/// attempt before it.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome<O> {
    /// The task's id.
    pub task: String,
    /// The work function's value, or the failure that ended the task.
    pub result: Result<O, Failure>,
    /// Attempts made, the last included.
    pub attempts: u32,
    /// The failed attempts that were retried, in order.
    pub retried: Vec<Failure>,
    /// The sandbox the last attempt ran in, if one started.
    pub sandbox: Option<String>,
    /// Where the time went.
    pub timings: Timings,
}

impl<O> Outcome<O> {
    /// Whether the task ended with a value.
    pub fn is_done(&self) -> bool {
        self.result.is_ok()
    }
}
