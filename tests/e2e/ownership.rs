//! Ownership of local sandboxes: each has a marker naming its host, so that
//! what a host killed by SIGKILL left is removed by the next (`reap`) and a
//! live host's sandboxes never are; a pool shut down, by call or by signal,
//! deletes every sandbox it started before it returns or the process exits.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentix::fleet::{Pool, ProgressDisplay, Task};
use agentix::owner::{process_running, process_start};
use agentix::{LocalProvider, MarkerDir, OwnerId, Provider, SandboxConfig, SandboxMarker};
use support::bundle_path;

/// Names the marker directory a child host of these tests uses.
const MARKERS: &str = "AGENTIX_OWNERSHIP_MARKERS";

/// A marker directory of this test's own, absent.
fn marker_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("agentix-ownership-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Waits until `dir` holds `n` markers of started sandboxes; returns them.
async fn started_markers(
    dir: &Path,
    n: usize,
    child: &mut std::process::Child,
) -> Vec<SandboxMarker> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let markers: Vec<SandboxMarker> = MarkerDir::new(dir)
            .list()
            .unwrap()
            .into_iter()
            .filter(|m| m.pid != 0)
            .collect();
        if markers.len() >= n {
            return markers;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the child host ended ({status}) with {} sandboxes",
                markers.len()
            );
        }
        assert!(
            Instant::now() < deadline,
            "{} of {n} sandboxes after 60 s",
            markers.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Nothing of the sandbox `marker` names is left: no process, no
/// directory, no staging root, no cgroup.
fn assert_gone(marker: &SandboxMarker) {
    assert!(
        !process_running(marker.pid, marker.pid_start),
        "{}'s process {} runs",
        marker.id,
        marker.pid
    );
    assert!(!marker.dir.exists(), "{} is left", marker.dir.display());
    let root = support::staging_root(&marker.dir);
    assert!(!root.exists(), "{} is left", root.display());
    for cgroup in &marker.cgroup {
        assert!(!cgroup.exists(), "{} is left", cgroup.display());
    }
}

/// A host with three isolated sandboxes and a plain one, kept: the host
/// that the reap test kills.
#[tokio::test]
#[ignore = "run by a_dead_hosts_local_sandboxes_are_reaped_and_a_live_hosts_are_left"]
async fn doomed_local_host() {
    let dir = std::env::var(MARKERS).expect("run by the reap test");
    let provider = LocalProvider::new().marker_dir(dir);
    let config = SandboxConfig::new(bundle_path());
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(provider.create_kept(config.clone()).await.unwrap());
    }
    held.push(provider.create_kept(support::plain(config)).await.unwrap());
    tokio::time::sleep(Duration::from_secs(600)).await;
}

#[tokio::test]
async fn a_dead_hosts_local_sandboxes_are_reaped_and_a_live_hosts_are_left() {
    let dir = marker_dir("reap");
    let mut host = support::child_test("doomed_local_host")
        .env(MARKERS, &dir)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let provider = LocalProvider::new().marker_dir(&dir);
    let mine = provider
        .session(SandboxConfig::new(bundle_path()))
        .await
        .unwrap();
    let markers = started_markers(&dir, 5, &mut host).await;
    let theirs: Vec<SandboxMarker> = markers.into_iter().filter(|m| m.id != mine.id()).collect();
    assert_eq!(theirs.len(), 4);
    let owner = OwnerId::parse(&theirs[0].owner).unwrap();
    assert_eq!(owner.pid, host.id());
    assert!(theirs.iter().all(|m| m.process_alive()));
    assert_eq!(
        provider.reap().await.unwrap(),
        0,
        "a live host's sandboxes are its own"
    );
    assert!(theirs.iter().all(|m| m.process_alive() && m.dir.exists()));

    host.kill().unwrap();
    host.wait().unwrap();
    assert_eq!(provider.reap().await.unwrap(), 4);
    for marker in &theirs {
        assert_gone(marker);
    }
    let left: Vec<String> = MarkerDir::new(&dir)
        .list()
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(
        left,
        [mine.id().to_owned()],
        "only the live host's marker stays"
    );
    let sum: i64 = mine.remote(agentix_e2e::add, (2, 3)).await.unwrap();
    assert_eq!(sum, 5, "the live host's sandbox still serves");
    mine.delete().await;
    assert!(MarkerDir::new(&dir).list().unwrap().is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn reap_kills_what_a_dead_owner_left_running_and_leaves_an_unreadable_owner_alone() {
    let dir = marker_dir("forged");
    let markers = MarkerDir::new(&dir);
    let sandbox_dir = dir.with_extension("sandbox");
    std::fs::create_dir_all(sandbox_dir.join("deep")).unwrap();
    // As a launcher killed before it could remove it leaves it.
    let root = support::staging_root(&sandbox_dir);
    std::fs::create_dir_all(root.join("proc")).unwrap();
    let mut left_running = {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("sleep")
            .arg("600")
            .process_group(0)
            .spawn()
            .unwrap()
    };
    let pid = left_running.id();
    let dead_owner = OwnerId {
        boot: "an-earlier-boot".into(),
        ..OwnerId::current()
    };
    let marker = |id: &str, owner: String| SandboxMarker {
        id: id.into(),
        provider: "local".into(),
        owner,
        dir: sandbox_dir.clone(),
        addr: "127.0.0.1:1".into(),
        local_addr: None,
        token: "t".into(),
        pid,
        pid_start: process_start(pid).unwrap(),
        cgroup: Vec::new(),
        created_ms: 0,
    };
    markers
        .write(&marker("local-dead", dead_owner.to_string()))
        .unwrap();
    markers
        .write(&marker("local-unknown", "not an owner".into()))
        .unwrap();
    let provider = LocalProvider::new().marker_dir(&dir);
    assert_eq!(provider.reap().await.unwrap(), 1);
    let status = left_running.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
    assert!(!sandbox_dir.exists());
    assert!(!root.exists(), "{} is left", root.display());
    let left: Vec<String> = markers.list().unwrap().into_iter().map(|m| m.id).collect();
    assert_eq!(left, ["local-unknown"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Tasks that sleep for ten minutes each.
fn sleepy_tasks(n: usize) -> Vec<Task<u64>> {
    (0..n)
        .map(|i| Task::new(format!("t{i}"), 600_000))
        .collect()
}

#[tokio::test]
async fn a_pool_shut_down_deletes_every_sandbox_and_its_run_ends() {
    let dir = marker_dir("shutdown");
    let provider = std::sync::Arc::new(LocalProvider::new().marker_dir(&dir));
    let pool = Pool::shared(provider.clone(), SandboxConfig::new(bundle_path()))
        .max_sandboxes(4)
        .progress(ProgressDisplay::Off);
    let run = pool
        .run(sleepy_tasks(10), |sb, ms| async move {
            sb.remote(agentix_e2e::sleep_ms, ms).await
        })
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while pool.stats().running < 4 {
        assert!(Instant::now() < deadline, "{:?}", pool.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let markers = MarkerDir::new(&dir).list().unwrap();
    assert_eq!(markers.len(), 4);
    tokio::time::timeout(Duration::from_secs(30), pool.shutdown())
        .await
        .expect("a shutdown ends within 30 s");
    assert!(provider.list().is_empty(), "{:?}", provider.list());
    assert!(MarkerDir::new(&dir).list().unwrap().is_empty());
    for marker in &markers {
        assert_gone(marker);
    }
    let outcomes = tokio::time::timeout(Duration::from_secs(5), run.collect_all())
        .await
        .expect("the run's stream ends");
    assert!(outcomes.is_empty(), "no task finished: {}", outcomes.len());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A pool that shuts down on signals, its tasks sleeping: the host that the
/// signal test interrupts.
#[tokio::test]
#[ignore = "run by ctrl_c_deletes_a_pools_sandboxes_and_exits_as_the_signal_would"]
async fn signalled_fleet_host() {
    let dir = std::env::var(MARKERS).expect("run by the signal test");
    let pool = Pool::new(
        LocalProvider::new().marker_dir(dir),
        SandboxConfig::new(bundle_path()),
    )
    .max_sandboxes(3)
    .progress(ProgressDisplay::Off);
    pool.shutdown_on_signals().unwrap();
    pool.run(sleepy_tasks(6), |sb, ms| async move {
        sb.remote(agentix_e2e::sleep_ms, ms).await
    })
    .unwrap()
    .collect_all()
    .await;
    unreachable!("the signal ends the process");
}

#[tokio::test]
async fn ctrl_c_deletes_a_pools_sandboxes_and_exits_as_the_signal_would() {
    let dir = marker_dir("signal");
    let mut host = support::child_test("signalled_fleet_host")
        .env(MARKERS, &dir)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let markers = started_markers(&dir, 3, &mut host).await;
    // Started is not yet running a task: give the calls a moment to begin.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // SAFETY: signals a child of ours.
    assert_eq!(unsafe { libc::kill(host.id() as i32, libc::SIGINT) }, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = host.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the host did not exit within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status.code(), Some(130), "{status}");
    for marker in &markers {
        assert_gone(marker);
    }
    assert!(MarkerDir::new(&dir).list().unwrap().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn sandbox_code_cannot_read_the_markers_that_hold_the_tokens() {
    // The default marker directory, as hosts use it: another sandbox's
    // marker gives its token, and with it calls into that sandbox.
    let provider = LocalProvider::new();
    let other = provider
        .session(SandboxConfig::new(bundle_path()))
        .await
        .unwrap();
    let agent = provider
        .session(SandboxConfig::new(bundle_path()))
        .await
        .unwrap();
    let markers = provider.markers();
    let file = markers.path().join(format!("{}.json", other.id()));
    assert!(
        file.exists(),
        "{} is not where hosts keep markers",
        file.display()
    );
    let reached: String = agent
        .remote(agentix_e2e::try_reach, format!("read:{}", file.display()))
        .await
        .unwrap();
    assert_ne!(reached, "reached", "sandbox code read {}", file.display());
}
