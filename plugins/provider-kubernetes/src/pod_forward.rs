//! [`PodForward`]: how a host outside the cluster reaches a pod's server
//! ([`PodReach::PortForward`](crate::PodReach::PortForward)): through the
//! API server's port-forward, which kubelet ends on the pod's loopback.
//!
//! The host listens on a Unix socket of its own (an
//! [`agentix::SocketForward`] beside the sandbox's marker, so a reap of a
//! dead host's sandbox removes it too); every connection there becomes one
//! port-forward (a websocket to the API server, `kube`'s
//! `Api::portforward`) whose stream carries the connection's bytes both
//! ways. The API server authorises it (`pods/portforward`), its TLS
//! protects the bytes, and the pod publishes nothing: every host-side part
//! of the sandbox (calls, `/health`, the `agentix` command while the host
//! lives) dials a socket as for a local sandbox.

use std::path::PathBuf;

use agentix::{ProviderError, SocketForward};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use tokio::net::UnixStream;

use crate::pod_spec::SERVER_PORT;

/// Where the forward of sandbox `id` listens: beside the markers in
/// `markers`.
pub fn forward_dir(markers: &agentix::MarkerDir, id: &str) -> PathBuf {
    markers.path().join(format!("{id}.kube"))
}

/// A host-side socket whose connections reach a pod's server through the
/// API server; closed, and its directory removed, when dropped.
pub struct PodForward {
    socket: SocketForward,
}

impl PodForward {
    /// Listens, in the new directory `dir` (mode 0700), for connections to
    /// pass to pod `pod`'s server.
    pub fn start(pods: Api<Pod>, pod: String, dir: PathBuf) -> Result<PodForward, ProviderError> {
        let socket = SocketForward::start(dir, move |connection| {
            let (pods, pod) = (pods.clone(), pod.clone());
            async move {
                if let Err(error) = forward_one(&pods, &pod, connection).await {
                    tracing::debug!(%pod, %error, "a port-forward ended with an error");
                }
            }
        })?;
        Ok(PodForward { socket })
    }

    /// The address a host dials: `unix:PATH`.
    pub fn addr(&self) -> &str {
        self.socket.addr()
    }
}

/// Carries `connection` to and from the server's port of `pod` until
/// either side ends.
async fn forward_one(pods: &Api<Pod>, pod: &str, mut connection: UnixStream) -> Result<(), String> {
    let mut forward = pods
        .portforward(pod, &[SERVER_PORT])
        .await
        .map_err(|e| format!("the API server refused the port-forward: {e}"))?;
    let mut stream = forward
        .take_stream(SERVER_PORT)
        .ok_or("the port-forward has no stream for the server's port")?;
    let refused = forward.take_error(SERVER_PORT);
    let copied = tokio::io::copy_bidirectional(&mut connection, &mut stream).await;
    drop(stream);
    if let Some(refused) = refused {
        // kubelet's words, when the pod side failed (nothing listening).
        if let Ok(Some(words)) =
            tokio::time::timeout(std::time::Duration::from_millis(50), refused).await
        {
            return Err(words);
        }
    }
    forward.abort();
    copied.map(|_| ()).map_err(|e| e.to_string())
}
