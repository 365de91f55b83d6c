//! [`ApiServerDouble`]: a Kubernetes API server for tests and benchmarks,
//! on 127.0.0.1, serving over real HTTP the REST paths the Kubernetes
//! provider uses (pods, Secrets, events, network policies: create, get,
//! list, watch, delete; a pod's port-forward over websocket; the
//! agent-sandbox `Sandbox`, with its controller's part: a pod made from
//! its template, owned by it, deleted with it), with one
//! node whose kubelet ([`kubelet`]) runs each pod's containers as Docker
//! containers of this machine. So `kube`'s real client, the bundle's
//! delivery by an init container, the token's Secret, the control channel
//! through the port-forward and the pod lifecycle are all exercised; what
//! the double leaves out is a cluster's scale, its scheduler's policies
//! and its network plugin (a deny-all policy means no network at all).
//!
//! Layout: [`store`] keeps the objects and their changes; [`selectors`]
//! reads queries; [`routes`] answers requests; [`kubelet`] runs pods;
//! [`port_forward`] is the port-forward websocket.

pub mod kubelet;
pub mod port_forward;
pub mod routes;
pub mod selectors;
pub mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bollard::Docker;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

use crate::kubelet::Kubelet;
use crate::store::Store;

/// The double's shared state: its objects, its node, its pods' runs.
pub struct Double {
    /// The objects.
    pub store: Store,
    /// The node.
    pub kubelet: Arc<Kubelet>,
    runs: Mutex<HashMap<String, tokio::task::JoinHandle<()>>>,
    requests: Mutex<Vec<String>>,
    /// Whether the agent-sandbox CRDs are "installed".
    agent_sandbox: std::sync::atomic::AtomicBool,
    /// Resources the client's account may not create, as RBAC refuses.
    forbidden: Mutex<Vec<String>>,
}

impl Double {
    /// Starts running pod `name` (uid `uid`) of `namespace`.
    fn run_pod(&self, namespace: String, name: String, uid: String) {
        let kubelet = self.kubelet.clone();
        let run = tokio::spawn(async move { kubelet.run(namespace, name).await });
        self.runs.lock().unwrap().insert(uid, run);
    }

    /// Stops pod `uid` and removes its containers and volumes.
    async fn stop_pod(&self, uid: String) {
        if let Some(run) = self.runs.lock().unwrap().remove(&uid) {
            run.abort();
        }
        self.kubelet.remove(&uid).await;
    }

    fn is_forbidden(&self, resource: &str) -> bool {
        self.forbidden.lock().unwrap().iter().any(|r| r == resource)
    }

    fn serves_agent_sandbox(&self) -> bool {
        self.agent_sandbox
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The agent-sandbox controller's part: the pod of `sandbox` (a
    /// `Sandbox` just stored), named after it, from its template, owned
    /// by it.
    fn make_sandbox_pod(&self, namespace: &str, sandbox: &serde_json::Value) {
        let name = sandbox["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let template = &sandbox["spec"]["podTemplate"];
        let pod = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": template["metadata"]["labels"],
                "annotations": template["metadata"]["annotations"],
                "ownerReferences": [{
                    "apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
                    "name": name, "uid": sandbox["metadata"]["uid"],
                    "controller": true, "blockOwnerDeletion": true,
                }],
            },
            "spec": template["spec"],
        });
        match self.store.create(store::Kind::Pods, namespace, pod) {
            Ok(stored) => {
                let uid = stored["metadata"]["uid"].as_str().unwrap_or("").to_owned();
                self.run_pod(namespace.to_owned(), name, uid);
            }
            Err((_, error)) => tracing::warn!(%error, "the double's Sandbox made no pod"),
        }
    }

    /// The garbage collector's part: the pods `sandbox` owns go with it.
    async fn delete_sandbox_pod(&self, namespace: &str, sandbox: &serde_json::Value) {
        let owner = &sandbox["metadata"]["uid"];
        let owned: Vec<serde_json::Value> = self
            .store
            .list(store::Kind::Pods, namespace, "", "")
            .into_iter()
            .filter(|pod| {
                pod["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|refs| refs.iter().any(|r| &r["uid"] == owner))
            })
            .collect();
        for pod in owned {
            let name = pod["metadata"]["name"].as_str().unwrap_or("");
            if let Some(pod) = self.store.delete(store::Kind::Pods, namespace, name) {
                let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_owned();
                self.stop_pod(uid).await;
            }
        }
    }

    fn log_request(&self, method: &hyper::Method, path: &str) {
        self.requests
            .lock()
            .unwrap()
            .push(format!("{method} {path}"));
    }
}

/// A running double; [`ApiServerDouble::stop`], or dropping it (a test
/// that panicked), removes every container and directory it made.
pub struct ApiServerDouble {
    double: Arc<Double>,
    url: String,
    serving: tokio::task::JoinHandle<()>,
    stopped: bool,
}

impl ApiServerDouble {
    /// Serves on a free port of 127.0.0.1, running pods on `docker`'s
    /// engine, with a node of `node_memory` bytes for pods' requests.
    pub async fn start(docker: Docker, node_memory: i64) -> std::io::Result<ApiServerDouble> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let double_id = format!("{}-{}", std::process::id(), addr.port());
        let root = std::env::temp_dir().join(format!("agentix-kube-double-{double_id}"));
        std::fs::create_dir_all(&root)?;
        let store = Store::default();
        let double = Arc::new(Double {
            kubelet: Arc::new(Kubelet {
                docker,
                store: store.clone(),
                root,
                node_memory,
                double_id,
            }),
            store,
            runs: Mutex::default(),
            requests: Mutex::default(),
            agent_sandbox: std::sync::atomic::AtomicBool::new(true),
            forbidden: Mutex::default(),
        });
        let serving_double = double.clone();
        let serving = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    break;
                };
                let double = serving_double.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let double = double.clone();
                        async move {
                            Ok::<_, std::convert::Infallible>(routes::handle(double, request).await)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .with_upgrades()
                        .await;
                });
            }
        });
        Ok(ApiServerDouble {
            double,
            url: format!("http://{addr}"),
            serving,
            stopped: false,
        })
    }

    /// The API server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A client configuration for the double, in `namespace`.
    pub fn kube_config(&self, namespace: &str) -> kube::Config {
        let mut config = kube::Config::new(self.url.parse().expect("the double's URL"));
        config.default_namespace = namespace.to_owned();
        config
    }

    /// The objects, to look at what a client made.
    pub fn store(&self) -> &Store {
        &self.double.store
    }

    /// Makes the double answer as a cluster without the agent-sandbox
    /// CRDs (404 on their paths), or with them again.
    pub fn serve_agent_sandbox(&self, served: bool) {
        self.double
            .agent_sandbox
            .store(served, std::sync::atomic::Ordering::Relaxed);
    }

    /// Makes the double refuse to create `resource` (`"secrets"`), as the
    /// API server does for an account without that permission.
    pub fn forbid_creating(&self, resource: &str) {
        self.double
            .forbidden
            .lock()
            .unwrap()
            .push(resource.to_owned());
    }

    /// Every request so far, as `METHOD /path?query`.
    pub fn requests(&self) -> Vec<String> {
        self.double.requests.lock().unwrap().clone()
    }

    /// Stops serving and removes every container and volume directory the
    /// double made.
    pub async fn stop(mut self) {
        self.stopped = true;
        self.halt();
        self.double.kubelet.remove_all().await;
    }

    fn halt(&self) {
        self.serving.abort();
        let runs: Vec<_> = self.double.runs.lock().unwrap().drain().collect();
        for (_, run) in runs {
            run.abort();
        }
    }
}

impl Drop for ApiServerDouble {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        self.halt();
        // On a thread and a runtime of its own: the caller's may be
        // unwinding or shutting down.
        let kubelet = self.double.kubelet.clone();
        let removing = std::thread::spawn(move || {
            if let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                runtime.block_on(kubelet.remove_all());
            }
        });
        let _ = removing.join();
    }
}
