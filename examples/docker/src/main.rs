//! The Docker provider end to end, with no registry: builds an empty base
//! image, makes this program a bundle (it is its own bundle, like the hello
//! example), and runs the hello flow and a bash command in a container
//! whose image holds nothing but what the bundle brings.
//!
//! `cargo run -p docker-example` (needs a running Docker engine).

use agentix::prelude::*;
use agentix_bash::BashOptions;
use agentix_provider_docker::DockerProvider;

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
    let rootfs = agentix_provider_docker::EMPTY_ROOTFS.to_vec();
    provider.import_image(IMAGE, rootfs).await?;
    println!("image {IMAGE}: an empty filesystem");

    // 2. This program as a bundle, with bash (`agentix build` does the same
    //    for a cargo package).
    let bundle =
        std::env::temp_dir().join(format!("agentix-docker-example-{}", std::process::id()));
    let binary = std::env::current_exe()?;
    let version = env!("CARGO_PKG_VERSION");
    let spec =
        agentix_cli::BundleSpec::for_binary(binary, "docker-example", version, &["bash"], &bundle)?;
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
