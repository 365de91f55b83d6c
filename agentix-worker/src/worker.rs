//! The worker runtime: serves remote calls over the frame pipes.
//!
//! The server starts the user's bundle binary as `worker` with the frame pipes
//! on fds 3 (in) and 4 (out), so stdout and stderr stay free for the user's
//! output. Each call runs as its own task, so a slow call never blocks
//! another; a panic ends that call with `Panic` and the worker keeps serving;
//! a cancel drops the call's task, so its `Drop` guards run. A streaming call
//! is driven by [`crate::stream_call`] under the window the host asked for.

use std::os::fd::{FromRawFd, OwnedFd};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::FutureExt;
use tokio::net::unix::pipe;
use tokio::sync::mpsc;

use crate::output_capture::OutputPipes;
use crate::registry::{self, Invoke};
use crate::running_calls::{RunningCall, RunningCalls};
use crate::side_pipe::SidePipe;
use crate::span_bridge::{SpanBridge, ENV_TRACING_SPANS};
use crate::stream_call::{self, Credit};
use crate::worker_context::WorkerContext;
use agentix_trace::{InContext, SpanContext};
use agentix_wire::codec::{self, FrameReader};
use agentix_wire::errors::{ErrorKind, RemoteError};
use agentix_wire::frame_bytes::FrameBytes;
use agentix_wire::part::{self, PartTable};
use agentix_wire::wire::{
    Frame, Window, ENV_WORKER_ID, WORKER_FRAME_IN_FD, WORKER_FRAME_OUT_FD, WORKER_SIDE_OUT_FD,
};

/// Runs the worker until the server closes the frame pipe; returns the exit code.
pub fn run() -> i32 {
    run_with(|| {})
}

/// Like [`run`], calling `setup` inside the worker's runtime before it takes
/// calls, in every worker the server starts (so a restarted worker registers
/// its plugin namespaces again).
pub fn run_with(setup: impl FnOnce()) -> i32 {
    // First, while this is the only thread: sandbox code started from here
    // inherits the sandbox's environment, not the server's allocator tuning.
    agentix_wire::process::take_added_tunables();
    agentix_wire::process::tune_allocator();
    // Sandbox code runs as this user: it must not read the worker's memory.
    if let Err(e) = agentix_wire::process::hide_memory() {
        eprintln!("agentix worker: cannot keep its memory private: {e}");
        return 1;
    }
    // Claim fds 3 and 4 before the runtime opens descriptors of its own,
    // which would take those numbers when the server did not provide them.
    let fds = match frame_fds() {
        Ok(fds) => fds,
        Err(e) => {
            eprintln!("agentix worker: {e}; the worker is started by agentix-server, not by hand");
            return 2;
        }
    };
    let captures_output = forward_logs();
    let (out_tx, out_rx) = mpsc::channel::<Frame>(1024);
    let context = WorkerContext::new(out_tx.clone());
    // The runtime's threads and this one (the setup's) know their worker.
    context.install();
    let on_each_thread = context.clone();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .thread_name("agentix-worker")
        .on_thread_start(move || on_each_thread.install())
        .thread_keep_alive(BLOCKING_THREAD_KEEP_ALIVE)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("agentix worker: cannot start the async runtime: {e}");
            return 1;
        }
    };
    // One blocking thread from the start, while threads can be had.
    if let Err(e) = runtime.block_on(runtime.spawn_blocking(|| ())) {
        eprintln!("agentix worker: cannot start a blocking thread: {e}");
        return 1;
    }
    let code = runtime.block_on(async {
        match frame_pipes(fds) {
            Ok((input, output)) => {
                let frames = (out_tx, out_rx);
                serve(input, output, frames, context, captures_output, setup).await
            }
            Err(e) => {
                eprintln!("agentix worker: fds 3 and 4 are not usable pipes: {e}");
                2
            }
        }
    });
    // Calls still running belong to a server that is gone; do not wait for them.
    runtime.shutdown_background();
    code
}

/// How long an idle blocking thread of the worker's runtime stays: for
/// good. Tokio panics when it needs a new blocking thread, cannot start one
/// and has none (sandbox code that exhausted its user's process limit
/// makes that so), and such a panic in a destructor aborts the worker. A
/// thread that exists takes the work later instead. The cost is the
/// threads of the busiest moment, idle (a few KiB each).
const BLOCKING_THREAD_KEEP_ALIVE: std::time::Duration =
    std::time::Duration::from_secs(100 * 365 * 24 * 3600);

/// Sends every `tracing` and `log` record (filtered by `RUST_LOG`, default
/// `info`) and every trace event to the server over the side pipe (fd 5),
/// when the server gave one: whether it reads its own output (the ready
/// frame says so).
fn forward_logs() -> bool {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;

    if !keep_from_children(WORKER_SIDE_OUT_FD) {
        return false;
    }
    // SAFETY: fd 5 was checked open and is the server's side pipe, handed to
    // this process for its exclusive use.
    let pipe = unsafe { std::fs::File::from_raw_fd(WORKER_SIDE_OUT_FD) };
    let worker_id = std::env::var(ENV_WORKER_ID).unwrap_or_default();
    let side = match SidePipe::start(pipe, OutputPipes::open()) {
        Ok(side) => side,
        Err(e) => {
            eprintln!("agentix worker: cannot start log forwarding: {e}");
            return false;
        }
    };
    // Inline: the side pipe's queue is bounded and its producer waits, so
    // nothing a sandbox traces is dropped before it reaches the host.
    agentix_trace::TraceHub::unscoped().add_inline(side.trace_processor());
    let capture = side.capture_output(worker_id.clone());
    let captures_output = capture.is_some();
    let layer = side.log_layer(worker_id, capture);
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Also installs the `log` -> `tracing` bridge.
    // `tracing` spans become agentix spans only where the host asked.
    let bridge = std::env::var(ENV_TRACING_SPANS)
        .ok()
        .filter(|d| !d.is_empty())
        .map(|directives| SpanBridge.with_filter(tracing_subscriber::EnvFilter::new(directives)));
    if let Err(e) = tracing_subscriber::registry()
        .with(layer.with_filter(filter))
        .with(bridge)
        .try_init()
    {
        eprintln!("agentix worker: another global logger is installed; logs stay local: {e}");
    }
    captures_output
}

/// Marks `fd` close-on-exec, so processes that remote functions start do not
/// inherit the server's pipes (the server installed them with `dup2`, which
/// clears the flag); `false` if `fd` is not open.
fn keep_from_children(fd: i32) -> bool {
    // SAFETY: F_GETFD/F_SETFD only read and set this descriptor's flags.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) >= 0
    }
}

fn frame_fds() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let err = |what| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("fd {what} is not a frame pipe"),
        )
    };
    for fd in [WORKER_FRAME_IN_FD, WORKER_FRAME_OUT_FD] {
        if !keep_from_children(fd) {
            return Err(err(fd));
        }
    }
    // SAFETY: both fds were checked open above and are handed to us by the
    // server for exclusive use; nothing else in this process owns them.
    Ok(unsafe {
        (
            OwnedFd::from_raw_fd(WORKER_FRAME_IN_FD),
            OwnedFd::from_raw_fd(WORKER_FRAME_OUT_FD),
        )
    })
}

/// Wraps the frame fds for the runtime (must run inside it).
fn frame_pipes(
    (input, output): (OwnedFd, OwnedFd),
) -> std::io::Result<(pipe::Receiver, pipe::Sender)> {
    Ok((
        pipe::Receiver::from_owned_fd(input)?,
        pipe::Sender::from_owned_fd(output)?,
    ))
}

async fn serve(
    input: pipe::Receiver,
    output: pipe::Sender,
    (out_tx, out_rx): (mpsc::Sender<Frame>, mpsc::Receiver<Frame>),
    context: WorkerContext,
    captures_output: bool,
    setup: impl FnOnce(),
) -> i32 {
    crate::worker_start::run_all();
    setup();
    let writer = tokio::spawn(codec::write_frames(output, out_rx));
    let ready = Frame::Ready {
        worker_id: std::env::var(ENV_WORKER_ID).unwrap_or_default(),
        pid: std::process::id(),
        functions: registry::names().len() as u32,
        version: agentix_wire::VERSION.to_owned(),
        captures_output,
    };
    if out_tx.send(ready).await.is_err() {
        return 1;
    }
    // On one of the runtime's threads, not the one blocked on the runtime:
    // a call task the loop spawns then starts on the loop's own thread (the
    // scheduler's LIFO slot) instead of waiting for another thread to wake,
    // which is a large share of a small call's time on machines where a
    // wake-up is slow.
    let code = tokio::spawn(frame_loop(input, out_tx, context))
        .await
        .unwrap_or(1);
    writer.abort();
    code
}

/// Reads the server's frames until the pipe closes: starts, feeds and
/// cancels calls, answers pings and delivers namespace events.
async fn frame_loop(
    input: pipe::Receiver,
    out_tx: mpsc::Sender<Frame>,
    context: WorkerContext,
) -> i32 {
    let mut reader = FrameReader::new(input, codec::DEFAULT_MAX_FRAME);
    let mut running = RunningCalls::default();
    // The server cuts large arguments into parts (`agentix_wire::part`).
    let mut parts = PartTable::new(codec::DEFAULT_MAX_FRAME);
    loop {
        match reader.next().await {
            Ok(Some(Frame::Part { id, total, bytes })) => {
                if let Err(why) = parts.push(id, total, bytes.0) {
                    eprintln!("agentix worker: arguments of call {id} dropped: {why}");
                }
            }
            Ok(Some(Frame::Call {
                id,
                target,
                args,
                stream,
                trace,
            })) => match parts.finish(id, args.0) {
                Ok(pieces) => {
                    let call = start_call(id, target, pieces, stream, trace, out_tx.clone());
                    running.insert(id, call);
                }
                Err(why) => {
                    let error = RemoteError::new(
                        ErrorKind::Protocol,
                        format!("the arguments of `{target}` arrived incomplete: {why}"),
                    );
                    let _ = out_tx.send(Frame::Error { id, error }).await;
                }
            },
            Ok(Some(Frame::Ping { seq })) => {
                let _ = out_tx.send(Frame::Pong { seq }).await;
            }
            Ok(Some(Frame::SioEvent {
                path,
                event,
                data,
                attachments,
            })) => {
                let frames = attachments.into_iter().map(|a| a.0).collect();
                context.deliver(&path, event, data.to_value(), frames);
            }
            Ok(Some(Frame::Ack { id, items, bytes })) => {
                if let Some(credit) = running.running(id).and_then(|c| c.credit.as_ref()) {
                    credit.ack(items, bytes);
                }
            }
            Ok(Some(Frame::Cancel { id })) => {
                parts.discard(id);
                if let Some(call) = running.take_running(id) {
                    call.task.abort();
                    let error = RemoteError::new(ErrorKind::Cancelled, "the call was cancelled");
                    let _ = out_tx.send(Frame::Error { id, error }).await;
                }
            }
            Ok(Some(other)) => {
                tracing::debug!(?other, "worker ignores a frame meant for the server");
            }
            Ok(None) => break,
            Err(e) if e.is_recoverable() => {
                eprintln!("agentix worker: dropped a malformed frame: {e}");
                if let codec::FrameError::Malformed { call: Some(id), .. } = e {
                    // If it was a part, the call must not run on the rest.
                    parts.refuse(id);
                }
            }
            Err(e) => {
                eprintln!("agentix worker: frame pipe unusable: {e}");
                break;
            }
        }
    }
    running.abort_all();
    0
}

fn start_call(
    id: u64,
    target: String,
    args: Vec<Bytes>,
    stream: Option<Window>,
    trace: Option<SpanContext>,
    out: mpsc::Sender<Frame>,
) -> RunningCall {
    let credit = stream.map(|_| Arc::new(Credit::default()));
    let task_credit = credit.clone();
    // Spans the call creates are children of the host's span, if any.
    let task = tokio::spawn(InContext::new(trace, async move {
        let frame = match (registry::lookup(&target), stream, task_credit) {
            (Err(error), _, _) => Frame::Error { id, error },
            (Ok(f), None, _) => match f.invoke {
                Invoke::Unary(invoke) => {
                    match AssertUnwindSafe(invoke(args))
                        .catch_unwind()
                        .await
                        .unwrap_or_else(|panic| Err(RemoteError::from_panic(&target, panic)))
                    {
                        Ok(value) if value.len() > MAX_RESULT_BYTES => Frame::Error {
                            id,
                            error: result_too_large(&target, value.len()),
                        },
                        Ok(value) => match send_parts(id, value, &out).await {
                            Some(last) => Frame::Result {
                                id,
                                value: FrameBytes(last),
                            },
                            // The writer is gone: the worker is exiting.
                            None => return,
                        },
                        Err(error) => Frame::Error { id, error },
                    }
                }
                Invoke::Stream(_) => Frame::Error {
                    id,
                    error: stream_call::wrong_shape(&target, true),
                },
            },
            (Ok(f), Some(window), Some(credit)) => match f.invoke {
                Invoke::Stream(invoke) => {
                    match std::panic::catch_unwind(AssertUnwindSafe(|| invoke(args))) {
                        Ok(items) => {
                            stream_call::drive(id, &target, items, window, &credit, &out).await
                        }
                        Err(panic) => Frame::Error {
                            id,
                            error: RemoteError::from_panic(&target, panic),
                        },
                    }
                }
                Invoke::Unary(_) => Frame::Error {
                    id,
                    error: stream_call::wrong_shape(&target, false),
                },
            },
            (Ok(_), Some(_), None) => unreachable!("a streaming call always has credit"),
        };
        let _ = out.send(frame).await;
    }));
    RunningCall {
        task: task.abort_handle(),
        credit,
    }
}

/// Sends all but the last part of `value`, the result of call `id`, as
/// part frames, and returns the last, for the result frame. `None` when
/// the writer is gone.
async fn send_parts(id: u64, value: Vec<u8>, out: &mpsc::Sender<Frame>) -> Option<Bytes> {
    if value.len() <= part::SPLIT_ABOVE {
        return Some(value.into());
    }
    let total = value.len() as u64;
    let mut pieces = part::split(value.into());
    let last = pieces.pop().expect("split gives at least one piece");
    for bytes in pieces {
        let frame = Frame::Part {
            id,
            total,
            bytes: FrameBytes(bytes),
        };
        out.send(frame).await.ok()?;
    }
    Some(last)
}

/// The largest result a frame carries: the frame limit less room for its
/// envelope. A larger frame would make the server drop the whole pipe, and
/// every call in flight with the worker.
const MAX_RESULT_BYTES: usize = codec::DEFAULT_MAX_FRAME - (64 << 10);

/// The error of a call whose result is too large for one frame.
fn result_too_large(target: &str, len: usize) -> RemoteError {
    RemoteError::new(
        ErrorKind::PayloadTooLarge,
        format!(
            "the result of `{target}` is {len} bytes, past the {MAX_RESULT_BYTES}-byte \
             limit of one message"
        ),
    )
    .with_details("return large data in pieces: a stream, or several calls")
}
