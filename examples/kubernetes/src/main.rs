//! The Kubernetes provider end to end: this program as a bundle image, and
//! the hello flow and a bash command in a pod.
//!
//! * `cargo run -p kubernetes-example -- --double`: no cluster needed. The
//!   API-server double of the tests serves the Kubernetes API on
//!   127.0.0.1 and runs each pod's containers on this machine's Docker
//!   engine; the bundle image and an empty base image are made in that
//!   engine, no registry needed.
//! * `cargo run -p kubernetes-example -- IMAGE BUNDLE_IMAGE`: your cluster
//!   (`KUBECONFIG`, `~/.kube/config`), the base image `IMAGE` and the
//!   bundle image `BUNDLE_IMAGE` it pulls. Make the bundle image with
//!   `agentix build -p kubernetes-example --image BUNDLE_IMAGE` and push it
//!   (kind: `kind load docker-image BUNDLE_IMAGE`).

use agentix::prelude::*;
use agentix_bash::BashOptions;
use agentix_kube_double::ApiServerDouble;
use agentix_provider_docker::DockerProvider;
use agentix_provider_kubernetes::KubernetesProvider;

const IMAGE: &str = "agentix-example-empty";

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    agentix::link_plugins!(hello_app, agentix_bash);
    agentix::bundle::dispatch();
    host()
}

#[tokio::main]
async fn host() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args: Vec<String> = std::env::args().skip(1).collect();

    // This program as a bundle, with bash (`agentix build` does the same for
    // a cargo package); the provider reads its entry from the directory.
    let bundle = std::env::temp_dir().join(format!("agentix-kube-example-{}", std::process::id()));
    let binary = std::env::current_exe()?;
    let version = env!("CARGO_PKG_VERSION");
    let spec = agentix_cli::BundleSpec::for_binary(
        binary,
        "kubernetes-example",
        version,
        &["bash"],
        &bundle,
    )?;
    agentix_cli::assemble(&spec, &mut |_| {})?;

    let mut double = None;
    let (provider, image, bundle_image) = match args.as_slice() {
        [flag] if flag == "--double" => {
            let docker = DockerProvider::connect()?;
            docker
                .import_image(IMAGE, agentix_provider_docker::EMPTY_ROOTFS.to_vec())
                .await?;
            let bundle_image =
                agentix_provider_docker::bundle_upload::bundle_image_of(docker.docker(), &bundle)
                    .await?;
            let started = ApiServerDouble::start(docker.docker().clone(), 8 << 30).await?;
            println!("API-server double at {}", started.url());
            let provider = KubernetesProvider::new(started.kube_config("default"))?
                .with_reach(agentix_provider_kubernetes::PodReach::PortForward);
            double = Some(started);
            (provider, IMAGE.to_owned(), bundle_image)
        }
        [image, bundle_image] => (
            KubernetesProvider::connect().await?,
            image.clone(),
            bundle_image.clone(),
        ),
        _ => return Err("usage: kubernetes-example --double | IMAGE BUNDLE_IMAGE".into()),
    };
    println!("bundle image {bundle_image}, base image {image}");

    let mut config = SandboxConfig::new(&bundle).image(image);
    config.container.bundle_image = Some(bundle_image);
    let sandbox = provider.session(config).await?;
    println!("sandbox {} at {}", sandbox.id(), sandbox.addr());
    let out = sandbox.remote(hello_app::run, "hello".to_string()).await?;
    println!("{} (worker pid {} in the pod)", out.output, out.worker_pid);
    let shell = sandbox
        .remote(
            agentix_bash::run,
            (
                "echo \"bash $BASH_VERSION as uid $UID in $PWD\"".to_string(),
                BashOptions::new(),
            ),
        )
        .await?;
    print!("{}", shell.stdout_lossy());

    sandbox.delete().await;
    println!("deleted: its pod, Secret and network policy are gone");
    if let Some(double) = double {
        double.stop().await;
    }
    let _ = std::fs::remove_dir_all(bundle);
    Ok(())
}
