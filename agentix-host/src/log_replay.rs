//! `/log` on the host: what sandboxes log and print, replayed into the host's
//! own logging.
//!
//! Each record goes through the `log` facade with its original target, so
//! `RUST_LOG=my_eval=info,agentix.sandbox.stdout=warn` filters sandbox lines
//! like local ones (`tracing-log` carries them on to `tracing` subscribers).
//! The message is prefixed with the sandbox id. A [`LogTap`] set in the
//! sandbox config also sees every record, for programs that collect them.

use std::sync::Arc;

use agentix_wire::errors::RemoteError;
use agentix_wire::log_record::LogRecord;
use agentix_wire::wire::{LogsEvent, EVENT_RECORDS, LOG_NAMESPACE};

use crate::endpoint::Endpoint;
use crate::relay_listener;
use crate::sio::SioClient;

/// Module path replayed records carry, which tells them from host records.
pub(crate) const REPLAY_MODULE: &str = "agentix::sandbox";

/// A callback that sees every record of a sandbox: `(sandbox id, record)`.
pub type LogTap = Arc<dyn Fn(&str, &LogRecord) + Send + Sync>;

/// Joins `/log` on `client`; records are replayed, and passed to `tap`.
pub(crate) async fn listen(
    client: &SioClient,
    endpoint: &Endpoint,
    sandbox_id: Arc<str>,
    tap: Option<LogTap>,
) -> Result<(), RemoteError> {
    relay_listener::listen(
        client,
        endpoint,
        LOG_NAMESPACE,
        EVENT_RECORDS,
        move |incoming| {
            let records = match incoming.decode::<LogsEvent>().map_err(|e| e.to_string()) {
                Ok(batch) => batch.decode(),
                Err(e) => Err(e),
            };
            match records {
                Ok(records) => {
                    for record in &records {
                        replay(&sandbox_id, record);
                        if let Some(tap) = &tap {
                            tap(&sandbox_id, record);
                        }
                    }
                }
                Err(e) => tracing::warn!("a /log batch from the sandbox is unreadable: {e}"),
            }
        },
    )
    .await
}

/// Logs `record` through the `log` facade under its own target.
pub(crate) fn replay(sandbox_id: &str, record: &LogRecord) {
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
    // The formatter below prints the sandbox's time, not the arrival's.
    SANDBOX_TIME.with(|t| t.set(Some(record.ts_us)));
    logger.log(
        &log::Record::builder()
            .metadata(meta)
            .args(format_args!("[{sandbox_id}] {}{fields}", record.message))
            .module_path_static(Some(REPLAY_MODULE))
            .file(record.file.as_deref())
            .line(record.line)
            .build(),
    );
    SANDBOX_TIME.with(|t| t.set(None));
}

thread_local! {
    /// While a record is replayed on this thread: when the sandbox made it,
    /// in microseconds since the Unix epoch.
    pub(crate) static SANDBOX_TIME: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}
