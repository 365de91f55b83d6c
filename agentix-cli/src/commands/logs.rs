//! `agentix logs`: a sandbox's log, as its host sees it.
//!
//! A local sandbox's server appends every record and output line to its
//! durable log file (`<dir>/logs/sandbox-<worker>.log`, one per worker),
//! which this prints and, with `--follow`, follows as it grows; it works
//! whether or not the server still answers, as long as the sandbox's
//! directory is there. A container keeps that file inside, so for a Docker
//! sandbox `--follow` joins its `/log` channel with its token and prints
//! what it logs from then on.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use agentix::{SandboxConfig, SandboxMarker};

use super::known_sandboxes::{self, MarkerArgs};

/// What `agentix logs` takes.
#[derive(clap::Args)]
pub(crate) struct LogsArgs {
    /// The sandbox (its id, or the start of one).
    id: String,
    /// Keep printing what it logs until it ends (or Ctrl-C).
    #[arg(short, long)]
    follow: bool,
    #[command(flatten)]
    markers: MarkerArgs,
}

/// How often a followed log file is looked at again.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);

pub(crate) async fn run(args: LogsArgs) -> Result<ExitCode, String> {
    let marker = args.markers.dir().find(&args.id)?;
    if marker.dir.as_os_str().is_empty() {
        return follow_channel(&marker, args.follow).await;
    }
    let logs = marker.dir.join("logs");
    if !marker.dir.exists() {
        return Err(format!(
            "sandbox {} has ended and its log went with its directory {}",
            marker.id,
            marker.dir.display()
        ));
    }
    let mut tail = LogFiles::default();
    tail.print_new(&logs)
        .map_err(|e| format!("cannot read {}: {e}", logs.display()))?;
    if !args.follow {
        return Ok(ExitCode::SUCCESS);
    }
    loop {
        tokio::select! {
            _ = tokio::time::sleep(FOLLOW_EVERY) => {}
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
        }
        if !marker.dir.exists() {
            eprintln!("agentix logs: sandbox {} has ended", marker.id);
            return Ok(ExitCode::SUCCESS);
        }
        tail.print_new(&logs)
            .map_err(|e| format!("cannot read {}: {e}", logs.display()))?;
    }
}

/// The log files of one sandbox and how much of each is printed.
#[derive(Default)]
struct LogFiles {
    printed: BTreeMap<PathBuf, u64>,
}

impl LogFiles {
    /// Prints what the files in `dir` gained since last time: whole lines
    /// only (a line being written is printed once it ends), files in the
    /// order they were started.
    fn print_new(&mut self, dir: &Path) -> std::io::Result<()> {
        let mut files: Vec<(std::time::SystemTime, PathBuf)> = match std::fs::read_dir(dir) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
                .map(|e| {
                    let made = e.metadata().and_then(|m| m.created().or(m.modified()));
                    (made.unwrap_or(std::time::UNIX_EPOCH), e.path())
                })
                .collect(),
            // No worker has logged yet.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        files.sort();
        let mut out = std::io::stdout().lock();
        for (_, path) in files {
            let offset = self.printed.entry(path.clone()).or_default();
            let mut file = std::fs::File::open(&path)?;
            file.seek(SeekFrom::Start(*offset))?;
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes)?;
            let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            out.write_all(&bytes[..whole])?;
            *offset += whole as u64;
        }
        out.flush()
    }
}

/// A Docker sandbox: its `/log` channel, live, when following.
async fn follow_channel(marker: &SandboxMarker, follow: bool) -> Result<ExitCode, String> {
    if !follow {
        return Err(format!(
            "sandbox {} keeps its log file inside its container; \
             `agentix logs --follow {}` prints what it logs from now on",
            marker.id, marker.id
        ));
    }
    let config = SandboxConfig::new("").on_log(|_, record| {
        println!("{}", record.to_line());
    });
    let sandbox = known_sandboxes::attach_with(marker, config);
    sandbox
        .connect()
        .await
        .map_err(|e| format!("cannot reach {}: {e}", marker.id))?;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
        }
        if sandbox.health().await.is_err() {
            eprintln!("agentix logs: sandbox {} no longer answers", marker.id);
            return Ok(ExitCode::SUCCESS);
        }
    }
}
