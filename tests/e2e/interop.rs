//! Stock third-party Socket.IO clients: python-socketio (from a venv that
//! `tests/interop/setup-venv.sh` makes) on a plugin namespace, and on
//! `/rpc`, `/log` and `/trace` with binary attachments; the Rust
//! `rust_socketio` client on a plugin namespace and `/log`.

mod support;

use std::path::Path;
use std::time::Duration;

use agentix::JsonValue;
use serde_json::json;
use support::{python, sandbox};

/// Runs `script ARGS..` from tests/interop; returns what it printed, as JSON.
async fn run_python(script: &str, args: &[&str]) -> JsonValue {
    let interop = Path::new(env!("CARGO_MANIFEST_DIR")).join("interop");
    let out = tokio::process::Command::new(python())
        .arg(interop.join(script))
        .args(args)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("the Python client finished within 60 s")
        .expect("the Python client ran");
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the client printed JSON")
}

#[tokio::test]
async fn a_stock_python_socketio_client_speaks_a_plugin_namespace() {
    let sb = sandbox().await;
    assert_eq!(
        sb.remote(agentix_e2e::open_plugin, ()).await.unwrap(),
        "open"
    );
    let printed = run_python("plugin_client.py", &[sb.addr(), sb.token()]).await;
    assert_eq!(printed, json!({"from": "python", "n": 42}));
}

#[tokio::test]
async fn a_stock_python_client_calls_and_reads_logs_and_spans() {
    let sb = sandbox().await;
    let printed = run_python("side_channel_client.py", &[sb.addr(), sb.token(), "50"]).await;
    // chatter(50, 0, 50) returns how many items it made.
    assert_eq!(printed["result"], 100, "{printed}");
    let records = printed["records"].as_array().unwrap();
    assert_eq!(records.len(), 50, "{printed}");
    for (i, record) in records.iter().enumerate() {
        assert_eq!(record["message"], format!("log {i}"), "{record}");
        assert_eq!(record["level"], "INFO", "{record}");
        assert_eq!(record["seq"], i.to_string(), "{record}");
    }
    let spans: Vec<u64> = printed["spans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    assert_eq!(spans, (0..50).collect::<Vec<_>>());
}

/// A `rust_socketio` 0.6 client joined to `path` of `sb` with its token,
/// handing every event it receives to `events`. It runs on Engine.IO's
/// long polling, where binary travels base64-encoded: over a websocket
/// this client cuts every incoming message at byte 0x1e (Engine.IO's
/// polling separator) and breaks binary attachments, and against this
/// server it failed with an Engine.IO error right after connecting.
async fn rust_socketio_client(
    sb: &agentix::Sandbox,
    path: &str,
    events: tokio::sync::mpsc::UnboundedSender<(String, rust_socketio::Payload)>,
) -> rust_socketio::asynchronous::Client {
    use futures_util::FutureExt;
    use rust_socketio::asynchronous::ClientBuilder;
    ClientBuilder::new(format!("http://{}", sb.addr()))
        .namespace(path)
        .auth(json!({ "token": sb.token() }))
        .opening_header("Authorization", format!("Bearer {}", sb.token()))
        .transport_type(rust_socketio::TransportType::Polling)
        .reconnect(false)
        .on_any(move |event, payload, _client| {
            let _ = events.send((event.as_str().to_owned(), payload));
            async {}.boxed()
        })
        .connect()
        .await
        .expect("rust_socketio connects with the token")
}

#[tokio::test]
async fn a_stock_rust_socketio_client_speaks_a_plugin_namespace_and_reads_logs() {
    use rust_socketio::Payload;
    let sb = sandbox().await;
    assert_eq!(
        sb.remote(agentix_e2e::open_plugin, ()).await.unwrap(),
        "open"
    );
    let (tx, mut plugin_events) = tokio::sync::mpsc::unbounded_channel();
    let plugin = rust_socketio_client(&sb, "/e2e-plugin", tx).await;
    plugin
        .emit("configure", json!({"from": "rust", "n": 7}))
        .await
        .unwrap();
    let (event, payload) = tokio::time::timeout(Duration::from_secs(20), plugin_events.recv())
        .await
        .expect("the sandbox answers within 20 s")
        .unwrap();
    assert_eq!(event, "configured");
    let Payload::Text(values) = payload else {
        panic!("a JSON event, not {payload:?}")
    };
    assert_eq!(values, vec![json!({"from": "rust", "n": 7})]);

    // `/log` sends records as a CBOR array in a binary attachment; the
    // client acknowledges each batch, as a host does.
    let (tx, mut log_events) = tokio::sync::mpsc::unbounded_channel();
    let log = rust_socketio_client(&sb, "/log", tx).await;
    sb.remote(agentix_e2e::chatter, (5, 0, 0)).await.unwrap();
    let mut records = Vec::new();
    while records.len() < 5 {
        let (event, payload) = tokio::time::timeout(Duration::from_secs(20), log_events.recv())
            .await
            .expect("the records arrive within 20 s")
            .unwrap();
        // The client names a binary event by its packet's JSON, with the
        // placeholder left out.
        let (true, Payload::Binary(cbor)) = (event.starts_with("records"), payload) else {
            continue;
        };
        log.emit("ack", json!({})).await.unwrap();
        let batch: Vec<JsonValue> = ciborium::from_reader(&cbor[..]).expect("a CBOR array");
        records.extend(batch.into_iter().filter(|r| r["target"] == "agentix_e2e"));
    }
    for (i, record) in records.iter().enumerate() {
        assert_eq!(record["message"], format!("log {i}"), "{record}");
        assert_eq!(record["level"], "INFO", "{record}");
        assert_eq!(record["fields"]["seq"], i.to_string(), "{record}");
    }
    plugin.disconnect().await.unwrap();
    log.disconnect().await.unwrap();
}
