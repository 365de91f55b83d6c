//! The `faults` section: what worker kills under load and a burst of bad
//! connections cost. Reported, never asserted: the figures that must be
//! zero (`faults_calls_hung`, `faults_degraded_at_end`) are for the reader
//! and the issue tracker to check.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentix::{ErrorKind, LocalProvider, Provider, Sandbox};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::report::Report;
use crate::{bench_fns, ms, rss_kib};

const KILLS: usize = 50;
const IN_FLIGHT: usize = 64;

/// 50 worker SIGKILLs 300 ms apart with 64 calls in flight, then 1,000
/// connections that send bad input.
pub(crate) async fn faults(provider: &LocalProvider, report: &mut Report) {
    let mut config = crate::plain_config();
    // Room for every kill: this measures recovery, not the restart budget.
    config.server_args = vec!["--max-restarts".into(), "1000".into()];
    let sb = provider.session(config).await.expect("sandbox starts");
    let (ok, exited, other, hung) = (
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
    );
    let stop = AtomicBool::new(false);
    let load = futures_util::future::join_all((0..IN_FLIGHT).map(|i| {
        let (sb, stop) = (&sb, &stop);
        let (ok, exited, other, hung) = (&ok, &exited, &other, &hung);
        async move {
            let mut n = i as u64;
            while !stop.load(Ordering::Relaxed) {
                let call = sb
                    .remote(bench_fns::add_one, (n,))
                    .timeout(Duration::from_secs(10));
                match call.await {
                    Ok(m) if m == n + 1 => ok.fetch_add(1, Ordering::Relaxed),
                    Ok(_) => other.fetch_add(1, Ordering::Relaxed),
                    Err(e) if e.kind == ErrorKind::WorkerExited => {
                        exited.fetch_add(1, Ordering::Relaxed)
                    }
                    Err(e) if e.kind == ErrorKind::Timeout => hung.fetch_add(1, Ordering::Relaxed),
                    Err(_) => other.fetch_add(1, Ordering::Relaxed),
                };
                n += 1;
            }
        }
    }));
    let kills = async {
        let mut recoveries = Vec::with_capacity(KILLS);
        for _ in 0..KILLS {
            let old = ready_worker(&sb).await;
            let start = Instant::now();
            // SAFETY: kill(2) on a pid the server just reported.
            unsafe { libc::kill(old as i32, libc::SIGKILL) };
            loop {
                match sb.remote(bench_fns::worker_pid, ()).await {
                    Ok(pid) if pid != old => break,
                    _ => tokio::time::sleep(Duration::from_micros(200)).await,
                }
            }
            recoveries.push(start.elapsed());
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        stop.store(true, Ordering::Relaxed);
        recoveries
    };
    let (_, mut recoveries) = tokio::join!(load, kills);
    recoveries.sort();
    let degraded = sb.health().await.map(|h| h["status"] == "degraded");
    let count = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64;
    report.add(
        "faults_calls_ok",
        "calls answered right during 50 worker kills",
        "calls",
        count(&ok),
    );
    report.add(
        "faults_calls_worker_exited",
        "calls ended with WorkerExited",
        "calls",
        count(&exited),
    );
    report.add(
        "faults_calls_other",
        "calls ended otherwise (wrong value, other error)",
        "calls",
        count(&other),
    );
    report.add(
        "faults_calls_hung",
        "calls with no answer within 10 s (must be 0)",
        "calls",
        count(&hung),
    );
    report.add(
        "faults_degraded_at_end",
        "sandbox degraded after the kills (1 = yes; must be 0)",
        "",
        f64::from(u8::from(degraded.unwrap_or(true))),
    );
    report.add(
        "faults_recovery_p50_ms",
        "worker SIGKILL -> a new worker answers, p50 of 50 (restarts after the first in a window back off, up to 3 s)",
        "ms",
        ms(recoveries[recoveries.len() / 2]),
    );
    report.add(
        "faults_recovery_max_ms",
        "the same, slowest of 50",
        "ms",
        ms(recoveries[recoveries.len() - 1]),
    );
    bad_connections(&sb, report).await;
    sb.delete().await;
}

/// The pid of the worker once it is ready again.
async fn ready_worker(sb: &Sandbox) -> u32 {
    loop {
        if let Ok(h) = sb.health().await {
            if h["worker"]["state"] == "ready" {
                if let Some(pid) = h["worker"]["pid"].as_u64() {
                    return pid as u32;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Server RSS before and after 1,000 connections that each send one kind
/// of bad input (no token, garbage, an unfinished request), 50 at a time.
async fn bad_connections(sb: &Sandbox, report: &mut Report) {
    let server = sb.server_pid().expect("a local sandbox");
    let before = rss_kib(server);
    let addr = sb.addr().to_owned();
    let inputs: [&[u8]; 3] = [
        b"GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n\
          Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http at all \xff\xfe\x00\r\n\r\n",
        b"POST /socket.io/?EIO=4&transport=polling HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n42[",
    ];
    for round in 0..20 {
        let batch = (0..50).map(|i| {
            let addr = addr.clone();
            let input = inputs[(round * 50 + i) % inputs.len()];
            async move {
                let Ok(mut tcp) = tokio::net::TcpStream::connect(&addr).await else {
                    return;
                };
                let _ = tcp.write_all(input).await;
                let mut sink = [0u8; 4096];
                let _ = tokio::time::timeout(Duration::from_millis(500), tcp.read(&mut sink)).await;
            }
        });
        futures_util::future::join_all(batch).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let answers = sb.remote(bench_fns::add_one, (1,)).await.ok() == Some(2);
    report.add(
        "faults_rss_before_bad_kib",
        "server RSS before 1,000 bad connections",
        "KiB",
        before,
    );
    report.add(
        "faults_rss_after_bad_kib",
        "server RSS 1 s after them (still answering calls: see faults_serving_after_bad)",
        "KiB",
        rss_kib(server),
    );
    report.add(
        "faults_serving_after_bad",
        "calls answered after the bad connections (1 = yes)",
        "",
        f64::from(u8::from(answers)),
    );
}
