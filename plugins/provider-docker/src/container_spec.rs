//! The engine's create request for a sandbox: image, the bundle mounted
//! read-only, the server's command line, user, limits, labels, and how the
//! host reaches the server: a Unix socket on the sandbox's
//! [`crate::run_volume`], or its port published on 127.0.0.1 only.

use std::collections::HashMap;
use std::path::Path;

use crate::snapshot_seed::{Seed, SEED_MOUNT};
use agentix::{ContainerNetwork, ContainerSettings, ProviderError, SandboxConfig};
use agentix_bundle_format::{Manifest, MOUNT};
use bollard::models::{ContainerCreateBody, HostConfig, PortBinding};

use crate::container_user::ContainerUser;
use crate::{owner_label, LABEL_OWNER, LABEL_SANDBOX};

/// The port the server listens on inside the container.
pub const SERVER_PORT: u16 = 7000;
/// Where the socket volume appears in the container.
pub const SOCKET_MOUNT: &str = "/agentix-run";
/// The server's socket in that directory.
pub const SOCKET_NAME: &str = "server.sock";
/// The working directory of a container with a read-only root, unless
/// `ContainerSettings::workdir` names another: a tmpfs of the sandbox's.
pub const DEFAULT_WORKDIR: &str = ContainerSettings::DEFAULT_WORKDIR;

/// Host threads gVisor's own kernel runs in a container's cgroup, on top of
/// the sandbox's processes: the engine's pids limit counts them too, and a
/// sandbox under about 70 cannot even start.
pub const GVISOR_OWN_THREADS: i64 = 128;

/// What the engine's pids limit must hold besides the sandbox's processes
/// under `runtime`.
fn runtime_threads(runtime: Option<&str>) -> i64 {
    match runtime {
        Some(crate::GVISOR_RUNTIME) => GVISOR_OWN_THREADS,
        _ => 0,
    }
}

/// Size of `/tmp` and the working directory when there is no memory limit
/// to take half of.
pub const DEFAULT_TMP_BYTES: u64 = ContainerSettings::DEFAULT_TMP_BYTES;

/// How long a container's server waits for a host before it stops, unless
/// the config says otherwise.
pub const DEFAULT_IDLE_EXIT: std::time::Duration = ContainerSettings::DEFAULT_IDLE_EXIT;

/// What a container runs of its bundle.
pub struct BundleEntry {
    /// The program to run, relative to the bundle.
    pub entry: String,
    /// The target triple the bundle's programs are built for.
    pub target: String,
}

/// The entry of the bundle directory `bundle`, from its manifest.
pub fn bundle_entry(bundle: &Path) -> Result<BundleEntry, ProviderError> {
    Manifest::read(bundle)
        .map(|m| BundleEntry {
            entry: m.entry,
            target: m.target,
        })
        .map_err(|reason| ProviderError::BadBundle {
            path: bundle.display().to_string(),
            reason,
        })
}

/// Where a container's `/agentix` comes from.
pub enum BundleSource {
    /// A bundle directory on the engine's machine, bind-mounted.
    Dir(std::path::PathBuf),
    /// A volume filled from a bundle image.
    Volume(String),
}

/// The directories a container's snapshot holds: its working directory
/// and `/tmp`.
pub fn state_dirs(settings: &agentix::ContainerSettings) -> Vec<String> {
    let workdir = match (&settings.workdir, settings.writable_root) {
        (Some(dir), _) => Some(dir.clone()),
        (None, false) => Some(DEFAULT_WORKDIR.to_owned()),
        (None, true) => None,
    };
    workdir
        .into_iter()
        .chain(std::iter::once("/tmp".to_owned()))
        .collect()
}

/// The create request for sandbox `id` from `config`, run as `user`; with
/// `run_volume` (a volume's name) the server listens on a socket there,
/// else on a port published on 127.0.0.1; with `seed`, its server
/// unpacks a snapshot's state before its first worker.
pub fn create_body(
    id: &str,
    entry: &str,
    bundle: &BundleSource,
    config: &SandboxConfig,
    user: &ContainerUser,
    run_volume: Option<&str>,
    seed: Option<&Seed>,
) -> Result<ContainerCreateBody, ProviderError> {
    let settings = &config.container;
    let image = settings
        .image
        .clone()
        .ok_or_else(|| ProviderError::BadBundle {
            path: config.bundle.display().to_string(),
            reason: "no image is configured: a container needs one (SandboxConfig::image)".into(),
        })?;
    let bundle = match bundle {
        BundleSource::Dir(dir) => std::fs::canonicalize(dir)
            .map_err(|e| ProviderError::Io {
                what: format!("cannot resolve the bundle {}", dir.display()),
                source: e,
            })?
            .display()
            .to_string(),
        BundleSource::Volume(name) => name.clone(),
    };
    let listen = match run_volume {
        Some(_) => vec!["--unix".into(), format!("{SOCKET_MOUNT}/{SOCKET_NAME}")],
        None => vec![
            "--host".into(),
            "0.0.0.0".into(),
            "--port".into(),
            SERVER_PORT.to_string(),
        ],
    };
    let mut cmd = vec![format!("{MOUNT}/{entry}"), "serve".into()];
    cmd.extend(listen);
    cmd.extend([
        "--token-stdin".into(),
        "--max-message-bytes".into(),
        config.max_message_bytes.to_string(),
        "--idle-exit-ms".into(),
        settings.idle_exit_or_default().as_millis().to_string(),
    ]);
    // What a snapshot holds: the working directory and /tmp (`HOME`), the
    // container's writable places when its root is read-only.
    let state_dirs = state_dirs(settings);
    for dir in &state_dirs {
        cmd.extend(["--state-dir".to_owned(), dir.clone()]);
    }
    match seed {
        Some(Seed::Stdin(_)) => cmd.push("--seed-stdin".into()),
        Some(Seed::Mounted { file, .. }) => {
            cmd.extend(["--seed-file".into(), format!("{SEED_MOUNT}/{file}")]);
        }
        None => {}
    }
    cmd.extend(config.server_args.iter().cloned());
    let mut env = vec![
        format!("PATH={MOUNT}/bin:/usr/local/bin:/usr/bin:/bin"),
        "HOME=/tmp".into(),
    ];
    env.extend(config.env.iter().map(|(k, v)| format!("{k}={v}")));
    let mut binds = vec![format!("{bundle}:{MOUNT}:ro")];
    for mount in &settings.mounts {
        let mode = if mount.read_only { "ro" } else { "rw" };
        binds.push(format!(
            "{}:{}:{mode}",
            mount.host.display(),
            mount.container
        ));
    }
    if let Some(volume) = run_volume {
        binds.push(format!("{volume}:{SOCKET_MOUNT}:rw"));
    }
    let mut group_add = None;
    if let Some(Seed::Mounted { dir, gid, .. }) = seed {
        binds.push(format!("{}:{SEED_MOUNT}:ro", dir.display()));
        group_add = Some(vec![gid.to_string()]);
    }
    let memory = settings.memory_limit(&config.limits);
    // A read-only root leaves sandbox code /tmp and its working directory.
    let tmp_bytes = settings.tmp_bytes_or_default(&config.limits);
    let mut tmpfs = HashMap::new();
    if user.own_tmp || !settings.writable_root {
        tmpfs.insert(
            "/tmp".to_owned(),
            format!("rw,nosuid,nodev,mode=1777,size={tmp_bytes}"),
        );
    }
    let workdir = match (&settings.workdir, settings.writable_root) {
        (Some(dir), _) => Some(dir.clone()),
        (None, false) => Some(DEFAULT_WORKDIR.to_owned()),
        (None, true) => None,
    };
    if let (Some(dir), false) = (&workdir, settings.writable_root) {
        let owner = user
            .owner
            .map(|(uid, gid)| format!(",uid={uid},gid={gid}"))
            .unwrap_or_default();
        let mode = if user.owner.is_some() { "0700" } else { "1777" };
        tmpfs.insert(
            dir.clone(),
            format!("rw,nosuid,nodev,mode={mode}{owner},size={tmp_bytes}"),
        );
    }
    let port = format!("{SERVER_PORT}/tcp");
    let published = PortBinding {
        host_ip: Some("127.0.0.1".into()),
        host_port: Some(String::new()),
    };
    let network_mode = match &settings.network {
        ContainerNetwork::None => Some("none".to_owned()),
        // The host's channel is the socket: the sandbox needs no network.
        ContainerNetwork::Auto if run_volume.is_some() => Some("none".to_owned()),
        ContainerNetwork::Auto => None,
        ContainerNetwork::Named(name) => Some(name.clone()),
        ContainerNetwork::Bridge => None,
    };
    let (port_bindings, exposed_ports) = match run_volume {
        Some(_) => (None, None),
        None => (
            Some(HashMap::from([(port.clone(), Some(vec![published]))])),
            Some(HashMap::from([(port, HashMap::new())])),
        ),
    };
    let limits = &config.limits;
    let host_config = HostConfig {
        binds: Some(binds),
        tmpfs: (!tmpfs.is_empty()).then_some(tmpfs),
        // The server needs no capability: it runs unprivileged and listens
        // on a socket or an unprivileged port.
        cap_drop: Some(vec!["ALL".to_owned()]),
        cap_add: (!settings.capabilities.is_empty()).then(|| settings.capabilities.clone()),
        security_opt: (!settings.allow_new_privileges)
            .then(|| vec!["no-new-privileges:true".to_owned()]),
        readonly_rootfs: Some(!settings.writable_root),
        runtime: settings.runtime.clone(),
        group_add,
        network_mode,
        port_bindings,
        nano_cpus: settings.cpus.or(limits.cpus).map(|c| (c * 1e9) as i64),
        memory,
        // No swap past the limit: a sandbox over it is OOM-killed, not slowed.
        memory_swap: memory,
        pids_limit: settings
            .pids_limit
            .or(limits.processes.map(|n| n as i64))
            .map(|n| n + runtime_threads(settings.runtime.as_deref())),
        ..Default::default()
    };
    Ok(ContainerCreateBody {
        image: Some(image),
        cmd: Some(cmd),
        env: Some(env),
        user: user.user.clone(),
        working_dir: workdir,
        exposed_ports,
        open_stdin: Some(true),
        stdin_once: Some(true),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        labels: Some(HashMap::from([
            (LABEL_SANDBOX.to_owned(), id.to_owned()),
            (LABEL_OWNER.to_owned(), owner_label()),
        ])),
        host_config: Some(host_config),
        ..Default::default()
    })
}
