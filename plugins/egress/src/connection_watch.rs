//! [`ConnectionWatch`]: one connection from the request to its end,
//! turned into its span on the sandbox's trace hub and its
//! [`EgressRecord`] in the audit log when it ends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use agentix::trace::{SpanContext, TraceHub};

use crate::audit_log::AuditLog;
use crate::egress_record::EgressRecord;
use crate::protocol::TunnelTo;

/// Bytes that crossed a tunnel, counted by its two directions.
#[derive(Debug, Default)]
pub struct Traffic {
    /// Sandbox to upstream.
    pub up: AtomicU64,
    /// Upstream to sandbox.
    pub down: AtomicU64,
}

/// Where a gateway's records go: the sandbox's trace hub (a span each) and
/// the audit log, if any.
#[derive(Clone)]
pub struct RecordSinks {
    /// The sandbox's hub.
    pub hub: TraceHub,
    /// The JSON-lines log.
    pub audit: Option<Arc<AuditLog>>,
    /// The sandbox's id, if known.
    pub sandbox: Option<Arc<str>>,
}

/// One connection being watched: its span runs from the request to the
/// end, and its record is written when it is dropped.
pub struct ConnectionWatch {
    span: agentix::trace::Span,
    sinks: RecordSinks,
    record: EgressRecord,
    started: Instant,
    /// The bytes each way, counted by the tunnel's directions.
    pub traffic: Arc<Traffic>,
}

impl ConnectionWatch {
    /// Starts watching a connection to `to`, its span under `parent`.
    pub fn start(sinks: &RecordSinks, to: &TunnelTo, parent: Option<SpanContext>) -> Self {
        let span = match parent {
            Some(parent) => sinks.hub.span_under("egress", Some(parent)),
            None => sinks.hub.span("egress"),
        };
        let route = matches!(to, TunnelTo::Route { .. });
        let to = match to {
            TunnelTo::Route { name } => name.clone(),
            other => other.to_string(),
        };
        span.set_attr("egress.to", to.clone());
        span.set_attr("egress.route", route);
        ConnectionWatch {
            span,
            sinks: sinks.clone(),
            record: EgressRecord {
                at_us: agentix::trace::now_us(),
                sandbox: sinks.sandbox.as_deref().map(str::to_owned),
                to,
                route,
                decision: "allowed".into(),
                reason: None,
                address: None,
                bytes_up: 0,
                bytes_down: 0,
                duration_ms: 0.0,
            },
            started: Instant::now(),
            traffic: Arc::default(),
        }
    }

    /// The connection was made, to `address`.
    pub fn connected(&mut self, address: impl Into<String>) {
        let address = address.into();
        self.span.set_attr("egress.address", address.clone());
        self.record.address = Some(address);
    }

    /// It was refused (`decision` `refused`) or failed (`failed`) for
    /// `reason`; the record is written now.
    pub fn ended_early(mut self, decision: &str, reason: &str) {
        self.record.decision = decision.into();
        self.record.reason = Some(reason.into());
        self.span.set_error(reason);
    }
}

impl Drop for ConnectionWatch {
    fn drop(&mut self) {
        let record = &mut self.record;
        record.bytes_up = self.traffic.up.load(Ordering::Relaxed);
        record.bytes_down = self.traffic.down.load(Ordering::Relaxed);
        record.duration_ms = self.started.elapsed().as_secs_f64() * 1e3;
        self.span
            .set_attr("egress.allowed", record.decision == "allowed");
        self.span
            .set_attr("egress.decision", record.decision.clone());
        self.span.set_attr("egress.bytes_up", record.bytes_up);
        self.span.set_attr("egress.bytes_down", record.bytes_down);
        if record.decision != "allowed" {
            tracing::info!(
                to = %record.to,
                sandbox = record.sandbox.as_deref().unwrap_or(""),
                "egress {}: {}",
                record.decision,
                record.reason.as_deref().unwrap_or(""),
            );
        }
        if let Some(audit) = &self.sinks.audit {
            audit.write(record);
        }
    }
}
