//! [`EgressRecord`]: what the host keeps of one connection a sandbox
//! asked for (allowed, refused or failed), one line of the audit log.

use serde::{Deserialize, Serialize};

/// One connection, as the audit log has it (one JSON line each).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EgressRecord {
    /// When it was asked for, in microseconds since the Unix epoch.
    pub at_us: u64,
    /// The sandbox's id, when the gateway was attached to it by
    /// [`EgressGateway::attach`](crate::EgressGateway::attach).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// What was asked for: `host:port`, or a route's name.
    pub to: String,
    /// Whether it was a named route.
    #[serde(default)]
    pub route: bool,
    /// `allowed`, `refused` (by the policy) or `failed` (allowed, but the
    /// upstream could not be reached).
    pub decision: String,
    /// Why it was refused or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The address connected to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Bytes from the sandbox to the upstream.
    pub bytes_up: u64,
    /// Bytes from the upstream to the sandbox.
    pub bytes_down: u64,
    /// How long it was open, in milliseconds.
    pub duration_ms: f64,
}
