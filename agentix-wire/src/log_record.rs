//! [`LogRecord`]: one line of what a sandbox logged or printed.
//!
//! The same value travels worker -> server (inside a `logs` frame), server ->
//! host (as JSON on `/log`) and into the sandbox's log file, so every hop
//! sees target, level, message, fields and source location unchanged.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Target of a line the worker process wrote to its stdout.
pub const TARGET_STDOUT: &str = "agentix.sandbox.stdout";
/// Target of a line the worker process wrote to its stderr.
pub const TARGET_STDERR: &str = "agentix.sandbox.stderr";
/// Target of records Agentix itself adds (for example, a count of dropped records).
pub const TARGET_AGENTIX: &str = "agentix.sandbox";

/// One log record or output line from a sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogRecord {
    /// Wall-clock time it was emitted, in microseconds since the Unix epoch.
    pub ts_us: u64,
    /// `ERROR`, `WARN`, `INFO`, `DEBUG` or `TRACE`.
    pub level: String,
    /// The logging target (`my_eval::agent`, or one of the `TARGET_*` consts).
    pub target: String,
    /// The formatted message.
    pub message: String,
    /// Structured fields other than the message, formatted as text.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fields: BTreeMap<String, String>,
    /// Source file, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Source line, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// The worker that produced it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub worker_id: String,
    /// The trace that was current when it was logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The span that was current when it was logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_id: Option<String>,
    /// Its place among everything its worker logged and printed, counting
    /// from 1: records and output lines are numbered where they are made,
    /// in the order they were made. Absent for lines the server read after
    /// the worker died and for notes the runtime adds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
}

impl LogRecord {
    /// A record stamped now.
    pub fn now(level: &str, target: &str, message: String) -> Self {
        LogRecord {
            ts_us: now_us(),
            level: level.to_owned(),
            target: target.to_owned(),
            message,
            fields: BTreeMap::new(),
            file: None,
            line: None,
            worker_id: String::new(),
            trace_id: None,
            span_id: None,
            seq: None,
        }
    }

    /// The record as one line of the sandbox log file.
    pub fn to_line(&self) -> String {
        let mut line = String::new();
        self.write_line(&mut line);
        line
    }

    /// Appends the record's file line (without the newline) to `out`.
    pub fn write_line(&self, out: &mut String) {
        use std::fmt::Write;
        let secs = self.ts_us / 1_000_000;
        let micros = self.ts_us % 1_000_000;
        let _ = write!(out, "{secs}.{micros:06} {:<5} ", self.level);
        out.push_str(&self.target);
        out.push_str(": ");
        out.push_str(&self.message);
        for (k, v) in &self.fields {
            out.push(' ');
            out.push_str(k);
            out.push('=');
            out.push_str(v);
        }
    }
}

/// Microseconds since the Unix epoch (the clock of records and spans alike).
pub use agentix_trace::now_us;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_lines_carry_level_target_message_and_fields() {
        let mut r = LogRecord::now("INFO", "app::step", "started".into());
        r.ts_us = 1_700_000_000_000_042;
        r.fields.insert("model".into(), "claude".into());
        assert_eq!(
            r.to_line(),
            "1700000000.000042 INFO  app::step: started model=claude"
        );
    }
}
