//! The remote functions of the hello example, linked by host and bundle alike.

agentix::plugin_crate!();

use serde::{Deserialize, Serialize};

// ANCHOR: run
/// What [`run`] returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Output {
    /// The input, upper-cased.
    pub output: String,
    /// The process id of the worker that ran the call.
    pub worker_pid: u32,
}

/// Upper-cases `input`, inside the sandbox.
#[agentix::remote]
pub async fn run(input: String) -> Output {
    Output {
        output: input.to_uppercase(),
        worker_pid: std::process::id(),
    }
}
// ANCHOR_END: run

/// Divides `a` by `b`; dividing by zero is an error the host sees typed.
#[agentix::remote]
pub async fn divide(a: i64, b: i64) -> Result<i64, DivideByZero> {
    if b == 0 {
        Err(DivideByZero)
    } else {
        Ok(a / b)
    }
}

/// The error [`divide`] returns for a zero divisor.
#[derive(Debug)]
pub struct DivideByZero;

impl std::fmt::Display for DivideByZero {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("cannot divide by zero")
    }
}

/// Counts down from `from` to 1, one number every `every_ms` milliseconds:
/// a streaming function, read by the host while it runs.
#[agentix::remote]
pub fn countdown(from: u32, every_ms: u64) -> impl agentix::Stream<Item = u32> + Send {
    agentix::stream::unfold(from, move |n| async move {
        if n == 0 {
            return None;
        }
        tokio::time::sleep(std::time::Duration::from_millis(every_ms)).await;
        Some((n, n - 1))
    })
}

/// Sleeps for `ms` milliseconds, then says so (for the deadline demo).
#[agentix::remote]
pub async fn nap(ms: u64) -> String {
    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    format!("slept {ms} ms")
}
