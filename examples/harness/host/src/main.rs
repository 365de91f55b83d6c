//! The harness example's host: what an evaluation harness does with
//! Agentix. It starts eight sandboxes at once, gives each a file, runs an
//! agent step in each, streams a command's output, and prints a summary.
//!
//! `cargo run -p harness`: it builds its bundle first.

use std::time::Instant;

use agentix::prelude::*;
use agentix_bash::{BashEvent, BashOptions};
use agentix_files::transfer;
use harness_functions::{agent_step, StepError};

const SANDBOXES: usize = 8;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    agentix::configure_logging("harness")?;
    // Built first when run by `cargo run`, beside this program.
    let config = harness::bundle_config()?;
    // Chosen at run time: a harness can take the provider from its own config.
    let provider: Box<dyn Provider> = Box::new(LocalProvider::new());
    let started = Instant::now();
    let runs = (0..SANDBOXES).map(|i| run_one(provider.as_ref(), config.clone(), i));
    let results = futures_util::future::join_all(runs).await;
    let mut failed = 0;
    for (i, result) in results.iter().enumerate() {
        match result {
            Ok(summary) => println!("sandbox {i}: {summary}"),
            Err(e) => {
                failed += 1;
                println!("sandbox {i} failed: {e}");
            }
        }
    }
    println!(
        "{} of {SANDBOXES} sandboxes done in {:.2?}",
        SANDBOXES - failed,
        started.elapsed()
    );
    if failed > 0 {
        return Err(format!("{failed} sandboxes failed").into());
    }
    Ok(())
}

/// One sandbox's work: upload, agent step, a streamed command. The session
/// is deleted when it goes out of scope, whatever happened.
async fn run_one(
    provider: &dyn Provider,
    config: SandboxConfig,
    i: usize,
) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let sandbox = provider.session(config).await?;
    let span = agentix::trace::span("harness.sandbox").attr("index", i as u64);
    span.scope(async {
        // Relative paths land in the sandbox's own directory.
        let text = format!("task {i}: ").repeat(i + 1);
        transfer::upload_bytes(&sandbox, text.as_bytes(), "input.txt").await?;

        let report = match sandbox
            .remote(agent_step, (format!("task-{i}"), "input.txt".to_string()))
            .await
        {
            Ok(report) => report,
            Err(e) => match e.data_as::<StepError>() {
                Ok(step) => return Err(format!("the step failed: {step}").into()),
                Err(_) => return Err(e.into()),
            },
        };

        let mut out = String::new();
        let mut events = sandbox
            .stream(
                agentix_bash::run_stream,
                ("wc -w < input.txt".to_string(), BashOptions::new()),
            )
            .await?;
        while let Some(event) = events.next().await {
            match event? {
                BashEvent::Stdout(chunk) => out.push_str(&String::from_utf8_lossy(&chunk)),
                BashEvent::Stderr(_) => {}
                BashEvent::Exit(exit) if exit.code != Some(0) => {
                    return Err(format!("wc exited with {exit:?}").into())
                }
                BashEvent::Exit(_) => {}
            }
        }
        Ok(format!(
            "{} counted {} words (wc says {}) in {}",
            report.task,
            report.words,
            out.trim(),
            report.cwd
        ))
    })
    .await
}
