//! [`EngineForward`]: how a host reaches a container's server when all it
//! can reach is the engine's API (an engine on another machine,
//! [`ServerReach::EngineStream`](crate::ServerReach::EngineStream)).
//!
//! The host listens on a Unix socket of its own (an
//! [`agentix::SocketForward`] beside the sandbox's marker, [`forward_dir`],
//! so a reap of a dead host's sandbox removes it too); every connection
//! there becomes an exec of the bundle's `relay` role in the container (`agentix_server::stdio_relay`), whose
//! attached stdin and stdout carry the connection's bytes to and from the
//! server's socket inside. So the server publishes nothing, the bytes
//! travel inside the engine's own connection (its TLS or SSH), and every
//! host-side part of the sandbox (calls, `/health`, the `agentix` command
//! while the host lives) dials a socket as for a local engine. Each
//! connection costs one exec (create and start: two engine requests);
//! a sandbox holds one connection for its calls.

use std::path::PathBuf;

use agentix::{ProviderError, SocketForward};
use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use bollard::Docker;
use futures_util::StreamExt;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// Largest piece of the relay's output the engine's stream hands over at
/// once.
const OUTPUT_PIECE: usize = 256 << 10;

/// Where the forward of sandbox `id` listens: beside the markers in
/// `markers`.
pub fn forward_dir(markers: &agentix::MarkerDir, id: &str) -> PathBuf {
    markers.path().join(format!("{id}.engine"))
}

/// A host-side socket whose connections reach a container's server through
/// its engine; closed, and its directory removed, when dropped.
pub struct EngineForward {
    socket: SocketForward,
}

impl EngineForward {
    /// Listens, in the new directory `dir` (mode 0700), for connections to
    /// pass to `container`'s server, each by an exec of `relay` (the
    /// bundle's program, `relay`, the server's socket inside the container).
    pub fn start(
        docker: Docker,
        container: String,
        relay: Vec<String>,
        dir: PathBuf,
    ) -> Result<EngineForward, ProviderError> {
        let socket = SocketForward::start(dir, move |connection| {
            let (docker, container, relay) = (docker.clone(), container.clone(), relay.clone());
            async move {
                if let Err(error) = relay_one(&docker, &container, relay, connection).await {
                    tracing::warn!(%container, %error, "a connection through the engine failed");
                }
            }
        })?;
        Ok(EngineForward { socket })
    }

    /// The address a host dials: `unix:PATH`.
    pub fn addr(&self) -> &str {
        self.socket.addr()
    }
}

/// Carries `connection` to and from an exec of `relay` in `container`
/// until either side ends.
async fn relay_one(
    docker: &Docker,
    container: &str,
    relay: Vec<String>,
    connection: UnixStream,
) -> Result<(), bollard::errors::Error> {
    let exec = docker
        .create_exec(
            container,
            ExecConfig {
                attach_stdin: Some(true),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                cmd: Some(relay),
                ..Default::default()
            },
        )
        .await?;
    let options = StartExecOptions {
        detach: false,
        tty: false,
        output_capacity: Some(OUTPUT_PIECE),
    };
    let StartExecResults::Attached {
        mut output,
        mut input,
    } = docker.start_exec(&exec.id, Some(options)).await?
    else {
        return Ok(());
    };
    let (from_host, mut to_host) = connection.into_split();
    let up = async move {
        let mut from_host = BufReader::with_capacity(OUTPUT_PIECE, from_host);
        let _ = tokio::io::copy_buf(&mut from_host, &mut input).await;
        // The relay sees its stdin end, and the server the connection's.
        let _ = input.shutdown().await;
    };
    let down = async move {
        while let Some(piece) = output.next().await {
            match piece {
                Ok(LogOutput::StdOut { message }) => {
                    if to_host.write_all(&message).await.is_err() {
                        break;
                    }
                }
                Ok(LogOutput::StdErr { message }) => {
                    tracing::debug!(output = %String::from_utf8_lossy(&message), "the relay said");
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let _ = to_host.shutdown().await;
    };
    tokio::join!(up, down);
    Ok(())
}
