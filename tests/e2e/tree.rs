//! The server's actor tree, embedded: servers started inside this test's
//! actix `System`, two at once, and children of the tree stopped to see
//! their parents start them again.

mod support;

use std::future::IntoFuture;
use std::time::Duration;

use agentix::{ErrorKind, HostNamespace, Sandbox, StreamExt};
use agentix_server::server_child::ServerChild;
use agentix_server::server_supervisor::{
    RelayRestarts, RestartChild, RouterRestarts, SupervisorRestarts,
};
use agentix_server::{Server, ServerConfig, StartError};
use serde_json::json;
use support::{bundle_path, scratch_dir, wait_until};
use tokio::sync::mpsc;

fn config(token: &str) -> ServerConfig {
    ServerConfig {
        token: Some(token.into()),
        worker_command: vec![bundle_path().into(), "worker".into()],
        ..ServerConfig::default()
    }
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

async fn worker_pid(sandbox: &Sandbox) -> u32 {
    sandbox.remote(agentix_e2e::worker_pid, ()).await.unwrap()
}

#[actix_rt::test]
async fn two_embedded_servers_serve_side_by_side_and_stop_alone() {
    let a = Server::start(config("token-a")).await.unwrap();
    let b = Server::start(config("token-b")).await.unwrap();
    assert_ne!(a.addr(), b.addr());
    let on_a = Sandbox::attach(a.addr(), "token-a");
    let on_b = Sandbox::attach(b.addr(), "token-b");
    let (pid_a, pid_b) = (worker_pid(&on_a).await, worker_pid(&on_b).await);
    assert_ne!(pid_a, pid_b, "each server runs a worker of its own");
    assert_eq!(on_a.remote(agentix_e2e::add, (2, 3)).await.unwrap(), 5);
    assert_eq!(
        on_b.remote(agentix_e2e::echo, "b".to_owned())
            .await
            .unwrap(),
        "b"
    );
    let health_a = a.health().await.unwrap();
    let health_b = b.health().await.unwrap();
    assert_ne!(health_a.worker_id, health_b.worker_id);

    let wrong = Sandbox::attach(b.addr(), "token-a");
    let err = wrong.remote(agentix_e2e::worker_pid, ()).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::AuthRejected, "{err}");

    a.stop().await;
    wait_until(
        "server a's worker to be gone",
        Duration::from_secs(10),
        || !alive(pid_a),
    )
    .await;
    let err = on_a.remote(agentix_e2e::worker_pid, ()).await.unwrap_err();
    assert!(
        matches!(
            err.kind,
            ErrorKind::ConnectionLost | ErrorKind::ServerExited | ErrorKind::ServerUnreachable
        ),
        "{err}"
    );
    assert_eq!(worker_pid(&on_b).await, pid_b, "server b is untouched");
    assert!(alive(pid_b));
    b.stop().await;
    wait_until(
        "server b's worker to be gone",
        Duration::from_secs(10),
        || !alive(pid_b),
    )
    .await;
}

#[actix_rt::test]
async fn a_server_that_cannot_start_says_why() {
    let mut no_worker = config("t");
    no_worker.worker_command.clear();
    assert!(matches!(
        Server::start(no_worker).await,
        Err(StartError::NoWorker)
    ));
    let mut no_token = config("t");
    no_token.token = None;
    assert!(matches!(
        Server::start(no_token).await,
        Err(StartError::NoToken)
    ));
    let taken = Server::start(config("t")).await.unwrap();
    let port: u16 = taken.addr().rsplit(':').next().unwrap().parse().unwrap();
    let mut same_port = config("t");
    same_port.port = port;
    let err = Server::start(same_port).await.err().expect("port in use");
    assert!(matches!(err, StartError::Bind(_)), "{err}");
    taken.stop().await;
}

#[actix_rt::test]
async fn a_worker_that_never_becomes_ready_is_killed_and_the_calls_waiting_for_it_fail() {
    let mut never_ready = config("never-ready");
    never_ready.worker_command = vec!["sleep".into(), "600".into()];
    never_ready.worker_start_timeout = Duration::from_millis(300);
    let server = Server::start(never_ready).await.unwrap();
    let first = server.health().await.unwrap().pid.expect("a worker runs");
    let sandbox = Sandbox::attach(server.addr(), "never-ready");
    let err = sandbox
        .remote(agentix_e2e::add, (1, 2))
        .timeout(Duration::from_secs(20))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::WorkerStartFailed, "{err}");
    wait_until(
        "the worker that never became ready to be killed",
        Duration::from_secs(10),
        || !alive(first),
    )
    .await;
    server.stop().await;
}

/// Runs `call` and, 300 ms into it, stops `child` of `server`'s tree as a
/// crash would; returns the error the call ended with.
async fn stopped_mid_call<T: std::fmt::Debug>(
    server: &Server,
    child: ServerChild,
    call: impl std::future::IntoFuture<Output = Result<T, agentix::RemoteError>>,
) -> agentix::RemoteError {
    let (outcome, ()) = tokio::join!(call.into_future(), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        server.root().send(RestartChild(child)).await.unwrap();
    });
    outcome.expect_err("the call outlives the child")
}

#[actix_rt::test]
async fn the_root_restarts_a_worker_supervisor_that_ended_and_calls_go_on() {
    let server = Server::start(config("tree")).await.unwrap();
    let sandbox = Sandbox::attach(server.addr(), "tree");
    let first = worker_pid(&sandbox).await;

    let slow = sandbox.remote(agentix_e2e::sleep_ms, (30_000,));
    let err = stopped_mid_call(&server, ServerChild::WorkerSupervisor, slow).await;
    assert_eq!(err.kind, ErrorKind::WorkerExited, "{err}");
    wait_until(
        "the old supervisor's worker to be gone",
        Duration::from_secs(10),
        || !alive(first),
    )
    .await;

    let second = worker_pid(&sandbox).await;
    assert_ne!(first, second, "a new worker serves the calls");
    assert_eq!(sandbox.remote(agentix_e2e::add, (1, 1)).await.unwrap(), 2);
    assert_eq!(server.root().send(SupervisorRestarts).await.unwrap(), 1);
    assert_eq!(server.hosts(), 1, "the host kept its connection");
    server.stop().await;
}

#[actix_rt::test]
async fn the_root_restarts_a_call_router_that_ended_and_the_same_worker_serves_on() {
    let server = Server::start(config("router")).await.unwrap();
    let sandbox = Sandbox::attach(server.addr(), "router");
    let pid = worker_pid(&sandbox).await;
    let marker = scratch_dir("router-restart").join("held");
    let marker_text = marker.to_string_lossy().into_owned();

    // The call runs in the worker, held by the router that is stopped.
    let held = sandbox.remote(agentix_e2e::hold, marker_text);
    let err = stopped_mid_call(&server, ServerChild::CallRouter, held).await;
    assert_eq!(err.kind, ErrorKind::CallLost, "{err}");
    // The worker dropped the lost call's task: nobody would hear its result.
    wait_until(
        "the lost call's task to be dropped in the worker",
        Duration::from_secs(10),
        || marker.exists(),
    )
    .await;

    assert_eq!(sandbox.remote(agentix_e2e::add, (2, 2)).await.unwrap(), 4);
    assert_eq!(worker_pid(&sandbox).await, pid, "the same worker serves");
    let items: Vec<u64> = sandbox
        .stream(agentix_e2e::count, 5u64)
        .await
        .unwrap()
        .map(|item| item.unwrap())
        .collect()
        .await;
    assert_eq!(items, [0, 1, 2, 3, 4]);
    assert_eq!(server.root().send(RouterRestarts).await.unwrap(), 1);
    assert_eq!(server.root().send(SupervisorRestarts).await.unwrap(), 0);
    assert_eq!(server.hosts(), 1, "the host kept its connection");
    let health = server.health().await.unwrap();
    assert_eq!(health.inflight, 0, "no call is left in the new router");
    server.stop().await;
}

#[actix_rt::test]
async fn a_forwarder_that_ended_is_started_again_on_its_path() {
    let server = Server::start(config("fwd")).await.unwrap();
    let sandbox = Sandbox::attach(server.addr(), "fwd");
    let (tx, mut pongs) = mpsc::unbounded_channel();
    sandbox
        .register_namespace(
            HostNamespace::new("/boot-plugin").on("pong", move |_, pid| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(pid);
                }
            }),
        )
        .unwrap();
    let pid = worker_pid(&sandbox).await;
    assert_eq!(pong(&sandbox, &mut pongs).await, json!(pid));

    server
        .root()
        .send(RestartChild(ServerChild::Forwarder("/boot-plugin".into())))
        .await
        .unwrap();
    // The forwarder's end is reported through the supervisor's mailbox.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        pong(&sandbox, &mut pongs).await,
        json!(pid),
        "the same worker answers through the new forwarder"
    );
    assert_eq!(server.root().send(SupervisorRestarts).await.unwrap(), 0);
    server.stop().await;
}

async fn pong(
    sandbox: &Sandbox,
    pongs: &mut mpsc::UnboundedReceiver<serde_json::Value>,
) -> serde_json::Value {
    sandbox
        .emit("/boot-plugin", "ping", json!(null))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), pongs.recv())
        .await
        .expect("a pong")
        .unwrap()
}

#[actix_rt::test]
async fn a_restarted_log_relay_carries_the_sandboxs_records_again() {
    let server = Server::start(config("relay")).await.unwrap();
    let (tx, mut records) = mpsc::unbounded_channel();
    let listening = agentix::SandboxConfig::new("").on_log(move |_, record| {
        if record.message.starts_with("log ") {
            let _ = tx.send(record.message.clone());
        }
    });
    let sandbox = Sandbox::attach_with(server.addr(), "relay", listening);
    let logged = || async {
        assert_eq!(
            sandbox
                .remote(agentix_e2e::chatter, (3, 0, 0))
                .await
                .unwrap(),
            3
        );
    };
    logged().await;
    for want in ["log 0", "log 1", "log 2"] {
        let got = tokio::time::timeout(Duration::from_secs(10), records.recv())
            .await
            .expect("a record")
            .unwrap();
        assert_eq!(got, want);
    }

    server
        .root()
        .send(RestartChild(ServerChild::LogRelay))
        .await
        .unwrap();
    wait_until_restarted(&server, 1).await;
    logged().await;
    for want in ["log 0", "log 1", "log 2"] {
        let got = tokio::time::timeout(Duration::from_secs(10), records.recv())
            .await
            .expect("a record after the relay restarted")
            .unwrap();
        assert_eq!(got, want);
    }
    server.stop().await;
}

/// Sends the names of the sandbox's `burst.span` spans as they end.
struct SpanNames(mpsc::UnboundedSender<String>);

impl agentix::trace::Processor for SpanNames {
    fn on_span_end(&mut self, span: &agentix::trace::SpanData) {
        if span.name == "burst.span" {
            let _ = self.0.send(span.name.clone());
        }
    }
}

#[actix_rt::test]
async fn a_restarted_trace_relay_carries_the_sandboxs_spans_again() {
    let server = Server::start(config("traces")).await.unwrap();
    let (tx, mut spans) = mpsc::unbounded_channel();
    let sandbox = Sandbox::attach(server.addr(), "traces");
    sandbox.traces().add_processor(SpanNames(tx));
    for restart in [false, true] {
        if restart {
            server
                .root()
                .send(RestartChild(ServerChild::TraceRelay))
                .await
                .unwrap();
            wait_until_restarted(&server, 1).await;
        }
        let call = sandbox.remote(agentix_e2e::chatter, (0, 0, 2));
        let made = agentix::trace::span("host.step").scope(call.into_future());
        assert_eq!(made.await.unwrap(), 2);
        for _ in 0..2 {
            tokio::time::timeout(Duration::from_secs(10), spans.recv())
                .await
                .expect("a span from the sandbox")
                .unwrap();
        }
    }
    assert_eq!(server.root().send(SupervisorRestarts).await.unwrap(), 0);
    server.stop().await;
}

async fn wait_until_restarted(server: &Server, times: u64) {
    let start = std::time::Instant::now();
    while server.root().send(RelayRestarts).await.unwrap() < times {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the relay was never started again"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
