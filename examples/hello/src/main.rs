//! Starts a local sandbox running this very binary as its bundle, and calls
//! into it.
//!
//! `cargo run -p hello`: the program first checks whether the sandbox started
//! it as `serve` or `worker` (then it is the bundle); otherwise it is the host.

use std::time::Duration;

use agentix::{ErrorKind, LocalProvider, Provider, SandboxConfig, StreamExt};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    agentix::bundle::dispatch();
    host()
}

#[tokio::main]
async fn host() -> Result<(), Box<dyn std::error::Error>> {
    let provider = LocalProvider::new();
    let sandbox = provider.session(SandboxConfig::current_exe()?).await?;

    let out = sandbox.remote(hello_app::run, "hello".to_string()).await?;
    println!(
        "{} (computed by worker pid {}, host pid {})",
        out.output,
        out.worker_pid,
        std::process::id()
    );
    assert_eq!(out.output, "HELLO");

    let q = sandbox.remote(hello_app::divide, (84, 2)).await?;
    println!("84 / 2 = {q}");

    let err = sandbox.remote(hello_app::divide, (1, 0)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Raised);
    println!("1 / 0 -> {err}");

    let by_name = sandbox
        .call_json("hello_app::run", serde_json_args("untyped"))
        .await?;
    println!("by name: {by_name}");

    // A streaming function: items arrive while it runs.
    let mut numbers = sandbox.stream(hello_app::countdown, (3, 100)).await?;
    while let Some(n) = numbers.next().await {
        println!("countdown: {}", n?);
    }

    // A deadline cancels the call inside the sandbox.
    let err = sandbox
        .remote(hello_app::nap, (10_000,))
        .timeout(Duration::from_millis(200))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout);
    println!("deadline: {err}");

    sandbox.delete().await;
    Ok(())
}

fn serde_json_args(input: &str) -> agentix::JsonValue {
    agentix::JsonValue::Array(vec![agentix::JsonValue::String(input.to_owned())])
}
