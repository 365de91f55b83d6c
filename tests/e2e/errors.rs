//! Every error a user can meet is typed, says what happened, and never hangs.

mod support;

use std::time::Duration;

use agentix::{
    Blob, ErrorKind, LocalProvider, Provider, ProviderError, Remote, Sandbox, SandboxConfig,
    StreamExt,
};
use serde_json::json;
use support::{bundle_path, sandbox, sandbox_with};

/// Fails the test instead of hanging if `fut` takes longer than 20 s.
async fn bounded<T>(what: &str, fut: impl std::future::IntoFuture<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), fut)
        .await
        .unwrap_or_else(|_| panic!("{what} hung"))
}

#[tokio::test]
async fn unknown_target_names_it_and_suggests_close_matches() {
    let sb = sandbox().await;
    let err = sb
        .call_json("agentix_e2e::ecoh", json!(["x"]))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::UnknownTarget);
    assert!(err.message.contains("`agentix_e2e::ecoh`"), "{err}");
    let details = err.details.clone().unwrap_or_default();
    assert!(
        details.contains("agentix_e2e::echo"),
        "no close match in: {err}"
    );
    // The worker keeps serving.
    assert_eq!(sb.remote(agentix_e2e::add, (1, 2)).await.unwrap(), 3);
}

#[tokio::test]
async fn undecodable_arguments_are_bad_arguments() {
    let sb = sandbox().await;
    let err = sb
        .call_cbor("agentix_e2e::echo", &[0xff, 0xfe, 0x00])
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::BadArguments);
    assert!(err.message.contains("agentix_e2e::echo"), "{err}");
    assert_eq!(sb.remote(agentix_e2e::add, (1, 2)).await.unwrap(), 3);
}

#[tokio::test]
async fn wrong_argument_and_result_types_are_type_mismatches() {
    let sb = sandbox().await;
    let err = sb
        .call_json("agentix_e2e::add", json!(["one", 2]))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::TypeMismatch);
    assert!(err.message.contains("agentix_e2e::add"), "{err}");
    let err = sb
        .call_json("agentix_e2e::add", json!({"a": 1}))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::TypeMismatch);
    assert!(err.message.contains("missing argument `b`"), "{err}");

    // A host built against another version of the shared crate: same name,
    // other result type.
    let stale: Remote<(String,), u64> = Remote::new("agentix_e2e::echo");
    let err = sb.remote(stale, ("text".into(),)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::TypeMismatch);
    assert!(err.message.contains("u64"), "{err}");
}

#[tokio::test]
async fn an_err_return_keeps_its_type_name_and_message() {
    let sb = sandbox().await;
    assert_eq!(
        sb.remote(agentix_e2e::checked_div, (9, 3)).await.unwrap(),
        3
    );
    let err = sb
        .remote(agentix_e2e::checked_div, (7, 0))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Raised);
    assert_eq!(err.type_name, "agentix_e2e::MathError");
    assert_eq!(err.message, "cannot divide 7 by zero");
    // A `Serialize` error type comes back whole, fields and all.
    assert_eq!(
        err.data_as::<agentix_e2e::MathError>(),
        Ok(agentix_e2e::MathError::DivideByZero { dividend: 7 })
    );
}

#[tokio::test]
async fn an_error_type_without_serialize_carries_no_data() {
    let sb = sandbox().await;
    let missing = support::scratch_dir("no-data").join("absent/pid");
    let err = sb
        .remote(
            agentix_e2e::run_child,
            (missing.to_string_lossy().into_owned(),),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Raised);
    assert_eq!(err.type_name, "std::io::error::Error");
    assert_eq!(err.data, None);
}

#[tokio::test]
async fn results_too_large_for_one_message_fail_and_the_connection_lives_on() {
    let mut config = SandboxConfig::new(bundle_path());
    config.max_message_bytes = 12 << 20;
    let sb = sandbox_with(config).await;
    let err = bounded(
        "oversized result",
        sb.remote(agentix_e2e::make_blob, (20 << 20,)),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind, ErrorKind::PayloadTooLarge, "{err}");
    assert!(err.message.contains("agentix_e2e::make_blob"), "{err}");
    // A stream whose single item is too large ends the same way.
    let mut items = sb
        .stream(agentix_e2e::blobs, (2, 20 << 20))
        .window(4, 64 << 20)
        .await
        .unwrap();
    let err = bounded("oversized item", items.next())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::PayloadTooLarge, "{err}");
    // Just under the limit still goes through, on the same connection.
    let blob = sb
        .remote(agentix_e2e::make_blob, (11 << 20,))
        .await
        .unwrap();
    assert_eq!(blob.len(), 11 << 20);
    assert_eq!(sb.remote(agentix_e2e::add, (1, 1)).await.unwrap(), 2);
}

#[tokio::test]
async fn oversized_arguments_fail_before_sending() {
    let mut config = SandboxConfig::new(bundle_path());
    config.max_message_bytes = 12 << 20;
    let sb = sandbox_with(config).await;
    let big = Blob::from(vec![1u8; 13 << 20]);
    let err = bounded("oversized call", sb.remote(agentix_e2e::echo_blob, (big,)))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::PayloadTooLarge);
    assert_eq!(sb.remote(agentix_e2e::add, (1, 1)).await.unwrap(), 2);
}

#[tokio::test]
async fn an_unreachable_server_is_reported_not_awaited() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let sb = Sandbox::attach(format!("127.0.0.1:{port}"), "token");
    let err = bounded("call to a closed port", sb.remote(agentix_e2e::add, (1, 1)))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::ServerUnreachable);
    assert!(err.message.contains(&port.to_string()), "{err}");
}

#[tokio::test]
async fn a_wrong_token_is_rejected_on_socketio_and_http() {
    let sb = sandbox().await;
    let intruder = Sandbox::attach(sb.addr(), "not-the-token");
    let err = bounded(
        "call with a wrong token",
        intruder.remote(agentix_e2e::add, (1, 1)),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind, ErrorKind::AuthRejected, "{err}");

    use support::raw_socket::http_status;
    assert_eq!(http_status(sb.addr(), "/health", None).await, 200);
    assert_eq!(http_status(sb.addr(), "/metrics", None).await, 401);
    let wrong = Some("Bearer nope");
    assert_eq!(http_status(sb.addr(), "/metrics", wrong).await, 401);
    let right = format!("Bearer {}", sb.token());
    assert_eq!(http_status(sb.addr(), "/metrics", Some(&right)).await, 404);

    // The rightful host is unaffected.
    assert_eq!(sb.remote(agentix_e2e::add, (1, 1)).await.unwrap(), 2);
}

#[tokio::test]
async fn a_worker_that_cannot_start_fails_calls_with_its_stderr() {
    let config = SandboxConfig::new(bundle_path()).env("AGENTIX_E2E_WORKER_FAIL", "1");
    let sb = sandbox_with(config).await;
    let err = bounded(
        "call to a broken worker",
        sb.remote(agentix_e2e::add, (1, 1)),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind, ErrorKind::WorkerStartFailed, "{err}");
    assert!(err.message.contains("exit status 3"), "{err}");
    let details = err.details.unwrap_or_default();
    assert!(
        details.contains("refusing to start"),
        "no stderr tail in: {details}"
    );
    // Later calls fail too (restarting, then degraded), and never hang.
    for _ in 0..3 {
        let err = bounded("repeat call", sb.remote(agentix_e2e::add, (1, 1)))
            .await
            .unwrap_err();
        assert!(
            matches!(err.kind, ErrorKind::WorkerStartFailed | ErrorKind::Degraded),
            "{err}"
        );
    }
}

#[tokio::test]
async fn bad_bundles_are_refused_with_a_reason() {
    let provider = LocalProvider::new();
    let err = provider
        .session(SandboxConfig::new("/no/such/bundle"))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::BadBundle { .. }), "{err}");
    assert!(err.to_string().contains("/no/such/bundle"), "{err}");

    // A binary that is not a bundle exits without the ready line.
    let err = provider
        .session(SandboxConfig::new("/bin/true"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::ServerStartFailed { .. }),
        "{err}"
    );
}

/// Why `message` does not read as a sentence for a person: Rust's debug
/// output (`None`, `Some(..)`, struct dumps, empty quotes), or nothing at
/// all.
fn not_a_sentence(message: &str) -> Option<String> {
    let words: Vec<&str> = message
        .split(|c: char| !c.is_alphanumeric() && c != '(' && c != '_')
        .collect();
    if message.trim().is_empty() {
        return Some("it is empty".into());
    }
    for debug in ["Some(", "Ok(", "Err("] {
        if words.iter().any(|w| w.starts_with(debug)) {
            return Some(format!("it shows Rust's `{debug}`"));
        }
    }
    // `None` as a word opening a sentence is English; anywhere else it is
    // an `Option` printed with `{:?}`.
    for (at, _) in message.match_indices("None") {
        let before = message[..at].trim_end();
        let after = message[at + 4..].chars().next();
        let opens = before.is_empty() || before.ends_with(['.', ':', '\n']);
        if !opens && !after.is_some_and(char::is_alphanumeric) {
            return Some("it shows Rust's `None`".into());
        }
    }
    for dump in ["\"\"", "{ ", " }", "[]", "\\n", "\\\""] {
        if message.contains(dump) {
            return Some(format!("it holds `{dump}`, a debug dump"));
        }
    }
    None
}

#[test]
fn the_sentence_check_catches_debug_output() {
    assert_eq!(not_a_sentence("the server did not start: it exited"), None);
    assert_eq!(not_a_sentence("None of the 3 calls ended"), None);
    assert!(not_a_sentence("it printed None instead of the ready line").is_some());
    assert!(not_a_sentence("got Some(\"x\")").is_some());
    assert!(not_a_sentence("bad: Person { name: \"\" }").is_some());
    assert!(not_a_sentence("  ").is_some());
}

#[tokio::test]
async fn every_error_a_user_meets_reads_as_a_sentence() {
    let mut messages: Vec<(&str, String)> = Vec::new();
    let mut config = SandboxConfig::new(bundle_path());
    config.max_message_bytes = 4 << 20;
    let sb = sandbox_with(config).await;
    let remote = |what, e: agentix::RemoteError| (what, e.to_string());

    let e = sb.call_json("agentix_e2e::ecoh", json!(["x"])).await;
    messages.push(remote("unknown target", e.unwrap_err()));
    let e = sb.call_cbor("agentix_e2e::echo", &[0xff, 0xfe]).await;
    messages.push(remote("bad arguments", e.unwrap_err()));
    let e = sb.call_json("agentix_e2e::add", json!({"a": 1})).await;
    messages.push(remote("missing argument", e.unwrap_err()));
    let stale: Remote<(String,), u64> = Remote::new("agentix_e2e::echo");
    let e = sb.remote(stale, ("text".into(),)).await;
    messages.push(remote("result type", e.unwrap_err()));
    let e = sb
        .remote(agentix_e2e::checked_div, (7, 0))
        .await
        .unwrap_err();
    let data = e.data_as::<String>().unwrap_err().to_string();
    messages.push(remote("raised", e));
    messages.push(("error data of another type", data));
    let e = sb.remote(agentix_e2e::explode, "kaboom".to_string()).await;
    messages.push(remote("panic", e.unwrap_err()));
    let e = sb
        .remote(agentix_e2e::sleep_ms, 5_000u64)
        .timeout(Duration::from_millis(50))
        .await;
    messages.push(remote("timeout", e.unwrap_err()));
    let e = sb.remote(agentix_e2e::make_blob, 5usize << 20).await;
    messages.push(remote("result too large", e.unwrap_err()));
    let e = sb
        .remote(agentix_e2e::echo_blob, Blob::from(vec![0u8; 5 << 20]))
        .await;
    messages.push(remote("arguments too large", e.unwrap_err()));
    let e = sb.remote(agentix_e2e::exit_worker, 7).await;
    messages.push(remote("worker exited", e.unwrap_err()));
    let e = sb
        .remote(agentix_files::stat, "/no/such/file".to_string())
        .await;
    messages.push(remote("file not found", e.unwrap_err()));
    let options = agentix_bash::BashOptions::new().cwd("/no/such/dir");
    let e = sb
        .remote(agentix_bash::run, ("true".to_string(), options))
        .await;
    messages.push(remote("bash cwd", e.unwrap_err()));
    let e = agentix_files::transfer::download_bytes(&sb, "/no/such/file").await;
    messages.push(("download", e.unwrap_err().to_string()));
    let intruder = Sandbox::attach(sb.addr(), "not-the-token");
    let e = intruder.remote(agentix_e2e::add, (1, 1)).await;
    messages.push(remote("wrong token", e.unwrap_err()));
    let addr = sb.addr().to_owned();
    sb.delete().await;
    let gone = Sandbox::attach(addr, "token");
    let e = gone.remote(agentix_e2e::add, (1, 1)).await;
    messages.push(remote("server gone", e.unwrap_err()));

    let provider = LocalProvider::new();
    let e = provider.create(SandboxConfig::new("/no/such/bundle")).await;
    messages.push(("no bundle", e.unwrap_err().to_string()));
    let e = provider.create(SandboxConfig::new("/bin/true")).await;
    messages.push(("not a bundle", e.unwrap_err().to_string()));
    let e = agentix::provider("no-such-provider");
    messages.push(("unknown provider", e.err().unwrap().to_string()));

    for (what, m) in &messages {
        println!("{what}: {m}\n");
    }
    let bad: Vec<String> = messages
        .iter()
        .filter_map(|(what, m)| not_a_sentence(m).map(|why| format!("{what}: {why}: {m}")))
        .collect();
    assert!(
        bad.is_empty(),
        "messages that do not read well:\n{}",
        bad.join("\n\n")
    );
}
