//! [`KubernetesProvider`]: sandboxes as pods of a Kubernetes cluster.
//!
//! A sandbox is one pod made from the user's template ([`pod_spec`]): an
//! init container runs the bundle's image (`agentix build --image`,
//! pushed to a registry the cluster pulls from) and copies the bundle into
//! a volume; the sandbox container runs the config's image with that
//! volume at `/agentix`, as a non-root uid, hardened to the restricted Pod
//! Security profile, with no service account token. The token is a Secret
//! the pod mounts. A sandbox with no network (the default) gets a network
//! policy that denies its pod everything but host pods. Everything made is
//! labelled `app.kubernetes.io/managed-by=agentix` and annotated with its
//! owner process, so [`KubernetesProvider::reap`] removes what a host that
//! died left behind; a host running in the cluster can also make its own
//! pod their owner ([`KubernetesProvider::owned_by`]), so the cluster's
//! garbage collector removes them with it.
//!
//! The host reaches a server through the API server's port-forward
//! ([`PodReach::PortForward`], [`pod_forward`]) from outside the cluster,
//! or at the pod's address ([`PodReach::PodAddress`]) from inside.
//!
//! Layout: [`pod_spec`] makes the objects; [`cluster_objects`] makes them
//! in the cluster, waits for the pod ([`pod_status`] reads its status) and
//! deletes them; [`sandbox_pod`] is one sandbox's pod as the `Sandbox`
//! handle sees it; [`api_error`] says what a refused request means; this
//! file is the provider.

pub mod agent_sandbox;
pub mod api_error;
pub mod cluster_objects;
pub mod pod_forward;
pub mod pod_spec;
pub mod pod_status;
pub mod pod_watch;
pub mod sandbox_pod;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentix::{
    Liveness, MarkerDir, OwnerId, Provider, ProviderError, Sandbox, SandboxConfig, SandboxMarker,
    SandboxRegistry,
};
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client};

pub use crate::agent_sandbox::Workload;
use crate::api_error::api_error;
use crate::cluster_objects::{ClusterObjects, UntilStarted};
use crate::pod_forward::PodForward;
use crate::pod_spec::{
    object_name, sandbox_objects, PodRequest, ANNOTATION_OWNER, LABEL_MANAGED, LABEL_SANDBOX,
    MANAGED_BY, SERVER_PORT,
};
use crate::pod_watch::PodWatch;
use crate::sandbox_pod::SandboxPod;

agentix::plugin_crate!();

/// The provider's name in markers.
pub const PROVIDER_NAME: &str = "kubernetes";

/// How the host reaches a pod's server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodReach {
    /// Through the API server's port-forward to the pod's loopback, where
    /// the server listens: for a host outside the cluster. Nothing else in
    /// the cluster can reach the server.
    PortForward,
    /// At the pod's address, where the server listens on all interfaces:
    /// for a host inside the cluster (its pod labelled
    /// `agentix.dev/host=true`, which a sandbox's network policy lets in).
    PodAddress,
}

impl PodReach {
    /// The pod's address when this process runs in a cluster (the
    /// `KUBERNETES_SERVICE_HOST` every pod has), the port-forward otherwise.
    pub fn for_environment() -> PodReach {
        match std::env::var_os("KUBERNETES_SERVICE_HOST") {
            Some(_) => PodReach::PodAddress,
            None => PodReach::PortForward,
        }
    }
}

/// Runs sandboxes as pods of one namespace of a Kubernetes cluster.
#[derive(Clone)]
pub struct KubernetesProvider {
    config: kube::Config,
    client: Client,
    namespace: String,
    sandboxes: SandboxRegistry,
    reach: PodReach,
    markers: MarkerDir,
    template: Option<Arc<Pod>>,
    /// The object that owns everything made, and its namespace: an owner
    /// reference resolves in its dependent's namespace only.
    owner: Option<(OwnerReference, String)>,
    workload: Workload,
    /// One watch of the namespace's sandbox pods, shared by all of them.
    pod_watch: PodWatch,
}

/// The environment a host pod sets from the downward API (`fieldRef`:
/// `metadata.name`, `metadata.uid`, `metadata.namespace`) so that
/// [`KubernetesProvider::connect`] makes it the owner of its sandboxes.
pub const HOST_POD_ENV: [&str; 3] = [
    "AGENTIX_HOST_POD_NAME",
    "AGENTIX_HOST_POD_UID",
    "AGENTIX_HOST_POD_NAMESPACE",
];

impl KubernetesProvider {
    /// A provider for the cluster the environment names, as `kubectl` finds
    /// it (`KUBECONFIG`, `~/.kube/config`, or the pod's own service account
    /// in a cluster), in its context's namespace; reaching servers as
    /// [`PodReach::for_environment`] says. A host pod that names itself in
    /// [`HOST_POD_ENV`] owns the sandboxes it makes in its own namespace.
    pub async fn connect() -> Result<Self, ProviderError> {
        let config = kube::Config::infer()
            .await
            .map_err(|e| ProviderError::Backend {
                what:
                    "no Kubernetes cluster is configured (KUBECONFIG, ~/.kube/config, or a pod's \
                       service account)"
                        .into(),
                reason: e.to_string(),
            })?;
        let provider = KubernetesProvider::new(config)?;
        let [name, uid, namespace] = HOST_POD_ENV.map(|key| std::env::var(key).ok());
        Ok(match (name, uid, namespace) {
            (Some(name), Some(uid), Some(namespace)) => {
                provider.owned_by_pod_in(&name, &uid, &namespace)
            }
            _ => provider,
        })
    }

    /// A provider for the cluster `config` describes (its
    /// `default_namespace` is the sandboxes'); call it inside a Tokio
    /// runtime.
    pub fn new(config: kube::Config) -> Result<Self, ProviderError> {
        let client = Client::try_from(config.clone()).map_err(|e| ProviderError::Backend {
            what: "cannot make a client for the Kubernetes API server".into(),
            reason: e.to_string(),
        })?;
        let pod_watch = pod_watch_of(&client, &config.default_namespace);
        Ok(KubernetesProvider {
            pod_watch,
            namespace: config.default_namespace.clone(),
            config,
            client,
            sandboxes: SandboxRegistry::new(),
            reach: PodReach::for_environment(),
            markers: MarkerDir::default(),
            template: None,
            owner: None,
            workload: Workload::Pod,
        })
    }

    /// The same provider, making its sandboxes in `namespace`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self.pod_watch = pod_watch_of(&self.client, &self.namespace);
        self
    }

    /// The same provider, reaching the servers of the sandboxes it creates
    /// from now on as `reach` says.
    pub fn with_reach(mut self, reach: PodReach) -> Self {
        self.reach = reach;
        self
    }

    /// The same provider, making each pod from `template`: its labels,
    /// annotations and spec (node selector, tolerations, affinity,
    /// `runtimeClassName`, service account, image pull secrets, volumes,
    /// sidecars) are kept, and a container named `sandbox` in it is the one
    /// the provider fills in (its resources, env and mounts kept).
    pub fn with_pod_template(mut self, template: Pod) -> Self {
        self.template = Some(Arc::new(template));
        self
    }

    /// The same provider, making each sandbox's pod as `workload` says: a
    /// plain pod (the default), or through an agent-sandbox `Sandbox`.
    pub fn with_workload(mut self, workload: Workload) -> Self {
        self.workload = workload;
        self
    }

    /// The same provider, making every object it creates owned by `owner`
    /// (the host's own pod, in the sandboxes' namespace): the cluster
    /// deletes them when the host's pod goes, however it went.
    pub fn owned_by(mut self, owner: OwnerReference) -> Self {
        self.owner = Some((owner, self.namespace.clone()));
        self
    }

    /// The same provider, its objects owned by pod `name` (uid `uid`) of
    /// `namespace`; only sandboxes made in that namespace carry the
    /// reference (elsewhere the cluster's collector would find no owner
    /// and delete them at once).
    pub fn owned_by_pod_in(mut self, name: &str, uid: &str, namespace: &str) -> Self {
        let owner = OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: name.into(),
            uid: uid.into(),
            controller: None,
            block_owner_deletion: None,
        };
        self.owner = Some((owner, namespace.to_owned()));
        self
    }

    /// The owner reference for objects made now, if it resolves in the
    /// sandboxes' namespace.
    fn owner_here(&self) -> Option<&OwnerReference> {
        match &self.owner {
            Some((owner, namespace)) if *namespace == self.namespace => Some(owner),
            Some((owner, namespace)) => {
                tracing::warn!(
                    owner = %owner.name, %namespace, sandboxes = %self.namespace,
                    "the host's pod is in another namespace: its sandboxes are not owned by it"
                );
                None
            }
            None => None,
        }
    }

    /// Keeps the sandboxes' markers (`agentix::sandbox_marker`, by which
    /// the `agentix` command reaches them) in `dir` instead of the default.
    pub fn marker_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.markers = MarkerDir::new(dir);
        self
    }

    /// The namespace the sandboxes are made in.
    pub fn namespace_name(&self) -> &str {
        &self.namespace
    }

    /// The API client, for what this provider does not cover.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Starts a sandbox for `config`.
    async fn start(&self, config: SandboxConfig) -> Result<Sandbox, ProviderError> {
        let started = Instant::now();
        let entry = agentix_bundle_format::Manifest::read(&config.bundle)
            .map_err(|reason| ProviderError::BadBundle {
                path: config.bundle.display().to_string(),
                reason: format!(
                    "{reason} (the provider reads the entry program from the bundle directory \
                     the bundle image was built from)"
                ),
            })?
            .entry;
        let id = format!("kube-{}", agentix::random_hex(8));
        let token = agentix::random_hex(32);
        let owner = OwnerId::current().to_string();
        let objects = sandbox_objects(
            &config,
            &PodRequest {
                id: &id,
                token: &token,
                entry: &entry,
                owner: &owner,
                reach: self.reach,
                template: self.template.as_deref(),
                owned_by: self.owner_here(),
            },
        )?;
        let name = object_name(&id);
        let cluster = ClusterObjects::new(
            self.config.clone(),
            self.client.clone(),
            &self.namespace,
            &name,
            self.workload,
            self.pod_watch.clone(),
        );
        // Followed before it is made: nothing of it is missed.
        let followed = cluster.follow();
        // Deleted again unless the start gets to the end, even if it is
        // given up midway.
        let guard = UntilStarted::new(cluster.clone());
        let reached = async {
            cluster.create(&objects).await?;
            let pod = cluster
                .wait_running(followed.clone(), config.ready_timeout)
                .await?;
            match self.reach {
                PodReach::PortForward => {
                    let dir = pod_forward::forward_dir(&self.markers, &id);
                    let forward = PodForward::start(cluster.pods(), name.clone(), dir)?;
                    Ok((forward.addr().to_owned(), Some(forward)))
                }
                PodReach::PodAddress => {
                    let ip = pod.status.as_ref().and_then(|s| s.pod_ip.as_deref());
                    // An IPv6 address goes in brackets: SocketAddr writes it so.
                    match ip.and_then(|ip| ip.parse::<std::net::IpAddr>().ok()) {
                        Some(addr) => Ok((
                            std::net::SocketAddr::new(addr, SERVER_PORT).to_string(),
                            None,
                        )),
                        None => Err(ProviderError::ServerStartFailed {
                            reason: format!("the running pod has no usable address ({ip:?})"),
                            output: String::new(),
                        }),
                    }
                }
            }
        }
        .await;
        let (addr, forward) = match reached {
            Ok(reached) => reached,
            Err(e) => {
                // Gone before the error is returned: nothing is left.
                guard.failed().await;
                return Err(e);
            }
        };
        // From here the handle deletes the objects.
        guard.started();
        let marker = SandboxMarker {
            id: id.clone(),
            provider: PROVIDER_NAME.to_owned(),
            owner,
            dir: Default::default(),
            addr: addr.clone(),
            local_addr: None,
            token: token.clone(),
            pid: 0,
            pid_start: 0,
            cgroup: Vec::new(),
            created_ms: agentix::sandbox_marker::now_ms(),
        };
        let handle = SandboxPod::new(cluster, followed, forward);
        let handle = match self.markers.write(&marker) {
            Ok(()) => handle.marked(self.markers.clone(), id.clone()),
            Err(error) => {
                tracing::warn!(sandbox = %id, %error, "cannot write the sandbox's marker");
                handle
            }
        };
        if let Some(lifetime) = config.container.lifetime {
            handle.delete_after(lifetime);
        }
        let ready_timeout = config.ready_timeout;
        let sandbox = Sandbox::from_parts(id, addr, token, config, Arc::new(handle));
        // The container runs; its server listens a moment later.
        let left = ready_timeout.saturating_sub(started.elapsed());
        if let Err(e) = wait_listening(&sandbox, left).await {
            sandbox.delete().await;
            return Err(e);
        }
        self.sandboxes.add(&sandbox);
        Ok(sandbox)
    }

    /// The pods [`KubernetesProvider::reap`] would delete: this provider's
    /// pods in the namespace whose owner process (on this machine) has
    /// ended.
    pub async fn abandoned_pods(&self) -> Result<Vec<Pod>, ProviderError> {
        let selector = ListParams::default().labels(&format!("{LABEL_MANAGED}={MANAGED_BY}"));
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let listed = pods
            .list(&selector)
            .await
            .map_err(|e| api_error("list the sandboxes' pods", &e))?;
        Ok(listed
            .items
            .into_iter()
            .filter(|p| owner_is_dead(&p.metadata))
            .collect())
    }

    /// Removes what hosts that died left of this provider's sandboxes in
    /// the namespace (pods, Secrets, policies whose owner process has
    /// ended; another machine's are never touched), with their markers;
    /// returns how many pods.
    pub async fn reap(&self) -> Result<usize, ProviderError> {
        let selector = ListParams::default().labels(&format!("{LABEL_MANAGED}={MANAGED_BY}"));
        let dead = owner_is_dead;
        let now = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let policies: Api<NetworkPolicy> = Api::namespaced(self.client.clone(), &self.namespace);
        let agent_sandboxes: Api<kube::api::DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &agent_sandbox::sandbox_api_resource(),
        );
        // First: a Sandbox's controller would make its pod again. A cluster
        // without the CRDs has none.
        match agent_sandboxes.list(&selector).await {
            Ok(listed) => {
                for sandbox in listed.items.iter().filter(|s| dead(&s.metadata)) {
                    let name = sandbox.metadata.name.clone().unwrap_or_default();
                    let _ = agent_sandboxes.delete(&name, &now).await;
                }
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(api_error("list the sandboxes' agent-sandbox Sandboxes", &e)),
        }
        let mut removed = 0;
        let mut gone = std::collections::HashSet::new();
        for pod in self.abandoned_pods().await? {
            let name = pod.metadata.name.clone().unwrap_or_default();
            match pods.delete(&name, &now).await {
                Ok(_) => removed += 1,
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(api_error("delete a dead host's pod", &e)),
            }
            if let Some(id) = pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_SANDBOX))
            {
                gone.insert(id.clone());
            }
        }
        // A host that died between its requests leaves a Secret or a
        // policy with no pod.
        let secrets_listed = secrets
            .list(&selector)
            .await
            .map_err(|e| api_error("list the sandboxes' Secrets", &e))?;
        for secret in secrets_listed.items.iter().filter(|s| dead(&s.metadata)) {
            let name = secret.metadata.name.clone().unwrap_or_default();
            let _ = secrets.delete(&name, &now).await;
        }
        let policies_listed = policies
            .list(&selector)
            .await
            .map_err(|e| api_error("list the sandboxes' network policies", &e))?;
        for policy in policies_listed.items.iter().filter(|p| dead(&p.metadata)) {
            let name = policy.metadata.name.clone().unwrap_or_default();
            let _ = policies.delete(&name, &now).await;
        }
        if let Ok(markers) = self.markers.list() {
            for marker in markers.iter().filter(|m| m.provider == PROVIDER_NAME) {
                let owner_dead =
                    OwnerId::parse(&marker.owner).is_some_and(|o| o.liveness() == Liveness::Dead);
                if owner_dead || gone.contains(&marker.id) {
                    let _ = self.markers.remove(&marker.id);
                    let _ = std::fs::remove_dir_all(pod_forward::forward_dir(
                        &self.markers,
                        &marker.id,
                    ));
                }
            }
        }
        Ok(removed)
    }
}

/// The shared watch of the provider's pods in `namespace`.
fn pod_watch_of(client: &Client, namespace: &str) -> PodWatch {
    PodWatch::new(
        Api::namespaced(client.clone(), namespace),
        &format!("{LABEL_MANAGED}={MANAGED_BY}"),
    )
}

/// Whether the owner annotation of `meta` names a process (of this
/// machine) that has ended.
fn owner_is_dead(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_OWNER))
        .and_then(|o| OwnerId::parse(o))
        .is_some_and(|o| o.liveness() == Liveness::Dead)
}

/// Waits until `sandbox`'s server answers `/health`, within `timeout`.
async fn wait_listening(sandbox: &Sandbox, timeout: Duration) -> Result<(), ProviderError> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(10);
    loop {
        let last = match sandbox.health().await {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        let ended = sandbox.ended().and_then(FutureExt::now_or_never);
        if let Some(ended) = ended {
            return Err(ProviderError::ServerStartFailed {
                reason: format!(
                    "the pod ended before its server listened: {}",
                    ended.message
                ),
                output: String::new(),
            });
        }
        if Instant::now() + pause > deadline {
            return Err(ProviderError::ServerStartFailed {
                reason: format!(
                    "the pod runs but its server did not answer within {timeout:?}: {}",
                    last.message
                ),
                output: String::new(),
            });
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

impl Provider for KubernetesProvider {
    fn create(&self, config: SandboxConfig) -> BoxFuture<'_, Result<Sandbox, ProviderError>> {
        Box::pin(self.start(config))
    }

    fn sandboxes(&self) -> &SandboxRegistry {
        &self.sandboxes
    }

    /// The images' references, base and bundle: pin them by digest
    /// (`name@sha256:..`) for a key that follows their content, since
    /// the provider cannot ask a registry what a tag points at.
    fn environment_id<'a>(
        &'a self,
        config: &'a SandboxConfig,
    ) -> BoxFuture<'a, Result<String, ProviderError>> {
        let ids = (
            config.container.image.clone(),
            config.container.bundle_image.clone(),
        );
        Box::pin(async move {
            match ids {
                (Some(image), Some(bundle)) => Ok(format!("{image}+{bundle}")),
                _ => Err(ProviderError::BadBundle {
                    path: config.bundle.display().to_string(),
                    reason: "a pod needs an image and a bundle image".into(),
                }),
            }
        })
    }

    fn reap(&self) -> BoxFuture<'_, Result<usize, ProviderError>> {
        Box::pin(KubernetesProvider::reap(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_host_pod_owns_only_the_sandboxes_of_its_own_namespace() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let provider = KubernetesProvider::new(config)
            .unwrap()
            .namespace("rollouts")
            .owned_by_pod_in("host-7", "uid-host-7", "rollouts");
        let owner = provider.owner_here().expect("the same namespace");
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Pod", "uid-host-7")
        );
        let elsewhere = provider.namespace("other");
        assert!(elsewhere.owner_here().is_none());
    }
}
