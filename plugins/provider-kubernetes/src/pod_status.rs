//! [`PodProgress`]: what a sandbox pod's status says while it starts (up,
//! still on its way and why, or failed and what to do), and
//! [`ended_reason`]: how a pod that was up ended. Pure, so every case the
//! API server can report is checked in the tests below.

use agentix::ProviderError;
use k8s_openapi::api::core::v1::{ContainerStatus, Event, Pod};

use crate::pod_spec::{BUNDLE_CONTAINER, SANDBOX_CONTAINER};

/// Where a starting pod is.
#[derive(Debug)]
pub enum PodProgress {
    /// Its sandbox container runs: the server is about to listen.
    Running,
    /// On its way; the words say where (scheduling, pulling, installing
    /// the bundle), for the error if it never gets there.
    Waiting(String),
    /// It will not start: the error says why and what to do.
    Failed(ProviderError),
}

/// Where `pod` is, with `events` (the API server's events about it) for
/// the scheduler's and kubelet's own words.
pub fn pod_progress(pod: &Pod, events: &[Event]) -> PodProgress {
    let Some(status) = &pod.status else {
        return PodProgress::Waiting("created, not yet seen by the scheduler".into());
    };
    let statuses = |list: &Option<Vec<ContainerStatus>>| list.clone().unwrap_or_default();
    let all: Vec<ContainerStatus> = statuses(&status.init_container_statuses)
        .into_iter()
        .chain(statuses(&status.container_statuses))
        .collect();
    for container in &all {
        if let Some(failure) = pull_or_config_failure(pod, container) {
            return PodProgress::Failed(failure);
        }
    }
    let install = all.iter().find(|c| c.name == BUNDLE_CONTAINER);
    if let Some(terminated) = install
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.as_ref())
        .filter(|t| t.exit_code != 0)
    {
        return PodProgress::Failed(ProviderError::ServerStartFailed {
            reason: format!(
                "the bundle image's init container failed (exit status {}, {}): is the image \
                 one `agentix build --image` made, for this node's architecture?",
                terminated.exit_code,
                terminated.reason.clone().unwrap_or_default()
            ),
            output: terminated.message.clone().unwrap_or_default(),
        });
    }
    match status.phase.as_deref() {
        Some("Failed") | Some("Succeeded") => {
            return PodProgress::Failed(ProviderError::ServerStartFailed {
                reason: format!(
                    "the pod ended before its server listened: {}",
                    ended_reason(pod)
                ),
                output: String::new(),
            })
        }
        Some("Running") => {
            let sandbox = all.iter().find(|c| c.name == SANDBOX_CONTAINER);
            if sandbox
                .and_then(|c| c.state.as_ref())
                .is_some_and(|s| s.running.is_some())
            {
                return PodProgress::Running;
            }
        }
        _ => {}
    }
    let unschedulable = status.conditions.iter().flatten().find(|c| {
        c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
    });
    if let Some(condition) = unschedulable {
        let scheduler = last_event(events, "FailedScheduling");
        let words = scheduler
            .or(condition.message.clone())
            .unwrap_or_else(|| "no reason given".into());
        return PodProgress::Waiting(format!(
            "the scheduler cannot place the pod: {words} (lower the sandbox's limits, add \
             nodes, or fix the template's node selector and tolerations)"
        ));
    }
    let waiting = all
        .iter()
        .filter_map(|c| Some((c, c.state.as_ref()?.waiting.as_ref()?)))
        .map(|(c, w)| {
            format!(
                "container {} is waiting ({}{})",
                c.name,
                w.reason.clone().unwrap_or_default(),
                w.message
                    .as_ref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            )
        })
        .next();
    PodProgress::Waiting(waiting.unwrap_or_else(|| {
        format!(
            "the pod is {}",
            status.phase.clone().unwrap_or_else(|| "Pending".into())
        )
    }))
}

/// A container that cannot start whatever we wait for: an image the node
/// cannot pull, or a spec kubelet refuses.
fn pull_or_config_failure(pod: &Pod, container: &ContainerStatus) -> Option<ProviderError> {
    let waiting = container.state.as_ref()?.waiting.as_ref()?;
    let reason = waiting.reason.as_deref()?;
    let message = waiting.message.clone().unwrap_or_default();
    let image = if container.image.is_empty() {
        image_of(pod, &container.name)
    } else {
        container.image.clone()
    };
    match reason {
        "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName" | "ErrImageNeverPull" => {
            let what = if container.name == BUNDLE_CONTAINER {
                "the bundle image (push what `agentix build --image` made to a registry the \
                 cluster pulls from)"
            } else {
                "the sandbox's image"
            };
            Some(ProviderError::BadBundle {
                path: image,
                reason: format!(
                    "the cluster cannot pull {what}: {reason}: {message} (is the name right? \
                     a private registry needs imagePullSecrets in the provider's pod template)"
                ),
            })
        }
        "CreateContainerConfigError" | "CreateContainerError" | "RunContainerError" => {
            Some(ProviderError::ServerStartFailed {
                reason: format!(
                    "kubelet cannot start container {}: {reason}: {message}",
                    container.name
                ),
                output: String::new(),
            })
        }
        _ => None,
    }
}

/// How a pod that ran ended, in words: killed for memory, past its
/// deadline, deleted, or the server's exit status.
pub fn ended_reason(pod: &Pod) -> String {
    let Some(status) = &pod.status else {
        return "gone".into();
    };
    if status.reason.as_deref() == Some("DeadlineExceeded") {
        return "its lifetime (activeDeadlineSeconds) ran out".into();
    }
    if status.reason.as_deref() == Some("Evicted") {
        return format!(
            "evicted by its node: {}",
            status.message.clone().unwrap_or_default()
        );
    }
    let sandbox = status
        .container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == SANDBOX_CONTAINER);
    let terminated = sandbox
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.as_ref())
        .or_else(|| {
            sandbox
                .and_then(|c| c.last_state.as_ref())
                .and_then(|s| s.terminated.as_ref())
        });
    match terminated {
        Some(t) if t.reason.as_deref() == Some("OOMKilled") => {
            "its server was killed for memory (OOMKilled): raise the sandbox's memory limit".into()
        }
        Some(t) => format!(
            "exit status {}{}",
            t.exit_code,
            t.reason
                .as_ref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
        None => format!(
            "the pod is {}",
            status.phase.clone().unwrap_or_else(|| "gone".into())
        ),
    }
}

/// Whether `pod` has ended (or is being deleted).
pub fn has_ended(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Failed") | Some("Succeeded")) || pod.metadata.deletion_timestamp.is_some()
}

/// The message of the latest event of `reason`.
fn last_event(events: &[Event], reason: &str) -> Option<String> {
    events
        .iter()
        .rfind(|e| e.reason.as_deref() == Some(reason))
        .and_then(|e| e.message.clone())
}

fn image_of(pod: &Pod, container: &str) -> String {
    let spec = pod.spec.as_ref();
    spec.into_iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .find(|c| c.name == container)
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "agentix-x"},
            "spec": {"containers": [{"name": "sandbox", "image": "base:1"}],
                     "initContainers": [{"name": "bundle", "image": "bundle:1"}]},
            "status": status,
        }))
        .unwrap()
    }

    fn event(reason: &str, message: &str) -> Event {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "e"},
            "involvedObject": {"name": "agentix-x"},
            "reason": reason, "message": message,
        }))
        .unwrap()
    }

    #[test]
    fn a_running_sandbox_container_is_running() {
        let p = pod(
            serde_json::json!({"phase": "Running", "containerStatuses": [
            {"name": "sandbox", "image": "base:1", "imageID": "", "ready": true, "restartCount": 0,
             "state": {"running": {}}}]}),
        );
        assert!(matches!(pod_progress(&p, &[]), PodProgress::Running));
    }

    #[test]
    fn an_image_that_cannot_be_pulled_fails_at_once_and_names_the_image() {
        let p = pod(
            serde_json::json!({"phase": "Pending", "initContainerStatuses": [
            {"name": "bundle", "image": "bundle:1", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}]}),
        );
        match pod_progress(&p, &[]) {
            PodProgress::Failed(ProviderError::BadBundle { path, reason }) => {
                assert_eq!(path, "bundle:1");
                assert!(reason.contains("agentix build --image"), "{reason}");
                assert!(reason.contains("not found"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_unschedulable_pod_waits_with_the_schedulers_words() {
        let p = pod(serde_json::json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/3 nodes are available"}]}));
        let events = [event(
            "FailedScheduling",
            "0/3 nodes are available: 3 Insufficient memory.",
        )];
        match pod_progress(&p, &events) {
            PodProgress::Waiting(why) => {
                assert!(why.contains("3 Insufficient memory"), "{why}");
                assert!(why.contains("lower the sandbox's limits"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_failed_install_or_an_early_exit_fails_the_start() {
        let p = pod(
            serde_json::json!({"phase": "Failed", "initContainerStatuses": [
            {"name": "bundle", "image": "bundle:1", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"terminated": {"exitCode": 127, "reason": "Error"}}}]}),
        );
        match pod_progress(&p, &[]) {
            PodProgress::Failed(ProviderError::ServerStartFailed { reason, .. }) => {
                assert!(reason.contains("exit status 127"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        let p = pod(serde_json::json!({"phase": "Failed", "containerStatuses": [
            {"name": "sandbox", "image": "base:1", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}]}));
        match pod_progress(&p, &[]) {
            PodProgress::Failed(ProviderError::ServerStartFailed { reason, .. }) => {
                assert!(reason.contains("exit status 2 (Error)"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_pod_killed_for_memory_says_so() {
        let p = pod(serde_json::json!({"phase": "Failed", "containerStatuses": [
            {"name": "sandbox", "image": "base:1", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}));
        assert!(ended_reason(&p).contains("killed for memory"));
        assert!(has_ended(&p));
        let p = pod(serde_json::json!({"phase": "Failed", "reason": "DeadlineExceeded"}));
        assert!(ended_reason(&p).contains("activeDeadlineSeconds"));
    }
}
