//! The smallest host: one sandbox, one file, one agent step (the book's
//! "Your project" chapter shows this file as it is).

use agentix::prelude::*;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let config = SandboxConfig::beside_current_exe("harness-bundle")?;
    let provider: Box<dyn Provider> = Box::new(LocalProvider::new());
    let sandbox = provider.session(config).await?;
    agentix_files::transfer::upload_bytes(&sandbox, b"some words", "input.txt").await?;
    let report = sandbox
        .remote(
            harness_functions::agent_step,
            ("t1".to_string(), "input.txt".to_string()),
        )
        .await?;
    println!("{} words in the sandbox's {}", report.words, report.cwd);
    Ok(())
}
