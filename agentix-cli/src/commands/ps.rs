//! `agentix ps`: every sandbox of this machine, with its owner, age, state
//! and what it uses.
//!
//! The markers hosts write are the list (local and Docker sandboxes); the
//! engine adds the containers of Agentix that no host recorded here
//! (another machine's host on a shared engine, or one that could not write
//! its marker). Each sandbox's state is its server's `/health`, asked of
//! all at once.

use std::process::ExitCode;
use std::time::Duration;

use agentix::{OwnerId, SandboxMarker};
use agentix_provider_docker::{DockerProvider, LABEL_OWNER, LABEL_SANDBOX};
use bollard::query_parameters::ListContainersOptions;
use serde::Serialize;

use super::known_sandboxes::{self, MarkerArgs};
use super::listing::{human_age, owner_state};
use super::process_usage::{self, Usage};

/// What `agentix ps` takes.
#[derive(clap::Args)]
pub(crate) struct PsArgs {
    /// One JSON array instead of a table.
    #[arg(long)]
    json: bool,
    /// List the snapshots hosts took instead: name, owner, size, and
    /// whether `agentix reap` would remove them.
    #[arg(long)]
    snapshots: bool,
    #[command(flatten)]
    markers: MarkerArgs,
}

/// One line of the listing.
#[derive(Debug, Serialize)]
struct Row {
    id: String,
    provider: String,
    /// The owning host's pid, when its owner can be read.
    owner_pid: Option<u32>,
    /// `alive`, `dead`, `elsewhere` (another machine's) or `unknown`.
    owner: &'static str,
    age_s: Option<u64>,
    /// The server's `/health` status, or `unreachable`.
    state: String,
    cpu_s: Option<f64>,
    rss_mib: Option<f64>,
    addr: String,
}

/// How long a sandbox's `/health` may take before it counts unreachable.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

pub(crate) async fn run(args: PsArgs) -> Result<ExitCode, String> {
    if args.snapshots {
        super::snapshots::list(&args.markers.dir(), args.json)?;
        return Ok(ExitCode::SUCCESS);
    }
    let markers = known_sandboxes::all(&args.markers.dir())?;
    let docker = DockerProvider::connect().ok();
    let rows = futures_util::future::join_all(markers.iter().map(|m| row_of(m, docker.as_ref())));
    let mut rows: Vec<Row> = rows.await;
    if let Some(docker) = &docker {
        rows.extend(unrecorded_containers(docker, &markers).await);
    }
    match args.json {
        true => println!(
            "{}",
            serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?
        ),
        false => print_table(&rows),
    }
    Ok(ExitCode::SUCCESS)
}

async fn row_of(marker: &SandboxMarker, docker: Option<&DockerProvider>) -> Row {
    let owner = OwnerId::parse(&marker.owner);
    let sandbox = known_sandboxes::attach(marker);
    let state = match tokio::time::timeout(HEALTH_TIMEOUT, sandbox.health()).await {
        Ok(Ok(report)) => report["status"].as_str().unwrap_or("unknown").to_owned(),
        _ => "unreachable".to_owned(),
    };
    let usage = match (marker.pid, docker) {
        (0, Some(docker)) => {
            let pids = docker.host_pids(&marker.id).await;
            (!pids.is_empty()).then(|| process_usage::of_pids(&pids))
        }
        (0, None) => None,
        (_, _) => marker
            .process_alive()
            .then(|| process_usage::of_tree(marker.pid)),
    };
    let now_ms = agentix::sandbox_marker::now_ms();
    Row {
        id: marker.id.clone(),
        provider: marker.provider.clone(),
        owner_pid: owner.as_ref().map(|o| o.pid),
        owner: owner_state(owner.as_ref()),
        age_s: Some(now_ms.saturating_sub(marker.created_ms) / 1000),
        state,
        cpu_s: usage.map(|u: Usage| u.cpu_s),
        rss_mib: usage.map(|u| u.rss_bytes as f64 / (1 << 20) as f64),
        addr: marker.addr.clone(),
    }
}

/// The engine's Agentix containers that no marker names.
async fn unrecorded_containers(docker: &DockerProvider, markers: &[SandboxMarker]) -> Vec<Row> {
    let options = ListContainersOptions {
        all: true,
        filters: Some([("label".to_owned(), vec![LABEL_OWNER.to_owned()])].into()),
        ..Default::default()
    };
    let Ok(list) = docker.docker().list_containers(Some(options)).await else {
        return Vec::new();
    };
    list.into_iter()
        .filter_map(|c| {
            let labels = c.labels?;
            let id = labels.get(LABEL_SANDBOX)?.clone();
            if markers.iter().any(|m| m.id == id) {
                return None;
            }
            let owner = labels.get(LABEL_OWNER).and_then(|o| OwnerId::parse(o));
            let created = c.created.map(|s| s.max(0) as u64);
            let now_s = agentix::sandbox_marker::now_ms() / 1000;
            Some(Row {
                id,
                provider: agentix_provider_docker::PROVIDER_NAME.to_owned(),
                owner_pid: owner.as_ref().map(|o| o.pid),
                owner: owner_state(owner.as_ref()),
                age_s: created.map(|at| now_s.saturating_sub(at)),
                // Without its token, only the engine's word.
                state: c
                    .state
                    .map(|s| format!("container {s}"))
                    .unwrap_or_default(),
                cpu_s: None,
                rss_mib: None,
                addr: String::new(),
            })
        })
        .collect()
}

fn print_table(rows: &[Row]) {
    println!(
        "{:<24} {:<8} {:>8} {:<9} {:>7} {:<14} {:>8} {:>8}",
        "ID", "PROVIDER", "OWNER", "", "AGE", "STATE", "CPU", "MEM"
    );
    for row in rows {
        let owner = row.owner_pid.map(|p| p.to_string()).unwrap_or_default();
        let age = row.age_s.map(human_age).unwrap_or_default();
        let cpu = row.cpu_s.map(|c| format!("{c:.1}s")).unwrap_or_default();
        let mem = row
            .rss_mib
            .map(|m| format!("{m:.0}MiB"))
            .unwrap_or_default();
        println!(
            "{:<24} {:<8} {:>8} {:<9} {:>7} {:<14} {:>8} {:>8}",
            row.id, row.provider, owner, row.owner, age, row.state, cpu, mem
        );
    }
}
