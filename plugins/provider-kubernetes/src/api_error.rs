//! [`api_error`]: what a failed API request means for a user, with what
//! to do: the permissions the provider needs, a namespace that does not
//! exist, a quota, a cluster that cannot be reached.

use agentix::ProviderError;

/// The permissions the provider's service account (or user) needs in its
/// namespace, as a Role's rules; the book prints the whole manifest.
pub const RBAC_RULES: &str = "pods: create get list watch delete; pods/portforward: create get; \
                              secrets: create get list delete; events: list; \
                              networkpolicies (networking.k8s.io): create list delete; \
                              with Workload::AgentSandbox, sandboxes (agents.x-k8s.io): \
                              create list delete";

/// The error for `what` (`"create the sandbox's pod"`) failing with `e`.
pub fn api_error(what: &str, e: &kube::Error) -> ProviderError {
    match e {
        kube::Error::Api(status) => {
            let hint = match status.code {
                401 => "the cluster did not accept the credentials (an expired token? \
                        `kubectl auth whoami` tells)"
                    .to_owned(),
                403 if status.message.contains("exceeded quota") => {
                    "a ResourceQuota of the namespace is used up: fewer sandboxes at once, \
                     smaller limits, or a larger quota"
                        .to_owned()
                }
                403 => format!(
                    "the provider's account lacks a permission; it needs, in its namespace: \
                     {RBAC_RULES}"
                ),
                404 => "the namespace does not exist (KubernetesProvider::namespace, or the \
                        kubeconfig context's namespace)"
                    .to_owned(),
                409 => "an object of that name exists already".to_owned(),
                422 => "the API server refused the object as invalid".to_owned(),
                _ => String::new(),
            };
            ProviderError::Backend {
                what: format!(
                    "the Kubernetes API server refused to {what} (HTTP {})",
                    status.code
                ),
                reason: if hint.is_empty() {
                    status.message.clone()
                } else {
                    format!("{}: {hint}", status.message)
                },
            }
        }
        _ => ProviderError::Backend {
            what: format!("cannot {what}: the Kubernetes API server cannot be reached"),
            reason: e.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, message: &str) -> kube::Error {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": code, "message": message, "reason": "Forbidden",
        }))
        .unwrap();
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn forbidden_names_the_permissions_and_quota_says_quota() {
        let e = api_error(
            "create the sandbox's pod",
            &status(403, "pods is forbidden"),
        );
        let text = e.to_string();
        assert!(text.contains("HTTP 403"), "{text}");
        assert!(text.contains("pods/portforward: create get"), "{text}");
        let e = api_error(
            "create the sandbox's pod",
            &status(403, "exceeded quota: compute, requested: pods=1"),
        );
        assert!(e.to_string().contains("ResourceQuota"), "{e}");
        let e = api_error(
            "create the sandbox's pod",
            &status(404, "namespaces \"x\" not found"),
        );
        assert!(e.to_string().contains("namespace does not exist"), "{e}");
    }
}
