//! What a sandbox's processes use, read from `/proc` (by `procfs`): CPU
//! time and memory, summed over a process and its descendants, or over a
//! list of pids.

use std::collections::HashMap;

use procfs::process::{Process, Stat};

/// CPU time and resident memory of some processes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Usage {
    /// User and system CPU time, in seconds.
    pub(crate) cpu_s: f64,
    /// Resident memory, in bytes.
    pub(crate) rss_bytes: u64,
}

/// `root` and every process under it.
pub(crate) fn of_tree(root: u32) -> Usage {
    let Ok(all) = procfs::process::all_processes() else {
        return Usage::default();
    };
    let stats: HashMap<i32, Stat> = all
        .filter_map(|p| p.ok()?.stat().ok())
        .map(|stat| (stat.pid, stat))
        .collect();
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for stat in stats.values() {
        children.entry(stat.ppid).or_default().push(stat.pid);
    }
    let mut tree = vec![root as i32];
    let mut next = 0;
    while next < tree.len() {
        if let Some(kids) = children.get(&tree[next]) {
            tree.extend(kids);
        }
        next += 1;
    }
    sum(tree.iter().filter_map(|pid| stats.get(pid)))
}

/// The processes `pids` name.
pub(crate) fn of_pids(pids: &[u32]) -> Usage {
    let stats: Vec<Stat> = pids
        .iter()
        .filter_map(|pid| Process::new(*pid as i32).ok()?.stat().ok())
        .collect();
    sum(stats.iter())
}

fn sum<'a>(stats: impl Iterator<Item = &'a Stat>) -> Usage {
    let hz = procfs::ticks_per_second().max(1) as f64;
    let page = procfs::page_size().max(1);
    stats.fold(Usage::default(), |usage, stat| Usage {
        cpu_s: usage.cpu_s + (stat.utime + stat.stime) as f64 / hz,
        rss_bytes: usage.rss_bytes + stat.rss * page,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_uses_memory_and_its_tree_holds_its_child() {
        let me = std::process::id();
        let alone = of_pids(&[me]);
        assert!(alone.rss_bytes > 1 << 20, "{alone:?}");
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let tree = of_tree(me);
        assert!(tree.rss_bytes > alone.rss_bytes, "{tree:?} vs {alone:?}");
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(of_pids(&[]), Usage::default());
    }
}
