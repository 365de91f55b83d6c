//! [`ClusterObjects`]: one sandbox's objects in the cluster (its pod or the
//! agent-sandbox `Sandbox` that makes it, its Secret and maybe its network
//! policy) and the API requests on them:
//! made in order, waited for until the pod runs (reading its status and
//! events, [`crate::pod_status`]), watched until it ends, and deleted.

use std::time::Duration;

use agentix::ProviderError;
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use kube::{Api, Client};
use tokio::sync::watch;

use crate::agent_sandbox::{sandbox_api_resource, sandbox_resource, Workload};
use crate::api_error::api_error;
use crate::pod_spec::SandboxObjects;
use crate::pod_status::{ended_reason, has_ended, pod_progress, PodProgress};
use crate::pod_watch::{PodState, PodWatch};

/// A sandbox's objects, by name, in one namespace.
#[derive(Clone)]
pub struct ClusterObjects {
    /// How the client was made, so a fresh one can be.
    config: kube::Config,
    client: Client,
    namespace: String,
    name: String,
    workload: Workload,
    watch: PodWatch,
}

impl ClusterObjects {
    /// The objects named `name` in `namespace`, the pod made as
    /// `workload` says, reached with `client` (made from `config`).
    /// Their pod is followed through `watch`, the provider's shared one.
    pub fn new(
        config: kube::Config,
        client: Client,
        namespace: &str,
        name: &str,
        workload: Workload,
        watch: PodWatch,
    ) -> Self {
        ClusterObjects {
            config,
            client,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            workload,
            watch,
        }
    }

    /// What the shared watch learns of the pod from now on.
    pub fn follow(&self) -> watch::Receiver<PodState> {
        self.watch.follow(&self.name)
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
    /// What was made stays if a later step fails: an [`UntilStarted`]
    /// deletes it.
    pub async fn create(&self, objects: &SandboxObjects) -> Result<(), ProviderError> {
        let post = PostParams::default();
        {
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
    }

    /// Waits until the pod `pod` follows (see [`ClusterObjects::follow`],
    /// called before the pod was made) runs its sandbox container, within
    /// `timeout`; returns the pod as it is then.
    pub async fn wait_running(
        &self,
        mut pod: watch::Receiver<PodState>,
        timeout: Duration,
    ) -> Result<Pod, ProviderError> {
        let mut why = "the API server reported nothing about the pod".to_owned();
        let watched = tokio::time::timeout(timeout, async {
            loop {
                let state = pod.borrow_and_update().clone();
                match state {
                    PodState::Unseen => {}
                    PodState::Gone => {
                        return Err(ProviderError::ServerStartFailed {
                            reason: "the sandbox's pod was deleted while it started".into(),
                            output: String::new(),
                        })
                    }
                    PodState::Seen(seen) => {
                        let events = if needs_events(&seen) {
                            self.events().await
                        } else {
                            Vec::new()
                        };
                        match pod_progress(&seen, &events) {
                            PodProgress::Running => return Ok(*seen),
                            PodProgress::Waiting(words) => why = words,
                            PodProgress::Failed(error) => return Err(error),
                        }
                    }
                }
                if pod.changed().await.is_err() {
                    return Err(ProviderError::ServerStartFailed {
                        reason: "lost track of the pod".into(),
                        output: String::new(),
                    });
                }
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

    /// Follows `pod` until it ends or goes, then says how on `ended`.
    pub async fn watch_end(
        mut pod: watch::Receiver<PodState>,
        ended: watch::Sender<Option<String>>,
    ) {
        loop {
            let state = pod.borrow_and_update().clone();
            let how = match state {
                PodState::Seen(seen) if has_ended(&seen) => Some(ended_reason(&seen)),
                PodState::Gone => Some("it was deleted".into()),
                _ => None,
            };
            if let Some(how) = how {
                let _ = ended.send(Some(how));
                return;
            }
            if pod.changed().await.is_err() {
                let _ = ended.send(Some("lost track of it".into()));
                return;
            }
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

/// A start's objects, deleted if the start does not finish: on an error
/// and also when the caller gives the start up midway (drops its future,
/// a pool's deadline), which no `?` path sees.
pub struct UntilStarted {
    objects: Option<ClusterObjects>,
}

impl UntilStarted {
    /// Guards `objects`, which are being made.
    pub fn new(objects: ClusterObjects) -> UntilStarted {
        UntilStarted {
            objects: Some(objects),
        }
    }

    /// The start finished: the sandbox's handle deletes them from now on.
    pub fn started(mut self) {
        self.objects = None;
    }

    /// The start failed: deletes them now, and returns once they are gone.
    pub async fn failed(mut self) {
        if let Some(objects) = self.objects.take() {
            objects.delete().await;
        }
    }
}

impl Drop for UntilStarted {
    fn drop(&mut self) {
        let Some(objects) = self.objects.take() else {
            return;
        };
        // Not awaited: a drop cannot wait, and the deletion's own thread
        // finishes it whatever becomes of the caller's runtime.
        drop(agentix::shutdown_detached(
            "agentix-kube-rm",
            move || async move {
                match objects.on_fresh_client() {
                    Ok(objects) => objects.delete().await,
                    Err(error) => {
                        tracing::warn!(%error, "cannot delete the objects of a start given up")
                    }
                }
            },
        ));
    }
}
