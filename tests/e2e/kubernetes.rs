//! The Kubernetes provider end to end, through `kube`'s real client: against
//! the API-server double (`agentix-kube-double`: real HTTP, watches, the
//! port-forward websocket, each pod's containers run by this machine's
//! Docker engine), or against a real cluster when
//! `AGENTIX_TEST_KUBECONFIG` names its kubeconfig (then
//! `AGENTIX_TEST_KUBE_IMAGE` and `AGENTIX_TEST_KUBE_BUNDLE_IMAGE` name the
//! base image and the bundle image the cluster pulls, and the namespace is
//! `AGENTIX_TEST_KUBE_NAMESPACE` or `default`). The checks that look
//! inside the double (its objects, its containers) run against the double
//! only.

#[allow(dead_code)]
mod docker_support;
mod support;

use std::sync::Arc;
use std::time::Duration;

use agentix::fleet::{Pool, ProgressDisplay, Task};
use agentix::{ErrorKind, Provider, ProviderError, SandboxConfig};
use agentix_bash::BashOptions;
use agentix_kube_double::kubelet::LABEL_POD;
use agentix_kube_double::store::Kind;
use agentix_kube_double::ApiServerDouble;
use agentix_provider_docker::DockerProvider;
use agentix_provider_kubernetes::pod_spec::{ANNOTATION_OWNER, LABEL_MANAGED, MANAGED_BY};
use agentix_provider_kubernetes::{KubernetesProvider, PodReach, Workload};
use docker_support::{bundle_dir, empty_image, EMPTY_IMAGE};

const NAMESPACE: &str = "agentix-test";

/// Where the tests run: the double with the images it runs, or a real
/// cluster.
struct Cluster {
    provider: KubernetesProvider,
    config: SandboxConfig,
    double: Option<ApiServerDouble>,
    docker: bollard::Docker,
    markers: tempfile_dir::Dir,
    _bundle: tempfile_dir::Dir,
}

mod tempfile_dir {
    /// A directory removed when dropped.
    pub(crate) struct Dir(pub(crate) std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Cluster {
    async fn start(name: &str) -> Cluster {
        let docker_provider = DockerProvider::connect().expect("a Docker engine");
        let docker = docker_provider.docker().clone();
        let bundle = bundle_dir(&format!("kube-{name}"));
        let markers = tempfile_dir::Dir(std::env::temp_dir().join(format!(
            "agentix-kube-markers-{name}-{}",
            std::process::id()
        )));
        if let Ok(kubeconfig) = std::env::var("AGENTIX_TEST_KUBECONFIG") {
            let kubeconfig =
                kube::config::Kubeconfig::read_from(&kubeconfig).expect("a kubeconfig");
            let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .expect("the kubeconfig's cluster");
            let namespace =
                std::env::var("AGENTIX_TEST_KUBE_NAMESPACE").unwrap_or_else(|_| "default".into());
            let provider = KubernetesProvider::new(config)
                .unwrap()
                .namespace(namespace)
                .with_reach(PodReach::PortForward)
                .marker_dir(&markers.0);
            let mut config = SandboxConfig::new(&bundle)
                .image(std::env::var("AGENTIX_TEST_KUBE_IMAGE").expect("the base image"));
            config.container.bundle_image =
                Some(std::env::var("AGENTIX_TEST_KUBE_BUNDLE_IMAGE").expect("the bundle image"));
            config.ready_timeout = Duration::from_secs(120);
            return Cluster {
                provider,
                config,
                double: None,
                docker,
                markers,
                _bundle: tempfile_dir::Dir(bundle),
            };
        }
        empty_image(&docker_provider).await;
        let bundle_image =
            agentix_provider_docker::bundle_upload::bundle_image_of(&docker, &bundle)
                .await
                .expect("the bundle loads into the engine as an image");
        let double = ApiServerDouble::start(docker.clone(), 8 << 30)
            .await
            .expect("the double serves");
        let provider = KubernetesProvider::new(double.kube_config(NAMESPACE))
            .unwrap()
            .with_reach(PodReach::PortForward)
            .marker_dir(&markers.0);
        let mut config = SandboxConfig::new(&bundle).image(EMPTY_IMAGE);
        config.container.bundle_image = Some(bundle_image);
        config.ready_timeout = Duration::from_secs(60);
        Cluster {
            provider,
            config,
            double: Some(double),
            docker,
            markers,
            _bundle: tempfile_dir::Dir(bundle),
        }
    }

    /// Containers of the double's pod `uid` that exist (running or not).
    async fn containers_of_pod(&self, uid: &str) -> usize {
        let options = bollard::query_parameters::ListContainersOptions {
            all: true,
            filters: Some([("label".to_owned(), vec![format!("{LABEL_POD}={uid}")])].into()),
            ..Default::default()
        };
        self.docker
            .list_containers(Some(options))
            .await
            .unwrap()
            .len()
    }

    async fn stop(self) {
        if let Some(double) = self.double {
            double.stop().await;
        }
    }
}

#[tokio::test]
async fn a_pod_sandbox_calls_runs_bash_and_is_removed_with_its_secret_and_policy() {
    let cluster = Cluster::start("calls").await;
    let sb = cluster
        .provider
        .create(cluster.config.clone())
        .await
        .expect("the pod sandbox starts");
    let id = sb.id().to_owned();
    assert!(sb.addr().starts_with("unix:"), "{}", sb.addr());
    assert_eq!(sb.remote(agentix_e2e::add, (2, 3)).await.unwrap(), 5);
    let out = sb
        .remote(
            agentix_bash::run,
            (
                "echo hi from $BASH; echo uid $UID; echo dir $PWD".to_string(),
                BashOptions::new(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let text = out.stdout_lossy();
    assert!(text.contains("hi from /agentix/bin/bash"), "{text}");
    assert!(text.contains("uid 65532"), "not root: {text}");
    assert!(text.contains("dir /workspace"), "{text}");
    assert_eq!(cluster.provider.list().len(), 1);

    let name = format!("agentix-{id}");
    let mut uid = String::new();
    if let Some(double) = &cluster.double {
        let store = double.store();
        let pod = store.get(Kind::Pods, NAMESPACE, &name).expect("the pod");
        uid = pod["metadata"]["uid"].as_str().unwrap().to_owned();
        assert_eq!(pod["metadata"]["labels"][LABEL_MANAGED], MANAGED_BY);
        assert!(pod["metadata"]["annotations"][ANNOTATION_OWNER].is_string());
        assert!(
            !pod.to_string().contains(sb.token()),
            "the token is in no pod field"
        );
        let secret = store
            .get(Kind::Secrets, NAMESPACE, &name)
            .expect("the Secret");
        assert!(secret["data"]["token"].is_string());
        assert!(store.get(Kind::NetworkPolicies, NAMESPACE, &name).is_some());
        assert_eq!(cluster.containers_of_pod(&uid).await, 2, "init and sandbox");
        // Every byte of the calls came through the port-forward.
        let requests = double.requests();
        assert!(
            requests.iter().any(|r| r.starts_with(&format!(
                "GET /api/v1/namespaces/{NAMESPACE}/pods/{name}/portforward?"
            ))),
            "{requests:?}"
        );
    }
    let marker_dir = cluster.markers.0.clone();
    assert!(marker_dir.join(format!("{id}.kube")).exists());

    cluster.provider.delete(&id).await.unwrap();
    assert!(cluster.provider.list().is_empty());
    assert!(
        !marker_dir.join(format!("{id}.kube")).exists(),
        "forward removed"
    );
    assert!(
        !marker_dir.join(format!("{id}.json")).exists(),
        "marker removed"
    );
    if let Some(double) = &cluster.double {
        let store = double.store();
        assert!(store.get(Kind::Pods, NAMESPACE, &name).is_none());
        assert!(store.get(Kind::Secrets, NAMESPACE, &name).is_none());
        assert!(store.get(Kind::NetworkPolicies, NAMESPACE, &name).is_none());
        assert_eq!(
            cluster.containers_of_pod(&uid).await,
            0,
            "containers removed"
        );
    }
    cluster.stop().await;
}

#[tokio::test]
async fn sandbox_code_has_no_network_no_service_account_token_and_a_read_only_root() {
    let cluster = Cluster::start("confined").await;
    let sb = cluster
        .provider
        .create(cluster.config.clone())
        .await
        .unwrap();
    let script = "\
        while read -r line; do echo \"if $line\"; done < /proc/net/dev; \
        [ -e /var/run/secrets/kubernetes.io ] && echo has-sa-token; \
        echo x > /probe 2>/dev/null && echo root-writable; \
        echo y > /workspace/ok && echo workdir-writable; \
        echo $KUBERNETES_SERVICE_HOST; true";
    let out = sb
        .remote(agentix_bash::run, (script.to_string(), BashOptions::new()))
        .await
        .unwrap();
    let text = out.stdout_lossy();
    let interfaces: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("if "))
        .filter_map(|l| l.split_once(':').map(|(name, _)| name.trim()))
        .collect();
    assert_eq!(interfaces, ["lo"], "no network but loopback: {text}");
    assert!(!text.contains("has-sa-token"), "{text}");
    assert!(!text.contains("root-writable"), "{text}");
    assert!(text.contains("workdir-writable"), "{text}");
    sb.delete().await;
    cluster.stop().await;
}

#[tokio::test]
async fn a_missing_image_an_unschedulable_pod_and_a_missing_permission_each_say_what_to_do() {
    let cluster = Cluster::start("errors").await;
    if cluster.double.is_none() {
        return cluster.stop().await;
    }
    let mut missing = cluster.config.clone();
    missing.container.bundle_image = Some("registry.invalid/no-such-bundle:1".into());
    let started = std::time::Instant::now();
    match cluster.provider.create(missing).await {
        Err(ProviderError::BadBundle { path, reason }) => {
            assert_eq!(path, "registry.invalid/no-such-bundle:1");
            assert!(reason.contains("cannot pull the bundle image"), "{reason}");
            assert!(reason.contains("agentix build --image"), "{reason}");
        }
        other => panic!("{:?}", other.map(|s| s.id().to_owned())),
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "not after the ready timeout"
    );

    let mut huge = cluster.config.clone();
    huge.limits.memory_bytes = Some(64 << 30);
    huge.ready_timeout = Duration::from_secs(3);
    match cluster.provider.create(huge).await {
        Err(ProviderError::ServerStartFailed { reason, .. }) => {
            assert!(reason.contains("Insufficient memory"), "{reason}");
            assert!(reason.contains("lower the sandbox's limits"), "{reason}");
        }
        other => panic!("{:?}", other.map(|s| s.id().to_owned())),
    }
    // An account that may not create Secrets is told which rules it lacks.
    let double = cluster.double.as_ref().unwrap();
    double.forbid_creating("secrets");
    match cluster.provider.create(cluster.config.clone()).await {
        Err(ProviderError::Backend { what, reason }) => {
            assert!(what.contains("HTTP 403"), "{what}");
            assert!(
                reason.contains("cannot create resource \"secrets\""),
                "{reason}"
            );
            assert!(
                reason.contains("secrets: create get list delete"),
                "{reason}"
            );
        }
        other => panic!("{:?}", other.map(|s| s.id().to_owned())),
    }
    // Nothing is left of any attempt.
    let store = double.store();
    for kind in [Kind::Pods, Kind::Secrets, Kind::NetworkPolicies] {
        assert!(
            store.list(kind, NAMESPACE, "", "").is_empty(),
            "{kind:?} left"
        );
    }
    cluster.stop().await;
}

#[tokio::test]
async fn a_pod_past_its_lifetime_ends_and_calls_say_so() {
    let cluster = Cluster::start("lifetime").await;
    let mut config = cluster.config.clone();
    config.container.lifetime = Some(Duration::from_secs(4));
    let sb = cluster.provider.create(config).await.unwrap();
    assert_eq!(sb.remote(agentix_e2e::add, (1, 1)).await.unwrap(), 2);
    let ended = tokio::time::timeout(Duration::from_secs(30), sb.ended().unwrap())
        .await
        .expect("the pod ends at its deadline");
    assert_eq!(ended.kind, ErrorKind::ServerExited);
    assert!(
        ended.message.contains("lifetime") || ended.message.contains("deleted"),
        "{}",
        ended.message
    );
    let e = sb.remote(agentix_e2e::add, (1, 1)).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::ServerExited, "{e:?}");
    sb.delete().await;
    cluster.stop().await;
}

#[tokio::test]
async fn reap_removes_a_dead_hosts_pods_and_leaves_a_live_ones() {
    let cluster = Cluster::start("reap").await;
    let live = cluster
        .provider
        .create_kept(cluster.config.clone())
        .await
        .unwrap();
    // A dead host's pod: the same objects, annotated with an owner whose
    // process has ended (this process's id with another start time).
    let me = agentix::OwnerId::current().to_string();
    let (process, rest) = me.split_once('@').unwrap();
    let pid = process.split('.').next().unwrap();
    let dead_owner = format!("{pid}.1@{rest}");
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(
        cluster.provider.client().clone(),
        cluster.provider.namespace_name(),
    );
    let orphan: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "agentix-kube-orphan",
                     "labels": {LABEL_MANAGED: MANAGED_BY, "agentix.dev/sandbox": "kube-orphan"},
                     "annotations": {ANNOTATION_OWNER: dead_owner}},
        "spec": {"containers": [{"name": "sandbox", "image": cluster.config.container.image.clone().unwrap(),
                                 "command": ["/nothing"]}]},
    }))
    .unwrap();
    pods.create(&Default::default(), &orphan).await.unwrap();
    let reaped = cluster.provider.reap().await.unwrap();
    assert_eq!(reaped, 1);
    assert!(pods.get_opt("agentix-kube-orphan").await.unwrap().is_none());
    assert!(
        pods.get_opt(&format!("agentix-{}", live.id()))
            .await
            .unwrap()
            .is_some(),
        "a live host's pod stays"
    );
    assert_eq!(live.remote(agentix_e2e::add, (3, 4)).await.unwrap(), 7);
    cluster.provider.delete(live.id()).await.unwrap();
    cluster.stop().await;
}

#[tokio::test]
async fn the_fleet_pool_runs_over_pods_unchanged() {
    let cluster = Cluster::start("fleet").await;
    let provider = Arc::new(cluster.provider.clone());
    let pool = Pool::shared(provider.clone(), cluster.config.clone())
        .max_sandboxes(3)
        .reuse(4)
        .progress(ProgressDisplay::Off);
    let tasks: Vec<Task<i64>> = (0..12).map(|i| Task::new(format!("t{i}"), i)).collect();
    let outcomes = pool
        .run(tasks, |sb, i| async move {
            sb.remote(agentix_e2e::add, (i, 1000)).await
        })
        .unwrap()
        .collect_all()
        .await;
    assert_eq!(outcomes.len(), 12);
    for outcome in &outcomes {
        let i: i64 = outcome.task[1..].parse().unwrap();
        assert_eq!(outcome.result, Ok(i + 1000), "{}", outcome.task);
        assert!(outcome.sandbox.as_deref().unwrap().starts_with("kube-"));
    }
    let stats = pool.stats();
    assert_eq!((stats.done, stats.failed, stats.sandboxes), (12, 0, 0));
    assert!(provider.list().is_empty());
    if let Some(double) = &cluster.double {
        assert!(double
            .store()
            .list(Kind::Pods, NAMESPACE, "", "")
            .is_empty());
    }
    cluster.stop().await;
}

#[tokio::test]
async fn through_agent_sandbox_its_controller_makes_the_pod_and_a_cluster_without_it_is_named() {
    let cluster = Cluster::start("agent-sandbox").await;
    let Some(double) = &cluster.double else {
        return cluster.stop().await;
    };
    let provider = cluster
        .provider
        .clone()
        .with_workload(Workload::AgentSandbox);
    let sb = provider.create(cluster.config.clone()).await.unwrap();
    assert_eq!(sb.remote(agentix_e2e::add, (20, 22)).await.unwrap(), 42);
    let name = format!("agentix-{}", sb.id());
    let store = double.store();
    let sandbox = store
        .get(Kind::AgentSandboxes, NAMESPACE, &name)
        .expect("the Sandbox resource");
    assert_eq!(sandbox["metadata"]["labels"][LABEL_MANAGED], MANAGED_BY);
    let template = &sandbox["spec"]["podTemplate"]["spec"];
    assert_eq!(template["automountServiceAccountToken"], false);
    assert_eq!(template["initContainers"][0]["name"], "bundle");
    let pod = store.get(Kind::Pods, NAMESPACE, &name).expect("its pod");
    assert_eq!(pod["metadata"]["ownerReferences"][0]["kind"], "Sandbox");
    let requests = double.requests();
    let made = |path: &str| {
        requests
            .iter()
            .any(|r| r.starts_with(&format!("POST {path}")))
    };
    assert!(made(&format!(
        "/apis/agents.x-k8s.io/v1beta1/namespaces/{NAMESPACE}/sandboxes"
    )));
    assert!(
        !made(&format!("/api/v1/namespaces/{NAMESPACE}/pods")),
        "the controller made the pod, not the provider: {requests:?}"
    );
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_owned();
    provider.delete(sb.id()).await.unwrap();
    assert!(store.get(Kind::AgentSandboxes, NAMESPACE, &name).is_none());
    assert!(store.get(Kind::Pods, NAMESPACE, &name).is_none());
    assert_eq!(cluster.containers_of_pod(&uid).await, 0);

    double.serve_agent_sandbox(false);
    match provider.create(cluster.config.clone()).await {
        Err(ProviderError::Backend { what, reason }) => {
            assert!(what.contains("agent-sandbox"), "{what}");
            assert!(
                reason.contains("kubectl get crd sandboxes.agents.x-k8s.io"),
                "{reason}"
            );
        }
        other => panic!("{:?}", other.map(|s| s.id().to_owned())),
    }
    for kind in [Kind::Pods, Kind::Secrets, Kind::NetworkPolicies] {
        assert!(
            store.list(kind, NAMESPACE, "", "").is_empty(),
            "{kind:?} left"
        );
    }
    cluster.stop().await;
}

#[tokio::test]
async fn sandboxes_at_once_share_one_watch_of_the_api_server() {
    let cluster = Cluster::start("one-watch").await;
    let Some(double) = &cluster.double else {
        return cluster.stop().await;
    };
    let starts = (0..4).map(|_| cluster.provider.create(cluster.config.clone()));
    let sandboxes: Vec<_> = futures_util::future::join_all(starts)
        .await
        .into_iter()
        .map(|s| s.expect("a pod sandbox"))
        .collect();
    for (i, sb) in sandboxes.iter().enumerate() {
        assert_eq!(
            sb.remote(agentix_e2e::add, (i as i64, 1)).await.unwrap(),
            i as i64 + 1
        );
    }
    let watches = double
        .requests()
        .into_iter()
        .filter(|r| r.starts_with("GET ") && r.contains("watch=true"))
        .count();
    assert_eq!(watches, 1, "{:?}", double.requests());
    // Each still learns of its own end: one pod deleted behind its back.
    let victim = &sandboxes[0];
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(cluster.provider.client().clone(), NAMESPACE);
    pods.delete(&format!("agentix-{}", victim.id()), &Default::default())
        .await
        .unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(20), victim.ended().unwrap())
        .await
        .expect("the sandbox learns its pod is gone");
    assert!(ended.message.contains("deleted"), "{}", ended.message);
    assert_eq!(
        sandboxes[1].remote(agentix_e2e::add, (1, 1)).await.unwrap(),
        2
    );
    for sb in sandboxes {
        sb.delete().await;
    }
    cluster.stop().await;
}

#[tokio::test]
async fn a_start_given_up_midway_leaves_nothing_in_the_cluster() {
    let cluster = Cluster::start("given-up").await;
    let Some(double) = &cluster.double else {
        return cluster.stop().await;
    };
    let store = double.store();
    // The start is dropped as soon as its pod exists: mid-way, as a
    // caller's deadline would drop it.
    let start = cluster.provider.create(cluster.config.clone());
    let pod_made = async {
        loop {
            if !store.list(Kind::Pods, NAMESPACE, "", "").is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::select! {
        started = start => panic!("the start finished first: {:?}", started.map(|s| s.id().to_owned())),
        () = pod_made => {}
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let left: Vec<Kind> = [Kind::Pods, Kind::Secrets, Kind::NetworkPolicies]
            .into_iter()
            .filter(|kind| !store.list(*kind, NAMESPACE, "", "").is_empty())
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{left:?} left");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(cluster.provider.list().is_empty());
    cluster.stop().await;
}
