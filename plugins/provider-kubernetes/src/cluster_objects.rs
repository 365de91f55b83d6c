//! [`ClusterObjects`]: one sandbox's objects in the cluster (its pod or the
//! agent-sandbox `Sandbox` that makes it, its Secret and maybe its network
//! policy) and the API requests on them:
//! made in order, waited for until the pod runs (reading its status and
//! events, [`crate::pod_status`]), watched until it ends, and deleted.

use std::time::{Duration, Instant};

use agentix::ProviderError;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client};
use tokio::sync::watch;

use crate::agent_sandbox::{sandbox_api_resource, sandbox_resource, Workload};
use crate::api_error::api_error;
use crate::pod_spec::SandboxObjects;
use crate::pod_status::{ended_reason, has_ended, pod_progress, PodProgress};

/// A sandbox's objects, by name, in one namespace.
#[derive(Clone)]
pub struct ClusterObjects {
    /// How the client was made, so a fresh one can be.
    config: kube::Config,
    client: Client,
    namespace: String,
    name: String,
    workload: Workload,
}

impl ClusterObjects {
    /// The objects named `name` in `namespace`, the pod made as
    /// `workload` says, reached with `client` (made from `config`).
    pub fn new(
        config: kube::Config,
        client: Client,
        namespace: &str,
        name: &str,
        workload: Workload,
    ) -> Self {
        ClusterObjects {
            config,
            client,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            workload,
        }
    }

    /// The pods of the namespace.
    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn policies(&self) -> Api<NetworkPolicy> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn agent_sandboxes(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &sandbox_api_resource(),
        )
    }

    /// The same objects through a client made now, on the runtime that
    /// calls this.
    pub fn on_fresh_client(&self) -> Result<ClusterObjects, String> {
        let client = Client::try_from(self.config.clone()).map_err(|e| e.to_string())?;
        Ok(ClusterObjects {
            client,
            ..self.clone()
        })
    }

    /// Makes `objects`: the policy first (a pod is never up unguarded),
    /// then the Secret (the pod cannot start without it), then the pod.
    /// What was made is deleted again if a later step fails.
    pub async fn create(&self, objects: &SandboxObjects) -> Result<(), ProviderError> {
        let post = PostParams::default();
        let made = async {
            if let Some(policy) = &objects.network_policy {
                self.policies()
                    .create(&post, policy)
                    .await
                    .map_err(|e| api_error("create the sandbox's network policy", &e))?;
            }
            self.secrets()
                .create(&post, &objects.secret)
                .await
                .map_err(|e| api_error("create the Secret of the sandbox's token", &e))?;
            match self.workload {
                Workload::Pod => {
                    self.pods()
                        .create(&post, &objects.pod)
                        .await
                        .map_err(|e| api_error("create the sandbox's pod", &e))?;
                }
                Workload::AgentSandbox => {
                    let lifetime = objects
                        .pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.active_deadline_seconds);
                    let resource = sandbox_resource(&objects.pod, lifetime);
                    self.agent_sandboxes()
                        .create(&post, &resource)
                        .await
                        .map_err(|e| match &e {
                            kube::Error::Api(status) if status.code == 404 => {
                                ProviderError::Backend {
                                    what: "the cluster has no agent-sandbox `Sandbox` resource"
                                        .into(),
                                    reason: "install the agent-sandbox CRDs and controller                                              (kubectl get crd sandboxes.agents.x-k8s.io), or                                              use Workload::Pod"
                                        .into(),
                                }
                            }
                            _ => api_error("create the sandbox's agent-sandbox Sandbox", &e),
                        })?;
                }
            }
            Ok(())
        }
        .await;
        if made.is_err() {
            self.delete().await;
        }
        made
    }

    /// Waits until the pod's sandbox container runs, within `timeout`;
    /// returns the pod as it is then.
    pub async fn wait_running(&self, timeout: Duration) -> Result<Pod, ProviderError> {
        let deadline = Instant::now() + timeout;
        let mut why = "the API server reported nothing about the pod".to_owned();
        let watched = tokio::time::timeout(timeout, async {
            loop {
                let params = WatchParams::default()
                    .fields(&format!("metadata.name={}", self.name))
                    .timeout(watch_seconds(deadline));
                let mut events = self
                    .pods()
                    .watch(&params, "0")
                    .await
                    .map_err(|e| api_error("watch the sandbox's pod", &e))?
                    .boxed();
                while let Some(event) = events.next().await {
                    let pod = match event {
                        Ok(WatchEvent::Added(pod) | WatchEvent::Modified(pod)) => pod,
                        Ok(WatchEvent::Deleted(_)) => {
                            return Err(ProviderError::ServerStartFailed {
                                reason: "the sandbox's pod was deleted while it started".into(),
                                output: String::new(),
                            })
                        }
                        Ok(WatchEvent::Error(status)) => {
                            why = format!("the watch ended: {}", status.message);
                            break;
                        }
                        Ok(WatchEvent::Bookmark(_)) => continue,
                        Err(e) => {
                            why = format!("the watch broke: {e}");
                            break;
                        }
                    };
                    let events = if needs_events(&pod) {
                        self.events().await
                    } else {
                        Vec::new()
                    };
                    match pod_progress(&pod, &events) {
                        PodProgress::Running => return Ok(pod),
                        PodProgress::Waiting(words) => why = words,
                        PodProgress::Failed(error) => return Err(error),
                    }
                }
                // A watch the server closed (its own timeout): watch again.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        match watched {
            Ok(done) => done,
            Err(_) => Err(ProviderError::ServerStartFailed {
                reason: format!("the pod did not start within {timeout:?}: {why}"),
                output: String::new(),
            }),
        }
    }

    /// The API server's events about the pod, oldest first; none if they
    /// cannot be read (they only add words to an error).
    async fn events(&self) -> Vec<Event> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        let params = ListParams::default().fields(&format!("involvedObject.name={}", self.name));
        match events.list(&params).await {
            Ok(list) => list.items,
            Err(error) => {
                tracing::debug!(%error, "cannot read the pod's events");
                Vec::new()
            }
        }
    }

    /// Watches the pod until it ends or goes, then says how on `ended`.
    pub async fn watch_end(self, ended: watch::Sender<Option<String>>) {
        let mut failures = 0u32;
        loop {
            let params = WatchParams::default().fields(&format!("metadata.name={}", self.name));
            let stream = match self.pods().watch(&params, "0").await {
                Ok(stream) => stream,
                Err(error) => {
                    failures += 1;
                    if failures >= 10 {
                        let _ = ended.send(Some(format!("lost track of it: {error}")));
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(500) * failures).await;
                    continue;
                }
            };
            failures = 0;
            let mut stream = stream.boxed();
            while let Some(event) = stream.next().await {
                match event {
                    Ok(WatchEvent::Added(pod) | WatchEvent::Modified(pod)) if has_ended(&pod) => {
                        let _ = ended.send(Some(ended_reason(&pod)));
                        return;
                    }
                    Ok(WatchEvent::Deleted(_)) => {
                        let _ = ended.send(Some("it was deleted".into()));
                        return;
                    }
                    Ok(WatchEvent::Error(_)) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Deletes the pod (at once: no grace, the host is done with it), its
    /// Secret and its policy; what is gone already is fine.
    pub async fn delete(&self) {
        let now = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        let name = &self.name;
        // The Sandbox first: its controller would make the pod again.
        if self.workload == Workload::AgentSandbox {
            match self.agent_sandboxes().delete(name, &now).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => tracing::warn!(
                    object = %name, %error, "a sandbox's agent-sandbox Sandbox was not deleted"
                ),
            }
        }
        let pod = self.pods().delete(name, &now).await.map(|_| ());
        let secret = self.secrets().delete(name, &now).await.map(|_| ());
        let policy = self.policies().delete(name, &now).await.map(|_| ());
        for (what, result) in [("pod", pod), ("Secret", secret), ("network policy", policy)] {
            match result {
                Ok(()) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => {
                    tracing::warn!(object = %name, what, %error, "a sandbox's object was not deleted")
                }
            }
        }
    }
}

/// Whether the pod's status calls for the events' words (the scheduler's
/// reason).
fn needs_events(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "PodScheduled" && c.status == "False")
        })
}

/// Seconds a watch may last before `deadline` (at least one).
fn watch_seconds(deadline: Instant) -> u32 {
    let left = deadline.saturating_duration_since(Instant::now());
    (left.as_secs() as u32).clamp(1, 290)
}
