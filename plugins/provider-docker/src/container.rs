//! [`Container`]: one sandbox's container, started and waited for, and
//! deleted through the `Sandbox` handle ([`agentix::SandboxResources`]).

use std::time::Duration;

use agentix::{
    ContainerNetwork, EndReport, ErrorKind, MarkerDir, ProviderError, RemoteError, SandboxConfig,
    SandboxResources, SandboxState, Snapshot, SnapshotSpec, SnapshotStore,
};
use bollard::container::LogOutput;
use bollard::query_parameters::{
    AttachContainerOptions, CreateContainerOptions, RemoveContainerOptions, WaitContainerOptions,
};
use bollard::Docker;
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

use crate::bundle_volume::bundle_volume;
use crate::container_spec::{
    bundle_entry, create_body, BundleSource, SERVER_PORT, SOCKET_MOUNT, SOCKET_NAME,
};
use crate::container_user::ContainerUser;
use crate::engine_error;
use crate::engine_forward::EngineForward;
use crate::platform::{check_platform, missing_image};
use crate::run_volume::{remove_volume, RunVolume};
use crate::runtime_check::check_runtime;
use crate::snapshot_seed::{Seed, SnapshotFiles};
use crate::ServerReach;

/// A sandbox's running container.
pub struct Container {
    docker: Docker,
    name: String,
    /// How the container ended, once it has.
    end: EndReport,
    /// The volume holding the server's socket, removed with the container
    /// (none when the port is published).
    run_volume: Option<String>,
    /// Its marker (see `agentix::sandbox_marker`), removed with it.
    marker: Option<(MarkerDir, String)>,
    /// The host's socket into it through the engine, for
    /// [`ServerReach::EngineStream`]; closed with it.
    forward: Option<EngineForward>,
}

impl Container {
    /// Creates and starts sandbox `id`'s container, hands its server the
    /// token, and waits for the ready line; returns it and the published
    /// `host:port`.
    #[allow(clippy::too_many_arguments)]
    pub async fn start(
        docker: &Docker,
        id: &str,
        token: &str,
        config: &SandboxConfig,
        reach: ServerReach,
        seed: Option<&Seed>,
        markers: &MarkerDir,
    ) -> Result<(Container, String), ProviderError> {
        let (entry, source) = match &config.container.bundle_image {
            Some(image) => bundle_volume(docker, image).await?,
            None => (
                bundle_entry(&config.bundle)?,
                BundleSource::Dir(config.bundle.clone()),
            ),
        };
        check_platform(docker, &entry.target, config).await?;
        check_runtime(docker, config).await?;
        let user = ContainerUser::for_sandbox(config, id);
        let run_volume = match (reach, &config.container.network) {
            (ServerReach::Socket, _) if !agentix::host_is_root() => {
                return Err(ProviderError::Backend {
                    what: "a container's server is reached through its socket only by a root \
                           host"
                        .into(),
                    reason: "the socket lives on an engine volume, under the engine's root-only \
                             directory; use ServerReach::PublishedPort"
                        .into(),
                })
            }
            (ServerReach::Socket | ServerReach::EngineStream, _) => {
                Some(RunVolume::create(docker, id, user.owner).await?)
            }
            (ServerReach::PublishedPort, ContainerNetwork::None) => {
                return Err(ProviderError::Backend {
                    what: "a sandbox on network none is reached only through its socket".into(),
                    reason: "this provider publishes ports instead; use \
                             ServerReach::EngineStream (through the engine's API: any host, any \
                             engine) or, for a root host of an engine on this machine, \
                             ServerReach::Socket"
                        .into(),
                })
            }
            (ServerReach::PublishedPort, _) => None,
        };
        let created = Container::create(
            docker,
            id,
            &entry.entry,
            &source,
            config,
            &user,
            &run_volume,
            seed,
        )
        .await;
        let (container, tx) = match created {
            Ok(created) => created,
            Err(e) => {
                if let Some(volume) = &run_volume {
                    remove_volume(docker, &volume.name).await;
                }
                return Err(e);
            }
        };
        match container.boot(token, seed, config.ready_timeout, tx).await {
            Ok(port) => {
                let addr = match (&run_volume, reach) {
                    (Some(_), ServerReach::EngineStream) => {
                        let relay = vec![
                            format!("{}/{}", agentix_bundle_format::MOUNT, entry.entry),
                            agentix::bundle::RELAY_ROLE.to_owned(),
                            format!("{SOCKET_MOUNT}/{SOCKET_NAME}"),
                        ];
                        let started = EngineForward::start(
                            docker.clone(),
                            container.name.clone(),
                            relay,
                            crate::engine_forward::forward_dir(markers, id),
                        );
                        let mut container = container;
                        match started {
                            Ok(forward) => {
                                let addr = forward.addr().to_owned();
                                container.forward = Some(forward);
                                return Ok((container, addr));
                            }
                            Err(e) => {
                                container.remove().await;
                                return Err(e);
                            }
                        }
                    }
                    (Some(volume), _) => {
                        format!("unix:{}", volume.mountpoint.join(SOCKET_NAME).display())
                    }
                    (None, _) => format!("127.0.0.1:{port}"),
                };
                Ok((container, addr))
            }
            Err(e) => {
                container.remove().await;
                Err(e)
            }
        }
    }

    /// Creates sandbox `id`'s container (not started yet), its state from
    /// `seed` if given.
    #[allow(clippy::too_many_arguments)]
    async fn create(
        docker: &Docker,
        id: &str,
        entry: &str,
        source: &BundleSource,
        config: &SandboxConfig,
        user: &ContainerUser,
        run_volume: &Option<RunVolume>,
        seed: Option<&Seed>,
    ) -> Result<(Container, watch::Sender<Option<String>>), ProviderError> {
        let volume = run_volume.as_ref().map(|v| v.name.clone());
        let body = create_body(id, entry, source, config, user, volume.as_deref(), seed)?;
        let image = body.image.clone().unwrap_or_default();
        let options = CreateContainerOptions {
            name: Some(format!("agentix-{id}")),
            platform: config.container.platform.clone().unwrap_or_default(),
        };
        let created = docker
            .create_container(Some(options), body)
            .await
            .map_err(|e| match &e {
                bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                } => missing_image(&image, &e),
                _ => engine_error(&e),
            })?;
        let (tx, end) = EndReport::new(Container::ended_error);
        let container = Container {
            docker: docker.clone(),
            name: created.id,
            end,
            run_volume: volume,
            marker: None,
            forward: None,
        };
        Ok((container, tx))
    }

    /// Attaches, starts, writes the token, reads the ready line, and finds
    /// the published port (0 when the server is on a socket).
    async fn boot(
        &self,
        token: &str,
        seed: Option<&Seed>,
        ready_timeout: Duration,
        ended: watch::Sender<Option<String>>,
    ) -> Result<u16, ProviderError> {
        let options = AttachContainerOptions {
            stdin: true,
            stdout: true,
            stderr: true,
            stream: true,
            ..Default::default()
        };
        let mut attached = self
            .docker
            .attach_container(&self.name, Some(options))
            .await
            .map_err(|e| engine_error(&e))?;
        self.docker
            .start_container(
                &self.name,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .map_err(|e| ProviderError::ServerStartFailed {
                reason: format!("the container did not start: {e}"),
                output: String::new(),
            })?;
        self.watch_exit(ended);
        let _ = attached
            .input
            .write_all(format!("{token}\n").as_bytes())
            .await;
        if let Some(Seed::Stdin(archive)) = seed {
            // The state archive, after the token: the server unpacks it
            // before its first worker.
            send_file(archive, &mut attached.input).await?;
        }
        let _ = attached.input.shutdown().await;
        drop(attached.input);

        let mut tail = String::new();
        let mut line = String::new();
        let ready = tokio::time::timeout(ready_timeout, async {
            while let Some(frame) = attached.output.next().await {
                match frame {
                    Ok(LogOutput::StdOut { message }) => {
                        line.push_str(&String::from_utf8_lossy(&message));
                        if let Some(end) = line.find('\n') {
                            return Some(line[..end].to_owned());
                        }
                    }
                    Ok(LogOutput::StdErr { message }) => {
                        tail.push_str(&String::from_utf8_lossy(&message))
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            None
        })
        .await;
        // The rest of the output is the engine's to keep (`docker logs`;
        // the durable log inside the container has it too), but the attach
        // is read to its end: an attach dropped midway makes the engine log
        // a broken pipe for every container.
        let mut rest = attached.output;
        tokio::spawn(async move { while rest.next().await.is_some() {} });
        let failed = |reason: String, tail: &str| ProviderError::ServerStartFailed {
            reason,
            output: agentix::last_lines(tail),
        };
        match ready {
            Ok(Some(line)) if line.contains("\"agentix\":\"ready\"") => {}
            Ok(Some(line)) => {
                return Err(failed(
                    format!("it printed `{line}` instead of the ready line"),
                    &tail,
                ))
            }
            Ok(None) => {
                let status = self.end.how().unwrap_or_else(|| "no ready line".into());
                return Err(failed(
                    format!("it exited before listening ({status})"),
                    &tail,
                ));
            }
            Err(_) => {
                return Err(failed(
                    format!("it did not listen within {ready_timeout:?}"),
                    &tail,
                ))
            }
        }
        if self.run_volume.is_some() {
            return Ok(0);
        }
        let inspect = self
            .docker
            .inspect_container(
                &self.name,
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await
            .map_err(|e| engine_error(&e))?;
        inspect
            .network_settings
            .and_then(|n| n.ports)
            .and_then(|ports| ports.get(&format!("{SERVER_PORT}/tcp")).cloned().flatten())
            .and_then(|bindings| bindings.into_iter().find_map(|b| b.host_port?.parse().ok()))
            .ok_or_else(|| failed("the engine published no port for the server".into(), &tail))
    }

    /// Records how the container ends, whenever it does.
    fn watch_exit(&self, ended: watch::Sender<Option<String>>) {
        let (docker, name) = (self.docker.clone(), self.name.clone());
        tokio::spawn(async move {
            let options = WaitContainerOptions {
                condition: "not-running".into(),
            };
            let mut wait = docker.wait_container(&name, Some(options));
            let status = match wait.next().await {
                Some(Ok(r)) => format!("exit status {}", r.status_code),
                Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => {
                    format!("exit status {code}")
                }
                Some(Err(e)) => format!("lost track of it: {e}"),
                None => "gone".into(),
            };
            let _ = ended.send(Some(status));
        });
    }

    /// The same container, whose marker `id` in `markers` goes when it does.
    pub fn marked(mut self, markers: MarkerDir, id: String) -> Self {
        self.marker = Some((markers, id));
        self
    }

    /// Removes its marker, if it has one.
    fn unmark(marker: &Option<(MarkerDir, String)>) {
        if let Some((markers, id)) = marker {
            let _ = markers.remove(id);
        }
    }

    /// Deletes the container after `lifetime`, unless it is gone by then.
    pub fn delete_after(&self, lifetime: Duration) {
        let (docker, name, volume, marker) = (
            self.docker.clone(),
            self.name.clone(),
            self.run_volume.clone(),
            self.marker.clone(),
        );
        tokio::spawn(async move {
            tokio::time::sleep(lifetime).await;
            remove(&docker, &name, volume.as_deref()).await;
            Container::unmark(&marker);
        });
    }

    async fn remove(&self) {
        remove(&self.docker, &self.name, self.run_volume.as_deref()).await;
    }

    fn ended_error(status: &str) -> RemoteError {
        RemoteError::new(
            ErrorKind::ServerExited,
            format!("the sandbox's container ended ({status})"),
        )
        .with_details("`docker logs` of the container has its last output, until it is removed")
    }
}

/// Removes container `name`, then its socket volume (which the engine keeps
/// while the container exists).
async fn remove(docker: &Docker, name: &str, run_volume: Option<&str>) {
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    if let Err(e) = docker.remove_container(name, Some(options)).await {
        tracing::debug!(container = name, "not removed: {e}");
    }
    if let Some(volume) = run_volume {
        remove_volume(docker, volume).await;
    }
}

impl SandboxResources for Container {
    /// The server's state archive (the working directory and `/tmp`),
    /// downloaded into a directory of the snapshot's own on this machine.
    fn snapshot<'a>(
        &'a self,
        state: SandboxState<'a>,
        spec: SnapshotSpec,
    ) -> BoxFuture<'a, Result<Snapshot, ProviderError>> {
        Box::pin(async move {
            let id = format!("docker-snap-{}", agentix::random_hex(8));
            let files = SnapshotFiles::create(&id)?;
            let dir = files.dir.clone();
            let bytes = match state.download(&files.archive).await {
                Ok(bytes) => bytes,
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(ProviderError::Backend {
                        what: format!("snapshot sandbox {}", state.sandbox_id()),
                        reason: e.to_string(),
                    });
                }
            };
            if let Err(e) = files.share() {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
            let snapshot = Snapshot::from_parts(
                id,
                spec,
                crate::PROVIDER_NAME,
                state.sandbox_id(),
                SnapshotStore::Dir(dir),
                bytes,
                |store| {
                    if let SnapshotStore::Dir(dir) = store {
                        let dir = dir.clone();
                        std::thread::spawn(move || std::fs::remove_dir_all(dir));
                    }
                },
            );
            Ok(match &self.marker {
                Some((markers, _)) => snapshot.recorded_in(markers),
                None => snapshot,
            })
        })
    }

    fn shutdown(&self) -> BoxFuture<'static, ()> {
        // On a thread and a runtime of its own: a handle dropped while the
        // caller's runtime shuts down must still remove its container. The
        // provider's own client (a clone: the same engine, however it was
        // reached, not whatever `DOCKER_HOST` says); connections whose
        // runtime ended are closed, and the pool opens fresh ones.
        let docker = self.docker.clone();
        let (name, volume) = (self.name.clone(), self.run_volume.clone());
        let marker = self.marker.clone();
        agentix::shutdown_detached("agentix-docker-rm", move || async move {
            remove(&docker, &name, volume.as_deref()).await;
            Container::unmark(&marker);
        })
    }

    fn ended(&self) -> BoxFuture<'static, RemoteError> {
        self.end.ended()
    }

    fn ended_now(&self) -> Option<RemoteError> {
        self.end.ended_now()
    }
}

/// Writes the file `path` to `input` (a container's standard input), in
/// chunks read from the page cache inline: a chunk's read costs less than
/// handing it to a blocking thread.
async fn send_file(
    path: &std::path::Path,
    input: &mut (impl tokio::io::AsyncWrite + Unpin),
) -> Result<(), ProviderError> {
    use std::io::Read;
    let unreadable = |e| ProviderError::Io {
        what: format!("cannot read the snapshot archive {}", path.display()),
        source: e,
    };
    let mut file = std::fs::File::open(path).map_err(unreadable)?;
    let mut chunk = vec![0u8; 256 << 10];
    loop {
        let n = file.read(&mut chunk).map_err(unreadable)?;
        if n == 0 {
            return Ok(());
        }
        input
            .write_all(&chunk[..n])
            .await
            .map_err(|e| ProviderError::ServerStartFailed {
                reason: format!("the snapshot's state did not reach the container: {e}"),
                output: String::new(),
            })?;
    }
}
