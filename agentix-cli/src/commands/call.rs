//! `agentix call`: one of a sandbox's functions, called by name with JSON
//! arguments, for debugging a bundle by hand.

use std::process::ExitCode;

use super::known_sandboxes::{self, MarkerArgs};

/// What `agentix call` takes.
#[derive(clap::Args)]
pub(crate) struct CallArgs {
    /// The sandbox (its id, or the start of one).
    id: String,
    /// The function's full name (`my_crate::my_function`).
    function: String,
    /// Its arguments as JSON: an array (by position), an object (by
    /// parameter name) or, for one parameter, the bare value.
    #[arg(default_value = "[]")]
    args: String,
    #[command(flatten)]
    markers: MarkerArgs,
}

pub(crate) async fn run(args: CallArgs) -> Result<ExitCode, String> {
    let json: serde_json::Value = serde_json::from_str(&args.args)
        .map_err(|e| format!("the arguments are not JSON ({e}): {}", args.args))?;
    let marker = args.markers.dir().find(&args.id)?;
    let sandbox = known_sandboxes::attach(&marker);
    match sandbox.call_json(&args.function, json).await {
        Ok(result) => {
            println!("{result}");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Err(e.to_string()),
    }
}
