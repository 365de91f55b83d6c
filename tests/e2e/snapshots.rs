//! Snapshots and forks of local sandboxes: children start with exactly
//! the parent's state at the snapshot (files, a tree, a link, modes, a
//! 100 MB file, a consistent pair a writer was changing), each then its
//! own; snapshots go when removed, or with their last handle.

mod support;

use std::time::Duration;

use agentix::prelude::*;
use agentix::{MarkerDir, SnapshotRecords, SnapshotSpec, SnapshotStore};
use agentix_bash::BashOptions;

/// Runs `script` in `sb`: its stdout, trimmed; panics unless it exits 0.
async fn sh(sb: &Sandbox, script: &str) -> String {
    let ran = sb
        .remote(agentix_bash::run, (script.to_owned(), BashOptions::new()))
        .await
        .unwrap_or_else(|e| panic!("`{script}` did not run: {e}"));
    assert_eq!(
        ran.exit_code,
        Some(0),
        "`{script}`: {} {}",
        ran.stdout_lossy(),
        ran.stderr_lossy()
    );
    ran.stdout_lossy().trim().to_owned()
}

/// What each child must see of the parent's state.
const CHECK: &str = "sha256sum -c --quiet big.sum && cat a/b/f && stat -c %a a/b/f \
                     && readlink link && cat link && a=$(cat pair.a) b=$(cat pair.b) \
                     && [ $((a - b)) -le 1 ] && [ $((b - a)) -le 1 ] && echo consistent";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_forks_see_exactly_the_snapshot_and_then_only_their_own_writes() {
    let provider = LocalProvider::new();
    let config = SandboxConfig::new(support::bundle_path());
    let parent = provider.session(config.clone()).await.unwrap();
    sh(
        &parent,
        "mkdir -p a/b && echo one > a/b/f && chmod 640 a/b/f && ln -s a/b/f link \
         && head -c 100000000 /dev/urandom > big && sha256sum big > big.sum",
    )
    .await;
    // A writer that keeps two files within one of each other at every
    // instant (each replaced whole, by a rename): a snapshot of a sandbox
    // that is not paused would catch them far apart.
    sh(
        &parent,
        "(i=0; while :; do i=$((i+1)); echo $i > next.a; mv next.a pair.a; \
         echo $i > next.b; mv next.b pair.b; done) >/dev/null 2>&1 &",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let named = parent
        .snapshot(SnapshotSpec::new().name("base").label("task", "t1"))
        .await
        .unwrap();
    assert_eq!(named.name(), Some("base"));
    assert_eq!(named.labels()["task"], "t1");
    assert_eq!(named.source(), parent.id());
    assert!(named.bytes() >= 100_000_000, "{named:?}");
    let named_dir = named.dir().unwrap().to_owned();
    assert!(named_dir.join("big").is_file());
    assert!(!named_dir.join("server.log").exists());
    // Recorded where operators and reaps find it, and opened by name.
    let records = SnapshotRecords::of(&MarkerDir::default());
    let record = records.find(named.id()).unwrap();
    assert_eq!(
        (record.name.as_deref(), record.dir.as_path()),
        (Some("base"), named_dir.as_path())
    );

    let (forked, children) = provider.fork(&parent, 16, config.clone()).await.unwrap();
    let forked_dir = forked.dir().unwrap().to_owned();
    let forked_id = forked.id().to_owned();
    assert!(records.find(&forked_id).is_ok());
    assert_eq!(children.len(), 16);
    // The parent writes after the snapshot; child 0 writes its own.
    sh(&parent, "echo later > after").await;
    sh(&children[0], "echo mine > own && echo changed > a/b/f").await;
    let seen = futures_util::future::join_all(children.iter().map(|c| sh(c, CHECK))).await;
    for (i, out) in seen.iter().enumerate() {
        let first = if i == 0 { "changed" } else { "one" };
        let link = if i == 0 { "changed" } else { "one" };
        assert_eq!(
            out.lines().collect::<Vec<_>>(),
            [first, "640", "a/b/f", link, "consistent"],
            "child {i}"
        );
    }
    for (i, child) in children.iter().enumerate() {
        let own = sh(child, "cat own 2>/dev/null; cat after 2>/dev/null; true").await;
        assert_eq!(own, if i == 0 { "mine" } else { "" }, "child {i}");
    }
    assert_eq!(sh(&parent, "cat own 2>/dev/null; cat a/b/f").await, "one");

    // A sandbox its owner paused stays paused through a snapshot.
    parent.pause().await.unwrap();
    let while_paused = parent.snapshot(SnapshotSpec::new()).await.unwrap();
    assert_eq!(parent.health().await.unwrap()["status"], "paused");
    parent.resume().await.unwrap();
    drop(while_paused);

    // Also from a snapshot by hand, after the parent is gone.
    parent.delete().await;
    let late = provider.create_from(&named, config.clone()).await.unwrap();
    assert!(sh(&late, CHECK).await.ends_with("consistent"));

    // The fork's own snapshot goes with its last handle; the named one
    // when removed.
    drop(forked);
    support::wait_until(
        "the fork's snapshot is removed",
        Duration::from_secs(10),
        || !forked_dir.exists(),
    )
    .await;
    assert!(named_dir.exists(), "a named snapshot outlives its handles");
    assert!(records.find(&forked_id).is_err(), "its record goes with it");
    let reopened = agentix::Snapshot::open(&records.find(named.id()).unwrap(), &records);
    let from_record = provider
        .create_from(&reopened, config.clone())
        .await
        .unwrap();
    assert!(sh(&from_record, CHECK).await.ends_with("consistent"));
    from_record.delete().await;
    drop(reopened);
    let kept = named.clone();
    drop(named);
    assert!(named_dir.exists());
    kept.remove();
    support::wait_until(
        "the named snapshot is removed",
        Duration::from_secs(10),
        || !named_dir.exists(),
    )
    .await;
    assert!(records.find(kept.id()).is_err(), "its record goes with it");
    let gone = provider.create_from(&kept, config).await.unwrap_err();
    assert!(gone.to_string().contains("still has"), "{gone}");
    assert!(matches!(kept.store(), SnapshotStore::Dir(_)));
    late.delete().await;
    futures_util::future::join_all(children.into_iter().map(Sandbox::delete)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setup_cache_runs_a_setup_once_per_key_and_starts_every_sandbox_from_it() {
    use agentix::fleet::SetupCache;
    use std::sync::atomic::{AtomicU32, Ordering};
    let provider: std::sync::Arc<dyn Provider> = std::sync::Arc::new(LocalProvider::new());
    let config = SandboxConfig::new(support::bundle_path());
    let cache = SetupCache::new(provider.clone(), config);
    let ran = std::sync::Arc::new(AtomicU32::new(0));
    let setup = |version: &'static str| {
        let ran = ran.clone();
        move |sb: std::sync::Arc<Sandbox>, _: &str| async move {
            ran.fetch_add(1, Ordering::Relaxed);
            // Slow enough that the eight requests overlap.
            let script = format!("sleep 0.5; echo built {version} > build.txt");
            sb.remote(agentix_bash::run, (script, BashOptions::new()))
                .await
                .map(drop)
        }
    };
    let requests = (0..8).map(|_| cache.sandbox("build", "v1", setup("v1")));
    let sandboxes: Vec<Sandbox> = futures_util::future::join_all(requests)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        ran.load(Ordering::Relaxed),
        1,
        "one setup for eight requests"
    );
    assert_eq!(cache.setups_run(), 1);
    for sb in &sandboxes {
        assert_eq!(sh(sb, "cat build.txt").await, "built v1");
    }
    // Another argument, another key: the setup runs again.
    let (k1, k2) = (
        cache.key("build", &"v1").await.unwrap(),
        cache.key("build", &"v2").await.unwrap(),
    );
    assert_ne!(k1, k2);
    assert_ne!(k1, cache.key("test", &"v1").await.unwrap());
    let other = cache.sandbox("build", "v2", setup("v2")).await.unwrap();
    assert_eq!(sh(&other, "cat build.txt").await, "built v2");
    assert_eq!(ran.load(Ordering::Relaxed), 2);
    futures_util::future::join_all(sandboxes.into_iter().map(Sandbox::delete)).await;
    other.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_setup_is_found_by_the_next_run_and_runs_no_setup() {
    use agentix::fleet::SetupCache;
    let provider: std::sync::Arc<dyn Provider> = std::sync::Arc::new(LocalProvider::new());
    let config = SandboxConfig::new(support::bundle_path());
    // A version of this test's own: no other run's snapshot has its key.
    let version = agentix::random_hex(6);
    let setup = |sb: std::sync::Arc<Sandbox>, version: String| async move {
        let script = format!("echo prepared {version} > prepared.txt");
        sb.remote(agentix_bash::run, (script, BashOptions::new()))
            .await
            .map(drop)
    };
    let first = SetupCache::new(provider.clone(), config.clone()).kept_across_runs();
    let sb = first
        .sandbox("prepare", version.clone(), setup)
        .await
        .unwrap();
    assert_eq!(first.setups_run(), 1);
    assert_eq!(
        sh(&sb, "cat prepared.txt").await,
        format!("prepared {version}")
    );
    sb.delete().await;
    let key = first.key("prepare", &version).await.unwrap();
    drop(first);

    // The next run: a new cache, as in another process.
    let next = SetupCache::new(provider.clone(), config).kept_across_runs();
    let sb = next
        .sandbox("prepare", version.clone(), setup)
        .await
        .unwrap();
    assert_eq!(next.setups_run(), 0, "the recorded snapshot was used");
    assert_eq!(
        sh(&sb, "cat prepared.txt").await,
        format!("prepared {version}")
    );
    sb.delete().await;

    let kept = provider
        .find_snapshot(&SetupCache::snapshot_name(&key))
        .expect("kept until removed");
    assert_eq!(kept.labels()["agentix.setup-key"], key);
    let dir = kept.dir().unwrap().to_owned();
    kept.remove();
    support::wait_until(
        "the kept snapshot is removed",
        Duration::from_secs(10),
        || !dir.exists(),
    )
    .await;
    assert!(provider
        .find_snapshot(&SetupCache::snapshot_name(&key))
        .is_none());
}
