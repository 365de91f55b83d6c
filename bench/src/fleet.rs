//! The `fleet` section (only with `--only fleet`): a pool of local
//! sandboxes in the default isolated tier beside the provider alone, task
//! throughput over reused sandboxes, and chaos counted from the record.
//! `AGENTIX_BENCH_FLEET_SIZE` sets how many sandboxes live at once (1000).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentix::fleet::{Pool, ProgressDisplay, RetryPolicy, Task};
use agentix::{LocalProvider, Provider, Sandbox, SandboxConfig};
use agentix_bash::BashOptions;
use tokio::sync::Barrier;

use crate::bench_fns;
use crate::report::Report;

/// Sandboxes live at once in the `_ready_s` figures.
fn fleet_size() -> usize {
    std::env::var("AGENTIX_BENCH_FLEET_SIZE")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000)
}

/// This binary as a bundle, in the default (isolated) tier.
fn config() -> SandboxConfig {
    SandboxConfig::current_exe().expect("the bench knows its own path")
}

/// What every sandbox answers before it counts as ready: one call and one
/// bash command.
async fn ready(sb: &Sandbox, i: u64) -> Result<(), agentix::RemoteError> {
    sb.remote(bench_fns::add_one, i).await?;
    let out = sb
        .remote(
            agentix_bash::run,
            ("echo hi".to_string(), BashOptions::new()),
        )
        .await?;
    assert_eq!(out.stdout_lossy(), "hi\n");
    Ok(())
}

pub(crate) async fn fleet(report: &mut Report) {
    if let Err(e) = agentix::raise_fd_limit() {
        eprintln!("fleet: cannot raise the open-file limit: {e}");
    }
    let n = fleet_size();
    raw(n, report).await;
    pooled(n, report).await;
    throughput(report).await;
    warm_claim(report).await;
    chaos(report).await;
    docker_pool(report).await;
}

/// Containers live at once in `fleet_docker_N_ready_s`.
fn docker_fleet_size() -> usize {
    std::env::var("AGENTIX_BENCH_FLEET_DOCKER_SIZE")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200)
}

/// `n` container sandboxes live at once through a pool, beside the
/// engine's own floor: `n` containers running `true`, created and started
/// at concurrency 8, 16 and 32, the best of the three.
async fn docker_pool(report: &mut Report) {
    use agentix_provider_docker::DockerProvider;
    let provider = match DockerProvider::connect() {
        Ok(p) if p.docker().ping().await.is_ok() => Arc::new(p),
        _ => {
            eprintln!("fleet: no Docker engine answers; the docker pool is skipped");
            return;
        }
    };
    let n = docker_fleet_size();
    provider
        .import_image(
            crate::docker::IMAGE,
            agentix_provider_docker::EMPTY_ROOTFS.to_vec(),
        )
        .await
        .expect("the empty image imports");
    let bundle = crate::docker::assemble_self();
    let mut floor = f64::INFINITY;
    for concurrency in [8, 16, 32] {
        let start = Instant::now();
        futures_util::StreamExt::collect::<Vec<_>>(futures_util::StreamExt::buffer_unordered(
            futures_util::stream::iter(
                (0..n).map(|_| crate::docker::run_true(provider.docker(), &bundle)),
            ),
            concurrency,
        ))
        .await;
        floor = floor.min(start.elapsed().as_secs_f64());
    }
    let pool = Pool::shared(
        provider.clone(),
        SandboxConfig::new(&bundle).image(crate::docker::IMAGE),
    )
    .max_sandboxes(n)
    .max_starting(32)
    .progress(ProgressDisplay::Off);
    let AllReady {
        start,
        ready,
        ended,
        failures,
    } = all_ready_through(&pool, n).await;
    report.add(
        format!("fleet_docker_{n}_ready_s"),
        "containers through a pool: first create until every sandbox answered a call and a bash command",
        "s",
        (ready - start).as_secs_f64(),
    );
    report.add(
        format!("fleet_docker_{n}_floor_s"),
        "the engine alone: as many containers running `true`, created and started, best of concurrency 8, 16, 32",
        "s",
        floor,
    );
    report.add(
        format!("fleet_docker_{n}_delete_s"),
        "from all ready until every container was deleted",
        "s",
        (ended - ready).as_secs_f64(),
    );
    report.add(
        format!("fleet_docker_{n}_failures"),
        "tasks of the pool that failed (must be 0)",
        "tasks",
        failures as f64,
    );
    report.add(
        format!("fleet_docker_{n}_left"),
        "sandboxes the provider still lists after the run (must be 0)",
        "sandboxes",
        provider.list().len() as f64,
    );
    let _ = std::fs::remove_dir_all(bundle);
}

/// When `n` sandboxes of a pool, all live at once, were first asked for,
/// all ready, and all deleted; and how many tasks failed.
struct AllReady {
    start: Instant,
    ready: Instant,
    ended: Instant,
    failures: usize,
}

/// Runs `n` tasks on `pool`, each holding its sandbox until every one has
/// answered [`ready`], so that all `n` are live at once.
async fn all_ready_through(pool: &Pool, n: usize) -> AllReady {
    let all_ready = Arc::new(Barrier::new(n));
    let ready_at = Arc::new(std::sync::Mutex::new(None));
    let start = Instant::now();
    let tasks = (0..n as u64).map(|i| Task::new(i.to_string(), i));
    let at = ready_at.clone();
    let outcomes = pool
        .run(tasks, move |sb, i| {
            let (barrier, at) = (all_ready.clone(), at.clone());
            async move {
                ready(&sb, i).await?;
                if barrier.wait().await.is_leader() {
                    *at.lock().unwrap() = Some(Instant::now());
                }
                Ok(())
            }
        })
        .expect("the pool runs")
        .collect_all()
        .await;
    let ended = Instant::now();
    let ready = ready_at.lock().unwrap().unwrap_or(ended);
    AllReady {
        start,
        ready,
        ended,
        failures: outcomes.iter().filter(|o| !o.is_done()).count(),
    }
}

/// The provider alone: `n` sessions at once, each ready, then all deleted.
async fn raw(n: usize, report: &mut Report) {
    let provider = LocalProvider::new();
    let start = Instant::now();
    let sandboxes = futures_util::future::join_all((0..n).map(|i| {
        let provider = &provider;
        async move {
            let sb = provider.session(config()).await.ok()?;
            ready(&sb, i as u64).await.ok()?;
            Some(sb)
        }
    }))
    .await;
    let ready_s = start.elapsed().as_secs_f64();
    let failures = sandboxes.iter().filter(|s| s.is_none()).count();
    let start = Instant::now();
    futures_util::future::join_all(sandboxes.into_iter().flatten().map(Sandbox::delete)).await;
    report.add(
        format!("fleet_local_{n}_raw_s"),
        "the provider alone: that many sessions at once, a call and a bash command each",
        "s",
        ready_s,
    );
    report.add(
        format!("fleet_local_{n}_raw_delete_s"),
        "deleting them all at once",
        "s",
        start.elapsed().as_secs_f64(),
    );
    report.add(
        format!("fleet_local_{n}_raw_failures"),
        "sandboxes of the raw run that did not start or answer (must be 0)",
        "sandboxes",
        failures as f64,
    );
}

/// The same through a pool: every task waits at a barrier until all `n`
/// sandboxes are ready, so all live at once.
async fn pooled(n: usize, report: &mut Report) {
    let provider = Arc::new(LocalProvider::new());
    let pool = Pool::shared(provider.clone(), config())
        .max_sandboxes(n)
        .max_starting(64)
        .progress(ProgressDisplay::Off);
    let AllReady {
        start,
        ready,
        ended,
        failures,
    } = all_ready_through(&pool, n).await;
    report.add(
        format!("fleet_local_{n}_ready_s"),
        "through a pool (isolated tier): first create until every sandbox answered a call and a bash command",
        "s",
        (ready - start).as_secs_f64(),
    );
    report.add(
        format!("fleet_local_{n}_delete_s"),
        "from all ready until the pool's run ended with every sandbox deleted",
        "s",
        (ended - ready).as_secs_f64(),
    );
    report.add(
        format!("fleet_local_{n}_failures"),
        "tasks of the pool that failed (must be 0)",
        "tasks",
        failures as f64,
    );
    report.add(
        format!("fleet_local_{n}_host_rss_mib"),
        "the host's peak RSS (VmHWM) so far",
        "MiB",
        crate::peak_rss_kib(std::process::id()) / 1024.0,
    );
    report.add(
        format!("fleet_local_{n}_left"),
        "sandboxes the provider still lists after the run (must be 0)",
        "sandboxes",
        provider.list().len() as f64,
    );
}

/// 20,000 small echo tasks over 64 reused sandboxes, the record on; then
/// 60,000 more, counted from the moment all 64 sandboxes are up.
async fn throughput(report: &mut Report) {
    let (count, took, _) = pooled_echoes(20_000).await;
    report.add(
        "fleet_tasks_per_s",
        "one small call per task over 64 reused sandboxes, record on (starts included)",
        "tasks/s",
        count as f64 / took.as_secs_f64(),
    );
    let (count, took, all_up) = pooled_echoes(60_000).await;
    let (up_at, done_then) = all_up.expect("all 64 sandboxes came up before the run ended");
    report.add(
        "fleet_tasks_steady_per_s",
        "the same over 60,000 tasks, from the moment all 64 sandboxes were up (starts excluded)",
        "tasks/s",
        (count - done_then) as f64 / (took - up_at).as_secs_f64(),
    );

    // The same calls without a pool: 64 sessions, 64 loops of calls.
    let provider = LocalProvider::new();
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let start = Instant::now();
    let loops = (0..64).map(|_| {
        let (provider, next) = (&provider, next.clone());
        async move {
            let sb = provider.session(config()).await.expect("a sandbox");
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= 20_000 {
                    break;
                }
                sb.remote(bench_fns::add_one, i).await.expect("the call");
            }
            sb
        }
    });
    let sandboxes = futures_util::future::join_all(loops).await;
    let took = start.elapsed();
    report.add(
        "fleet_raw_calls_per_s",
        "the same 20,000 calls over 64 sessions without a pool, starts included (the floor for fleet_tasks_per_s)",
        "calls/s",
        20_000.0 / took.as_secs_f64(),
    );
    futures_util::future::join_all(sandboxes.into_iter().map(Sandbox::delete)).await;
}

/// Runs `n` small echo tasks over 64 reused sandboxes, the record on:
/// the tasks done, the run's time, and when all 64 sandboxes were first up
/// (time into the run, tasks done by then).
async fn pooled_echoes(n: u64) -> (u64, Duration, Option<(Duration, u64)>) {
    const LANES: u64 = 64;
    let record = std::env::temp_dir().join(format!("agentix-bench-fleet-{}", std::process::id()));
    let _ = std::fs::remove_file(&record);
    let pool = Pool::new(LocalProvider::new(), config())
        .max_sandboxes(LANES as usize)
        .reuse(usize::MAX)
        .record(&record)
        .progress(ProgressDisplay::Off);
    let tasks = (0..n).map(|i| Task::new(i.to_string(), i));
    let start = Instant::now();
    let collecting = pool
        .run(tasks, |sb, i| async move {
            sb.remote(bench_fns::add_one, i).await
        })
        .expect("the pool runs")
        .collect_all();
    tokio::pin!(collecting);
    let mut all_up = None;
    let outcomes = loop {
        tokio::select! {
            outcomes = &mut collecting => break outcomes,
            _ = tokio::time::sleep(Duration::from_millis(1)), if all_up.is_none() => {
                let stats = pool.stats();
                if stats.created >= LANES && stats.starting == 0 {
                    all_up = Some((start.elapsed(), stats.done));
                }
            }
        }
    };
    let took = start.elapsed();
    assert!(outcomes.iter().all(|o| o.is_done()));
    let _ = std::fs::remove_file(record);
    (outcomes.len() as u64, took, all_up)
}

/// 200 tasks of 50 ms, each on a fresh sandbox, over 4 lanes and 8 warm
/// sandboxes: how long a task waits for its sandbox.
async fn warm_claim(report: &mut Report) {
    let pool = Pool::new(LocalProvider::new(), config())
        .max_sandboxes(4)
        .warm(8)
        .progress(ProgressDisplay::Off);
    let tasks = (0..200u64).map(|i| Task::new(i.to_string(), i));
    let outcomes = pool
        .run(tasks, |sb, i| async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            sb.remote(bench_fns::add_one, i).await
        })
        .expect("the pool runs")
        .collect_all()
        .await;
    assert!(outcomes.iter().all(|o| o.is_done()));
    // The first tasks start before anything is warm.
    let mut waits: Vec<f64> = outcomes
        .iter()
        .filter(|o| o.task.parse::<u64>().is_ok_and(|i| i >= 8))
        .map(|o| o.timings.start.as_secs_f64() * 1e3)
        .collect();
    waits.sort_by(f64::total_cmp);
    report.add(
        "fleet_warm_claim_p50_ms",
        "a task's wait for its sandbox with 8 warm (200 tasks of 50 ms, 4 at once, fresh sandbox each)",
        "ms",
        waits[waits.len() / 2],
    );
}

/// 2,000 tasks over 100 sandboxes while a tenth of the workers and a
/// twentieth of the servers are killed; counted from the record.
async fn chaos(report: &mut Report) {
    let record = std::env::temp_dir().join(format!("agentix-bench-chaos-{}", std::process::id()));
    let _ = std::fs::remove_file(&record);
    let pool = Pool::new(LocalProvider::new(), config())
        .max_sandboxes(100)
        .reuse(50)
        .record(&record)
        .retry(RetryPolicy {
            max_attempts: 5,
            first_backoff: Duration::from_millis(20),
            ..RetryPolicy::default()
        })
        .progress(ProgressDisplay::Off);
    let tasks = (0..2_000u64).map(|i| Task::new(i.to_string(), i));
    let seed = std::process::id() as u64;
    let struck = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let outcomes = pool
        .run(tasks, move |sb, i| {
            // A cheap scramble of the task and the run picks the victims,
            // each struck on its first attempt only.
            let first = struck.lock().unwrap().insert(i);
            let roll = match first {
                true => (i ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54,
                false => u64::MAX,
            };
            async move {
                if roll < 102 {
                    sb.remote(bench_fns::exit_worker, ()).await?;
                } else if roll < 153 {
                    if let Some(pid) = sb.server_pid() {
                        // SAFETY: signals the sandbox's own launcher, whose
                        // server and worker die with it.
                        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                    }
                }
                sb.remote(bench_fns::add_one, i).await
            }
        })
        .expect("the pool runs")
        .collect_all()
        .await;
    let mut lines: BTreeMap<String, usize> = BTreeMap::new();
    for line in std::fs::read_to_string(&record).unwrap_or_default().lines() {
        if let Ok(value) = serde_json::from_str::<serde_json::Value>(line) {
            *lines
                .entry(value["task"].as_str().unwrap_or_default().to_owned())
                .or_default() += 1;
        }
    }
    report.add(
        "fleet_chaos_lost",
        "tasks of 2,000 with no line in the record (must be 0)",
        "tasks",
        (2_000 - lines.len()) as f64,
    );
    report.add(
        "fleet_chaos_duplicated",
        "tasks with more than one line in the record (must be 0)",
        "tasks",
        lines.values().filter(|&&n| n > 1).count() as f64,
    );
    report.add(
        "fleet_chaos_retries",
        "attempts retried after a killed worker or server",
        "attempts",
        pool.stats().retries as f64,
    );
    report.add(
        "fleet_chaos_failed",
        "tasks that ended failed (retries ran out)",
        "tasks",
        outcomes.iter().filter(|o| !o.is_done()).count() as f64,
    );
    let _ = std::fs::remove_file(record);
}
