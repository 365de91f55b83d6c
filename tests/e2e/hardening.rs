//! Faults and bad input found by an adversarial pass, each kept fixed here:
//! stream windows and acks a peer gets wrong, and target names long enough
//! to make a close-match search a denial of service.

mod support;

use std::future::IntoFuture;
use std::time::Duration;

use agentix::{ErrorKind, StreamExt};
use serde_json::json;
use support::raw_socket::{placeholder, RawSocket};
use support::sandbox;

#[tokio::test]
async fn the_largest_byte_window_works_and_the_server_serves_on() {
    let sb = sandbox().await;
    let mut items = sb
        .stream(agentix_e2e::count, (1_000,))
        .window(100, u64::MAX)
        .await
        .unwrap();
    let mut n = 0u64;
    while let Some(item) = items.next().await {
        assert_eq!(item.unwrap(), n);
        n += 1;
    }
    assert_eq!(n, 1_000);
    assert_eq!(sb.remote(agentix_e2e::add, (1, 1)).await.unwrap(), 2);
    assert_eq!(sb.health().await.unwrap()["status"], "ok");
}

/// Starts `count(n)` as stream call `id` with `window` from a raw client.
async fn raw_stream(raw: &mut RawSocket, id: u64, n: u64, window: serde_json::Value) {
    raw.emit_binary(
        "call",
        json!({"id": id, "target": "agentix_e2e::count", "args": placeholder(0), "stream": window}),
        vec![agentix_actors::cbor::to_vec(&(n,)).unwrap()],
    )
    .await;
}

#[tokio::test]
async fn an_empty_window_is_refused_not_parked() {
    let sb = sandbox().await;
    let mut raw = RawSocket::connect(sb.addr(), sb.token()).await;
    for (id, window) in [
        (1, json!({"items": 0, "bytes": 0})),
        (2, json!({"items": 5, "bytes": 0})),
    ] {
        raw_stream(&mut raw, id, 10, window).await;
        let (name, payload) = raw.recv_event().await.expect("a reply");
        assert_eq!(name, "call:error", "{payload}");
        assert_eq!(payload["id"], id);
        assert_eq!(payload["error"]["kind"], "Protocol", "{payload}");
    }
    assert_eq!(sb.remote(agentix_e2e::add, (2, 2)).await.unwrap(), 4);
}

#[tokio::test]
async fn an_ack_past_what_was_sent_neither_silences_nor_unbounds_a_stream() {
    let sb = sandbox().await;
    let mut raw = RawSocket::connect(sb.addr(), sb.token()).await;
    const N: u64 = 2_000;
    raw_stream(&mut raw, 1, N, json!({"items": 10, "bytes": 1 << 20})).await;
    let mut got = 0u64;
    let mut bogus_sent = false;
    loop {
        let event = tokio::time::timeout(Duration::from_secs(20), raw.recv_binary_event())
            .await
            .expect("the stream went silent")
            .expect("an event");
        match event.name.as_str() {
            "call:items" => {
                let items: Vec<serde_bytes::ByteBuf> =
                    agentix_actors::cbor::from_slice(&event.attachments[0]).unwrap();
                assert!(items.len() <= 10, "the worker ran past its window");
                got += items.len() as u64;
                let ack = if bogus_sent {
                    json!({"id": 1, "items": items.len(), "bytes": 9 * items.len()})
                } else {
                    // Far more than was ever sent.
                    bogus_sent = true;
                    json!({"id": 1, "items": u64::MAX, "bytes": u64::MAX})
                };
                raw.emit("call:ack", ack).await;
            }
            "call:end" => break,
            other => panic!("unexpected {other}: {}", event.payload),
        }
    }
    assert_eq!(got, N);
}

#[tokio::test]
async fn a_huge_target_name_is_refused_at_once_and_starves_no_one() {
    let sb = sandbox().await;
    let huge = "x".repeat(1_000_000);
    let bogus = || sb.call_json(&huge, json!([]));
    let (a, b, sum) = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::join!(
            bogus(),
            bogus(),
            sb.remote(agentix_e2e::add, (20, 22)).into_future()
        )
    })
    .await
    .expect("calls with a huge target name, and a call beside them, all finish");
    for err in [a.unwrap_err(), b.unwrap_err()] {
        assert_eq!(err.kind, ErrorKind::UnknownTarget, "{err}");
        assert!(err.message.contains("bytes long"), "{err}");
    }
    assert_eq!(sum.unwrap(), 42);
}

#[tokio::test]
async fn http_takes_the_token_only_as_a_bearer_header_and_health_says_little_without_it() {
    use support::raw_socket::http_get;
    let sb = sandbox().await;
    assert_eq!(sb.remote(agentix_e2e::add, (1, 1)).await.unwrap(), 2);
    let (status, body) = http_get(sb.addr(), "/health", None).await;
    assert_eq!(status, 200);
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        health,
        json!({"status": "ok"}),
        "no pids or worker details without the token"
    );
    let bearer = format!("Bearer {}", sb.token());
    let (_, body) = http_get(sb.addr(), "/health", Some(&bearer)).await;
    let full: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(full["worker"]["pid"].is_u64(), "{full}");
    // A token in the URL is not a credential; the scheme's case is free.
    let in_url = format!("/metrics?token={}", sb.token());
    assert_eq!(http_get(sb.addr(), &in_url, None).await.0, 401);
    let lower = format!("bearer {}", sb.token());
    assert_eq!(http_get(sb.addr(), "/metrics", Some(&lower)).await.0, 404);
}
