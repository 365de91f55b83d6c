//! [`OwnerId`]: which host process owns a sandbox, precisely enough that a
//! provider can tell a dead owner's leftovers from a live owner's sandboxes
//! on a machine (or an engine) many hosts share.
//!
//! A PID alone misleads: a killed host is a zombie (its `/proc` entry
//! stays) until its parent waits for it, and a PID is recycled. So an owner
//! is its machine, its boot, its PID and its PID's start time: a zombie,
//! another process under a recycled PID, a host of an earlier boot all read
//! as dead, and another machine's host is never judged at all.

use std::fmt;

/// A host process, as sandboxes record their owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerId {
    /// The machine's id (`/etc/machine-id`, else the host name).
    pub machine: String,
    /// The boot's id (`/proc/sys/kernel/random/boot_id`).
    pub boot: String,
    /// The process id.
    pub pid: u32,
    /// When the process started, in clock ticks after boot (`/proc/PID/stat`).
    pub start: u64,
}

/// What an [`OwnerId`] is now, seen from this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// The process runs.
    Alive,
    /// It ended: gone, a zombie, its PID taken by another process, or of an
    /// earlier boot. What it owned may be removed.
    Dead,
    /// It is another machine's: this one cannot tell, and leaves it alone.
    Elsewhere,
}

impl OwnerId {
    /// This process.
    pub fn current() -> OwnerId {
        let pid = std::process::id();
        OwnerId {
            machine: machine_id(),
            boot: boot_id(),
            pid,
            start: process_start(pid).unwrap_or_default(),
        }
    }

    /// Parses what [`fmt::Display`] wrote (`pid.start@boot@machine`).
    pub fn parse(text: &str) -> Option<OwnerId> {
        let mut parts = text.splitn(3, '@');
        let (process, boot, machine) = (parts.next()?, parts.next()?, parts.next()?);
        let (pid, start) = process.split_once('.')?;
        Some(OwnerId {
            machine: machine.to_owned(),
            boot: boot.to_owned(),
            pid: pid.parse().ok()?,
            start: start.parse().ok()?,
        })
    }

    /// Whether the owner still runs, as this machine sees it.
    pub fn liveness(&self) -> Liveness {
        if self.machine != machine_id() {
            return Liveness::Elsewhere;
        }
        if self.boot != boot_id() {
            return Liveness::Dead;
        }
        match process_state(self.pid) {
            Some((state, start)) if state != 'Z' && start == self.start => Liveness::Alive,
            _ => Liveness::Dead,
        }
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{}@{}@{}",
            self.pid, self.start, self.boot, self.machine
        )
    }
}

/// This machine's id: `/etc/machine-id` (or D-Bus's copy), else its host
/// name.
pub fn machine_id() -> String {
    [
        "/etc/machine-id",
        "/var/lib/dbus/machine-id",
        "/proc/sys/kernel/hostname",
    ]
    .iter()
    .filter_map(|path| std::fs::read_to_string(path).ok())
    .map(|id| id.trim().to_owned())
    .find(|id| !id.is_empty())
    .unwrap_or_default()
}

/// This boot's id.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// When process `pid` started, in clock ticks after boot.
pub fn process_start(pid: u32) -> Option<u64> {
    process_state(pid).map(|(_, start)| start)
}

/// Whether process `pid` runs and is the one that started at `start` (not
/// a zombie, not another process under a recycled PID).
pub fn process_running(pid: u32, start: u64) -> bool {
    matches!(process_state(pid), Some((state, at)) if state != 'Z' && at == start)
}

/// Process `pid`'s state letter and start time, from `/proc/PID/stat`.
fn process_state(pid: u32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold any byte: the fields
    // that matter come after its last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 of the file is the state, field 22 the start time.
    let state = fields.first()?.chars().next()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_reads_back() {
        let me = OwnerId::current();
        assert!(me.start > 0);
        assert_eq!(me.liveness(), Liveness::Alive);
        assert_eq!(OwnerId::parse(&me.to_string()), Some(me));
    }

    #[test]
    fn a_zombie_a_recycled_pid_and_an_earlier_boot_are_dead_another_machine_elsewhere() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let start = process_start(pid).unwrap();
        let owner = OwnerId {
            pid,
            start,
            ..OwnerId::current()
        };
        // Not waited for: once it exits it is a zombie, its /proc entry kept.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while process_state(pid).map(|(s, _)| s) != Some('Z') {
            assert!(std::time::Instant::now() < deadline, "never a zombie");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
        assert_eq!(owner.liveness(), Liveness::Dead, "a zombie owns nothing");
        child.wait().unwrap();
        assert_eq!(owner.liveness(), Liveness::Dead, "gone");

        let recycled = OwnerId {
            start: OwnerId::current().start + 1,
            ..OwnerId::current()
        };
        assert_eq!(recycled.liveness(), Liveness::Dead, "another process's PID");
        let earlier = OwnerId {
            boot: "an-earlier-boot".into(),
            ..OwnerId::current()
        };
        assert_eq!(earlier.liveness(), Liveness::Dead);
        let elsewhere = OwnerId {
            machine: "another-machine".into(),
            pid: 999_999,
            ..OwnerId::current()
        };
        assert_eq!(elsewhere.liveness(), Liveness::Elsewhere);
    }
}
