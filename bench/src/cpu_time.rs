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
    /// `per` (calls or megabytes), in µs, under `rows` (key and description
    /// for the host, the server and the worker, in that order).
    pub(crate) fn report(
        &self,
        report: &mut Report,
        rows: [(&'static str, &'static str); 3],
        unit: &'static str,
        per: f64,
    ) {
        for ((key, what), (&pid, start)) in
            rows.into_iter().zip(self.pids.iter().zip(self.at_start))
        {
            let spent_ns = cpu_ns(pid).saturating_sub(start) as f64;
            report.add(key, what, unit, spent_ns / 1e3 / per);
        }
    }
}

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
