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
