//! `agentix reap`: removes what hosts that died left on this machine — the
//! local sandboxes their markers name (processes, directories, cgroups) and
//! the containers (with their volumes) their labels name — and never a
//! live host's. Another machine's containers on a shared engine are left.

use std::process::ExitCode;

use agentix::{Liveness, LocalProvider, OwnerId, Provider};
use agentix_provider_docker::DockerProvider;
use serde_json::json;

use super::known_sandboxes::{self, MarkerArgs};

/// What `agentix reap` takes.
#[derive(clap::Args)]
pub(crate) struct ReapArgs {
    /// Only list what would be removed.
    #[arg(long)]
    dry_run: bool,
    /// Say what was done as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    markers: MarkerArgs,
}

pub(crate) async fn run(args: ReapArgs) -> Result<ExitCode, String> {
    let markers = args.markers.dir();
    let docker = match DockerProvider::connect() {
        Ok(docker) if docker.docker().ping().await.is_ok() => Some(docker),
        _ => None,
    };
    if args.dry_run {
        let doomed: Vec<_> = known_sandboxes::all(&markers)?
            .into_iter()
            .filter(|m| OwnerId::parse(&m.owner).map(|o| o.liveness()) == Some(Liveness::Dead))
            .collect();
        match args.json {
            true => {
                let ids: Vec<_> = doomed
                    .iter()
                    .map(|m| json!({"id": m.id, "provider": m.provider}))
                    .collect();
                println!("{}", json!({ "would_remove": ids }));
            }
            false => {
                for marker in &doomed {
                    println!(
                        "would remove {} ({}, owner {})",
                        marker.id, marker.provider, marker.owner
                    );
                }
                if doomed.is_empty() {
                    println!("nothing to remove");
                }
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let local = LocalProvider::new()
        .marker_dir(markers.path())
        .reap()
        .await
        .map_err(|e| e.to_string())?;
    let containers = match &docker {
        Some(docker) => {
            let docker = docker.clone().marker_dir(markers.path());
            Some(docker.reap().await.map_err(|e| e.to_string())?)
        }
        None => None,
    };
    match args.json {
        true => println!("{}", json!({ "local": local, "docker": containers })),
        false => match containers {
            Some(containers) => {
                println!("removed {local} local sandboxes and {containers} containers")
            }
            None => println!("removed {local} local sandboxes (no Docker engine answers)"),
        },
    }
    Ok(ExitCode::SUCCESS)
}
