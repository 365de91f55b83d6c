//! The `kube` section (only with `--only kube`): the Kubernetes provider
//! against the API-server double of the tests (real HTTP, watches and the
//! port-forward websocket; each pod's containers run by this machine's
//! Docker engine), beside the double's own cost of a pod.

use std::time::{Duration, Instant};

use agentix::{Provider, SandboxConfig};
use agentix_kube_double::ApiServerDouble;
use agentix_provider_docker::DockerProvider;
use agentix_provider_kubernetes::pod_spec::{sandbox_objects, PodRequest};
use agentix_provider_kubernetes::{KubernetesProvider, PodReach};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{DeleteParams, PostParams, WatchEvent, WatchParams};
use kube::Api;

use crate::docker::{assemble_self, IMAGE};
use crate::report::Report;
use crate::{median, ms, us};

/// Sandboxes started at once in `kube_fleet_50_s`.
const FLEET: usize = 50;

pub(crate) async fn kube(report: &mut Report) {
    let docker_provider = match DockerProvider::connect() {
        Ok(p) if p.docker().ping().await.is_ok() => p,
        _ => {
            eprintln!("kube: no Docker engine answers for the double's node; section skipped");
            return;
        }
    };
    let docker = docker_provider.docker().clone();
    docker_provider
        .import_image(IMAGE, agentix_provider_docker::EMPTY_ROOTFS.to_vec())
        .await
        .expect("the empty image imports");
    let bundle = assemble_self();
    let bundle_image = agentix_provider_docker::bundle_upload::bundle_image_of(&docker, &bundle)
        .await
        .expect("the bundle loads as an image");
    let double = ApiServerDouble::start(docker, 1 << 40)
        .await
        .expect("the double serves");
    let markers = std::env::temp_dir().join(format!("agentix-bench-kube-{}", std::process::id()));
    let provider = KubernetesProvider::new(double.kube_config("bench"))
        .expect("a client")
        .with_reach(PodReach::PortForward)
        .marker_dir(&markers);
    let mut config = SandboxConfig::new(&bundle).image(IMAGE);
    config.container.bundle_image = Some(bundle_image);
    config.ready_timeout = Duration::from_secs(120);

    let mut boots = Vec::new();
    let mut floor = Vec::new();
    for _ in 0..10 {
        let start = Instant::now();
        let sb = provider
            .session(config.clone())
            .await
            .expect("a pod sandbox");
        sb.remote(crate::bench_fns::echo, ("boot".into(),))
            .await
            .expect("first call");
        boots.push(start.elapsed());
        sb.delete().await;
        floor.push(pod_running_true(&provider, &config).await);
    }
    report.add(
        "kube_boot_ms",
        "pod sandbox through the API-server double: create to first call answered, median of 10",
        "ms",
        ms(median(&mut boots)),
    );
    report.add(
        "kube_pod_floor_ms",
        "the double alone: the same pod (bundle installed by its init container) running \
         `bash -c true`, create to Succeeded, median of 10",
        "ms",
        ms(median(&mut floor)),
    );

    let sb = provider
        .session(config.clone())
        .await
        .expect("a pod sandbox");
    let mut echoes = Vec::new();
    for i in 0..500 {
        let start = Instant::now();
        sb.remote(crate::bench_fns::echo, (format!("k{i}"),))
            .await
            .expect("echo");
        echoes.push(start.elapsed());
    }
    sb.delete().await;
    report.add(
        "kube_echo_p50_us",
        "sequential small echo through the port-forward websocket, p50 of 500",
        "µs",
        us(median(&mut echoes)),
    );

    let start = Instant::now();
    let started = futures_util::future::join_all((0..FLEET).map(|_| {
        let (provider, config) = (&provider, config.clone());
        async move {
            let sb = provider.session(config).await?;
            sb.remote(crate::bench_fns::add_one, 1).await.map_err(|e| {
                agentix::ProviderError::Backend {
                    what: "first call".into(),
                    reason: e.to_string(),
                }
            })?;
            Ok::<_, agentix::ProviderError>(sb)
        }
    }))
    .await;
    let took = start.elapsed();
    let failures = started.iter().filter(|s| s.is_err()).count();
    futures_util::future::join_all(started.into_iter().flatten().map(|sb| sb.delete())).await;
    report.add(
        "kube_fleet_50_s",
        "50 pod sandboxes started at once through the double, each answering a call: wall time",
        "s",
        took.as_secs_f64(),
    );
    report.add(
        "kube_fleet_50_failures",
        "of those, sandboxes that failed to start",
        "",
        failures as f64,
    );
    double.stop().await;
    let _ = std::fs::remove_dir_all(markers);
    let _ = std::fs::remove_dir_all(bundle);
}

/// The double's own cost of the pod a sandbox is, its container running
/// `bash -c true`: create (Secret, pod) to phase `Succeeded`.
async fn pod_running_true(provider: &KubernetesProvider, config: &SandboxConfig) -> Duration {
    let id = format!("floor-{}", agentix::random_hex(6));
    let request = PodRequest {
        id: &id,
        token: "unused",
        entry: "bin/agentix-bench",
        owner: "bench",
        reach: PodReach::PortForward,
        template: None,
        owned_by: None,
    };
    let mut objects = sandbox_objects(config, &request).expect("the objects");
    if let Some(spec) = objects.pod.spec.as_mut() {
        spec.containers[0].command = Some(vec!["/agentix/bin/bash".into()]);
        spec.containers[0].args = Some(vec!["-c".into(), "true".into()]);
    }
    let client = provider.client().clone();
    let namespace = provider.namespace_name();
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let secrets: Api<Secret> = Api::namespaced(client, namespace);
    let name = objects.pod.metadata.name.clone().unwrap_or_default();
    let start = Instant::now();
    secrets
        .create(&PostParams::default(), &objects.secret)
        .await
        .expect("the Secret");
    pods.create(&PostParams::default(), &objects.pod)
        .await
        .expect("the pod");
    let params = WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut events = pods.watch(&params, "0").await.expect("a watch").boxed();
    while let Some(Ok(event)) = events.next().await {
        if let WatchEvent::Added(pod) | WatchEvent::Modified(pod) = event {
            let phase = pod.status.and_then(|s| s.phase);
            if matches!(phase.as_deref(), Some("Succeeded") | Some("Failed")) {
                break;
            }
        }
    }
    let took = start.elapsed();
    let now = DeleteParams::default();
    let _ = pods.delete(&name, &now).await;
    let _ = secrets.delete(&name, &now).await;
    took
}
