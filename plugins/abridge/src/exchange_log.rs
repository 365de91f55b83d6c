//! What abridge records of each exchange ([`Exchange`]), and where it goes:
//! a [`Recorder`] the user supplies, run as an actor on a thread of its own
//! behind a bounded mailbox ([`ExchangeLog`]), so a slow recorder slows the
//! gateway a little rather than growing memory. [`JsonLinesRecorder`]
//! ships: one exchange per line, a rollout's LLM transcript collected
//! without touching the agent.

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::exchange::Api;

/// Exchanges waiting for the recorder before the gateway waits.
const MAILBOX: usize = 1024;

/// One request an agent made and what came of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    /// The API the agent called.
    pub api: Api,
    /// The model the agent asked for.
    pub model: Value,
    /// The model sent upstream, when the gateway overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_model: Option<String>,
    /// The request's JSON body as the agent sent it.
    pub request: Value,
    /// The answer's JSON body as the agent got it (whole answers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<Value>,
    /// The server-sent events as the agent got them (streams).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<String>,
    /// The HTTP status the agent saw.
    pub status: u16,
    /// Why the exchange failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Prompt tokens, when the upstream said.
    pub prompt_tokens: Option<u64>,
    /// Completion tokens, when the upstream said.
    pub completion_tokens: Option<u64>,
    /// When the gateway got the request, in milliseconds since the epoch.
    pub started_at_ms: u64,
    /// From the request to the answer's end, in milliseconds.
    pub latency_ms: f64,
    /// From the request to the first streamed piece, in milliseconds.
    pub ttft_ms: Option<f64>,
}

/// Where exchanges go: called for each, in order, on the recorder's own
/// thread.
pub trait Recorder: Send + 'static {
    /// Records one exchange.
    fn record(&mut self, exchange: &Exchange);
}

/// The mailbox of a running [`Recorder`]; give it to a gateway with
/// `Gateway::record_to`. Cloning shares the recorder.
#[derive(Clone, Debug)]
pub struct ExchangeLog {
    mailbox: mpsc::Sender<Exchange>,
}

impl ExchangeLog {
    /// Starts `recorder` on a thread of its own; it runs until every clone
    /// of the log is dropped, having recorded everything sent before.
    pub fn start(mut recorder: impl Recorder) -> std::io::Result<ExchangeLog> {
        let (mailbox, mut arriving) = mpsc::channel::<Exchange>(MAILBOX);
        std::thread::Builder::new()
            .name("abridge-recorder".into())
            .spawn(move || {
                while let Some(exchange) = arriving.blocking_recv() {
                    recorder.record(&exchange);
                }
            })?;
        Ok(ExchangeLog { mailbox })
    }

    /// Hands `exchange` to the recorder, waiting while its mailbox is full.
    pub async fn send(&self, exchange: Exchange) {
        if self.mailbox.send(exchange).await.is_err() {
            tracing::warn!("abridge: the recorder has stopped; an exchange was not recorded");
        }
    }
}

/// Writes each exchange as one line of JSON, flushed as it goes.
pub struct JsonLinesRecorder {
    out: std::io::BufWriter<std::fs::File>,
}

impl JsonLinesRecorder {
    /// Appends to the file at `path`, creating it if needed.
    pub fn create(path: impl AsRef<Path>) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(JsonLinesRecorder {
            out: std::io::BufWriter::new(file),
        })
    }
}

impl Recorder for JsonLinesRecorder {
    fn record(&mut self, exchange: &Exchange) {
        let written = serde_json::to_writer(&mut self.out, exchange)
            .map_err(std::io::Error::from)
            .and_then(|()| self.out.write_all(b"\n"))
            .and_then(|()| self.out.flush());
        if let Err(e) = written {
            tracing::warn!("abridge: an exchange could not be written: {e}");
        }
    }
}
