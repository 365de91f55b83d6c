//! [`Pool`] and [`Run`]: tasks run over sandboxes of one provider and one
//! config, each task to exactly one outcome.
//!
//! A run is `max_sandboxes` lanes (tokio tasks). A lane takes the next task
//! from the queue, runs the work function on the sandbox it holds (starting
//! one through the [`StartThrottle`] when it holds none), and sends the
//! outcome on. A failure of the task's own ends it; any other deletes the
//! sandbox and runs the task again on a fresh one after a backoff, while
//! the [`RetryPolicy`] and the task's deadline allow. A sandbox serves up
//! to `reuse` tasks, reset between them by the reset hook when there is
//! one; one whose task failed otherwise than by itself is never reused.
//! Deletions run beside the lanes and the outcome stream ends only once
//! every sandbox the run started is gone. Before its first create, a run
//! has the provider reap what hosts that died left behind. Warmers (as
//! many as `warm`) keep started sandboxes idle for lanes to claim. Every
//! create runs as a task of its own and every sandbox is a `Held` whose
//! drop deletes it, all on the run's tracker: a shutdown cancels the lanes
//! and warmers and waits for that tracker to empty.

use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use agentix_host::{Provider, ProviderError, Sandbox, SandboxConfig};
use agentix_wire::errors::RemoteError;
use futures_util::future::BoxFuture;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::{AbortOnDropHandle, TaskTracker};

use crate::failure::{Failure, FailureKind};
use crate::outcome::{Outcome, Timings};
use crate::pool_stats::{Gauge, PoolStats, StatsCounters};
use crate::progress::{self, ProgressDisplay};
use crate::retry_policy::RetryPolicy;
use crate::run_record::RunRecord;
use crate::setup_cache::SetupCache;
use crate::start_throttle::StartThrottle;
use crate::task::Task;
use crate::warm_set::WarmSet;

/// Starts a sandbox some other way than the provider's `session` (from a
/// setup cache's snapshot).
type StartHook = Arc<dyn Fn() -> BoxFuture<'static, Result<Sandbox, ProviderError>> + Send + Sync>;

/// Resets a sandbox between two tasks (an error retires it instead), or
/// sets a new one up before its first (an error deletes it).
type SandboxHook =
    Arc<dyn Fn(Arc<Sandbox>) -> BoxFuture<'static, Result<(), RemoteError>> + Send + Sync>;

/// Runs many tasks over many sandboxes: throttled starts, retries on fresh
/// sandboxes, a record a second run resumes from, progress.
///
/// ```no_run
/// # use agentix_wire::remote::Remote;
/// # async fn example(square: Remote<(i64,), i64>) -> std::io::Result<()> {
/// use agentix_fleet::{Pool, Task};
/// use agentix_host::{LocalProvider, SandboxConfig};
///
/// // `square` is a `#[agentix::remote]` function of the bundle's.
/// let tasks = (0..1000).map(|n| Task::new(format!("square-{n}"), n));
/// let pool = Pool::new(LocalProvider::new(), SandboxConfig::new("target/debug/my-bundle"))
///     .max_sandboxes(64)
///     .record("results.jsonl");
/// let outcomes = pool
///     .run(tasks, move |sandbox, n| async move { sandbox.remote(square, (n,)).await })?
///     .collect_all()
///     .await;
/// # Ok(()) }
/// ```
pub struct Pool {
    provider: Arc<dyn Provider>,
    config: SandboxConfig,
    max_sandboxes: usize,
    max_starting: usize,
    reuse: usize,
    warm: usize,
    reset: Option<SandboxHook>,
    setup: Option<SandboxHook>,
    start: Option<StartHook>,
    retry: RetryPolicy,
    attempt_deadline: Option<Duration>,
    task_deadline: Option<Duration>,
    record: Option<PathBuf>,
    progress: ProgressDisplay,
    current: Mutex<(Arc<StatsCounters>, Arc<StartThrottle>)>,
    runs: Arc<Mutex<Vec<RunControl>>>,
}

/// How [`Pool::shutdown`] stops a run and knows when it has stopped.
#[derive(Clone)]
struct RunControl {
    /// Cancelled: the lanes stop and drop their sandboxes.
    cancel: CancellationToken,
    /// The run's driver, lanes and deletions: empty once all have ended.
    tracker: TaskTracker,
}

impl Pool {
    /// A pool of sandboxes `provider` makes from `config`: 16 at once, 8
    /// starting at once, a fresh sandbox per task, three attempts.
    pub fn new(provider: impl Provider + 'static, config: SandboxConfig) -> Pool {
        Pool::shared(Arc::new(provider), config)
    }

    /// [`Pool::new`] over a provider shared with other code.
    pub fn shared(provider: Arc<dyn Provider>, config: SandboxConfig) -> Pool {
        Pool {
            provider,
            config,
            max_sandboxes: 16,
            max_starting: 8,
            reuse: 1,
            warm: 0,
            reset: None,
            setup: None,
            start: None,
            retry: RetryPolicy::default(),
            attempt_deadline: None,
            task_deadline: None,
            record: None,
            progress: ProgressDisplay::Auto,
            current: Mutex::new((Arc::default(), StartThrottle::new(8))),
            runs: Arc::default(),
        }
    }

    /// At most `n` sandboxes alive at once (and so `n` tasks running).
    pub fn max_sandboxes(mut self, n: usize) -> Self {
        self.max_sandboxes = n.max(1);
        self
    }

    /// At most `n` sandbox creates in flight; fewer while the provider
    /// answers slowly or fails (see `start_throttle`).
    pub fn max_starting(mut self, n: usize) -> Self {
        self.max_starting = n.max(1);
        self
    }

    /// Runs up to `tasks` tasks on one sandbox before it is deleted (1, the
    /// default, is a fresh sandbox per task).
    pub fn reuse(mut self, tasks: usize) -> Self {
        self.reuse = tasks.max(1);
        self
    }

    /// Keeps up to `k` started sandboxes idle beside those running tasks,
    /// so that a task that needs a fresh sandbox claims one at once instead
    /// of waiting for a create. Sandboxes busy or warm stay within
    /// `max_sandboxes + k` (those being deleted aside); the warm ones go
    /// when the queue is empty.
    pub fn warm(mut self, k: usize) -> Self {
        self.warm = k;
        self
    }

    /// Runs `reset` on a sandbox before it takes its next task; a reset
    /// that fails retires the sandbox, and the task gets a fresh one.
    pub fn reset_with<R, F>(mut self, reset: R) -> Self
    where
        R: Fn(Arc<Sandbox>) -> F + Send + Sync + 'static,
        F: Future<Output = Result<(), RemoteError>> + Send + 'static,
    {
        self.reset = Some(Arc::new(move |sandbox| Box::pin(reset(sandbox))));
        self
    }

    /// Runs `setup` on each new sandbox before its first task (warm ones
    /// too): the place to register a plugin's host half, such as an
    /// egress gateway's `attach`. A setup that fails deletes the sandbox;
    /// the task is retried on another if the sandbox died meanwhile, and
    /// fails as `Setup` if the sandbox's code refused.
    pub fn setup_with<S, F>(mut self, setup: S) -> Self
    where
        S: Fn(Arc<Sandbox>) -> F + Send + Sync + 'static,
        F: Future<Output = Result<(), RemoteError>> + Send + 'static,
    {
        self.setup = Some(Arc::new(move |sandbox| Box::pin(setup(sandbox))));
        self
    }

    /// Starts every sandbox from the snapshot of one run of `setup(sandbox,
    /// args)` (a [`SetupCache`] keyed by the environment, `name` and
    /// `args`): the slow setup runs once, not once per sandbox. A setup
    /// that fails fails the start (retried as a provider's failure).
    pub fn with_setup<A, S, Fut>(mut self, name: &str, args: A, setup: S) -> Self
    where
        A: Serialize + Clone + Send + Sync + 'static,
        S: Fn(Arc<Sandbox>, A) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<(), RemoteError>> + Send + 'static,
    {
        let cache = Arc::new(SetupCache::new(self.provider.clone(), self.config.clone()));
        let name = name.to_owned();
        self.start = Some(Arc::new(move || {
            let (cache, name, args, setup) =
                (cache.clone(), name.clone(), args.clone(), setup.clone());
            Box::pin(async move { cache.sandbox(&name, args, setup).await })
        }));
        self
    }

    /// How often a task the infrastructure failed runs again, and after
    /// how long.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Ends an attempt that runs longer than `limit` (its sandbox deleted)
    /// and retries the task.
    pub fn attempt_deadline(mut self, limit: Duration) -> Self {
        self.attempt_deadline = Some(limit);
        self
    }

    /// Ends a task that has not finished `limit` after a lane took it, over
    /// all its attempts; it is not retried after that.
    pub fn task_deadline(mut self, limit: Duration) -> Self {
        self.task_deadline = Some(limit);
        self
    }

    /// Writes every outcome to the JSON-lines file at `path` as it happens,
    /// and skips the tasks it already holds (a run that was stopped or
    /// killed, run again).
    pub fn record(mut self, path: impl Into<PathBuf>) -> Self {
        self.record = Some(path.into());
        self
    }

    /// How the run shows its progress ([`ProgressDisplay::Auto`] unless
    /// set).
    pub fn progress(mut self, display: ProgressDisplay) -> Self {
        self.progress = display;
        self
    }

    /// Stops every run of this pool and waits until each sandbox it started
    /// is deleted. The tasks that were running end without an outcome (a
    /// run with a record does them again when resumed); their streams end.
    pub async fn shutdown(&self) {
        shutdown_runs(&self.runs).await;
    }

    /// On SIGINT (Ctrl-C) or SIGTERM, shuts the pool down (see
    /// [`Pool::shutdown`]) and then exits the process with status 130 or
    /// 143, as the signal would have; a second signal while sandboxes are
    /// being deleted exits at once. For applications: a library installs
    /// no handler by itself. Call it inside a tokio runtime.
    pub fn shutdown_on_signals(&self) -> std::io::Result<()> {
        use tokio::signal::unix::{signal, SignalKind};
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut terminate = signal(SignalKind::terminate())?;
        let runs = self.runs.clone();
        tokio::spawn(async move {
            let status = tokio::select! {
                _ = interrupt.recv() => 130,
                _ = terminate.recv() => 143,
            };
            tracing::warn!(
                target: "agentix_fleet",
                "stopping: deleting the pool's sandboxes (signal again to exit at once)"
            );
            tokio::select! {
                _ = shutdown_runs(&runs) => {}
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            std::process::exit(status);
        });
        Ok(())
    }

    /// The counters of the current (or last) run.
    pub fn stats(&self) -> PoolStats {
        let current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        current.0.snapshot(current.1.limit())
    }

    /// Runs `work` for every task of `tasks`, each on a sandbox of the
    /// pool's, and returns the outcomes as they come. Fails at once when a
    /// task id appears twice or the record cannot be opened.
    pub fn run<I, O, F, Fut>(
        &self,
        tasks: impl IntoIterator<Item = Task<I>>,
        work: F,
    ) -> std::io::Result<Run<O>>
    where
        I: Clone + Send + Sync + 'static,
        O: Serialize + Send + Sync + 'static,
        F: Fn(Arc<Sandbox>, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, RemoteError>> + Send + 'static,
    {
        let record = self
            .record
            .as_ref()
            .map(RunRecord::open)
            .transpose()?
            .map(Arc::new);
        let mut seen = HashSet::new();
        let mut queue = VecDeque::new();
        let mut skipped = 0u64;
        for task in tasks {
            if !seen.insert(task.id.clone()) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("task id `{}` appears twice: ids must be unique", task.id),
                ));
            }
            match record.as_ref().is_some_and(|r| r.has(&task.id)) {
                true => skipped += 1,
                false => queue.push_back(task),
            }
        }
        let stats = Arc::new(StatsCounters::default());
        stats.tasks.store(queue.len() as u64, Ordering::Relaxed);
        stats.skipped.store(skipped, Ordering::Relaxed);
        let throttle = StartThrottle::new(self.max_starting);
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = (stats.clone(), throttle.clone());

        let lanes = self.max_sandboxes.min(queue.len());
        warn_if_fds_run_out(lanes);
        let control = RunControl {
            cancel: CancellationToken::new(),
            tracker: TaskTracker::new(),
        };
        {
            let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
            runs.retain(|run| !(run.tracker.is_closed() && run.tracker.is_empty()));
            runs.push(control.clone());
        }
        let shared = Arc::new(Shared {
            provider: self.provider.clone(),
            config: self.config.clone(),
            reuse: self.reuse,
            reset: self.reset.clone(),
            setup: self.setup.clone(),
            start: self.start.clone(),
            retry: self.retry,
            attempt_deadline: self.attempt_deadline,
            task_deadline: self.task_deadline,
            queue: Mutex::new(queue),
            work,
            record: record.clone(),
            stats: stats.clone(),
            throttle: throttle.clone(),
            started: Instant::now(),
            warm: WarmSet::new(self.warm),
            cancel: control.cancel.clone(),
            tracker: control.tracker.clone(),
        });
        let (tx, rx) = mpsc::channel(lanes.max(1) * 2);
        let display = self.progress;
        let driving = shared.tracker.token();
        let driver = tokio::spawn(async move {
            let _driving = driving;
            // What hosts that died left (a SIGKILL runs no cleanup) goes
            // before this run adds its own.
            match shared.provider.reap().await {
                Ok(0) => {}
                Ok(reaped) => tracing::info!(
                    target: "agentix_fleet",
                    reaped,
                    "removed sandboxes that hosts which died left behind"
                ),
                Err(error) => tracing::warn!(
                    target: "agentix_fleet",
                    %error,
                    "cannot look for sandboxes that dead hosts left behind"
                ),
            }
            let mut running = tokio::task::JoinSet::new();
            let lanes = if shared.cancel.is_cancelled() {
                0
            } else {
                lanes
            };
            for _ in 0..lanes {
                running.spawn(lane(shared.clone(), tx.clone()));
            }
            let mut warming = tokio::task::JoinSet::new();
            let warmers = if lanes == 0 { 0 } else { shared.warm.target() };
            for _ in 0..warmers {
                warming.spawn(keep_warm(shared.clone()));
            }
            let lanes_done = async { while running.join_next().await.is_some() {} };
            let snapshot = || shared.stats.snapshot(shared.throttle.limit());
            progress::show(display, snapshot, lanes_done).await;
            // A warmer stopped mid-create leaves nothing (see `create`).
            warming.abort_all();
            while warming.join_next().await.is_some() {}
            let left = shared.warm.drain();
            shared
                .stats
                .warm
                .fetch_sub(left.len() as u64, Ordering::Relaxed);
            drop(left);
            // The stream ends (the last sender goes) once every sandbox is.
            shared.tracker.close();
            drop(_driving);
            shared.tracker.wait().await;
            drop(tx);
        });
        Ok(Run {
            outcomes: rx,
            driver,
            stats,
            throttle,
            record,
        })
    }
}

/// A run's outcomes, as tasks end; dropping it stops the run (its sandboxes
/// are deleted as their handles drop, and its record gets nothing more, so
/// that a next run does the unfinished tasks exactly once).
pub struct Run<O> {
    outcomes: mpsc::Receiver<Outcome<O>>,
    driver: tokio::task::JoinHandle<()>,
    stats: Arc<StatsCounters>,
    throttle: Arc<StartThrottle>,
    record: Option<Arc<RunRecord>>,
}

impl<O> Run<O> {
    /// The run's counters now.
    pub fn stats(&self) -> PoolStats {
        self.stats.snapshot(self.throttle.limit())
    }
}

impl<O: Send + 'static> Run<O> {
    /// Waits for every outcome; returns them in the order tasks ended.
    /// Dropping the future stops the run, as dropping the run does.
    pub async fn collect_all(self) -> Vec<Outcome<O>> {
        // Collected by a task of the runtime: awaited on the thread that
        // blocks on the runtime (`#[tokio::main]`'s), every outcome would
        // wake that thread from its futex, an eighth of the host's CPU at
        // 12,000 tasks a second.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return self.collect_here().await;
        };
        let collecting = AbortOnDropHandle::new(runtime.spawn(self.collect_here()));
        match collecting.await {
            Ok(all) => all,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Cancelled: the runtime is shutting down, and this with it.
            Err(_) => Vec::new(),
        }
    }

    async fn collect_here(mut self) -> Vec<Outcome<O>> {
        let mut all = Vec::new();
        while let Some(outcome) = self.outcomes.recv().await {
            all.push(outcome);
        }
        all
    }
}

impl<O> futures_util::Stream for Run<O> {
    type Item = Outcome<O>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.outcomes.poll_recv(cx)
    }
}

impl<O> Drop for Run<O> {
    fn drop(&mut self) {
        // Lanes may finish a task before the abort reaches them: what they
        // finish now is nobody's, and must not be recorded as done.
        if let Some(record) = &self.record {
            record.close();
        }
        self.driver.abort();
    }
}

/// Runs the pool's `setup` on a new sandbox; one whose setup fails is
/// deleted.
async fn set_up(
    sandbox: Arc<Sandbox>,
    setup: Option<&SandboxHook>,
) -> Result<Arc<Sandbox>, Failure> {
    let Some(setup) = setup else {
        return Ok(sandbox);
    };
    match setup(sandbox.clone()).await {
        Ok(()) => Ok(sandbox),
        Err(error) => {
            let failure = Failure::of_sandbox_setup(&error, sandbox.id());
            delete_shared(sandbox).await;
            Err(failure)
        }
    }
}

/// Deletes a sandbox nobody else holds (one a setup kept a handle on goes
/// when that handle does, as a session does).
async fn delete_shared(sandbox: Arc<Sandbox>) {
    if let Some(sandbox) = Arc::into_inner(sandbox) {
        sandbox.delete().await;
    }
}

/// What every lane of one run shares.
struct Shared<I, F> {
    provider: Arc<dyn Provider>,
    config: SandboxConfig,
    reuse: usize,
    reset: Option<SandboxHook>,
    setup: Option<SandboxHook>,
    start: Option<StartHook>,
    retry: RetryPolicy,
    attempt_deadline: Option<Duration>,
    task_deadline: Option<Duration>,
    queue: Mutex<VecDeque<Task<I>>>,
    work: F,
    record: Option<Arc<RunRecord>>,
    stats: Arc<StatsCounters>,
    throttle: Arc<StartThrottle>,
    started: Instant,
    warm: WarmSet<Held>,
    cancel: CancellationToken,
    /// The driver, the lanes and the deletions, so that a shutdown can wait
    /// for all of them.
    tracker: TaskTracker,
}

/// A sandbox a lane holds (between tasks, or for the attempt running on
/// it), and how many tasks it has run. Dropping it deletes the sandbox
/// beside the lanes, on every path: a task that ends, a run stopped, a
/// lane aborted.
struct Held {
    /// Always there; taken only by `drop`, so that the deletion holds the
    /// last handle.
    sandbox: Option<Arc<Sandbox>>,
    uses: usize,
    retire: Retire,
}

impl Held {
    fn sandbox(&self) -> &Arc<Sandbox> {
        self.sandbox.as_ref().expect("taken only when dropped")
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(sandbox) = self.sandbox.take() {
            self.retire.delete(sandbox);
        }
    }
}

/// Deletes sandboxes beside the lanes, tracked so the run ends after.
#[derive(Clone)]
struct Retire {
    tracker: TaskTracker,
    stats: Arc<StatsCounters>,
}

impl Retire {
    fn delete(&self, sandbox: Arc<Sandbox>) {
        let stats = self.stats.clone();
        let deletion = async move {
            // A handle the work function kept deletes it when dropped.
            if let Ok(sandbox) = Arc::try_unwrap(sandbox) {
                sandbox.delete().await;
            }
            stats.sandboxes.fetch_sub(1, Ordering::Relaxed);
        };
        // Outside a runtime (its shutdown dropping the lanes) the handle's
        // own drop stops the sandbox, unwaited.
        if tokio::runtime::Handle::try_current().is_ok() {
            self.tracker.spawn(deletion);
        }
    }
}

/// One warmer: keeps a place of the warm set filled while tasks wait.
async fn keep_warm<I, O, F, Fut>(shared: Arc<Shared<I, F>>)
where
    I: Clone + Send + Sync + 'static,
    O: Serialize + Send + Sync + 'static,
    F: Fn(Arc<Sandbox>, I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, RemoteError>> + Send + 'static,
{
    let queue_empty = || {
        shared
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    };
    while !shared.cancel.is_cancelled() && !queue_empty() {
        if !shared.warm.reserve() {
            tokio::select! {
                _ = shared.cancel.cancelled() => return,
                _ = shared.warm.place_freed() => continue,
            }
        }
        match shared.create().await {
            Ok(sandbox) => {
                // Counted first: a claim right after the fill subtracts.
                shared.stats.warm.fetch_add(1, Ordering::Relaxed);
                shared.warm.fill(sandbox);
            }
            Err(failure) => {
                shared.warm.release();
                tracing::debug!(target: "agentix_fleet", %failure, "a warm sandbox did not start");
                // The throttle has backed off; a refused create is not
                // tried again at once.
                tokio::time::sleep(WARM_RETRY_PAUSE).await;
            }
        }
    }
}

/// How long a warmer waits after a create failed.
const WARM_RETRY_PAUSE: Duration = Duration::from_millis(200);

/// One lane: tasks from the queue, one at a time, until it is empty or
/// nobody listens for outcomes.
async fn lane<I, O, F, Fut>(shared: Arc<Shared<I, F>>, outcomes: mpsc::Sender<Outcome<O>>)
where
    I: Clone + Send + Sync + 'static,
    O: Serialize + Send + Sync + 'static,
    F: Fn(Arc<Sandbox>, I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, RemoteError>> + Send + 'static,
{
    let _alive = shared.tracker.token();
    let mut held = None;
    while !shared.cancel.is_cancelled() {
        let next = shared
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front();
        let Some(task) = next else { break };
        // A shutdown drops the attempt, and with it its sandbox: the task
        // gets no outcome, so a resumed run does it again.
        let outcome = tokio::select! {
            biased;
            _ = shared.cancel.cancelled() => break,
            outcome = shared.run_task(task, &mut held) => outcome,
        };
        shared.ended(&outcome);
        // A reader that stops reading must not keep a shutdown waiting.
        let sent = tokio::select! {
            biased;
            _ = shared.cancel.cancelled() => break,
            sent = outcomes.send(outcome) => sent,
        };
        if sent.is_err() {
            break;
        }
    }
    drop(held);
}

impl<I, O, F, Fut> Shared<I, F>
where
    I: Clone + Send + Sync + 'static,
    O: Serialize + Send + Sync + 'static,
    F: Fn(Arc<Sandbox>, I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, RemoteError>> + Send + 'static,
{
    /// Every attempt `task` gets, until one ends it.
    async fn run_task(&self, task: Task<I>, held: &mut Option<Held>) -> Outcome<O> {
        let taken = Instant::now();
        let deadline = self.task_deadline.map(|limit| taken + limit);
        let mut timings = Timings {
            queued: self.started.elapsed(),
            ..Timings::default()
        };
        let mut retried = Vec::new();
        let mut spread = DefaultHasher::new();
        task.id.hash(&mut spread);
        let mut attempts = 0;
        loop {
            attempts += 1;
            let (result, sandbox) = self.attempt(&task, held, deadline, &mut timings).await;
            let failure = match result {
                Ok(value) => {
                    timings.total = self.started.elapsed();
                    return Outcome {
                        task: task.id,
                        result: Ok(value),
                        attempts,
                        retried,
                        sandbox,
                        timings,
                    };
                }
                Err(failure) => failure,
            };
            let backoff = self.retry.backoff(attempts, spread.finish());
            let time_left = deadline.is_none_or(|d| Instant::now() + backoff < d);
            if !failure.kind.retried() || attempts >= self.retry.max_attempts || !time_left {
                timings.total = self.started.elapsed();
                return Outcome {
                    task: task.id,
                    result: Err(failure),
                    attempts,
                    retried,
                    sandbox,
                    timings,
                };
            }
            tracing::debug!(
                target: "agentix_fleet",
                task = %task.id,
                attempt = attempts,
                failure = %failure,
                "retrying on a fresh sandbox"
            );
            retried.push(failure);
            self.stats.retries.fetch_add(1, Ordering::Relaxed);
            let _waiting = Gauge::up(&self.stats.retrying);
            tokio::time::sleep(backoff).await;
        }
    }

    /// One attempt: a sandbox (the held one, reset, or a new one), the
    /// work function within the deadlines, and the sandbox kept or retired.
    async fn attempt(
        &self,
        task: &Task<I>,
        held: &mut Option<Held>,
        deadline: Option<Instant>,
        timings: &mut Timings,
    ) -> (Result<O, Failure>, Option<String>) {
        let started = Instant::now();
        let sandbox = self.sandbox(held).await;
        timings.start += started.elapsed();
        let mut sandbox = match sandbox {
            Ok(sandbox) => sandbox,
            Err(failure) => return (Err(failure), None),
        };
        let id = sandbox.sandbox().id().to_owned();
        let now = Instant::now();
        let limit = match (self.attempt_deadline, deadline) {
            (Some(attempt), Some(task)) => Some(attempt.min(task.saturating_duration_since(now))),
            (attempt, task) => attempt.or(task.map(|d| d.saturating_duration_since(now))),
        };
        let call = (self.work)(sandbox.sandbox().clone(), task.input.clone());
        let ended = {
            let _running = Gauge::up(&self.stats.running);
            match limit {
                Some(limit) => tokio::time::timeout(limit, call).await.map_err(|_| limit),
                None => Ok(call.await),
            }
        };
        timings.call += now.elapsed();
        let result = match ended {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(Failure::of_call(&error, &id)),
            Err(limit) => Err(Failure::deadline(
                &format!("the attempt ran past its deadline ({limit:?})"),
                &id,
            )),
        };
        // A sandbox whose task failed by itself is as good as before; any
        // other failure may have left it broken.
        let sound = match &result {
            Ok(_) => true,
            Err(failure) => failure.kind == FailureKind::Task,
        };
        sandbox.uses += 1;
        if sound && sandbox.uses < self.reuse {
            *held = Some(sandbox);
        }
        (result, Some(id))
    }

    /// The sandbox for the next attempt: the held one once reset, or a new
    /// one.
    async fn sandbox(&self, held: &mut Option<Held>) -> Result<Held, Failure> {
        if let Some(reused) = held.take() {
            let reset = match &self.reset {
                Some(reset) => reset(reused.sandbox().clone()).await,
                None => Ok(()),
            };
            match reset {
                Ok(()) => return Ok(reused),
                Err(error) => {
                    tracing::warn!(
                        target: "agentix_fleet",
                        sandbox = %reused.sandbox().id(),
                        %error,
                        "a sandbox's reset failed; it is replaced"
                    );
                    drop(reused);
                }
            }
        }
        if let Some(warm) = self.warm.claim() {
            self.stats.warm.fetch_sub(1, Ordering::Relaxed);
            return Ok(warm);
        }
        self.create().await
    }

    /// A new sandbox, through the throttle. The create runs as a task of
    /// its own, so that an attempt or a warmer stopped while it runs (a
    /// shutdown, a deadline) leaves no sandbox behind: one nobody waits for
    /// any more is deleted there, and the run's end waits for that.
    async fn create(&self) -> Result<Held, Failure> {
        let permit = self.throttle.acquire().await;
        let (created_tx, created_rx) = tokio::sync::oneshot::channel();
        let (provider, config, stats, setup, start) = (
            self.provider.clone(),
            self.config.clone(),
            self.stats.clone(),
            self.setup.clone(),
            self.start.clone(),
        );
        self.tracker.spawn(async move {
            stats.starting.fetch_add(1, Ordering::Relaxed);
            let began = Instant::now();
            let created = match start {
                Some(start) => start().await,
                None => provider.session(config).await,
            };
            stats.starting.fetch_sub(1, Ordering::Relaxed);
            let failed =
                matches!(&created, Err(e) if FailureKind::of_start(e) == FailureKind::Provider);
            permit.finished(began.elapsed(), failed);
            let made = match created {
                Ok(sandbox) => set_up(Arc::new(sandbox), setup.as_ref()).await,
                Err(error) => Err(Failure::of_start(&error)),
            };
            if let Err(Ok(unwanted)) = created_tx.send(made) {
                delete_shared(unwanted).await;
            }
        });
        let created = created_rx.await.unwrap_or_else(|_| {
            Err(Failure::of_start(&agentix_host::ProviderError::Backend {
                what: "create a sandbox".into(),
                reason: "the create's task ended without a result".into(),
            }))
        });
        match created {
            Ok(sandbox) => {
                self.stats.sandboxes.fetch_add(1, Ordering::Relaxed);
                self.stats.created.fetch_add(1, Ordering::Relaxed);
                Ok(Held {
                    sandbox: Some(sandbox),
                    uses: 0,
                    retire: Retire {
                        tracker: self.tracker.clone(),
                        stats: self.stats.clone(),
                    },
                })
            }
            Err(failure) => Err(failure),
        }
    }

    /// Counts and records an outcome.
    fn ended(&self, outcome: &Outcome<O>) {
        let counter = match outcome.is_done() {
            true => &self.stats.done,
            false => &self.stats.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if let Err(failure) = &outcome.result {
            tracing::info!(
                target: "agentix_fleet",
                task = %outcome.task,
                attempts = outcome.attempts,
                %failure,
                "task failed"
            );
        }
        if let Some(record) = &self.record {
            if let Err(error) = record.write(outcome) {
                tracing::error!(
                    target: "agentix_fleet",
                    task = %outcome.task,
                    record = %record.path().display(),
                    %error,
                    "the outcome could not be recorded; a resumed run will run the task again"
                );
            }
        }
    }
}

/// Cancels every run in `runs` and waits until each has ended and deleted
/// its sandboxes.
async fn shutdown_runs(runs: &Mutex<Vec<RunControl>>) {
    let runs = std::mem::take(&mut *runs.lock().unwrap_or_else(|p| p.into_inner()));
    for run in &runs {
        run.cancel.cancel();
    }
    for run in runs {
        run.tracker.close();
        run.tracker.wait().await;
    }
}

/// Warns when the open-file limit cannot hold `sandboxes` local sandboxes
/// at once: creates would then fail for want of descriptors.
fn warn_if_fds_run_out(sandboxes: usize) {
    let needed = sandboxes as u64 * agentix_host::fd_limit::FDS_PER_SANDBOX + 64;
    if let Ok(limit) = agentix_host::fd_limit() {
        if limit < needed {
            tracing::warn!(
                target: "agentix_fleet",
                limit,
                needed,
                "the open-file limit holds fewer sandboxes than the pool runs at once; \
                 call agentix::raise_fd_limit() first, or lower max_sandboxes"
            );
        }
    }
}
