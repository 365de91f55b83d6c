//! [`Refusal`]: why the policy does not make a connection, in words a
//! sandbox's user (and the proxy's 403) can act on.

/// Why a connection is not made: what was asked for, and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("egress to {target} refused: {reason}")]
pub struct Refusal {
    /// What the sandbox asked for, as it wrote it.
    pub target: String,
    /// The rule or fact that refused it.
    pub reason: String,
}

impl Refusal {
    /// A refusal of `target` for `reason`.
    pub fn new(target: impl Into<String>, reason: impl Into<String>) -> Self {
        Refusal {
            target: target.into(),
            reason: reason.into(),
        }
    }
}
