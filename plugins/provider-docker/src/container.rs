//! [`Container`]: one sandbox's container, started and waited for, and
//! deleted through the `Sandbox` handle ([`agentix::SandboxResources`]).

use std::time::Duration;

use agentix::{
    ContainerNetwork, ErrorKind, ProviderError, RemoteError, SandboxConfig, SandboxResources,
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
use crate::container_spec::{bundle_entry, create_body, BundleSource, SERVER_PORT, SOCKET_NAME};
use crate::engine_error;
use crate::platform::{check_platform, missing_image};
use crate::ServerReach;

/// A sandbox's running container.
pub struct Container {
    docker: Docker,
    name: String,
    /// How the container ended, once it has.
    ended: watch::Receiver<Option<String>>,
    /// The host directory holding the server's socket, removed with the
    /// container (none when the port is published).
    socket_dir: Option<tempfile::TempDir>,
}

impl Container {
    /// Creates and starts sandbox `id`'s container, hands its server the
    /// token, and waits for the ready line; returns it and the published
    /// `host:port`.
    pub async fn start(
        docker: &Docker,
        id: &str,
        token: &str,
        config: &SandboxConfig,
        reach: ServerReach,
    ) -> Result<(Container, String), ProviderError> {
        let (entry, source) = match &config.container.bundle_image {
            Some(image) => bundle_volume(docker, image).await?,
            None => (
                bundle_entry(&config.bundle)?,
                BundleSource::Dir(config.bundle.clone()),
            ),
        };
        check_platform(docker, &entry.target, config).await?;
        let socket_dir = match (reach, &config.container.network) {
            (ServerReach::Socket, _) => Some(socket_dir()?),
            (ServerReach::PublishedPort, ContainerNetwork::None) => {
                return Err(ProviderError::Backend {
                    what: "a sandbox on network none needs the engine on this machine".into(),
                    reason: "the host reaches it only through a socket on a directory it \
                             mounts, and this provider publishes ports (DOCKER_HOST is remote)"
                        .into(),
                })
            }
            (ServerReach::PublishedPort, _) => None,
        };
        let socket_path = socket_dir.as_ref().map(|d| d.path().join("run"));
        let body = create_body(id, &entry.entry, &source, config, socket_path.as_deref())?;
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
        let name = created.id;
        let (tx, ended) = watch::channel(None);
        let container = Container {
            docker: docker.clone(),
            name: name.clone(),
            ended,
            socket_dir,
        };
        match container.boot(token, config.ready_timeout, tx).await {
            Ok(port) => {
                let addr = match &socket_path {
                    Some(dir) => format!("unix:{}", dir.join(SOCKET_NAME).display()),
                    None => format!("127.0.0.1:{port}"),
                };
                Ok((container, addr))
            }
            Err(e) => {
                container.remove().await;
                Err(e)
            }
        }
    }

    /// Attaches, starts, writes the token, reads the ready line, and finds
    /// the published port (0 when the server is on a socket).
    async fn boot(
        &self,
        token: &str,
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
        // The rest of the output is the engine's to keep (`docker logs`);
        // the durable log inside the container has it too.
        drop(attached.output);
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
                let status = self
                    .ended
                    .borrow()
                    .clone()
                    .unwrap_or_else(|| "no ready line".into());
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
        if self.socket_dir.is_some() {
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

    /// Deletes the container after `lifetime`, unless it is gone by then.
    pub fn delete_after(&self, lifetime: Duration) {
        let (docker, name) = (self.docker.clone(), self.name.clone());
        tokio::spawn(async move {
            tokio::time::sleep(lifetime).await;
            remove(&docker, &name).await;
        });
    }

    async fn remove(&self) {
        remove(&self.docker, &self.name).await;
    }

    fn ended_error(status: &str) -> RemoteError {
        RemoteError::new(
            ErrorKind::ServerExited,
            format!("the sandbox's container ended ({status})"),
        )
        .with_details("`docker logs` of the container has its last output, until it is removed")
    }
}

/// A private host directory (0700) with a `run/` inside that the
/// container's user, whoever it is, may create the server's socket in.
fn socket_dir() -> Result<tempfile::TempDir, ProviderError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |what: &str, e| ProviderError::Io {
        what: what.to_owned(),
        source: e,
    };
    let dir = tempfile::Builder::new()
        .prefix("agentix-docker-")
        .tempdir()
        .map_err(|e| io("cannot make the socket directory", e))?;
    let run = dir.path().join("run");
    std::fs::create_dir(&run)
        .and_then(|()| std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o777)))
        .map_err(|e| io("cannot make the socket directory", e))?;
    Ok(dir)
}

async fn remove(docker: &Docker, name: &str) {
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    if let Err(e) = docker.remove_container(name, Some(options)).await {
        tracing::debug!(container = name, "not removed: {e}");
    }
}

impl SandboxResources for Container {
    fn shutdown(&self) -> BoxFuture<'static, ()> {
        // On a thread and a client of its own: a handle dropped while the
        // caller's runtime shuts down must still remove its container.
        let name = self.name.clone();
        let socket_dir = self.socket_dir.as_ref().map(|d| d.path().to_owned());
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name("agentix-docker-rm".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                if let (Ok(runtime), Ok(docker)) = (runtime, Docker::connect_with_defaults()) {
                    runtime.block_on(remove(&docker, &name));
                }
                if let Some(dir) = socket_dir {
                    let _ = std::fs::remove_dir_all(dir);
                }
                let _ = done_tx.send(());
            });
        Box::pin(async move {
            if spawned.is_ok() {
                let _ = done_rx.await;
            }
        })
    }

    fn ended(&self) -> BoxFuture<'static, RemoteError> {
        let mut ended = self.ended.clone();
        Box::pin(async move {
            let status = match ended.wait_for(Option::is_some).await {
                Ok(s) => s.clone().unwrap_or_default(),
                Err(_) => "unknown".into(),
            };
            Container::ended_error(&status)
        })
    }

    fn ended_now(&self) -> Option<RemoteError> {
        let status = self.ended.borrow().clone()?;
        Some(Container::ended_error(&status))
    }
}
