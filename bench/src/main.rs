//! `cargo run --release -p agentix-bench [-- --json]`: measures Agentix on this
//! machine with the embedded local provider.
//!
//! The binary is its own bundle (it calls `agentix::bundle::dispatch` first),
//! so the sandbox runs exactly the code measured here. It prints a table; with
//! `--json` the last line is one JSON object with every figure. Figures are
//! medians or totals over many calls; nothing here asserts a target.

mod bench_fns;
mod report;

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use agentix::{Blob, LocalProvider, Provider, Sandbox, SandboxConfig};
use futures_util::stream::{self, StreamExt};

use report::Report;

fn main() {
    agentix::bundle::dispatch();
    let json = std::env::args().any(|a| a == "--json");
    let report = run();
    report.print_table();
    if json {
        println!("{}", report.to_json());
    }
}

#[tokio::main]
async fn run() -> Report {
    let mut report = Report::default();
    let config = || SandboxConfig::current_exe().expect("the bench knows its own path");
    let provider = LocalProvider::new();

    let mut boots = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        let sb = provider.session(config()).await.expect("sandbox starts");
        sb.remote(bench_fns::echo, ("boot".into(),))
            .await
            .expect("first call");
        boots.push(start.elapsed());
        sb.delete().await;
    }
    report.add(
        "boot_ms",
        "start to first call answered, median of 5",
        "ms",
        ms(median(&mut boots)),
    );

    let sb = provider.session(config()).await.expect("sandbox starts");
    sequential_echo(&sb, &mut report).await;
    inflight_64(&sb, &mut report).await;
    echo_1mib(&sb, &mut report).await;

    let worker = sb.remote(bench_fns::worker_pid, ()).await.expect("pid");
    let server = sb.server_pid().expect("local sandbox");
    report.add(
        "rss_server_kib",
        "server RSS after the run",
        "KiB",
        rss_kib(server),
    );
    report.add(
        "rss_worker_kib",
        "worker RSS after the run",
        "KiB",
        rss_kib(worker),
    );
    sb.delete().await;
    report
}

async fn sequential_echo(sb: &Sandbox, report: &mut Report) {
    for _ in 0..200 {
        sb.remote(bench_fns::echo, ("warm".into(),))
            .await
            .expect("echo");
    }
    let mut times = Vec::with_capacity(2000);
    let start = Instant::now();
    for _ in 0..2000 {
        let t = Instant::now();
        sb.remote(bench_fns::echo, ("hello".into(),))
            .await
            .expect("echo");
        times.push(t.elapsed());
    }
    let total = start.elapsed();
    times.sort();
    report.add(
        "echo_p50_us",
        "sequential small echo, p50",
        "µs",
        us(times[times.len() / 2]),
    );
    report.add(
        "echo_p99_us",
        "sequential small echo, p99",
        "µs",
        us(times[times.len() * 99 / 100]),
    );
    report.add(
        "echo_calls_per_s",
        "sequential small echo",
        "calls/s",
        2000.0 / total.as_secs_f64(),
    );
}

async fn inflight_64(sb: &Sandbox, report: &mut Report) {
    const CALLS: u64 = 20_000;
    let start = Instant::now();
    let done = stream::iter(0..CALLS)
        .map(|i| sb.remote(bench_fns::add_one, (i,)).into_future())
        .buffer_unordered(64)
        .fold(0u64, |n, r| async move {
            r.expect("call");
            n + 1
        })
        .await;
    assert_eq!(done, CALLS);
    let rate = CALLS as f64 / start.elapsed().as_secs_f64();
    report.add(
        "inflight64_calls_per_s",
        "20,000 calls, 64 in flight",
        "calls/s",
        rate,
    );
}

async fn echo_1mib(sb: &Sandbox, report: &mut Report) {
    let payload = Blob::from(vec![0x5au8; 1 << 20]);
    for _ in 0..5 {
        sb.remote(bench_fns::echo_blob, (payload.clone(),))
            .await
            .expect("echo");
    }
    const ROUNDS: usize = 50;
    let start = Instant::now();
    for _ in 0..ROUNDS {
        let back = sb
            .remote(bench_fns::echo_blob, (payload.clone(),))
            .await
            .expect("echo");
        assert_eq!(back.len(), payload.len());
    }
    let mb = (ROUNDS * payload.len()) as f64 / 1e6;
    report.add(
        "echo_1mib_mb_per_s",
        "1 MiB bytes echo, one way",
        "MB/s",
        mb / start.elapsed().as_secs_f64(),
    );
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn rss_kib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(f64::NAN)
}
