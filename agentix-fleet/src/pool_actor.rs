//! [`PoolActor`]: a [`Pool`] as an actix actor, for applications and
//! services that compose actors: send it [`RunJob`] with a `Recipient`,
//! and each outcome comes back as a [`JobEvent`] message, as tasks end.
//!
//! Supervisor: whatever starts it (an application's `System`, a service's
//! arbiter, a `Supervisor` of the user's). Children: the runs it started —
//! each the pool's lanes and the sandboxes they hold, which the runs create,
//! retry and delete as [`crate::pool`] describes. [`ShutdownPool`] deletes
//! every sandbox and then stops the actor; an actor stopped otherwise
//! (its system ending) drops its runs, whose sandboxes are deleted as their
//! handles drop.
//!
//! Events go out with `send`, not `do_send`: a recipient whose mailbox is
//! full holds its run's outcomes back (and, through the run's bounded
//! channel, its lanes), so nothing is buffered without bound and nothing is
//! dropped.

use std::future::Future;
use std::sync::Arc;

use actix::prelude::*;
use agentix_host::Sandbox;
use agentix_wire::errors::RemoteError;
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use serde::Serialize;

use crate::outcome::Outcome;
use crate::pool::Pool;
use crate::pool_stats::PoolStats;
use crate::task::Task;

/// The work a pool actor runs for each task.
type Work<I, O> =
    Arc<dyn Fn(Arc<Sandbox>, I) -> BoxFuture<'static, Result<O, RemoteError>> + Send + Sync>;

/// A pool and its work function, as an actor.
pub struct PoolActor<I, O> {
    pool: Arc<Pool>,
    work: Work<I, O>,
}

impl<I, O> PoolActor<I, O>
where
    I: Clone + Send + Sync + 'static,
    O: Serialize + Send + Sync + 'static,
{
    /// An actor running `work` for every task of the jobs sent to it, over
    /// `pool`'s sandboxes.
    pub fn new<F, Fut>(pool: Pool, work: F) -> Self
    where
        F: Fn(Arc<Sandbox>, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, RemoteError>> + Send + 'static,
    {
        PoolActor {
            pool: Arc::new(pool),
            work: Arc::new(move |sandbox, input| Box::pin(work(sandbox, input))),
        }
    }
}

impl<I, O> Actor for PoolActor<I, O>
where
    I: Clone + Send + Sync + 'static,
    O: Serialize + Send + Sync + 'static,
{
    type Context = Context<Self>;
}

/// Runs `tasks`; their outcomes go to `events`. Answered once the run has
/// started (an error when a task id repeats or the record cannot open).
#[derive(Message)]
#[rtype(result = "std::io::Result<()>")]
pub struct RunJob<I, O: Send + 'static> {
    /// The tasks.
    pub tasks: Vec<Task<I>>,
    /// Where each outcome, and then the end, goes.
    pub events: Recipient<JobEvent<O>>,
}

/// What a job's recipient receives.
#[derive(Message)]
#[rtype(result = "()")]
pub enum JobEvent<O> {
    /// A task ended; `stats` are the job's counters just after.
    Outcome {
        /// How the task ended.
        outcome: Outcome<O>,
        /// The job's counters.
        stats: PoolStats,
    },
    /// Every task of the job has ended and its sandboxes are gone.
    Finished(PoolStats),
}

/// The pool's counters (of its current or last job).
#[derive(Message)]
#[rtype(result = "PoolStats")]
pub struct GetPoolStats;

/// Stops every job, deletes every sandbox, then stops the actor.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ShutdownPool;

impl<I, O> Handler<RunJob<I, O>> for PoolActor<I, O>
where
    I: Clone + Send + Sync + 'static,
    O: Serialize + Send + Sync + 'static,
{
    type Result = std::io::Result<()>;

    fn handle(&mut self, job: RunJob<I, O>, ctx: &mut Context<Self>) -> Self::Result {
        let work = self.work.clone();
        let mut run = self
            .pool
            .run(job.tasks, move |sandbox, input| work(sandbox, input))?;
        let events = job.events;
        // Tied to the actor: stopping it drops the run.
        ctx.spawn(
            async move {
                while let Some(outcome) = run.next().await {
                    let stats = run.stats();
                    if events
                        .send(JobEvent::Outcome { outcome, stats })
                        .await
                        .is_err()
                    {
                        // Nobody listens: the run stops with the handle.
                        return;
                    }
                }
                let _ = events.send(JobEvent::Finished(run.stats())).await;
            }
            .into_actor(self),
        );
        Ok(())
    }
}

impl<I, O> Handler<GetPoolStats> for PoolActor<I, O>
where
    I: Clone + Send + Sync + 'static,
    O: Serialize + Send + Sync + 'static,
{
    type Result = MessageResult<GetPoolStats>;

    fn handle(&mut self, _: GetPoolStats, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.pool.stats())
    }
}

impl<I, O> Handler<ShutdownPool> for PoolActor<I, O>
where
    I: Clone + Send + Sync + 'static,
    O: Serialize + Send + Sync + 'static,
{
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: ShutdownPool, _: &mut Context<Self>) -> Self::Result {
        let pool = self.pool.clone();
        Box::pin(
            async move { pool.shutdown().await }
                .into_actor(self)
                .map(|(), _, ctx| ctx.stop()),
        )
    }
}
