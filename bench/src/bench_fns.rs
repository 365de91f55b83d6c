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

/// Yields `0..n` as fast as the window allows.
#[agentix::remote]
pub(crate) fn count(n: u64) -> impl agentix::Stream<Item = u64> + Send {
    agentix::stream::iter(0..n)
}

/// Writes the time (ns since the epoch) to `marker` when its task is dropped.
struct StampOnDrop(String);

impl Drop for StampOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, crate::now_nanos().to_string());
    }
}

/// Writes `{marker}.started`, then waits forever; stamps `marker` when dropped.
#[agentix::remote]
pub(crate) async fn hold(marker: String) -> u32 {
    let _stamp = StampOnDrop(marker.clone());
    let _ = std::fs::write(format!("{marker}.started"), b"");
    std::future::pending::<u32>().await
}

/// Logs `n` small records.
#[agentix::remote]
pub(crate) async fn emit_logs(n: u64) -> u64 {
    for i in 0..n {
        tracing::info!(i, "record");
    }
    n
}

/// Creates `n` spans named `bench.span`.
#[agentix::remote]
pub(crate) async fn emit_spans(n: u64) -> u64 {
    for i in 0..n {
        drop(agentix::trace::span("bench.span").attr("i", i));
    }
    n
}
