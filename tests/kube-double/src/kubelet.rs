//! [`Kubelet`]: the double's one node. It schedules a pod (refusing one
//! that asks for more memory than the node has, in the scheduler's
//! words), makes its volumes (an `emptyDir` or a Secret is a directory of
//! this machine, as kubelet's are), runs its init containers one after
//! another and then its containers as Docker containers of this
//! machine's engine, and writes what happens into the pod's status and
//! events, as kubelet does: image pulls that fail (the double pulls
//! nothing: an image must be in the engine), exits, OOM kills, the pod's
//! `activeDeadlineSeconds`. A pod that a deny-all network policy selects
//! gets no network at all.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, InspectContainerOptions, ListContainersOptions, RemoveContainerOptions,
    WaitContainerOptions,
};
use bollard::Docker;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, Pod, PodCondition, Secret,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;

use crate::store::{Kind, Store};

/// Label on every container the double starts: the double's id.
pub const LABEL_DOUBLE: &str = "agentix.kube-double";
/// Label naming the pod (its uid) a container belongs to.
pub const LABEL_POD: &str = "agentix.kube-double.pod";

/// The node: a Docker engine, and where pod volumes live.
pub struct Kubelet {
    /// The engine the containers run on.
    pub docker: Docker,
    /// The double's objects.
    pub store: Store,
    /// Where each pod's volumes are made (`<root>/<pod uid>/<volume>`).
    pub root: PathBuf,
    /// Memory the node has for pods' requests, in bytes.
    pub node_memory: i64,
    /// The double's id, on every container.
    pub double_id: String,
}

/// What stops a pod before its main container ends.
enum Stop {
    Exited,
    Deadline,
}

impl Kubelet {
    /// Runs pod `name` of `namespace` (stored already) until it ends.
    pub async fn run(&self, namespace: String, name: String) {
        let Some(pod) = self.pod(&namespace, &name) else {
            return;
        };
        if let Err(words) = self.run_pod(&namespace, &name, &pod).await {
            tracing::debug!(pod = %name, %words, "the double's pod did not run");
        }
    }

    fn pod(&self, namespace: &str, name: &str) -> Option<Pod> {
        let value = self.store.get(Kind::Pods, namespace, name)?;
        serde_json::from_value(value).ok()
    }

    async fn run_pod(&self, namespace: &str, name: &str, pod: &Pod) -> Result<(), String> {
        let spec = pod.spec.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let update = |change: &dyn Fn(&mut Pod)| {
            self.store.update_pod(namespace, name, |pod| change(pod));
        };
        // The scheduler.
        let requested: i64 = spec
            .containers
            .iter()
            .filter_map(|c| {
                c.resources
                    .as_ref()?
                    .requests
                    .as_ref()?
                    .get("memory")
                    .cloned()
            })
            .filter_map(|q| bytes_of(&q.0))
            .sum();
        if requested > self.node_memory {
            let message = "0/1 nodes are available: 1 Insufficient memory. preemption: 0/1 nodes \
                           are available: 1 No preemption victims found for incoming pod.";
            update(&|pod| {
                let status = pod.status.get_or_insert_with(Default::default);
                status.phase = Some("Pending".into());
                status.conditions = Some(vec![condition(
                    "PodScheduled",
                    "False",
                    Some("Unschedulable"),
                    message,
                )]);
            });
            self.store
                .record_event(namespace, name, "FailedScheduling", message);
            return Err("unschedulable".into());
        }
        update(&|pod| {
            if let Some(spec) = pod.spec.as_mut() {
                spec.node_name = Some("double-node".into());
            }
            let status = pod.status.get_or_insert_with(Default::default);
            status.phase = Some("Pending".into());
            status.host_ip = Some("127.0.0.1".into());
            status.conditions = Some(vec![condition("PodScheduled", "True", None, "")]);
        });
        self.store.record_event(
            namespace,
            name,
            "Scheduled",
            "Successfully assigned to double-node",
        );

        let volumes = self.make_volumes(namespace, name, &uid, pod).await?;
        let no_network = self.denied_all_traffic(namespace, pod);
        let security = spec.security_context.clone().unwrap_or_default();

        for (index, init) in spec.init_containers.iter().flatten().enumerate() {
            let image = init.image.clone().unwrap_or_default();
            if !self.has_image(&image).await {
                self.image_missing(namespace, name, init, true).await;
                return Err(format!("no image {image}"));
            }
            let id = self
                .start_container(&uid, init, &volumes, &security, no_network)
                .await?;
            let status = running_status(init, &image);
            update(&|pod| {
                let list = pod.status.get_or_insert_with(Default::default);
                let statuses = list.init_container_statuses.get_or_insert_with(Vec::new);
                statuses.truncate(index);
                statuses.push(status.clone());
            });
            let (code, oom) = self.wait_exit(&id).await;
            let ended = terminated_status(init, &image, code, oom);
            update(&|pod| {
                let status = pod.status.get_or_insert_with(Default::default);
                if let Some(s) = status
                    .init_container_statuses
                    .as_mut()
                    .and_then(|l| l.get_mut(index))
                {
                    *s = ended.clone();
                }
                if code != 0 {
                    status.phase = Some("Failed".into());
                }
            });
            if code != 0 {
                return Err(format!("init container {} failed", init.name));
            }
        }

        let mut started = Vec::new();
        for container in &spec.containers {
            let image = container.image.clone().unwrap_or_default();
            if !self.has_image(&image).await {
                self.image_missing(namespace, name, container, false).await;
                return Err(format!("no image {image}"));
            }
            let id = self
                .start_container(&uid, container, &volumes, &security, no_network)
                .await?;
            started.push((id, container.clone(), image));
        }
        let statuses: Vec<ContainerStatus> = started
            .iter()
            .map(|(_, c, image)| running_status(c, image))
            .collect();
        let pod_ip = if no_network {
            None
        } else {
            self.address_of(&started[0].0).await
        };
        update(&|pod| {
            let status = pod.status.get_or_insert_with(Default::default);
            status.phase = Some("Running".into());
            status.container_statuses = Some(statuses.clone());
            status.pod_ip = pod_ip.clone();
            status.conditions = Some(vec![
                condition("PodScheduled", "True", None, ""),
                condition("Ready", "True", None, ""),
            ]);
        });

        let (main_id, main, main_image) = started[0].clone();
        let deadline = spec
            .active_deadline_seconds
            .map(|s| Duration::from_secs(s.max(0) as u64))
            .unwrap_or(Duration::MAX / 4);
        let stop = tokio::select! {
            _ = self.wait_exit(&main_id) => Stop::Exited,
            _ = tokio::time::sleep(deadline) => Stop::Deadline,
        };
        match stop {
            Stop::Exited => {
                let (code, oom) = self.exit_of(&main_id).await;
                let ended = terminated_status(&main, &main_image, code, oom);
                update(&|pod| {
                    let status = pod.status.get_or_insert_with(Default::default);
                    status.phase = Some(if code == 0 { "Succeeded" } else { "Failed" }.into());
                    if let Some(first) = status
                        .container_statuses
                        .as_mut()
                        .and_then(|l| l.first_mut())
                    {
                        *first = ended.clone();
                    }
                });
            }
            Stop::Deadline => {
                for (id, _, _) in &started {
                    let _ = self
                        .docker
                        .kill_container(id, None::<bollard::query_parameters::KillContainerOptions>)
                        .await;
                }
                let message = format!(
                    "Pod was active on the node longer than the specified deadline ({}s)",
                    deadline.as_secs()
                );
                update(&|pod| {
                    let status = pod.status.get_or_insert_with(Default::default);
                    status.phase = Some("Failed".into());
                    status.reason = Some("DeadlineExceeded".into());
                    status.message = Some(message.clone());
                });
                self.store
                    .record_event(namespace, name, "DeadlineExceeded", &message);
            }
        }
        Ok(())
    }

    /// Makes pod `uid`'s volumes: a directory each (an `emptyDir` open to
    /// all, a Secret's files readable by the pod's `fsGroup`); returns
    /// volume name → (directory, always read-only).
    async fn make_volumes(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        pod: &Pod,
    ) -> Result<BTreeMap<String, (PathBuf, bool)>, String> {
        let spec = pod.spec.clone().unwrap_or_default();
        let fs_group = spec.security_context.as_ref().and_then(|s| s.fs_group);
        let mut made = BTreeMap::new();
        for volume in spec.volumes.iter().flatten() {
            let dir = self.root.join(uid).join(&volume.name);
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            if volume.empty_dir.is_some() {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
                    .map_err(|e| e.to_string())?;
                made.insert(volume.name.clone(), (dir, false));
            } else if let Some(source) = &volume.secret {
                let secret_name = source.secret_name.clone().unwrap_or_default();
                let secret = self.wait_secret(namespace, &secret_name).await;
                let Some(secret) = secret else {
                    let message = format!("secret \"{secret_name}\" not found");
                    self.store.record_event(
                        namespace,
                        name,
                        "FailedMount",
                        &format!(
                            "MountVolume.SetUp failed for volume \"{}\" : {message}",
                            volume.name
                        ),
                    );
                    self.store.update_pod(namespace, name, |pod| {
                        let status = pod.status.get_or_insert_with(Default::default);
                        status.container_statuses = Some(
                            spec.containers
                                .iter()
                                .map(|c| waiting_status(c, "CreateContainerConfigError", &message))
                                .collect(),
                        );
                    });
                    return Err(message);
                };
                let mode = source.default_mode.unwrap_or(0o644) as u32;
                for (key, bytes) in secret.data.unwrap_or_default() {
                    let file = dir.join(&key);
                    std::fs::write(&file, &bytes.0).map_err(|e| e.to_string())?;
                    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode))
                        .map_err(|e| e.to_string())?;
                    if let Some(group) = fs_group {
                        std::os::unix::fs::chown(&file, None, Some(group as u32))
                            .map_err(|e| e.to_string())?;
                    }
                }
                made.insert(volume.name.clone(), (dir, true));
            }
        }
        Ok(made)
    }

    /// Secret `name`, waited for a little as kubelet retries a mount.
    async fn wait_secret(&self, namespace: &str, name: &str) -> Option<Secret> {
        for _ in 0..25 {
            if let Some(value) = self.store.get(Kind::Secrets, namespace, name) {
                return serde_json::from_value(value).ok();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        None
    }

    /// Whether a policy of the namespace selects the pod and lets nothing
    /// out (no egress rule).
    fn denied_all_traffic(&self, namespace: &str, pod: &Pod) -> bool {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        self.store
            .list(Kind::NetworkPolicies, namespace, "", "")
            .into_iter()
            .filter_map(|v| serde_json::from_value::<NetworkPolicy>(v).ok())
            .filter_map(|p| p.spec)
            .any(|spec| {
                let selected = spec
                    .pod_selector
                    .and_then(|s| s.match_labels)
                    .unwrap_or_default()
                    .iter()
                    .all(|(k, v)| labels.get(k) == Some(v));
                let egress_policed = spec
                    .policy_types
                    .unwrap_or_default()
                    .iter()
                    .any(|t| t == "Egress");
                selected && egress_policed && spec.egress.unwrap_or_default().is_empty()
            })
    }

    async fn has_image(&self, image: &str) -> bool {
        self.docker.inspect_image(image).await.is_ok()
    }

    /// What kubelet says when it cannot pull `container`'s image.
    async fn image_missing(&self, namespace: &str, name: &str, container: &Container, init: bool) {
        let image = container.image.clone().unwrap_or_default();
        let message = format!(
            "Failed to pull image \"{image}\": rpc error: code = NotFound desc = failed to pull \
             and unpack image \"{image}\": not found"
        );
        self.store.record_event(namespace, name, "Failed", &message);
        let status = waiting_status(container, "ErrImagePull", &message);
        self.store.update_pod(namespace, name, |pod| {
            let s = pod.status.get_or_insert_with(Default::default);
            if init {
                s.init_container_statuses = Some(vec![status]);
            } else {
                s.container_statuses = Some(vec![status]);
            }
        });
    }

    /// Creates and starts `container` of pod `uid`; returns its id.
    async fn start_container(
        &self,
        uid: &str,
        container: &Container,
        volumes: &BTreeMap<String, (PathBuf, bool)>,
        pod_security: &k8s_openapi::api::core::v1::PodSecurityContext,
        no_network: bool,
    ) -> Result<String, String> {
        let security = container.security_context.clone().unwrap_or_default();
        let uid_of = security.run_as_user.or(pod_security.run_as_user);
        let gid_of = security.run_as_group.or(pod_security.run_as_group);
        let user = uid_of.map(|u| format!("{u}:{}", gid_of.unwrap_or(u)));
        let mut binds = Vec::new();
        for mount in container.volume_mounts.iter().flatten() {
            let Some((dir, always_ro)) = volumes.get(&mount.name) else {
                return Err(format!("no volume {}", mount.name));
            };
            let ro = *always_ro || mount.read_only == Some(true);
            binds.push(format!(
                "{}:{}:{}",
                dir.display(),
                mount.mount_path,
                if ro { "ro" } else { "rw" }
            ));
        }
        let capabilities = security.capabilities.clone().unwrap_or_default();
        let limits = container
            .resources
            .as_ref()
            .and_then(|r| r.limits.clone())
            .unwrap_or_default();
        let memory = limits.get("memory").and_then(|q| bytes_of(&q.0));
        let cpus = limits.get("cpu").and_then(|q| millicpus_of(&q.0));
        let body = ContainerCreateBody {
            image: container.image.clone(),
            entrypoint: container.command.clone(),
            cmd: container.args.clone(),
            env: Some(
                container
                    .env
                    .iter()
                    .flatten()
                    .map(|e| format!("{}={}", e.name, e.value.clone().unwrap_or_default()))
                    .collect(),
            ),
            working_dir: container.working_dir.clone(),
            user,
            labels: Some(
                [
                    (LABEL_DOUBLE.to_owned(), self.double_id.clone()),
                    (LABEL_POD.to_owned(), uid.to_owned()),
                ]
                .into(),
            ),
            host_config: Some(HostConfig {
                binds: Some(binds),
                readonly_rootfs: security.read_only_root_filesystem,
                cap_drop: capabilities.drop.clone(),
                cap_add: capabilities.add.clone(),
                security_opt: (security.allow_privilege_escalation == Some(false))
                    .then(|| vec!["no-new-privileges:true".to_owned()]),
                group_add: pod_security.fs_group.map(|g| vec![g.to_string()]),
                memory,
                memory_swap: memory,
                nano_cpus: cpus.map(|m| m * 1_000_000),
                network_mode: no_network.then(|| "none".to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let suffix: String = uid
            .chars()
            .rev()
            .take(12)
            .collect::<String>()
            .chars()
            .rev()
            .collect();
        let options = CreateContainerOptions {
            name: Some(format!(
                "kube-double-{}-{}-{}",
                self.double_id, suffix, container.name
            )),
            platform: String::new(),
        };
        let created = self
            .docker
            .create_container(Some(options), body)
            .await
            .map_err(|e| e.to_string())?;
        self.docker
            .start_container(
                &created.id,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(created.id)
    }

    /// Waits until container `id` has exited; its exit code and whether it
    /// was killed for memory.
    async fn wait_exit(&self, id: &str) -> (i32, bool) {
        let options = WaitContainerOptions {
            condition: "not-running".into(),
        };
        let mut wait = self.docker.wait_container(id, Some(options));
        while wait.next().await.is_some() {}
        self.exit_of(id).await
    }

    async fn exit_of(&self, id: &str) -> (i32, bool) {
        let inspected = self
            .docker
            .inspect_container(id, None::<InspectContainerOptions>)
            .await;
        let state = inspected.ok().and_then(|i| i.state);
        let code = state.as_ref().and_then(|s| s.exit_code).unwrap_or(-1) as i32;
        let oom = state.and_then(|s| s.oom_killed).unwrap_or(false);
        (code, oom)
    }

    async fn address_of(&self, id: &str) -> Option<String> {
        let inspected = self
            .docker
            .inspect_container(id, None::<InspectContainerOptions>)
            .await
            .ok()?;
        let networks = inspected.network_settings?.networks?;
        networks
            .values()
            .find_map(|n| n.ip_address.clone().filter(|ip| !ip.is_empty()))
    }

    /// The host pid of pod `uid`'s first container, for entering its
    /// network namespace.
    pub async fn pid_of(&self, uid: &str, container: &str) -> Option<i64> {
        let options = ListContainersOptions {
            all: false,
            filters: Some([("label".to_owned(), vec![format!("{LABEL_POD}={uid}")])].into()),
            ..Default::default()
        };
        let list = self.docker.list_containers(Some(options)).await.ok()?;
        let wanted = format!("-{container}");
        let id = list
            .into_iter()
            .find(|c| c.names.iter().flatten().any(|n| n.ends_with(&wanted)))?
            .id?;
        let inspected = self
            .docker
            .inspect_container(&id, None::<InspectContainerOptions>)
            .await
            .ok()?;
        inspected.state?.pid.filter(|p| *p > 0)
    }

    /// Removes pod `uid`'s containers and volumes.
    pub async fn remove(&self, uid: &str) {
        self.remove_labelled(&format!("{LABEL_POD}={uid}")).await;
        let _ = std::fs::remove_dir_all(self.root.join(uid));
    }

    /// Removes every container the double started.
    pub async fn remove_all(&self) {
        self.remove_labelled(&format!("{LABEL_DOUBLE}={}", self.double_id))
            .await;
        let _ = std::fs::remove_dir_all(&self.root);
    }

    async fn remove_labelled(&self, label: &str) {
        let options = ListContainersOptions {
            all: true,
            filters: Some([("label".to_owned(), vec![label.to_owned()])].into()),
            ..Default::default()
        };
        let Ok(list) = self.docker.list_containers(Some(options)).await else {
            return;
        };
        let removals = list.into_iter().filter_map(|c| c.id).map(|id| async move {
            let options = RemoveContainerOptions {
                force: true,
                v: true,
                ..Default::default()
            };
            let _ = self.docker.remove_container(&id, Some(options)).await;
        });
        futures_util::future::join_all(removals).await;
    }
}

fn condition(type_: &str, status: &str, reason: Option<&str>, message: &str) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.map(str::to_owned),
        message: (!message.is_empty()).then(|| message.to_owned()),
        ..Default::default()
    }
}

fn base_status(container: &Container, image: &str) -> ContainerStatus {
    ContainerStatus {
        name: container.name.clone(),
        image: image.to_owned(),
        image_id: String::new(),
        ready: false,
        restart_count: 0,
        ..Default::default()
    }
}

fn running_status(container: &Container, image: &str) -> ContainerStatus {
    ContainerStatus {
        ready: true,
        started: Some(true),
        state: Some(ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..Default::default()
        }),
        ..base_status(container, image)
    }
}

fn terminated_status(container: &Container, image: &str, code: i32, oom: bool) -> ContainerStatus {
    let reason = match (oom, code) {
        (true, _) => "OOMKilled",
        (false, 0) => "Completed",
        _ => "Error",
    };
    ContainerStatus {
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                reason: Some(reason.into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..base_status(container, image)
    }
}

fn waiting_status(container: &Container, reason: &str, message: &str) -> ContainerStatus {
    ContainerStatus {
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.into()),
                message: Some(message.into()),
            }),
            ..Default::default()
        }),
        ..base_status(container, container.image.as_deref().unwrap_or(""))
    }
}

/// Bytes of a memory quantity (`1073741824`, `512Mi`, `1G`).
pub fn bytes_of(quantity: &str) -> Option<i64> {
    let units: [(&str, i64); 8] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
    ];
    for (suffix, factor) in units {
        if let Some(number) = quantity.strip_suffix(suffix) {
            return number.parse::<i64>().ok().map(|n| n * factor);
        }
    }
    quantity.parse().ok()
}

/// Thousandths of a CPU of a CPU quantity (`1500m`, `2`, `0.5`).
fn millicpus_of(quantity: &str) -> Option<i64> {
    match quantity.strip_suffix('m') {
        Some(milli) => milli.parse().ok(),
        None => quantity.parse::<f64>().ok().map(|c| (c * 1000.0) as i64),
    }
}
