//! [`sandbox_objects`]: what the provider asks the API server to make for
//! one sandbox — the Secret holding its token, the pod (the user's
//! template, extended), and, for a sandbox with no network, the network
//! policy that denies its pod all traffic. Pure: every field is decided
//! here and checked field by field in the tests below.
//!
//! The pod: an init container runs the bundle's image (`agentix build
//! --image`, which holds only `/agentix`) and has the bundle copy itself
//! (`BUNDLE install`, [`agentix::bundle::INSTALL_ROLE`]) into an
//! `emptyDir` the sandbox container mounts read-only at `/agentix`. The
//! token is a file of the mounted Secret (`--token-file`), so it shows in
//! no command line, environment or pod spec. The pod runs as a non-root
//! uid with no capability, no privilege escalation, the runtime's default
//! seccomp profile, a read-only root, `emptyDir`s for its working
//! directory and `/tmp`, and no service account token: sandbox code
//! cannot talk to the API server.

use std::collections::BTreeMap;

use agentix::{ContainerNetwork, ContainerSettings, ProviderError, SandboxConfig};
use agentix_bundle_format::MOUNT;
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, EnvVar, Pod, PodSecurityContext, PodSpec,
    ResourceRequirements, SeccompProfile, Secret, SecretVolumeSource, SecurityContext, Volume,
    VolumeMount,
};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicySpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::ByteString;

use crate::PodReach;

/// The port the server listens on in the pod.
pub const SERVER_PORT: u16 = 7000;
/// The name of the sandbox's container in its pod.
pub const SANDBOX_CONTAINER: &str = "sandbox";
/// The name of the init container that installs the bundle.
pub const BUNDLE_CONTAINER: &str = "bundle";
/// Where the init container writes the bundle.
const BUNDLE_INSTALL_DIR: &str = "/bundle";
/// Where the token's Secret is mounted, and the key of its one file.
pub const TOKEN_MOUNT: &str = "/agentix-secret";
/// The key of the token in the sandbox's Secret.
pub const TOKEN_KEY: &str = "token";
/// The uid (and gid) a pod runs as unless the config names one: not root,
/// and no uid of the image's.
pub const DEFAULT_UID: i64 = 65532;

/// Label every object of the provider carries.
pub const LABEL_MANAGED: &str = "app.kubernetes.io/managed-by";
/// Its value.
pub const MANAGED_BY: &str = "agentix";
/// Label naming the sandbox an object belongs to.
pub const LABEL_SANDBOX: &str = "agentix.dev/sandbox";
/// Annotation naming the host process that owns an object (an
/// `agentix::OwnerId`, which a label's characters cannot hold).
pub const ANNOTATION_OWNER: &str = "agentix.dev/owner";
/// Label a host pod carries so that a sandbox with no network still lets
/// it in (a host in the cluster reaching pods by their address).
pub const LABEL_HOST: &str = "agentix.dev/host";

/// What one sandbox is made of in the cluster.
#[derive(Debug, Clone)]
pub struct SandboxObjects {
    /// The token, mounted into the pod.
    pub secret: Secret,
    /// The pod.
    pub pod: Pod,
    /// The policy that cuts the pod off, for a sandbox with no network.
    pub network_policy: Option<NetworkPolicy>,
}

/// What the provider adds to a config to make sandbox `id`'s objects.
pub struct PodRequest<'a> {
    /// The sandbox's id: its objects' name is `agentix-<id>`.
    pub id: &'a str,
    /// The token its server accepts.
    pub token: &'a str,
    /// The bundle's entry program, relative to the bundle.
    pub entry: &'a str,
    /// The owner annotation (see `agentix::OwnerId`).
    pub owner: &'a str,
    /// How the host reaches the server.
    pub reach: PodReach,
    /// The user's pod, extended (its metadata, spec and a container named
    /// `sandbox` are kept); `None` for a bare pod.
    pub template: Option<&'a Pod>,
    /// The object (the host's own pod) that owns everything made, so the
    /// cluster removes it when the host goes.
    pub owned_by: Option<&'a OwnerReference>,
}

/// The name of sandbox `id`'s pod, Secret and policy.
pub fn object_name(id: &str) -> String {
    format!("agentix-{id}")
}

/// The objects of `request` for `config`.
pub fn sandbox_objects(
    config: &SandboxConfig,
    request: &PodRequest<'_>,
) -> Result<SandboxObjects, ProviderError> {
    let settings = &config.container;
    let refuse = |reason: String| ProviderError::BadBundle {
        path: config.bundle.display().to_string(),
        reason,
    };
    let image = settings.image.clone().ok_or_else(|| {
        refuse("no image is configured: a pod needs one (SandboxConfig::image)".into())
    })?;
    let bundle_image = settings.bundle_image.clone().ok_or_else(|| {
        refuse(
            "no bundle image is configured: a pod gets its bundle from an image the cluster \
             can pull (`agentix build --image NAME`, pushed to your registry, then \
             SandboxConfig::bundle_image)"
                .into(),
        )
    })?;
    if !settings.mounts.is_empty() {
        return Err(refuse(
            "host mounts do not reach a pod: add volumes to the provider's pod template instead"
                .into(),
        ));
    }
    if let ContainerNetwork::Named(name) = &settings.network {
        return Err(refuse(format!(
            "network `{name}`: a pod's network is the cluster's; use ContainerNetwork::None or \
             Bridge (the cluster's pod network), or a policy of your own"
        )));
    }
    let (uid, gid) = pod_user(settings.user.as_deref()).map_err(refuse)?;
    let name = object_name(request.id);
    let labels = BTreeMap::from([
        (LABEL_MANAGED.to_owned(), MANAGED_BY.to_owned()),
        (LABEL_SANDBOX.to_owned(), request.id.to_owned()),
    ]);
    let annotations = BTreeMap::from([(ANNOTATION_OWNER.to_owned(), request.owner.to_owned())]);
    let meta = |extra_labels: Option<&BTreeMap<String, String>>,
                extra_annotations: Option<&BTreeMap<String, String>>| {
        let mut all_labels = extra_labels.cloned().unwrap_or_default();
        all_labels.extend(labels.clone());
        let mut all_annotations = extra_annotations.cloned().unwrap_or_default();
        all_annotations.extend(annotations.clone());
        ObjectMeta {
            name: Some(name.clone()),
            labels: Some(all_labels),
            annotations: Some(all_annotations),
            owner_references: request.owned_by.map(|owner| vec![owner.clone()]),
            ..Default::default()
        }
    };

    let secret = Secret {
        metadata: meta(None, None),
        data: Some(BTreeMap::from([(
            TOKEN_KEY.to_owned(),
            ByteString(request.token.as_bytes().to_vec()),
        )])),
        type_: Some("Opaque".into()),
        immutable: Some(true),
        ..Default::default()
    };

    let memory = settings.memory_limit(&config.limits);
    let cpus = settings.cpus.or(config.limits.cpus);
    let tmp_bytes = settings.tmp_bytes_or_default(&config.limits);
    let workdir = settings
        .workdir
        .clone()
        .unwrap_or_else(|| ContainerSettings::DEFAULT_WORKDIR.to_owned());

    let host = match request.reach {
        // kubelet's port-forward dials the pod's loopback: nothing else
        // in the cluster can reach the server at all.
        PodReach::PortForward => "127.0.0.1",
        PodReach::PodAddress => "0.0.0.0",
    };
    let mut args = vec![
        "serve".to_owned(),
        "--host".into(),
        host.into(),
        "--port".into(),
        SERVER_PORT.to_string(),
        "--token-file".into(),
        format!("{TOKEN_MOUNT}/{TOKEN_KEY}"),
        "--max-message-bytes".into(),
        config.max_message_bytes.to_string(),
        "--idle-exit-ms".into(),
        settings.idle_exit_or_default().as_millis().to_string(),
    ];
    for dir in [workdir.as_str(), "/tmp"] {
        args.extend(["--state-dir".to_owned(), dir.to_owned()]);
    }
    args.extend(config.server_args.iter().cloned());

    let mut env = vec![
        env_var("PATH", &format!("{MOUNT}/bin:/usr/local/bin:/usr/bin:/bin")),
        env_var("HOME", "/tmp"),
    ];
    env.extend(config.env.iter().map(|(k, v)| env_var(k, v)));

    let security = SecurityContext {
        allow_privilege_escalation: Some(settings.allow_new_privileges),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: (!settings.capabilities.is_empty()).then(|| settings.capabilities.clone()),
        }),
        read_only_root_filesystem: Some(!settings.writable_root),
        run_as_non_root: Some(true),
        run_as_user: Some(uid),
        run_as_group: Some(gid),
        seccomp_profile: Some(runtime_default_seccomp()),
        ..Default::default()
    };
    let mut resources = ResourceRequirements::default();
    let mut limits = BTreeMap::new();
    if let Some(memory) = memory {
        limits.insert("memory".to_owned(), Quantity(memory.to_string()));
    }
    if let Some(cpus) = cpus {
        limits.insert(
            "cpu".to_owned(),
            Quantity(format!("{}m", (cpus * 1000.0).ceil() as u64)),
        );
    }
    if !limits.is_empty() {
        // Requests equal to limits: the scheduler places the pod where
        // what it may use is free, and it is not the first evicted.
        resources.requests = Some(limits.clone());
        resources.limits = Some(limits);
    }

    let template_spec = request
        .template
        .and_then(|t| t.spec.clone())
        .unwrap_or_default();
    let template_meta = request.template.map(|t| t.metadata.clone());
    let template_container = template_spec
        .containers
        .iter()
        .find(|c| c.name == SANDBOX_CONTAINER)
        .cloned();
    let mut sandbox = template_container.unwrap_or_default();
    sandbox.name = SANDBOX_CONTAINER.into();
    sandbox.image = Some(image);
    sandbox.command = Some(vec![format!("{MOUNT}/{}", request.entry)]);
    sandbox.args = Some(args);
    sandbox.env = Some(
        sandbox
            .env
            .take()
            .unwrap_or_default()
            .into_iter()
            .chain(env)
            .collect(),
    );
    sandbox.working_dir = Some(workdir.clone());
    sandbox.security_context = Some(security.clone());
    if sandbox.resources.is_none() || memory.is_some() || cpus.is_some() {
        sandbox.resources = Some(resources);
    }
    sandbox.stdin = Some(false);
    let mut mounts = sandbox.volume_mounts.take().unwrap_or_default();
    mounts.extend([
        volume_mount("bundle", MOUNT, true),
        volume_mount("token", TOKEN_MOUNT, true),
        volume_mount("tmp", "/tmp", false),
        volume_mount("workdir", &workdir, false),
    ]);
    sandbox.volume_mounts = Some(mounts);

    let install = Container {
        name: BUNDLE_CONTAINER.into(),
        image: Some(bundle_image),
        command: Some(vec![
            format!("{MOUNT}/{}", request.entry),
            agentix::bundle::INSTALL_ROLE.into(),
            MOUNT.into(),
            BUNDLE_INSTALL_DIR.into(),
        ]),
        security_context: Some(SecurityContext {
            read_only_root_filesystem: Some(true),
            ..security
        }),
        volume_mounts: Some(vec![volume_mount("bundle", BUNDLE_INSTALL_DIR, false)]),
        ..Default::default()
    };

    let sized_dir = |name: &str, bytes: Option<u64>| Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: None,
            size_limit: bytes.map(|b| Quantity(b.to_string())),
        }),
        ..Default::default()
    };
    let mut volumes = template_spec.volumes.clone().unwrap_or_default();
    volumes.extend([
        sized_dir("bundle", None),
        Volume {
            name: "token".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(name.clone()),
                // Readable by the pod's group (fsGroup), no one else.
                default_mode: Some(0o440),
                optional: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        },
        sized_dir("tmp", Some(tmp_bytes)),
        sized_dir("workdir", Some(tmp_bytes)),
    ]);

    let mut containers: Vec<Container> = template_spec
        .containers
        .iter()
        .filter(|c| c.name != SANDBOX_CONTAINER)
        .cloned()
        .collect();
    containers.insert(0, sandbox);
    let mut init_containers = template_spec.init_containers.clone().unwrap_or_default();
    init_containers.insert(0, install);

    let spec = PodSpec {
        containers,
        init_containers: Some(init_containers),
        volumes: Some(volumes),
        // A sandbox that ends is over: its host makes a new one.
        restart_policy: Some("Never".into()),
        automount_service_account_token: Some(
            template_spec
                .automount_service_account_token
                .unwrap_or(false),
        ),
        enable_service_links: Some(false),
        runtime_class_name: settings
            .runtime
            .clone()
            .or(template_spec.runtime_class_name.clone()),
        active_deadline_seconds: settings
            .lifetime
            .map(|l| l.as_secs().max(1) as i64)
            .or(template_spec.active_deadline_seconds),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(uid),
            run_as_group: Some(gid),
            fs_group: Some(gid),
            seccomp_profile: Some(runtime_default_seccomp()),
            ..template_spec.security_context.clone().unwrap_or_default()
        }),
        termination_grace_period_seconds: Some(
            template_spec.termination_grace_period_seconds.unwrap_or(5),
        ),
        ..template_spec
    };
    let pod = Pod {
        metadata: meta(
            template_meta.as_ref().and_then(|m| m.labels.as_ref()),
            template_meta.as_ref().and_then(|m| m.annotations.as_ref()),
        ),
        spec: Some(spec),
        status: None,
    };

    let no_network = matches!(
        settings.network,
        ContainerNetwork::None | ContainerNetwork::Auto
    );
    let network_policy = no_network.then(|| deny_all(meta(None, None), request.id));
    Ok(SandboxObjects {
        secret,
        pod,
        network_policy,
    })
}

/// A policy that selects sandbox `id`'s pod and lets nothing out and
/// nothing in but host pods (labelled [`LABEL_HOST`]) on the server's
/// port: no egress rule at all, so not even DNS.
fn deny_all(metadata: ObjectMeta, id: &str) -> NetworkPolicy {
    use k8s_openapi::api::networking::v1::{
        NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    };
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    NetworkPolicy {
        metadata,
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(LABEL_SANDBOX.to_owned(), id.to_owned())])),
                ..Default::default()
            }),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![NetworkPolicyPeer {
                    pod_selector: Some(LabelSelector {
                        match_labels: Some(BTreeMap::from([(
                            LABEL_HOST.to_owned(),
                            "true".to_owned(),
                        )])),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ports: Some(vec![NetworkPolicyPort {
                    port: Some(IntOrString::Int(SERVER_PORT.into())),
                    protocol: Some("TCP".into()),
                    ..Default::default()
                }]),
            }]),
            egress: Some(Vec::new()),
        }),
    }
}

/// The uid and gid of `user` (`uid` or `uid:gid`, numbers: a pod's
/// security context has no names), or the default.
fn pod_user(user: Option<&str>) -> Result<(i64, i64), String> {
    let Some(user) = user else {
        return Ok((DEFAULT_UID, DEFAULT_UID));
    };
    let number = |part: &str| {
        part.parse::<i64>()
            .map_err(|_| format!("user `{user}`: a pod runs as a numeric uid[:gid], not a name"))
    };
    let (uid, gid) = match user.split_once(':') {
        Some((uid, gid)) => (number(uid)?, number(gid)?),
        None => (number(user)?, number(user)?),
    };
    if uid == 0 {
        return Err(format!(
            "user `{user}`: a sandbox pod never runs as root (the restricted Pod Security profile)"
        ));
    }
    Ok((uid, gid))
}

fn runtime_default_seccomp() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".into(),
        localhost_profile: None,
    }
}

fn env_var(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

fn volume_mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: Some(read_only),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> SandboxConfig {
        let mut config = SandboxConfig::new("/bundles/hello");
        config.container.image = Some("registry.example/base:1".into());
        config.container.bundle_image = Some("registry.example/hello-bundle:7".into());
        config
    }

    fn request(template: Option<&Pod>) -> PodRequest<'_> {
        PodRequest {
            id: "kube-0123abcd",
            token: "t0ken",
            entry: "bin/hello",
            owner: "42.7@boot@machine",
            reach: PodReach::PortForward,
            template,
            owned_by: None,
        }
    }

    /// The objects as the API server reads them: serialised, then read
    /// back with k8s-openapi's own types.
    fn round_trip(objects: &SandboxObjects) -> (Secret, Pod, Option<NetworkPolicy>) {
        let secret = serde_json::to_value(&objects.secret).unwrap();
        let pod = serde_json::to_value(&objects.pod).unwrap();
        let policy = objects
            .network_policy
            .as_ref()
            .map(|p| serde_json::to_value(p).unwrap());
        (
            serde_json::from_value(secret).unwrap(),
            serde_json::from_value(pod).unwrap(),
            policy.map(|p| serde_json::from_value(p).unwrap()),
        )
    }

    #[test]
    fn the_token_is_in_the_secret_and_nowhere_in_the_pod() {
        let objects = sandbox_objects(&config(), &request(None)).unwrap();
        let (secret, pod, _) = round_trip(&objects);
        assert_eq!(
            secret.metadata.name.as_deref(),
            Some("agentix-kube-0123abcd")
        );
        let data = secret.data.unwrap();
        assert_eq!(data[TOKEN_KEY].0, b"t0ken");
        assert_eq!(secret.immutable, Some(true));
        let spec_text = serde_json::to_string(&pod).unwrap();
        assert!(!spec_text.contains("t0ken"), "{spec_text}");
        let spec = pod.spec.unwrap();
        let token = spec
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == "token");
        let source = token.unwrap().secret.unwrap();
        assert_eq!(source.secret_name.as_deref(), Some("agentix-kube-0123abcd"));
        assert_eq!(source.default_mode, Some(0o440));
        let args = spec.containers[0].args.clone().unwrap();
        let at = args.iter().position(|a| a == "--token-file").unwrap();
        assert_eq!(args[at + 1], "/agentix-secret/token");
    }

    #[test]
    fn the_pod_is_restricted_and_cannot_reach_the_api_server() {
        let objects = sandbox_objects(&config(), &request(None)).unwrap();
        let (_, pod, _) = round_trip(&objects);
        let spec = pod.spec.unwrap();
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert_eq!(spec.enable_service_links, Some(false));
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        let pod_security = spec.security_context.unwrap();
        assert_eq!(pod_security.run_as_non_root, Some(true));
        assert_eq!(pod_security.run_as_user, Some(DEFAULT_UID));
        assert_eq!(pod_security.fs_group, Some(DEFAULT_UID));
        assert_eq!(
            pod_security.seccomp_profile.unwrap().type_,
            "RuntimeDefault"
        );
        for container in spec
            .containers
            .iter()
            .chain(spec.init_containers.as_ref().unwrap())
        {
            let security = container.security_context.clone().unwrap();
            assert_eq!(
                security.allow_privilege_escalation,
                Some(false),
                "{}",
                container.name
            );
            assert_eq!(security.read_only_root_filesystem, Some(true));
            assert_eq!(security.run_as_non_root, Some(true));
            let caps = security.capabilities.unwrap();
            assert_eq!(caps.drop, Some(vec!["ALL".to_owned()]));
            assert_eq!(caps.add, None);
            assert_eq!(security.seccomp_profile.unwrap().type_, "RuntimeDefault");
        }
    }

    #[test]
    fn the_bundle_image_installs_itself_into_the_volume_the_server_runs_from() {
        let objects = sandbox_objects(&config(), &request(None)).unwrap();
        let (_, pod, _) = round_trip(&objects);
        let spec = pod.spec.unwrap();
        let init = &spec.init_containers.unwrap()[0];
        assert_eq!(init.name, BUNDLE_CONTAINER);
        assert_eq!(
            init.image.as_deref(),
            Some("registry.example/hello-bundle:7")
        );
        assert_eq!(
            init.command.clone().unwrap(),
            ["/agentix/bin/hello", "install", "/agentix", "/bundle"]
        );
        let init_mount = &init.volume_mounts.as_ref().unwrap()[0];
        assert_eq!(
            (init_mount.name.as_str(), init_mount.mount_path.as_str()),
            ("bundle", "/bundle")
        );
        assert_eq!(init_mount.read_only, Some(false));
        let sandbox = &spec.containers[0];
        assert_eq!(sandbox.name, SANDBOX_CONTAINER);
        assert_eq!(sandbox.image.as_deref(), Some("registry.example/base:1"));
        assert_eq!(sandbox.command.clone().unwrap(), ["/agentix/bin/hello"]);
        let mounts = sandbox.volume_mounts.clone().unwrap();
        let bundle = mounts.iter().find(|m| m.name == "bundle").unwrap();
        assert_eq!(
            (bundle.mount_path.as_str(), bundle.read_only),
            ("/agentix", Some(true))
        );
        let args = sandbox.args.clone().unwrap();
        assert_eq!(
            args[..5],
            ["serve", "--host", "127.0.0.1", "--port", "7000"]
        );
        assert!(args.windows(2).any(|w| w == ["--state-dir", "/workspace"]));
        assert!(args.windows(2).any(|w| w == ["--state-dir", "/tmp"]));
        assert_eq!(sandbox.working_dir.as_deref(), Some("/workspace"));
        let volumes = spec.volumes.unwrap();
        let names: Vec<&str> = volumes.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["bundle", "token", "tmp", "workdir"]);
        // The default memory limit (4 GiB) halved.
        let tmp = volumes[2].empty_dir.clone().unwrap();
        assert_eq!(tmp.size_limit, Some(Quantity((2u64 << 30).to_string())));
        let mut unlimited = config();
        unlimited.limits = agentix::SandboxLimits::none();
        let objects = sandbox_objects(&unlimited, &request(None)).unwrap();
        let volumes = objects.pod.spec.unwrap().volumes.unwrap();
        let tmp = volumes[2].empty_dir.clone().unwrap();
        assert_eq!(
            tmp.size_limit,
            Some(Quantity(ContainerSettings::DEFAULT_TMP_BYTES.to_string()))
        );
    }

    #[test]
    fn limits_lifetime_runtime_and_labels_reach_the_pod() {
        let mut config = config();
        config.limits.memory_bytes = Some(512 << 20);
        config.limits.cpus = Some(1.5);
        config.container.runtime = Some("gvisor".into());
        config.container.lifetime = Some(std::time::Duration::from_secs(600));
        config.container.user = Some("1234:5678".into());
        let mut request = request(None);
        request.reach = PodReach::PodAddress;
        let objects = sandbox_objects(&config, &request).unwrap();
        let (_, pod, _) = round_trip(&objects);
        let labels = pod.metadata.labels.unwrap();
        assert_eq!(labels[LABEL_MANAGED], MANAGED_BY);
        assert_eq!(labels[LABEL_SANDBOX], "kube-0123abcd");
        assert_eq!(
            pod.metadata.annotations.unwrap()[ANNOTATION_OWNER],
            "42.7@boot@machine"
        );
        let spec = pod.spec.unwrap();
        assert_eq!(spec.runtime_class_name.as_deref(), Some("gvisor"));
        assert_eq!(spec.active_deadline_seconds, Some(600));
        let resources = spec.containers[0].resources.clone().unwrap();
        let limits = resources.limits.unwrap();
        assert_eq!(limits["memory"], Quantity((512u64 << 20).to_string()));
        assert_eq!(limits["cpu"], Quantity("1500m".into()));
        assert_eq!(resources.requests.unwrap(), limits);
        let security = spec.security_context.unwrap();
        assert_eq!(
            (security.run_as_user, security.run_as_group),
            (Some(1234), Some(5678))
        );
        let args = spec.containers[0].args.clone().unwrap();
        assert_eq!(args[2], "0.0.0.0");
        // Half the memory for /tmp, so filling it is a full disk, not an OOM kill.
        let tmp = spec.volumes.unwrap()[2].empty_dir.clone().unwrap();
        assert_eq!(tmp.size_limit, Some(Quantity((256u64 << 20).to_string())));
    }

    #[test]
    fn no_network_is_a_policy_that_denies_everything_but_host_pods() {
        let objects = sandbox_objects(&config(), &request(None)).unwrap();
        let (_, _, policy) = round_trip(&objects);
        let spec = policy.unwrap().spec.unwrap();
        let selector = spec.pod_selector.unwrap().match_labels.unwrap();
        assert_eq!(selector[LABEL_SANDBOX], "kube-0123abcd");
        assert_eq!(
            spec.policy_types.unwrap(),
            ["Ingress".to_owned(), "Egress".to_owned()]
        );
        assert_eq!(spec.egress, Some(Vec::new()));
        let ingress = &spec.ingress.unwrap()[0];
        let from = ingress.from.clone().unwrap()[0]
            .pod_selector
            .clone()
            .unwrap();
        assert_eq!(from.match_labels.unwrap()[LABEL_HOST], "true");
        let mut bridged = config();
        bridged.container.network = ContainerNetwork::Bridge;
        let objects = sandbox_objects(&bridged, &request(None)).unwrap();
        assert!(objects.network_policy.is_none());
    }

    #[test]
    fn a_template_is_extended_not_replaced() {
        use k8s_openapi::api::core::v1::Toleration;
        let template = Pod {
            metadata: ObjectMeta {
                labels: Some(BTreeMap::from([("team".into(), "rl".into())])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_selector: Some(BTreeMap::from([("pool".into(), "sandboxes".into())])),
                tolerations: Some(vec![Toleration {
                    key: Some("sandbox".into()),
                    operator: Some("Exists".into()),
                    ..Default::default()
                }]),
                service_account_name: Some("agents".into()),
                containers: vec![Container {
                    name: SANDBOX_CONTAINER.into(),
                    env: Some(vec![env_var("TEAM", "rl")]),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: None,
        };
        let objects = sandbox_objects(&config(), &request(Some(&template))).unwrap();
        let (_, pod, _) = round_trip(&objects);
        assert_eq!(pod.metadata.labels.as_ref().unwrap()["team"], "rl");
        assert_eq!(pod.metadata.labels.unwrap()[LABEL_MANAGED], MANAGED_BY);
        let spec = pod.spec.unwrap();
        assert_eq!(spec.node_selector.unwrap()["pool"], "sandboxes");
        assert_eq!(spec.tolerations.unwrap()[0].key.as_deref(), Some("sandbox"));
        assert_eq!(spec.service_account_name.as_deref(), Some("agents"));
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert_eq!(spec.containers.len(), 1);
        let env = spec.containers[0].env.clone().unwrap();
        assert!(env.iter().any(|e| e.name == "TEAM"));
        assert!(env.iter().any(|e| e.name == "HOME"));
    }

    #[test]
    fn an_owner_reference_reaches_every_object() {
        let owner = OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: "host-7".into(),
            uid: "uid-host-7".into(),
            ..Default::default()
        };
        let mut request = request(None);
        request.owned_by = Some(&owner);
        let objects = sandbox_objects(&config(), &request).unwrap();
        let (secret, pod, policy) = round_trip(&objects);
        for meta in [secret.metadata, pod.metadata, policy.unwrap().metadata] {
            assert_eq!(meta.owner_references, Some(vec![owner.clone()]));
        }
    }

    #[test]
    fn what_a_pod_cannot_do_is_refused_with_the_way_out() {
        let mut no_bundle_image = config();
        no_bundle_image.container.bundle_image = None;
        let e = sandbox_objects(&no_bundle_image, &request(None)).unwrap_err();
        assert!(e.to_string().contains("agentix build --image"), "{e}");
        let mut root = config();
        root.container.user = Some("0".into());
        let e = sandbox_objects(&root, &request(None)).unwrap_err();
        assert!(e.to_string().contains("never runs as root"), "{e}");
        let mut named = config();
        named.container.user = Some("agent".into());
        let e = sandbox_objects(&named, &request(None)).unwrap_err();
        assert!(e.to_string().contains("numeric uid"), "{e}");
        let mut mounted = config();
        mounted.container.mounts.push(agentix::ContainerMount {
            host: "/data".into(),
            container: "/data".into(),
            read_only: true,
        });
        let e = sandbox_objects(&mounted, &request(None)).unwrap_err();
        assert!(e.to_string().contains("pod template"), "{e}");
    }
}
