//! The harness example's remote functions, shared by the bundle (which
//! links them) and the host (which calls them by their typed handles).

use serde::{Deserialize, Serialize};

agentix::plugin_crate!();

/// What one agent step reports back.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepReport {
    /// The task the step was given.
    pub task: String,
    /// Words in the task's input file.
    pub words: usize,
    /// The sandbox's working directory, where relative paths land.
    pub cwd: String,
}

/// One agent step: reads `input` (a file the host uploaded), logs as it
/// goes, and reports.
#[agentix::remote]
pub async fn agent_step(task: String, input: String) -> Result<StepReport, StepError> {
    tracing::info!(task, "step started");
    let text = std::fs::read_to_string(&input).map_err(|e| StepError {
        message: format!("cannot read {input}: {e}"),
    })?;
    let words = text.split_whitespace().count();
    println!("read {words} words from {input}");
    let cwd = std::env::current_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    Ok(StepReport { task, words, cwd })
}

/// Why a step failed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StepError {
    /// What went wrong.
    pub message: String,
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StepError {}
