//! Fleets: many tasks over many sandboxes, none lost.
//!
//! A [`Pool`] runs tasks over sandboxes of one provider and one config: at
//! most `max_sandboxes` live at once, creates throttled by how the provider
//! holds up ([`start_throttle`]), each task retried on a fresh sandbox when
//! the infrastructure failed it and never when it failed by itself
//! ([`failure`], [`retry_policy`]), every outcome written to a JSON-lines
//! record as it happens so that a second run skips what the first finished
//! ([`run_record`]), and progress on the terminal or in the log
//! ([`progress`], [`pool_stats`]).
//!
//! Layout: [`pool`] is the pool and its run loop, [`pool_actor`] the same
//! as an actix actor that takes jobs and answers with messages; [`task`]
//! what goes in,
//! [`outcome`] what comes out; the rest are the pool's parts, each
//! testable alone. [`setup_cache`] runs a slow setup once per key and
//! starts later sandboxes from its snapshot. This crate sits above `agentix-host` (it only uses the
//! `Provider` trait and the `Sandbox` handle) and below the facade, which
//! re-exports it as `agentix::fleet`.

pub mod failure;
pub mod outcome;
pub mod pool;
pub mod pool_actor;
pub mod pool_stats;
pub mod progress;
pub mod retry_policy;
pub mod run_record;
pub mod setup_cache;
pub mod start_throttle;
pub mod task;
mod warm_set;

pub use failure::{Failure, FailureKind};
pub use outcome::{Outcome, Timings};
pub use pool::{Pool, Run};
pub use pool_actor::{GetPoolStats, JobEvent, PoolActor, RunJob, ShutdownPool};
pub use pool_stats::PoolStats;
pub use progress::ProgressDisplay;
pub use retry_policy::RetryPolicy;
pub use run_record::RunRecord;
pub use setup_cache::SetupCache;
pub use task::Task;
