//! Pause and resume: the worker and everything it started stop (their
//! states say so, a counter stands still), calls wait and then finish,
//! and the sandbox's connection outlives a long pause.

mod support;

use std::time::Duration;

use agentix_bash::BashOptions;

/// Every process below `root` (not `root` itself), from `/proc`.
fn descendants(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    found.remove(0);
    found
}

/// `pid`'s state letter, if it still exists.
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The counter the sandbox's loop writes.
fn counter(path: &std::path::Path) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_the_workers_processes_calls_wait_and_resume_goes_on() {
    // A plain sandbox: its counter file is on the host's filesystem.
    let sb = support::plain_sandbox().await;
    let file = std::env::temp_dir().join(format!("agentix-pause-{}", agentix::random_hex(6)));
    let looping = format!(
        "(i=0; while :; do i=$((i+1)); echo $i > {}; sleep 0.02; done) >/dev/null 2>&1 &",
        file.display()
    );
    sb.remote(agentix_bash::run, (looping, BashOptions::new()))
        .await
        .unwrap();
    support::wait_until("the counter counts", Duration::from_secs(10), || {
        counter(&file) > 3
    })
    .await;

    // The shell that started the loop has exited; the warm shells kept for
    // the next command may not have started yet: the worker and the loop
    // at least.
    let stopped = sb.pause().await.unwrap();
    assert!(stopped >= 2, "the worker and the loop: {stopped}");
    assert_eq!(sb.health().await.unwrap()["status"], "paused");
    let server = sb.server_pid().unwrap();
    let below = descendants(server);
    assert!(below.len() >= 2, "{below:?}");
    for pid in &below {
        assert!(
            matches!(state(*pid), Some('T') | None),
            "process {pid} runs on: {:?}",
            state(*pid)
        );
    }
    let held = counter(&file);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(counter(&file), held, "the counter moved while paused");

    // A call made now waits for the worker.
    let sb = std::sync::Arc::new(sb);
    let waiting = tokio::spawn({
        let sb = sb.clone();
        async move { sb.remote(agentix_e2e::add, (40, 2)).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "a call finished on a paused worker");

    assert!(sb.resume().await.unwrap() >= 2);
    assert_eq!(waiting.await.unwrap().unwrap(), 42);
    support::wait_until("the counter counts again", Duration::from_secs(10), || {
        counter(&file) > held
    })
    .await;
    assert!(below.iter().all(|&pid| state(pid) != Some('T')));
    assert_eq!(sb.health().await.unwrap()["status"], "ok");
    let _ = std::fs::remove_file(&file);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waits_out_a_minute_long_pause_on_the_same_connection() {
    let sb = std::sync::Arc::new(support::sandbox().await);
    let call = tokio::spawn({
        let sb = sb.clone();
        async move { sb.remote(agentix_e2e::sleep_ms, 1_500u64).await }
    });
    // The call is under way in the worker when the pause comes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    sb.pause().await.unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!call.is_finished(), "the call ended while paused");
    assert_eq!(sb.health().await.unwrap()["status"], "paused");
    sb.resume().await.unwrap();
    // Had the connection been dropped, the call would have failed.
    assert_eq!(call.await.unwrap().unwrap(), 1_500);
    assert_eq!(sb.remote(agentix_e2e::add, (1, 2)).await.unwrap(), 3);
}
