//! `cargo run --release -p agentix-bench [-- --json] [--markdown] [--only SECTION,..]
//! [--untuned-host]`: measures Agentix on this machine with the embedded
//! local provider.
//! Sections: boot, echo, inflight, blob, blob64, loaded, stream, cancel, bash, files,
//! abridge, rss, kill, side, ns, faults, docker; and, only when named,
//! fleet (thousands of sandboxes: minutes), egress, snapshot and kube (the
//! Kubernetes provider against the tests' API-server double).
//!
//! The binary is its own bundle (it calls `agentix::bundle::dispatch` first),
//! so the sandbox runs exactly the code measured here. It prints a table; with
//! `--json` the last line is one JSON object with every figure, and with
//! `--markdown` a Markdown table of them follows (the book's benchmarks
//! page is one). Figures are
//! medians or totals over many calls; nothing here asserts a target.
//!
//! As a host moving large payloads should, the bench runs with glibc's
//! huge-page tunables (`agentix::process::HUGE_PAGE_TUNABLES`: it starts
//! itself again with them when they are not set) and tunes its allocator
//! first (`agentix::process::tune_allocator`); `--untuned-host` measures a
//! host that does neither.

mod abridge;
mod bench_fns;
mod cpu_time;
mod docker;
mod egress;
mod egress_fns;
mod faults;
mod fleet;
mod kube;
mod plugins;
mod relay_floor;
mod report;
mod snapshot;

use std::future::IntoFuture;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentix::{Blob, LocalProvider, Provider, Sandbox, SandboxConfig, StreamExt};
use futures_util::stream;

use cpu_time::{CpuTimes, Per};
use report::Report;

fn main() {
    agentix::link_plugins!(agentix_bash, agentix_files, agentix_abridge, agentix_egress);
    agentix::bundle::dispatch_with(bench_fns::worker_setup);
    relay_floor::run_role();
    let args: Vec<String> = std::env::args().collect();
    let json = args.iter().any(|a| a == "--json");
    let markdown = args.iter().any(|a| a == "--markdown");
    let only: Option<Vec<String>> = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .map(|list| list.split(',').map(str::to_owned).collect());
    if !args.iter().any(|a| a == "--untuned-host") {
        start_with_huge_page_tunables();
        agentix::process::tune_allocator();
    }
    let report = run(Sections(only));
    report.print_table();
    if markdown {
        print!("{}", report.to_markdown());
    }
    if json {
        println!("{}", report.to_json());
    }
}

/// Starts this program again with glibc's huge-page tunables unless it has
/// tunables already: glibc reads them only when a process starts.
fn start_with_huge_page_tunables() {
    use agentix::process::{ENV_GLIBC_TUNABLES, HUGE_PAGE_TUNABLES};
    use std::os::unix::process::CommandExt;
    if std::env::var_os(ENV_GLIBC_TUNABLES).is_some() {
        return;
    }
    let Ok(me) = std::env::current_exe() else {
        return;
    };
    let error = std::process::Command::new(me)
        .args(std::env::args_os().skip(1))
        .env(ENV_GLIBC_TUNABLES, HUGE_PAGE_TUNABLES)
        .exec();
    eprintln!(
        "agentix-bench: cannot start again with huge-page tunables ({error}); going on without"
    );
}

/// Which sections to run (`None`: all).
struct Sections(Option<Vec<String>>);

impl Sections {
    fn wants(&self, name: &str) -> bool {
        self.0.as_ref().is_none_or(|s| s.iter().any(|n| n == name))
    }

    /// Whether `--only` names `name`: for sections too long for the
    /// default run.
    fn named(&self, name: &str) -> bool {
        self.0.as_ref().is_some_and(|s| s.iter().any(|n| n == name))
    }
}

/// A sandbox of this binary in the plain tier (`Isolation::None`): what the
/// Python reference runs, so the figures compare like for like.
pub(crate) fn plain_config() -> SandboxConfig {
    SandboxConfig::current_exe()
        .expect("the bench knows its own path")
        .isolation(agentix::Isolation::None)
}

/// The same in the default isolated tier.
pub(crate) fn isolated_config() -> SandboxConfig {
    SandboxConfig::current_exe()
        .expect("the bench knows its own path")
        .isolation(agentix::Isolation::default())
}

/// Nanoseconds since the Unix epoch: one clock for host and worker.
pub(crate) fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

#[tokio::main]
async fn run(sections: Sections) -> Report {
    let mut report = Report::default();
    let config = plain_config;
    let provider = LocalProvider::new();

    if sections.named("fleet") {
        fleet::fleet(&mut report).await;
    }
    if sections.named("egress") {
        egress::egress(&mut report).await;
    }
    if sections.named("snapshot") {
        snapshot::snapshot(&mut report).await;
    }
    if sections.named("kube") {
        kube::kube(&mut report).await;
    }
    if sections.wants("boot") {
        boot(&provider, &mut report).await;
    }
    let sb = provider.session(config()).await.expect("sandbox starts");
    if sections.wants("echo") {
        process_round_trip(&mut report);
        relay_floor::relay_floor(&mut report);
        sequential_echo(&sb, &mut report).await;
        tcp_echo(&sb, &mut report).await;
        actor_echo(&provider, &mut report).await;
    }
    if sections.wants("inflight") {
        inflight_64(&sb, &mut report).await;
    }
    if sections.wants("blob") {
        echo_1mib(&sb, &mut report).await;
    }
    if sections.wants("blob64") {
        echo_64mib(&sb, &mut report).await;
    }
    if sections.wants("loaded") {
        loaded_echo(&provider, &mut report).await;
    }
    if sections.wants("stream") {
        stream_items(&sb, &mut report).await;
    }
    if sections.wants("cancel") {
        cancel_to_drop(&sb, &mut report).await;
    }
    if sections.wants("bash") {
        plugins::bash_echo(&sb, &mut report).await;
    }
    if sections.wants("files") {
        plugins::files_transfer(&sb, &mut report).await;
    }
    if sections.wants("rss") {
        rss(&sb, &mut report).await;
    }
    if sections.wants("docker") {
        docker::docker(&sb, &mut report).await;
    }
    sb.delete().await;
    if sections.wants("echo") || sections.wants("bash") {
        isolated_calls(&provider, &sections, &mut report).await;
    }
    if sections.wants("kill") {
        kill_to_recovered(&provider, &mut report).await;
    }
    if sections.wants("abridge") {
        abridge::abridge(&provider, &mut report).await;
    }
    if sections.wants("side") {
        side_channels(&provider, &mut report).await;
    }
    if sections.wants("ns") {
        namespace_requests(&provider, &mut report).await;
    }
    if sections.wants("faults") {
        faults::faults(&provider, &mut report).await;
    }
    report.add(
        "host_rss_kib",
        "host (this bench) RSS after the run",
        "KiB",
        rss_kib(std::process::id()),
    );
    report
}

async fn boot(provider: &LocalProvider, report: &mut Report) {
    // Plain and isolated boots alternate, so both see the same machine.
    let mut plain = Vec::new();
    let mut isolated = Vec::new();
    for _ in 0..5 {
        for (config, boots) in [
            (plain_config(), &mut plain),
            (isolated_config(), &mut isolated),
        ] {
            let start = Instant::now();
            let sb = provider.session(config).await.expect("sandbox starts");
            sb.remote(bench_fns::echo, ("boot".into(),))
                .await
                .expect("first call");
            boots.push(start.elapsed());
            sb.delete().await;
        }
    }
    report.add(
        "boot_ms",
        "start to first call answered, plain tier, median of 5",
        "ms",
        ms(median(&mut plain)),
    );
    report.add(
        "boot_isolated_ms",
        "the same, isolated (the default tier), median of 5",
        "ms",
        ms(median(&mut isolated)),
    );
}

/// Echo and bash in an isolated sandbox, beside the plain tier's figures.
async fn isolated_calls(provider: &LocalProvider, sections: &Sections, report: &mut Report) {
    let sb = provider
        .session(isolated_config())
        .await
        .expect("an isolated sandbox starts");
    if sections.wants("echo") {
        warm_echoes(&sb).await;
        let mut times = timed_echoes(&sb, 2000).await;
        report.add(
            "echo_isolated_p50_us",
            "sequential small echo, isolated, p50",
            "µs",
            us(median(&mut times)),
        );
    }
    if sections.wants("bash") {
        let mut times =
            plugins::sequential_runs(&sb, agentix_bash::BashOptions::new(), Duration::ZERO).await;
        report.add(
            "bash_echo_isolated_p50_us",
            "bash::run(\"echo hi\") back to back, isolated, p50 of 500",
            "µs",
            us(median(&mut times)),
        );
    }
    sb.delete().await;
}

async fn rss(sb: &Sandbox, report: &mut Report) {
    let worker = sb.remote(bench_fns::worker_pid, ()).await.expect("pid");
    let server = sb.server_pid().expect("local sandbox");
    report.add(
        "rss_right_after_kib",
        "server + worker RSS right after the last section",
        "KiB",
        rss_kib(server) + rss_kib(worker),
    );
    // Both processes hand freed message buffers back after a second without
    // large messages (see agentix_wire::process::tune_allocator).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    report.add(
        "rss_server_kib",
        "server RSS after the run, idle 2.5 s",
        "KiB",
        rss_kib(server),
    );
    report.add(
        "rss_worker_kib",
        "worker RSS after the run, idle 2.5 s",
        "KiB",
        rss_kib(worker),
    );
    // RSS counts the binary's code pages in each process, though every
    // sandbox running the same binary shares them; these two do not.
    report.add(
        "pss_kib",
        "server + worker proportional set size (shared pages split), idle",
        "KiB",
        proc_kib(server, "smaps_rollup", "Pss") + proc_kib(worker, "smaps_rollup", "Pss"),
    );
    report.add(
        "private_dirty_kib",
        "server + worker memory of their own (heap, stacks): what one more sandbox costs",
        "KiB",
        proc_kib(server, "smaps_rollup", "Private_Dirty")
            + proc_kib(worker, "smaps_rollup", "Private_Dirty"),
    );
}

async fn stream_items(sb: &Sandbox, report: &mut Report) {
    const ITEMS: u64 = 100_000;
    let mut rates = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        let mut items = sb
            .stream(bench_fns::count, (ITEMS,))
            .await
            .expect("stream starts");
        let mut want = 0u64;
        while let Some(item) = items.next().await {
            assert_eq!(item.expect("item"), want);
            want += 1;
        }
        assert_eq!(want, ITEMS);
        rates.push(ITEMS as f64 / start.elapsed().as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    report.add(
        "stream_items_per_s",
        "100,000 u64 items in one stream, median of 5",
        "items/s",
        rates[rates.len() / 2],
    );
}

async fn cancel_to_drop(sb: &Sandbox, report: &mut Report) {
    let dir = sb.local_dir().expect("local sandbox").to_owned();
    let mut delays = Vec::new();
    for i in 0..21 {
        let marker = dir.join(format!("hold-{i}"));
        let started = dir.join(format!("hold-{i}.started"));
        let marker_str = marker.to_str().expect("utf-8 path").to_owned();
        let call = sb.remote(bench_fns::hold, (marker_str,)).into_future();
        let cancelled_at = {
            tokio::pin!(call);
            loop {
                tokio::select! {
                    _ = &mut call => panic!("hold never returns"),
                    _ = tokio::time::sleep(Duration::from_millis(1)) => {
                        if started.exists() { break; }
                    }
                }
            }
            now_nanos()
            // Leaving this block drops the call: that is the cancel.
        };
        let stamp = loop {
            if let Ok(text) = std::fs::read_to_string(&marker) {
                if let Ok(ns) = text.trim().parse::<u128>() {
                    break ns;
                }
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        };
        delays.push(Duration::from_nanos(
            stamp.saturating_sub(cancelled_at) as u64
        ));
    }
    report.add(
        "cancel_to_drop_ms",
        "host drops a call -> the worker task is dropped, median of 21",
        "ms",
        ms(median(&mut delays)),
    );
}

async fn kill_to_recovered(provider: &LocalProvider, report: &mut Report) {
    let mut times = Vec::new();
    for _ in 0..5 {
        let config = crate::plain_config();
        let sb = provider.session(config).await.expect("sandbox starts");
        let old = sb.remote(bench_fns::worker_pid, ()).await.expect("pid");
        let start = Instant::now();
        // SAFETY: kill(2) on a pid we just learned; no memory is involved.
        unsafe { libc::kill(old as i32, libc::SIGKILL) };
        loop {
            match sb.remote(bench_fns::worker_pid, ()).await {
                Ok(pid) if pid != old => break,
                Ok(_) | Err(_) => tokio::task::yield_now().await,
            }
        }
        times.push(start.elapsed());
        sb.delete().await;
    }
    report.add(
        "kill_to_recovered_ms",
        "SIGKILL of the worker -> next call answered, median of 5",
        "ms",
        ms(median(&mut times)),
    );
}

/// 200 small echoes, so what follows measures a warm sandbox.
async fn warm_echoes(sb: &Sandbox) {
    for _ in 0..200 {
        sb.remote(bench_fns::echo, ("warm".into(),))
            .await
            .expect("echo");
    }
}

/// `n` small echoes one after another, each timed.
async fn timed_echoes(sb: &Sandbox, n: usize) -> Vec<Duration> {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        sb.remote(bench_fns::echo, ("hello".into(),))
            .await
            .expect("echo");
        times.push(t.elapsed());
    }
    times
}

async fn sequential_echo(sb: &Sandbox, report: &mut Report) {
    warm_echoes(sb).await;
    let cpu = cpu_times(sb).await;
    let start = Instant::now();
    let mut times = timed_echoes(sb, 2000).await;
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
    cpu.report(report, "echo", "per sequential echo", Per::Call, 2000.0);
}

/// The machine's floor for the echo: one byte to a `cat` process and back
/// through pipes, with no Agentix at all. An echo makes two such round
/// trips (host to server, server to worker), so on a machine where waking a
/// process is slow no echo can beat twice this figure.
fn process_round_trip(report: &mut Report) {
    use std::io::{Read, Write};
    use std::process::{Command, Stdio};
    let mut cat = Command::new("cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("cat starts");
    let mut to = cat.stdin.take().expect("piped");
    let mut from = cat.stdout.take().expect("piped");
    let mut byte = [0u8; 1];
    let mut times = Vec::with_capacity(5000);
    for i in 0..5200 {
        let t = Instant::now();
        to.write_all(b"x").expect("cat reads");
        from.read_exact(&mut byte).expect("cat writes");
        if i >= 200 {
            times.push(t.elapsed());
        }
    }
    drop(to);
    let _ = cat.wait();
    times.sort();
    report.add(
        "process_rtt_p50_us",
        "one byte to another process and back through pipes (the machine's floor), p50",
        "µs",
        us(times[times.len() / 2]),
    );
}

/// The same echo through TCP loopback instead of the local server's Unix
/// socket: what the transport costs at the kernel.
async fn tcp_echo(sb: &Sandbox, report: &mut Report) {
    // A second handle on the same server through its TCP port, the way a
    // third-party client reaches it; `sb` itself connects through the
    // server's Unix socket.
    let tcp = Sandbox::attach(sb.addr(), sb.token());
    for _ in 0..200 {
        tcp.remote(bench_fns::echo, "warm".to_string())
            .await
            .expect("echo");
    }
    let mut times = Vec::with_capacity(2000);
    for _ in 0..2000 {
        let t = Instant::now();
        tcp.remote(bench_fns::echo, "hello".to_string())
            .await
            .expect("echo");
        times.push(t.elapsed());
    }
    times.sort();
    report.add(
        "echo_tcp_p50_us",
        "the same through the server's TCP port, p50",
        "µs",
        us(times[times.len() / 2]),
    );
}

/// The same echo sent to a `SandboxActor` from this tokio program: one
/// mailbox hop to the actor's arbiter thread and back, on top of the call.
async fn actor_echo(provider: &LocalProvider, report: &mut Report) {
    let config = crate::plain_config();
    let sb = provider.session(config).await.expect("sandbox starts");
    let actor = agentix::SandboxActor::start(sb);
    let echo = || {
        actor.send(agentix::RemoteCall::new(
            bench_fns::echo,
            "hello".to_string(),
        ))
    };
    for _ in 0..200 {
        echo().await.expect("mailbox").expect("echo");
    }
    let mut times = Vec::with_capacity(2000);
    for _ in 0..2000 {
        let t = Instant::now();
        echo().await.expect("mailbox").expect("echo");
        times.push(t.elapsed());
    }
    times.sort();
    report.add(
        "actor_echo_p50_us",
        "the same echo through a SandboxActor's mailbox (from a tokio task), p50",
        "µs",
        us(times[times.len() / 2]),
    );
}

async fn inflight_64(sb: &Sandbox, report: &mut Report) {
    const CALLS: u64 = 20_000;
    let cpu = cpu_times(sb).await;
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
    cpu.report(
        report,
        "inflight64",
        "per call, 64 in flight",
        Per::Call,
        CALLS as f64,
    );
}

async fn echo_1mib(sb: &Sandbox, report: &mut Report) {
    let payload = Blob::from(vec![0x5au8; 1 << 20]);
    for _ in 0..5 {
        sb.remote(bench_fns::echo_blob, (payload.clone(),))
            .await
            .expect("echo");
    }
    const ROUNDS: usize = 500;
    let cpu = cpu_times(sb).await;
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
    let what = "per MB echoed (there and back), 1 MiB echo";
    cpu.report(report, "echo_1mib", what, Per::Megabyte, mb);
}

async fn echo_64mib(sb: &Sandbox, report: &mut Report) {
    let payload = Blob::from(vec![0xa5u8; 64 << 20]);
    sb.remote(bench_fns::echo_blob, (payload.clone(),))
        .await
        .expect("echo");
    let mut rates = Vec::new();
    let cpu = cpu_times(sb).await;
    for _ in 0..5 {
        let start = Instant::now();
        let back = sb
            .remote(bench_fns::echo_blob, (payload.clone(),))
            .await
            .expect("echo");
        assert_eq!(back.len(), payload.len());
        rates.push(payload.len() as f64 / 1e6 / start.elapsed().as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    report.add(
        "echo_64mib_mb_per_s",
        "64 MiB argument and result, one way, median of 5",
        "MB/s",
        rates[rates.len() / 2],
    );
    let what = "per MB echoed (there and back), 64 MiB echo";
    let mb = 5.0 * payload.len() as f64 / 1e6;
    cpu.report(report, "echo_64mib", what, Per::Megabyte, mb);
}

/// Starts counting the CPU time of the host and of `sb`'s server and worker.
async fn cpu_times(sb: &Sandbox) -> CpuTimes {
    let worker = sb.remote(bench_fns::worker_pid, ()).await.expect("pid");
    CpuTimes::start(sb.server_pid().expect("local sandbox"), worker)
}

/// Small echoes while 64 MiB echoes and a log flood share the connection:
/// what a large transfer or a chatty sandbox costs a small call.
async fn loaded_echo(provider: &LocalProvider, report: &mut Report) {
    let config = crate::plain_config();
    let sb = Arc::new(provider.session(config).await.expect("sandbox starts"));
    let stop = Arc::new(AtomicBool::new(false));
    // The loads run as tasks of their own, as an application's would: in
    // one task with the echoes, a 64 MiB result being decoded there held
    // the echo back for as long as that took, which measured the bench.
    let transfers = tokio::spawn({
        let (sb, stop) = (sb.clone(), stop.clone());
        async move {
            let payload = Blob::from(vec![0x11u8; 64 << 20]);
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                sb.remote(bench_fns::echo_blob, (payload.clone(),))
                    .await
                    .expect("64 MiB echo");
                n += 1;
            }
            n
        }
    });
    let flood = tokio::spawn({
        let (sb, stop) = (sb.clone(), stop.clone());
        async move {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                sb.remote(bench_fns::emit_logs, (50_000,))
                    .await
                    .expect("log flood");
                n += 1;
            }
            n
        }
    });
    // Let both loads get going first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let window = Instant::now();
    // Spaced a little, so the samples spread over several transfers.
    let mut times = Vec::with_capacity(300);
    for _ in 0..300 {
        let t = Instant::now();
        sb.remote(bench_fns::echo, ("hello".into(),))
            .await
            .expect("echo");
        times.push(t.elapsed());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let window = window.elapsed();
    times.sort();
    let transfers = transfers.await.expect("the transfers end");
    let floods = flood.await.expect("the floods end");
    if let Ok(sb) = Arc::try_unwrap(sb) {
        sb.delete().await;
    }
    report.add(
        "echo_loaded_p50_us",
        "small echo while 64 MiB echoes and a log flood run, p50",
        "µs",
        us(times[times.len() / 2]),
    );
    report.add(
        "echo_loaded_p99_us",
        "small echo while 64 MiB echoes and a log flood run, p99",
        "µs",
        us(times[times.len() * 99 / 100]),
    );
    report.add(
        "loaded_64mib_echoes",
        "64 MiB echoes done meanwhile",
        "calls",
        f64::from(transfers),
    );
    report.add(
        "loaded_log_floods",
        "50,000-record log floods done meanwhile",
        "calls",
        f64::from(floods),
    );
    report.add(
        "loaded_seconds",
        "how long the 300 echoes took, loads and all",
        "s",
        window.as_secs_f64(),
    );
}

pub(crate) fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub(crate) fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub(crate) fn rss_kib(pid: u32) -> f64 {
    proc_kib(pid, "status", "VmRSS")
}

/// The `field: N kB` line of `/proc/<pid>/<file>`, in KiB.
/// The peak resident set of process `pid` (`VmHWM`).
pub(crate) fn peak_rss_kib(pid: u32) -> f64 {
    proc_kib(pid, "status", "VmHWM")
}

fn proc_kib(pid: u32, file: &str, field: &str) -> f64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(f64::NAN)
}

/// Counts the `bench.span` spans replayed from the sandbox.
struct SpanCounter(Arc<AtomicU64>);

impl agentix::trace::Processor for SpanCounter {
    fn on_span_end(&mut self, span: &agentix::trace::SpanData) {
        if span.origin.is_some() && span.name == "bench.span" {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Waits until `counter` reaches `n`; returns the rate since `start`.
async fn rate_until(counter: &AtomicU64, n: u64, start: Instant) -> f64 {
    while counter.load(Ordering::Relaxed) < n {
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

async fn side_channels(provider: &LocalProvider, report: &mut Report) {
    const RECORDS: u64 = 200_000;
    const SPANS: u64 = 100_000;
    let records = Arc::new(AtomicU64::new(0));
    let counted = records.clone();
    // The sandbox log file stays on, as by default, in a directory of its own.
    let log_dir = std::env::temp_dir().join(format!("agentix-bench-logs-{}", std::process::id()));
    let config = crate::plain_config()
        .env("AGENTIX_LOG_DIR", log_dir.to_str().expect("utf-8 temp dir"))
        .on_log(move |_, r| {
            if r.message == "record" {
                counted.fetch_add(1, Ordering::Relaxed);
            }
        });
    let sb = provider.session(config).await.expect("sandbox starts");
    let spans = Arc::new(AtomicU64::new(0));
    sb.traces().add_processor(SpanCounter(spans.clone()));
    sb.remote(bench_fns::emit_logs, (1_000,))
        .await
        .expect("warm-up");

    let mut log_rates = Vec::new();
    let mut span_rates = Vec::new();
    for _ in 0..3 {
        records.store(0, Ordering::Relaxed);
        let start = Instant::now();
        sb.remote(bench_fns::emit_logs, (RECORDS,))
            .await
            .expect("logs");
        log_rates.push(rate_until(&records, RECORDS, start).await);

        spans.store(0, Ordering::Relaxed);
        let start = Instant::now();
        sb.remote(bench_fns::emit_spans, (SPANS,))
            .await
            .expect("spans");
        span_rates.push(rate_until(&spans, SPANS, start).await);
    }
    log_rates.sort_by(f64::total_cmp);
    span_rates.sort_by(f64::total_cmp);
    report.add(
        "log_records_per_s",
        "200,000 records from one call, all at the host, median of 3",
        "records/s",
        log_rates[1],
    );
    report.add(
        "spans_per_s",
        "100,000 spans from one call, all at a host processor, median of 3",
        "spans/s",
        span_rates[1],
    );
    sb.delete().await;
    let _ = std::fs::remove_dir_all(log_dir);
}

async fn namespace_requests(provider: &LocalProvider, report: &mut Report) {
    let config = crate::plain_config();
    let sb = provider.session(config).await.expect("sandbox starts");
    sb.register_namespace(
        agentix::HostNamespace::new("/bench-plugin")
            .request_handler("echo", |body| async move { Ok::<_, String>(body) }),
    )
    .expect("namespace registers");
    sb.remote(bench_fns::ns_round_trips, (200,))
        .await
        .expect("warm-up");
    let mut times = sb
        .remote(bench_fns::ns_round_trips, (2_000,))
        .await
        .expect("round trips");
    times.sort_by(f64::total_cmp);
    report.add(
        "ns_request_p50_us",
        "namespace request sandbox -> host -> sandbox, p50 of 2,000",
        "µs",
        times[times.len() / 2],
    );
    const N: u32 = 20_000;
    let secs = sb
        .remote(bench_fns::ns_parallel, (N, 64))
        .await
        .expect("parallel requests");
    report.add(
        "ns_requests_per_s",
        "20,000 namespace requests, 64 in flight",
        "requests/s",
        f64::from(N) / secs,
    );
    sb.delete().await;
}
