//! [`oom_kills`]: how many processes the kernel's OOM killer has killed in
//! this process's memory cgroup, so a worker killed for the sandbox's
//! memory limit is reported as such, not as a bare SIGKILL.

/// The cgroup's OOM-kill count (cgroup v2 `memory.events`, or v1
/// `memory.oom_control`), if the kernel exposes one here.
pub(crate) fn oom_kills() -> Option<u64> {
    [
        "/sys/fs/cgroup/memory.events",
        "/sys/fs/cgroup/memory/memory.oom_control",
    ]
    .iter()
    .find_map(|path| parse(&std::fs::read_to_string(path).ok()?))
}

fn parse(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    #[test]
    fn both_cgroup_formats_are_read() {
        assert_eq!(
            super::parse("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n"),
            Some(2)
        );
        assert_eq!(
            super::parse("oom_kill_disable 0\nunder_oom 0\noom_kill 7\n"),
            Some(7)
        );
        assert_eq!(super::parse("nothing here"), None);
    }
}
