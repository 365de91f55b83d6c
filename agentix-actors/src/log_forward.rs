//! The worker's `tracing` layer: every record goes to the server.
//!
//! Sandbox code logs with `tracing::info!` or `log::info!` and knows nothing
//! of Agentix. The layer turns each event into a [`LogRecord`] and hands it
//! to a dedicated thread that batches records into `logs` frames on the side
//! pipe (fd 5). The hand-off is a bounded channel: when the host reads
//! slowly, logging waits (back-pressure) instead of buffering without bound,
//! and nothing is dropped. The thread never logs itself, so it cannot wait on
//! its own channel.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::layer::{Context, Layer};

use crate::codec;
use crate::log_record::{now_us, LogRecord};
use crate::wire::Frame;

/// Records waiting for the forwarding thread before logging code waits.
const QUEUE: usize = 8192;
/// Most records in one `logs` frame.
const MAX_BATCH: usize = 2048;

/// The layer that sends every event to the server.
pub struct ForwardLayer {
    tx: SyncSender<LogRecord>,
    worker_id: String,
}

impl ForwardLayer {
    /// A layer writing to `pipe` from a thread of its own.
    pub fn start(pipe: std::fs::File, worker_id: String) -> std::io::Result<Self> {
        let (tx, rx) = sync_channel(QUEUE);
        std::thread::Builder::new()
            .name("agentix-log".into())
            .spawn(move || forward(rx, pipe))?;
        Ok(ForwardLayer { tx, worker_id })
    }
}

impl<S: Subscriber> Layer<S> for ForwardLayer {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        // Records from the `log` crate carry their real target and location
        // in `log.*` fields; normalising puts them back.
        let normalized = event.normalized_metadata();
        let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());
        let mut fields = FieldText::default();
        event.record(&mut fields);
        let record = LogRecord {
            ts_us: now_us(),
            level: meta.level().as_str().to_owned(),
            target: meta.target().to_owned(),
            message: fields.message,
            fields: fields.others,
            file: meta.file().map(str::to_owned),
            line: meta.line(),
            worker_id: self.worker_id.clone(),
        };
        // Blocks while the queue is full; fails only once the pipe is gone.
        let _ = self.tx.send(record);
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
    fn put(&mut self, field: &Field, text: String) {
        match field.name() {
            "message" => self.message = text,
            name if name.starts_with("log.") => {}
            name => {
                self.others.insert(name.to_owned(), text);
            }
        }
    }
}

/// Batches records into frames on `pipe` until every sender is gone or the
/// pipe breaks.
fn forward(rx: Receiver<LogRecord>, mut pipe: std::fs::File) {
    let mut buf = Vec::with_capacity(64 << 10);
    while let Ok(first) = rx.recv() {
        let mut records = vec![first];
        while records.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(r) => records.push(r),
                Err(_) => break,
            }
        }
        buf.clear();
        codec::encode_into(&Frame::Logs { records }, &mut buf);
        if pipe.write_all(&buf).is_err() {
            // The server is gone; dropping the receiver makes senders fail
            // fast instead of waiting on a full queue.
            return;
        }
        if buf.capacity() > 4 << 20 {
            buf = Vec::with_capacity(64 << 10);
        }
    }
}
