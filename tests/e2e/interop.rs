//! Stock third-party Socket.IO clients: python-socketio (from a venv that
//! `tests/interop/setup-venv.sh` makes) on a plugin namespace, and on
//! `/rpc`, `/log` and `/trace` with binary attachments.

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
