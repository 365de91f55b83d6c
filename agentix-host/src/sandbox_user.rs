//! [`RunAs`]: which user a sandbox's processes run as.
//!
//! Sandbox code shares its server's user, so whatever that user may read or
//! signal, the code may too. A host that is not root runs its sandboxes as
//! itself (the server and worker keep their memory private with
//! `PR_SET_DUMPABLE`). A root host must not: root's `CAP_SYS_PTRACE`
//! ignores that flag, and root may read and signal anything. So by default
//! a root host runs each sandbox as an unprivileged uid of its own, drawn
//! from a range no account uses, which also keeps sandboxes from reading or
//! signalling one another.

/// The first uid of the range sandboxes of a root host are given: far above
/// accounts (under 65,536) and the subordinate ids of user namespaces
/// (usually 100,000 plus 65,536 per user).
pub const SANDBOX_UID_BASE: u32 = 0x4000_0000;

/// How many uids the range holds.
const SANDBOX_UID_SPAN: u32 = 1 << 24;

/// Which user a sandbox's processes run as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RunAs {
    /// The host's own user, unless the host is root: then an unprivileged
    /// uid (and gid) of the sandbox's own, in the range from
    /// [`SANDBOX_UID_BASE`].
    #[default]
    Default,
    /// The host's own user, root included: for trusted code only (sandbox
    /// code of a root host may then read the host's memory and signal any
    /// process). For a container: the image's own user.
    HostUser,
    /// This uid, with the gid of the same number.
    Uid(u32),
}

impl RunAs {
    /// The uid sandbox `id` runs as, or `None` for the host's own.
    pub fn uid_for(self, id: &str) -> Option<u32> {
        match self {
            RunAs::HostUser => None,
            RunAs::Uid(uid) => Some(uid),
            RunAs::Default if host_is_root() => Some(unprivileged_uid(id)),
            RunAs::Default => None,
        }
    }
}

impl RunAs {
    /// The uid sandbox `id`'s container runs as, or `None` for the image's
    /// own user: an unprivileged uid of its own by default whatever the
    /// host runs as, since an image's user is often root.
    pub fn container_uid_for(self, id: &str) -> Option<u32> {
        match self {
            RunAs::HostUser => None,
            RunAs::Uid(uid) => Some(uid),
            RunAs::Default => Some(unprivileged_uid(id)),
        }
    }
}

/// Whether this process runs as root.
pub fn host_is_root() -> bool {
    // SAFETY: geteuid has no failure mode and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// The uid of the range from [`SANDBOX_UID_BASE`] that sandbox `id` gets:
/// a hash of its (random) id, so two sandboxes share one by chance only.
fn unprivileged_uid(id: &str) -> u32 {
    // FNV-1a: stable across runs and platforms, which std's hasher is not.
    let hash = id.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    SANDBOX_UID_BASE + hash % SANDBOX_UID_SPAN
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandboxes_of_a_root_host_get_distinct_unprivileged_uids() {
        let a = unprivileged_uid("0123456789abcdef");
        let b = unprivileged_uid("fedcba9876543210");
        assert_ne!(a, b);
        for uid in [a, b] {
            assert!((SANDBOX_UID_BASE..SANDBOX_UID_BASE + SANDBOX_UID_SPAN).contains(&uid));
        }
        assert_eq!(RunAs::HostUser.uid_for("x"), None);
        assert_eq!(RunAs::Uid(4242).uid_for("x"), Some(4242));
    }
}
