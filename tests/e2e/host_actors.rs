//! The host as actors: a sandbox behind a mailbox, user actors that call
//! it through `Recipient`s and receive a stream's items as messages, and a
//! supervisor that starts a new sandbox when its server dies.

mod support;

use std::sync::Arc;
use std::time::Duration;

use agentix::actix::prelude::*;
use agentix::{
    CallJson, ErrorKind, LocalProvider, RemoteCall, RemoteError, RestartPolicy, SandboxActor,
    SandboxConfig, SandboxHealth, SandboxRestarts, SandboxSupervisor, StopSupervising, StreamItem,
    StreamTo,
};
use serde_json::json;
use support::{bundle_path, plain_sandbox, wait_until};

/// A user actor: doubles numbers by asking the sandbox, and keeps the items
/// of streams sent to it, as the streams' own type.
struct Doubler {
    add: Recipient<RemoteCall<i64>>,
    items: Vec<String>,
}

impl Actor for Doubler {
    type Context = Context<Self>;
}

#[derive(Message)]
#[rtype(result = "Result<i64, RemoteError>")]
struct Double(i64);

impl Handler<Double> for Doubler {
    type Result = ResponseFuture<Result<i64, RemoteError>>;

    fn handle(&mut self, Double(n): Double, _: &mut Context<Self>) -> Self::Result {
        let add = self.add.clone();
        Box::pin(async move {
            add.send(RemoteCall::new(agentix_e2e::add, (n, n)))
                .await
                .expect("the sandbox actor answers")
        })
    }
}

impl Handler<StreamItem<u64>> for Doubler {
    type Result = ();

    fn handle(&mut self, item: StreamItem<u64>, _: &mut Context<Self>) {
        self.items.push(format!("{item:?}"));
    }
}

impl Handler<StreamItem<i64>> for Doubler {
    type Result = ();

    fn handle(&mut self, item: StreamItem<i64>, _: &mut Context<Self>) {
        self.items.push(format!("{item:?}"));
    }
}

#[derive(Message)]
#[rtype(result = "Vec<String>")]
struct Items;

impl Handler<Items> for Doubler {
    type Result = MessageResult<Items>;

    fn handle(&mut self, _: Items, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.items.clone())
    }
}

#[tokio::test]
async fn a_user_actor_calls_through_a_recipient_and_gets_a_streams_items() {
    let sandbox = SandboxActor::start(plain_sandbox().await);
    let doubler = agentix::start_actor({
        let add = sandbox.clone().recipient();
        move |_| Doubler {
            add,
            items: Vec::new(),
        }
    });
    assert_eq!(doubler.send(Double(21)).await.unwrap().unwrap(), 42);

    let by_name = sandbox
        .send(CallJson {
            target: "agentix_e2e::echo".into(),
            args: json!("hi"),
        })
        .await
        .unwrap();
    assert_eq!(by_name.unwrap(), json!("hi"));
    let missing = sandbox
        .send(CallJson {
            target: "agentix_e2e::nope".into(),
            args: json!([]),
        })
        .await
        .unwrap();
    assert_eq!(missing.unwrap_err().kind, ErrorKind::UnknownTarget);

    // The response resolves once the last item was handled by the receiver.
    sandbox
        .send(StreamTo::of(
            agentix_e2e::count,
            5u64,
            doubler.clone().recipient(),
        ))
        .await
        .unwrap();
    let items = doubler.send(Items).await.unwrap();
    assert_eq!(
        items,
        ["Item(0)", "Item(1)", "Item(2)", "Item(3)", "Item(4)", "End"]
    );
    sandbox
        .send(StreamTo::of(
            agentix_e2e::count_then_fail,
            2i64,
            doubler.clone().recipient(),
        ))
        .await
        .unwrap();
    let items = doubler.send(Items).await.unwrap();
    assert!(
        items[6..].last().unwrap().starts_with("Failed("),
        "{items:?}"
    );

    let health = sandbox.send(SandboxHealth).await.unwrap().unwrap();
    assert_eq!(health["status"], "ok");
}

#[tokio::test]
async fn a_supervisor_starts_a_new_sandbox_when_its_server_dies() {
    let provider = Arc::new(LocalProvider::new());
    let supervisor =
        SandboxSupervisor::new(provider, support::plain(SandboxConfig::new(bundle_path())))
            .policy(RestartPolicy::new(1, Duration::from_secs(60)))
            .start();
    let server_pid = || async {
        let health = supervisor.send(SandboxHealth).await.unwrap().unwrap();
        health["pid"].as_u64().unwrap() as u32
    };
    let call = || async {
        supervisor
            .send(RemoteCall::new(agentix_e2e::add, (2, 2)))
            .await
            .unwrap()
    };
    assert_eq!(call().await.unwrap(), 4);
    let first = server_pid().await;

    agentix::process::signal_pid(first, libc::SIGKILL);
    let start = std::time::Instant::now();
    let outcome = loop {
        match call().await {
            Ok(value) => break value,
            Err(e) if start.elapsed() < Duration::from_secs(20) => {
                assert!(
                    matches!(e.kind, ErrorKind::ServerExited | ErrorKind::ConnectionLost),
                    "{e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("no new sandbox: {e}"),
        }
    };
    assert_eq!(outcome, 4);
    let second = server_pid().await;
    assert_ne!(first, second, "a new server serves the calls");
    assert_eq!(supervisor.send(SandboxRestarts).await.unwrap(), 1);

    // Past the policy (one restart a minute) it stops trying, says so, and
    // does not hang.
    agentix::process::signal_pid(second, libc::SIGKILL);
    let start = std::time::Instant::now();
    let degraded = loop {
        match call().await {
            Err(e) if e.kind == ErrorKind::Degraded => break e,
            _ if start.elapsed() > Duration::from_secs(20) => panic!("never degraded"),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    assert!(
        degraded.message.contains("the next one starts in"),
        "{degraded}"
    );
}

#[tokio::test]
async fn stopping_a_supervisor_deletes_its_sandbox() {
    let provider = Arc::new(LocalProvider::new());
    let supervisor =
        SandboxSupervisor::new(provider, support::plain(SandboxConfig::new(bundle_path()))).start();
    let health = supervisor.send(SandboxHealth).await.unwrap().unwrap();
    let server = health["pid"].as_u64().unwrap();
    let worker = health["worker"]["pid"].as_u64().unwrap();
    supervisor.send(StopSupervising).await.unwrap();
    let alive = |pid: u64| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
    };
    wait_until(
        "the server and worker to be gone",
        Duration::from_secs(10),
        || !alive(server) && !alive(worker),
    )
    .await;
}

/// A sink for both side channels: record messages and ended span names.
#[derive(Default)]
struct Sink {
    messages: Vec<String>,
    spans: Vec<String>,
}

impl Actor for Sink {
    type Context = Context<Self>;
}

impl Handler<agentix::SandboxLog> for Sink {
    type Result = ();

    fn handle(&mut self, log: agentix::SandboxLog, _: &mut Context<Self>) {
        self.messages.push(log.record.message);
    }
}

impl Handler<agentix::trace::TraceEvent> for Sink {
    type Result = ();

    fn handle(&mut self, event: agentix::trace::TraceEvent, _: &mut Context<Self>) {
        if let agentix::trace::TraceEvent::SpanEnd(span) = event {
            self.spans.push(span.name);
        }
    }
}

#[derive(Message)]
#[rtype(result = "(Vec<String>, Vec<String>)")]
struct Collected;

impl Handler<Collected> for Sink {
    type Result = MessageResult<Collected>;

    fn handle(&mut self, _: Collected, _: &mut Context<Self>) -> Self::Result {
        MessageResult((self.messages.clone(), self.spans.clone()))
    }
}

#[tokio::test]
async fn log_sinks_and_trace_processors_can_be_actors() {
    let sink = agentix::start_actor(|_| Sink::default());
    let hub = agentix::trace::TraceHub::new();
    hub.add_actor(sink.clone().recipient());
    let config = support::plain(SandboxConfig::new(bundle_path()))
        .log_to(sink.clone().recipient())
        .trace_hub(hub.clone());
    let sb = support::sandbox_with(config).await;
    assert_eq!(sb.remote(agentix_e2e::chatter, (5, 0, 3)).await.unwrap(), 8);
    let start = std::time::Instant::now();
    let (messages, spans) = loop {
        hub.flush().await;
        let (messages, spans) = sink.send(Collected).await.unwrap();
        let logs: Vec<String> = messages
            .into_iter()
            .filter(|m| m.starts_with("log "))
            .collect();
        let bursts = spans.iter().filter(|s| *s == "burst.span").count();
        if (logs.len() >= 5 && bursts >= 3) || start.elapsed() > Duration::from_secs(10) {
            break (logs, bursts);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(messages, ["log 0", "log 1", "log 2", "log 3", "log 4"]);
    assert_eq!(
        spans, 3,
        "the sandbox's spans, replayed to the host's processors"
    );
}
