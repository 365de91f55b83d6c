//! The `snapshot` section (only with `--only snapshot`): snapshots and
//! forks of isolated local sandboxes and of containers holding 100 MB in
//! 1,000 files, beside fresh sandboxes of the same config and, for
//! containers, the engine's own floor and fresh sandboxes that run the
//! setup themselves (the Docker half is skipped, saying so, when no engine
//! answers).

use std::time::Instant;

use agentix::{LocalProvider, Provider, Sandbox, SandboxConfig, SnapshotSpec};

use crate::report::Report;

/// Files the sandbox writes, and the bytes of each: 100 MB in all.
const FILES: u32 = 1_000;
const FILE_BYTES: usize = 100_000;

/// Writes `files` files of `bytes` bytes each into the sandbox's directory.
#[agentix::remote]
pub(crate) async fn fill_dir(files: u32, bytes: usize) -> Result<u64, String> {
    write_files(files, bytes)
}

fn write_files(files: u32, bytes: usize) -> Result<u64, String> {
    let block: Vec<u8> = (0..bytes).map(|i| (i % 253) as u8).collect();
    std::fs::create_dir_all("state").map_err(|e| e.to_string())?;
    for i in 0..files {
        std::fs::write(format!("state/f{i:04}"), &block).map_err(|e| e.to_string())?;
    }
    Ok(u64::from(files) * bytes as u64)
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Writes the files, then sleeps until `secs` seconds have passed since
/// the call began: a setup of a fixed length.
#[agentix::remote]
pub(crate) async fn slow_setup(secs: f64) -> Result<u64, String> {
    let began = Instant::now();
    let bytes = write_files(FILES, FILE_BYTES)?;
    let left = std::time::Duration::from_secs_f64(secs).saturating_sub(began.elapsed());
    tokio::time::sleep(left).await;
    Ok(bytes)
}

/// Starts `n` sandboxes at once, from `snapshot` if given: the seconds
/// until all are ready, and the sandboxes.
async fn start_many(
    provider: &dyn Provider,
    config: &SandboxConfig,
    snapshot: Option<&agentix::Snapshot>,
    n: usize,
) -> (f64, Vec<Sandbox>) {
    let began = Instant::now();
    let starts = (0..n).map(|_| async {
        match snapshot {
            Some(snapshot) => provider.create_from(snapshot, config.clone()).await,
            None => provider.session(config.clone()).await,
        }
        .expect("a sandbox starts")
    });
    let sandboxes = futures_util::future::join_all(starts).await;
    (began.elapsed().as_secs_f64(), sandboxes)
}

/// A sandbox of `config` holding the files, a snapshot of it, and the
/// median milliseconds of three snapshots taken (and removed) before.
async fn filled_and_snapshotted(
    provider: &dyn Provider,
    config: &SandboxConfig,
) -> (Sandbox, agentix::Snapshot, f64) {
    let sb = provider
        .session(config.clone())
        .await
        .expect("sandbox starts");
    sb.remote(fill_dir, (FILES, FILE_BYTES))
        .await
        .expect("the files are written");
    let mut taken = Vec::new();
    for _ in 0..3 {
        let began = Instant::now();
        let snapshot = sb.snapshot(SnapshotSpec::new()).await.expect("a snapshot");
        taken.push(began.elapsed().as_secs_f64() * 1e3);
        drop(snapshot);
    }
    let snapshot = sb.snapshot(SnapshotSpec::new()).await.expect("a snapshot");
    (sb, snapshot, median(taken))
}

pub(crate) async fn snapshot(report: &mut Report) {
    let provider = LocalProvider::new();
    let config = crate::isolated_config();
    let (sb, snapshot, taken_ms) = filled_and_snapshotted(&provider, &config).await;
    report.add(
        "snapshot_local_ms",
        "snapshot of an isolated local sandbox holding 100 MB in 1,000 files, median of 3",
        "ms",
        taken_ms,
    );

    let (mut forks, mut fresh) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let (secs, children) = start_many(&provider, &config, Some(&snapshot), 16).await;
        forks.push(secs);
        futures_util::future::join_all(children.into_iter().map(Sandbox::delete)).await;
        let (secs, children) = start_many(&provider, &config, None, 16).await;
        fresh.push(secs);
        futures_util::future::join_all(children.into_iter().map(Sandbox::delete)).await;
    }
    report.add(
        "fork_16_local_ready_s",
        "16 isolated local sandboxes started at once from that snapshot, all ready, median of 3",
        "s",
        median(forks),
    );
    report.add(
        "fresh_16_local_ready_s",
        "16 fresh isolated local sandboxes started at once (no state), same run, median of 3",
        "s",
        median(fresh),
    );
    sb.delete().await;
    docker_snapshots(report).await;
}

async fn docker_snapshots(report: &mut Report) {
    use agentix_provider_docker::DockerProvider;
    let provider = match DockerProvider::connect() {
        Ok(p) if p.docker().ping().await.is_ok() => p,
        _ => {
            eprintln!("snapshot: no Docker engine answers; its half is skipped");
            return;
        }
    };
    let rootfs = agentix_provider_docker::EMPTY_ROOTFS.to_vec();
    provider
        .import_image(crate::docker::IMAGE, rootfs)
        .await
        .expect("the empty image imports");
    let bundle = crate::docker::assemble_self();
    let config = SandboxConfig::new(&bundle).image(crate::docker::IMAGE);
    let (sb, snapshot, taken_ms) = filled_and_snapshotted(&provider, &config).await;
    report.add(
        "snapshot_docker_ms",
        "snapshot of a container holding 100 MB in 1,000 files, median of 3",
        "ms",
        taken_ms,
    );
    let (mut forks, mut floors, mut empty) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..3 {
        let (secs, children) = start_many(&provider, &config, Some(&snapshot), 16).await;
        forks.push(secs);
        futures_util::future::join_all(children.into_iter().map(Sandbox::delete)).await;
        let (secs, children) = start_many(&provider, &config, None, 16).await;
        empty.push(secs);
        futures_util::future::join_all(children.into_iter().map(Sandbox::delete)).await;
        let began = Instant::now();
        let runs = (0..16).map(|_| crate::docker::run_true(provider.docker(), &bundle));
        futures_util::future::join_all(runs).await;
        floors.push(began.elapsed().as_secs_f64());
    }
    report.add(
        "fork_16_docker_ready_s",
        "16 containers started at once from that snapshot, all ready, median of 3",
        "s",
        median(forks),
    );
    report.add(
        "fresh_16_docker_ready_s",
        "16 fresh containers of that config started at once (no state), same run, median of 3",
        "s",
        median(empty),
    );
    report.add(
        "fork_16_docker_floor_s",
        "the engine alone: 16 containers of that image running `true`, created and started at once, median of 3",
        "s",
        median(floors),
    );
    let began = Instant::now();
    let fresh = (0..16).map(|_| async {
        let child = provider
            .session(config.clone())
            .await
            .expect("container starts");
        child
            .remote(slow_setup, 10.0f64)
            .await
            .expect("the setup runs");
        child
    });
    let children = futures_util::future::join_all(fresh).await;
    report.add(
        "fresh_16_docker_with_setup_s",
        "16 fresh containers at once, each running a 10 s setup that writes the 100 MB",
        "s",
        began.elapsed().as_secs_f64(),
    );
    futures_util::future::join_all(children.into_iter().map(Sandbox::delete)).await;
    drop(snapshot);
    sb.delete().await;
    let _ = std::fs::remove_dir_all(bundle);
}
