//! `/log` on the host: what sandboxes log and print, replayed into the host's
//! own logging.
//!
//! Each record goes through the `log` facade with its original target, so
//! `RUST_LOG=my_eval=info,agentix.sandbox.stdout=warn` filters sandbox lines
//! like local ones (`tracing-log` carries them on to `tracing` subscribers).
//! The message is prefixed with the sandbox id. A [`LogTap`] set in the
//! sandbox config also sees every record, for programs that collect them.

use std::sync::Arc;

use agentix_actors::errors::RemoteError;
use agentix_actors::log_record::LogRecord;
use agentix_actors::wire::{LogsEvent, EVENT_RECORDS, EVENT_SIDE_ACK, LOG_NAMESPACE};
use futures_util::FutureExt;
use rust_socketio::asynchronous::Client;
use rust_socketio::Payload;
use serde_json::json;

use crate::connection::{ConnectionSettings, Endpoint};
use crate::namespace_client::join_namespace;

/// Module path replayed records carry, which tells them from host records.
pub const REPLAY_MODULE: &str = "agentix::sandbox";

/// A callback that sees every record of a sandbox: `(sandbox id, record)`.
pub type LogTap = Arc<dyn Fn(&str, &LogRecord) + Send + Sync>;

/// Joins `/log` on `endpoint`; records are replayed, and passed to `tap`.
pub(crate) async fn listen(
    endpoint: &Endpoint,
    settings: ConnectionSettings,
    sandbox_id: Arc<str>,
    tap: Option<LogTap>,
) -> Result<Client, RemoteError> {
    join(
        endpoint,
        settings,
        LOG_NAMESPACE,
        EVENT_RECORDS,
        move |payload| {
            let Some(batch) = crate::connection::first::<LogsEvent>(payload) else {
                return;
            };
            let records = match batch.decode() {
                Ok(records) => records,
                Err(e) => {
                    tracing::warn!("a /log batch from the sandbox is unreadable: {e}");
                    return;
                }
            };
            for record in &records {
                replay(&sandbox_id, record);
                if let Some(tap) = &tap {
                    tap(&sandbox_id, record);
                }
            }
        },
    )
    .await
}

/// Joins side channel `namespace` on `endpoint`, handing each `event`
/// payload to `on_event` (on the client's receive path), then acking it.
pub(crate) async fn join(
    endpoint: &Endpoint,
    settings: ConnectionSettings,
    namespace: &str,
    event: &str,
    on_event: impl Fn(Payload) + Send + Sync + 'static,
) -> Result<Client, RemoteError> {
    let on_payload = move |payload: Payload, client: Client| {
        on_event(payload);
        // Handled: the server may send one more batch.
        async move {
            if let Err(e) = client.emit(EVENT_SIDE_ACK, json!({})).await {
                tracing::debug!("side-channel ack not sent: {e}");
            }
        }
        .boxed()
    };
    join_namespace(endpoint, settings, namespace, |b| b.on(event, on_payload)).await
}

/// Logs `record` through the `log` facade under its own target.
pub fn replay(sandbox_id: &str, record: &LogRecord) {
    let level = match record.level.as_str() {
        "ERROR" => log::Level::Error,
        "WARN" => log::Level::Warn,
        "DEBUG" => log::Level::Debug,
        "TRACE" => log::Level::Trace,
        _ => log::Level::Info,
    };
    if level > log::max_level() {
        return;
    }
    let logger = log::logger();
    let meta = log::Metadata::builder()
        .level(level)
        .target(&record.target)
        .build();
    if !logger.enabled(&meta) {
        return;
    }
    let mut fields = String::new();
    for (k, v) in &record.fields {
        fields.push(' ');
        fields.push_str(k);
        fields.push('=');
        fields.push_str(v);
    }
    logger.log(
        &log::Record::builder()
            .metadata(meta)
            .args(format_args!("[{sandbox_id}] {}{fields}", record.message))
            .module_path_static(Some(REPLAY_MODULE))
            .file(record.file.as_deref())
            .line(record.line)
            .build(),
    );
}
