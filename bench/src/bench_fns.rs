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

static BENCH_NS: std::sync::OnceLock<agentix::SandboxNamespaceHandle> = std::sync::OnceLock::new();

/// Runs in every bench worker: registers `/bench-plugin`.
/// Ends the worker at once, as a crash would.
#[agentix::remote]
pub(crate) async fn exit_worker() -> u64 {
    std::process::exit(9)
}

pub(crate) fn worker_setup() {
    if let Ok(ns) = agentix::register_namespace(agentix::SandboxNamespace::new("/bench-plugin")) {
        let _ = BENCH_NS.set(ns);
    }
}

/// Makes `n` sequential `echo` requests to the host; returns each round
/// trip in microseconds.
#[agentix::remote]
pub(crate) async fn ns_round_trips(n: u32) -> Vec<f64> {
    let ns = BENCH_NS.get().expect("registered at worker start");
    let mut times = Vec::with_capacity(n as usize);
    for i in 0..n {
        let start = std::time::Instant::now();
        ns.request("echo", serde_json::json!(i))
            .await
            .expect("reply");
        times.push(start.elapsed().as_secs_f64() * 1e6);
    }
    times
}

/// Makes `n` `echo` requests, `inflight` at a time; returns seconds taken.
#[agentix::remote]
pub(crate) async fn ns_parallel(n: u32, inflight: usize) -> f64 {
    use futures_util::stream::{self, StreamExt};
    let ns = BENCH_NS.get().expect("registered at worker start");
    let start = std::time::Instant::now();
    stream::iter(0..n)
        .map(|i| ns.request("echo", serde_json::json!(i)))
        .buffer_unordered(inflight)
        .for_each(|r| async move {
            r.expect("reply");
        })
        .await;
    start.elapsed().as_secs_f64()
}
