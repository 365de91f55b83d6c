//! [`SandboxInfo`]: a live sandbox as a provider lists it.

/// A sandbox as a provider lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxInfo {
    /// Its id, as [`Sandbox::id`](crate::Sandbox::id) gives it.
    pub id: String,
    /// `host:port` of its server.
    pub addr: String,
}
