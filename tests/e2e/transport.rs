//! The host's Socket.IO transport: bytes as bytes at every size, many large
//! calls at once on one websocket, reconnecting with every namespace, the
//! server's first-event race, a frozen server, a local host on the Unix
//! socket beside the port. (A server that stops reading
//! is in `stuck_peer.rs`: it measures this process's memory, which needs a
//! test binary of its own.)

mod support;

use std::future::IntoFuture;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentix::trace::{Processor, SpanData};
use agentix::{
    Blob, ErrorKind, HostNamespace, LocalProvider, Provider, Sandbox, SandboxConfig, StreamExt,
};
use serde_json::json;
use support::raw_socket::RawSocket;
use support::{bundle_path, next_event, sandbox, sandbox_with, wait_until, HandStartedServer};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;

/// `len` bytes in which every byte value occurs (0x1e, Engine.IO's old
/// record separator, among them), varying with `seed`.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8) ^ ((i >> 8) as u8).wrapping_mul(31) ^ seed)
        .collect()
}

/// Connections the kernel has established to `addr` (`127.0.0.1:PORT`) on
/// the accepting side, from `/proc/net/tcp`.
fn tcp_connections_to(addr: &str) -> usize {
    let port = addr.rsplit(':').next().unwrap().parse::<u16>().unwrap();
    let local = format!("0100007F:{port:04X}");
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap()
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // Field 3 is the state; 01 is ESTABLISHED.
            fields.get(1) == Some(&local.as_str()) && fields.get(3) == Some(&"01")
        })
        .count()
}

/// A local sandbox, its provider (for more handles), its host socket's
/// address and that socket's path.
async fn local_sandbox() -> (LocalProvider, Sandbox, String, std::path::PathBuf) {
    local_sandbox_with(SandboxConfig::new(bundle_path())).await
}

async fn local_sandbox_with(
    config: SandboxConfig,
) -> (LocalProvider, Sandbox, String, std::path::PathBuf) {
    let provider = LocalProvider::new();
    let sb = provider.session(config).await.unwrap();
    let local = sb
        .local_addr()
        .expect("a local sandbox has a Unix socket for its host")
        .to_owned();
    let path = std::path::PathBuf::from(local.strip_prefix("unix:").expect("unix:PATH"));
    (provider, sb, local, path)
}

/// Checks that a call through `sb` comes back with `text`.
async fn assert_echoes(sb: &Sandbox, text: &str) {
    assert_eq!(
        sb.remote(agentix_e2e::echo, (text.to_owned(),))
            .await
            .unwrap(),
        text
    );
}

#[tokio::test]
async fn a_local_host_connects_through_the_unix_socket_and_clients_through_the_port() {
    use std::os::unix::fs::FileTypeExt;

    let (provider, sb, local, path) = local_sandbox().await;
    assert!(path.metadata().unwrap().file_type().is_socket(), "{local}");
    assert!(path.starts_with(sb.local_dir().unwrap()), "{local}");

    assert_echoes(&sb, "over the socket").await;
    assert_eq!(sb.health().await.unwrap()["status"], "ok");
    assert_eq!(
        tcp_connections_to(sb.addr()),
        0,
        "the host's own connection went through TCP"
    );

    // Third-party clients (and a handle attached by address) use the port.
    let tcp = Sandbox::attach(sb.addr(), sb.token());
    assert_eq!(tcp.local_addr(), None);
    assert_echoes(&tcp, "over TCP").await;
    assert_eq!(tcp_connections_to(sb.addr()), 1);
    // Another handle from the provider dials the socket too.
    let again = provider.get(sb.id()).unwrap();
    assert_eq!(again.local_addr(), Some(local.as_str()));
    assert_echoes(&again, "again").await;
    assert_eq!(tcp_connections_to(sb.addr()), 1);

    sb.delete().await;
    assert!(!path.exists(), "{local} outlived its sandbox");
}

#[tokio::test]
async fn a_socket_file_replaced_in_the_sandbox_gets_no_token_and_the_port_serves() {
    use tokio::io::AsyncReadExt;

    // A plain sandbox's port is its server's own, outside the socket file.
    let (provider, sb, _, path) =
        local_sandbox_with(support::plain(SandboxConfig::new(bundle_path()))).await;
    // What code in the sandbox could do: put a listener of its own there.
    std::fs::remove_file(&path).unwrap();
    let impostor = tokio::net::UnixListener::bind(&path).unwrap();
    let heard = tokio::spawn(async move {
        let (mut conn, _) = impostor.accept().await.unwrap();
        let mut got = Vec::new();
        let _ = conn.read_to_end(&mut got).await;
        got
    });

    let again = provider.get(sb.id()).unwrap();
    assert_echoes(&again, "still served").await;
    assert_eq!(tcp_connections_to(sb.addr()), 1, "the port serves instead");
    let got = tokio::time::timeout(Duration::from_secs(10), heard)
        .await
        .expect("the host tried the socket and let it go")
        .unwrap();
    assert!(
        got.is_empty(),
        "the host sent {} bytes to a socket the server does not hold: {:?}",
        got.len(),
        String::from_utf8_lossy(&got)
    );
    sb.delete().await;
}

#[tokio::test]
async fn an_isolated_sandboxs_socket_replaced_by_its_code_gets_no_bytes_and_calls_fail_clearly() {
    use tokio::io::AsyncReadExt;

    // An isolated sandbox's port leads to the same socket file, so there is
    // no other way in: the host and its port must both turn the impostor
    // away before a byte (the token first) reaches it.
    let (provider, sb, _, path) = local_sandbox().await;
    std::fs::remove_file(&path).unwrap();
    let impostor = tokio::net::UnixListener::bind(&path).unwrap();
    let heard = tokio::spawn(async move {
        let mut got = Vec::new();
        for _ in 0..2 {
            let (mut conn, _) = impostor.accept().await.unwrap();
            let _ = conn.read_to_end(&mut got).await;
        }
        got
    });

    let again = provider.get(sb.id()).unwrap();
    let err = again
        .remote(agentix_e2e::echo, "x".to_owned())
        .await
        .expect_err("nothing serves the sandbox's socket");
    assert_eq!(err.kind, agentix::ErrorKind::ServerUnreachable, "{err}");
    let got = tokio::time::timeout(Duration::from_secs(10), heard)
        .await
        .expect("the host and its port each tried the socket and let it go")
        .unwrap();
    assert!(got.is_empty(), "the impostor heard {} bytes", got.len());
    sb.delete().await;
}

#[tokio::test]
async fn bytes_of_every_value_cross_unchanged_at_every_size() {
    let sb = sandbox().await;
    for len in [0, 1, 1 << 20, 64 << 20, 200 << 20] {
        let sent = if len == 1 {
            vec![0x1e]
        } else {
            pattern(len, 7)
        };
        let started = Instant::now();
        let back = sb
            .remote(agentix_e2e::echo_blob, (Blob::from(sent.clone()),))
            .timeout(Duration::from_secs(240))
            .await
            .unwrap_or_else(|e| panic!("{len}-byte echo: {e}"));
        assert!(
            back.as_ref() == sent.as_slice(),
            "{len} bytes came back changed"
        );
        eprintln!("{len}-byte echo in {:?}", started.elapsed());
    }
    // Made in the sandbox: bytes that never crossed the other way first.
    let made = sb
        .remote(agentix_e2e::make_blob, (64 << 20,))
        .await
        .unwrap();
    assert_eq!(made.len(), 64 << 20);
    assert!(made.iter().all(|&b| b == 0x5a));
}

#[tokio::test]
async fn a_small_call_goes_out_between_the_parts_of_a_large_one() {
    // A server that, once the first part of a large call arrives, reads
    // nothing for a moment (so the host is mid-send when the test makes a
    // small call), then reports the order in which the calls arrived.
    let (part_seen, mut on_part) = tokio::sync::mpsc::channel::<()>(1);
    let (order_tx, mut order) = tokio::sync::mpsc::unbounded_channel::<String>();
    let addr = support::fake_server::start(move |mut ws| {
        let (part_seen, order_tx) = (part_seen.clone(), order_tx.clone());
        async move {
            let mut paused = false;
            while let Some(Ok(message)) = ws.next().await {
                let Message::Text(text) = message else {
                    continue;
                };
                let text = text.as_str();
                if support::fake_server::accept_join(&mut ws, text).await {
                    continue;
                }
                if text.contains("\"call:part\"") && !paused {
                    paused = true;
                    let _ = part_seen.send(()).await;
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                if text.contains("[\"call\"") {
                    let _ = order_tx.send(text.to_owned());
                }
            }
        }
    })
    .await;
    let sb = Arc::new(Sandbox::attach(addr, "token"));
    let large = tokio::spawn({
        let sb = sb.clone();
        async move {
            let blob = Blob::from(vec![7u8; 64 << 20]);
            sb.remote(agentix_e2e::echo_blob, (blob,)).await
        }
    });
    tokio::time::timeout(Duration::from_secs(20), on_part.recv())
        .await
        .expect("the large call's arguments go out as call:part events")
        .unwrap();
    let small = tokio::spawn({
        let sb = sb.clone();
        async move { sb.remote(agentix_e2e::add, (1, 2)).await }
    });
    let first = tokio::time::timeout(Duration::from_secs(60), order.recv())
        .await
        .expect("a call event arrives")
        .unwrap();
    assert!(
        first.contains("agentix_e2e::add"),
        "the small call waited for the large one's parts: {}",
        &first[..first.len().min(200)]
    );
    let second = tokio::time::timeout(Duration::from_secs(60), order.recv())
        .await
        .expect("the large call's last part arrives")
        .unwrap();
    assert!(second.contains("agentix_e2e::echo_blob"), "{second:.200}");
    large.abort();
    small.abort();
}

#[tokio::test]
async fn a_large_result_waits_for_part_acks_and_never_queues_ahead_of_other_replies() {
    use support::raw_socket::placeholder;
    let sb = sandbox().await;
    let mut raw = RawSocket::connect(sb.addr(), sb.token()).await;
    let size: usize = 16 << 20;
    raw.emit_binary(
        "call",
        json!({"id": 1, "target": "agentix_e2e::make_blob", "args": placeholder(0), "parts": true}),
        vec![agentix_wire::cbor::to_vec(&(size,)).unwrap()],
    )
    .await;
    // Unacknowledged, the server sends two parts and no more.
    let mut parts: Vec<Vec<u8>> = Vec::new();
    for _ in 0..2 {
        let ev = raw.recv_binary_event().await.expect("a part");
        assert_eq!(ev.name, "call:part", "{}", ev.payload);
        assert_eq!(ev.payload["id"], 1);
        parts.extend(ev.attachments);
    }
    // A small call meanwhile is answered next, ahead of the third part.
    raw.emit_binary(
        "call",
        json!({"id": 2, "target": "agentix_e2e::add", "args": placeholder(0)}),
        vec![agentix_wire::cbor::to_vec(&(20i64, 22i64)).unwrap()],
    )
    .await;
    let ev = tokio::time::timeout(Duration::from_secs(20), raw.recv_binary_event())
        .await
        .expect("the small call is answered while the parts wait for acks")
        .unwrap();
    assert_eq!(
        (ev.name.as_str(), &ev.payload["id"]),
        ("call:result", &json!(2))
    );
    let sum: i64 = ciborium::from_reader(ev.attachments[0].as_slice()).unwrap();
    assert_eq!(sum, 42);
    // Each ack lets one more part out, until the result ends it.
    raw.emit("call:part:ack", json!({"id": 1})).await;
    raw.emit("call:part:ack", json!({"id": 1})).await;
    loop {
        let ev = raw
            .recv_binary_event()
            .await
            .expect("the rest of the result");
        assert_eq!(ev.payload["id"], 1);
        match ev.name.as_str() {
            "call:part" => {
                assert_eq!(ev.payload["total"], json!(size + 5));
                parts.extend(ev.attachments);
                raw.emit("call:part:ack", json!({"id": 1})).await;
            }
            "call:result" => {
                parts.extend(ev.attachments);
                break;
            }
            other => panic!("unexpected {other}: {}", ev.payload),
        }
    }
    let value: serde_bytes::ByteBuf = ciborium::from_reader(parts.concat().as_slice()).unwrap();
    assert_eq!(value.len(), size);
    assert!(value.iter().all(|&b| b == 0x5a));

    // A client that did not ask for parts gets one event, as before.
    raw.emit_binary(
        "call",
        json!({"id": 3, "target": "agentix_e2e::make_blob", "args": placeholder(0)}),
        vec![agentix_wire::cbor::to_vec(&(size,)).unwrap()],
    )
    .await;
    let ev = raw.recv_binary_event().await.expect("the result");
    assert_eq!(ev.name, "call:result");
    let value: serde_bytes::ByteBuf =
        ciborium::from_reader(ev.attachments.concat().as_slice()).unwrap();
    assert_eq!(value.len(), size);
}

#[tokio::test]
async fn arguments_sent_in_parts_by_any_client_arrive_whole_or_fail_their_call() {
    use support::raw_socket::placeholder;
    let sb = sandbox().await;
    let mut raw = RawSocket::connect(sb.addr(), sb.token()).await;
    let blob = serde_bytes::ByteBuf::from(pattern(3 << 20, 9));
    let args = agentix_wire::cbor::to_vec(&(blob.clone(),)).unwrap();
    let total = args.len();
    let (first, rest) = args.split_at(1 << 20);
    let (second, last) = rest.split_at(1 << 20);
    for piece in [first, second] {
        let part = json!({"id": 1, "total": total, "bytes": placeholder(0)});
        raw.emit_binary("call:part", part, vec![piece.to_vec()])
            .await;
    }
    raw.emit_binary(
        "call",
        json!({"id": 1, "target": "agentix_e2e::echo_blob", "args": placeholder(0)}),
        vec![last.to_vec()],
    )
    .await;
    let ev = raw.recv_binary_event().await.expect("the result");
    assert_eq!(ev.name, "call:result", "{}", ev.payload);
    let back: serde_bytes::ByteBuf =
        ciborium::from_reader(ev.attachments.concat().as_slice()).unwrap();
    assert!(back == blob, "the bytes came back changed");

    // Parts that do not add up fail their call, and only it.
    let part = json!({"id": 2, "total": total, "bytes": placeholder(0)});
    raw.emit_binary("call:part", part, vec![first.to_vec()])
        .await;
    raw.emit_binary(
        "call",
        json!({"id": 2, "target": "agentix_e2e::echo_blob", "args": placeholder(0)}),
        vec![last.to_vec()],
    )
    .await;
    let (name, payload) = raw.recv_event().await.expect("a reply");
    assert_eq!(name, "call:error", "{payload}");
    assert_eq!(payload["id"], 2);
    assert_eq!(payload["error"]["kind"], "PayloadTooLarge", "{payload}");
    // Parts past the message limit are refused, not held.
    let part = json!({"id": 3, "total": 1u64 << 40, "bytes": placeholder(0)});
    raw.emit_binary("call:part", part, vec![first.to_vec()])
        .await;
    raw.emit_binary(
        "call",
        json!({"id": 3, "target": "agentix_e2e::echo_blob", "args": placeholder(0)}),
        vec![last.to_vec()],
    )
    .await;
    let (name, payload) = raw.recv_event().await.expect("a reply");
    assert_eq!(name, "call:error", "{payload}");
    assert_eq!(payload["error"]["kind"], "PayloadTooLarge", "{payload}");
    assert_eq!(sb.remote(agentix_e2e::add, (1, 1)).await.unwrap(), 2);
}

#[tokio::test]
async fn sixty_four_large_calls_at_once_each_get_their_own_bytes() {
    let sb = sandbox().await;
    let calls = (0..64u8).map(|i| {
        let sent = pattern(1 << 20, i);
        let call = sb.remote(agentix_e2e::echo_blob, (Blob::from(sent.clone()),));
        async move { (i, sent, call.into_future().await) }
    });
    for (i, sent, back) in futures_util::future::join_all(calls).await {
        let back = back.unwrap_or_else(|e| panic!("call {i}: {e}"));
        assert!(back.as_ref() == sent.as_slice(), "call {i} got other bytes");
    }
}

#[tokio::test]
async fn a_stream_of_one_mib_items_arrives_whole_and_in_order() {
    let sb = sandbox().await;
    let mut items = sb
        .stream(agentix_e2e::blobs, (24, 1 << 20))
        .window(4, 4 << 20)
        .await
        .unwrap();
    let mut n = 0u32;
    while let Some(item) = items.next().await {
        let item = item.unwrap();
        assert_eq!(item.len(), 1 << 20, "item {n}");
        assert!(
            item.iter().all(|&b| b == n as u8),
            "item {n} is not its own"
        );
        n += 1;
    }
    assert_eq!(n, 24);
}

/// Counts the sandbox spans named `burst.span`.
struct SpanCount(Arc<AtomicU64>);

impl Processor for SpanCount {
    fn on_span_end(&mut self, span: &SpanData) {
        if span.origin.is_some() && span.name == "burst.span" {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A TCP relay in front of `target` whose connections can be cut.
struct CuttableProxy {
    addr: String,
    cut: tokio::sync::watch::Sender<u64>,
}

impl CuttableProxy {
    async fn start(target: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (cut, cuts) = tokio::sync::watch::channel(0u64);
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                let target = target.clone();
                let mut cuts = cuts.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(&target).await else {
                        return;
                    };
                    cuts.mark_unchanged();
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cuts.changed() => {}
                    }
                    // Both sockets drop here: the connection is gone, the
                    // server lives on.
                });
            }
        });
        CuttableProxy { addr, cut }
    }

    fn cut_all(&self) {
        self.cut.send_modify(|n| *n += 1);
    }
}

#[tokio::test]
async fn after_a_lost_connection_the_next_call_rejoins_every_namespace() {
    let server = HandStartedServer::start(&[]);
    let proxy = CuttableProxy::start(server.addr.clone()).await;
    let logs: Arc<Mutex<Vec<String>>> = Arc::default();
    let tap = logs.clone();
    let config = SandboxConfig::new(bundle_path()).on_log(move |_, r| {
        tap.lock().unwrap().push(r.message.clone());
    });
    let sb = Sandbox::attach_with(proxy.addr.clone(), server.token.clone(), config);
    let (configured_tx, mut configured) = tokio::sync::mpsc::unbounded_channel();
    sb.register_namespace(
        HostNamespace::new("/e2e-plugin")
            .on("configured", move |_, data| {
                let tx = configured_tx.clone();
                async move {
                    let _ = tx.send(data);
                }
            })
            .request_handler("fetch", |body| async move {
                Ok::<_, String>(json!(body["i"].as_u64().unwrap_or(0) * 2))
            }),
    )
    .unwrap();
    let spans = Arc::new(AtomicU64::new(0));
    sb.traces().add_processor(SpanCount(spans.clone()));
    sb.remote(agentix_e2e::open_plugin, ()).await.unwrap();
    assert_eq!(
        sb.remote(agentix_e2e::ask_host, (3,)).await.unwrap(),
        [json!(0), json!(2), json!(4)]
    );

    // Cut the connection under a running call: it ends, it does not hang.
    let pending = sb.remote(agentix_e2e::sleep_ms, (30_000,));
    let cut = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        proxy.cut_all();
    };
    let (outcome, ()) = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::join!(pending.into_future(), cut)
    })
    .await
    .expect("a call on a cut connection hung");
    let err = outcome.unwrap_err();
    assert_eq!(err.kind, ErrorKind::ConnectionLost, "{err}");

    // The next call reconnects; /log, /trace and the plugin came back too.
    assert_eq!(sb.remote(agentix_e2e::add, (2, 3)).await.unwrap(), 5);
    sb.remote(agentix_e2e::chatter, (1, 0, 5)).await.unwrap();
    wait_until(
        "a log record after reconnecting",
        Duration::from_secs(10),
        || logs.lock().unwrap().iter().any(|m| m == "log 0"),
    )
    .await;
    wait_until("spans after reconnecting", Duration::from_secs(10), || {
        spans.load(Ordering::Relaxed) >= 5
    })
    .await;
    assert_eq!(
        sb.remote(agentix_e2e::ask_host, (2,)).await.unwrap(),
        [json!(0), json!(2)]
    );
    sb.emit("/e2e-plugin", "configure", json!("again"))
        .await
        .unwrap();
    let echoed = next_event(
        &mut configured,
        "the plugin namespace answers after reconnecting",
    )
    .await;
    assert_eq!(echoed, json!("again"));
}

#[tokio::test]
async fn an_event_sent_right_after_joining_is_never_lost() {
    let sb = sandbox().await;
    for round in 0..1_000 {
        let mut raw = RawSocket::connect(sb.addr(), sb.token()).await;
        raw.emit("heartbeat", json!({ "seq": round })).await;
        let (name, payload) = tokio::time::timeout(Duration::from_secs(5), raw.recv_event())
            .await
            .unwrap_or_else(|_| panic!("round {round}: the first event went unanswered"))
            .expect("an answer");
        assert_eq!(
            (name.as_str(), payload["seq"].as_u64()),
            ("heartbeat", Some(round))
        );
    }
}

#[tokio::test]
async fn a_frozen_server_ends_calls_by_ping_timeout() {
    let server =
        HandStartedServer::start(&["--ping-interval-ms", "200", "--ping-timeout-ms", "300"]);
    // A heartbeat far slower than the pings: only Engine.IO's can fire.
    let config = SandboxConfig::new(bundle_path())
        .heartbeat(Duration::from_secs(60), Duration::from_secs(120));
    let sb = Sandbox::attach_with(server.addr.clone(), server.token.clone(), config);
    assert_eq!(sb.remote(agentix_e2e::add, (1, 2)).await.unwrap(), 3);
    let call = sb.remote(agentix_e2e::sleep_ms, (600_000,));
    let freeze = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        agentix_wire::process::signal_pid(server.child.id(), libc::SIGSTOP);
    };
    let started = Instant::now();
    let (outcome, ()) = tokio::time::timeout(Duration::from_secs(15), async {
        tokio::join!(call.into_future(), freeze)
    })
    .await
    .expect("a call to a frozen server hung");
    let err = outcome.unwrap_err();
    assert_eq!(err.kind, ErrorKind::ConnectionLost, "{err}");
    assert!(err.message.contains("not even a ping"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn payloads_past_the_limit_fail_alone() {
    let mut config = SandboxConfig::new(bundle_path());
    config.max_message_bytes = 4 << 20;
    let sb = sandbox_with(config).await;
    let err = sb
        .remote(agentix_e2e::echo_blob, (Blob::from(vec![1u8; 5 << 20]),))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::PayloadTooLarge, "{err}");
    let err = sb
        .remote(agentix_e2e::make_blob, (5 << 20,))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::PayloadTooLarge, "{err}");
    let just_under = sb
        .remote(agentix_e2e::make_blob, ((4 << 20) - 64,))
        .await
        .unwrap();
    assert_eq!(just_under.len(), (4 << 20) - 64);
}
