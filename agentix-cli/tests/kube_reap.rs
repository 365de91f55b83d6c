//! `agentix reap --kube-namespace NS` against the Kubernetes API-server
//! double, reached as an operator's kubeconfig names it: a dead host's
//! pod is listed and removed, a live host's stays.

use std::time::Duration;

use agentix_kube_double::ApiServerDouble;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use serde_json::{json, Value};

const NAMESPACE: &str = "cli-test";

/// A pod of the provider's, owned by the host process `owner`.
fn sandbox_pod(name: &str, owner: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name,
                     "labels": {"app.kubernetes.io/managed-by": "agentix",
                                "agentix.dev/sandbox": name},
                     "annotations": {"agentix.dev/owner": owner}},
        "spec": {"containers": [{"name": "sandbox", "image": "agentix-cli-test-absent:0"}]},
    }))
    .unwrap()
}

async fn agentix(kubeconfig: &std::path::Path, markers: &std::path::Path, args: &[&str]) -> Value {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentix"))
        .arg("reap")
        .arg("--markers")
        .arg(markers)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reap_with_a_namespace_removes_a_dead_hosts_pods_only() {
    let docker = bollard::Docker::connect_with_defaults().unwrap();
    let double = ApiServerDouble::start(docker, 1 << 30).await.unwrap();
    let dir = std::env::temp_dir().join(format!("agentix-cli-kube-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\n\
             clusters: [{{name: double, cluster: {{server: \"{}\"}}}}]\n\
             users: [{{name: nobody, user: {{}}}}]\n\
             contexts: [{{name: double, context: {{cluster: double, user: nobody, namespace: {NAMESPACE}}}}}]\n\
             current-context: double\n",
            double.url()
        ),
    )
    .unwrap();
    let markers = dir.join("markers");
    let me = agentix::OwnerId::current().to_string();
    let (process, rest) = me.split_once('@').unwrap();
    let pid = process.split('.').next().unwrap();
    let dead = format!("{pid}.1@{rest}");
    let pods: Api<Pod> = Api::namespaced(
        kube::Client::try_from(double.kube_config(NAMESPACE)).unwrap(),
        NAMESPACE,
    );
    pods.create(
        &Default::default(),
        &sandbox_pod("agentix-kube-dead", &dead),
    )
    .await
    .unwrap();
    pods.create(&Default::default(), &sandbox_pod("agentix-kube-live", &me))
        .await
        .unwrap();

    let listed = agentix(
        &kubeconfig,
        &markers,
        &["--kube-namespace", NAMESPACE, "--dry-run", "--json"],
    )
    .await;
    let ids: Vec<&str> = listed["would_remove"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["agentix-kube-dead"], "{listed}");
    assert!(
        pods.get_opt("agentix-kube-dead").await.unwrap().is_some(),
        "a dry run removes nothing"
    );

    let reaped = agentix(
        &kubeconfig,
        &markers,
        &["--kube-namespace", NAMESPACE, "--json"],
    )
    .await;
    assert_eq!(reaped["kubernetes"], 1, "{reaped}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(pods.get_opt("agentix-kube-dead").await.unwrap().is_none());
    assert!(pods.get_opt("agentix-kube-live").await.unwrap().is_some());

    // Without the flag no cluster is asked.
    let plain = agentix(&kubeconfig, &markers, &["--json"]).await;
    assert_eq!(plain["kubernetes"], Value::Null, "{plain}");
    double.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}
