//! The bash and files plugins, measured the way users call them.

use std::time::{Duration, Instant};

use agentix::Sandbox;
use agentix_bash::BashOptions;
use agentix_files::transfer;

use crate::report::Report;
use crate::{median, us};

/// `bash::run("echo hi")` with the warm shells a default run uses and with
/// a shell started per command (naming the shell explicitly skips the warm
/// pool): back to back, and 5 ms apart as an agent's commands come (then
/// the pool has time to refill, but every process wakes from idle).
pub(crate) async fn bash_echo(sb: &Sandbox, report: &mut Report) {
    let cold_opts = || BashOptions::new().shell("bash");
    let spaced = Duration::from_millis(5);
    let warm = sequential_runs(sb, BashOptions::new(), Duration::ZERO).await;
    let cold = sequential_runs(sb, cold_opts(), Duration::ZERO).await;
    let warm_spaced = sequential_runs(sb, BashOptions::new(), spaced).await;
    let cold_spaced = sequential_runs(sb, cold_opts(), spaced).await;
    let p50 = |t: &[Duration]| us(t[t.len() / 2]);
    report.add(
        "bash_echo_p50_us",
        "bash::run(\"echo hi\") back to back, p50 of 500",
        "µs",
        p50(&warm),
    );
    report.add(
        "bash_echo_p99_us",
        "bash::run(\"echo hi\") back to back, p99 of 500",
        "µs",
        us(warm[warm.len() * 99 / 100]),
    );
    report.add(
        "bash_echo_cold_p50_us",
        "the same, a shell started per command",
        "µs",
        p50(&cold),
    );
    report.add(
        "bash_echo_spaced_p50_us",
        "bash::run(\"echo hi\") 5 ms apart, p50 of 500",
        "µs",
        p50(&warm_spaced),
    );
    report.add(
        "bash_echo_spaced_cold_p50_us",
        "the same, a shell started per command",
        "µs",
        p50(&cold_spaced),
    );
}

/// 500 sequential `echo hi` runs `gap` apart, after 50 to warm up; sorted.
pub(crate) async fn sequential_runs(
    sb: &Sandbox,
    opts: BashOptions,
    gap: Duration,
) -> Vec<Duration> {
    let run = || sb.remote(agentix_bash::run, ("echo hi".to_owned(), opts.clone()));
    for _ in 0..50 {
        run().await.expect("bash runs");
    }
    let mut times = Vec::with_capacity(500);
    for _ in 0..500 {
        tokio::time::sleep(gap).await;
        let t = Instant::now();
        let out = run().await.expect("bash runs");
        times.push(t.elapsed());
        assert_eq!(out.stdout, b"hi\n");
    }
    times.sort();
    times
}

/// A 64 MiB file up and down with the transfer helpers, median of 3.
pub(crate) async fn files_transfer(sb: &Sandbox, report: &mut Report) {
    const SIZE: usize = 64 << 20;
    let dir = std::env::temp_dir().join(format!("agentix-bench-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let local = dir.join("up.bin");
    // Relative: inside the sandbox's own directory, the files root.
    let remote = std::path::PathBuf::from("in-sandbox.bin");
    let back = dir.join("down.bin");
    let content: Vec<u8> = (0..SIZE)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&local, &content).expect("local file");
    let remote = remote.to_string_lossy().into_owned();
    let (mut ups, mut downs) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let t = Instant::now();
        transfer::upload_from(sb, &local, &remote)
            .await
            .expect("upload");
        ups.push(t.elapsed());
        let t = Instant::now();
        transfer::download_to(sb, &remote, &back)
            .await
            .expect("download");
        downs.push(t.elapsed());
    }
    assert!(
        std::fs::read(&back).expect("downloaded") == content,
        "bytes differ"
    );
    let rate = |d: Duration| SIZE as f64 / 1e6 / d.as_secs_f64();
    report.add(
        "files_upload_mb_per_s",
        "64 MiB file host -> sandbox, median of 3",
        "MB/s",
        rate(median(&mut ups)),
    );
    report.add(
        "files_download_mb_per_s",
        "64 MiB file sandbox -> host, median of 3",
        "MB/s",
        rate(median(&mut downs)),
    );
    let _ = std::fs::remove_dir_all(dir);
}
