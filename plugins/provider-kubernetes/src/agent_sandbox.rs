//! [`Workload`]: what the provider asks the cluster for — a plain pod, or a
//! `Sandbox` of the agent-sandbox project of Kubernetes SIG Apps
//! (`agents.x-k8s.io`), whose controller makes the pod from the template
//! it carries and owns it (stable identity, scheduled shutdown, the
//! cluster's own view of sandboxes). [`sandbox_resource`] is that object,
//! carrying exactly the pod [`crate::pod_spec`] makes.
//!
//! `SandboxClaim`s against a `SandboxWarmPool` are not used: a warm pool's
//! pods are started before anyone claims them, so they cannot have this
//! sandbox's token mounted, and a server that took its token after it
//! started would listen unauthenticated meanwhile.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;

/// The agent-sandbox API group.
pub const AGENT_SANDBOX_GROUP: &str = "agents.x-k8s.io";
/// The version of it the provider speaks.
pub const AGENT_SANDBOX_VERSION: &str = "v1beta1";
/// The annotation the agent-sandbox controller puts on a `Sandbox` whose
/// pod has another name (adopted from a warm pool).
pub const POD_NAME_ANNOTATION: &str = "agents.x-k8s.io/pod-name";

/// What each sandbox is made of in the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Workload {
    /// A pod the provider makes and deletes itself.
    #[default]
    Pod,
    /// A `Sandbox` (`agents.x-k8s.io/v1beta1`), whose controller makes the
    /// pod; needs the agent-sandbox CRDs and controller installed.
    AgentSandbox,
}

/// The `Sandbox` resource type of agent-sandbox.
pub fn sandbox_api_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk(AGENT_SANDBOX_GROUP, AGENT_SANDBOX_VERSION, "Sandbox");
    ApiResource::from_gvk_with_plural(&gvk, "sandboxes")
}

/// A `Sandbox` whose controller makes `pod` (its name, labels,
/// annotations and spec), shut down and deleted after `lifetime_secs`.
pub fn sandbox_resource(pod: &Pod, lifetime_secs: Option<i64>) -> DynamicObject {
    let mut object = DynamicObject::new(
        pod.metadata.name.as_deref().unwrap_or_default(),
        &sandbox_api_resource(),
    );
    object.metadata = pod.metadata.clone();
    let mut spec = json!({
        "podTemplate": {
            "metadata": {
                "labels": pod.metadata.labels.clone().unwrap_or_default(),
                "annotations": pod.metadata.annotations.clone().unwrap_or_default(),
            },
            "spec": pod.spec.clone().unwrap_or_default(),
        },
    });
    if let Some(seconds) = lifetime_secs {
        let at = k8s_openapi::jiff::Timestamp::now()
            + k8s_openapi::jiff::SignedDuration::from_secs(seconds);
        spec["shutdownTime"] = json!(at.to_string());
        spec["shutdownPolicy"] = json!("Delete");
    }
    object.data = json!({ "spec": spec });
    object
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod_spec::{sandbox_objects, PodRequest};
    use crate::PodReach;

    #[test]
    fn the_sandbox_resource_carries_the_providers_pod() {
        let mut config = agentix::SandboxConfig::new("/bundles/hello");
        config.container.image = Some("base:1".into());
        config.container.bundle_image = Some("bundle:1".into());
        let request = PodRequest {
            id: "kube-1",
            token: "t",
            entry: "bin/hello",
            owner: "1.2@b@m",
            reach: PodReach::PortForward,
            template: None,
            owned_by: None,
        };
        let objects = sandbox_objects(&config, &request).unwrap();
        let resource = sandbox_resource(&objects.pod, Some(60));
        let value = serde_json::to_value(&resource).unwrap();
        assert_eq!(value["apiVersion"], "agents.x-k8s.io/v1beta1");
        assert_eq!(value["kind"], "Sandbox");
        assert_eq!(value["metadata"]["name"], "agentix-kube-1");
        assert_eq!(value["metadata"]["labels"]["agentix.dev/sandbox"], "kube-1");
        let template = &value["spec"]["podTemplate"];
        assert_eq!(
            template["metadata"]["labels"]["agentix.dev/sandbox"],
            "kube-1"
        );
        let pod_spec: k8s_openapi::api::core::v1::PodSpec =
            serde_json::from_value(template["spec"].clone()).unwrap();
        assert_eq!(pod_spec, objects.pod.spec.unwrap());
        assert_eq!(value["spec"]["shutdownPolicy"], "Delete");
        let at: k8s_openapi::jiff::Timestamp = value["spec"]["shutdownTime"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let left = at.duration_since(k8s_openapi::jiff::Timestamp::now());
        assert!((55..=60).contains(&left.as_secs()), "{left:?}");
    }
}
