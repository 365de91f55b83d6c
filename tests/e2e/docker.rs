//! The Docker provider end to end, in an image built here with nothing in
//! it (no shell, no libc): the bundle brings everything, bash included.

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;

use agentix::{Provider, SandboxConfig};
use agentix_bash::BashOptions;
use agentix_provider_docker::{DockerProvider, LABEL_SANDBOX};
use bollard::query_parameters::{CreateImageOptions, ListContainersOptions};
use futures_util::StreamExt;
use support::bundle_path;

const EMPTY_IMAGE: &str = "agentix-test-empty";

/// An image with an empty filesystem, made from an empty tar archive
/// (its two zero end-of-archive blocks): no registry needed.
async fn empty_image(docker: &bollard::Docker) {
    let options = CreateImageOptions {
        from_src: Some("-".into()),
        repo: Some(EMPTY_IMAGE.into()),
        tag: Some("latest".into()),
        ..Default::default()
    };
    let tar = bollard::body_full(vec![0u8; 1024].into());
    let mut progress = docker.create_image(Some(options), Some(tar), None);
    while let Some(step) = progress.next().await {
        step.expect("the empty image imports");
    }
}

/// The e2e bundle binary and bash, assembled into a bundle directory.
fn bundle_dir(name: &str) -> PathBuf {
    let out = std::env::temp_dir().join(format!("agentix-docker-{name}-{}", std::process::id()));
    let spec = agentix_cli::BundleSpec {
        binary: bundle_path().into(),
        name: "e2e-bundle".into(),
        version: "0".into(),
        target: agentix_cli::cargo_package::host_target().unwrap(),
        tools: BTreeMap::from([(
            "bash".to_owned(),
            agentix_cli::cargo_package::find_on_path("bash").unwrap(),
        )]),
        out: out.clone(),
    };
    agentix_cli::assemble(&spec, &mut |_| {}).expect("the bundle assembles");
    out
}

async fn containers_of(docker: &bollard::Docker, id: &str) -> usize {
    let options = ListContainersOptions {
        all: true,
        filters: Some([("label".to_owned(), vec![format!("{LABEL_SANDBOX}={id}")])].into()),
        ..Default::default()
    };
    docker.list_containers(Some(options)).await.unwrap().len()
}

#[tokio::test]
async fn a_sandbox_in_an_empty_image_calls_streams_runs_bash_and_is_removed() {
    let provider = DockerProvider::connect().expect("a Docker engine");
    empty_image(provider.docker()).await;
    let bundle = bundle_dir("full");
    let config = SandboxConfig::new(&bundle).image(EMPTY_IMAGE);
    let sb = provider
        .create(config)
        .await
        .expect("the container sandbox starts");
    let id = sb.id().to_owned();
    assert_eq!(containers_of(provider.docker(), &id).await, 1);
    assert!(sb.addr().starts_with("127.0.0.1:"), "{}", sb.addr());

    assert_eq!(sb.remote(agentix_e2e::add, (2, 3)).await.unwrap(), 5);
    let items: Vec<u64> = sb
        .stream(agentix_e2e::count, 5u64)
        .await
        .unwrap()
        .map(|i| i.unwrap())
        .collect()
        .await;
    assert_eq!(items, [0, 1, 2, 3, 4]);
    // bash comes from the bundle: the image has no shell.
    let out = sb
        .remote(
            agentix_bash::run,
            (
                "echo hi from $BASH; ls 2>&1; true".to_string(),
                BashOptions::new(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let text = out.stdout_lossy();
    assert!(text.starts_with("hi from /agentix/bin/bash"), "{text}");
    assert!(
        text.contains("ls: command not found"),
        "the image has no ls: {text}"
    );

    assert_eq!(provider.list().len(), 1);
    provider.delete(&id).await.unwrap();
    assert_eq!(
        containers_of(provider.docker(), &id).await,
        0,
        "the container is removed"
    );
    assert!(sb.remote(agentix_e2e::add, (1, 1)).await.is_err());
    drop(sb);
    let _ = std::fs::remove_dir_all(bundle);
}

#[tokio::test]
async fn a_missing_image_and_a_plain_binary_are_clear_errors() {
    let provider = DockerProvider::connect().expect("a Docker engine");
    let config = SandboxConfig::new(bundle_path()).image(EMPTY_IMAGE);
    let err = provider.create(config).await.unwrap_err().to_string();
    assert!(
        err.contains("agentix build"),
        "a binary is not a bundle: {err}"
    );
    let bundle = bundle_dir("errors");
    let config = SandboxConfig::new(&bundle).image("agentix-no-such-image");
    let err = provider.create(config).await.unwrap_err().to_string();
    assert!(
        err.contains("agentix-no-such-image") && err.contains("docker import"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(bundle);
}

#[tokio::test]
async fn an_abandoned_container_stops_by_itself_and_is_reaped() {
    let provider = DockerProvider::connect().expect("a Docker engine");
    empty_image(provider.docker()).await;
    let bundle = bundle_dir("abandoned");
    let mut config = SandboxConfig::new(&bundle).image(EMPTY_IMAGE);
    config.container.idle_exit = Some(std::time::Duration::from_secs(1));
    let sb = provider.create(config).await.unwrap();
    let id = sb.id().to_owned();
    // As if its host died: the handle never deletes it, no host connects.
    std::mem::forget(sb);
    let running = |docker: bollard::Docker, id: String| async move {
        let options = ListContainersOptions {
            filters: Some([("label".to_owned(), vec![format!("{LABEL_SANDBOX}={id}")])].into()),
            ..Default::default()
        };
        docker.list_containers(Some(options)).await.unwrap().len()
    };
    let started = std::time::Instant::now();
    while running(provider.docker().clone(), id.clone()).await > 0 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "the server did not stop on its idle exit"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(
        containers_of(provider.docker(), &id).await,
        1,
        "stopped, not yet removed"
    );
    assert!(provider.reap().await.unwrap() >= 1);
    assert_eq!(
        containers_of(provider.docker(), &id).await,
        0,
        "reap removed it"
    );
    let _ = std::fs::remove_dir_all(bundle);
}
