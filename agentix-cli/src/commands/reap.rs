//! `agentix reap`: removes what hosts that died left on this machine — the
//! local sandboxes their markers name (processes, directories, cgroups) and
//! the containers (with their volumes) their labels name, and the unnamed
//! snapshots they recorded — and never a live host's. Another machine's
//! containers on a shared engine are left. With `--kube-namespace NS` it
//! also removes the pods (with their Secrets and policies) that such hosts
//! left in that namespace of the cluster `kubectl` would use; no cluster is
//! contacted without it. `--snapshot NAME` removes that snapshot, named or
//! not, whoever took it.

use std::process::ExitCode;

use agentix::{Liveness, LocalProvider, OwnerId, Provider};
use agentix_provider_docker::DockerProvider;
use agentix_provider_kubernetes::KubernetesProvider;
use serde_json::json;

use super::known_sandboxes::{self, MarkerArgs};
use super::snapshots;

/// What `agentix reap` takes.
#[derive(clap::Args)]
pub(crate) struct ReapArgs {
    /// Only list what would be removed.
    #[arg(long)]
    dry_run: bool,
    /// Say what was done as JSON.
    #[arg(long)]
    json: bool,
    /// Remove only this snapshot (a name, an id, or the start of one id),
    /// whoever took it; repeatable.
    #[arg(long, value_name = "NAME")]
    snapshot: Vec<String>,
    /// Also remove dead hosts' pods in this namespace of the cluster the
    /// kubeconfig names (KUBECONFIG, ~/.kube/config).
    #[arg(long, value_name = "NS")]
    kube_namespace: Option<String>,
    #[command(flatten)]
    markers: MarkerArgs,
}

pub(crate) async fn run(args: ReapArgs) -> Result<ExitCode, String> {
    let markers = args.markers.dir();
    if !args.snapshot.is_empty() {
        return remove_snapshots(&markers, &args);
    }
    let docker = match DockerProvider::connect() {
        Ok(docker) if docker.docker().ping().await.is_ok() => Some(docker),
        _ => None,
    };
    let kube = match &args.kube_namespace {
        Some(namespace) => Some(
            KubernetesProvider::connect()
                .await
                .map_err(|e| e.to_string())?
                .namespace(namespace.clone())
                .marker_dir(markers.path()),
        ),
        None => None,
    };
    if args.dry_run {
        let doomed: Vec<_> = known_sandboxes::all(&markers)?
            .into_iter()
            .filter(|m| OwnerId::parse(&m.owner).map(|o| o.liveness()) == Some(Liveness::Dead))
            .map(|m| (m.id, m.provider, m.owner))
            .chain(
                snapshots::abandoned(&markers)?
                    .into_iter()
                    .map(|r| (r.id, r.provider, r.owner)),
            )
            .collect();
        let mut doomed = doomed;
        if let Some(kube) = &kube {
            for pod in kube.abandoned_pods().await.map_err(|e| e.to_string())? {
                let name = pod.metadata.name.clone().unwrap_or_default();
                let owner = pod
                    .metadata
                    .annotations
                    .and_then(|a| {
                        a.get(agentix_provider_kubernetes::pod_spec::ANNOTATION_OWNER)
                            .cloned()
                    })
                    .unwrap_or_default();
                if !doomed
                    .iter()
                    .any(|(id, _, _)| name == format!("agentix-{id}"))
                {
                    doomed.push((name, "kubernetes".to_owned(), owner));
                }
            }
        }
        match args.json {
            true => {
                let ids: Vec<_> = doomed
                    .iter()
                    .map(|(id, provider, _)| json!({"id": id, "provider": provider}))
                    .collect();
                println!("{}", json!({ "would_remove": ids }));
            }
            false => {
                for (id, provider, owner) in &doomed {
                    println!("would remove {id} ({provider}, owner {owner})");
                }
                if doomed.is_empty() {
                    println!("nothing to remove");
                }
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    // Counted before the providers' reaps remove them with the rest.
    let snapshots = snapshots::abandoned(&markers)?.len();
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
    let pods = match &kube {
        Some(kube) => Some(kube.reap().await.map_err(|e| e.to_string())?),
        None => None,
    };
    match args.json {
        true => println!(
            "{}",
            json!({ "local": local, "docker": containers, "kubernetes": pods, "snapshots": snapshots })
        ),
        false => match containers {
            Some(containers) => println!(
                "removed {local} local sandboxes, {containers} containers and {snapshots} snapshots"
            ),
            None => println!(
                "removed {local} local sandboxes and {snapshots} snapshots (no Docker engine answers)"
            ),
        },
    }
    if let (Some(pods), false) = (pods, args.json) {
        println!("removed {pods} pods of dead hosts in the cluster");
    }
    Ok(ExitCode::SUCCESS)
}

/// `agentix reap --snapshot NAME..`: removes exactly those snapshots.
fn remove_snapshots(markers: &agentix::MarkerDir, args: &ReapArgs) -> Result<ExitCode, String> {
    if args.dry_run {
        for name in &args.snapshot {
            let record = agentix::SnapshotRecords::of(markers).find(name)?;
            println!("would remove {} ({})", record.id, record.dir.display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let removed = snapshots::remove(markers, &args.snapshot)?;
    let ids: Vec<&str> = removed.iter().map(|r| r.id.as_str()).collect();
    match args.json {
        true => println!("{}", json!({ "snapshots_removed": ids })),
        false => println!("removed {}", ids.join(", ")),
    }
    Ok(ExitCode::SUCCESS)
}
