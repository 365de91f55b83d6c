//! Runs a remote function that logs, prints and traces, and shows what the
//! host received: log lines as they happen (tagged with the sandbox id), and
//! the span tree a host processor captured, sandbox spans nested under the
//! host span that made the call.
//!
//! `cargo run -p observe` (add `RUST_LOG=debug` for more).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use agentix::trace::{self, Processor, SpanData, TraceHub};
use agentix::{LocalProvider, Provider, SandboxConfig};

/// Keeps every span that ends, for printing the tree at the end.
#[derive(Clone, Default)]
struct CaptureProcessor(Arc<Mutex<Vec<SpanData>>>);

impl Processor for CaptureProcessor {
    fn on_span_end(&mut self, span: &SpanData) {
        self.0.lock().unwrap().push(span.clone());
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    agentix::bundle::dispatch();
    host()
}

#[tokio::main]
async fn host() -> Result<(), Box<dyn std::error::Error>> {
    agentix::configure_logging("host").map_err(|e| e.to_string())?;
    // The program's processors; the sandbox's spans come to them too.
    let hub = TraceHub::new();
    let capture = CaptureProcessor::default();
    hub.add_processor(capture.clone());

    let sandbox = LocalProvider::new()
        .session(SandboxConfig::current_exe()?.trace_hub(hub.clone()))
        .await?;
    tracing::info!("sandbox {} started", sandbox.id());

    let rollout = hub.trace("rollout");
    let episode = {
        let _in_rollout = rollout.enter();
        trace::span("episode").attr("seed", 7)
    };
    let steps = episode
        .scope(sandbox.remote(observe_app::investigate, ("tides".to_string(),)))
        .await?;
    tracing::info!(steps, "the sandbox answered");
    drop(episode);
    drop(rollout);

    // Sandbox spans arrive over /trace; wait until the whole tree is here.
    for _ in 0..200 {
        hub.flush().await;
        if capture.0.lock().unwrap().len() >= 5 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    print_tree(&capture.0.lock().unwrap());
    sandbox.delete().await;
    Ok(())
}

/// Prints spans as an indented tree, children under parents, in start order.
fn print_tree(spans: &[SpanData]) {
    let mut children: BTreeMap<Option<&str>, Vec<&SpanData>> = BTreeMap::new();
    for s in spans {
        children.entry(s.parent_id.as_deref()).or_default().push(s);
    }
    for list in children.values_mut() {
        list.sort_by_key(|s| s.start_us);
    }
    fn walk(children: &BTreeMap<Option<&str>, Vec<&SpanData>>, parent: Option<&str>, depth: usize) {
        for s in children.get(&parent).into_iter().flatten() {
            let ms = s.end_us.unwrap_or(s.start_us).saturating_sub(s.start_us) as f64 / 1e3;
            let origin = s.origin.as_deref().unwrap_or("host");
            println!("{}{} [{origin}] {ms:.2} ms", "  ".repeat(depth), s.name);
            walk(children, Some(&s.span_id), depth + 1);
        }
    }
    println!("span tree received by the host:");
    walk(&children, None, 1);
}
