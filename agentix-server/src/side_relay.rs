//! [`SideRelay`]: everything the sandbox logged, printed or traced, to disk
//! and to hosts.
//!
//! Log records come from the worker's side pipe (its `tracing`/`log`
//! records) and from its stdout/stderr, read line by line; trace events come
//! from the side pipe. The relay appends each record to
//! `$AGENTIX_LOG_DIR/sandbox-<worker-id>.log`, then sends records to every
//! host on `/log` and trace events to every host on `/trace`, in order. It
//! runs as one task fed by a bounded channel. A host acknowledges each batch
//! and may be at most a few batches behind (see [`crate::side_credits`]), so
//! sending to a slow host waits, which fills the channel, which makes the
//! readers wait,
//! which fills the worker's pipes, which makes the worker's logging wait. So
//! nothing is buffered without bound and nothing is lost while a host
//! listens. While no host listens, the newest records are kept (up to
//! [`BACKLOG`]) and replayed to the first host that joins; older ones are
//! counted and the count is reported as a record.
//!
//! (A task rather than an actor: delivery must await the socket and keep
//! order, which an actix handler cannot do without giving up one of them.)

use std::collections::VecDeque;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;

use agentix_actors::log_record::{LogRecord, TARGET_AGENTIX};
use agentix_actors::trace::TraceEvent;
use agentix_actors::wire::{
    LogsEvent, TracesEvent, EVENT_RECORDS, EVENT_TRACE_EVENTS, LOG_NAMESPACE, TRACE_NAMESPACE,
};
use serde::Serialize;
use socketioxide::SocketIo;
use tokio::sync::mpsc;

use crate::rpc::emit;
use crate::side_credits::SideCredits;

/// Records kept while no host listens.
pub const BACKLOG: usize = 100_000;
/// Batches waiting for the relay before readers wait.
const QUEUE: usize = 4;
/// Most records or trace events in one batch.
const MAX_EVENT_RECORDS: usize = 256;

/// Environment variable naming the directory for sandbox log files.
pub const ENV_LOG_DIR: &str = "AGENTIX_LOG_DIR";
/// Where log files go when `AGENTIX_LOG_DIR` is not set.
pub const DEFAULT_LOG_DIR: &str = "/tmp/agentix";

enum Relayed {
    Records(Vec<LogRecord>),
    Traces(Vec<TraceEvent>),
    HostJoined,
}

/// A handle to the relay task; cheap to clone.
#[derive(Clone)]
pub struct SideRelay {
    tx: mpsc::Sender<Relayed>,
}

/// The relay's input, until [`SideRelayInbox::start`] gives it a task.
pub struct SideRelayInbox {
    rx: mpsc::Receiver<Relayed>,
}

impl SideRelayInbox {
    /// Starts delivering to `/log` on `io`, writing files under `dir` (none:
    /// no files).
    pub fn start(self, io: SocketIo, dir: Option<PathBuf>, credits: SideCredits) {
        tokio::spawn(relay(io, dir, credits, self.rx));
    }
}

impl SideRelay {
    /// A relay handle and its inbox; records sent before the inbox starts
    /// wait in it (the socket layer needs the handle before it exists).
    pub fn channel() -> (Self, SideRelayInbox) {
        let (tx, rx) = mpsc::channel(QUEUE);
        (SideRelay { tx }, SideRelayInbox { rx })
    }

    /// The log directory from the environment: `AGENTIX_LOG_DIR`, empty to
    /// disable, unset for the default.
    pub fn dir_from_env() -> Option<PathBuf> {
        match std::env::var_os(ENV_LOG_DIR) {
            Some(dir) if dir.is_empty() => None,
            Some(dir) => Some(dir.into()),
            None => Some(DEFAULT_LOG_DIR.into()),
        }
    }

    /// Relays `records`, waiting while the relay is behind.
    pub async fn send(&self, records: Vec<LogRecord>) {
        if !records.is_empty() {
            let _ = self.tx.send(Relayed::Records(records)).await;
        }
    }

    /// Relays trace `events`, waiting while the relay is behind.
    pub async fn send_traces(&self, events: Vec<TraceEvent>) {
        if !events.is_empty() {
            let _ = self.tx.send(Relayed::Traces(events)).await;
        }
    }

    /// A host joined `/log` or `/trace`: it gets the backlog at once.
    pub fn host_joined(&self) {
        let _ = self.tx.try_send(Relayed::HostJoined);
    }
}

async fn relay(
    io: SocketIo,
    dir: Option<PathBuf>,
    credits: SideCredits,
    mut rx: mpsc::Receiver<Relayed>,
) {
    let mut files = LogFiles::new(dir);
    let mut logs = Channel::new(LOG_NAMESPACE);
    let mut traces = Channel::new(TRACE_NAMESPACE);
    while let Some(msg) = rx.recv().await {
        match msg {
            Relayed::Records(records) => {
                files.append(&records);
                logs.deliver(
                    &io,
                    &credits,
                    records,
                    |records| LogsEvent::encode(&records),
                    EVENT_RECORDS,
                )
                .await;
            }
            Relayed::Traces(events) => {
                traces
                    .deliver(
                        &io,
                        &credits,
                        events,
                        |events| TracesEvent::encode(&events),
                        EVENT_TRACE_EVENTS,
                    )
                    .await;
            }
            Relayed::HostJoined => {
                logs.deliver(
                    &io,
                    &credits,
                    Vec::new(),
                    |records| LogsEvent::encode(&records),
                    EVENT_RECORDS,
                )
                .await;
                traces
                    .deliver(
                        &io,
                        &credits,
                        Vec::new(),
                        |events| TracesEvent::encode(&events),
                        EVENT_TRACE_EVENTS,
                    )
                    .await;
            }
        }
    }
}

/// One side-channel namespace: its backlog while no host listens.
struct Channel<T> {
    namespace: &'static str,
    backlog: VecDeque<T>,
    dropped: u64,
}

/// What can report its own loss to a host.
trait Droppable: Clone {
    /// A notice that `n` earlier items were dropped, if this kind has one.
    fn dropped_notice(n: u64) -> Option<Self>;
}

impl Droppable for LogRecord {
    fn dropped_notice(n: u64) -> Option<Self> {
        Some(LogRecord::now(
            "WARN",
            TARGET_AGENTIX,
            format!(
                "{n} earlier log records or trace events were dropped: no host was \
                 listening and the backlog holds {BACKLOG}"
            ),
        ))
    }
}

impl Droppable for TraceEvent {
    fn dropped_notice(_: u64) -> Option<Self> {
        None
    }
}

impl<T: Droppable> Channel<T> {
    fn new(namespace: &'static str) -> Self {
        Channel {
            namespace,
            backlog: VecDeque::new(),
            dropped: 0,
        }
    }

    /// Sends the backlog and `items` to every host in the namespace, or
    /// keeps them while there is none.
    async fn deliver<E: Serialize>(
        &mut self,
        io: &SocketIo,
        credits: &SideCredits,
        items: Vec<T>,
        wrap: impl Fn(Vec<T>) -> E,
        event: &str,
    ) {
        let hosts = io
            .of(self.namespace)
            .map(|ns| ns.sockets())
            .unwrap_or_default();
        if hosts.is_empty() {
            self.backlog.extend(items);
            while self.backlog.len() > BACKLOG {
                self.backlog.pop_front();
                self.dropped += 1;
            }
            return;
        }
        let mut pending: Vec<T> = Vec::new();
        if self.dropped > 0 {
            // Trace events have no notice of their own: the log says it.
            tracing::warn!(
                namespace = self.namespace,
                dropped = self.dropped,
                "side-channel items were dropped while no host listened"
            );
            pending.extend(T::dropped_notice(self.dropped));
            self.dropped = 0;
        }
        pending.extend(self.backlog.drain(..));
        pending.extend(items);
        for chunk in pending.chunks(MAX_EVENT_RECORDS) {
            let payload = wrap(chunk.to_vec());
            for host in &hosts {
                if credits.take(host).await {
                    emit(host, event, &payload).await;
                }
            }
        }
        if self.backlog.capacity() > 4 * MAX_EVENT_RECORDS {
            self.backlog = VecDeque::new();
        }
    }
}

/// The log file of the current worker.
struct LogFiles {
    dir: Option<PathBuf>,
    current: Option<(String, std::fs::File)>,
}

impl LogFiles {
    fn new(dir: Option<PathBuf>) -> Self {
        LogFiles { dir, current: None }
    }

    fn append(&mut self, records: &[LogRecord]) {
        let Some(dir) = self.dir.clone() else { return };
        let mut text = String::new();
        for r in records {
            let switch = self
                .current
                .as_ref()
                .is_none_or(|(id, _)| *id != r.worker_id);
            if switch {
                self.flush(&mut text);
                let path = dir.join(format!("sandbox-{}.log", file_safe(&r.worker_id)));
                // Logs may hold secrets: private directory, private files.
                let opened = std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&dir)
                    .and_then(|()| {
                        std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .mode(0o600)
                            .open(&path)
                    });
                match opened {
                    Ok(f) => self.current = Some((r.worker_id.clone(), f)),
                    Err(e) => {
                        tracing::warn!(path = %path.display(), "cannot open the sandbox log file: {e}");
                        self.dir = None;
                        return;
                    }
                }
            }
            text.push_str(&r.to_line());
            text.push('\n');
        }
        self.flush(&mut text);
    }

    fn flush(&mut self, text: &mut String) {
        if let Some((_, f)) = &mut self.current {
            if !text.is_empty() {
                if let Err(e) = f.write_all(text.as_bytes()) {
                    tracing::warn!("cannot write the sandbox log file: {e}");
                }
            }
        }
        text.clear();
    }
}

fn file_safe(id: &str) -> String {
    let id: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if id.is_empty() {
        "unknown".to_owned()
    } else {
        id
    }
}
