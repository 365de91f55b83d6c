//! [`LogRelay`]: everything the sandbox logged or printed, to disk and to hosts.
//!
//! Records come from the worker's side pipe (its `tracing`/`log` records) and
//! from its stdout/stderr, read line by line. The relay appends each one to
//! `$AGENTIX_LOG_DIR/sandbox-<worker-id>.log`, then sends it to every host on
//! `/log`, in order. It runs as one task fed by a bounded channel: sending to
//! a slow host waits, which fills the channel, which makes the readers wait,
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
use agentix_actors::wire::{LogsEvent, EVENT_RECORDS, LOG_NAMESPACE};
use socketioxide::SocketIo;
use tokio::sync::mpsc;

use crate::rpc::emit;

/// Records kept while no host listens.
pub const BACKLOG: usize = 100_000;
/// Batches waiting for the relay before readers wait.
const QUEUE: usize = 8;
/// Most records in one `/log` event.
const MAX_EVENT_RECORDS: usize = 2048;

/// Environment variable naming the directory for sandbox log files.
pub const ENV_LOG_DIR: &str = "AGENTIX_LOG_DIR";
/// Where log files go when `AGENTIX_LOG_DIR` is not set.
pub const DEFAULT_LOG_DIR: &str = "/tmp/agentix";

enum Relayed {
    Records(Vec<LogRecord>),
    HostJoined,
}

/// A handle to the relay task; cheap to clone.
#[derive(Clone)]
pub struct LogRelay {
    tx: mpsc::Sender<Relayed>,
}

/// The relay's input, until [`LogRelayInbox::start`] gives it a task.
pub struct LogRelayInbox {
    rx: mpsc::Receiver<Relayed>,
}

impl LogRelayInbox {
    /// Starts delivering to `/log` on `io`, writing files under `dir` (none:
    /// no files).
    pub fn start(self, io: SocketIo, dir: Option<PathBuf>) {
        tokio::spawn(relay(io, dir, self.rx));
    }
}

impl LogRelay {
    /// A relay handle and its inbox; records sent before the inbox starts
    /// wait in it (the socket layer needs the handle before it exists).
    pub fn channel() -> (Self, LogRelayInbox) {
        let (tx, rx) = mpsc::channel(QUEUE);
        (LogRelay { tx }, LogRelayInbox { rx })
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

    /// A host joined `/log`: it gets the backlog at once.
    pub fn host_joined(&self) {
        let _ = self.tx.try_send(Relayed::HostJoined);
    }
}

async fn relay(io: SocketIo, dir: Option<PathBuf>, mut rx: mpsc::Receiver<Relayed>) {
    let mut files = LogFiles::new(dir);
    let mut backlog: VecDeque<LogRecord> = VecDeque::new();
    let mut dropped = 0u64;
    while let Some(msg) = rx.recv().await {
        let records = match msg {
            Relayed::Records(records) => {
                files.append(&records);
                records
            }
            Relayed::HostJoined => Vec::new(),
        };
        let hosts = io
            .of(LOG_NAMESPACE)
            .map(|ns| ns.sockets())
            .unwrap_or_default();
        if hosts.is_empty() {
            backlog.extend(records);
            while backlog.len() > BACKLOG {
                backlog.pop_front();
                dropped += 1;
            }
            continue;
        }
        let mut pending: Vec<LogRecord> = Vec::new();
        if dropped > 0 {
            pending.push(LogRecord::now(
                "WARN",
                TARGET_AGENTIX,
                format!(
                    "{dropped} earlier log records were dropped: no host was listening \
                     and the backlog holds {BACKLOG}"
                ),
            ));
            dropped = 0;
        }
        pending.extend(backlog.drain(..));
        pending.extend(records);
        for chunk in pending.chunks(MAX_EVENT_RECORDS) {
            let event = LogsEvent {
                records: chunk.to_vec(),
            };
            for host in &hosts {
                emit(host, EVENT_RECORDS, &event).await;
            }
        }
        if backlog.capacity() > 4 * MAX_EVENT_RECORDS {
            backlog = VecDeque::new();
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
