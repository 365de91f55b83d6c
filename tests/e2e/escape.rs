//! The escape suite: what code in an isolated local sandbox (the default
//! tier) tries, and what it gets.
//!
//! Each attempt runs from inside a sandbox, as a shell command through the
//! bash plugin or as a remote function (`try_reach`), against a real host
//! secret, service or sandbox the test made. [`CELLS`] is the list; the
//! README's security table is rendered from it, and a test fails when the
//! two differ. `.ci/run` runs this suite as root and again as `nobody`
//! (`tests/run-unprivileged escape`): a root host limits sandboxes by
//! cgroup, any other host by rlimits in the sandbox's user namespace.

mod support;

use std::time::Duration;

use agentix::{Isolation, NamespaceIsolation, Sandbox, SandboxConfig, SandboxLimits};
use agentix_bash::BashOptions;
use support::{bundle_path, sandbox, sandbox_with};

/// Every attempt and what the isolated local tier lets it do; the README's
/// security table, row by row.
const CELLS: &[(&str, &str)] = &[
    (
        READ_HOST_FILES,
        "refused: only /bin, /etc, /lib*, /sbin, /usr are there, read-only",
    ),
    (WRITE_OUTSIDE, "refused: read-only file system"),
    (READ_SHADOW, "refused: permission denied"),
    (OTHER_SANDBOX_FILES, "refused: not there"),
    (OTHER_PROCESSES, "refused: only its own processes exist"),
    (
        HOST_ENVIRONMENT,
        "refused: only `BASE_ENV` and what the config passes",
    ),
    (HOST_LOOPBACK, "refused: its 127.0.0.1 is its own"),
    (HOST_ABSTRACT_SOCKET, "refused: connection refused"),
    (ANY_ROUTE, "refused: no route but `lo`"),
    (DOCKER_SOCKET, "refused: not there"),
    (MOUNT, "refused: operation not permitted"),
    (
        FORK_BOMB,
        "contained: `SandboxLimits::processes`; the server serves on",
    ),
    (
        MEMORY,
        "contained: `SandboxLimits::memory_bytes`; a new worker serves on",
    ),
    (
        FILL_TMP,
        "contained: `/tmp` is `NamespaceIsolation::tmp_bytes` of tmpfs",
    ),
];

const READ_HOST_FILES: &str = "read the host's files (`$HOME`, the checkout)";
const WRITE_OUTSIDE: &str = "write outside its directory and `/tmp`";
const READ_SHADOW: &str = "read `/etc/shadow`";
const OTHER_SANDBOX_FILES: &str = "read another sandbox's directory";
const OTHER_PROCESSES: &str = "see, signal or read another sandbox's or the host's processes";
const HOST_ENVIRONMENT: &str = "read the host's environment variables";
const HOST_LOOPBACK: &str = "connect to a service on the host's 127.0.0.1";
const HOST_ABSTRACT_SOCKET: &str = "connect to the host's abstract Unix sockets";
const ANY_ROUTE: &str = "reach any other address (metadata service, LAN, internet)";
const DOCKER_SOCKET: &str = "reach the Docker socket";
const MOUNT: &str = "mount a filesystem";
const FORK_BOMB: &str = "start processes without end";
const MEMORY: &str = "use memory without end";
const FILL_TMP: &str = "fill `/tmp`";

/// Runs `command` in `sb` with `sh`, returning (exit code, stdout + stderr).
async fn sh(sb: &Sandbox, command: &str) -> (Option<i32>, String) {
    let out = sb
        .remote(agentix_bash::run, (command.to_owned(), BashOptions::new()))
        .await
        .unwrap_or_else(|e| panic!("`{command}` could not run: {e}"));
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.exit_code, text)
}

/// What `try_reach(target)` met inside `sb`.
async fn reach(sb: &Sandbox, target: &str) -> String {
    sb.remote(agentix_e2e::try_reach, target.to_owned())
        .await
        .unwrap()
}

/// Asserts that `command` fails in `sb`, with `expected` in what it says.
async fn refused(sb: &Sandbox, cell: &str, command: &str, expected: &str) {
    let (code, text) = sh(sb, command).await;
    assert_ne!(code, Some(0), "{cell}: `{command}` succeeded: {text}");
    assert!(
        text.contains(expected),
        "{cell}: `{command}` failed otherwise than with {expected:?}: {text}"
    );
}

/// A file only the host should read, in its temp dir (the sandbox has a
/// `/tmp` of its own).
fn host_secret() -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("agentix-escape-secret-{}", std::process::id()));
    std::fs::write(&path, "host secret").unwrap();
    path
}

#[tokio::test]
async fn host_files_are_not_there_and_the_system_is_read_only() {
    let sb = sandbox().await;
    let secret = host_secret();
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "host secret");
    let err = reach(&sb, &format!("read:{}", secret.display())).await;
    assert!(err.contains("No such file"), "{READ_HOST_FILES}: {err}");
    let checkout = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    assert!(std::path::Path::new(checkout).exists());
    let err = reach(&sb, &format!("read:{checkout}")).await;
    assert!(err.contains("No such file"), "{READ_HOST_FILES}: {err}");
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    if home != "/" && !home.starts_with("/tmp") {
        refused(&sb, READ_HOST_FILES, &format!("ls {home}"), "No such file").await;
    }
    refused(
        &sb,
        READ_HOST_FILES,
        "ls /work /home /root /srv",
        "No such file",
    )
    .await;
    let (_, listing) = sh(&sb, "ls /").await;
    let mut top: Vec<&str> = listing.split_whitespace().collect();
    top.sort();
    for entry in &top {
        assert!(
            ["bin", "dev", "etc", "lib", "lib32", "lib64", "proc", "sbin", "tmp", "usr"]
                .contains(entry),
            "{READ_HOST_FILES}: / holds {entry}: {top:?}"
        );
    }

    for path in [
        "/usr/bin/escaped",
        "/etc/escaped",
        "/escaped",
        "/bin/escaped",
    ] {
        refused(
            &sb,
            WRITE_OUTSIDE,
            &format!("touch {path}"),
            "Read-only file system",
        )
        .await;
    }
    let (code, text) = sh(
        &sb,
        "echo mine > own && cat own && echo t > /tmp/t && cat /tmp/t",
    )
    .await;
    assert_eq!(
        (code, text.as_str()),
        (Some(0), "mine\nt\n"),
        "its own places stay writable"
    );

    refused(&sb, READ_SHADOW, "cat /etc/shadow", "Permission denied").await;
    let _ = std::fs::remove_file(secret);
    sb.delete().await;
}

#[tokio::test]
async fn another_sandboxs_files_and_processes_and_the_hosts_are_out_of_reach() {
    let a = sandbox().await;
    let b = sandbox().await;
    let b_dir = b.local_dir().expect("a local sandbox").to_owned();
    assert!(b_dir.join("host.sock").exists());
    refused(
        &a,
        OTHER_SANDBOX_FILES,
        &format!("ls {}", b_dir.display()),
        "No such file",
    )
    .await;

    // B's launcher and server as the host numbers them, and the host itself.
    let b_launcher = b.server_pid().unwrap();
    let b_server = agentix::process::first_child(b_launcher)
        .and_then(agentix::process::first_child)
        .expect("B's server runs under its launcher");
    let host = std::process::id();
    for pid in [b_launcher, b_server, host] {
        for attempt in [
            format!("kill -0 {pid}"),
            format!("cat /proc/{pid}/environ"),
            format!("cat /proc/{pid}/cmdline"),
            format!("ls /proc/{pid}/fd"),
        ] {
            refused(&a, OTHER_PROCESSES, &attempt, "No such").await;
        }
    }
    // Every process it can see is its own: the server is 1, and there are
    // only the few a sandbox runs.
    let (_, pids) = sh(&a, "ls /proc | grep -E '^[0-9]+$'").await;
    let pids: Vec<u32> = pids
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert!(
        pids.contains(&1) && pids.len() < 20,
        "{OTHER_PROCESSES}: {pids:?}"
    );
    let (_, comm) = sh(&a, "cat /proc/1/cmdline | tr '\\0' ' '").await;
    assert!(comm.contains("serve"), "{OTHER_PROCESSES}: PID 1 is {comm}");

    // B still serves, untouched.
    assert_eq!(b.remote(agentix_e2e::add, (2, 3)).await.unwrap(), 5);
    a.delete().await;
    b.delete().await;
}

#[tokio::test]
async fn the_hosts_environment_network_and_sockets_are_out_of_reach() {
    // SAFETY: set once, before any sandbox of this test starts; the value is
    // only read by the sandbox's server, a child process.
    unsafe { std::env::set_var("AGENTIX_ESCAPE_HOST_SECRET", "s3cr3t") };
    let sb = sandbox().await;
    let (_, env) = sh(&sb, "env").await;
    assert!(!env.contains("s3cr3t"), "{HOST_ENVIRONMENT}: {env}");

    let service = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    service.set_nonblocking(true).unwrap();
    let port = service.local_addr().unwrap().port();
    let err = reach(&sb, &format!("tcp:127.0.0.1:{port}")).await;
    assert!(err.contains("Connection refused"), "{HOST_LOOPBACK}: {err}");
    refused(
        &sb,
        HOST_LOOPBACK,
        &format!("echo hi > /dev/tcp/127.0.0.1/{port}"),
        "refused",
    )
    .await;
    assert!(
        service.accept().is_err(),
        "{HOST_LOOPBACK}: the host's service was reached"
    );
    // Its own loopback works: a sandbox's services (abridge, a proxy) live there.
    let (_, text) = sh(&sb, "exec 3<>/dev/tcp/127.0.0.1/1").await;
    assert!(
        text.contains("Connection refused") && !text.contains("unreachable"),
        "its own lo is up: {text}"
    );

    use std::os::linux::net::SocketAddrExt;
    let name = format!("agentix-escape-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap();
    let abstract_socket = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    abstract_socket.set_nonblocking(true).unwrap();
    let err = reach(&sb, &format!("abstract:{name}")).await;
    assert!(
        err.contains("Connection refused"),
        "{HOST_ABSTRACT_SOCKET}: {err}"
    );
    assert!(abstract_socket.accept().is_err());

    // No route at all: nothing but `lo` exists, so no address past it can be
    // reached, whichever it is (no other address is tried from here).
    let (_, devices) = sh(&sb, "cat /proc/net/dev").await;
    let interfaces: Vec<&str> = devices
        .lines()
        .skip(2)
        .filter_map(|l| l.split_once(':').map(|(name, _)| name.trim()))
        .collect();
    assert_eq!(interfaces, ["lo"], "{ANY_ROUTE}: {devices}");
    let (_, routes) = sh(&sb, "cat /proc/net/route").await;
    assert_eq!(
        routes.lines().count(),
        1,
        "{ANY_ROUTE}: an IPv4 route exists: {routes}"
    );

    let err = reach(&sb, "unix:/var/run/docker.sock").await;
    assert!(err.contains("No such file"), "{DOCKER_SOCKET}: {err}");
    let err = reach(&sb, "unix:/run/docker.sock").await;
    assert!(err.contains("No such file"), "{DOCKER_SOCKET}: {err}");

    let err = reach(&sb, "mount:/tmp").await;
    assert!(err.contains("Operation not permitted"), "{MOUNT}: {err}");
    sb.delete().await;
}

#[tokio::test]
async fn a_fork_bomb_and_a_memory_hog_are_contained_and_the_sandbox_serves_on() {
    let limits = SandboxLimits {
        processes: Some(64),
        memory_bytes: Some(256 << 20),
        cpus: None,
    };
    let settings = NamespaceIsolation {
        tmp_bytes: 8 << 20,
        ..NamespaceIsolation::default()
    };
    let config = SandboxConfig::new(bundle_path())
        .limits(limits)
        .isolation(Isolation::Namespaces(settings));
    let sb = sandbox_with(config).await;

    refused(
        &sb,
        FILL_TMP,
        "dd if=/dev/zero of=/tmp/fill bs=1M count=32",
        "No space left",
    )
    .await;

    let err = sb
        .remote(agentix_e2e::fill_memory, 1024usize)
        .await
        .expect_err("1 GiB does not fit in 256 MiB");
    assert_eq!(
        err.kind,
        agentix::ErrorKind::WorkerExited,
        "{MEMORY}: {err}"
    );
    assert_eq!(
        sb.remote(agentix_e2e::fill_memory, 16usize).await.unwrap(),
        16 << 20,
        "{MEMORY}"
    );

    // 200 sleepers asked for; the limit stops them well short, the shell
    // says so, and the sandbox answers afterwards.
    let (_, text) = sh(
        &sb,
        "n=0; for i in $(seq 200); do sleep 3 & n=$((n+1)); done 2>&1; \
         echo running=$(ls /proc | grep -cE '^[0-9]+$'); wait; true",
    )
    .await;
    // Counting needs a fork too; when even that is refused, the count is
    // empty, and the refusals say enough.
    let running: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("running=")?.trim().parse().ok())
        .unwrap_or(0);
    assert!(
        running <= 64,
        "{FORK_BOMB}: {running} processes ran: {text}"
    );
    assert!(
        text.contains("Resource temporarily unavailable") || text.contains("retry"),
        "{FORK_BOMB}: the shell was not refused a fork: {text}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        sb.remote(agentix_e2e::add, (20, 22)).await.unwrap(),
        42,
        "{FORK_BOMB}"
    );

    sb.delete().await;
}

#[tokio::test]
async fn a_deleted_isolated_sandbox_leaves_no_process_directory_or_cgroup() {
    let sb = sandbox().await;
    let dir = sb.local_dir().unwrap().to_owned();
    let launcher = sb.server_pid().unwrap();
    let server = agentix::process::first_child(launcher)
        .and_then(agentix::process::first_child)
        .unwrap();
    let worker = support::worker_pid_from_health(&sb).await;
    assert_eq!(worker, 3, "the worker is numbered inside the sandbox");
    let name = dir.file_name().unwrap().to_owned();
    sb.delete().await;
    for pid in [launcher, server] {
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
async fn a_root_host_asking_for_a_root_sandbox_gets_an_error_saying_how_to_opt_out() {
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

#[test]
fn the_readme_security_table_is_this_suites() {
    let mut table =
        String::from("| code in the sandbox tries to | local, isolated (default) |\n|---|---|\n");
    for (attempt, outcome) in CELLS {
        table.push_str(&format!("| {attempt} | {outcome} |\n"));
    }
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"),
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
        "the README's security table (between {start:?} and {end:?}) must read:\n{table}"
    );
}
