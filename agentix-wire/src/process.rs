//! Small Unix process helpers shared by every process that spawns another.
//!
//! Each spawner (host -> server, server -> worker) needs the same three
//! guarantees: the child dies with its parent, it can be killed as a group,
//! and "is it gone?" has an answer that treats zombies as gone.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// Creates a pipe whose both ends close on exec; returns (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both fds are open and owned by nobody else.
    let ends = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // A 64 KiB pipe moves a 1 MiB frame in 16 writes, each waking the
    // reader; a larger one (up to the system's pipe-max-size) in fewer.
    // Best effort: an unprivileged process may be refused past that limit.
    // SAFETY: fcntl on a pipe we own, with an integer argument.
    unsafe { libc::fcntl(fds[1], libc::F_SETPIPE_SZ, PIPE_BYTES as libc::c_int) };
    Ok(ends)
}

/// The capacity asked for each pipe between server and worker.
const PIPE_BYTES: usize = 1 << 20;

/// In a freshly forked child: die with `signal` when the parent goes away,
/// and start a new process group so the whole tree can be signalled at once.
///
/// Only async-signal-safe calls; meant for `CommandExt::pre_exec`.
pub fn child_setup(parent_pid: libc::pid_t, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: plain syscalls with integer arguments.
    unsafe {
        if libc::setpgid(0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        // The parent may have died between fork and prctl: then nobody would
        // ever send the signal, so leave now.
        if libc::getppid() != parent_pid {
            libc::_exit(1);
        }
    }
    Ok(())
}

/// Makes this process's memory unreadable to others of its user: no
/// `/proc/<pid>/mem`, `environ` or ptrace for a process without
/// `CAP_SYS_PTRACE`, and no core dump. A server and a worker call it before
/// they read a secret (the token), since sandbox code runs as their user.
/// A program they start is readable again (`execve` resets the flag), which
/// is what a user's tools expect.
pub fn hide_memory() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Duplicates `fd` to a number of at least 100 in a forked child.
///
/// Async-signal-safe. Done before [`install_fd`] so that installing several
/// fds at low numbers never clobbers one that is still to be installed.
pub fn move_fd_high(fd: libc::c_int) -> io::Result<libc::c_int> {
    // Close-on-exec: the high copy is only a stepping stone; without the
    // flag the worker would inherit it and pass it on to every process it
    // starts, keeping the server's pipes open behind its back.
    // SAFETY: fcntl with F_DUPFD_CLOEXEC only reads its integer arguments.
    let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 100) };
    if high < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(high)
}

/// Installs `fd` as `target` in a forked child (see [`move_fd_high`]).
pub fn install_fd(fd: libc::c_int, target: libc::c_int) -> io::Result<()> {
    // SAFETY: dup2 only reads its integer arguments.
    if unsafe { libc::dup2(fd, target) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends `signal` to the process group `pgid`; a vanished group is fine.
pub fn signal_group(pgid: u32, signal: libc::c_int) {
    // kill(-0) is this process's own group and kill(-1) every process
    // there is: a pid that defaulted to 0 (or 1) must signal nobody.
    if pgid <= 1 || pgid > libc::pid_t::MAX as u32 {
        return;
    }
    // SAFETY: kill only reads its integer arguments.
    unsafe {
        libc::kill(-(pgid as libc::pid_t), signal);
    }
}

/// Sends `signal` to the process `pid`; a vanished process is fine.
pub fn signal_pid(pid: u32, signal: libc::c_int) {
    // kill(0) would be this process's own group; a pid past pid_t's range
    // would turn negative, a group.
    if pid == 0 || pid > libc::pid_t::MAX as u32 {
        return;
    }
    // SAFETY: kill only reads its integer arguments.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}

/// Tunes glibc's allocator for a process that moves large messages: fast
/// while they flow, back to its idle footprint once they stop.
///
/// Allocations past the mmap threshold get a fresh mapping each time, which
/// the kernel faults in and zeroes page by page; with a low threshold that
/// was a quarter of the server's CPU when moving files in 1 MiB chunks. So
/// buffers up to [`HEAP_BUFFERS_UP_TO`] come from the heap. Memory freed
/// there would stay resident, so a thread hands it back (`malloc_trim`) once
/// no large buffer was used for a second ([`note_large_buffer`]) and more
/// than [`IDLE_FREE_LIMIT`] sits free (checked once after the start and
/// once after each flow of large buffers); trimming while messages flow would
/// bring the page faults back. One arena per thread would multiply all this;
/// two are allowed. The server and worker call this at start.
///
/// A host program that moves large payloads should call it first thing in
/// `main` too: the library sets no process-wide knob on its own, and with
/// glibc's defaults the host faulted in every megabyte it received (1 MiB
/// echo 235–308 against 437–561 MB/s, host RSS 50–77 against 10–43 MiB,
/// four alternating runs).
pub fn tune_allocator() {
    // SAFETY: mallopt only adjusts allocator parameters.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, HEAP_BUFFERS_UP_TO as libc::c_int);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_ON_FREE_PAST as libc::c_int);
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
    let trimmer = std::thread::Builder::new()
        .name("agentix-trim".into())
        .spawn(|| {
            let mut seen = LARGE_BUFFERS.load(Ordering::Relaxed);
            // Counted up to here when last checked; `None`: the start's own
            // garbage is checked once.
            let mut checked: Option<u64> = None;
            loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
                let now = LARGE_BUFFERS.load(Ordering::Relaxed);
                let quiet = now == seen;
                seen = now;
                // Checked once per flow, not every idle second: the check
                // walks every free chunk, and in a fleet of busy sandboxes
                // doing so each second was 2% of the machine's CPU.
                if !quiet || checked == Some(now) {
                    continue;
                }
                checked = Some(now);
                // SAFETY: both only inspect or release the allocator's free
                // memory.
                unsafe {
                    if libc::mallinfo2().fordblks > IDLE_FREE_LIMIT {
                        libc::malloc_trim(0);
                    }
                }
            }
        });
    if let Err(e) = trimmer {
        tracing::debug!("no allocator trimming thread: {e}");
    }
}

/// The variable glibc reads its tunables from, once, when a process starts.
pub const ENV_GLIBC_TUNABLES: &str = "GLIBC_TUNABLES";

/// The tunables that back glibc's large allocations with transparent huge
/// pages (`madvise` mode, the kernel's default): a fresh 64 MiB buffer is
/// then 32 faults instead of 16,384, which on a virtual machine was most of
/// the time a 64 MiB call spent (a fresh 64 MiB copy 33–45 ms against
/// 7–13 ms). Only a process started with them has them, which is why the
/// server starts its worker so ([`ENV_TUNABLES_ADDED`]) and a host moving
/// large payloads is started with `GLIBC_TUNABLES=glibc.malloc.hugetlb=1`.
pub const HUGE_PAGE_TUNABLES: &str = "glibc.malloc.hugetlb=1";

/// Set beside [`ENV_GLIBC_TUNABLES`] when the server added it for its
/// worker, which then takes both out of its environment (see
/// [`take_added_tunables`]): sandbox code inherits neither.
pub const ENV_TUNABLES_ADDED: &str = "AGENTIX_TUNABLES_ADDED";

/// Removes the tunables the server added ([`ENV_TUNABLES_ADDED`]) from this
/// process's environment, so that the processes it starts do not inherit
/// them; glibc read them at start already. Call it before starting threads
/// that read the environment.
pub fn take_added_tunables() {
    if std::env::var_os(ENV_TUNABLES_ADDED).is_some() {
        std::env::remove_var(ENV_GLIBC_TUNABLES);
        std::env::remove_var(ENV_TUNABLES_ADDED);
    }
}

static LARGE_BUFFERS: AtomicU64 = AtomicU64::new(0);

/// Buffers from this size on are large for [`note_large_buffer`].
pub const LARGE_BUFFER: usize = 256 << 10;

/// Records that a large buffer (a big frame or message) was just used, so
/// the allocator's free memory is not handed back in the middle of a flow.
pub fn note_large_buffer() {
    LARGE_BUFFERS.fetch_add(1, Ordering::Relaxed);
}

/// Largest allocation served from the heap rather than its own mapping
/// (glibc's own ceiling for the threshold).
pub const HEAP_BUFFERS_UP_TO: usize = 32 << 20;

/// Free memory at the heap's top past which `free` itself trims. A flow of
/// 1 MiB messages needs a few MiB at the top: with 512 KiB every message
/// was handed back and faulted in again (1 MiB echo 245 against 335 MB/s,
/// files 480 against 690–870 MB/s, one run). Higher still (64 MiB) keeps
/// memory the idle trimming cannot give back, since `malloc_trim` leaves
/// the top of a second arena alone (the worker kept 25 MiB after a 64 MiB
/// echo); one arena avoids that but cost a fifth of the 64-calls figure.
const TRIM_ON_FREE_PAST: usize = 4 << 20;

/// Free heap memory past which the trimming thread gives it back.
pub const IDLE_FREE_LIMIT: usize = 1 << 20;

/// "exit status 3" or "killed by signal 9 (SIGKILL)", for error messages.
pub fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return format!("exit status {code}");
    }
    let Some(sig) = status.signal() else {
        return "unknown exit".to_owned();
    };
    let name = match sig {
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGABRT => "SIGABRT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGINT => "SIGINT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGPIPE => "SIGPIPE",
        _ => "signal",
    };
    format!("killed by signal {sig} ({name})")
}

/// Whether `pid` still runs (a zombie counts as gone).
pub fn is_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state letter follows the parenthesised command name.
        Ok(stat) => match stat.rsplit_once(')') {
            Some((_, rest)) => !matches!(rest.trim_start().chars().next(), Some('Z' | 'X')),
            None => true,
        },
        Err(_) => false,
    }
}

/// The first child of `pid` (for a process known to have one: an isolated
/// sandbox's keeper and its server), from `/proc/<pid>/task/<pid>/children`.
pub fn first_child(pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// Environment variable that marks every process a sandbox started: the
/// worker gets `w<worker id>`, each command it runs `<that>.<n>`, and what
/// a command forks, backgrounds, pipes or `setsid`s into inherits it. A
/// process group or a parent-death signal cannot follow a `setsid` or a
/// double fork; the environment can.
pub const ENV_PROCESS_TAG: &str = "AGENTIX_PROCESS_TAG";

/// A fresh tag for a child of this process, under this process's own tag
/// (or its pid, outside a sandbox).
pub fn child_tag() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let own = std::env::var(ENV_PROCESS_TAG).unwrap_or_else(|_| format!("p{}", std::process::id()));
    format!("{own}.{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// SIGKILLs every process (but this one) whose environment holds the tag
/// `tag` or one under it (`tag.` followed by more), found by walking
/// `/proc`; repeats while it finds some, since they may fork meanwhile.
/// Returns how many it killed.
pub fn kill_tagged(tag: &str) -> usize {
    let mut killed = 0;
    for _ in 0..5 {
        let found = tagged(tag);
        if found.is_empty() {
            break;
        }
        for &pid in &found {
            // SAFETY: kill(2) with a pid read from /proc; no memory involved.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        killed += found.len();
        // Let the killed go (and their children show) before looking again.
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    killed
}

/// SIGSTOPs every process (but this one) under the tag `tag` (see
/// [`kill_tagged`]), looking again until a look finds none still running:
/// a stopped process forks no more, so what one forked meanwhile shows on
/// the next look. Returns how many are stopped.
pub fn stop_tagged(tag: &str) -> usize {
    for _ in 0..50 {
        let running: Vec<u32> = tagged(tag)
            .into_iter()
            .filter(|&pid| !is_stopped(pid))
            .collect();
        if running.is_empty() {
            break;
        }
        for pid in running {
            // SAFETY: kill(2) with a pid read from /proc; no memory involved.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
        }
        // Let the signals land (a stop is not instant) before looking again.
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    tagged(tag).len()
}

/// SIGCONTs every process (but this one) under the tag `tag`: what
/// [`stop_tagged`] stopped. Returns how many it signalled.
pub fn continue_tagged(tag: &str) -> usize {
    let found = tagged(tag);
    for &pid in &found {
        // SAFETY: kill(2) with a pid read from /proc; no memory involved.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGCONT) };
    }
    found.len()
}

/// Whether `pid` is stopped (by a signal, or a tracer): `T` or `t` in its
/// `/proc/<pid>/stat`.
pub fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // The state follows the command's closing parenthesis (the
            // command itself may hold any character).
            let (_, rest) = stat.rsplit_once(')')?;
            rest.split_whitespace().next().map(|s| s == "T" || s == "t")
        })
        .unwrap_or(false)
}

/// The processes (but this one) whose environment holds the tag `tag` or
/// one under it, by a walk of `/proc`.
fn tagged(tag: &str) -> Vec<u32> {
    let own = std::process::id();
    let exact = format!("{ENV_PROCESS_TAG}={tag}");
    let under = format!("{exact}.");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != own)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                environ
                    .split(|&b| b == 0)
                    .any(|var| var == exact.as_bytes() || var.starts_with(under.as_bytes()))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_that_name_a_group_of_ours_or_everyone_signal_nobody() {
        // Each of these would stop this very test process (or every
        // process) if it reached kill(2).
        signal_group(0, libc::SIGSTOP);
        signal_group(1, libc::SIGSTOP);
        signal_group(u32::MAX, libc::SIGSTOP);
        signal_pid(0, libc::SIGSTOP);
        signal_pid(u32::MAX, libc::SIGSTOP);
    }

    #[test]
    fn tagged_processes_stop_and_continue_children_and_all() {
        let tag = format!("t{}.stop-test", std::process::id());
        // A shell that forks a child of its own, both under the tag.
        let mut shell = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .env(ENV_PROCESS_TAG, format!("{tag}.1"))
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        while tagged(&tag).len() < 2 {
            assert!(started.elapsed().as_secs() < 10, "the child did not start");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(stop_tagged(&tag), 2);
        assert!(tagged(&tag).iter().all(|&pid| is_stopped(pid)));
        assert!(!is_stopped(std::process::id()));
        assert_eq!(continue_tagged(&tag), 2);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(tagged(&tag).iter().all(|&pid| !is_stopped(pid)));
        assert_eq!(kill_tagged(&tag), 2);
        let _ = shell.wait();
        assert!(tagged(&tag).is_empty());
    }

    #[test]
    fn this_process_is_alive_and_a_reaped_child_is_not() {
        assert!(is_alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!is_alive(pid));
    }
}
