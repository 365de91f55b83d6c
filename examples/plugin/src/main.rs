//! The plugin example end to end: the host answers the sandbox's `fetch`
//! requests with an actor (standing in for an LLM upstream) while a remote
//! call runs, and one refusal comes back to the sandbox as a
//! `RemoteSioError`.
//!
//! `cargo run -p plugin`

use agentix::actix::{Actor, Context, Handler};
use agentix::{
    HostNamespace, HostNamespaceHandle, JsonValue, LocalProvider, NamespaceFault, NamespaceRequest,
    Provider, SandboxConfig,
};
use serde_json::json;

/// Stands in for a real model API. An actor, so it keeps state between
/// requests (how many completions it served) without a lock; the sandbox's
/// `fetch` requests reach it as messages, and its `Ok` / `Err` is the reply.
struct Upstream {
    served: u64,
}

impl Actor for Upstream {
    type Context = Context<Self>;
}

impl Handler<NamespaceRequest<HostNamespaceHandle>> for Upstream {
    type Result = Result<JsonValue, NamespaceFault>;

    fn handle(
        &mut self,
        request: NamespaceRequest<HostNamespaceHandle>,
        _: &mut Context<Self>,
    ) -> Self::Result {
        let body = request.body;
        let prompt = body["prompt"].as_str().unwrap_or_default();
        if prompt.contains("secret") {
            let refusal = format!("the upstream refused: {prompt:?}");
            return Err(NamespaceFault::new("PolicyViolation", refusal));
        }
        self.served += 1;
        Ok(json!(format!(
            "[{}] {} (completion #{})",
            body["model"].as_str().unwrap_or("?"),
            prompt.to_uppercase(),
            self.served
        )))
    }
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
    let my_host = HostNamespace::new("/my-plugin")
        .on("configured", move |_, data| {
            let tx = configured_tx.clone();
            async move {
                let _ = tx.send(data);
            }
        })
        // One half as an actor: it runs on a background arbiter here (no
        // actix System in this program), on the caller's in an actix one.
        .request_actor(
            "fetch",
            agentix::start_actor(|_| Upstream { served: 0 }).recipient(),
        );
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
