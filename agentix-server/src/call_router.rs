//! [`CallRouter`]: the actor that holds every call the server knows about.
//!
//! Supervised by the [`ServerSupervisor`](crate::server_supervisor::ServerSupervisor),
//! which its [`ChildGuard`] tells when it ends and which then starts another;
//! it has no children.
//!
//! Hosts' `/rpc` handlers send it calls, cancels, acks and disconnects; the
//! worker's frame pump sends it every frame that answers a call; the
//! `WorkerSupervisor` tells it what becomes of the worker ([`WorkerNews`]).
//! A call is a message whose reply resolves when the worker's matching
//! frame arrives, so the pending table ([`CallTable`]) lives in this actor
//! and behind no lock. Calls wait here while no worker is ready; when the
//! worker dies its calls in flight end as its supervisor says.
//!
//! When the router itself ends — it panicked, or its parent stopped it —
//! its calls end with `CallLost` and the worker is told to cancel those it
//! runs. Each incarnation draws worker call ids from a range of its own, so
//! a late result of a lost call never answers a new one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use actix::prelude::*;
use agentix_actors::supervision::ChildGuard;
use agentix_wire::errors::{ErrorKind, RemoteError};
use agentix_wire::outbox::Outbox;
use agentix_wire::wire::Frame;
use socketioxide::socket::Sid;

use crate::calls::{CallTable, Cancelled, Delivery, NewCall, Origin, PartDelivery};
use crate::server_child::ServerChild;

// ---- messages from hosts' sockets -----------------------------------------

/// Run a call on the worker (queued until one is ready); the outcome goes to `call.reply`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StartCall(pub NewCall);

/// Cancel the call `origin` started; it ends as `Cancelled`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CancelCall(pub Origin);

/// The host consumed part of the stream `origin` started.
#[derive(Message)]
#[rtype(result = "()")]
pub struct AckStream {
    /// Which call.
    pub origin: Origin,
    /// Items consumed since the last ack.
    pub items: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// A host socket went away: cancel its calls.
#[derive(Message)]
#[rtype(result = "()")]
pub struct HostDisconnected(pub Sid);

// ---- messages from the worker's side --------------------------------------

/// A frame from worker `generation` that answers a call: stream items, a
/// part of a result, a result, an end or an error.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CallFrame {
    /// The worker's generation.
    pub generation: u64,
    /// The frame.
    pub frame: Frame,
}

/// Worker `generation` sent a frame for call `id` that did not decode.
#[derive(Message)]
#[rtype(result = "()")]
pub struct UnreadableReply {
    /// The worker's generation.
    pub generation: u64,
    /// The call the frame named.
    pub id: u64,
    /// Why it did not decode.
    pub why: String,
}

/// What became of the worker, from its supervisor.
#[derive(Message, Clone)]
#[rtype(result = "()")]
pub enum WorkerNews {
    /// A worker is starting: calls wait for it.
    Starting,
    /// Worker `generation` is ready; its frames go to `frames`.
    Ready {
        /// Its generation.
        generation: u64,
        /// Its pipe's queue.
        frames: Outbox,
    },
    /// The worker is gone: its calls in flight end with `error`, and so do
    /// the queued ones when `queued_too` (it never became ready, and the
    /// next may fail the same way).
    Gone {
        /// What the calls end with.
        error: RemoteError,
        /// Whether queued calls end too.
        queued_too: bool,
    },
    /// The worker keeps dying: queued and new calls fail with this error
    /// until a worker is starting again.
    Degraded(RemoteError),
    /// Shutdown began: no new calls; those in flight go on.
    Draining,
    /// The worker is stopped for good: every call ends with this error,
    /// and the router stops.
    Stopped(RemoteError),
}

/// Stop the router, as a crash would: its parent starts another.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopRouter;

// ---- the actor -------------------------------------------------------------

/// Calls queued or in flight, kept current by the router for `/health` and
/// shutdown, which must not wait on its mailbox.
#[derive(Clone, Default)]
pub struct CallCount(Arc<AtomicUsize>);

impl CallCount {
    /// Calls queued or in flight now.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// Frames waiting in a worker's outbox past which new calls fail at once.
const CALLS_STOP_PAST: usize = 16_384;

/// Worker call ids of one incarnation: incarnation `n` starts at `n << 40`.
const IDS_PER_INCARNATION_SHIFT: u32 = 40;

#[derive(Debug, Clone, PartialEq)]
enum Phase {
    /// No worker is ready: calls queue.
    Waiting,
    Ready,
    Degraded(RemoteError),
    Draining,
    Stopped,
}

/// Messages the router's mailbox holds from hosts (calls, cancels, acks)
/// before a host's new call is refused `Degraded` and its cancels and acks
/// wait for room: hosts' traffic goes through it with `try_send` or
/// `send`, never `do_send`, which ignores the bound.
pub(crate) const ROUTER_MAILBOX: usize = 4_096;

/// Holds every call, queued or in flight, and routes it to the worker.
pub struct CallRouter {
    calls: CallTable,
    phase: Phase,
    /// The ready worker's generation and frame queue.
    worker: Option<(u64, Outbox)>,
    max_inflight: usize,
    max_message_bytes: usize,
    count: CallCount,
    guard: ChildGuard<ServerChild>,
}

impl CallRouter {
    /// Incarnation `incarnation` (from 1) of the router, taking at most
    /// `max_inflight` calls and results of at most `max_message_bytes`;
    /// `guard` tells its parent when it ends.
    pub fn new(
        incarnation: u64,
        max_inflight: usize,
        max_message_bytes: usize,
        count: CallCount,
        guard: ChildGuard<ServerChild>,
    ) -> Self {
        let first_id = incarnation.saturating_sub(1) << IDS_PER_INCARNATION_SHIFT;
        count.0.store(0, Ordering::Relaxed);
        CallRouter {
            calls: CallTable::starting_after(first_id),
            phase: Phase::Waiting,
            worker: None,
            max_inflight,
            max_message_bytes,
            count,
            guard,
        }
    }

    /// Whether `generation` is the ready worker's: frames of any other
    /// answer calls that have ended.
    fn is_current(&self, generation: u64) -> bool {
        self.worker.as_ref().is_some_and(|(g, _)| *g == generation)
    }

    fn counted(&self) {
        self.count.0.store(self.calls.len(), Ordering::Relaxed);
    }

    fn send_frame(&self, frame: Frame) {
        if let Some((_, frames)) = &self.worker {
            frames.push(frame);
        }
    }

    fn send_to_worker(&mut self, call: NewCall) {
        let Some((_, frames)) = self.worker.clone() else {
            self.calls.queue(call);
            return;
        };
        let waiting = frames.waiting();
        if waiting >= CALLS_STOP_PAST {
            // A worker this far behind its pipe is wedged or stopped: say
            // so now rather than hold the call's frames too.
            call.reply.fail(RemoteError::new(
                ErrorKind::Degraded,
                format!("the worker is not reading its pipe ({waiting} frames wait for it)"),
            ));
            return;
        }
        for frame in self.calls.start(call) {
            frames.push(frame);
        }
    }

    /// Ends worker call `id` with `error` and tells the worker to drop it.
    fn end_with(&mut self, id: u64, error: RemoteError) {
        if let Some(reply) = self.calls.finish(id) {
            reply.fail(error);
            self.send_frame(Frame::Cancel { id });
        }
    }
}

impl Actor for CallRouter {
    type Context = Context<Self>;
}

impl Drop for CallRouter {
    // Runs however the router ends, a panic included: no call may wait for
    // a reply it can no longer send, and the worker must not go on with
    // calls nobody will hear of.
    fn drop(&mut self) {
        let lost = RemoteError::new(
            ErrorKind::CallLost,
            "the server's call router restarted mid-call; the call was cancelled in the worker \
             and can be sent again",
        );
        for (id, reply) in self.calls.take_inflight() {
            self.send_frame(Frame::Cancel { id });
            reply.fail(lost.clone());
        }
        for call in self.calls.take_queued() {
            call.reply.fail(lost.clone());
        }
        self.count.0.store(0, Ordering::Relaxed);
    }
}

fn shutting_down() -> RemoteError {
    RemoteError::new(
        ErrorKind::ServerExited,
        "the server is shutting down and takes no new calls",
    )
}

impl Handler<StartCall> for CallRouter {
    type Result = ();

    fn handle(&mut self, StartCall(call): StartCall, _: &mut Context<Self>) {
        if self.calls.contains(call.origin) {
            let err = RemoteError::new(
                ErrorKind::Protocol,
                format!(
                    "call id {} is already in use on this connection",
                    call.origin.host_id
                ),
            );
            call.reply.fail(err);
            return;
        }
        if self.calls.len() >= self.max_inflight {
            let err = RemoteError::new(
                ErrorKind::Degraded,
                format!(
                    "the server already holds {} calls; try again later",
                    self.calls.len()
                ),
            );
            call.reply.fail(err);
            return;
        }
        match &self.phase {
            Phase::Ready => self.send_to_worker(call),
            Phase::Waiting => self.calls.queue(call),
            Phase::Degraded(error) => call.reply.fail(error.clone()),
            Phase::Draining | Phase::Stopped => call.reply.fail(shutting_down()),
        }
        self.counted();
    }
}

impl Handler<CancelCall> for CallRouter {
    type Result = ();

    fn handle(&mut self, CancelCall(origin): CancelCall, _: &mut Context<Self>) {
        let cancelled = RemoteError::new(ErrorKind::Cancelled, "the call was cancelled");
        match self.calls.cancel(origin) {
            Cancelled::Queued(reply) => reply.fail(cancelled),
            Cancelled::InFlight(id, reply) => {
                self.send_frame(Frame::Cancel { id });
                reply.fail(cancelled);
            }
            Cancelled::Unknown => {
                tracing::debug!(
                    host_id = origin.host_id,
                    "cancel for a call that is not running"
                );
            }
        }
        self.counted();
    }
}

impl Handler<AckStream> for CallRouter {
    type Result = ();

    fn handle(&mut self, ack: AckStream, _: &mut Context<Self>) {
        if let Some((id, items, bytes)) = self.calls.ack(ack.origin, ack.items, ack.bytes) {
            if items > 0 || bytes > 0 {
                self.send_frame(Frame::Ack { id, items, bytes });
            }
        }
    }
}

impl Handler<HostDisconnected> for CallRouter {
    type Result = ();

    fn handle(&mut self, HostDisconnected(sid): HostDisconnected, ctx: &mut Context<Self>) {
        for origin in self.calls.origins_of(sid) {
            self.handle(CancelCall(origin), ctx);
        }
    }
}

impl Handler<CallFrame> for CallRouter {
    type Result = ();

    fn handle(&mut self, msg: CallFrame, _: &mut Context<Self>) {
        if !self.is_current(msg.generation) {
            // A worker that is gone, or not yet ready: its calls ended.
            return;
        }
        match msg.frame {
            Frame::Items { id, items } => match self.calls.deliver(id, items) {
                Delivery::Delivered | Delivery::Unknown => {}
                Delivery::Violation(why) => {
                    tracing::warn!(id, "{why}; ending the call");
                    self.end_with(id, RemoteError::new(ErrorKind::Protocol, why));
                }
            },
            frame @ (Frame::Result { .. } | Frame::End { .. } | Frame::Error { .. }) => {
                let id = match &frame {
                    Frame::Result { id, .. } | Frame::End { id } | Frame::Error { id, .. } => *id,
                    _ => unreachable!("matched above"),
                };
                if !self.calls.finish_with(id, frame) {
                    // Normal after a cancel raced the result; otherwise a worker bug.
                    tracing::debug!(id, "the worker ended a call that is not running; dropped")
                }
            }
            Frame::Part { id, total, bytes } => {
                let max = self.max_message_bytes;
                let error = match self.calls.deliver_part(id, total, bytes.0, max) {
                    PartDelivery::Kept | PartDelivery::Unknown => None,
                    PartDelivery::TooLarge(error) => Some(error),
                    PartDelivery::Violation(why) => {
                        Some(RemoteError::new(ErrorKind::Protocol, why))
                    }
                };
                if let Some(error) = error {
                    tracing::warn!(id, "{}; ending the call", error.message);
                    self.end_with(id, error);
                }
            }
            _ => tracing::warn!("a frame that answers no call reached the call router; dropped"),
        }
        self.counted();
    }
}

impl Handler<UnreadableReply> for CallRouter {
    type Result = ();

    // The frame may have been the call's last: end the call rather than
    // leave it waiting for a reply that was already sent.
    fn handle(&mut self, msg: UnreadableReply, _: &mut Context<Self>) {
        if !self.is_current(msg.generation) {
            return;
        }
        let error = RemoteError::new(
            ErrorKind::Protocol,
            format!("the worker's reply could not be read: {}", msg.why),
        );
        self.end_with(msg.id, error);
        self.counted();
    }
}

impl Handler<WorkerNews> for CallRouter {
    type Result = ();

    fn handle(&mut self, news: WorkerNews, ctx: &mut Context<Self>) {
        match news {
            WorkerNews::Starting => {
                if !matches!(self.phase, Phase::Draining | Phase::Stopped) {
                    self.phase = Phase::Waiting;
                }
            }
            WorkerNews::Ready { generation, frames } => {
                self.worker = Some((generation, frames));
                if matches!(self.phase, Phase::Draining | Phase::Stopped) {
                    return;
                }
                self.phase = Phase::Ready;
                for call in self.calls.take_queued() {
                    self.send_to_worker(call);
                }
            }
            WorkerNews::Gone { error, queued_too } => {
                self.worker = None;
                for (_, reply) in self.calls.take_inflight() {
                    reply.fail(error.clone());
                }
                if queued_too {
                    for call in self.calls.take_queued() {
                        call.reply.fail(error.clone());
                    }
                }
                if self.phase == Phase::Ready {
                    self.phase = Phase::Waiting;
                }
            }
            WorkerNews::Degraded(error) => {
                for call in self.calls.take_queued() {
                    call.reply.fail(error.clone());
                }
                if !matches!(self.phase, Phase::Draining | Phase::Stopped) {
                    self.phase = Phase::Degraded(error);
                }
            }
            WorkerNews::Draining => {
                for call in self.calls.take_queued() {
                    call.reply.fail(shutting_down());
                }
                if self.phase != Phase::Stopped {
                    self.phase = Phase::Draining;
                }
            }
            WorkerNews::Stopped(error) => {
                self.calls.fail_all(&error);
                self.worker = None;
                self.phase = Phase::Stopped;
                self.guard.disarm();
                ctx.stop();
            }
        }
        self.counted();
    }
}

impl Handler<StopRouter> for CallRouter {
    type Result = ();

    fn handle(&mut self, _: StopRouter, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

#[cfg(test)]
mod tests {
    //! The router driven by messages alone: a stub parent, a worker outbox
    //! read directly, hosts' replies on their channels; no process.

    use super::*;
    use agentix_actors::supervision::ChildEnded;
    use agentix_wire::frame_bytes::FrameBytes;
    use bytes::Bytes;
    use tokio::sync::{mpsc, oneshot};

    use crate::call_outcome::Outcome;
    use crate::calls::Reply;

    /// Stands in for the server supervisor.
    struct Parent;

    impl Actor for Parent {
        type Context = Context<Self>;
    }

    impl Handler<ChildEnded<ServerChild>> for Parent {
        type Result = ();

        fn handle(&mut self, _: ChildEnded<ServerChild>, _: &mut Context<Self>) {}
    }

    fn router(max_inflight: usize) -> Addr<CallRouter> {
        let guard = ChildGuard::new(ServerChild::CallRouter, Parent.start().recipient());
        CallRouter::new(1, max_inflight, 1 << 20, CallCount::default(), guard).start()
    }

    /// A unary call `host_id` of `socket` to `target`, and where its
    /// outcome arrives.
    fn call(socket: Sid, host_id: u64, target: &str) -> (StartCall, oneshot::Receiver<Outcome>) {
        let (reply, outcome) = oneshot::channel();
        let call = NewCall {
            origin: Origin { socket, host_id },
            target: target.into(),
            args: vec![Bytes::from_static(b"\x80")],
            trace: None,
            reply: Reply::Unary(reply),
        };
        (StartCall(call), outcome)
    }

    async fn outcome(rx: oneshot::Receiver<Outcome>) -> Outcome {
        tokio::time::timeout(std::time::Duration::from_secs(5), rx)
            .await
            .expect("the call ends")
            .expect("an outcome")
    }

    #[actix_rt::test]
    async fn a_call_waits_for_a_worker_then_its_result_comes_back_to_its_host() {
        let router = router(16);
        let socket = Sid::new();
        let (start, rx) = call(socket, 7, "echo");
        router.send(start).await.unwrap();

        let (tx, mut frames) = mpsc::channel(8);
        let ready = WorkerNews::Ready {
            generation: 1,
            frames: Outbox::new(tx),
        };
        router.send(ready).await.unwrap();
        let Some(Frame::Call { id, target, .. }) = frames.recv().await else {
            panic!("the queued call goes to the worker once it is ready");
        };
        assert_eq!(target, "echo");

        let result = Frame::Result {
            id,
            value: FrameBytes(Bytes::from_static(b"\x01")),
        };
        router
            .send(CallFrame {
                generation: 1,
                frame: result,
            })
            .await
            .unwrap();
        let value = outcome(rx).await.expect("a result");
        assert_eq!(value.concat(), b"\x01");
    }

    #[actix_rt::test]
    async fn a_reused_id_and_a_call_past_the_limit_are_refused_and_a_queued_call_can_be_cancelled()
    {
        let router = router(1);
        let socket = Sid::new();
        let (first, first_rx) = call(socket, 1, "slow");
        router.send(first).await.unwrap();

        let (again, again_rx) = call(socket, 1, "slow");
        router.send(again).await.unwrap();
        assert_eq!(
            outcome(again_rx).await.unwrap_err().kind,
            ErrorKind::Protocol
        );

        let (more, more_rx) = call(socket, 2, "slow");
        router.send(more).await.unwrap();
        assert_eq!(
            outcome(more_rx).await.unwrap_err().kind,
            ErrorKind::Degraded
        );

        router
            .send(CancelCall(Origin { socket, host_id: 1 }))
            .await
            .unwrap();
        assert_eq!(
            outcome(first_rx).await.unwrap_err().kind,
            ErrorKind::Cancelled
        );
    }

    #[actix_rt::test]
    async fn a_worker_that_dies_ends_its_calls_with_why() {
        let router = router(16);
        let (tx, mut frames) = mpsc::channel(8);
        let ready = WorkerNews::Ready {
            generation: 1,
            frames: Outbox::new(tx),
        };
        router.send(ready).await.unwrap();
        let (start, rx) = call(Sid::new(), 1, "work");
        router.send(start).await.unwrap();
        assert!(matches!(frames.recv().await, Some(Frame::Call { .. })));

        let died = RemoteError::new(ErrorKind::WorkerExited, "killed by SIGKILL");
        let gone = WorkerNews::Gone {
            error: died.clone(),
            queued_too: false,
        };
        router.send(gone).await.unwrap();
        assert_eq!(outcome(rx).await.unwrap_err(), died);
    }
}
