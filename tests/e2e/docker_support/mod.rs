//! Images and bundles the Docker tests make without a registry, from this
//! machine's programs.

use std::path::PathBuf;

use agentix_provider_docker::{DockerProvider, LABEL_SANDBOX};
use bollard::query_parameters::ListContainersOptions;

use crate::support::bundle_path;

pub(crate) const EMPTY_IMAGE: &str = "agentix-test-empty";

/// An image with an empty filesystem: no registry needed.
pub(crate) async fn empty_image(provider: &DockerProvider) {
    let rootfs = agentix_provider_docker::EMPTY_ROOTFS.to_vec();
    provider
        .import_image(EMPTY_IMAGE, rootfs)
        .await
        .expect("the empty image imports");
}

/// The e2e bundle binary and bash, assembled into a bundle directory.
pub(crate) fn bundle_dir(name: &str) -> PathBuf {
    let out = std::env::temp_dir().join(format!("agentix-docker-{name}-{}", std::process::id()));
    let spec =
        agentix_cli::BundleSpec::for_binary(bundle_path(), "e2e-bundle", "0", &["bash"], &out)
            .expect("bash is on PATH");
    agentix_cli::assemble(&spec, &mut |_| {}).expect("the bundle assembles");
    out
}

pub(crate) const TOOLS_IMAGE: &str = "agentix-test-tools";

/// The image's own tools: a base image with tools of its own beside the
/// bundle's, built without a registry from this machine's programs.
pub(crate) const IMAGE_TOOLS: [&str; 6] = ["ls", "cat", "dd", "chmod", "mkdir", "ln"];

/// An image of this machine's `ls`, `cat`, `dd`, `chmod`, `mkdir` and `ln` with the
/// libraries and loader `ldd` names for them, each at its own path.
pub(crate) async fn tools_image(provider: &DockerProvider) {
    let mut files = std::collections::BTreeMap::new();
    for tool in IMAGE_TOOLS {
        let program = std::fs::canonicalize(format!("/bin/{tool}")).expect("a coreutils program");
        files.insert(format!("bin/{tool}"), program.clone());
        let ldd = std::process::Command::new("ldd")
            .arg(&program)
            .output()
            .expect("ldd (libc's)");
        for line in String::from_utf8_lossy(&ldd.stdout).lines() {
            // `name => /path (addr)` or `/path (addr)`.
            let path = line.split("=>").last().unwrap().trim();
            let path = path.split(" (").next().unwrap().trim();
            if path.starts_with('/') {
                let real = std::fs::canonicalize(path).unwrap();
                files.insert(path.trim_start_matches('/').to_owned(), real);
            }
        }
    }
    let mut rootfs = tar::Builder::new(Vec::new());
    for (at, from) in files {
        let bytes = std::fs::read(&from).unwrap();
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o755);
        header.set_cksum();
        rootfs.append_data(&mut header, at, &bytes[..]).unwrap();
    }
    let rootfs = rootfs.into_inner().unwrap();
    provider
        .import_image(TOOLS_IMAGE, rootfs)
        .await
        .expect("the tools image imports");
}

/// How many containers, stopped ones too, are labelled as sandbox `id`'s.
pub(crate) async fn containers_of(docker: &bollard::Docker, id: &str) -> usize {
    list_of(docker, id, true).await
}

/// How many running containers are labelled as sandbox `id`'s.
pub(crate) async fn running_containers_of(docker: &bollard::Docker, id: &str) -> usize {
    list_of(docker, id, false).await
}

async fn list_of(docker: &bollard::Docker, id: &str, all: bool) -> usize {
    containers_labelled(docker, id, all).await.len()
}

/// The containers labelled as sandbox `id`'s (stopped ones too with `all`).
pub(crate) async fn containers_labelled(
    docker: &bollard::Docker,
    id: &str,
    all: bool,
) -> Vec<bollard::models::ContainerSummary> {
    let options = ListContainersOptions {
        all,
        filters: Some([("label".to_owned(), vec![format!("{LABEL_SANDBOX}={id}")])].into()),
        ..Default::default()
    };
    docker.list_containers(Some(options)).await.unwrap()
}

/// A byte stream either way: TCP, or TLS over it.
pub(crate) trait Duplex:
    tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send
{
}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Duplex for T {}

/// Serves this machine's engine API on `listener`, as an engine reached
/// over the network: each connection is passed on to the engine's socket,
/// and `sent` hears every chunk a client sends. With `tls`, a connection
/// speaks TLS first (one the acceptor refuses is dropped).
pub(crate) async fn relay_engine_api(
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    sent: impl Fn(&[u8]) + Clone + Send + 'static,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    while let Ok((client, _)) = listener.accept().await {
        let (tls, sent) = (tls.clone(), sent.clone());
        tokio::spawn(async move {
            let client: Box<dyn Duplex> = match tls {
                Some(tls) => match tls.accept(client).await {
                    Ok(tls) => Box::new(tls),
                    Err(_) => return,
                },
                None => Box::new(client),
            };
            let engine = tokio::net::UnixStream::connect("/var/run/docker.sock")
                .await
                .unwrap();
            let (mut from_client, mut to_client) = tokio::io::split(client);
            let (mut from_engine, mut to_engine) = engine.into_split();
            let up = async move {
                let mut buf = vec![0; 64 << 10];
                while let Ok(n) = from_client.read(&mut buf).await {
                    if n == 0 || to_engine.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                    sent(&buf[..n]);
                }
                let _ = to_engine.shutdown().await;
            };
            let down = tokio::io::copy(&mut from_engine, &mut to_client);
            let _ = tokio::join!(up, down);
        });
    }
}

/// A client of the engine at `tcp://addr`, without TLS.
pub(crate) fn tcp_client(addr: &str, timeout_s: u64) -> bollard::Docker {
    bollard::Docker::connect_with_http(
        &format!("tcp://{addr}"),
        timeout_s,
        bollard::API_DEFAULT_VERSION,
    )
    .expect("a client for tcp://")
}

/// Whether this machine's engine has no container `name`.
pub(crate) async fn container_gone(docker: &bollard::Docker, name: &str) -> bool {
    docker
        .inspect_container(
            name,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .is_err()
}
