//! The escape suite's attempts, one list for every tier: what code in a
//! sandbox tries, and what each tier lets it get.
//!
//! [`CELLS`] is the table: one row per attempt, one column per tier. The
//! book's security table (docs/src/security.md) is rendered from it ([`readme_table`]) and a
//! test fails when the two differ. Each check below runs from inside a
//! sandbox (a shell command through the bash plugin, or the remote function
//! `try_reach`) against a real host secret, service or sandbox, and asserts
//! its tier's cell. `escape.rs` runs them on local sandboxes and on
//! containers; `gvisor.rs` on containers under gVisor. A container's image
//! here has `ls`, `cat`, `dd` and `chmod` beside the bundle's bash, so the
//! checks use shell builtins where they can.

use agentix::Sandbox;
use agentix_bash::BashOptions;

/// Where a sandbox runs: the columns of [`CELLS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tier {
    /// `LocalProvider`, `Isolation::Namespaces` (the default).
    Local,
    /// `DockerProvider` with its defaults (runc).
    Container,
    /// `DockerProvider` under gVisor's `runsc`.
    Gvisor,
}

/// One attempt and what each tier lets it do.
pub(crate) struct Cell {
    pub(crate) attempt: &'static str,
    pub(crate) local: &'static str,
    pub(crate) container: &'static str,
    pub(crate) gvisor: &'static str,
}

pub(crate) const READ_HOST_FILES: &str = "read the host's files (`$HOME`, the checkout)";
pub(crate) const WRITE_OUTSIDE: &str = "write outside its working directory and `/tmp`";
pub(crate) const READ_SHADOW: &str = "read `/etc/shadow`";
pub(crate) const OTHER_SANDBOX_FILES: &str = "read another sandbox's files";
pub(crate) const OTHER_PROCESSES: &str =
    "see, signal, ptrace or read another sandbox's or the host's processes";
pub(crate) const HOST_ENVIRONMENT: &str = "read the host's environment variables";
pub(crate) const HOST_LOOPBACK: &str = "connect to a service on the host's 127.0.0.1";
pub(crate) const HOST_ABSTRACT_SOCKET: &str = "connect to the host's abstract Unix sockets";
pub(crate) const ANY_ROUTE: &str = "reach any other address (metadata service, LAN, internet)";
pub(crate) const DOCKER_SOCKET: &str = "reach the Docker socket";
pub(crate) const MOUNT: &str = "mount a filesystem";
pub(crate) const KERNEL_CALLS: &str = "call `keyctl`, `bpf`, `io_uring`, `unshare`";
pub(crate) const FORK_BOMB: &str = "start processes without end";
pub(crate) const ORPHANS: &str = "leave orphans and zombies behind";
pub(crate) const MEMORY: &str = "use memory without end";
pub(crate) const FILL_TMP: &str = "fill `/tmp`";
pub(crate) const FILL_WORKDIR: &str = "fill its working directory";
pub(crate) const OTHER_SERVER: &str = "connect to another sandbox's server";

/// The fork bomb of [`fork_bomb`]: 200 children that each wait 3 s on a
/// pipe nobody writes (the test image has no `sleep`); the shell gives up
/// once a fork is refused, orphaning the rest, which end and become
/// zombies of PID 1.
pub(crate) const FORK_BOMB_SCRIPT: &str =
    "exec 9<> <(:); for ((i = 0; i < 200; i++)); do (read -t 3 -u 9) & done 2>&1; \
     n=(/proc/[0-9]*); echo running=${#n[@]}; wait; true";

/// Writes `mib` MiB of zeros to `/tmp`, then empties the file again.
pub(crate) fn fill_tmp_script(mib: usize) -> String {
    format!("dd if=/dev/zero of=/tmp/fill bs=1M count={mib} 2>&1; s=$?; echo > /tmp/fill; exit $s")
}

/// Every attempt, and what each tier lets it do: the book's security
/// table, row by row.
pub(crate) const CELLS: &[Cell] = &[
    Cell {
        attempt: READ_HOST_FILES,
        local: "refused: only /bin, /etc, /lib*, /sbin, /usr are there, read-only",
        container: "refused: only the image and the bundle are there",
        gvisor: "refused: only the image and the bundle are there",
    },
    Cell {
        attempt: WRITE_OUTSIDE,
        local: "refused: read-only file system",
        container: "refused: read-only file system",
        gvisor: "refused: permission denied or read-only file system",
    },
    Cell {
        attempt: READ_SHADOW,
        local: "refused: permission denied",
        container: "refused: only the image's own, root's",
        gvisor: "refused: only the image's own, root's",
    },
    Cell {
        attempt: OTHER_SANDBOX_FILES,
        local: "refused: not there",
        container: "refused: not there",
        gvisor: "refused: not there",
    },
    Cell {
        attempt: OTHER_SERVER,
        local: "refused: its socket is not there, its port is on the host's 127.0.0.1",
        container: "refused: its socket is not there, no network",
        gvisor: "refused: its socket is not there, no network",
    },
    Cell {
        attempt: OTHER_PROCESSES,
        local: "refused: only its own processes exist",
        container: "refused: only its own processes exist",
        gvisor: "refused: only its own processes exist",
    },
    Cell {
        attempt: HOST_ENVIRONMENT,
        local: "refused: only `BASE_ENV` and what the config passes",
        container: "refused: only what the config passes",
        gvisor: "refused: only what the config passes",
    },
    Cell {
        attempt: HOST_LOOPBACK,
        local: "refused: its 127.0.0.1 is its own",
        container: "refused: its 127.0.0.1 is its own",
        gvisor: "refused: its 127.0.0.1 is its own",
    },
    Cell {
        attempt: HOST_ABSTRACT_SOCKET,
        local: "refused: connection refused",
        container: "refused: connection refused",
        gvisor: "refused: connection refused",
    },
    Cell {
        attempt: ANY_ROUTE,
        local: "refused: no route but `lo`",
        container: "refused: no route but `lo` (network `none`)",
        gvisor: "refused: no route but `lo` (network `none`)",
    },
    Cell {
        attempt: DOCKER_SOCKET,
        local: "refused: not there",
        container: "refused: not there",
        gvisor: "refused: not there",
    },
    Cell {
        attempt: MOUNT,
        local: "refused: operation not permitted",
        container: "refused: operation not permitted",
        gvisor: "refused: operation not permitted",
    },
    Cell {
        attempt: KERNEL_CALLS,
        local: "refused: operation not permitted (a seccomp filter)",
        container: "refused but `io_uring`: the engine's seccomp profile (Docker 25 refuses `io_uring` too)",
        gvisor: "`keyctl`, `bpf` refused; `io_uring`, `unshare` reach gVisor's kernel, not the host's",
    },
    Cell {
        attempt: FORK_BOMB,
        local: "contained: `SandboxLimits::processes`; the server serves on",
        container: "contained: `SandboxLimits::processes`; the server serves on",
        gvisor: "contained by ending the sandbox: the limit, which counts gVisor's own threads, stops it whole (`ServerExited`)",
    },
    Cell {
        attempt: ORPHANS,
        local: "reaped: PID 1 is an init",
        container: "reaped: PID 1 is an init",
        gvisor: "reaped: PID 1 is an init",
    },
    Cell {
        attempt: MEMORY,
        local: "contained: `SandboxLimits::memory_bytes`; a new worker serves on",
        container: "contained: `SandboxLimits::memory_bytes`; a new worker serves on",
        gvisor: "contained by ending the sandbox: the limit stops gVisor whole (`ServerExited`)",
    },
    Cell {
        attempt: FILL_TMP,
        local: "contained: `/tmp` is `NamespaceIsolation::tmp_bytes` of tmpfs",
        container: "contained: `/tmp` is a tmpfs of half the memory limit",
        gvisor: "contained: `/tmp` is a tmpfs of half the memory limit",
    },
    Cell {
        attempt: FILL_WORKDIR,
        local: "not limited: its directory is on the host's disk",
        container: "contained: `/workspace` is a tmpfs of half the memory limit",
        gvisor: "contained: `/workspace` is a tmpfs of half the memory limit",
    },
];

/// The book's security table, as [`CELLS`] renders it.
pub(crate) fn readme_table() -> String {
    let mut table = String::from(
        "| code in the sandbox tries to | local, isolated (default) | container (Docker defaults) \
         | container under gVisor |\n|---|---|---|---|\n",
    );
    for cell in CELLS {
        table.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            cell.attempt, cell.local, cell.container, cell.gvisor
        ));
    }
    table
}

/// Runs `command` in `sb` with bash, returning (exit code, stdout + stderr).
pub(crate) async fn sh(sb: &Sandbox, command: &str) -> (Option<i32>, String) {
    let out = sb
        .remote(agentix_bash::run, (command.to_owned(), BashOptions::new()))
        .await
        .unwrap_or_else(|e| panic!("`{command}` could not run: {e}"));
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.exit_code, text)
}

/// What `try_reach(target)` met inside `sb`.
pub(crate) async fn reach(sb: &Sandbox, target: &str) -> String {
    sb.remote(agentix_e2e::try_reach, target.to_owned())
        .await
        .unwrap()
}

/// Asserts that `command` fails in `sb`, with one of `expected` in what it
/// says.
pub(crate) async fn refused(sb: &Sandbox, cell: &str, command: &str, expected: &[&str]) {
    let (code, text) = sh(sb, command).await;
    assert_ne!(code, Some(0), "{cell}: `{command}` succeeded: {text}");
    assert!(
        expected.iter().any(|e| text.contains(e)),
        "{cell}: `{command}` failed otherwise than with {expected:?}: {text}"
    );
}

/// The numbered entries of `/proc` inside `sb`: the processes it sees.
pub(crate) async fn visible_pids(sb: &Sandbox) -> Vec<u32> {
    let (_, text) = sh(sb, "for p in /proc/[0-9]*; do echo ${p#/proc/}; done").await;
    text.split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// A file only the host should read, in its temp dir (a sandbox has a
/// `/tmp` of its own).
fn host_secret() -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("agentix-escape-secret-{}", std::process::id()));
    std::fs::write(&path, "host secret").unwrap();
    path
}

/// [`READ_HOST_FILES`], [`WRITE_OUTSIDE`] and [`READ_SHADOW`]; the
/// sandbox's own places stay writable.
pub(crate) async fn files(sb: &Sandbox, tier: Tier) {
    let secret = host_secret();
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "host secret");
    let err = reach(sb, &format!("read:{}", secret.display())).await;
    assert!(err.contains("No such file"), "{READ_HOST_FILES}: {err}");
    let checkout = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    assert!(std::path::Path::new(checkout).exists());
    let err = reach(sb, &format!("read:{checkout}")).await;
    assert!(err.contains("No such file"), "{READ_HOST_FILES}: {err}");
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    if home != "/" && !home.starts_with("/tmp") {
        let err = reach(sb, &format!("read:{home}/.bashrc")).await;
        assert!(err.contains("No such file"), "{READ_HOST_FILES}: {err}");
    }
    for dir in ["/work", "/home", "/root", "/srv"] {
        let (_, text) = sh(sb, &format!("echo {dir}/*")).await;
        assert_eq!(text.trim(), format!("{dir}/*"), "{READ_HOST_FILES}: {dir}");
    }
    let (_, listing) = sh(sb, "echo /*").await;
    let allowed: &[&str] = match tier {
        Tier::Local => &[
            "bin", "dev", "etc", "lib", "lib32", "lib64", "proc", "sbin", "tmp", "usr",
        ],
        Tier::Container | Tier::Gvisor => &[
            "agentix",
            "agentix-run",
            "bin",
            "dev",
            "etc",
            "lib",
            "lib64",
            "proc",
            "sys",
            "tmp",
            "workspace",
        ],
    };
    for entry in listing.split_whitespace() {
        let name = entry.trim_start_matches('/');
        assert!(
            allowed.contains(&name),
            "{READ_HOST_FILES}: / holds {name}: {listing}"
        );
    }
    let _ = std::fs::remove_file(secret);

    let expected: &[&str] = match tier {
        Tier::Local | Tier::Container => &["Read-only file system"],
        // gVisor checks the directory's owner before the mount's flags.
        Tier::Gvisor => &["Read-only file system", "Permission denied"],
    };
    let outside: &[&str] = match tier {
        Tier::Local => &[
            "/usr/bin/escaped",
            "/etc/escaped",
            "/escaped",
            "/bin/escaped",
        ],
        Tier::Container | Tier::Gvisor => &[
            "/escaped",
            "/bin/escaped",
            "/etc/escaped",
            "/agentix/escaped",
        ],
    };
    for path in outside {
        refused(sb, WRITE_OUTSIDE, &format!("echo x > {path}"), expected).await;
        let (code, _) = sh(sb, &format!("test -e {path}")).await;
        assert_eq!(code, Some(1), "{WRITE_OUTSIDE}: {path} was written");
    }
    let (code, text) = sh(
        sb,
        "echo mine > own && cat own && echo t > /tmp/t && cat /tmp/t",
    )
    .await;
    assert_eq!(
        (code, text.as_str()),
        (Some(0), "mine\nt\n"),
        "its own places stay writable"
    );

    let expected = match tier {
        Tier::Local => "Permission denied",
        // The test image has none; an image's own would be root's, and
        // the sandbox is not root.
        Tier::Container | Tier::Gvisor => "No such file",
    };
    let err = reach(sb, "read:/etc/shadow").await;
    assert!(err.contains(expected), "{READ_SHADOW}: {err}");
}

/// [`OTHER_SANDBOX_FILES`]: `b_path`, a file of another sandbox's on the
/// host, is not there for `a`.
pub(crate) async fn other_sandbox_files(a: &Sandbox, b_path: &std::path::Path) {
    assert!(
        b_path.exists(),
        "{} is not the other sandbox's",
        b_path.display()
    );
    let err = reach(a, &format!("read:{}", b_path.display())).await;
    assert!(
        err.contains("No such file") || err.contains("No such device"),
        "{OTHER_SANDBOX_FILES}: {err}"
    );
    let dir = b_path.parent().unwrap();
    let (_, text) = sh(a, &format!("echo {}/*", dir.display())).await;
    assert_eq!(
        text.trim(),
        format!("{}/*", dir.display()),
        "{OTHER_SANDBOX_FILES}: {text}"
    );
}

/// [`OTHER_SERVER`]: another sandbox's socket (`b_socket`, a host path)
/// and its address on the host (`b_addr`, `127.0.0.1:PORT` when it has one)
/// lead nowhere from `a`.
pub(crate) async fn other_server(a: &Sandbox, b_socket: &std::path::Path, b_addr: Option<&str>) {
    let err = reach(a, &format!("unix:{}", b_socket.display())).await;
    assert!(err.contains("No such file"), "{OTHER_SERVER}: {err}");
    if let Some(addr) = b_addr {
        let err = reach(a, &format!("tcp:{addr}")).await;
        assert!(
            err.contains("Connection refused") || err.contains("unreachable"),
            "{OTHER_SERVER}: {addr}: {err}"
        );
    }
}

/// [`FILL_WORKDIR`]: `mib` MiB written to the working directory; `limited`
/// says whether the tier stops it with a full disk.
pub(crate) async fn fill_workdir(sb: &Sandbox, mib: usize, limited: bool) {
    let script =
        format!("dd if=/dev/zero of=fill bs=1M count={mib} 2>&1; s=$?; echo > fill; exit $s");
    match limited {
        true => refused(sb, FILL_WORKDIR, &script, &["No space left"]).await,
        false => {
            let (code, text) = sh(sb, &script).await;
            assert_eq!(code, Some(0), "{FILL_WORKDIR}: {text}");
        }
    }
}

/// [`OTHER_PROCESSES`]: the host's `pids` (another sandbox's, the host's
/// own) cannot be signalled or read from `sb`, and every process `sb` sees
/// is its own.
pub(crate) async fn other_processes(sb: &Sandbox, pids: &[u32]) {
    let own = visible_pids(sb).await;
    assert!(
        own.contains(&1) && own.len() < 20,
        "{OTHER_PROCESSES}: {own:?}"
    );
    for &pid in pids {
        if own.contains(&pid) {
            // The same number inside names one of its own processes.
            continue;
        }
        refused(sb, OTHER_PROCESSES, &format!("kill -0 {pid}"), &["No such"]).await;
        let err = reach(sb, &format!("ptrace:{pid}")).await;
        assert!(
            err.contains("No such process") || err.contains("Operation not permitted"),
            "{OTHER_PROCESSES}: ptrace {pid}: {err}"
        );
        for file in ["environ", "cmdline", "fd", "mem"] {
            let err = reach(sb, &format!("read:/proc/{pid}/{file}")).await;
            assert!(err.contains("No such file"), "{OTHER_PROCESSES}: {err}");
        }
    }
    let err = reach(sb, "read:/proc/1/cmdline").await;
    assert_eq!(
        err, "reached",
        "{OTHER_PROCESSES}: its own PID 1 is readable"
    );
}

/// [`HOST_ENVIRONMENT`]: a variable of the host's is nowhere in `sb`.
pub(crate) async fn environment(sb: &Sandbox) {
    let (_, env) = sh(sb, "export -p; cat /proc/self/environ").await;
    assert!(
        env.contains("PATH="),
        "{HOST_ENVIRONMENT}: the listing works: {env}"
    );
    assert!(
        !env.contains(HOST_SECRET_VALUE),
        "{HOST_ENVIRONMENT}: {env}"
    );
}

/// The value of a variable the host sets before any sandbox starts (see
/// [`set_host_secret`]).
const HOST_SECRET_VALUE: &str = "s3cr3t-of-the-host";

/// Puts a secret in the host's environment, for [`environment`] to look
/// for. Call first thing in a test binary's first test, before a sandbox or
/// a second thread reads the environment.
pub(crate) fn set_host_secret() {
    // SAFETY: called before the test starts any sandbox; only child
    // processes read the variable.
    unsafe { std::env::set_var("AGENTIX_ESCAPE_HOST_SECRET", HOST_SECRET_VALUE) };
}

/// A listener on the host's 127.0.0.1 whose port nothing listens on in
/// `sb`'s own network: the kernel picks ports in each namespace on its own,
/// so the host's could be one the sandbox's server holds on its own
/// loopback, and reaching that is no escape.
async fn host_service_on_a_port_free_inside(sb: &Sandbox) -> std::net::TcpListener {
    let (_, text) = sh(
        sb,
        "while read -r _ local _ state _; do [ \"$state\" = 0A ] && echo ${local#*:}; done \
         < /proc/net/tcp; true",
    )
    .await;
    let inside: Vec<u16> = text
        .split_whitespace()
        .filter_map(|hex| u16::from_str_radix(hex, 16).ok())
        .collect();
    // Listeners held until one is found, so no port comes back twice.
    let mut taken = Vec::new();
    loop {
        let service = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        if !inside.contains(&service.local_addr().unwrap().port()) {
            return service;
        }
        taken.push(service);
    }
}

/// [`HOST_LOOPBACK`], [`HOST_ABSTRACT_SOCKET`], [`ANY_ROUTE`] and
/// [`DOCKER_SOCKET`].
pub(crate) async fn network(sb: &Sandbox) {
    let service = host_service_on_a_port_free_inside(sb).await;
    service.set_nonblocking(true).unwrap();
    let port = service.local_addr().unwrap().port();
    let err = reach(sb, &format!("tcp:127.0.0.1:{port}")).await;
    assert!(err.contains("Connection refused"), "{HOST_LOOPBACK}: {err}");
    refused(
        sb,
        HOST_LOOPBACK,
        &format!("echo hi > /dev/tcp/127.0.0.1/{port}"),
        &["refused"],
    )
    .await;
    assert!(
        service.accept().is_err(),
        "{HOST_LOOPBACK}: the host's service was reached"
    );
    // Its own loopback works: a sandbox's services (abridge, a proxy) live
    // there.
    let (_, text) = sh(sb, "exec 3<>/dev/tcp/127.0.0.1/1").await;
    assert!(
        text.contains("Connection refused") && !text.contains("unreachable"),
        "its own lo is up: {text}"
    );

    use std::os::linux::net::SocketAddrExt;
    let name = format!("agentix-escape-{}-{port}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap();
    let abstract_socket = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    abstract_socket.set_nonblocking(true).unwrap();
    let err = reach(sb, &format!("abstract:{name}")).await;
    assert!(
        err.contains("Connection refused"),
        "{HOST_ABSTRACT_SOCKET}: {err}"
    );
    assert!(abstract_socket.accept().is_err());

    // No route at all: nothing but `lo` exists, so no address past it can
    // be reached, whichever it is (no other address is tried from here).
    let (_, devices) = sh(sb, "cat /proc/net/dev").await;
    let interfaces: Vec<&str> = devices
        .lines()
        .skip(2)
        .filter_map(|l| l.split_once(':').map(|(name, _)| name.trim()))
        .collect();
    assert_eq!(interfaces, ["lo"], "{ANY_ROUTE}: {devices}");
    let (_, routes) = sh(sb, "cat /proc/net/route").await;
    assert_eq!(
        routes.lines().count(),
        1,
        "{ANY_ROUTE}: an IPv4 route exists: {routes}"
    );

    for socket in ["/var/run/docker.sock", "/run/docker.sock"] {
        let err = reach(sb, &format!("unix:{socket}")).await;
        assert!(err.contains("No such file"), "{DOCKER_SOCKET}: {err}");
    }
}

/// [`MOUNT`] and [`KERNEL_CALLS`].
pub(crate) async fn kernel(sb: &Sandbox, tier: Tier) {
    let err = reach(sb, "mount:/tmp").await;
    assert!(err.contains("Operation not permitted"), "{MOUNT}: {err}");
    for call in ["keyctl", "bpf", "io_uring", "unshare"] {
        let got = reach(sb, &format!("syscall:{call}")).await;
        let allowed = matches!(
            (tier, call),
            (Tier::Container, "io_uring") | (Tier::Gvisor, "io_uring" | "unshare")
        );
        match allowed {
            true => assert_eq!(got, "reached", "{KERNEL_CALLS}: {call}"),
            false => assert!(
                got.contains("Operation not permitted") || got.contains("Permission denied"),
                "{KERNEL_CALLS}: {call}: {got}"
            ),
        }
    }
}

/// [`FORK_BOMB`] and [`ORPHANS`], in a sandbox limited to `limit`
/// processes: the shell is refused forks, the sandbox serves on, and what
/// the bomb left behind is reaped, so the next command forks again.
pub(crate) async fn fork_bomb(sb: &Sandbox, limit: usize) {
    let (_, text) = sh(sb, FORK_BOMB_SCRIPT).await;
    // Counting needs no fork; when the shell gave up first, the refusals
    // say enough.
    let running: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("running=")?.trim().parse().ok())
        .unwrap_or(0);
    assert!(
        running <= limit,
        "{FORK_BOMB}: {running} processes ran: {text}"
    );
    assert!(
        text.contains("Resource temporarily unavailable") || text.contains("retry"),
        "{FORK_BOMB}: the shell was not refused a fork: {text}"
    );
    assert_eq!(
        sb.remote(agentix_e2e::add, (20, 22)).await.unwrap(),
        42,
        "{FORK_BOMB}"
    );
    // Once the orphans' 3 s are up they are reaped: the processes are gone
    // and forks work again.
    let start = std::time::Instant::now();
    loop {
        let (code, text) = sh(sb, "(exit 7); echo $? $(echo forked)").await;
        let left = visible_pids(sb).await;
        if code == Some(0) && text.trim() == "7 forked" && left.len() < 20 {
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "{ORPHANS}: {text}; processes left: {left:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// [`ORPHANS`]: a shell that exits before its 30 background children
/// leaves them to PID 1, which reaps them once they end.
pub(crate) async fn orphans(sb: &Sandbox) {
    let (code, text) = sh(
        sb,
        "exec 9<> <(:); for ((i = 0; i < 30; i++)); do (read -t 1 -u 9) & done; exit 0",
    )
    .await;
    assert_eq!(code, Some(0), "{text}");
    let start = std::time::Instant::now();
    loop {
        let left = visible_pids(sb).await;
        if left.len() < 20 {
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(15),
            "{ORPHANS}: {left:?} are left"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// [`MEMORY`], in a sandbox limited to 256 MiB: a worker that asks for
/// 1 GiB is killed, said so, and a new one answers.
pub(crate) async fn memory(sb: &Sandbox) {
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
}

/// [`FILL_TMP`]: writing more than `bound` MiB to `/tmp` fails with a full
/// disk, and the sandbox serves on.
pub(crate) async fn fill_tmp(sb: &Sandbox, bound_mib: usize) {
    refused(
        sb,
        FILL_TMP,
        &fill_tmp_script(bound_mib * 2),
        &["No space left"],
    )
    .await;
    assert_eq!(
        sb.remote(agentix_e2e::add, (1, 2)).await.unwrap(),
        3,
        "{FILL_TMP}"
    );
}

/// Every cell two sandboxes of a container tier show each other and the
/// host: `a` tries, `b` (whose processes the host numbers `b_pids`) is the
/// other sandbox, and serves on untouched.
pub(crate) async fn container_pair(a: &Sandbox, b: &Sandbox, b_pids: Vec<u32>, tier: Tier) {
    files(a, tier).await;
    environment(a).await;
    network(a).await;
    kernel(a, tier).await;
    orphans(a).await;
    let b_socket = std::path::PathBuf::from(b.addr().strip_prefix("unix:").expect("by socket"));
    other_sandbox_files(a, &b_socket).await;
    other_server(a, &b_socket, None).await;
    assert!(
        !b_pids.is_empty(),
        "the other sandbox's processes are listed"
    );
    let mut pids = b_pids;
    pids.push(std::process::id());
    other_processes(a, &pids).await;
    assert_eq!(b.remote(agentix_e2e::add, (2, 3)).await.unwrap(), 5);
}
