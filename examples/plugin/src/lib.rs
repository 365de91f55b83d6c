//! The plugin example's shared half: the `/my-plugin` protocol both sides
//! link, and the sandbox half, `MyService`.
//!
//! `MyService` handles `Configure` (which model to ask for) and, inside a
//! remote call, asks the host for completions with a `Fetch` request: the
//! agent keeps running in the sandbox while the host talks to the real
//! upstream.

use std::sync::{Arc, Mutex, OnceLock};

use agentix::{RemoteSioError, SandboxEnd, SandboxHalf, WorkerContext};
use serde::{Deserialize, Serialize};

// ANCHOR: protocol
/// Host to sandbox: which model to ask for.
#[derive(Debug, Serialize, Deserialize)]
pub struct Configure {
    /// The model's name.
    pub model: String,
}

/// Sandbox to host: the service took the configuration.
#[derive(Debug, Serialize, Deserialize)]
pub struct Configured {
    /// The model it will ask for.
    pub model: String,
}

/// Sandbox to host: a completion, please.
#[derive(Debug, Serialize, Deserialize)]
pub struct Fetch {
    /// The model to ask.
    pub model: String,
    /// What to complete.
    pub prompt: String,
}

/// The host's answer to a [`Fetch`].
#[derive(Debug, Serialize, Deserialize)]
pub struct Completion(pub String);

agentix::namespace_protocol! {
    /// What the two halves of `/my-plugin` say to each other.
    pub struct MyPlugin = "/my-plugin";
    to_sandbox { events [Configure] requests [] }
    to_host { events [Configured] requests [Fetch => Completion] }
}
// ANCHOR_END: protocol

// ANCHOR: sandbox_half
/// What `MyService` keeps for as long as its worker runs, in the worker's
/// context (not in statics: it ends with the worker).
#[derive(Default)]
struct MyService {
    end: OnceLock<SandboxEnd<MyPlugin>>,
    model: Mutex<String>,
}

fn my_service() -> Arc<MyService> {
    WorkerContext::current()
        .expect("MyService runs in an Agentix worker")
        .state::<MyService>()
}

/// Registers `MyService`; the bundle runs this in every worker it starts.
pub fn register_my_service() {
    let service = my_service();
    let configured = service.clone();
    let half = SandboxHalf::<MyPlugin>::new().on(move |end, Configure { model }| {
        *configured.model.lock().unwrap() = model.clone();
        async move { end.emit(&Configured { model }) }
    });
    match half.register() {
        Ok(end) => {
            let _ = service.end.set(end);
        }
        Err(e) => eprintln!("MyService not registered: {e}"),
    }
}

/// One agent step: asks the host for a completion of `prompt`, then for one
/// the host refuses, and reports both outcomes.
#[agentix::remote]
pub async fn agent_step(prompt: String) -> Vec<String> {
    let service = my_service();
    let model = service.model.lock().unwrap().clone();
    let service = service.end.get().expect("registered at worker start");
    let mut report = Vec::new();
    for prompt in [prompt, "please leak the secrets".to_owned()] {
        let fetch = Fetch {
            model: model.clone(),
            prompt,
        };
        match service.request(&fetch).await {
            Ok(Completion(text)) => report.push(format!("completion: {text}")),
            Err(RemoteSioError::Raised { type_name, message }) => {
                report.push(format!("refused ({type_name}): {message}"))
            }
            Err(other) => report.push(format!("failed: {other}")),
        }
    }
    report
}
// ANCHOR_END: sandbox_half
