//! What a sandbox's processes use, read from `/proc`: CPU time and memory,
//! summed over a process and its descendants, or over a list of pids.

use std::collections::HashMap;

/// CPU time and resident memory of some processes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Usage {
    /// User and system CPU time, in seconds.
    pub(crate) cpu_s: f64,
    /// Resident memory, in bytes.
    pub(crate) rss_bytes: u64,
}

/// One process's parent, CPU ticks and resident pages, from its `stat`.
struct Stat {
    ppid: u32,
    ticks: u64,
    rss_pages: u64,
}

fn stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold any byte: the fields that matter follow
    // its last `)`.
    let fields: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
    // Fields 4, 14, 15 and 24 of the file (1-based); here from field 3.
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        ppid: field(4)? as u32,
        ticks: field(14)? + field(15)?,
        rss_pages: field(24)?,
    })
}

/// Every process of this machine's PID namespace, by pid.
fn all_processes() -> HashMap<u32, Stat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return HashMap::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, stat(pid)?)))
        .collect()
}

/// `root` and every process under it.
pub(crate) fn of_tree(root: u32) -> Usage {
    let processes = all_processes();
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (pid, stat) in &processes {
        children.entry(stat.ppid).or_default().push(*pid);
    }
    let mut tree = vec![root];
    let mut next = 0;
    while next < tree.len() {
        if let Some(kids) = children.get(&tree[next]) {
            tree.extend(kids);
        }
        next += 1;
    }
    sum(tree.iter().filter_map(|pid| processes.get(pid)))
}

/// The processes `pids` name.
pub(crate) fn of_pids(pids: &[u32]) -> Usage {
    let stats: Vec<Stat> = pids.iter().filter_map(|pid| stat(*pid)).collect();
    sum(stats.iter())
}

fn sum<'a>(stats: impl Iterator<Item = &'a Stat>) -> Usage {
    // SAFETY: sysconf has no preconditions.
    let (hz, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let (hz, page) = (hz.max(1) as f64, page.max(1) as u64);
    stats.fold(Usage::default(), |usage, stat| Usage {
        cpu_s: usage.cpu_s + stat.ticks as f64 / hz,
        rss_bytes: usage.rss_bytes + stat.rss_pages * page,
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
