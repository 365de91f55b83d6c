//! [`SocketForward`]: a Unix socket on the host, in a directory only its
//! user may enter, whose every connection a provider carries to a server
//! it cannot dial directly — through a container engine's API (an exec of
//! the bundle's `relay` role) or a Kubernetes API server's port-forward.
//! Every host-side part of a sandbox (calls, `/health`, the `agentix`
//! command while the host lives) then dials a socket as for a local
//! sandbox. Closed, its directory removed and its connections ended, when
//! dropped.

use std::future::Future;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;

use tokio::net::{UnixListener, UnixStream};

use crate::ProviderError;

/// A host-side socket whose connections a provider carries elsewhere.
pub struct SocketForward {
    dir: PathBuf,
    addr: String,
    accepting: tokio::task::JoinHandle<()>,
}

impl SocketForward {
    /// Listens on `server.sock` in the new directory `dir` (mode 0700, its
    /// parent made 0700 if missing) and hands each connection to `carry`,
    /// which returns when the connection is done.
    pub fn start<F, Fut>(dir: PathBuf, carry: F) -> Result<SocketForward, ProviderError>
    where
        F: Fn(UnixStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let io = |what: &str, e: std::io::Error| ProviderError::Io {
            what: format!("{what} {}", dir.display()),
            source: e,
        };
        if let Some(parent) = dir.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|e| io("cannot make the directory of", e))?;
        }
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| io("cannot make the forward's directory", e))?;
        let path = dir.join("server.sock");
        let listener = UnixListener::bind(&path).map_err(|e| {
            let _ = std::fs::remove_dir_all(&dir);
            io("cannot listen in", e)
        })?;
        let accepting = tokio::spawn(async move {
            // The connections' tasks end with this one (a set aborts its
            // tasks when dropped): none outlives the sandbox.
            let mut connections = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((connection, _)) = accepted else { break };
                        connections.spawn(carry(connection));
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        });
        Ok(SocketForward {
            addr: format!("unix:{}", path.display()),
            dir,
            accepting,
        })
    }

    /// The address a host dials: `unix:PATH`.
    pub fn addr(&self) -> &str {
        &self.addr
    }
}

impl Drop for SocketForward {
    fn drop(&mut self) {
        self.accepting.abort();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn each_connection_is_carried_and_a_drop_removes_the_socket_and_ends_them() {
        let root = std::env::temp_dir().join(format!("agentix-forward-{}", std::process::id()));
        let dir = root.join("one.fwd");
        let forward = SocketForward::start(dir.clone(), |mut connection| async move {
            let mut line = [0u8; 5];
            if connection.read_exact(&mut line).await.is_ok() {
                line.reverse();
                let _ = connection.write_all(&line).await;
            }
            // Held open until the forward goes.
            let _ = connection.read(&mut [0u8; 1]).await;
        })
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let path = forward.addr().strip_prefix("unix:").unwrap().to_owned();
        let mut client = UnixStream::connect(&path).await.unwrap();
        client.write_all(b"hello").await.unwrap();
        let mut back = [0u8; 5];
        client.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"olleh");
        drop(forward);
        assert!(!dir.exists(), "the directory goes with the forward");
        let mut rest = Vec::new();
        let ended = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            client.read_to_end(&mut rest),
        )
        .await;
        assert!(
            matches!(ended, Ok(Ok(0))),
            "the connection ended: {ended:?}"
        );
        let _ = std::fs::remove_dir_all(root);
    }
}
