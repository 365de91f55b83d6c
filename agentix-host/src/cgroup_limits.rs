//! [`SandboxCgroup`]: the cgroup a root host gives each isolated local
//! sandbox, so that memory, processes and CPU are limited for the sandbox
//! as a whole.
//!
//! cgroup v2 where it is mounted (`/sys/fs/cgroup/agentix-<id>`), otherwise
//! v1's `memory`, `pids` and `cpu` hierarchies (`/sys/fs/cgroup/<controller>/
//! agentix-<id>`). The server joins it between fork and exec, through files
//! the host opened, so nothing the sandbox runs is ever outside it. A host
//! that is not root, or whose cgroups are read-only, gets `None` and the
//! sandbox falls back to rlimits.
//!
//! These are a handful of file writes the kernel documents; a cgroup crate
//! would add a systemd client and an OCI model for no more than this.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::sandbox_limits::SandboxLimits;

/// Where the cgroup hierarchies are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// A cgroup v1 directory's list of threads; writing `0` moves the writer.
const V1_THREAD_FILE: &str = "tasks";

/// The CFS period the CPU limit is a share of, in microseconds.
const CPU_PERIOD_US: u64 = 100_000;

/// One sandbox's cgroup: a directory per hierarchy it was made in.
#[derive(Debug, Clone)]
pub(crate) struct SandboxCgroup {
    dirs: Vec<PathBuf>,
}

impl SandboxCgroup {
    /// Makes the cgroup `name` with `limits`, or `None` where this host
    /// cannot (not root, no writable hierarchy) or nothing is limited.
    pub(crate) fn create(name: &str, limits: &SandboxLimits) -> Option<SandboxCgroup> {
        if !crate::sandbox_user::host_is_root() || *limits == SandboxLimits::none() {
            return None;
        }
        let root = Path::new(CGROUP_ROOT);
        let cgroup = if root.join("cgroup.controllers").exists() {
            SandboxCgroup::create_v2(root, name, limits)
        } else {
            SandboxCgroup::create_v1(root, name, limits)
        };
        match cgroup {
            Ok(cgroup) if !cgroup.dirs.is_empty() => Some(cgroup),
            Ok(_) => None,
            Err((cgroup, e)) => {
                tracing::debug!("no cgroup for sandbox {name}, limits by rlimit: {e}");
                cgroup.try_remove();
                None
            }
        }
    }

    fn create_v2(
        root: &Path,
        name: &str,
        limits: &SandboxLimits,
    ) -> Result<SandboxCgroup, (SandboxCgroup, std::io::Error)> {
        let mut cgroup = SandboxCgroup { dirs: Vec::new() };
        // The root cgroup may hold processes and still hand controllers down.
        let _ = std::fs::write(root.join("cgroup.subtree_control"), "+memory +pids +cpu");
        let dir = root.join(name);
        if let Err(e) = std::fs::create_dir(&dir) {
            return Err((cgroup, e));
        }
        cgroup.dirs.push(dir.clone());
        let mut settings = Vec::new();
        if let Some(bytes) = limits.memory_bytes {
            settings.push(("memory.max", bytes.to_string()));
            settings.push(("memory.swap.max", "0".to_owned()));
        }
        if let Some(n) = limits.processes {
            settings.push(("pids.max", n.to_string()));
        }
        if let Some(cpus) = limits.cpus {
            settings.push(("cpu.max", format!("{} {CPU_PERIOD_US}", cpu_quota(cpus))));
        }
        for (file, value) in settings {
            if let Err(e) = std::fs::write(dir.join(file), &value) {
                // Swap may not be accounted; every other limit must hold.
                if file != "memory.swap.max" {
                    return Err((cgroup, e));
                }
            }
        }
        Ok(cgroup)
    }

    fn create_v1(
        root: &Path,
        name: &str,
        limits: &SandboxLimits,
    ) -> Result<SandboxCgroup, (SandboxCgroup, std::io::Error)> {
        let mut cgroup = SandboxCgroup { dirs: Vec::new() };
        let mut wanted = Vec::new();
        if let Some(bytes) = limits.memory_bytes {
            wanted.push(("memory", "memory.limit_in_bytes", bytes.to_string()));
        }
        if let Some(n) = limits.processes {
            wanted.push(("pids", "pids.max", n.to_string()));
        }
        if let Some(cpus) = limits.cpus {
            wanted.push(("cpu", "cpu.cfs_quota_us", cpu_quota(cpus).to_string()));
        }
        for (controller, file, value) in wanted {
            let dir = root.join(controller).join(name);
            if let Err(e) = std::fs::create_dir(&dir) {
                return Err((cgroup, e));
            }
            cgroup.dirs.push(dir.clone());
            if let Err(e) = std::fs::write(dir.join(file), &value) {
                return Err((cgroup, e));
            }
        }
        Ok(cgroup)
    }

    /// The cgroup a marker recorded, by its directories.
    pub(crate) fn from_dirs(dirs: Vec<PathBuf>) -> SandboxCgroup {
        SandboxCgroup { dirs }
    }

    /// Its directories, one per hierarchy.
    pub(crate) fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Sends SIGKILL to every process in it (cgroup v1 has no
    /// `cgroup.kill`; the list is read and signalled, which a fork between
    /// the two can outrun, so a caller waits and tries again).
    pub(crate) fn kill_all(&self) {
        for dir in &self.dirs {
            let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) else {
                continue;
            };
            for pid in procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
                agentix_wire::process::signal_pid(pid, libc::SIGKILL);
            }
        }
    }

    /// Files that move the process writing `0` to them into this cgroup,
    /// for the server's first step (`LaunchSpec::cgroup_files`); each is
    /// opened here once, so that a host that cannot write them hears why
    /// before anything starts.
    ///
    /// On cgroup v1 that is `tasks`, which moves the writing thread alone:
    /// the kernel then skips the lock that keeps every thread group still
    /// (`cgroup_threadgroup_rwsem`), whose write side waits for an RCU grace
    /// period (~8 ms here) and stalls every `fork` on the machine meanwhile,
    /// unless the hierarchy was mounted with `favordynmods`. The server's
    /// first process writes it while it has one thread, so its one thread
    /// is the whole process. cgroup v2 has no such file and takes
    /// `cgroup.procs`.
    pub(crate) fn join_files(&self) -> std::io::Result<Vec<PathBuf>> {
        self.dirs
            .iter()
            .map(|dir| {
                let tasks = dir.join(V1_THREAD_FILE);
                let file = if tasks.exists() {
                    tasks
                } else {
                    dir.join("cgroup.procs")
                };
                File::options().write(true).open(&file).map(|_| file)
            })
            .collect()
    }

    /// Removes what it can of the cgroup now; true when all of it is gone.
    /// A cgroup whose processes have just exited stays busy for a moment,
    /// until the kernel has taken them out.
    pub(crate) fn try_remove(&self) -> bool {
        self.dirs
            .iter()
            .fold(true, |gone, dir| match std::fs::remove_dir(dir) {
                Ok(()) => gone,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => gone,
                Err(_) => false,
            })
    }

    /// Removes the cgroup once its processes are gone, retrying on a thread
    /// of its own when it is still busy: the keeper thread that calls this
    /// also starts the next sandbox, and must not sleep.
    pub(crate) fn remove_soon(&self) {
        if self.try_remove() {
            return;
        }
        let cgroup = self.clone();
        let _ = std::thread::Builder::new()
            .name("agentix-cgroup-removal".into())
            .spawn(move || {
                for _ in 0..REMOVAL_TRIES {
                    std::thread::sleep(REMOVAL_PAUSE);
                    if cgroup.try_remove() {
                        return;
                    }
                }
                tracing::warn!(dirs = ?cgroup.dirs, "a sandbox's cgroup stays busy; it is left");
            });
    }

    /// Waits (without blocking a thread) until the cgroup is gone, as far
    /// as [`Self::remove_soon`] gets.
    pub(crate) async fn removed(&self) {
        for _ in 0..REMOVAL_TRIES {
            if self.try_remove() {
                return;
            }
            tokio::time::sleep(REMOVAL_PAUSE).await;
        }
    }
}

/// How often, and how far apart, a busy cgroup's removal is tried again.
const REMOVAL_TRIES: u32 = 200;
const REMOVAL_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);

/// Microseconds of CPU per period that `cpus` CPUs give.
fn cpu_quota(cpus: f64) -> u64 {
    ((cpus * CPU_PERIOD_US as f64) as u64).max(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits until `pid` runs `sleep` (its joins are done by then).
    fn wait_for_exec(pid: u32) {
        for _ in 0..500 {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim() == "sleep" {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("the child never ran sleep");
    }

    /// The cgroup paths `/proc/<pid>/cgroup` lists for a process.
    fn cgroups_of(pid: u32) -> String {
        std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("the child's cgroups")
    }

    #[test]
    fn a_process_that_writes_the_join_files_runs_in_every_hierarchy_of_the_cgroup() {
        let name = format!("agentix-join-test-{}", std::process::id());
        let limits = SandboxLimits {
            memory_bytes: Some(256 << 20),
            processes: Some(64),
            cpus: Some(1.0),
        };
        let Some(cgroup) = SandboxCgroup::create(&name, &limits) else {
            // Only a root host with writable cgroups makes one at all.
            assert!(
                !crate::sandbox_user::host_is_root(),
                "a root host made no cgroup (are its cgroups mounted read-only?)"
            );
            return;
        };
        let files = cgroup.join_files().expect("the join files open");
        // A single-threaded process writes 0 to each, as a server's first
        // step does, then becomes another program.
        let joins: Vec<String> = files
            .iter()
            .map(|f| format!("echo 0 > '{}'", f.display()))
            .collect();
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{} && exec sleep 30", joins.join(" && ")))
            .spawn()
            .expect("sh starts");
        wait_for_exec(child.id());
        let listed = cgroups_of(child.id());
        let _ = child.kill();
        let _ = child.wait();
        let in_all = cgroup.dirs().iter().all(|dir| {
            let hierarchy = dir.parent().expect("a hierarchy");
            let path = Path::new("/").join(dir.strip_prefix(hierarchy).expect("under it"));
            listed
                .lines()
                .any(|line| line.ends_with(&format!(":{}", path.display())))
        });
        let removed = (0..REMOVAL_TRIES).any(|_| {
            std::thread::sleep(REMOVAL_PAUSE);
            cgroup.try_remove()
        });
        assert!(in_all, "{:?} not all in {listed}", cgroup.dirs());
        assert!(removed, "the cgroup stayed after its process exited");
        assert!(
            !cgroups_of(std::process::id()).contains(&name),
            "the host moved too"
        );
    }
}
