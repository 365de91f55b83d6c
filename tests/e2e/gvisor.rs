//! Sandboxes under gVisor: the Docker provider with the runtime
//! `scripts/setup-gvisor` registers. Sandbox code talks to gVisor's kernel,
//! not the host's, on top of every container default.
//!
//! Not in the default `cargo test --workspace` (`test = false`: a machine
//! without `runsc` still passes it); `.ci/run` runs the setup script and
//! then this target, where a missing runtime is a failure.

#[allow(dead_code)]
mod docker_support;
#[allow(dead_code)]
mod egress_checks;
#[allow(dead_code)]
mod escape_attempts;
#[allow(dead_code)]
mod support;

use agentix::{Provider, Sandbox, SandboxConfig, SandboxLimits};
use agentix_bash::BashOptions;
use agentix_provider_docker::{DockerProvider, GVISOR_RUNTIME};
use docker_support::{bundle_dir, tools_image, TOOLS_IMAGE};
use escape_attempts::{self as attempts, Tier};

/// Runs `script` in `sb`, returning (exit code, stdout + stderr).
async fn run(sb: &Sandbox, script: &str) -> (Option<i32>, String) {
    let out = sb
        .remote(agentix_bash::run, (script.to_owned(), BashOptions::new()))
        .await
        .unwrap_or_else(|e| panic!("`{script}` could not run: {e}"));
    let mut text = out.stdout_lossy();
    text.push_str(&out.stderr_lossy());
    (out.exit_code, text)
}

/// A sandbox of `bundle` on the tools image under gVisor.
fn gvisor_config(bundle: &std::path::Path) -> SandboxConfig {
    SandboxConfig::new(bundle)
        .image(TOOLS_IMAGE)
        .runtime(GVISOR_RUNTIME)
}

/// A provider whose engine has the gVisor runtime, or a failure saying how
/// to register it.
async fn gvisor() -> DockerProvider {
    let provider = DockerProvider::connect().expect("a Docker engine");
    let info = provider.docker().info().await.expect("the engine answers");
    let runtimes = info.runtimes.unwrap_or_default();
    assert!(
        runtimes.contains_key(GVISOR_RUNTIME),
        "the engine has no `{GVISOR_RUNTIME}` runtime: run \
         plugins/provider-docker/scripts/setup-gvisor as root"
    );
    provider
}

#[tokio::test]
async fn a_sandbox_under_gvisor_reaches_the_host_only_through_egress() {
    let provider = gvisor().await;
    tools_image(&provider).await;
    let bundle = bundle_dir("gvisor-egress");
    let config = gvisor_config(&bundle);
    egress_checks::reaches_the_host_only_through_egress(&provider, config).await;
    let _ = std::fs::remove_dir_all(bundle);
}

/// What the files plugin says of `path` in `sb` (the bundled `ls` cannot
/// stat under gVisor).
async fn stat(sb: &Sandbox, path: &str) -> agentix_files::FileStat {
    sb.remote(agentix_files::stat, path.to_owned())
        .await
        .unwrap_or_else(|e| panic!("cannot stat {path}: {e}"))
}

#[tokio::test]
async fn a_fork_under_gvisor_unpacks_its_parents_files_links_and_modes() {
    let provider = gvisor().await;
    tools_image(&provider).await;
    let bundle = bundle_dir("gvisor-fork");
    let config = gvisor_config(&bundle);
    let parent = provider.session(config.clone()).await.expect("a sandbox");
    let (code, out) = run(
        &parent,
        "mkdir -p a/b && echo one > a/b/f && chmod 640 a/b/f && chmod 750 a \
         && ln -s a/b/f link && dd if=/dev/urandom of=big bs=1M count=8 2>/dev/null",
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    let (_, workdir) = run(&parent, "pwd").await;
    let at = |path: &str| format!("{}/{path}", workdir.trim());
    let parent_file = stat(&parent, &at("a/b/f")).await;
    let digest = parent
        .remote(agentix_e2e::sha256_of, "big".to_string())
        .await
        .unwrap();
    // A second on: a file unpacked without its time would show a later one.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    // The archive reaches gVisor's kernel through the seed mount: it copies
    // the files with `sendfile` and places them with the `*at` calls.
    let (snapshot, children) = provider.fork(&parent, 2, config).await.unwrap();
    for (i, child) in children.iter().enumerate() {
        let (code, seen) = run(child, "cat a/b/f link").await;
        assert_eq!((code, seen.as_str()), (Some(0), "one\none\n"), "child {i}");
        let (file, dir) = (stat(child, &at("a/b/f")).await, stat(child, &at("a")).await);
        assert_eq!((file.mode, dir.mode), (0o640, 0o750), "child {i}");
        // The archive keeps whole seconds.
        assert_eq!(
            file.mtime_ms / 1000,
            parent_file.mtime_ms / 1000,
            "child {i}"
        );
        let copied = child
            .remote(agentix_e2e::sha256_of, "big".to_string())
            .await
            .unwrap();
        assert_eq!(copied, digest, "child {i}");
    }
    for child in children {
        child.delete().await;
    }
    drop(snapshot);
    parent.delete().await;
    let _ = std::fs::remove_dir_all(bundle);
}

#[tokio::test]
async fn a_sandbox_under_gvisor_calls_streams_runs_bash_on_gvisors_kernel_and_is_removed() {
    let provider = gvisor().await;
    tools_image(&provider).await;
    let bundle = bundle_dir("gvisor");
    let config = gvisor_config(&bundle);
    let sb = provider.session(config).await.expect("a gVisor sandbox");
    let id = sb.id().to_owned();
    assert_eq!(sb.remote(agentix_e2e::add, (40, 2)).await.unwrap(), 42);
    assert_eq!(sb.health().await.unwrap()["status"], "ok");

    // gVisor's own kernel answers: its /proc/version is not the host's.
    let host_kernel = std::fs::read_to_string("/proc/version").unwrap();
    let (code, kernel) = run(&sb, "cat /proc/version").await;
    assert_eq!(code, Some(0), "{kernel}");
    assert!(kernel.starts_with("Linux version"), "{kernel}");
    assert_ne!(
        kernel.trim(),
        host_kernel.trim(),
        "the host's kernel answered"
    );

    // Every container default holds under gVisor too.
    let (_, status) = run(
        &sb,
        "while read -r line; do case $line in CapEff*|NoNewPrivs*|Uid*) echo $line;; esac; \
         done < /proc/self/status",
    )
    .await;
    assert!(status.contains("CapEff: 0000000000000000"), "{status}");
    let uid: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next()?.parse().ok())
        .unwrap();
    assert!(uid >= agentix::SANDBOX_UID_BASE, "runs as uid {uid}");
    // gVisor checks the directory's owner before the mount's flags.
    let (code, text) = run(&sb, "echo x > /bin/escaped").await;
    assert_ne!(code, Some(0), "{text}");
    assert!(
        text.contains("Read-only file system") || text.contains("Permission denied"),
        "{text}"
    );
    let (code, _) = run(&sb, "test -e /bin/escaped").await;
    assert_eq!(code, Some(1), "/bin/escaped was written");
    let (code, text) = run(&sb, "pwd; echo mine > f && cat f").await;
    assert_eq!((code, text.as_str()), (Some(0), "/workspace\nmine\n"));
    let (_, interfaces) = run(&sb, "ls /sys/class/net 2>&1; cat /proc/net/dev").await;
    assert!(!interfaces.contains("eth0"), "only loopback: {interfaces}");

    sb.delete().await;
    assert_eq!(
        docker_support::containers_of(provider.docker(), &id).await,
        0
    );
    let _ = std::fs::remove_dir_all(bundle);
}

/// A gVisor sandbox of the test image with `limits`.
async fn gvisor_sandbox(
    provider: &DockerProvider,
    bundle: &std::path::Path,
    limits: SandboxLimits,
) -> Sandbox {
    let config = gvisor_config(bundle).limits(limits);
    provider.session(config).await.expect("a gVisor sandbox")
}

#[tokio::test]
async fn a_gvisor_sandbox_keeps_its_code_from_the_host_other_sandboxes_and_the_kernel() {
    attempts::set_host_secret();
    let provider = gvisor().await;
    tools_image(&provider).await;
    let bundle = bundle_dir("gvisor-escape");
    let a = gvisor_sandbox(&provider, &bundle, SandboxLimits::default()).await;
    let b = gvisor_sandbox(&provider, &bundle, SandboxLimits::default()).await;
    let b_pids = provider.host_pids(b.id()).await;
    attempts::container_pair(&a, &b, b_pids, Tier::Gvisor).await;
    a.delete().await;
    b.delete().await;
    let _ = std::fs::remove_dir_all(bundle);
}

/// Asserts that `attempt` ended the sandbox `sb` whole, said so to the
/// host as `ServerExited`, and that its container goes with `delete`.
async fn ended_whole(
    provider: &DockerProvider,
    sb: Sandbox,
    what: &str,
    attempt: Result<impl std::fmt::Debug, agentix::RemoteError>,
) {
    let err = attempt.expect_err(what);
    assert_eq!(err.kind, agentix::ErrorKind::ServerExited, "{what}: {err}");
    let id = sb.id().to_owned();
    sb.delete().await;
    assert_eq!(
        docker_support::containers_of(provider.docker(), &id).await,
        0,
        "{what}: the container outlived delete"
    );
}

#[tokio::test]
async fn a_full_tmp_is_a_full_disk_and_a_fork_bomb_or_memory_hog_ends_a_gvisor_sandbox_whole() {
    let provider = gvisor().await;
    tools_image(&provider).await;
    let bundle = bundle_dir("gvisor-limits");
    let limits = SandboxLimits {
        processes: Some(64),
        memory_bytes: Some(256 << 20),
        cpus: None,
    };
    let run = |script: String| (script, BashOptions::new());

    // A full /tmp is a full disk: gVisor keeps a tmpfs's size.
    let sb = gvisor_sandbox(&provider, &bundle, limits.clone()).await;
    attempts::fill_tmp(&sb, 128).await;
    attempts::fill_workdir(&sb, 256, true).await;
    // A fork bomb without end: gVisor's own threads count against the same
    // limit, and no fork inside is refused before the limit stops it whole.
    let bomb = sb
        .remote(
            agentix_bash::run,
            run("exec 9<> <(:); while :; do (read -t 60 -u 9) & done".into()),
        )
        .timeout(std::time::Duration::from_secs(60))
        .await;
    ended_whole(&provider, sb, attempts::FORK_BOMB, bomb).await;

    let sb = gvisor_sandbox(&provider, &bundle, limits.clone()).await;
    assert_eq!(sb.remote(agentix_e2e::add, (1, 2)).await.unwrap(), 3);
    let hog = sb.remote(agentix_e2e::fill_memory, 1024usize).await;
    ended_whole(&provider, sb, attempts::MEMORY, hog).await;

    // The next sandbox starts and serves as if nothing had happened.
    let sb = gvisor_sandbox(&provider, &bundle, limits).await;
    assert_eq!(sb.remote(agentix_e2e::add, (40, 2)).await.unwrap(), 42);
    sb.delete().await;
    let _ = std::fs::remove_dir_all(bundle);
}
