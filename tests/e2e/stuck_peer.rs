//! A server that stops reading costs the host a timeout, not memory. Alone
//! in its test binary: it measures this process's resident memory.

mod support;

use std::time::{Duration, Instant};

use agentix::{Blob, ErrorKind, Sandbox, SandboxConfig};
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use support::{bundle_path, rss_kib};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

/// A Socket.IO server that accepts the handshake and every namespace, then
/// never reads again.
async fn deaf_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
                let open = json!({"sid": "deafdeafdeafdeaf", "upgrades": [],
                    "pingInterval": 300_000, "pingTimeout": 300_000, "maxPayload": 1_000_000});
                ws.send(Message::text(format!("0{open}"))).await.unwrap();
                // Accept the namespaces the host joins at once, then stop.
                let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
                while let Ok(Some(Ok(Message::Text(t)))) =
                    tokio::time::timeout_at(deadline, ws.next()).await
                {
                    if let Some(rest) = t.as_str().strip_prefix("40") {
                        let ns = rest.split(',').next().unwrap_or("/");
                        let _ = ws
                            .send(Message::text(format!("40{ns},{{\"sid\":\"x\"}}")))
                            .await;
                    }
                }
                // Hold the socket open, unread, until the test ends.
                tokio::time::sleep(Duration::from_secs(120)).await;
                drop(ws);
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_server_that_stops_reading_costs_a_timeout_not_memory() {
    let addr = deaf_server().await;
    let config = SandboxConfig::new(bundle_path())
        .heartbeat(Duration::from_millis(200), Duration::from_secs(30));
    let sb = Sandbox::attach_with(addr, "token", config);
    let me = std::process::id();
    let payload = Blob::from(vec![0x42u8; 32 << 20]);
    // The first call fills the socket's buffers and blocks; the rest wait.
    let before = rss_kib(me);
    for round in 0..10 {
        let started = Instant::now();
        let err = sb
            .remote(agentix_e2e::echo_blob, (payload.clone(),))
            .timeout(Duration::from_millis(700))
            .await
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Timeout, "round {round}: {err}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "round {round} took {:?}",
            started.elapsed()
        );
    }
    let grown = rss_kib(me).saturating_sub(before);
    // One abandoned payload is still on its way out, and the allocator keeps
    // some freed memory; ten payloads kept would be 320 MiB.
    assert!(
        grown < 200 << 10,
        "the host grew by {grown} KiB while a server did not read"
    );
}
