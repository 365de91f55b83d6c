//! Bad input from a host or a worker gets a clear error or is dropped with
//! a log line, and the server keeps serving the next good call.

mod support;

use std::time::Duration;

use agentix::{ErrorKind, SandboxConfig};
use serde_json::{json, Value};
use support::raw_socket::{placeholder, RawSocket};
use support::{bundle_path, plain_sandbox, rss_kib, sandbox_with, scratch_dir};

fn add_args(a: i64, b: i64) -> Vec<u8> {
    agentix_wire::cbor::to_vec(&(a, b)).unwrap()
}

/// Emits a `call` of `target` as `id` with CBOR `args` as its attachment.
async fn call(raw: &mut RawSocket, id: u64, target: &str, args: Vec<u8>) {
    raw.emit_binary(
        "call",
        json!({"id": id, "target": target, "args": placeholder(0)}),
        vec![args],
    )
    .await;
}

/// Sends a good `add` call as `id` and checks its answer.
async fn good_call(raw: &mut RawSocket, id: u64) {
    call(raw, id, "agentix_e2e::add", add_args(20, 22)).await;
    let event = raw.recv_binary_event().await.expect("a reply");
    assert_eq!(event.name, "call:result", "{}", event.payload);
    assert_eq!(event.payload["id"], id);
    assert_eq!(event.payload["value"], placeholder(0));
    let sum: i64 = agentix_wire::cbor::from_slice(&event.attachments[0]).unwrap();
    assert_eq!(sum, 42);
}

async fn expect_error(raw: &mut RawSocket, id: u64, kind: &str) -> Value {
    let (name, payload) = raw.recv_event().await.expect("a reply");
    assert_eq!(name, "call:error", "{payload}");
    assert_eq!(payload["id"], id, "{payload}");
    assert_eq!(payload["error"]["kind"], kind, "{payload}");
    payload["error"].clone()
}

#[tokio::test]
async fn garbage_events_get_clear_errors_and_the_connection_keeps_serving() {
    let sb = plain_sandbox().await;
    let mut raw = RawSocket::connect(sb.addr(), sb.token()).await;
    good_call(&mut raw, 1).await;

    // Not an object, wrong field types, missing fields: protocol errors.
    raw.emit("call", json!("not an object")).await;
    let err = expect_error(&mut raw, 0, "Protocol").await;
    assert!(err["message"]
        .as_str()
        .unwrap()
        .contains("malformed call event"));
    raw.emit("call", json!({"id": "x", "target": 1})).await;
    expect_error(&mut raw, 0, "Protocol").await;
    raw.emit("call", json!({"id": 2, "target": "agentix_e2e::add"}))
        .await;
    expect_error(&mut raw, 2, "Protocol").await;
    // Arguments that are text instead of an attachment, a placeholder
    // naming no attachment, bytes that are not CBOR.
    raw.emit(
        "call",
        json!({"id": 3, "target": "agentix_e2e::add", "args": "%%%"}),
    )
    .await;
    expect_error(&mut raw, 3, "Protocol").await;
    raw.emit_binary(
        "call",
        json!({"id": 7, "target": "agentix_e2e::add", "args": placeholder(3)}),
        vec![add_args(1, 2)],
    )
    .await;
    expect_error(&mut raw, 7, "BadArguments").await;
    call(&mut raw, 4, "agentix_e2e::add", vec![0xff, 0xff]).await;
    expect_error(&mut raw, 4, "BadArguments").await;
    // Unknown events, cancels and acks for unknown ids, a bad stream window:
    // dropped (logged); the next good call proves the connection serves.
    raw.emit("bogus", json!({"id": 1})).await;
    raw.emit("cancel", json!({"id": 123_456})).await;
    raw.emit("cancel", json!("nonsense")).await;
    raw.emit("call:ack", json!({"id": 99, "items": 5, "bytes": 5}))
        .await;
    raw.emit("call:ack", json!({"id": "no"})).await;
    good_call(&mut raw, 5).await;

    // A call id that is still running cannot be reused.
    let slow = agentix_wire::cbor::to_vec(&(300u64,)).unwrap();
    call(&mut raw, 6, "agentix_e2e::sleep_ms", slow.clone()).await;
    call(&mut raw, 6, "agentix_e2e::sleep_ms", slow).await;
    let err = expect_error(&mut raw, 6, "Protocol").await;
    assert!(
        err["message"].as_str().unwrap().contains("already in use"),
        "{err}"
    );
    let (name, payload) = raw.recv_event().await.unwrap();
    assert_eq!(
        (name.as_str(), payload["id"].as_u64()),
        ("call:result", Some(6))
    );

    // Socket.IO packets that are not JSON at all.
    raw.send("42/rpc,[\"call\", {not json").await;
    raw.send("42/rpc,").await;
    // The connection may be closed for that, but the server keeps serving.
    let mut fresh = RawSocket::connect(sb.addr(), sb.token()).await;
    good_call(&mut fresh, 1).await;
    assert_eq!(sb.remote(agentix_e2e::add, (1, 2)).await.unwrap(), 3);
}

#[tokio::test]
async fn a_message_past_the_limit_is_refused_and_others_go_on() {
    // A 1 MiB limit keeps the oversized message small enough for a test.
    let config = support::plain(SandboxConfig::new(bundle_path()))
        .server_arg("--max-message-bytes", "1048576");
    let sb = sandbox_with(config).await;
    let mut raw = RawSocket::connect(sb.addr(), sb.token()).await;
    // Past the server's Socket.IO limit (the limit and 64 KiB for the header).
    let huge = format!(
        "42/rpc,[\"call\",{{\"id\":1,\"target\":\"agentix_e2e::echo\",\"args\":\"{}\"}}]",
        "A".repeat(2 << 20)
    );
    // The server may reset the connection while the message is still going out.
    let refused = raw.try_send(&huge).await.is_err() || raw.recv().await.is_none();
    assert!(
        refused,
        "the server must drop a connection that sends an oversized message"
    );
    let mut fresh = RawSocket::connect(sb.addr(), sb.token()).await;
    good_call(&mut fresh, 2).await;
    assert_eq!(sb.health().await.unwrap()["inflight"], 0);
}

/// Four bad events; two of them get an error reply, which is read.
async fn garbage_round(raw: &mut RawSocket) {
    raw.emit("call", json!({"id": "x"})).await;
    call(raw, 9, "nope::nothing", add_args(1, 1)).await;
    raw.emit("cancel", json!({"id": 77})).await;
    raw.emit("bogus", json!([1, 2, 3])).await;
    expect_error(raw, 0, "Protocol").await;
    expect_error(raw, 9, "UnknownTarget").await;
}

#[tokio::test]
async fn a_flood_of_garbage_does_not_grow_the_server() {
    let sb = plain_sandbox().await;
    let pid = sb.server_pid().unwrap();
    let mut raw = RawSocket::connect(sb.addr(), sb.token()).await;
    good_call(&mut raw, 1).await;
    for _ in 0..200 {
        garbage_round(&mut raw).await;
    }
    let before = rss_kib(pid);
    for _ in 0..1_500 {
        garbage_round(&mut raw).await;
    }
    let after = rss_kib(pid);
    assert!(
        after < before + 4 * 1024,
        "server RSS grew from {before} KiB to {after} KiB over 6,000 garbage events"
    );
    good_call(&mut raw, 2).await;
}

async fn sandbox_with_garbage(kind: &str) -> (agentix::Sandbox, std::path::PathBuf) {
    let dir = scratch_dir(&format!("garbage-{kind}"));
    let config = support::plain(SandboxConfig::new(bundle_path()))
        .env("AGENTIX_E2E_GARBAGE", kind)
        .env(
            "AGENTIX_E2E_GARBAGE_ONCE",
            dir.join("done").to_str().unwrap(),
        );
    (sandbox_with(config).await, dir)
}

fn server_log(sb: &agentix::Sandbox) -> String {
    std::fs::read_to_string(sb.local_dir().unwrap().join("server.log")).unwrap_or_default()
}

#[tokio::test]
async fn a_malformed_or_stray_worker_frame_is_dropped_and_the_worker_serves_on() {
    for kind in ["malformed", "stray"] {
        let (sb, dir) = sandbox_with_garbage(kind).await;
        let pid = sb.remote(agentix_e2e::worker_pid, ()).await.unwrap();
        assert_eq!(
            sb.remote(agentix_e2e::add, (2, 2)).await.unwrap(),
            4,
            "{kind}"
        );
        assert_eq!(sb.remote(agentix_e2e::worker_pid, ()).await.unwrap(), pid);
        assert_eq!(
            sb.health().await.unwrap()["worker"]["restarts"],
            0,
            "{kind}"
        );
        if kind == "malformed" {
            let log = server_log(&sb);
            assert!(
                log.contains("dropped a malformed frame from the worker"),
                "{log}"
            );
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[tokio::test]
async fn a_worker_that_breaks_the_framing_is_replaced() {
    for kind in ["oversized", "truncated"] {
        let (sb, dir) = sandbox_with_garbage(kind).await;
        // The first worker is killed (oversized) or exits (truncated) before
        // or while taking this call; the server replaces it and serves.
        let mut answer = None;
        for _ in 0..3 {
            match sb
                .remote(agentix_e2e::add, (2, 3))
                .timeout(Duration::from_secs(20))
                .await
            {
                Ok(v) => {
                    answer = Some(v);
                    break;
                }
                Err(e) => assert!(
                    matches!(
                        e.kind,
                        ErrorKind::WorkerExited | ErrorKind::WorkerStartFailed
                    ),
                    "{kind}: {e}"
                ),
            }
        }
        assert_eq!(answer, Some(5), "{kind}");
        let health = sb.health().await.unwrap();
        assert_eq!(health["worker"]["restarts"], 1, "{kind}: {health}");
        let log = server_log(&sb);
        if kind == "oversized" {
            assert!(log.contains("worker frame pipe unusable"), "{log}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}
