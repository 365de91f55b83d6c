//! Log sinks as actors: [`SandboxLog`], the message a sink handles, and
//! [`SandboxConfig::log_to`], which sends it every record of a sandbox.
//!
//! Records reach the sink in the sandbox's order through a bounded queue
//! (see `agentix_actors::event_route`): a sink that falls a whole queue
//! behind loses records from its live feed (each loss logged, with the
//! count so far), never slows the sandbox or the connection, and the
//! sandbox's log file keeps everything.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use actix::{Message, Recipient};
use agentix_actors::event_route::EventRoute;
use agentix_wire::log_record::LogRecord;

use crate::config::SandboxConfig;

/// One record a sandbox logged or printed, for a sink actor.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct SandboxLog {
    /// The sandbox's id.
    pub sandbox: Arc<str>,
    /// The record.
    pub record: LogRecord,
}

impl SandboxConfig {
    /// Sends every record the sandbox logs or prints to `sink`, as a
    /// [`SandboxLog`] message, in order (beside any `on_log` tap).
    pub fn log_to(self, sink: Recipient<SandboxLog>) -> Self {
        let route = EventRoute::new(sink);
        let lost = AtomicU64::new(0);
        self.on_log(move |sandbox, record| {
            let log = SandboxLog {
                sandbox: Arc::from(sandbox),
                record: record.clone(),
            };
            if let Err((_, why)) = route.push(log) {
                let lost = lost.fetch_add(1, Ordering::Relaxed) + 1;
                tracing::warn!(sandbox, lost, "a record did not reach its log sink: {why}");
            }
        })
    }
}
