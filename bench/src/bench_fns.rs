//! The remote functions the bench calls, linked into its own bundle.

use agentix::Blob;

/// Returns its argument.
#[agentix::remote]
pub(crate) async fn echo(text: String) -> String {
    text
}

/// Returns its bytes.
#[agentix::remote]
pub(crate) async fn echo_blob(data: Blob) -> Blob {
    data
}

/// Adds one.
#[agentix::remote]
pub(crate) async fn add_one(n: u64) -> u64 {
    n + 1
}

/// The worker's process id.
#[agentix::remote]
pub(crate) async fn worker_pid() -> u32 {
    std::process::id()
}
