//! Cancellation stops the work itself: no late side effects, no leftover
//! child processes, whether the host drops a call, hits a deadline or dies.

mod support;

use std::path::Path;
use std::time::Duration;

use agentix::ErrorKind;
use agentix_wire::process::is_alive;
use support::{bundle_path, plain_sandbox, scratch_dir, wait_until, wait_until_async};

fn path_str(p: &Path) -> String {
    p.to_str().expect("utf-8 temp path").to_owned()
}

#[tokio::test]
async fn a_dropped_call_never_writes_its_file() {
    let sb = plain_sandbox().await;
    let dir = scratch_dir("drop");
    // The same call left alone does write, so the absence below means something.
    let control = dir.join("control");
    assert!(sb
        .remote(agentix_e2e::write_after, (path_str(&control), 50))
        .await
        .unwrap());
    assert!(control.exists());

    let target = dir.join("dropped");
    let call = sb.remote(agentix_e2e::write_after, (path_str(&target), 1000));
    let outcome = tokio::time::timeout(Duration::from_millis(300), call).await;
    assert!(outcome.is_err(), "the call cannot finish in 300 ms");
    assert!(dir.join("dropped.started").exists(), "the call had started");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!target.exists(), "a cancelled call wrote its file");
    assert_eq!(sb.health().await.unwrap()["inflight"], 0);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn large_results_given_up_midway_leave_the_connection_serving_large_results() {
    let sb = plain_sandbox().await;
    // 64 MiB results, each given up at a different point: before the worker
    // made it, while its parts were on their way, near the end (one takes
    // 150–400 ms here); a call that finishes first is fine too.
    for wait in [2, 10, 25, 50, 100, 200] {
        let call = sb.remote(agentix_e2e::make_blob, (64usize << 20,));
        let _ = tokio::time::timeout(Duration::from_millis(wait), call).await;
    }
    wait_until_async("the server to end the given-up calls", || async {
        sb.health().await.unwrap()["inflight"] == 0
    })
    .await;
    let blob = sb
        .remote(agentix_e2e::make_blob, (5usize << 20,))
        .await
        .unwrap();
    assert_eq!(blob.len(), 5 << 20);
    assert!(blob.iter().all(|&b| b == 0x5a));
    assert_eq!(sb.remote(agentix_e2e::add, (2, 3)).await.unwrap(), 5);
}

#[tokio::test]
async fn a_deadline_ends_the_call_as_timeout_and_stops_it() {
    let sb = plain_sandbox().await;
    let dir = scratch_dir("deadline");
    let target = dir.join("late");
    let err = sb
        .remote(agentix_e2e::write_after, (path_str(&target), 1000))
        .timeout(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err}");
    assert!(err.message.contains("write_after"), "{err}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!target.exists(), "a timed-out call wrote its file");
    // A deadline that is not reached changes nothing.
    let ok = sb
        .remote(agentix_e2e::add, (2, 2))
        .timeout(Duration::from_secs(10))
        .await;
    assert_eq!(ok.unwrap(), 4);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn cancelling_kills_the_child_process_the_call_started() {
    let sb = std::sync::Arc::new(plain_sandbox().await);
    let dir = scratch_dir("child");
    let pid_file = dir.join("child.pid");
    let task = {
        let sb = sb.clone();
        let pid_file = path_str(&pid_file);
        tokio::spawn(async move { sb.remote(agentix_e2e::run_child, (pid_file,)).await })
    };
    wait_until("the child's pid file", Duration::from_secs(10), || {
        std::fs::read_to_string(&pid_file).is_ok_and(|s| !s.is_empty())
    })
    .await;
    let child: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(is_alive(child), "the child runs while the call does");
    task.abort();
    wait_until("the child to be killed", Duration::from_secs(10), || {
        !is_alive(child)
    })
    .await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_host_that_dies_mid_call_gets_its_calls_cancelled() {
    let sb = plain_sandbox().await;
    assert_eq!(sb.remote(agentix_e2e::add, (1, 1)).await.unwrap(), 2);
    let dir = scratch_dir("host-dies");
    let target = dir.join("orphaned");
    let mut host = std::process::Command::new(bundle_path())
        .args(["attach-and-call", sb.addr(), sb.token(), &path_str(&target)])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until(
        "the other host's call to start",
        Duration::from_secs(10),
        || dir.join("orphaned.started").exists(),
    )
    .await;
    host.kill().unwrap();
    host.wait().unwrap();
    wait_until_async("the server to cancel the dead host's call", || async {
        sb.health().await.unwrap()["inflight"] == 0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1800)).await;
    assert!(
        !target.exists(),
        "a dead host's call went on and wrote its file"
    );
    assert_eq!(sb.remote(agentix_e2e::add, (2, 3)).await.unwrap(), 5);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn dropping_an_attached_sandbox_cancels_its_streams_in_the_worker() {
    let sb = plain_sandbox().await;
    let attached = agentix::Sandbox::attach(sb.addr(), sb.token());
    let mut items = attached.stream(agentix_e2e::tick, (5,)).await.unwrap();
    use agentix::StreamExt;
    assert_eq!(items.next().await.unwrap().unwrap(), 0);
    assert_eq!(sb.health().await.unwrap()["inflight"], 1);
    drop(attached);
    // The stream's reader lives on, but the call ends for it and in the worker.
    let err = loop {
        match items.next().await {
            Some(Ok(_)) => continue,
            Some(Err(e)) => break e,
            None => panic!("the stream must end with the reason"),
        }
    };
    assert_eq!(err.kind, ErrorKind::ConnectionLost, "{err}");
    wait_until_async(
        "the server to cancel the dropped sandbox's stream",
        || async { sb.health().await.unwrap()["inflight"] == 0 },
    )
    .await;
}
