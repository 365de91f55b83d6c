//! [`DockerProvider`]: sandboxes as containers of a Docker engine.
//!
//! A sandbox is a container of the config's image with the bundle (a
//! directory `agentix build` made) mounted read-only at `/agentix`. The
//! bundle's server runs inside and listens on a Unix socket on a small
//! tmpfs volume of its own ([`ServerReach::Socket`], for a root host of an
//! engine on this machine), or on the container's interface with its port
//! published on the host's 127.0.0.1 only ([`ServerReach::PublishedPort`]),
//! or, for an engine on another machine, on that volume reached through
//! the engine's API ([`ServerReach::EngineStream`], [`engine_forward`]).
//! Each container runs as an unprivileged uid of its own
//! ([`container_user`]), hardened (no capability, no new privileges, a
//! read-only root, limits: [`container_spec`]), under the engine's default
//! runtime or the one the config names ([`runtime_check`]). The token reaches the server on stdin, so it
//! shows in no command line and no environment (`docker inspect`
//! included); readiness is the server's own ready line, read from the
//! attached output. Every container carries the
//! labels [`LABEL_SANDBOX`] and [`LABEL_OWNER`], and so does its socket
//! volume, so [`DockerProvider::reap`] can remove what a host that died
//! left behind.
//!
//! Layout: [`container_spec`] turns a `SandboxConfig` into the engine's
//! create request as [`container_user`] runs it, with its socket on a
//! [`run_volume`]; [`bundle_volume`] fills a volume from a bundle image,
//! which [`bundle_upload`] makes of a bundle directory;
//! [`container`] is one sandbox's container as the `Sandbox` handle sees
//! it; [`platform`] refuses a bundle of another architecture and
//! [`runtime_check`] a runtime the engine lacks; [`snapshot_seed`] is how a
//! container started from a snapshot gets its state; this file is the
//! provider.
//!
//! Snapshots hold a container's working directory and `/tmp` (its server
//! archives them, `GET /state.tar`, while the sandbox is paused); a
//! container started from one has its server unpack them before its
//! first worker.

pub mod bundle_upload;
pub mod bundle_volume;
pub mod container;
pub mod container_spec;
pub mod container_user;
pub mod engine_forward;
pub mod platform;
pub mod run_volume;
pub mod runtime_check;
pub mod snapshot_seed;

use std::sync::Arc;

use agentix::{
    Liveness, MarkerDir, OwnerId, Provider, ProviderError, Sandbox, SandboxConfig, SandboxMarker,
    SandboxRegistry, Snapshot,
};
use bollard::query_parameters::{
    CreateImageOptions, ListContainersOptions, ListVolumesOptions, RemoveContainerOptions,
    RemoveImageOptions,
};
use bollard::Docker;
use futures_util::future::BoxFuture;
use futures_util::StreamExt;

use crate::container::Container;
pub use crate::runtime_check::GVISOR_RUNTIME;
use crate::snapshot_seed::Seed;

agentix::plugin_crate!();

fn from_env() -> Result<Box<dyn Provider>, ProviderError> {
    Ok(Box::new(DockerProvider::connect()?))
}

// `agentix::provider("docker")`, configured by DOCKER_HOST like the docker CLI.
agentix::register_provider!(PROVIDER_NAME, from_env);

/// Label naming the sandbox a container belongs to.
pub const LABEL_SANDBOX: &str = "agentix.sandbox";
/// Label naming the host process that owns a container (an
/// `agentix::OwnerId`: `<pid>.<start>@<boot id>@<machine id>`).
pub const LABEL_OWNER: &str = "agentix.owner";

/// Label of an image [`DockerProvider::import_image`] made: the SHA-256 of
/// its filesystem archive, so the same archive is not imported twice.
pub const LABEL_ROOTFS: &str = "agentix.rootfs";

/// An empty root filesystem as a tar archive (just its two end-of-archive
/// blocks): [`DockerProvider::import_image`] of it makes an image with
/// nothing in it, which a bundle needs no more than.
pub const EMPTY_ROOTFS: [u8; 1024] = [0; 1024];

/// How the host reaches a container's server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerReach {
    /// Through a Unix socket on the sandbox's own tmpfs volume: no port on
    /// the host at all, no port proxy on the way (measured: a small call
    /// costs about 14 µs more than a local sandbox's, against about 125 µs
    /// through a published port). Needs the engine on this machine and a
    /// root host (the engine keeps volumes in a root-only directory); the
    /// only way on network `none`.
    Socket,
    /// Through the server's port, published on 127.0.0.1 only.
    PublishedPort,
    /// Through the engine's API: each connection is an exec in the container
    /// relaying to the server's socket on its volume, carried inside the
    /// engine's own connection (see `engine_forward`). Nothing is published
    /// and no host path is used, so it works on network `none` and for an
    /// engine on another machine, whose TLS or SSH protects the bytes.
    EngineStream,
}

impl ServerReach {
    /// The engine's API for an engine elsewhere (`DOCKER_HOST` set to
    /// anything but `unix://`), the socket for a root host of an engine on
    /// this machine, the published port otherwise.
    pub fn for_engine() -> ServerReach {
        let host = std::env::var("DOCKER_HOST").ok();
        ServerReach::for_docker_host(host.as_deref(), agentix::host_is_root())
    }

    /// What [`ServerReach::for_engine`] picks for `DOCKER_HOST` set to
    /// `docker_host` (or not at all) and a host that is root or not.
    pub fn for_docker_host(docker_host: Option<&str>, root: bool) -> ServerReach {
        let remote =
            docker_host.is_some_and(|host| !host.is_empty() && !host.starts_with("unix://"));
        match (remote, root) {
            (true, _) => ServerReach::EngineStream,
            (false, true) => ServerReach::Socket,
            (false, false) => ServerReach::PublishedPort,
        }
    }
}

/// Runs sandboxes as containers of one Docker engine.
#[derive(Clone)]
pub struct DockerProvider {
    docker: Docker,
    sandboxes: SandboxRegistry,
    reach: ServerReach,
    markers: MarkerDir,
    /// Held while a bundle is loaded into the engine as an image.
    bundle_uploads: Arc<tokio::sync::Mutex<()>>,
}

/// The provider's name in markers and the provider registry.
pub const PROVIDER_NAME: &str = "docker";

impl DockerProvider {
    /// A provider for the engine `DOCKER_HOST` names, or the local one,
    /// reaching servers as [`ServerReach::for_engine`] says.
    pub fn connect() -> Result<Self, ProviderError> {
        let docker = Docker::connect_with_defaults().map_err(|e| engine_error(&e))?;
        Ok(DockerProvider::new(docker))
    }

    /// A provider on an engine client made elsewhere (another socket,
    /// other timeouts), reaching servers as [`ServerReach::for_engine`]
    /// says.
    pub fn new(docker: Docker) -> Self {
        DockerProvider {
            docker,
            sandboxes: SandboxRegistry::new(),
            reach: ServerReach::for_engine(),
            markers: MarkerDir::default(),
            bundle_uploads: Arc::default(),
        }
    }

    /// Keeps the sandboxes' markers (`agentix::sandbox_marker`, by which
    /// the `agentix` command reaches them) in `dir` instead of the default.
    pub fn marker_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.markers = MarkerDir::new(dir);
        self
    }

    /// The same provider, reaching the servers of the sandboxes it creates
    /// from now on as `reach` says.
    pub fn with_reach(mut self, reach: ServerReach) -> Self {
        self.reach = reach;
        self
    }

    /// Makes the image `name` (`repo` or `repo:tag`) from `rootfs`, a tar
    /// archive of a root filesystem, as `docker import` does: base images
    /// without a registry. The same archive again changes nothing; the
    /// image a new archive replaces is removed (unless a container uses
    /// it), so imports leave no dangling images.
    pub async fn import_image(&self, name: &str, rootfs: Vec<u8>) -> Result<(), ProviderError> {
        use sha2::Digest;
        let (repo, tag) = match name.rsplit_once(':') {
            Some((repo, tag)) if !tag.contains('/') => (repo, tag),
            _ => (name, "latest"),
        };
        let digest: String = sha2::Sha256::digest(&rootfs)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        // The same filesystem again is the image already there: importing
        // it anew would only leave the old one dangling.
        let before = self.docker.inspect_image(name).await.ok();
        let label = |image: &bollard::models::ImageInspect| {
            let labels = image.config.as_ref()?.labels.as_ref()?;
            labels.get(LABEL_ROOTFS).cloned()
        };
        if before.as_ref().and_then(label).as_deref() == Some(digest.as_str()) {
            return Ok(());
        }
        let options = CreateImageOptions {
            from_src: Some("-".into()),
            repo: Some(repo.to_owned()),
            tag: Some(tag.to_owned()),
            changes: vec![format!("LABEL {LABEL_ROOTFS}={digest}")],
            ..Default::default()
        };
        let body = bollard::body_full(rootfs.into());
        let mut progress = self.docker.create_image(Some(options), Some(body), None);
        while let Some(step) = progress.next().await {
            step.map_err(|e| ProviderError::Backend {
                what: format!("cannot import the image {name}"),
                reason: e.to_string(),
            })?;
        }
        // The image the name left, unless a container still uses it.
        if let Some(old) = before.and_then(|image| image.id) {
            let _ = self
                .docker
                .remove_image(&old, None::<RemoveImageOptions>, None)
                .await;
        }
        Ok(())
    }

    /// Host pids of the processes in sandbox `id`'s container, as the
    /// engine lists them; none when it has no running container.
    pub async fn host_pids(&self, id: &str) -> Vec<u32> {
        let name = format!("agentix-{id}");
        let top = self
            .docker
            .top_processes(&name, None::<bollard::query_parameters::TopOptions>)
            .await;
        let Ok(top) = top else { return Vec::new() };
        let pid_column = top
            .titles
            .as_ref()
            .and_then(|t| t.iter().position(|c| c == "PID"))
            .unwrap_or(1);
        top.processes
            .unwrap_or_default()
            .iter()
            .filter_map(|p| p.get(pid_column)?.parse().ok())
            .collect()
    }

    /// The engine client, for what this provider does not cover.
    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// Removes the containers Agentix hosts left behind: those whose owner
    /// process has ended (gone, a zombie, its PID recycled, an earlier boot)
    /// and those of this machine's owners whose server has stopped (by its
    /// idle exit, or a crash), with their socket volumes, all at once;
    /// returns how many containers. Another machine's containers on a
    /// shared engine are never touched.
    pub async fn reap(&self) -> Result<usize, ProviderError> {
        let owners = self.list_labelled(LABEL_OWNER).await?;
        let doomed: Vec<(String, Option<String>)> = owners
            .into_iter()
            .filter(|(_, owner, stopped, _)| match owner_liveness(owner) {
                Liveness::Dead => true,
                Liveness::Alive => *stopped,
                Liveness::Elsewhere => false,
            })
            .map(|(id, _, _, sandbox)| (id, sandbox))
            .collect();
        let removals = doomed
            .into_iter()
            .map(|(id, sandbox)| async move { self.remove_reaped(&id).await.then_some(sandbox) });
        let removed: Vec<Option<String>> = futures_util::stream::iter(removals)
            .buffer_unordered(REAP_AT_ONCE)
            .filter_map(|done| async move { done })
            .collect()
            .await;
        let count = removed.len();
        let gone = removed.into_iter().flatten().collect();
        self.reap_volumes(&gone).await?;
        self.reap_markers(&gone);
        let records = agentix::SnapshotRecords::of(&self.markers);
        // A dead owner's snapshots: directories of this machine's.
        let _ = tokio::task::spawn_blocking(move || records.reap(PROVIDER_NAME)).await;
        Ok(count)
    }

    /// Removes container `id` for a reap; true once it is gone. An engine
    /// under load refuses or times out now and then: tried again a few
    /// times, and a container that stays is said in the log.
    async fn remove_reaped(&self, id: &str) -> bool {
        let options = RemoveContainerOptions {
            force: true,
            ..Default::default()
        };
        let mut last = None;
        for attempt in 0..REAP_TRIES {
            if attempt > 0 {
                tokio::time::sleep(REAP_RETRY_PAUSE * attempt).await;
            }
            match self
                .docker
                .remove_container(id, Some(options.clone()))
                .await
            {
                Ok(()) => return true,
                // Gone already, or another remover is at it.
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404 | 409,
                    ..
                }) => return true,
                Err(e) => last = Some(e),
            }
        }
        if let Some(error) = last {
            tracing::warn!(container = id, %error, "a dead host's container could not be removed");
        }
        false
    }

    /// Removes the markers of the sandboxes in `gone` and of owners that
    /// are gone.
    fn reap_markers(&self, gone: &std::collections::HashSet<String>) {
        let Ok(markers) = self.markers.list() else {
            return;
        };
        for marker in markers.iter().filter(|m| m.provider == PROVIDER_NAME) {
            let dead = owner_liveness(&marker.owner) == Liveness::Dead;
            if dead || gone.contains(&marker.id) {
                let _ = self.markers.remove(&marker.id);
                let forward = engine_forward::forward_dir(&self.markers, &marker.id);
                let _ = std::fs::remove_dir_all(forward);
            }
        }
    }

    /// Removes the socket volumes of the sandboxes in `gone` and of owners
    /// that are gone (a live owner's volume may be its container's, about
    /// to be made).
    async fn reap_volumes(
        &self,
        gone: &std::collections::HashSet<String>,
    ) -> Result<(), ProviderError> {
        let options = ListVolumesOptions {
            filters: Some([("label".to_owned(), vec![LABEL_OWNER.to_owned()])].into()),
        };
        let volumes = self
            .docker
            .list_volumes(Some(options))
            .await
            .map_err(|e| engine_error(&e))?;
        for volume in volumes.volumes.unwrap_or_default() {
            let label = |key: &str| volume.labels.get(key).cloned().unwrap_or_default();
            let dead = owner_liveness(&label(LABEL_OWNER)) == Liveness::Dead;
            if gone.contains(&label(LABEL_SANDBOX)) || dead {
                run_volume::remove_volume(&self.docker, &volume.name).await;
            }
        }
        Ok(())
    }

    /// Containers carrying `label`, with the label's value, whether they
    /// ran and stopped, and their sandbox.
    async fn list_labelled(
        &self,
        label: &str,
    ) -> Result<Vec<(String, String, bool, Option<String>)>, ProviderError> {
        let options = ListContainersOptions {
            all: true,
            filters: Some([("label".to_owned(), vec![label.to_owned()])].into()),
            ..Default::default()
        };
        let list = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(|e| engine_error(&e))?;
        Ok(list
            .into_iter()
            .filter_map(|c| {
                // Only a container that ran and ended counts as stopped: one
                // just created is another host's sandbox on its way up.
                use bollard::models::ContainerSummaryStateEnum as State;
                let stopped = c
                    .state
                    .as_ref()
                    .is_some_and(|s| matches!(s, State::EXITED | State::DEAD));
                let labels = c.labels?;
                let value = labels.get(label)?.clone();
                Some((c.id?, value, stopped, labels.get(LABEL_SANDBOX).cloned()))
            })
            .collect())
    }
}

impl Provider for DockerProvider {
    fn create(&self, config: SandboxConfig) -> BoxFuture<'_, Result<Sandbox, ProviderError>> {
        Box::pin(self.start(config, None))
    }

    /// A container whose working directory and `/tmp` start as the
    /// snapshot's: its server unpacks them before its first worker.
    fn create_from<'a>(
        &'a self,
        snapshot: &'a Snapshot,
        config: SandboxConfig,
    ) -> BoxFuture<'a, Result<Sandbox, ProviderError>> {
        Box::pin(async move {
            let dir = snapshot.dir_kept_by(PROVIDER_NAME)?;
            // Mounted only where the engine sees this machine's files.
            // Mounted only where the engine sees this machine's paths.
            let seed = Seed::from_dir(dir, self.reach == ServerReach::Socket)?;
            self.start(config, Some(&seed)).await
        })
    }

    fn sandboxes(&self) -> &SandboxRegistry {
        &self.sandboxes
    }

    /// The base image's ID (not its tag) and the bundle's: its image's ID,
    /// or the digest of its directory's manifest.
    fn environment_id<'a>(
        &'a self,
        config: &'a SandboxConfig,
    ) -> BoxFuture<'a, Result<String, ProviderError>> {
        Box::pin(async move {
            let image_id = |image: String| async move {
                let inspected = self
                    .docker
                    .inspect_image(&image)
                    .await
                    .map_err(|e| engine_error(&e))?;
                Ok::<_, ProviderError>(inspected.id.unwrap_or(image))
            };
            let image = config
                .container
                .image
                .clone()
                .ok_or_else(|| ProviderError::BadBundle {
                    path: config.bundle.display().to_string(),
                    reason: "a container needs an image (SandboxConfig::image)".into(),
                })?;
            let base = image_id(image).await?;
            let bundle = match &config.container.bundle_image {
                Some(image) => image_id(image.clone()).await?,
                None => agentix::bundle_digest::bundle_digest(&config.bundle).map_err(|e| {
                    ProviderError::BadBundle {
                        path: config.bundle.display().to_string(),
                        reason: format!("cannot read its manifest: {e}"),
                    }
                })?,
            };
            Ok(format!("{base}+{bundle}"))
        })
    }

    fn find_snapshot(&self, name_or_id: &str) -> Option<Snapshot> {
        let records = agentix::SnapshotRecords::of(&self.markers);
        Snapshot::find(&records, name_or_id, PROVIDER_NAME)
    }

    fn reap(&self) -> BoxFuture<'_, Result<usize, ProviderError>> {
        Box::pin(DockerProvider::reap(self))
    }
}

impl DockerProvider {
    /// The engine's image of the bundle directory `dir`, loaded once per
    /// bundle: concurrent starts of one bundle load it once.
    async fn bundle_image_of(&self, dir: &std::path::Path) -> Result<String, ProviderError> {
        let _one_at_a_time = self.bundle_uploads.lock().await;
        bundle_upload::bundle_image_of(&self.docker, dir).await
    }

    /// Starts a sandbox for `config`, its state from the archive `seed` if
    /// given.
    async fn start(
        &self,
        config: SandboxConfig,
        seed: Option<&Seed>,
    ) -> Result<Sandbox, ProviderError> {
        {
            let mut config = config;
            if self.reach == ServerReach::EngineStream && config.container.bundle_image.is_none() {
                // The engine may not see this machine's files: the bundle
                // goes to it as an image, once per bundle.
                let image = self.bundle_image_of(&config.bundle).await?;
                config.container.bundle_image = Some(image);
            }
            let id = format!("docker-{}", agentix::random_hex(8));
            let token = agentix::random_hex(32);
            let (container, addr) = Container::start(
                &self.docker,
                &id,
                &token,
                &config,
                self.reach,
                seed,
                &self.markers,
            )
            .await?;
            let marker = SandboxMarker {
                id: id.clone(),
                provider: PROVIDER_NAME.to_owned(),
                owner: owner_label(),
                dir: Default::default(),
                addr: addr.clone(),
                local_addr: None,
                token: token.clone(),
                pid: 0,
                pid_start: 0,
                cgroup: Vec::new(),
                created_ms: agentix::sandbox_marker::now_ms(),
            };
            let container = match self.markers.write(&marker) {
                Ok(()) => container.marked(self.markers.clone(), id.clone()),
                Err(error) => {
                    tracing::warn!(sandbox = %id, %error, "cannot write the sandbox's marker");
                    container
                }
            };
            let lifetime = config.container.lifetime;
            let container = Arc::new(container);
            if let Some(lifetime) = lifetime {
                container.delete_after(lifetime);
            }
            let sandbox = Sandbox::from_parts(id, addr, token, config, container);
            self.sandboxes.add(&sandbox);
            Ok(sandbox)
        }
    }
}

/// Removals a reap has in flight at once.
const REAP_AT_ONCE: usize = 16;

/// How often a reap tries to remove one container, and the pause that
/// grows between tries.
const REAP_TRIES: u32 = 4;
const REAP_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(250);

/// This host process, as the owner label names it.
pub(crate) fn owner_label() -> String {
    OwnerId::current().to_string()
}

/// What the owner label `owner` names now. A label this provider cannot
/// read is another version's or another tool's: left alone.
fn owner_liveness(owner: &str) -> Liveness {
    OwnerId::parse(owner).map_or(Liveness::Elsewhere, |owner| owner.liveness())
}

/// What a failed engine request means: the engine refused it (and says
/// why), or it could not be reached.
pub(crate) fn engine_error(e: &bollard::errors::Error) -> ProviderError {
    match e {
        bollard::errors::Error::DockerResponseServerError {
            status_code,
            message,
        } => ProviderError::Backend {
            what: format!("the Docker engine refused the request (HTTP {status_code})"),
            reason: message.clone(),
        },
        _ => ProviderError::Backend {
            what: "the Docker engine cannot be reached (is it running? DOCKER_HOST?)".into(),
            reason: e.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_engine_elsewhere_is_reached_through_its_api() {
        let pick = ServerReach::for_docker_host;
        assert_eq!(
            pick(Some("tcp://10.0.0.2:2376"), true),
            ServerReach::EngineStream
        );
        assert_eq!(
            pick(Some("ssh://builder"), false),
            ServerReach::EngineStream
        );
        assert_eq!(
            pick(Some("unix:///var/run/docker.sock"), true),
            ServerReach::Socket
        );
        assert_eq!(pick(None, true), ServerReach::Socket);
        assert_eq!(pick(Some(""), false), ServerReach::PublishedPort);
    }
}
