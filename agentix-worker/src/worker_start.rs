//! [`WorkerStart`]: code a plugin runs in every worker before it takes calls.
//!
//! A worker that was killed leaves behind whatever its plugins had under
//! way (temporary files, half-made state); the next worker of the sandbox
//! is the one to clean it, before its first call. Plugins submit a
//! `WorkerStart` with `agentix::on_worker_start!`; the worker runs them all
//! before it reports ready, in no particular order.

/// One function to run when a worker starts.
pub struct WorkerStart {
    /// What to run; it should be quick, and must not panic.
    pub run: fn(),
}

inventory::collect!(WorkerStart);

/// Runs every registered [`WorkerStart`]; a panic in one is reported and
/// does not stop the others or the worker.
pub fn run_all() {
    for hook in inventory::iter::<WorkerStart> {
        if std::panic::catch_unwind(hook.run).is_err() {
            eprintln!("agentix worker: a worker-start hook panicked");
        }
    }
}
