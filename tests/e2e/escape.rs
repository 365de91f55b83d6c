//! The escape suite: what code in a sandbox tries, and what it gets, on an
//! isolated local sandbox (the default tier) and on a container with the
//! Docker provider's defaults. The attempts and the table of what each tier
//! promises are in [`escape_attempts`]; gVisor's column is proved by the
//! `gvisor` target. `.ci/run` runs this suite as root and its local tests
//! again as `nobody` (`tests/run-unprivileged escape:local`): a root host
//! limits sandboxes by cgroup, any other host by rlimits in the sandbox's
//! user namespace.

#[allow(dead_code)]
mod docker_support;
// The gVisor tier's half of the attempts runs in the `gvisor` target.
#[allow(dead_code)]
mod escape_attempts;
mod support;

use agentix::{
    Isolation, LocalProvider, NamespaceIsolation, Provider, SandboxConfig, SandboxLimits,
};
use agentix_provider_docker::DockerProvider;
use docker_support::{bundle_dir, tools_image, TOOLS_IMAGE};
use escape_attempts::{self as attempts, Tier};
use support::{bundle_path, sandbox, sandbox_with};

/// Limits small enough that the containment checks end quickly.
fn small_limits() -> SandboxLimits {
    SandboxLimits {
        processes: Some(64),
        memory_bytes: Some(256 << 20),
        cpus: None,
    }
}

/// B's launcher, the init that is PID 1 inside, and the server under it,
/// as the host numbers them.
fn local_server_pids(sb: &agentix::Sandbox) -> Vec<u32> {
    let launcher = sb.server_pid().unwrap();
    let mut pids = vec![launcher];
    let mut at = launcher;
    for _ in 0..3 {
        at = agentix::process::first_child(at).expect("the server runs under its launcher");
        pids.push(at);
    }
    pids
}

#[tokio::test]
async fn a_local_sandbox_keeps_its_code_from_the_hosts_files_environment_network_and_kernel() {
    attempts::set_host_secret();
    let sb = sandbox().await;
    attempts::files(&sb, Tier::Local).await;
    attempts::environment(&sb).await;
    attempts::network(&sb).await;
    attempts::kernel(&sb, Tier::Local).await;
    attempts::orphans(&sb).await;
    sb.delete().await;
}

#[tokio::test]
async fn a_local_sandbox_cannot_reach_another_sandbox_or_the_host_process() {
    let a = sandbox().await;
    let b = sandbox().await;
    let b_dir = b.local_dir().expect("a local sandbox").to_owned();
    attempts::other_sandbox_files(&a, &b_dir.join("host.sock")).await;
    attempts::other_server(&a, &b_dir.join("host.sock"), Some(b.addr())).await;
    let mut pids = local_server_pids(&b);
    pids.push(std::process::id());
    attempts::other_processes(&a, &pids).await;
    let (_, comm) = attempts::sh(&a, "cat /proc/1/cmdline | tr '\\0' ' '").await;
    assert!(comm.contains("serve"), "PID 1 is {comm}");
    // B still serves, untouched.
    assert_eq!(b.remote(agentix_e2e::add, (2, 3)).await.unwrap(), 5);
    a.delete().await;
    b.delete().await;
}

#[tokio::test]
async fn a_local_sandbox_contains_a_fork_bomb_its_orphans_a_memory_hog_and_a_full_tmp() {
    let settings = NamespaceIsolation {
        tmp_bytes: 8 << 20,
        ..NamespaceIsolation::default()
    };
    let config = SandboxConfig::new(bundle_path())
        .limits(small_limits())
        .isolation(Isolation::Namespaces(settings));
    let sb = sandbox_with(config).await;
    attempts::fill_tmp(&sb, 8).await;
    attempts::fill_workdir(&sb, 16, false).await;
    attempts::memory(&sb).await;
    attempts::fork_bomb(&sb, 64).await;
    sb.delete().await;
}

/// A container sandbox of the test image with the provider's defaults and
/// `limits`.
async fn container(
    provider: &DockerProvider,
    bundle: &std::path::Path,
    limits: SandboxLimits,
) -> agentix::Sandbox {
    let config = SandboxConfig::new(bundle).image(TOOLS_IMAGE).limits(limits);
    provider.session(config).await.expect("a container sandbox")
}

#[tokio::test]
async fn a_container_keeps_its_code_from_the_host_other_sandboxes_and_the_kernel() {
    attempts::set_host_secret();
    let provider = DockerProvider::connect().expect("a Docker engine");
    tools_image(&provider).await;
    let bundle = bundle_dir("escape");
    let a = container(&provider, &bundle, SandboxLimits::default()).await;
    let b = container(&provider, &bundle, SandboxLimits::default()).await;
    let b_pids = provider.host_pids(b.id()).await;
    attempts::container_pair(&a, &b, b_pids, Tier::Container).await;
    a.delete().await;
    b.delete().await;
    let _ = std::fs::remove_dir_all(bundle);
}

#[tokio::test]
async fn a_container_contains_a_fork_bomb_its_orphans_a_memory_hog_and_a_full_tmp() {
    let provider = DockerProvider::connect().expect("a Docker engine");
    tools_image(&provider).await;
    let bundle = bundle_dir("escape-limits");
    let sb = container(&provider, &bundle, small_limits()).await;
    attempts::fill_tmp(&sb, 128).await;
    attempts::fill_workdir(&sb, 256, true).await;
    attempts::memory(&sb).await;
    attempts::fork_bomb(&sb, 64).await;
    sb.delete().await;
    let _ = std::fs::remove_dir_all(bundle);
}

#[tokio::test]
async fn a_deleted_local_sandbox_leaves_no_process_directory_staging_root_or_cgroup() {
    let sb = sandbox().await;
    let dir = sb.local_dir().unwrap().to_owned();
    let processes = local_server_pids(&sb);
    let worker = support::worker_pid_from_health(&sb).await;
    assert!(
        worker < 64 && !processes.contains(&worker),
        "the worker ({worker}) is numbered inside the sandbox"
    );
    let name = dir.file_name().unwrap().to_owned();
    let root = support::staging_root(&dir);
    assert!(root.is_dir(), "{} staged while it runs", root.display());
    sb.delete().await;
    assert!(!root.exists(), "{} outlived delete", root.display());
    for pid in processes {
        assert!(
            !agentix::process::is_alive(pid),
            "process {pid} outlived delete"
        );
    }
    assert!(!dir.exists(), "{} outlived delete", dir.display());
    for controller in ["memory", "pids", "cpu", ""] {
        let cgroup = std::path::Path::new("/sys/fs/cgroup")
            .join(controller)
            .join(&name);
        assert!(!cgroup.exists(), "{} outlived delete", cgroup.display());
    }
}

#[tokio::test]
async fn a_sandbox_whose_launcher_was_killed_leaves_no_staging_root_directory_or_process_after_delete(
) {
    let sb = sandbox().await;
    let dir = sb.local_dir().unwrap().to_owned();
    let root = support::staging_root(&dir);
    let processes = local_server_pids(&sb);
    assert!(root.is_dir(), "{} staged while it runs", root.display());
    // The launcher is what removes the root when the sandbox ends; killed,
    // it cannot.
    let launcher = processes[0];
    agentix::process::signal_pid(launcher, libc::SIGKILL);
    let gone_by = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while agentix::process::is_alive(launcher) && std::time::Instant::now() < gone_by {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        !agentix::process::is_alive(launcher),
        "the launcher survived SIGKILL"
    );
    sb.delete().await;
    assert!(!root.exists(), "{} outlived delete", root.display());
    assert!(!dir.exists(), "{} outlived delete", dir.display());
    for pid in processes {
        assert!(
            !agentix::process::is_alive(pid),
            "process {pid} outlived delete"
        );
    }
}

#[tokio::test]
async fn a_local_sandbox_as_root_on_a_root_host_is_refused_saying_how_to_opt_out() {
    use agentix::Provider;
    let as_host = agentix::LocalProvider::new()
        .create(SandboxConfig::new(bundle_path()).run_as(agentix::RunAs::HostUser))
        .await;
    // Another host's own user is unprivileged: its isolated sandbox runs.
    if !agentix::host_is_root() {
        let sb = as_host.expect("a host that is not root runs isolated as itself");
        assert_eq!(sb.remote(agentix_e2e::add, (2, 3)).await.unwrap(), 5);
        sb.delete().await;
        return;
    }
    // A root host asked to run the sandbox as root: namespaces would not
    // contain it, so the provider refuses before starting anything.
    {
        let err = as_host
            .map(|_| ())
            .expect_err("root in namespaces is refused");
        let text = err.to_string();
        assert!(
            matches!(err, agentix::ProviderError::IsolationRefused { .. }),
            "{text}"
        );
        assert!(text.contains("Isolation::None"), "{text}");
    }
}

/// Set for the child test that plays a host on a kernel refusing user
/// namespaces.
const REFUSING_KERNEL: &str = "AGENTIX_ESCAPE_REFUSING_KERNEL";

/// The host of `a_kernel_that_refuses_...`: it refuses itself and its
/// children new namespaces (the isolated tier's own seccomp filter), as a
/// kernel without unprivileged user namespaces would.
#[tokio::test]
#[ignore = "run by a_kernel_that_refuses_user_namespaces_gets_an_error_saying_so_and_how_to_opt_out"]
async fn host_on_a_refusing_kernel() {
    std::env::var(REFUSING_KERNEL).expect("run by the refusing-kernel test");
    agentix::server::syscall_filter::deny_kernel_attack_surface().expect("the filter applies");
    let err = LocalProvider::new()
        .create(SandboxConfig::new(bundle_path()))
        .await
        .map(|_| ())
        .expect_err("no namespace can be made");
    let text = err.to_string();
    assert!(
        matches!(err, agentix::ProviderError::IsolationRefused { .. }),
        "{text}"
    );
    assert!(text.contains("user namespaces"), "says why: {text}");
    assert!(
        text.contains("Isolation::None"),
        "says how to opt out: {text}"
    );
    // The plain tier, asked for, still runs.
    let plain = sandbox_with(support::plain(SandboxConfig::new(bundle_path()))).await;
    assert_eq!(plain.remote(agentix_e2e::add, (2, 3)).await.unwrap(), 5);
    plain.delete().await;
    println!("refused as it should be");
}

#[test]
fn a_kernel_that_refuses_user_namespaces_gets_an_error_saying_so_and_how_to_opt_out() {
    let out = support::child_test("host_on_a_refusing_kernel")
        .env(REFUSING_KERNEL, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("refused as it should be"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_books_security_table_is_this_suites() {
    let table = attempts::readme_table();
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src/security.md"),
    )
    .unwrap();
    let start = "<!-- escape-suite-table -->\n";
    let end = "<!-- /escape-suite-table -->";
    let inside = readme
        .split_once(start)
        .and_then(|(_, rest)| rest.split_once(end))
        .map(|(table, _)| table);
    assert_eq!(
        inside,
        Some(table.as_str()),
        "the book's security table (docs/src/security.md, between {start:?} and {end:?}) \
         must read:\n{table}"
    );
}
