//! Remote functions the end-to-end tests call, and test helpers.
//!
//! The `e2e-bundle` binary links this crate, so every function here is
//! callable in its sandboxes.

use std::time::Duration;

use agentix::Blob;
use serde::{Deserialize, Serialize};

/// Returns its argument.
#[agentix::remote]
pub async fn echo(text: String) -> String {
    text
}

/// Returns its bytes unchanged.
#[agentix::remote]
pub async fn echo_blob(data: Blob) -> Blob {
    data
}

/// Adds two numbers.
#[agentix::remote]
pub async fn add(a: i64, b: i64) -> i64 {
    a + b
}

/// A record with several field types.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Person {
    /// Name.
    pub name: String,
    /// Age in years.
    pub age: u32,
    /// Tags.
    pub tags: Vec<String>,
}

/// Ages a person by one year and tags them.
#[agentix::remote]
pub async fn birthday(person: Person, tag: Option<String>) -> Person {
    let mut p = person;
    p.age += 1;
    p.tags.extend(tag);
    p
}

/// The error [`checked_div`] returns.
#[derive(Debug)]
pub enum MathError {
    /// The divisor was zero.
    DivideByZero {
        /// The dividend.
        dividend: i64,
    },
}

impl std::fmt::Display for MathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MathError::DivideByZero { dividend } => write!(f, "cannot divide {dividend} by zero"),
        }
    }
}

/// Divides, failing on zero.
#[agentix::remote]
pub async fn checked_div(a: i64, b: i64) -> Result<i64, MathError> {
    if b == 0 {
        Err(MathError::DivideByZero { dividend: a })
    } else {
        Ok(a / b)
    }
}

/// Panics with `message`.
#[agentix::remote]
pub async fn explode(message: String) -> u32 {
    panic!("{message}")
}

/// Sleeps `ms` milliseconds, then returns `ms`.
#[agentix::remote]
pub async fn sleep_ms(ms: u64) -> u64 {
    tokio::time::sleep(Duration::from_millis(ms)).await;
    ms
}

/// The worker's process id.
#[agentix::remote]
pub async fn worker_pid() -> u32 {
    std::process::id()
}

/// Ends the worker process at once with `code` (to test supervision).
#[agentix::remote]
pub async fn exit_worker(code: i32) -> u32 {
    std::process::exit(code)
}
