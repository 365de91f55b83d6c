//! `agentix pause` and `agentix resume`: freeze a sandbox's work (its
//! worker and every process it started) and thaw it, its server and
//! connections living on.

use std::process::ExitCode;

use super::known_sandboxes::{self, MarkerArgs};

/// What `agentix pause` and `agentix resume` take.
#[derive(clap::Args)]
pub(crate) struct PauseArgs {
    /// The sandbox (its id, or the start of one).
    id: String,
    #[command(flatten)]
    markers: MarkerArgs,
}

/// Pauses (`pause`) or resumes the sandbox `args` names, saying how many
/// processes it stopped or continued.
pub(crate) async fn run(args: PauseArgs, pause: bool) -> Result<ExitCode, String> {
    let marker = args.markers.dir().find(&args.id)?;
    let sandbox = known_sandboxes::attach(&marker);
    let signalled = if pause {
        sandbox.pause().await
    } else {
        sandbox.resume().await
    }
    .map_err(|e| format!("sandbox {}: {e}", marker.id))?;
    let done = if pause { "paused" } else { "resumed" };
    println!("{} {done} ({signalled} processes)", marker.id);
    Ok(ExitCode::SUCCESS)
}
