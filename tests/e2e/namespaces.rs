//! Plugin namespaces: events both ways, round-trip requests, errors,
//! timeouts, panics, and the rules on paths.

mod support;

use std::time::Duration;

use agentix::{HostNamespace, JsonValue, RegisterError, SandboxConfig};
use serde_json::json;
use support::{next_event, sandbox, sandbox_with};
use tokio::sync::mpsc;

/// The host half the tests use: doubles `fetch` bodies, fails `fail`,
/// panics on `panic`, never answers `silent`, and reports `configured`.
fn host_half(configured: mpsc::UnboundedSender<JsonValue>) -> HostNamespace {
    HostNamespace::new("/e2e-plugin")
        .on("configured", move |_, data| {
            let configured = configured.clone();
            async move {
                let _ = configured.send(data);
            }
        })
        .request_handler("fetch", |body| async move {
            let i = body["i"].as_u64().ok_or("no i")?;
            Ok::<_, &str>(json!(i * 2))
        })
        .request_handler("fail", |_| async move {
            Err::<JsonValue, _>(std::io::Error::other("upstream said no"))
        })
        .request_handler("panic", |_| async move {
            if true {
                panic!("a host handler broke");
            }
            Ok::<JsonValue, String>(JsonValue::Null)
        })
        // Handled as a plain event: taken, never answered.
        .on("silent", |_, _| async move {})
}

#[tokio::test]
async fn events_flow_both_ways_and_requests_round_trip() {
    let sb = sandbox().await;
    let (tx, mut configured) = mpsc::unbounded_channel();
    sb.register_namespace(host_half(tx)).unwrap();
    assert_eq!(
        sb.remote(agentix_e2e::open_plugin, ()).await.unwrap(),
        "open"
    );

    sb.emit("/e2e-plugin", "configure", json!({"model": "claude"}))
        .await
        .unwrap();
    let echoed = next_event(&mut configured, "the sandbox answered the event").await;
    assert_eq!(echoed, json!({"model": "claude"}));

    // As many requests in flight at once as a namespace takes (past its
    // budget of 256 the host answers `Overloaded`, which stuck_peer tests),
    // each matched to its own reply.
    let replies = sb.remote(agentix_e2e::ask_host, (250,)).await.unwrap();
    assert_eq!(replies.len(), 250);
    for (i, reply) in replies.iter().enumerate() {
        assert_eq!(reply, &json!(i * 2), "request {i} got another's reply");
    }
}

#[tokio::test]
async fn text_handlers_get_each_body_and_payload_as_the_sandbox_wrote_it() {
    let sb = sandbox().await;
    let (tx, mut configured) = mpsc::unbounded_channel();
    let ns = HostNamespace::new("/e2e-plugin")
        .request_handler_text("fetch", |body: agentix::JsonText| async move {
            Ok::<_, String>(json!(body.as_str()))
        })
        .on_text("configured", move |_, data: agentix::JsonText| {
            let configured = tx.clone();
            async move {
                let _ = configured.send(data.as_str().to_owned());
            }
        });
    sb.register_namespace(ns).unwrap();
    sb.remote(agentix_e2e::open_plugin, ()).await.unwrap();
    let replies = sb.remote(agentix_e2e::ask_host, (100,)).await.unwrap();
    for (i, reply) in replies.iter().enumerate() {
        assert_eq!(reply, &json!(format!("{{\"i\":{i}}}")), "request {i}");
    }

    // The sandbox echoes each payload as it writes JSON: compactly.
    for sent in [json!({"b": [1, 2.5], "a": "caf\u{e9}"}), JsonValue::Null] {
        sb.emit("/e2e-plugin", "configure", sent.clone())
            .await
            .unwrap();
        let text = next_event(&mut configured, "the sandbox echoed the payload").await;
        assert_eq!(text, serde_json::to_string(&sent).unwrap());
    }
}

#[tokio::test]
#[allow(deprecated)] // the v0.1.0 builder, kept for a release
async fn a_typed_request_handler_gets_its_type_and_a_body_that_is_not_one_a_bad_request() {
    #[derive(serde::Deserialize)]
    struct Fetch {
        i: u64,
    }
    let sb = sandbox().await;
    let ns = HostNamespace::new("/e2e-plugin")
        .request_handler_as("fetch", |body: Fetch| async move {
            Ok::<_, String>(json!(body.i * 3))
        })
        .request_handler_as("typed", |body: Fetch| async move {
            Ok::<_, String>(json!(body.i))
        });
    sb.register_namespace(ns).unwrap();
    sb.remote(agentix_e2e::open_plugin, ()).await.unwrap();
    let replies = sb.remote(agentix_e2e::ask_host, (20,)).await.unwrap();
    for (i, reply) in replies.iter().enumerate() {
        assert_eq!(reply, &json!(i * 3), "request {i}");
    }

    // `{}` is no `Fetch`: answered saying why, not left to its timeout.
    let err = sb
        .remote(agentix_e2e::ask_host_event, ("typed".into(), 60_000))
        .await
        .unwrap_err()
        .message;
    assert!(err.starts_with("raised BadRequest:"), "{err}");
    assert!(err.contains("missing field `i`"), "{err}");
    let replies = sb.remote(agentix_e2e::ask_host, (3,)).await.unwrap();
    assert_eq!(replies, vec![json!(0), json!(3), json!(6)]);
}

#[tokio::test]
#[allow(deprecated)] // the v0.1.0 builder, kept for a release
async fn a_request_taken_as_an_event_gets_its_id_and_its_body_or_why_not() {
    #[derive(serde::Deserialize)]
    struct Fetch {
        i: u64,
    }
    let sb = sandbox().await;
    let ns = HostNamespace::new("/e2e-plugin").on_request_as(
        "fetch",
        |ns, request_id, body: Result<Fetch, String>| async move {
            let (event, reply) = match body {
                Ok(fetch) => (
                    "fetch:result",
                    json!({"request_id": request_id, "data": fetch.i * 5}),
                ),
                Err(why) => (
                    "fetch:error",
                    json!({"request_id": request_id, "error": {"type": "Refused", "message": why}}),
                ),
            };
            ns.emit(event, reply).await.unwrap();
        },
    );
    sb.register_namespace(ns).unwrap();
    sb.remote(agentix_e2e::open_plugin, ()).await.unwrap();
    let replies = sb.remote(agentix_e2e::ask_host, (20,)).await.unwrap();
    for (i, reply) in replies.iter().enumerate() {
        assert_eq!(reply, &json!(i * 5), "request {i}");
    }
    // `{}` is no `Fetch`: the handler is told why, under the request's id.
    let err = sb
        .remote(agentix_e2e::ask_host_event, ("fetch".into(), 60_000))
        .await
        .unwrap_err()
        .message;
    assert!(err.starts_with("raised Refused:"), "{err}");
    assert!(err.contains("missing field `i`"), "{err}");
}

#[tokio::test]
async fn an_emit_given_up_after_its_first_step_still_arrives() {
    // No heartbeat within the wait below: nothing else flushes the socket.
    let config = SandboxConfig::new(support::bundle_path())
        .heartbeat(Duration::from_secs(60), Duration::from_secs(120));
    let sb = sandbox_with(config).await;
    let (tx, mut configured) = mpsc::unbounded_channel();
    sb.register_namespace(host_half(tx)).unwrap();
    sb.remote(agentix_e2e::open_plugin, ()).await.unwrap();

    // The first step writes the event and leaves its flush to the next
    // turn; giving up right there must not strand it in the write buffer
    // until the next packet (the server's ping, 25 s away).
    let mut emit = Box::pin(sb.emit("/e2e-plugin", "configure", json!({"given up": 1})));
    assert!(
        futures_util::poll!(emit.as_mut()).is_pending(),
        "the emit finished in one step, so this test no longer covers giving up between its write and its flush"
    );
    drop(emit);
    let echoed = next_event(&mut configured, "the sandbox got the given-up event").await;
    assert_eq!(echoed, json!({"given up": 1}));
}

#[tokio::test]
async fn errors_timeouts_and_panics_become_clear_replies() {
    let sb = sandbox().await;
    let (tx, mut configured) = mpsc::unbounded_channel();
    sb.register_namespace(host_half(tx)).unwrap();
    sb.remote(agentix_e2e::open_plugin, ()).await.unwrap();

    let err = sb
        .remote(agentix_e2e::ask_host_event, ("fail".into(), 10_000))
        .await
        .unwrap_err()
        .message;
    assert_eq!(err, "raised Error: upstream said no");
    let err = sb
        .remote(agentix_e2e::ask_host_event, ("panic".into(), 10_000))
        .await
        .unwrap_err()
        .message;
    assert!(err.starts_with("raised Panic:"), "{err}");
    let err = sb
        .remote(agentix_e2e::ask_host_event, ("silent".into(), 300))
        .await
        .unwrap_err()
        .message;
    assert!(err.contains("no reply to `silent`"), "{err}");

    // A request nothing handles is answered at once, not at its timeout.
    let err = sb
        .remote(agentix_e2e::ask_host_event, ("unheard-of".into(), 600_000))
        .await
        .unwrap_err()
        .message;
    assert_eq!(
        err,
        "raised NoHandler: nothing handles `unheard-of` on /e2e-plugin"
    );

    // A sandbox handler that panics takes nothing down with it, in its
    // future or in the closure that makes it (which runs on the worker's
    // frame loop).
    let pid = sb.remote(agentix_e2e::worker_pid, ()).await.unwrap();
    for (event, value) in [("explode", 1), ("explode-early", 2)] {
        sb.emit("/e2e-plugin", event, json!({})).await.unwrap();
        sb.emit("/e2e-plugin", "configure", json!(value))
            .await
            .unwrap();
        let echoed = next_event(&mut configured, "the namespace still serves").await;
        assert_eq!(echoed, json!(value));
    }
    assert_eq!(sb.remote(agentix_e2e::add, (1, 1)).await.unwrap(), 2);
    assert_eq!(
        sb.remote(agentix_e2e::worker_pid, ()).await.unwrap(),
        pid,
        "the same worker serves on"
    );
}

#[tokio::test]
async fn event_names_with_colons_work_and_slow_host_handlers_block_nothing() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let sb = sandbox().await;
    let (status_tx, mut status) = mpsc::unbounded_channel();
    let slow_done = Arc::new(AtomicBool::new(false));
    let done = slow_done.clone();
    sb.register_namespace(
        HostNamespace::new("/e2e-plugin")
            .on("status:value", move |_, data| {
                let tx = status_tx.clone();
                async move {
                    let _ = tx.send(data);
                }
            })
            .request_handler("slow", move |_| {
                let done = done.clone();
                async move {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    done.store(true, Ordering::SeqCst);
                    Ok::<_, String>(json!("finally"))
                }
            }),
    )
    .unwrap();
    sb.remote(agentix_e2e::open_plugin, ()).await.unwrap();

    sb.emit("/e2e-plugin", "status:get", json!(null))
        .await
        .unwrap();
    let value = next_event(&mut status, "status:value arrives").await;
    assert_eq!(value, json!("ready"));

    // While the host's slow handler works, calls and other events go on.
    let slow = sb.remote(agentix_e2e::ask_host_event, ("slow".into(), 20_000));
    let meanwhile = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let sum = sb.remote(agentix_e2e::add, (2, 3)).await.unwrap();
        sb.emit("/e2e-plugin", "status:get", json!(null))
            .await
            .unwrap();
        let value = status.recv().await.unwrap();
        (sum, value, slow_done.load(Ordering::SeqCst))
    };
    let (slow_reply, (sum, value, slow_finished_first)) = tokio::join!(slow, meanwhile);
    assert_eq!((sum, value), (5, json!("ready")));
    assert!(
        !slow_finished_first,
        "the call and the event were served while the slow handler still ran"
    );
    assert_eq!(slow_reply.unwrap(), json!("finally"));
}

#[tokio::test]
async fn reserved_duplicate_and_late_registrations_fail_clearly() {
    let sb = sandbox().await;
    let (tx, _rx) = mpsc::unbounded_channel();
    for reserved in ["/rpc", "/log", "/trace"] {
        let err = sb
            .register_namespace(HostNamespace::new(reserved))
            .unwrap_err();
        assert!(matches!(err, RegisterError::BadPath(_)), "{err}");
        assert!(err.to_string().contains("reserved"), "{err}");
        let sandbox_side = sb
            .remote(agentix_e2e::try_register, (reserved.to_owned(),))
            .await
            .unwrap();
        assert!(sandbox_side.contains("reserved"), "{sandbox_side}");
    }
    assert!(matches!(
        sb.register_namespace(HostNamespace::new("no-slash")),
        Err(RegisterError::BadPath(_))
    ));
    // The host connected above: its plan is fixed.
    let err = sb.register_namespace(host_half(tx)).unwrap_err();
    assert_eq!(err, RegisterError::AfterConnect);
    assert!(err.to_string().contains("before the first remote call"));

    let first = sb
        .remote(agentix_e2e::try_register, ("/twice".into(),))
        .await
        .unwrap();
    assert_eq!(first, "ok");
    let second = sb
        .remote(agentix_e2e::try_register, ("/twice".into(),))
        .await
        .unwrap();
    assert!(second.contains("already registered"), "{second}");

    let fresh = sandbox().await;
    fresh
        .register_namespace(HostNamespace::new("/same"))
        .unwrap();
    let err = fresh
        .register_namespace(HostNamespace::new("/same"))
        .unwrap_err();
    assert_eq!(err, RegisterError::Duplicate("/same".into()));
}

#[tokio::test]
async fn a_restarted_worker_opens_its_namespaces_again() {
    let sb = sandbox().await;
    let (tx, mut pongs) = mpsc::unbounded_channel();
    sb.register_namespace(
        HostNamespace::new("/boot-plugin").on("pong", move |_, pid| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(pid);
            }
        }),
    )
    .unwrap();
    let first = sb.remote(agentix_e2e::worker_pid, ()).await.unwrap();
    sb.emit("/boot-plugin", "ping", json!(null)).await.unwrap();
    let pid = next_event(&mut pongs, "pong from the first worker").await;
    assert_eq!(pid, json!(first));

    let err = sb.remote(agentix_e2e::exit_worker, (3,)).await.unwrap_err();
    assert_eq!(err.kind, agentix::ErrorKind::WorkerExited);
    let second = sb.remote(agentix_e2e::worker_pid, ()).await.unwrap();
    assert_ne!(first, second);
    sb.emit("/boot-plugin", "ping", json!(null)).await.unwrap();
    let pid = next_event(
        &mut pongs,
        "pong from the restarted worker, over the same host connection",
    )
    .await;
    assert_eq!(pid, json!(second));
}

#[tokio::test]
async fn bad_plugin_traffic_is_dropped_and_the_namespace_serves_on() {
    use support::raw_socket::RawSocket;
    let sb = sandbox().await;
    sb.remote(agentix_e2e::open_plugin, ()).await.unwrap();
    let mut raw = RawSocket::connect_ns(sb.addr(), sb.token(), "/e2e-plugin").await;
    // Replies nobody asked for, malformed envelopes, events without handlers.
    raw.emit(
        "fetch:result",
        json!({"request_id": "never-sent", "data": 1}),
    )
    .await;
    raw.emit("fetch:error", json!({"request_id": "never-sent"}))
        .await;
    raw.emit("fetch:error", json!("not an envelope")).await;
    raw.emit("no-such-event", json!([1, 2])).await;
    raw.send("42/e2e-plugin,[\"configure\", {broken").await;
    // A path no worker opened accepts the connection and drops the events.
    let mut nobody = RawSocket::connect_ns(sb.addr(), sb.token(), "/nobody").await;
    nobody.emit("configure", json!({"x": 1})).await;

    // The namespace still answers (possibly on a fresh connection, if the
    // broken packet closed the first one).
    let mut fresh = RawSocket::connect_ns(sb.addr(), sb.token(), "/e2e-plugin").await;
    fresh.emit("configure", json!({"still": "here"})).await;
    let (name, data) = fresh.recv_event().await.expect("configured");
    assert_eq!(name, "configured");
    assert_eq!(data, json!({"still": "here"}));
    assert_eq!(sb.remote(agentix_e2e::add, (2, 2)).await.unwrap(), 4);
    drop((raw, nobody));
}

#[tokio::test]
async fn a_request_on_a_namespace_no_host_joined_fails_at_once_with_no_host() {
    let sb = sandbox().await;
    sb.remote(agentix_e2e::open_plugin, ()).await.unwrap();
    let err = sb
        .remote(agentix_e2e::ask_host_event, ("fetch".into(), 600_000))
        .await
        .unwrap_err()
        .message;
    assert_eq!(
        err,
        "raised NoHost: no host has joined /e2e-plugin: register the namespace on the host first"
    );
}

/// A host-side namespace actor: keeps the numbers it is sent, doubles
/// `fetch` bodies and refuses `refuse` requests.
#[derive(Default)]
struct HostKeeper {
    numbers: Vec<JsonValue>,
}

impl agentix::actix::Actor for HostKeeper {
    type Context = agentix::actix::Context<Self>;
}

impl agentix::actix::Handler<agentix::NamespaceEvent<agentix::HostNamespaceHandle>> for HostKeeper {
    type Result = ();

    fn handle(
        &mut self,
        msg: agentix::NamespaceEvent<agentix::HostNamespaceHandle>,
        _: &mut Self::Context,
    ) {
        self.numbers.push(msg.data);
    }
}

impl agentix::actix::Handler<agentix::NamespaceRequest<agentix::HostNamespaceHandle>>
    for HostKeeper
{
    type Result = Result<JsonValue, agentix::NamespaceFault>;

    fn handle(
        &mut self,
        msg: agentix::NamespaceRequest<agentix::HostNamespaceHandle>,
        _: &mut Self::Context,
    ) -> Self::Result {
        match msg.event.as_str() {
            "fetch" => Ok(json!(msg.body["i"].as_u64().unwrap() * 2)),
            _ => Err(agentix::NamespaceFault::new("Refused", "not this one")),
        }
    }
}

#[derive(agentix::actix::Message)]
#[rtype(result = "Vec<JsonValue>")]
struct Numbers;

impl agentix::actix::Handler<Numbers> for HostKeeper {
    type Result = agentix::actix::MessageResult<Numbers>;

    fn handle(&mut self, _: Numbers, _: &mut Self::Context) -> Self::Result {
        agentix::actix::MessageResult(self.numbers.clone())
    }
}

#[tokio::test]
async fn a_host_namespace_actor_gets_events_in_order_and_answers_requests() {
    let sb = sandbox().await;
    // A plain tokio program: the actor runs on agentix's background arbiter.
    let keeper = agentix::start_actor(|_| HostKeeper::default());
    let host = HostNamespace::new("/e2e-plugin")
        .on_actor(["number"], keeper.clone().recipient())
        .request_actor("fetch", keeper.clone().recipient())
        .request_actor("refuse", keeper.clone().recipient());
    sb.register_namespace(host).unwrap();
    sb.remote(agentix_e2e::open_plugin, ()).await.unwrap();

    assert_eq!(
        sb.remote(agentix_e2e::emit_numbers, (2_000,))
            .await
            .unwrap(),
        2_000
    );
    let expected: Vec<JsonValue> = (0..2_000).map(|i| json!(i)).collect();
    let start = std::time::Instant::now();
    let numbers = loop {
        let numbers = keeper.send(Numbers).await.unwrap();
        if numbers.len() >= expected.len() || start.elapsed() > Duration::from_secs(10) {
            break numbers;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(
        numbers, expected,
        "every event, in the order it was emitted"
    );

    let replies = sb.remote(agentix_e2e::ask_host, (200,)).await.unwrap();
    for (i, reply) in replies.iter().enumerate() {
        assert_eq!(reply, &json!(i * 2), "request {i} got another's reply");
    }
    let err = sb
        .remote(agentix_e2e::ask_host_event, ("refuse".into(), 10_000))
        .await
        .unwrap_err()
        .message;
    assert_eq!(err, "raised Refused: not this one");
}

#[tokio::test]
async fn a_sandbox_namespace_actor_gets_the_hosts_events_in_order() {
    let sb = sandbox().await;
    let (tx, mut reported) = mpsc::unbounded_channel();
    sb.register_namespace(
        HostNamespace::new("/e2e-actor").on("reported", move |_, numbers| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(numbers);
            }
        }),
    )
    .unwrap();
    sb.remote(agentix_e2e::open_actor_plugin, ()).await.unwrap();
    for i in 0..500 {
        sb.emit("/e2e-actor", "number", json!(i)).await.unwrap();
    }
    sb.emit("/e2e-actor", "report", json!(null)).await.unwrap();
    let numbers = next_event(&mut reported, "the actor reports").await;
    let expected: Vec<JsonValue> = (0..500).map(|i| json!(i)).collect();
    assert_eq!(numbers, JsonValue::Array(expected));
}

/// Answers a request only when the sandbox cancels it, and reports that.
struct Canceller(mpsc::UnboundedSender<&'static str>);

impl agentix::actix::Actor for Canceller {
    type Context = agentix::actix::Context<Self>;
}

impl agentix::actix::Handler<agentix::NamespaceRequest<agentix::HostNamespaceHandle>>
    for Canceller
{
    type Result = agentix::actix::ResponseFuture<Result<JsonValue, agentix::NamespaceFault>>;

    fn handle(
        &mut self,
        msg: agentix::NamespaceRequest<agentix::HostNamespaceHandle>,
        _: &mut Self::Context,
    ) -> Self::Result {
        let report = self.0.clone();
        Box::pin(async move {
            tokio::select! {
                () = msg.cancelled.cancelled() => { let _ = report.send("actor cancelled"); }
                () = tokio::time::sleep(Duration::from_secs(600)) => {}
            }
            Ok(JsonValue::Null)
        })
    }
}

/// Reports when the future holding it is dropped.
struct DropReport(mpsc::UnboundedSender<&'static str>);

impl Drop for DropReport {
    fn drop(&mut self) {
        let _ = self.0.send("closure dropped");
    }
}

#[tokio::test]
async fn a_request_the_sandbox_stops_waiting_for_stops_its_host_handler() {
    let sb = sandbox().await;
    let (tx, mut reports) = mpsc::unbounded_channel();
    let host = HostNamespace::new("/e2e-plugin")
        .request_handler("hang", {
            let tx = tx.clone();
            move |_| {
                let guard = DropReport(tx.clone());
                async move {
                    tokio::time::sleep(Duration::from_secs(600)).await;
                    drop(guard);
                    Ok::<_, String>(JsonValue::Null)
                }
            }
        })
        .request_actor(
            "hang-actor",
            agentix::start_actor(move |_| Canceller(tx)).recipient(),
        );
    sb.register_namespace(host).unwrap();
    sb.remote(agentix_e2e::open_plugin, ()).await.unwrap();

    for (event, report) in [
        ("hang", "closure dropped"),
        ("hang-actor", "actor cancelled"),
    ] {
        // The sandbox gives up after 300 ms; its cancel stops the host's work.
        let err = sb
            .remote(agentix_e2e::ask_host_event, (event.into(), 300))
            .await
            .unwrap_err()
            .message;
        assert!(err.contains(&format!("no reply to `{event}`")), "{err}");
        let got = tokio::time::timeout(Duration::from_secs(10), reports.recv())
            .await
            .unwrap_or_else(|_| panic!("the host's `{event}` handler was not stopped"));
        assert_eq!(got, Some(report));
    }
    // Nothing else waits, and the namespace answers on.
    assert_eq!(
        sb.remote(agentix_e2e::abandon_requests, (0,))
            .await
            .unwrap(),
        0
    );
    assert_eq!(sb.remote(agentix_e2e::add, (1, 1)).await.unwrap(), 2);
}

#[tokio::test]
async fn a_closure_handler_gets_one_namespaces_events_in_the_order_they_were_emitted() {
    let sb = sandbox().await;
    let (numbers_tx, mut numbers) = mpsc::unbounded_channel();
    sb.register_namespace(HostNamespace::new("/e2e-plugin").on("number", move |_, n| {
        let tx = numbers_tx.clone();
        async move {
            // Earlier events take longer: handled side by side, later ones
            // would overtake them.
            let i = n.as_u64().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(3 - i % 4)).await;
            let _ = tx.send(n);
        }
    }))
    .unwrap();
    sb.remote(agentix_e2e::open_plugin, ()).await.unwrap();
    assert_eq!(
        sb.remote(agentix_e2e::emit_numbers, (200,)).await.unwrap(),
        200
    );
    let mut seen = Vec::new();
    while seen.len() < 200 {
        seen.push(next_event(&mut numbers, "every number arrives").await);
    }
    let expected: Vec<JsonValue> = (0..200).map(|i| json!(i)).collect();
    assert_eq!(seen, expected, "every event, in the order it was emitted");
}
