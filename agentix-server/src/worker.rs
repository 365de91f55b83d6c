//! [`Worker`]: one generation of the worker process, as an actor.
//!
//! Supervised by the [`WorkerSupervisor`](crate::supervisor::WorkerSupervisor),
//! which starts one per generation and hears of its exit
//! ([`WorkerExited`]) once the worker has cleaned up after it; it has no
//! child actors: the pumps on the process's pipes are tasks it starts
//! ([`crate::worker_pipes`]), each ending with its pipe.
//!
//! It owns the process. The process group is killed on request
//! ([`KillWorker`]: a worker that never became ready) and however the
//! actor ends; what the worker's commands started under its tag is killed
//! once the worker is gone (a `setsid` or a double fork escapes the group).
//! The group is signalled only until the exit is known, so a pid that was
//! reaped, and may be reused, is never signalled.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use actix::prelude::*;
use agentix_actors::supervision::ChildAddr;
use agentix_wire::budgeted_channel::budgeted_channel;
use agentix_wire::outbox::Outbox;
use agentix_wire::process;

use crate::call_router::CallRouter;
use crate::relays::Relays;
use crate::worker_pipes::{self, drain_output, FrameArrived, UnreadOutput, WorkerExited};
use crate::worker_process::{self, OutputTail, WorkerProcess};

// ---- messages ------------------------------------------------------------

/// Kill the process now (it did not become ready in time); its exit is
/// reported as any other.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct KillWorker;

/// Read the process's stdout and stderr now: it does not capture them.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct DrainOutput;

// ---- the actor -----------------------------------------------------------

/// Frames queued for a worker's pipe before new ones wait in its outbox.
const WORKER_QUEUE: usize = 4096;

/// Payload bytes queued for a worker's pipe before new frames wait in its
/// outbox: 4,096 large frames would otherwise sit in the queue.
const WORKER_QUEUE_BYTES: usize = 8 << 20;

/// The process a [`Worker`] owns: whom to kill, and whether it may still
/// be signalled. Shared by the actor and its supervisor's handle.
#[derive(Clone)]
struct ProcessOwner {
    pid: u32,
    tag: String,
    exited: Arc<AtomicBool>,
}

impl ProcessOwner {
    /// SIGKILLs the process group, unless the process is known gone.
    fn kill_group(&self) {
        if !self.exited.load(Ordering::Acquire) {
            process::signal_group(self.pid, libc::SIGKILL);
        }
    }

    /// Sends `signal` to the process alone, unless it is known gone: 1 if
    /// sent.
    fn signal(&self, signal: libc::c_int) -> usize {
        if self.exited.load(Ordering::Acquire) {
            return 0;
        }
        process::signal_pid(self.pid, signal);
        1
    }

    /// Kills everything under the worker's tag, on a thread of its own
    /// (it walks `/proc`).
    fn kill_tagged_in_background(&self) {
        let tag = self.tag.clone();
        std::thread::spawn(move || process::kill_tagged(&tag));
    }
}

/// One generation of the worker process.
pub(crate) struct Worker {
    owner: ProcessOwner,
    output: UnreadOutput,
    /// Told of the exit, once the worker has cleaned up.
    supervisor: Recipient<WorkerExited>,
}

/// What a supervisor keeps of the worker it started.
pub(crate) struct WorkerHandle {
    /// The actor.
    pub addr: Addr<Worker>,
    /// The process id (and process group id).
    pub pid: u32,
    /// The id the server gave it.
    pub worker_id: String,
    /// Frames to its pipe, in order: a bounded queue with an outbox in
    /// front for what cannot wait (see `agentix_wire::outbox`).
    pub frames: Outbox,
    /// The last lines it printed.
    pub tail: OutputTail,
    owner: ProcessOwner,
}

impl WorkerHandle {
    /// Kills the process group and everything under its tag, on this
    /// thread: for a shutdown, after which the server exits at once.
    pub(crate) fn kill_now(&self) {
        self.owner.kill_group();
        process::kill_tagged(&self.owner.tag);
    }

    /// A function that freezes (`true`) or thaws (`false`) the worker and
    /// everything under its tag, answering how many processes it
    /// signalled; it walks `/proc`, so it is for a blocking thread.
    pub(crate) fn signaller(&self) -> impl FnOnce(bool) -> usize + Send + 'static {
        let owner = self.owner.clone();
        move |pause| {
            // The worker by its pid: it hides its memory, so its tag cannot
            // be read from /proc. First on pause (it starts nothing more),
            // last on resume (what it waits on runs first).
            if pause {
                owner.signal(libc::SIGSTOP) + process::stop_tagged(&owner.tag)
            } else {
                process::continue_tagged(&owner.tag) + owner.signal(libc::SIGCONT)
            }
        }
    }

    /// Kills the process group now and everything under its tag on a
    /// thread: for a supervisor that ends (it may be unwinding a panic).
    pub(crate) fn kill_in_background(&self) {
        self.owner.kill_group();
        self.owner.kill_tagged_in_background();
    }
}

/// Where a worker's frames and its exit go.
pub(crate) struct WorkerReports {
    /// Frames that answer no call.
    pub frames: Recipient<FrameArrived>,
    /// Frames that answer calls.
    pub calls: ChildAddr<CallRouter>,
    /// The exit, after the worker cleaned up.
    pub exited: Recipient<WorkerExited>,
}

impl Worker {
    /// Starts the actor for `proc`, generation `generation` with id
    /// `worker_id`: its pumps begin, its logs go to `side`, and what it
    /// sends goes to `reports`.
    pub(crate) fn start(
        proc: WorkerProcess,
        generation: u64,
        worker_id: String,
        side: &Relays,
        reports: WorkerReports,
    ) -> WorkerHandle {
        let (pid, tail) = (proc.pid, proc.tail.clone());
        let owner = ProcessOwner {
            pid,
            tag: worker_process::worker_tag(&worker_id),
            exited: Arc::default(),
        };
        let (tx, rx) = budgeted_channel(WORKER_QUEUE, WORKER_QUEUE_BYTES);
        let addr = Worker::create(|ctx| {
            let pumps = worker_pipes::Reports {
                frames: reports.frames,
                calls: reports.calls,
                // Through this actor, which cleans up before passing it on.
                exited: ctx.address().recipient(),
            };
            let output = worker_pipes::start(proc, generation, rx, side, pumps);
            Worker {
                owner: owner.clone(),
                output,
                supervisor: reports.exited,
            }
        });
        WorkerHandle {
            addr,
            pid,
            worker_id,
            frames: Outbox::new(tx),
            tail,
            owner,
        }
    }
}

impl Actor for Worker {
    type Context = Context<Self>;
}

impl Drop for Worker {
    // Runs however the actor ends: the process must not outlive it.
    fn drop(&mut self) {
        if !self.owner.exited.load(Ordering::Acquire) {
            self.owner.kill_group();
            self.owner.kill_tagged_in_background();
        }
    }
}

impl Handler<WorkerExited> for Worker {
    type Result = ();

    fn handle(&mut self, msg: WorkerExited, ctx: &mut Context<Self>) {
        self.owner.exited.store(true, Ordering::Release);
        // What its commands started outlives it otherwise.
        let tag = self.owner.tag.clone();
        tokio::task::spawn_blocking(move || process::kill_tagged(&tag));
        self.supervisor.do_send(msg);
        ctx.stop();
    }
}

impl Handler<KillWorker> for Worker {
    type Result = ();

    fn handle(&mut self, _: KillWorker, _: &mut Context<Self>) {
        self.owner.kill_group();
    }
}

impl Handler<DrainOutput> for Worker {
    type Result = ();

    fn handle(&mut self, _: DrainOutput, _: &mut Context<Self>) {
        drain_output(&self.output);
    }
}
