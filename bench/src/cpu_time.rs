//! Where a section's time went: the CPU time the host (this process), the
//! server and the worker each spent during it.
//!
//! A section's wall time is the CPU its processes spend plus the time they
//! wait to be woken. Dividing each process's CPU time by the section's
//! calls or megabytes shows which process a target is lost in, and whether
//! it is lost in work at all.

use crate::report::Report;

/// The three processes of a local sandbox, with their CPU time when the
/// section started.
pub(crate) struct CpuTimes {
    pids: [u32; 3],
    at_start: [u64; 3],
}

impl CpuTimes {
    /// Starts counting for the host, the server `server` and the worker
    /// `worker`.
    pub(crate) fn start(server: u32, worker: u32) -> Self {
        let pids = [std::process::id(), server, worker];
        CpuTimes {
            pids,
            at_start: pids.map(cpu_ns),
        }
    }

    /// Adds each process's CPU time since [`CpuTimes::start`] divided by
    /// `count` calls or megabytes, in µs, under
    /// `{section}_cpu_{process}_us[_per_mb]`, described as
    /// `"{process} CPU {what}"`.
    pub(crate) fn report(
        &self,
        report: &mut Report,
        section: &str,
        what: &str,
        per: Per,
        count: f64,
    ) {
        let (suffix, unit) = match per {
            Per::Call => ("", "µs"),
            Per::Megabyte => ("_per_mb", "µs/MB"),
        };
        for (process, (&pid, start)) in PROCESSES.iter().zip(self.pids.iter().zip(self.at_start)) {
            let spent_ns = cpu_ns(pid).saturating_sub(start) as f64;
            report.add(
                format!("{section}_cpu_{process}_us{suffix}"),
                format!("{process} CPU {what}"),
                unit,
                spent_ns / 1e3 / count,
            );
        }
    }
}

/// What a section's CPU time is divided by.
pub(crate) enum Per {
    /// Its calls.
    Call,
    /// The megabytes it echoed.
    Megabyte,
}

/// The processes of [`CpuTimes`], in the order of its pids.
const PROCESSES: [&str; 3] = ["host", "server", "worker"];

/// The CPU time of every live thread of process `pid`, in nanoseconds
/// (`/proc/<pid>/task/*/schedstat`, whose first field is the time the
/// thread ran); 0 when the process is gone.
fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|line| line.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}
