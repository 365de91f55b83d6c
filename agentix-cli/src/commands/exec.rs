//! `agentix exec`: a shell command in a sandbox, through its bash plugin,
//! its output streamed as it comes and its status the command's own.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use agentix::StreamExt;
use agentix_bash::{BashEvent, BashOptions};

use super::known_sandboxes::{self, MarkerArgs};

/// What `agentix exec` takes.
#[derive(clap::Args)]
pub(crate) struct ExecArgs {
    /// The sandbox (its id, or the start of one).
    id: String,
    /// The directory to run in (default: the sandbox's).
    #[arg(long)]
    cwd: Option<String>,
    /// Kill the command after this many seconds.
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<f64>,
    /// The command: one argument is a shell script (`'ls | wc -l'`); more
    /// are a program and its arguments, each passed as it is.
    #[arg(last = true, required = true)]
    command: Vec<String>,
    #[command(flatten)]
    markers: MarkerArgs,
}

pub(crate) async fn run(args: ExecArgs) -> Result<ExitCode, String> {
    let marker = args.markers.dir().find(&args.id)?;
    let sandbox = known_sandboxes::attach(&marker);
    let script = match args.command.as_slice() {
        [one] => one.clone(),
        many => many
            .iter()
            .map(|arg| shell_quote(arg))
            .collect::<Vec<_>>()
            .join(" "),
    };
    let mut options = BashOptions::new();
    if let Some(cwd) = args.cwd {
        options = options.cwd(cwd);
    }
    if let Some(seconds) = args.timeout {
        options = options.timeout(Duration::from_secs_f64(seconds.max(0.0)));
    }
    let mut events = sandbox
        .stream(agentix_bash::run_stream, (script, options))
        .await
        .map_err(|e| format!("sandbox {}: {e}", marker.id))?;
    let (mut stdout, mut stderr) = (std::io::stdout(), std::io::stderr());
    while let Some(event) = events.next().await {
        match event.map_err(|e| format!("sandbox {}: {e}", marker.id))? {
            BashEvent::Stdout(chunk) => {
                let _ = stdout.write_all(&chunk).and_then(|()| stdout.flush());
            }
            BashEvent::Stderr(chunk) => {
                let _ = stderr.write_all(&chunk).and_then(|()| stderr.flush());
            }
            BashEvent::Exit(exit) => {
                if exit.timed_out {
                    eprintln!("agentix exec: the command ran past its timeout and was killed");
                }
                // As a shell reports it: the code, or 128 + the signal.
                let status = match (exit.code, exit.signal) {
                    (Some(code), _) => code,
                    (None, Some(signal)) => 128 + signal,
                    (None, None) => 1,
                };
                return Ok(ExitCode::from(status.clamp(0, 255) as u8));
            }
        }
    }
    Err(format!(
        "sandbox {}: the command's stream ended without its exit",
        marker.id
    ))
}

/// `arg` as one word of a POSIX shell: single-quoted unless it needs none.
fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    match plain {
        true => arg.to_owned(),
        false => format!("'{}'", arg.replace('\'', r"'\''")),
    }
}

#[cfg(test)]
mod tests {
    use super::shell_quote;

    #[test]
    fn words_are_quoted_only_when_a_shell_would_split_or_expand_them() {
        assert_eq!(shell_quote("ls"), "ls");
        assert_eq!(shell_quote("/tmp/a.txt"), "/tmp/a.txt");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("$HOME"), "'$HOME'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
