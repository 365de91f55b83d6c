//! The sandbox stays alive: crashed workers are replaced, a worker that
//! keeps dying degrades the server instead of hanging calls, a silent
//! server is noticed, and SIGTERM drains calls before stopping.

mod support;

use std::time::{Duration, Instant};

use agentix::{ErrorKind, Sandbox, SandboxConfig};
use agentix_wire::process::{is_alive, signal_pid};
use support::{bundle_path, plain_sandbox, sandbox_with, wait_until, HandStartedServer};

#[tokio::test]
async fn every_way_a_worker_dies_ends_the_call_and_a_new_worker_serves() {
    // A backtrace would push the lines checked below out of the tail.
    let sb =
        sandbox_with(support::plain(SandboxConfig::new(bundle_path())).env("RUST_BACKTRACE", "0"))
            .await;
    let cases = [
        ("abort", "signal 6 (SIGABRT)"),
        ("sigkill", "signal 9 (SIGKILL)"),
        ("oom", "signal 6 (SIGABRT)"),
        ("exit", "exit status 7"),
    ];
    for (how, status) in cases {
        let before = sb.remote(agentix_e2e::worker_pid, ()).await.unwrap();
        let err = sb
            .remote(agentix_e2e::crash, (how.to_owned(),))
            .timeout(Duration::from_secs(20))
            .await
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::WorkerExited, "{how}: {err}");
        assert!(err.message.contains(status), "{how}: {err}");
        let details = err.details.clone().unwrap_or_default();
        assert!(
            details.contains(&format!("about to crash by {how}")),
            "{how}: the worker's last stderr lines are missing: {details:?}"
        );
        if how == "oom" {
            assert!(details.contains("memory allocation"), "{details:?}");
        }
        let after = sb.remote(agentix_e2e::worker_pid, ()).await.unwrap();
        assert_ne!(before, after, "{how}: the worker was not replaced");
        assert!(!is_alive(before));
        assert_eq!(sb.remote(agentix_e2e::add, (20, 22)).await.unwrap(), 42);
    }
    assert_eq!(sb.health().await.unwrap()["worker"]["restarts"], 4);
}

#[tokio::test]
async fn a_worker_that_keeps_dying_degrades_the_server_and_calls_fail_fast() {
    let sb = plain_sandbox().await;
    for _ in 0..6 {
        let err = sb
            .remote(agentix_e2e::crash, ("exit".to_owned(),))
            .timeout(Duration::from_secs(20))
            .await
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::WorkerExited, "{err}");
    }
    let health = sb.health().await.unwrap();
    assert_eq!(health["status"], "degraded", "{health}");
    let started = Instant::now();
    let err = sb
        .remote(agentix_e2e::add, (1, 1))
        .timeout(Duration::from_secs(20))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Degraded, "{err}");
    assert!(err.message.contains("stopped restarting"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a degraded server must answer at once, not after a timeout"
    );
}

#[tokio::test]
async fn a_frozen_server_is_noticed_by_the_heartbeat() {
    let server = HandStartedServer::start(&[]);
    let mut config = support::plain(SandboxConfig::new(bundle_path()))
        .heartbeat(Duration::from_millis(100), Duration::from_secs(1));
    config.connect_timeout = Duration::from_secs(1);
    let sb = Sandbox::attach_with(server.addr.clone(), server.token.clone(), config);
    assert_eq!(sb.remote(agentix_e2e::add, (1, 2)).await.unwrap(), 3);
    let call = sb.remote(agentix_e2e::sleep_ms, (600_000,));
    let freeze = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        signal_pid(server.child.id(), libc::SIGSTOP);
    };
    let (outcome, ()) = tokio::time::timeout(Duration::from_secs(15), async {
        tokio::join!(call, freeze)
    })
    .await
    .expect("a call to a frozen server hung");
    let err = outcome.unwrap_err();
    assert_eq!(err.kind, ErrorKind::ConnectionLost, "{err}");
    assert!(err.message.contains("heartbeat"), "{err}");
    // A later call tries to reconnect and gives up within the connect timeout.
    let err = tokio::time::timeout(Duration::from_secs(15), sb.remote(agentix_e2e::add, (1, 2)))
        .await
        .expect("a call to a frozen server hung")
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::ServerUnreachable, "{err}");
}

#[tokio::test]
async fn calls_outlive_many_ping_intervals() {
    let config = support::plain(SandboxConfig::new(bundle_path()))
        .server_arg("--ping-interval-ms", "50")
        .server_arg("--ping-timeout-ms", "100")
        .heartbeat(Duration::from_millis(50), Duration::from_millis(500));
    let sb = sandbox_with(config).await;
    // Sixty ping rounds and twenty heartbeat timeouts pass during this call.
    assert_eq!(
        sb.remote(agentix_e2e::sleep_ms, (3_000,)).await.unwrap(),
        3_000
    );
    assert_eq!(sb.remote(agentix_e2e::add, (1, 1)).await.unwrap(), 2);
}

#[tokio::test]
async fn sigterm_lets_calls_in_flight_finish_and_refuses_new_ones() {
    let config =
        support::plain(SandboxConfig::new(bundle_path())).server_arg("--shutdown-grace-ms", "5000");
    let sb = sandbox_with(config).await;
    let worker = sb.remote(agentix_e2e::worker_pid, ()).await.unwrap();
    let server = sb.server_pid().unwrap();
    let running = sb.remote(agentix_e2e::sleep_ms, (1_000,));
    let after_term = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        signal_pid(server, libc::SIGTERM);
        tokio::time::sleep(Duration::from_millis(100)).await;
        sb.remote(agentix_e2e::add, (1, 1)).await
    };
    let (finished, refused) = tokio::join!(running, after_term);
    assert_eq!(finished.unwrap(), 1_000, "the call in flight finishes");
    let err = refused.unwrap_err();
    assert_eq!(err.kind, ErrorKind::ServerExited, "{err}");
    assert!(err.message.contains("no new calls"), "{err}");
    wait_until(
        "the server and worker to exit",
        Duration::from_secs(10),
        || !is_alive(server) && !is_alive(worker),
    )
    .await;
}

#[tokio::test]
async fn sigterm_stops_calls_that_outlast_the_grace_period() {
    let config =
        support::plain(SandboxConfig::new(bundle_path())).server_arg("--shutdown-grace-ms", "300");
    let sb = sandbox_with(config).await;
    let worker = sb.remote(agentix_e2e::worker_pid, ()).await.unwrap();
    let server = sb.server_pid().unwrap();
    let started = Instant::now();
    let running = sb.remote(agentix_e2e::sleep_ms, (60_000,));
    let term = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        signal_pid(server, libc::SIGTERM);
    };
    let (outcome, ()) = tokio::join!(running, term);
    let err = outcome.unwrap_err();
    assert!(matches!(err.kind, ErrorKind::ServerExited), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the grace period was not applied"
    );
    wait_until(
        "the server and worker to exit",
        Duration::from_secs(10),
        || !is_alive(server) && !is_alive(worker),
    )
    .await;
}

#[tokio::test]
async fn a_stream_whose_server_is_killed_ends_with_why_the_server_ended() {
    use futures_util::StreamExt;
    let sb = plain_sandbox().await;
    let server = sb.server_pid().unwrap();
    let mut ticks = sb.stream(agentix_e2e::tick, 20u64).await.unwrap();
    ticks.next().await.unwrap().unwrap();
    signal_pid(server, libc::SIGKILL);
    let err = loop {
        match ticks.next().await {
            Some(Ok(_)) => continue,
            Some(Err(err)) => break err,
            None => panic!("the stream ended without an error"),
        }
    };
    assert_eq!(err.kind, ErrorKind::ServerExited, "{err}");
    assert!(err.message.contains("signal 9"), "{err}");
    assert!(ticks.next().await.is_none(), "an error is the last item");
}
