//! Processes and directories: nothing outlives its sandbox or its host, and
//! dying processes end calls instead of hanging them.

mod support;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use agentix::ErrorKind;
use agentix_wire::process::{is_alive, signal_pid};
use support::{bundle_path, plain_sandbox, wait_until, worker_pid_from_health};

const GONE_WITHIN: Duration = Duration::from_secs(10);

#[tokio::test]
async fn dropping_a_session_leaves_no_process_and_no_directory() {
    let sb = plain_sandbox().await;
    let worker = sb.remote(agentix_e2e::worker_pid, ()).await.unwrap();
    let server = sb.server_pid().expect("local sandboxes have a server pid");
    let dir = sb
        .local_dir()
        .expect("local sandboxes have a dir")
        .to_owned();
    assert!(is_alive(server) && is_alive(worker) && dir.is_dir());
    drop(sb);
    wait_until("server, worker and dir to be gone", GONE_WITHIN, || {
        !is_alive(server) && !is_alive(worker) && !dir.exists()
    })
    .await;
}

#[tokio::test]
async fn delete_waits_until_everything_is_gone() {
    let sb = plain_sandbox().await;
    let worker = worker_pid_from_health(&sb).await;
    let server = sb.server_pid().unwrap();
    let dir = sb.local_dir().unwrap().to_owned();
    sb.delete().await;
    assert!(!is_alive(server), "server {server} survived delete");
    assert!(!dir.exists(), "{} survived delete", dir.display());
    wait_until("the worker to die with its server", GONE_WITHIN, || {
        !is_alive(worker)
    })
    .await;
}

/// Starts a host process that makes a sandbox and reports its pids.
fn start_host() -> (std::process::Child, u32, u32, PathBuf) {
    let mut host = Command::new(bundle_path())
        .arg("host-then-wait")
        .stdout(Stdio::piped())
        .spawn()
        .expect("host process starts");
    let mut line = String::new();
    BufReader::new(host.stdout.take().unwrap())
        .read_line(&mut line)
        .expect("host reports");
    let report: serde_json::Value = serde_json::from_str(&line).expect("JSON report");
    let pid = |k: &str| {
        report[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k} in {report}")) as u32
    };
    let dir = PathBuf::from(report["dir"].as_str().expect("dir"));
    (host, pid("server_pid"), pid("worker_pid"), dir)
}

#[tokio::test]
async fn a_host_killed_by_sigterm_or_sigkill_leaves_no_orphans() {
    for signal in [libc::SIGTERM, libc::SIGKILL] {
        let (mut host, server, worker, dir) = start_host();
        assert!(is_alive(server) && is_alive(worker) && dir.is_dir());
        signal_pid(host.id(), signal);
        host.wait().unwrap();
        wait_until(
            &format!("server, worker and dir to be gone after signal {signal}"),
            GONE_WITHIN,
            || !is_alive(server) && !is_alive(worker) && !dir.exists(),
        )
        .await;
    }
}

/// Starts a minute-long call, SIGKILLs `pid` (the `what`) while it runs, and
/// returns the error the call ended with; panics if it hangs instead.
async fn long_call_while_killing(
    sb: &agentix::Sandbox,
    pid: u32,
    what: &str,
) -> agentix::RemoteError {
    let call = sb.remote(agentix_e2e::sleep_ms, (60_000,));
    let kill = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        signal_pid(pid, libc::SIGKILL);
    };
    let (outcome, ()) =
        tokio::time::timeout(Duration::from_secs(15), async { tokio::join!(call, kill) })
            .await
            .unwrap_or_else(|_| panic!("the pending call hung after the {what} died"));
    outcome.expect_err("a call whose process was killed cannot succeed")
}

#[tokio::test]
async fn a_dead_server_ends_pending_calls_with_server_exited() {
    let sb = plain_sandbox().await;
    assert_eq!(sb.remote(agentix_e2e::add, (1, 1)).await.unwrap(), 2);
    let server = sb.server_pid().unwrap();
    let err = long_call_while_killing(&sb, server, "server").await;
    assert!(
        matches!(
            err.kind,
            ErrorKind::ServerExited | ErrorKind::ConnectionLost
        ),
        "{err}"
    );
    // New calls fail fast too.
    let err = tokio::time::timeout(Duration::from_secs(15), sb.remote(agentix_e2e::add, (1, 1)))
        .await
        .expect("a call after the server died hung")
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::ServerExited, "{err}");
    assert!(err.message.contains("signal 9"), "{err}");
}

#[tokio::test]
async fn a_dead_worker_ends_its_calls_and_the_next_call_gets_a_new_one() {
    let sb = plain_sandbox().await;
    let first = sb.remote(agentix_e2e::worker_pid, ()).await.unwrap();
    let err = long_call_while_killing(&sb, first, "worker").await;
    assert_eq!(err.kind, ErrorKind::WorkerExited, "{err}");
    assert!(err.message.contains("signal 9"), "{err}");

    let second = sb.remote(agentix_e2e::worker_pid, ()).await.unwrap();
    assert_ne!(first, second, "the worker was not replaced");
    assert!(!is_alive(first));
    let health = sb.health().await.unwrap();
    assert_eq!(health["status"], "ok", "{health}");
    assert_eq!(health["worker"]["restarts"], 1, "{health}");

    // A worker that exits by itself mid-call is the same story.
    let err = sb.remote(agentix_e2e::exit_worker, (7,)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::WorkerExited);
    assert!(err.message.contains("exit status 7"), "{err}");
    assert_eq!(sb.remote(agentix_e2e::add, (2, 3)).await.unwrap(), 5);
}

#[tokio::test]
async fn processes_a_call_starts_do_not_inherit_the_worker_pipes() {
    let sb = plain_sandbox().await;
    assert!(!sb
        .remote(agentix_e2e::child_inherits_frame_pipes, ())
        .await
        .unwrap());
}

/// The bundle run as `launch` with `flags`, then `role`: its exit status
/// and standard error.
fn launch(flags: &[String], role: &[&str]) -> (std::process::ExitStatus, String) {
    let out = Command::new(bundle_path())
        .arg(agentix_wire::launch_spec::LAUNCH_ROLE)
        .args(flags)
        .arg("--")
        .args(role)
        .stdin(Stdio::null())
        .output()
        .expect("the bundle runs");
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `--parent` naming this process, the death signal SIGTERM, and `more`.
fn launched_by_me(more: &[&str]) -> Vec<String> {
    let mut flags: Vec<String> = more.iter().map(|s| s.to_string()).collect();
    flags.extend([
        "--parent".into(),
        std::process::id().to_string(),
        "--death-signal".into(),
        libc::SIGTERM.to_string(),
    ]);
    flags
}

#[test]
fn a_launch_whose_starter_is_already_gone_runs_nothing() {
    let from = std::env::temp_dir().join(format!("agentix-launch-orphan-{}", std::process::id()));
    let to = from.with_extension("copy");
    std::fs::create_dir_all(&from).unwrap();
    // Its parent is this test, not PID 1: as if the host had died between
    // the start and the first step.
    let flags = [
        "--parent".to_string(),
        "1".into(),
        "--death-signal".into(),
        libc::SIGTERM.to_string(),
    ];
    let (status, _) = launch(
        &flags,
        &["install", from.to_str().unwrap(), to.to_str().unwrap()],
    );
    assert_eq!(status.code(), Some(1));
    assert!(!to.exists(), "the role ran");
    let _ = std::fs::remove_dir_all(from);
}

#[test]
fn a_launch_that_cannot_join_its_cgroup_says_which_file_and_runs_nothing() {
    let from = std::env::temp_dir().join(format!("agentix-launch-cgroup-{}", std::process::id()));
    let to = from.with_extension("copy");
    std::fs::create_dir_all(&from).unwrap();
    let flags = launched_by_me(&["--cgroup-file", "/nonexistent/agentix/tasks"]);
    let (status, stderr) = launch(
        &flags,
        &["install", from.to_str().unwrap(), to.to_str().unwrap()],
    );
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot join /nonexistent/agentix/tasks"),
        "{stderr}"
    );
    assert!(!to.exists(), "the role ran");
    let _ = std::fs::remove_dir_all(from);
}

#[test]
fn a_launch_runs_its_role_as_the_user_it_names() {
    let from = std::env::temp_dir().join(format!("agentix-launch-user-{}", std::process::id()));
    let to = from.with_extension("copy");
    std::fs::create_dir_all(&from).unwrap();
    std::fs::write(from.join("file"), b"bytes").unwrap();
    let nobody = 65_534u32;
    // The copy goes to the temp dir, where any user may make one.
    let flags = launched_by_me(&["--user", &nobody.to_string()]);
    let (status, stderr) = launch(
        &flags,
        &["install", from.to_str().unwrap(), to.to_str().unwrap()],
    );
    // SAFETY: getuid has no arguments and cannot fail.
    if unsafe { libc::getuid() } == 0 {
        assert!(status.success(), "{stderr}");
        let copied = std::fs::metadata(to.join("file")).expect("the copy");
        assert_eq!((copied.uid(), copied.gid()), (nobody, nobody));
        assert_eq!(std::fs::read(to.join("file")).unwrap(), b"bytes");
    } else {
        // Only root may become another user: a clear refusal, nothing run.
        assert_eq!(status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("cannot set its gid"), "{stderr}");
        assert!(!to.exists(), "the role ran");
    }
    let _ = (std::fs::remove_dir_all(&from), std::fs::remove_dir_all(&to));
}
