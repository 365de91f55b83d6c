//! The Docker provider end to end, with no registry: builds an empty base
//! image, makes this program a bundle (it is its own bundle, like the hello
//! example), and runs the hello flow and a bash command in a container
//! whose image holds nothing but what the bundle brings.
//!
//! `cargo run -p docker-example` (needs a running Docker engine, and
//! `patchelf` for the bundle).

use std::collections::BTreeMap;

use agentix::prelude::*;
use agentix_bash::BashOptions;
use agentix_provider_docker::DockerProvider;
use bollard::query_parameters::CreateImageOptions;

const IMAGE: &str = "agentix-example-empty";

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    agentix::link_plugins!(hello_app, agentix_bash);
    agentix::bundle::dispatch();
    host()
}

#[tokio::main]
async fn host() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let provider = DockerProvider::connect()?;

    // 1. A base image without a registry: an empty filesystem.
    let options = CreateImageOptions {
        from_src: Some("-".into()),
        repo: Some(IMAGE.into()),
        tag: Some("latest".into()),
        ..Default::default()
    };
    let empty_tar = bollard::body_full(vec![0u8; 1024].into());
    let mut import = provider
        .docker()
        .create_image(Some(options), Some(empty_tar), None);
    while let Some(step) = import.next().await {
        step?;
    }
    println!("image {IMAGE}: an empty filesystem");

    // 2. This program as a bundle, with bash (`agentix build` does the same
    //    for a cargo package).
    let bundle =
        std::env::temp_dir().join(format!("agentix-docker-example-{}", std::process::id()));
    let spec = agentix_cli::BundleSpec {
        binary: std::env::current_exe()?,
        name: "docker-example".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        target: agentix_cli::cargo_package::host_target()?,
        tools: BTreeMap::from([(
            "bash".to_owned(),
            agentix_cli::cargo_package::find_on_path("bash").ok_or("no bash on PATH")?,
        )]),
        out: bundle.clone(),
    };
    let built = agentix_cli::assemble(&spec, &mut |step| println!("  {step}"))?;
    println!(
        "bundle: {} files, {:.1} MiB",
        built.manifest.files.len(),
        built.size as f64 / (1 << 20) as f64
    );

    // 3. A sandbox in a container of that image.
    let sandbox = provider
        .session(SandboxConfig::new(&bundle).image(IMAGE))
        .await?;
    println!("sandbox {} at {}", sandbox.id(), sandbox.addr());
    let out = sandbox.remote(hello_app::run, "hello".to_string()).await?;
    println!(
        "{} (worker pid {} in the container)",
        out.output, out.worker_pid
    );
    let q = sandbox.remote(hello_app::divide, (84, 2)).await?;
    println!("84 / 2 = {q}");
    let shell = sandbox
        .remote(
            agentix_bash::run,
            (
                "echo \"bash $BASH_VERSION\"; ls / 2>&1 || echo 'no ls: the image is empty'"
                    .to_string(),
                BashOptions::new(),
            ),
        )
        .await?;
    print!("{}", shell.stdout_lossy());

    sandbox.delete().await;
    let _ = std::fs::remove_dir_all(bundle);
    println!("deleted: no container left");
    Ok(())
}
