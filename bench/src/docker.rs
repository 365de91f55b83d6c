//! The `docker` section: what a container sandbox costs next to the
//! engine's own floor and next to a local sandbox, measured in one run.
//! Skipped, saying so, when no engine answers.

use std::time::{Duration, Instant};

use agentix::{Provider, Sandbox, SandboxConfig};
use agentix_provider_docker::{DockerProvider, ServerReach, GVISOR_RUNTIME};
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    RemoveContainerOptions, StartContainerOptions, WaitContainerOptions,
};
use futures_util::StreamExt;

use crate::report::Report;
use crate::{bench_fns, median, ms, rss_kib, us};

pub(crate) const IMAGE: &str = "agentix-bench-empty";

pub(crate) async fn docker(local: &Sandbox, report: &mut Report) {
    let provider = match DockerProvider::connect() {
        Ok(p) if p.docker().ping().await.is_ok() => p,
        _ => {
            eprintln!("docker: no engine answers; section skipped");
            return;
        }
    };
    let rootfs = agentix_provider_docker::EMPTY_ROOTFS.to_vec();
    provider
        .import_image(IMAGE, rootfs)
        .await
        .expect("the empty image imports");
    let bundle = assemble_self();
    let config = || SandboxConfig::new(&bundle).image(IMAGE);

    let mut boots = boot_times(&provider, config).await;
    let mut floor = Vec::new();
    for _ in 0..10 {
        floor.push(run_true(provider.docker(), &bundle).await);
    }
    report.add(
        "docker_boot_ms",
        "container sandbox: create to first call answered, median of 10",
        "ms",
        ms(median(&mut boots)),
    );
    report.add(
        "docker_run_floor_ms",
        "the engine alone: create + start + exit of a container running `true`, median of 10",
        "ms",
        ms(median(&mut floor)),
    );

    let sb = provider.session(config()).await.expect("container sandbox");
    let (docker_p50, local_p50) = (echo_p50(&sb).await, echo_p50(local).await);
    report.add(
        "docker_echo_p50_us",
        "sequential small echo through the mounted Unix socket, p50",
        "µs",
        us(docker_p50),
    );
    report.add(
        "docker_local_echo_p50_us",
        "the same on a local sandbox, this run",
        "µs",
        us(local_p50),
    );
    let ported = provider
        .clone()
        .with_reach(ServerReach::PublishedPort)
        .session(config())
        .await
        .expect("container sandbox");
    report.add(
        "docker_port_echo_p50_us",
        "the same through a port published on 127.0.0.1 (the engine's proxy), p50",
        "µs",
        us(echo_p50(&ported).await),
    );
    ported.delete().await;
    let through_engine = provider.clone().with_reach(ServerReach::EngineStream);
    // The first one loads the bundle into the engine as an image: not timed.
    through_engine
        .create(config())
        .await
        .expect("container sandbox")
        .delete()
        .await;
    let began = Instant::now();
    let streamed = through_engine
        .session(config())
        .await
        .expect("container sandbox");
    streamed
        .remote(bench_fns::add_one, 1u64)
        .await
        .expect("first call");
    let streamed_boot = began.elapsed();
    report.add(
        "docker_engine_stream_echo_p50_us",
        "the same through the engine's API (an exec relaying to the server's socket), p50",
        "µs",
        us(echo_p50(&streamed).await),
    );
    report.add(
        "docker_engine_stream_boot_ms",
        "create to first call answered through the engine's API (its bundle image made already)",
        "ms",
        ms(streamed_boot),
    );
    streamed.delete().await;
    let pids = provider.host_pids(sb.id()).await;
    report.add(
        "docker_rss_kib",
        "server + worker RSS inside the container",
        "KiB",
        pids.iter().map(|&p| rss_kib(p)).sum(),
    );
    sb.delete().await;

    runsc(&provider, config, report).await;

    let start = Instant::now();
    let fleet = futures_util::future::join_all((0..50).map(|i| {
        let provider = &provider;
        let config = config();
        async move {
            let sb = provider.create(config).await.expect("fleet sandbox");
            let n = sb
                .remote(bench_fns::add_one, i as u64)
                .await
                .expect("fleet call");
            sb.delete().await;
            n
        }
    }))
    .await;
    assert_eq!(fleet.len(), 50);
    report.add(
        "docker_fleet_50_s",
        "50 container sandboxes created at once, one call each, all deleted",
        "s",
        start.elapsed().as_secs_f64(),
    );
    report.add(
        "docker_fleet_left",
        "containers left after the fleet (must be 0)",
        "containers",
        provider.list().len() as f64,
    );
    let _ = std::fs::remove_dir_all(bundle);
}

/// Create to first call answered, ten times in a row.
async fn boot_times(
    provider: &DockerProvider,
    config: impl Fn() -> SandboxConfig,
) -> Vec<Duration> {
    let mut boots = Vec::new();
    for _ in 0..10 {
        let start = Instant::now();
        let sb = provider.session(config()).await.expect("container sandbox");
        sb.remote(bench_fns::echo, "boot".to_string())
            .await
            .expect("first call");
        boots.push(start.elapsed());
        sb.delete().await;
    }
    boots
}

/// The same boot and echo under gVisor, when `scripts/setup-gvisor` has
/// registered it with the engine; said and skipped otherwise.
async fn runsc(provider: &DockerProvider, config: impl Fn() -> SandboxConfig, report: &mut Report) {
    let registered = match provider.docker().info().await {
        Ok(info) => info
            .runtimes
            .unwrap_or_default()
            .contains_key(GVISOR_RUNTIME),
        Err(_) => false,
    };
    if !registered {
        eprintln!(
            "docker: no `{GVISOR_RUNTIME}` runtime (scripts/setup-gvisor); runsc keys skipped"
        );
        return;
    }
    let config = || config().runtime(GVISOR_RUNTIME);
    let mut boots = boot_times(provider, config).await;
    report.add(
        "docker_runsc_boot_ms",
        "the same container sandbox under gVisor (runsc): create to first call answered, median of 10",
        "ms",
        ms(median(&mut boots)),
    );
    let sb = provider.session(config()).await.expect("gVisor sandbox");
    report.add(
        "docker_runsc_echo_p50_us",
        "sequential small echo to a gVisor sandbox through its Unix socket, p50",
        "µs",
        us(echo_p50(&sb).await),
    );
    sb.delete().await;
}

async fn echo_p50(sb: &Sandbox) -> Duration {
    for _ in 0..100 {
        sb.remote(bench_fns::echo, "warm".to_string())
            .await
            .expect("echo");
    }
    let mut times = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let t = Instant::now();
        sb.remote(bench_fns::echo, "hello".to_string())
            .await
            .expect("echo");
        times.push(t.elapsed());
    }
    median(&mut times)
}

/// This very program as a bundle, with bash (it is its own bundle).
pub(crate) fn assemble_self() -> std::path::PathBuf {
    let out = std::env::temp_dir().join(format!("agentix-bench-bundle-{}", std::process::id()));
    let binary = std::env::current_exe().expect("own path");
    let version = env!("CARGO_PKG_VERSION");
    let spec =
        agentix_cli::BundleSpec::for_binary(binary, "agentix-bench", version, &["bash"], &out)
            .expect("bash on PATH");
    agentix_cli::assemble(&spec, &mut |_| {}).expect("the bench bundle assembles");
    out
}

/// The engine's own cost: create, start and wait for a container that
/// runs `bash -c true` from the same bundle in the same image.
pub(crate) async fn run_true(docker: &bollard::Docker, bundle: &std::path::Path) -> Duration {
    let start = Instant::now();
    let body = ContainerCreateBody {
        image: Some(IMAGE.into()),
        cmd: Some(vec!["/agentix/bin/bash".into(), "-c".into(), "true".into()]),
        host_config: Some(HostConfig {
            binds: Some(vec![format!("{}:/agentix:ro", bundle.display())]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let id = docker
        .create_container(
            None::<bollard::query_parameters::CreateContainerOptions>,
            body,
        )
        .await
        .expect("create")
        .id;
    docker
        .start_container(&id, None::<StartContainerOptions>)
        .await
        .expect("start");
    let mut wait = docker.wait_container(&id, None::<WaitContainerOptions>);
    while wait.next().await.is_some() {}
    let took = start.elapsed();
    let options = RemoveContainerOptions {
        force: true,
        ..Default::default()
    };
    let _ = docker.remove_container(&id, Some(options)).await;
    took
}
