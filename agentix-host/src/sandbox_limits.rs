//! [`SandboxLimits`]: how much memory, how many processes and how much CPU
//! a sandbox may use.
//!
//! A local isolated sandbox of a root host gets them from a cgroup of its
//! own (v2, or v1's `memory`, `pids` and `cpu` controllers); otherwise from
//! rlimits, which bound processes per sandbox (each has its own user
//! namespace) and memory per process, and cannot bound CPU.

/// How much a sandbox may use; `None` is no limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SandboxLimits {
    /// Memory, in bytes: the whole sandbox's with a cgroup, each process's
    /// data with rlimits. 4 GiB by default.
    pub memory_bytes: Option<u64>,
    /// Processes and threads, all together. 1024 by default.
    pub processes: Option<u64>,
    /// CPUs' worth of time per second (1.5 is one and a half), with a
    /// cgroup only. No limit by default.
    pub cpus: Option<f64>,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        SandboxLimits {
            memory_bytes: Some(4 << 30),
            processes: Some(1024),
            cpus: None,
        }
    }
}

impl SandboxLimits {
    /// No limits at all.
    pub fn none() -> Self {
        SandboxLimits {
            memory_bytes: None,
            processes: None,
            cpus: None,
        }
    }
}
