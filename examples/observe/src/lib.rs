//! The remote function of the observe example: it logs, prints, runs a
//! child process and traces nested spans, all with ordinary APIs.

use agentix::trace;

/// Pretends to research `topic` in three steps.
#[agentix::remote]
pub async fn investigate(topic: String) -> usize {
    tracing::info!(topic = %topic, "starting the investigation");
    log::warn!(target: "legacy::search", "the log crate works too");
    println!("plain stdout from the sandbox");
    eprintln!("plain stderr from the sandbox");
    let _ = tokio::process::Command::new("sh")
        .args(["-c", "echo output of a child process"])
        .status()
        .await;

    let research = trace::span("research").attr("topic", topic.clone());
    research
        .scope(async {
            for step in ["search", "read", "summarise"] {
                let span = trace::span(format!("step.{step}")).attr("tool", step);
                span.scope(tokio::task::yield_now()).await;
                span.add_event("done");
                tracing::debug!(step, "step finished");
            }
        })
        .await;
    tracing::info!("investigation finished");
    3
}
