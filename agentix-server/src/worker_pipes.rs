//! The pumps between the server and one worker process, started by its
//! [`Worker`](crate::worker::Worker) actor ([`start`]): frames to the worker,
//! frames from it (those that answer calls to the call router, the rest to
//! the supervisor), its side pipe of log and trace batches (to the side
//! relay), and the watch on its exit (to the `Worker`, which cleans up and
//! tells its supervisor).
//!
//! They are tasks, not actors: each owns one pipe end and ends with it, and
//! the actors learn everything they must act on through their mailboxes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use agentix_actors::supervision::ChildAddr;
use agentix_wire::budgeted_channel::BudgetedReceiver;
use agentix_wire::codec::{self, FrameReader};
use agentix_wire::process;
use agentix_wire::wire::Frame;

use crate::call_router::{CallFrame, CallRouter, UnreadableReply};
use crate::oom_kills::oom_kills;
use crate::relays::Relays;
use crate::worker_process::{WorkerOutput, WorkerProcess};

// ---- messages to the supervisor -------------------------------------------

/// A frame that answers no call arrived from worker `generation`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct FrameArrived {
    /// The worker's generation.
    pub generation: u64,
    /// The frame.
    pub frame: Frame,
}

/// Worker `generation` exited.
#[derive(Message)]
#[rtype(result = "()")]
pub struct WorkerExited {
    /// The worker's generation.
    pub generation: u64,
    /// How it ended, for logs and errors.
    pub status: String,
}

// ---- the pumps ------------------------------------------------------------

/// A worker's output streams, taken by whoever reads them first: the
/// server, at once for a worker that does not capture its own, else once
/// it died.
pub(crate) type UnreadOutput = Arc<Mutex<Option<WorkerOutput>>>;

/// Takes `output` if nobody has, and starts reading it.
pub(crate) fn drain_output(output: &UnreadOutput) -> Option<tokio::task::JoinHandle<()>> {
    let taken = output.lock().unwrap_or_else(|p| p.into_inner()).take();
    taken.map(WorkerOutput::drain)
}

/// Where a worker's pumps report.
pub(crate) struct Reports {
    /// Each decoded frame that answers no call.
    pub frames: Recipient<FrameArrived>,
    /// Frames that answer calls, and those that did not decode but named
    /// their call: to whichever router holds the calls now.
    pub calls: ChildAddr<CallRouter>,
    /// The worker's exit.
    pub exited: Recipient<WorkerExited>,
}

/// Starts the pumps of worker `generation`: `to_worker` is written to its
/// frame pipe, what it sends goes to `reports` and `relay`; returns its
/// output streams, unread.
pub(crate) fn start(
    proc: WorkerProcess,
    generation: u64,
    to_worker: BudgetedReceiver<Frame>,
    relay: &Relays,
    reports: Reports,
) -> UnreadOutput {
    actix::spawn(async move {
        if let Err(e) = codec::write_frames(proc.frames_out, to_worker).await {
            tracing::debug!("worker frame pipe closed for writing: {e}");
        }
    });
    let pid = proc.pid;
    let reader = FrameReader::new(proc.frames_in, codec::DEFAULT_MAX_FRAME);
    actix::spawn(frames_from_worker(
        reader,
        generation,
        pid,
        reports.frames,
        reports.calls,
    ));
    let side = FrameReader::new(proc.side_in, codec::DEFAULT_MAX_FRAME);
    actix::spawn(side_pipe(
        side,
        generation,
        pid,
        relay.clone(),
        proc.tail.clone(),
    ));
    let output: UnreadOutput = Arc::new(Mutex::new(Some(proc.output)));
    // Counted now, before the worker can have run out of memory.
    let oom_before = oom_kills();
    let exit = watch_exit(
        proc.child,
        generation,
        oom_before,
        output.clone(),
        reports.exited,
    );
    actix::spawn(exit);
    output
}

async fn frames_from_worker(
    mut reader: FrameReader<tokio::net::unix::pipe::Receiver>,
    generation: u64,
    pid: u32,
    frames: Recipient<FrameArrived>,
    calls: ChildAddr<CallRouter>,
) {
    loop {
        match reader.next().await {
            Ok(Some(frame)) if answers_a_call(&frame) => {
                // A router that ended (and is being restarted) ended these
                // calls: the frame has nobody to go to.
                let _ = calls.get().send(CallFrame { generation, frame }).await;
            }
            Ok(Some(frame)) => {
                if frames
                    .send(FrameArrived { generation, frame })
                    .await
                    .is_err()
                {
                    break;
                }
            }
            Ok(None) => break,
            Err(codec::FrameError::Malformed {
                why,
                call: Some(id),
            }) => {
                tracing::warn!(
                    generation,
                    id,
                    "a malformed frame from the worker for call {id}: {why}"
                );
                let reply = UnreadableReply {
                    generation,
                    id,
                    why,
                };
                let _ = calls.get().send(reply).await;
            }
            Err(e) if e.is_recoverable() => {
                tracing::warn!(generation, "dropped a malformed frame from the worker: {e}");
            }
            Err(e) => {
                tracing::error!(
                    generation,
                    "worker frame pipe unusable, killing the worker: {e}"
                );
                process::signal_group(pid, libc::SIGKILL);
                break;
            }
        }
    }
}

/// Whether `frame` belongs to a call (and so to the call router).
fn answers_a_call(frame: &Frame) -> bool {
    matches!(
        frame,
        Frame::Items { .. }
            | Frame::Result { .. }
            | Frame::End { .. }
            | Frame::Error { .. }
            | Frame::Part { .. }
    )
}

async fn side_pipe(
    mut side: FrameReader<tokio::net::unix::pipe::Receiver>,
    generation: u64,
    pid: u32,
    relay: Relays,
    tail: crate::worker_process::OutputTail,
) {
    loop {
        match side.next().await {
            Ok(Some(Frame::Logs { batch, output })) => {
                for line in output {
                    tail.push(line);
                }
                relay.send_logs(batch).await
            }
            Ok(Some(Frame::Traces { batch })) => relay.send_traces(batch).await,
            Ok(Some(_)) => {
                tracing::warn!(
                    generation,
                    "only log and trace frames belong on the side pipe; dropped"
                )
            }
            Ok(None) => break,
            Err(e) if e.is_recoverable() => {
                tracing::warn!(
                    generation,
                    "dropped a malformed log frame from the worker: {e}"
                );
            }
            Err(e) => {
                // Unread, the pipe would fill and stall the worker's logging.
                tracing::error!(
                    generation,
                    "worker side pipe unusable, killing the worker: {e}"
                );
                process::signal_group(pid, libc::SIGKILL);
                break;
            }
        }
    }
}

async fn watch_exit(
    mut child: tokio::process::Child,
    generation: u64,
    oom_before: Option<u64>,
    unread: UnreadOutput,
    exited: Recipient<WorkerExited>,
) {
    let mut status = match child.wait().await {
        Ok(status) => process::describe_exit(status),
        Err(e) => format!("lost track of the worker: {e}"),
    };
    if oom_kills() > oom_before {
        status.push_str(
            " by the kernel's OOM killer: the sandbox ran out of memory (its memory limit)",
        );
    }
    // Read what the worker left unread, and let the last lines of output
    // reach the tail, but do not wait on grandchildren that keep the pipes
    // open.
    if let Some(drained) = drain_output(&unread) {
        let _ = tokio::time::timeout(Duration::from_millis(200), drained).await;
    }
    exited.do_send(WorkerExited { generation, status });
}
