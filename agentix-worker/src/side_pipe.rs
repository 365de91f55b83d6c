//! The worker's side channel: every log record and trace event goes to the
//! server.
//!
//! Sandbox code logs with `tracing::info!` or `log::info!` and knows nothing
//! of Agentix. [`ForwardLayer`] turns each event into a [`LogRecord`];
//! [`ForwardProcessor`] passes each trace event on. Both hand them to one
//! dedicated thread that batches them, in order, into `logs` and `traces`
//! frames on the side pipe (fd 5), appending the records to the sandbox log
//! file first. The hand-off is a bounded channel: when the host reads
//! slowly, logging and tracing wait (back-pressure) instead of buffering
//! without bound, and nothing is dropped. The thread never logs through
//! `tracing` itself, so it cannot wait on its own channel.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::layer::{Context, Layer};

use crate::output_capture::{OutputCapture, OutputLine, OutputPipes, MAX_LINE};
use crate::span_bound::{self, bound_span};
use agentix_trace::{Processor, SpanData, TraceData, TraceEvent};
use agentix_wire::codec;
use agentix_wire::log_file::SandboxLogFile;
use agentix_wire::log_record::{now_us, LogRecord, TARGET_STDERR, TARGET_STDOUT};
use agentix_wire::text_cut::cut_text;
use agentix_wire::wire::{Frame, SideBatch};

/// Records waiting for the forwarding thread before logging code waits.
const QUEUE: usize = 1024;
/// Most items in one write to the side pipe.
const MAX_BATCH: usize = 512;
/// About the most bytes of messages in one write to the side pipe.
const MAX_BATCH_BYTES: usize = 256 << 10;

/// What travels on the side pipe.
enum SideItem {
    Log(Box<LogRecord>),
    /// A line of the worker's output, whose bytes leave its pipe once the
    /// record is written.
    Output(Box<OutputLine>),
    Trace(Box<TraceEvent>),
}

/// Hands `item` to the forwarding thread, waiting while its queue is full;
/// drops it only once the thread is gone (the pipe broke).
///
/// On a worker thread of a multi-thread tokio runtime the wait happens in
/// `block_in_place`, which moves the thread's other tasks to another
/// thread: a task woken on this thread waits in a slot no other thread
/// takes from, and would otherwise wait out the whole flood of records
/// that fills the queue (a sandbox function logging in a loop never
/// yields).
fn send_waiting<T>(tx: &SyncSender<T>, item: T) {
    let item = match tx.try_send(item) {
        Ok(()) | Err(TrySendError::Disconnected(_)) => return,
        Err(TrySendError::Full(item)) => item,
    };
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    let wait = move || {
        let _ = tx.send(item);
    };
    if multi_thread {
        tokio::task::block_in_place(wait);
    } else {
        wait();
    }
}

/// The side pipe's writer thread, fed by a bounded channel.
#[derive(Clone)]
pub(crate) struct SidePipe {
    tx: SyncSender<SideItem>,
    output: Option<Arc<OutputPipes>>,
}

impl SidePipe {
    /// Starts the thread writing to `pipe`; `output` is the worker's own
    /// stdout and stderr, if it captures them.
    pub(crate) fn start(
        pipe: std::fs::File,
        output: Option<Arc<OutputPipes>>,
    ) -> std::io::Result<Self> {
        let (tx, rx) = sync_channel(QUEUE);
        let pipes = output.clone();
        std::thread::Builder::new()
            .name("agentix-side".into())
            .spawn(move || forward(rx, pipe, pipes))?;
        Ok(SidePipe { tx, output })
    }

    /// A `tracing` layer sending every event as a log record, after what
    /// `capture` holds of the worker's output.
    pub(crate) fn log_layer(
        &self,
        worker_id: String,
        capture: Option<Arc<OutputCapture>>,
    ) -> ForwardLayer {
        ForwardLayer {
            tx: self.tx.clone(),
            worker_id,
            capture,
        }
    }

    /// Starts capturing the worker's own stdout and stderr into this
    /// channel, when it was started with them.
    pub(crate) fn capture_output(&self, worker_id: String) -> Option<Arc<OutputCapture>> {
        let tx = self.tx.clone();
        // Blocks while the queue is full, as logging does.
        let sink = Box::new(move |line| {
            send_waiting(&tx, SideItem::Output(Box::new(line)));
        });
        OutputCapture::start(self.output.clone()?, sink, worker_id)
    }

    /// A trace processor sending every trace event.
    pub(crate) fn trace_processor(&self) -> ForwardProcessor {
        ForwardProcessor {
            tx: self.tx.clone(),
        }
    }
}

/// The layer that sends every event to the server.
pub(crate) struct ForwardLayer {
    tx: SyncSender<SideItem>,
    worker_id: String,
    capture: Option<Arc<OutputCapture>>,
}

/// The processor that sends every trace event to the server.
pub(crate) struct ForwardProcessor {
    tx: SyncSender<SideItem>,
}

impl ForwardProcessor {
    fn send(&self, event: TraceEvent) {
        // Blocks while the queue is full; fails only once the pipe is gone.
        send_waiting(&self.tx, SideItem::Trace(Box::new(event)));
    }
}

impl Processor for ForwardProcessor {
    fn on_trace_start(&mut self, t: &TraceData) {
        self.send(TraceEvent::TraceStart(t.clone()));
    }
    fn on_trace_end(&mut self, t: &TraceData) {
        self.send(TraceEvent::TraceEnd(t.clone()));
    }
    fn on_span_start(&mut self, s: &SpanData) {
        let mut s = s.clone();
        bound_span(&mut s);
        self.send(TraceEvent::SpanStart(s));
    }
    fn on_span_end(&mut self, s: &SpanData) {
        let mut s = s.clone();
        bound_span(&mut s);
        self.send(TraceEvent::SpanEnd(s));
    }
}

impl<S: Subscriber> Layer<S> for ForwardLayer {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        // What this thread printed before it logged goes first.
        if let Some(capture) = &self.capture {
            capture.drain();
        }
        // Records from the `log` crate carry their real target and location
        // in `log.*` fields; normalising puts them back.
        let normalized = event.normalized_metadata();
        let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());
        let mut fields = FieldText::default();
        event.record(&mut fields);
        let context = agentix_trace::current();
        let record = LogRecord {
            ts_us: now_us(),
            level: meta.level().as_str().to_owned(),
            target: meta.target().to_owned(),
            message: fields.message,
            fields: fields.others,
            file: meta.file().map(str::to_owned),
            line: meta.line(),
            worker_id: self.worker_id.clone(),
            trace_id: context.as_ref().map(|c| c.trace_id.clone()),
            span_id: context.and_then(|c| c.span_id),
            seq: None,
        };
        // Blocks while the queue is full; fails only once the pipe is gone.
        send_waiting(&self.tx, SideItem::Log(Box::new(record)));
    }
}

/// Collects an event's message and other fields as text.
#[derive(Default)]
struct FieldText {
    message: String,
    others: BTreeMap<String, String>,
}

impl Visit for FieldText {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let mut text = String::new();
        let _ = write!(text, "{value:?}");
        self.put(field, text);
    }
}

impl FieldText {
    fn put(&mut self, field: &Field, mut text: String) {
        // A record travels whole in one batch: one of tens of MiB would hold
        // the batches behind it, and the host's memory.
        cut_text(&mut text, MAX_LINE);
        match field.name() {
            "message" => self.message = text,
            name if name.starts_with("log.") => {}
            name => {
                self.others.insert(name.to_owned(), text);
            }
        }
    }
}

/// Output lines quoted per batch for the server (see [`Frame::Logs`]).
const OUTPUT_QUOTED: usize = 40;

/// Appends `records` to the log file and encodes them as a frame in `buf`.
fn flush_logs(records: &mut Vec<LogRecord>, file: &mut SandboxLogFile, buf: &mut Vec<u8>) {
    if records.is_empty() {
        return;
    }
    file.append(records);
    let batch = SideBatch::encode(records);
    let mut output: Vec<String> = records
        .iter()
        .rev()
        .filter(|r| r.target == TARGET_STDOUT || r.target == TARGET_STDERR)
        .take(OUTPUT_QUOTED)
        .map(|r| r.message.clone())
        .collect();
    output.reverse();
    records.clear();
    codec::encode_into(Frame::Logs { batch, output }, buf);
}

/// Encodes `events` as a frame in `buf`.
fn flush_traces(events: &mut Vec<TraceEvent>, buf: &mut Vec<u8>) {
    if events.is_empty() {
        return;
    }
    let batch = SideBatch::encode(events);
    events.clear();
    codec::encode_into(Frame::Traces { batch }, buf);
}

/// A cheap estimate of a record's encoded size.
fn record_len(r: &LogRecord) -> usize {
    64 + r.message.len() + r.target.len() + r.fields.len() * 32
}

/// Batches items into frames on `pipe`, in order, until every sender is gone
/// or the pipe breaks.
fn forward(rx: Receiver<SideItem>, mut pipe: std::fs::File, output: Option<Arc<OutputPipes>>) {
    let mut file = SandboxLogFile::new(agentix_wire::log_file::dir_from_env());
    let mut buf = Vec::with_capacity(64 << 10);
    let mut records = Vec::new();
    let mut events = Vec::new();
    // One consumer: the order items are taken is the order they were made
    // in each thread (see `crate::output_capture`).
    let mut seq = 0u64;
    while let Ok(first) = rx.recv() {
        // Output bytes the records of this write cover, per stream.
        let mut covered = [0usize; 2];
        let mut next = Some(first);
        let mut taken = 0;
        // Estimated bytes of the records and events not yet encoded, kept
        // as they come: summed again per item, they cost a batch O(n²).
        let (mut records_len, mut events_len) = (0, 0);
        buf.clear();
        while let Some(item) = next.take() {
            // A change of kind closes the batch of the other kind, which
            // keeps logs and traces in the order they were produced.
            match item {
                SideItem::Log(mut r) => {
                    flush_traces(&mut events, &mut buf);
                    events_len = 0;
                    records_len += record_len(&r);
                    seq += 1;
                    r.seq = Some(seq);
                    records.push(*r);
                }
                SideItem::Output(line) => {
                    flush_traces(&mut events, &mut buf);
                    events_len = 0;
                    let OutputLine {
                        mut record,
                        stream,
                        bytes,
                    } = *line;
                    covered[stream.min(1)] += bytes;
                    records_len += record_len(&record);
                    seq += 1;
                    record.seq = Some(seq);
                    records.push(record);
                }
                SideItem::Trace(e) => {
                    flush_logs(&mut records, &mut file, &mut buf);
                    records_len = 0;
                    events_len += span_bound::approx_len(&e);
                    events.push(*e);
                }
            }
            taken += 1;
            if taken < MAX_BATCH && buf.len() + records_len + events_len < MAX_BATCH_BYTES {
                next = rx.try_recv().ok();
            }
        }
        flush_logs(&mut records, &mut file, &mut buf);
        flush_traces(&mut events, &mut buf);
        if pipe.write_all(&buf).is_err() {
            // The server is gone; dropping the receiver makes senders fail
            // fast instead of waiting on a full queue.
            return;
        }
        // Only now may those lines leave the worker's output pipes: had it
        // died before this write, the server would read them there.
        if let Some(output) = &output {
            output.consume(covered);
        }
        // Kept while large batches flow (a flood of records); the first
        // small batch after them gives them back, so an idle worker holds
        // nothing large.
        let small_after_large = buf.len() < 64 << 10 && buf.capacity() > 256 << 10;
        if small_after_large || buf.capacity() > 4 << 20 {
            buf = Vec::with_capacity(64 << 10);
            records = Vec::new();
            events = Vec::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn a_full_queue_on_a_runtime_worker_lets_the_threads_other_tasks_run() {
        // One worker thread: with a plain blocking send, no other task
        // could run until the producer was done.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (tx, rx) = sync_channel::<u32>(4);
        let receiver = std::thread::spawn(move || {
            let mut got = Vec::new();
            while let Ok(item) = rx.recv() {
                got.push(item);
                std::thread::sleep(Duration::from_micros(100));
            }
            got
        });
        let ticks = Arc::new(AtomicUsize::new(0));
        let during = runtime.block_on(async move {
            let ticker = tokio::spawn({
                let ticks = ticks.clone();
                async move {
                    loop {
                        ticks.fetch_add(1, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                    }
                }
            });
            let producer = tokio::spawn(async move {
                let before = ticks.load(Ordering::SeqCst);
                for i in 0..500 {
                    send_waiting(&tx, i);
                }
                ticks.load(Ordering::SeqCst) - before
            });
            let during = producer.await.unwrap();
            ticker.abort();
            during
        });
        let got = receiver.join().unwrap();
        assert_eq!(got, (0..500).collect::<Vec<_>>(), "all, in order");
        assert!(during > 0, "another task ran while the producer waited");
    }

    #[test]
    fn a_sender_on_a_full_queue_goes_on_once_the_receiver_is_gone() {
        let (tx, rx) = sync_channel::<u32>(2);
        let sender = std::thread::spawn(move || {
            for i in 0..10 {
                send_waiting(&tx, i);
            }
        });
        std::thread::sleep(Duration::from_millis(50));
        drop(rx);
        sender.join().expect("the sender is not left waiting");
    }
}
