//! [`SandboxPod`]: one sandbox's pod as the `Sandbox` handle sees it
//! ([`agentix::SandboxResources`]): how it ended, and its deletion with
//! its Secret, its network policy, its marker and its host-side forward.

use std::time::Duration;

use agentix::{EndReport, ErrorKind, MarkerDir, RemoteError, SandboxResources};
use futures_util::future::BoxFuture;
use tokio::sync::watch;

use crate::cluster_objects::ClusterObjects;
use crate::pod_forward::PodForward;

/// A sandbox's running pod.
pub struct SandboxPod {
    objects: ClusterObjects,
    /// How the pod ended, once it has.
    end: EndReport,
    /// Its marker (see `agentix::sandbox_marker`), removed with it.
    marker: Option<(MarkerDir, String)>,
    /// The host's socket into it through the API server; closed when the
    /// pod is deleted, whatever handles remain.
    forward: std::sync::Mutex<Option<PodForward>>,
    /// The task that watches the pod end; stopped with it.
    watching: tokio::task::JoinHandle<()>,
}

impl SandboxPod {
    /// The pod `objects` names, followed through `pod` until it ends,
    /// reached through `forward` if given.
    pub fn new(
        objects: ClusterObjects,
        pod: watch::Receiver<crate::pod_watch::PodState>,
        forward: Option<PodForward>,
    ) -> SandboxPod {
        let (tx, end) = EndReport::new(SandboxPod::ended_error);
        let watching = tokio::spawn(ClusterObjects::watch_end(pod, tx));
        SandboxPod {
            objects,
            end,
            marker: None,
            forward: std::sync::Mutex::new(forward),
            watching,
        }
    }

    /// The same pod, whose marker `id` in `markers` goes when it does.
    pub fn marked(mut self, markers: MarkerDir, id: String) -> Self {
        self.marker = Some((markers, id));
        self
    }

    /// Deletes the pod's objects after `lifetime`, unless they are gone by
    /// then (the pod's own deadline has stopped it already).
    pub fn delete_after(&self, lifetime: Duration) {
        let objects = self.objects.clone();
        let marker = self.marker.clone();
        tokio::spawn(async move {
            tokio::time::sleep(lifetime).await;
            objects.delete().await;
            unmark(&marker);
        });
    }

    fn ended_error(status: &str) -> RemoteError {
        RemoteError::new(
            ErrorKind::ServerExited,
            format!("the sandbox's pod ended ({status})"),
        )
        .with_details("`kubectl logs` and `kubectl describe pod` tell more, until it is deleted")
    }
}

fn unmark(marker: &Option<(MarkerDir, String)>) {
    if let Some((markers, id)) = marker {
        let _ = markers.remove(id);
    }
}

impl SandboxResources for SandboxPod {
    fn shutdown(&self) -> BoxFuture<'static, ()> {
        self.watching.abort();
        drop(self.forward.lock().map(|mut f| f.take()));
        // With a client of its own: a kube client serves only on the
        // runtime that made it.
        let objects = self.objects.clone();
        let marker = self.marker.clone();
        agentix::shutdown_detached("agentix-kube-rm", move || async move {
            match objects.on_fresh_client() {
                Ok(objects) => objects.delete().await,
                Err(error) => tracing::warn!(
                    %error,
                    "cannot reach the API server to delete a sandbox's pod"
                ),
            }
            unmark(&marker);
        })
    }

    fn ended(&self) -> BoxFuture<'static, RemoteError> {
        self.end.ended()
    }

    fn ended_now(&self) -> Option<RemoteError> {
        self.end.ended_now()
    }
}
