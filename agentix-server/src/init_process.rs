//! [`become_init_if_pid_one`]: a server that starts as PID 1 (in a
//! container, or in the isolated tier's PID namespace) splits in two, so
//! that processes orphaned by sandbox code are reaped.
//!
//! The kernel hands every orphan of a PID namespace to its PID 1. A server
//! that is PID 1 would leave them as zombies, each holding a slot of the
//! sandbox's process limit until none is left: an agent's `cmd &` whose
//! shell exits first is enough. So PID 1 stays a small init, forked before
//! any thread exists: it reaps every child, passes the stop signals on to
//! the server, and exits as the server did. The server, its child, goes on
//! as before, and everything below it is unchanged.
//!
//! Written here with `nix` rather than taken from a PID 1 crate: those
//! relaunch the program by the path of its binary, which an isolated
//! sandbox does not see, and kill the child after a fixed grace period
//! that a server draining long calls must not be held to.

use nix::sys::signal::{kill, SigSet, SigmaskHow, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};

/// The signals PID 1 passes on to the server: those that stop it.
const PASSED_ON: [Signal; 4] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

/// When this process is PID 1, forks: the parent becomes the init and
/// never returns; the child returns and goes on as the server. Otherwise
/// returns at once. Call before any thread is started.
pub fn become_init_if_pid_one() {
    if std::process::id() != 1 {
        return;
    }
    let mut waited = SigSet::empty();
    waited.add(Signal::SIGCHLD);
    for signal in PASSED_ON {
        waited.add(signal);
    }
    // Blocked before the fork, so that no signal arrives between the two
    // halves' setups; a blocked signal reaches even a namespace's init.
    let Ok(before) = waited.thread_swap_mask(SigmaskHow::SIG_BLOCK) else {
        return;
    };
    // SAFETY: no other thread exists yet, so the child may run anything.
    match unsafe { fork() } {
        Ok(ForkResult::Parent { child }) => std::process::exit(init(child, &waited)),
        Ok(ForkResult::Child) => {
            let _ = before.thread_set_mask();
            // The init is gone only if the namespace is: go with it.
            let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
        }
        Err(e) => {
            let _ = before.thread_set_mask();
            eprintln!(
                "agentix server: cannot fork an init to reap orphans ({e}); serving as PID 1"
            );
        }
    }
}

/// PID 1's loop: reaps every child, passes stop signals on to `server`,
/// and returns the server's exit status once it has ended.
fn init(server: Pid, waited: &SigSet) -> i32 {
    loop {
        match waited.wait() {
            Ok(Signal::SIGCHLD) => {
                if let Some(status) = reap(server) {
                    return status;
                }
            }
            Ok(signal) => {
                let _ = kill(server, signal);
            }
            Err(_) => {}
        }
    }
}

/// Reaps every child that has ended (signals of several coalesce into
/// one); the server's exit status if it was one of them.
fn reap(server: Pid) -> Option<i32> {
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) if pid == server => return Some(code),
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == server => {
                return Some(128 + signal as i32)
            }
            Ok(WaitStatus::StillAlive) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}
