//! The plugin example end to end: the host answers the sandbox's `fetch`
//! requests (standing in for an LLM upstream) while a remote call runs, and
//! one refusal comes back to the sandbox as a `RemoteSioError`.
//!
//! `cargo run -p plugin`

use std::fmt;

use agentix::{ClientNamespace, JsonValue, LocalProvider, Provider, SandboxConfig};
use serde_json::json;

/// The upstream's refusal, as the sandbox will see it.
#[derive(Debug)]
struct PolicyViolation(String);

impl fmt::Display for PolicyViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the upstream refused: {}", self.0)
    }
}

/// Stands in for a call to a real model API.
async fn call_upstream(body: JsonValue) -> Result<JsonValue, PolicyViolation> {
    let prompt = body["prompt"].as_str().unwrap_or_default();
    if prompt.contains("secret") {
        return Err(PolicyViolation(format!("{prompt:?}")));
    }
    Ok(json!(format!(
        "[{}] {}",
        body["model"].as_str().unwrap_or("?"),
        prompt.to_uppercase()
    )))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    agentix::bundle::dispatch_with(plugin_app::register_my_service);
    host()
}

#[tokio::main]
async fn host() -> Result<(), Box<dyn std::error::Error>> {
    let sandbox = LocalProvider::new()
        .session(SandboxConfig::current_exe()?)
        .await?;
    let (configured_tx, mut configured) = tokio::sync::mpsc::unbounded_channel();
    let my_host = ClientNamespace::new("/my-plugin")
        .on("configured", move |_, data| {
            let tx = configured_tx.clone();
            async move {
                let _ = tx.send(data);
            }
        })
        .request_handler("fetch", call_upstream);
    // Before the first remote call: the connections are planned then.
    sandbox.register_namespace(my_host)?;

    // The first call connects; then configure the service and wait for it.
    sandbox
        .call_json("plugin_app::agent_step", json!(["warm up"]))
        .await?;
    sandbox
        .emit("/my-plugin", "configure", json!({ "model": "claude" }))
        .await?;
    println!(
        "sandbox says: {}",
        configured.recv().await.unwrap_or_default()
    );

    for line in sandbox
        .remote(plugin_app::agent_step, ("hello from the agent".into(),))
        .await?
    {
        println!("{line}");
    }
    sandbox.delete().await;
    Ok(())
}
