//! The plugin example end to end: the host answers the sandbox's `Fetch`
//! requests with an actor (standing in for an LLM upstream) while a remote
//! call runs, and one refusal comes back to the sandbox as a
//! `RemoteSioError`.
//!
//! `cargo run -p plugin`

use agentix::actix::{Actor, Context, Handler};
use agentix::{Asked, HostEnd, HostHalf, LocalProvider, NamespaceFault, Provider, SandboxConfig};
use plugin_app::{Completion, Configure, Configured, Fetch, MyPlugin};

// ANCHOR: host_half
/// Stands in for a real model API. An actor, so it keeps state between
/// requests (how many completions it served) without a lock; the sandbox's
/// `Fetch` requests reach it as messages, and its `Ok` / `Err` is the reply.
struct Upstream {
    served: u64,
}

impl Actor for Upstream {
    type Context = Context<Self>;
}

impl Handler<Asked<HostEnd<MyPlugin>, Fetch>> for Upstream {
    type Result = Result<Completion, NamespaceFault>;

    fn handle(
        &mut self,
        asked: Asked<HostEnd<MyPlugin>, Fetch>,
        _: &mut Context<Self>,
    ) -> Self::Result {
        let Fetch { model, prompt } = asked.request;
        if prompt.contains("secret") {
            let refusal = format!("the upstream refused: {prompt:?}");
            return Err(NamespaceFault::new("PolicyViolation", refusal));
        }
        self.served += 1;
        Ok(Completion(format!(
            "[{model}] {} (completion #{})",
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
    let my_host = HostHalf::<MyPlugin>::new()
        .on(move |_, Configured { model }| {
            let _ = configured_tx.send(model);
            async {}
        })
        // One half as an actor: it runs on a background arbiter here (no
        // actix System in this program), on the caller's in an actix one.
        .answer_actor::<Fetch>(agentix::start_actor(|_| Upstream { served: 0 }));
    // Before the first remote call: the connections are planned then.
    sandbox.register_namespace(my_host)?;
    // ANCHOR_END: host_half

    // The first call connects; then configure the service and wait for it.
    sandbox
        .remote(plugin_app::agent_step, ("warm up".into(),))
        .await?;
    let service = sandbox.namespace::<MyPlugin>().await?;
    service
        .emit(&Configure {
            model: "claude".into(),
        })
        .await?;
    println!(
        "sandbox says: configured {}",
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
