//! The isolated launcher: `bundle isolate <flags> -- serve ...` runs the
//! server, and so every worker and all sandbox code, in namespaces of its
//! own.
//!
//! What the sandbox gets (see [`IsolationSpec`]): its own user, mount, PID,
//! IPC, UTS and network namespaces; the host's system directories (`/bin`,
//! `/etc`, `/lib*`, `/sbin`, `/usr`) read-only and nothing else of the
//! host's filesystem but the directories the spec names; a `/dev` with only
//! the harmless devices; a `/tmp` of its own with a size; a `/proc` that
//! shows its own processes only; a network with only `lo`, brought up; and
//! rlimits when the host gave it no cgroup. The sandbox runs as the uid the
//! launcher was started as, mapped to itself, with `no_new_privs` set, and
//! under a seccomp filter that refuses the kernel interfaces exploits start
//! from ([`crate::syscall_filter`]).
//!
//! The process tree: this launcher (in the host's namespaces, the host's
//! child) → the container's keeper (new user namespace; waits) → the server
//! (PID 1 of the new PID namespace) → its worker and sandbox code. Whoever
//! kills the launcher kills all of it (each step dies with its parent); a
//! SIGTERM, SIGINT or SIGHUP to the launcher goes to the server, which
//! shuts down gracefully, and the launcher then exits as the server did and
//! removes the directories it was told to.
//!
//! The new root is staged on a memory filesystem where the machine has one
//! ([`crate::staging_root`]).
//!
//! The namespaces and mounts are built by `hakoniwa`, a maintained crate
//! doing `unshare`, id maps, `pivot_root` and the read-only remounts the way
//! bubblewrap does, rather than by syscalls written here.

use std::ffi::OsString;

use agentix_wire::isolation_spec::{IsolationSpec, ISOLATION_REFUSED_EXIT};
use hakoniwa::{Container, MountOptions, Namespace, Rlimit, Runctl};
use nix::sys::signal::{self, SigSet, Signal};
use nix::unistd::Pid;

use crate::staging_root::StagingRoot;

/// Runs `args` (the spec's flags, `--`, then the bundle's own arguments)
/// isolated; returns the exit status to leave with.
///
/// `run_role` runs the bundle's arguments (`serve ...`) as the sandbox's
/// first process, inside every namespace and under the filter, and returns
/// its exit status. That process is a fork of this single-threaded one, so
/// the role may start threads; it runs there rather than in a fresh exec
/// of the bundle, which was about a millisecond of CPU, a fifteenth of an
/// isolated start.
pub fn run(
    args: Vec<OsString>,
    run_role: impl Fn(Vec<OsString>) -> i32 + Send + Sync + 'static,
) -> i32 {
    let (spec, command) = match IsolationSpec::from_args(args) {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("agentix isolate: {e}");
            return 2;
        }
    };
    if command.is_empty() {
        eprintln!("agentix isolate: nothing to run after `--`");
        return 2;
    }
    // Blocked before the fork, so that a stop signal in the meantime waits
    // for the server instead of killing this process (and, with it, the
    // sandbox before it could clean up); the server's step unblocks them.
    let stops = stop_signals();
    if let Err(e) = stops.thread_block() {
        eprintln!("agentix isolate: cannot block stop signals: {e}");
        return 1;
    }
    let mut container = container_for(&spec);
    let staging = spec.staging_root.as_deref().and_then(StagingRoot::make);
    if let Some(root) = &staging {
        container.rootdir(root.path());
    }
    let host_network = spec.host_network;
    // SAFETY: this process is single-threaded here (the bundle's entry
    // point, before any runtime starts), so the forked child may allocate.
    let mut cmd = unsafe {
        container.command_from_closure(move || {
            start_server(host_network, stops, || run_role(command.clone()))
        })
    };
    cmd.envs(
        std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
    );
    if let Some(dir) = spec.writable.first() {
        cmd.current_dir(dir);
    }
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => return refused(&e.to_string()),
    };
    let keeper = Pid::from_raw(child.id() as i32);
    let remove_after = spec.remove_after.clone();
    std::thread::spawn(move || {
        let code = match child.wait() {
            Ok(status) => exit_code(&status),
            Err(e) => {
                eprintln!("agentix isolate: lost track of the sandbox: {e}");
                1
            }
        };
        if let Some(root) = staging {
            root.remove();
        }
        // A refusal leaves the directories, its log among them, for the
        // host to read why before it removes them.
        if code != ISOLATION_REFUSED_EXIT {
            for dir in &remove_after {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
        std::process::exit(code)
    });
    loop {
        match stops.wait() {
            Ok(stop) => forward(keeper, stop),
            Err(e) => {
                // A stop can no longer be handed on gracefully: stop now,
                // and let the waiting thread exit as the sandbox did.
                eprintln!("agentix isolate: cannot wait for signals: {e}");
                let _ = signal::kill(keeper, Signal::SIGKILL);
                loop {
                    std::thread::park();
                }
            }
        }
    }
}

/// The namespaces, mounts and limits `spec` asks for.
fn container_for(spec: &IsolationSpec) -> Container {
    // User, mount and PID namespaces (the launcher's uid mapped to itself)
    // and a /proc of the new PID namespace.
    let mut container = Container::new();
    container
        .unshare(Namespace::Ipc)
        .unshare(Namespace::Uts)
        .hostname(&spec.hostname)
        .devfsmount("/dev")
        .mount(
            "tmpfs",
            "/tmp",
            "tmpfs",
            MountOptions::NOSUID | MountOptions::NODEV,
            Some(format!("size={},mode=1777", spec.tmp_bytes)),
        )
        // A host whose /usr or /tmp carries nosuid or nodev keeps them on
        // the read-only remount instead of failing it.
        .runctl(Runctl::MountFallback);
    if !spec.host_network {
        container.unshare(Namespace::Network);
    }
    // The host's system directories only; none of its homes or checkouts.
    if let Err(e) = container.rootfs("/") {
        eprintln!("agentix isolate: cannot list the host's system directories: {e}");
    }
    for path in &spec.read_only {
        let path = path.to_string_lossy();
        container.bindmount_ro(&path, &path);
    }
    for dir in &spec.writable {
        let dir = dir.to_string_lossy();
        container.bindmount_rw(&dir, &dir);
    }
    if let Some(n) = spec.processes {
        container.setrlimit(Rlimit::Nproc, n, n);
    }
    if let Some(n) = spec.memory_bytes {
        container.setrlimit(Rlimit::Data, n, n);
    }
    container
}

/// The last step, inside every namespace: `lo` up, the system call filter,
/// then the server (`serve`).
fn start_server(host_network: bool, stops: SigSet, serve: impl FnOnce() -> i32) -> i32 {
    if !host_network {
        if let Err(e) = crate::loopback::bring_up_loopback() {
            eprintln!("agentix isolate: cannot bring up the sandbox's loopback interface: {e}");
            return ISOLATION_REFUSED_EXIT;
        }
    }
    let _ = stops.thread_unblock();
    if let Err(e) = crate::syscall_filter::deny_kernel_attack_surface() {
        eprintln!("agentix isolate: cannot filter the sandbox's system calls: {e}");
        return ISOLATION_REFUSED_EXIT;
    }
    serve()
}

/// The signals that stop the sandbox gracefully.
fn stop_signals() -> SigSet {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set.add(Signal::SIGHUP);
    set
}

/// Hands a stop signal to the server; kills the sandbox if there is no
/// server yet to hand it to (a stop is a stop).
fn forward(keeper: Pid, stop: Signal) {
    match agentix_wire::process::first_child(keeper.as_raw() as u32) {
        Some(server) => {
            let _ = signal::kill(Pid::from_raw(server as i32), stop);
        }
        None => {
            let _ = signal::kill(keeper, Signal::SIGKILL);
        }
    }
}

/// How this launcher exits, given how the sandbox did: the server's own
/// status, a signal raised again so the host sees it as such, or
/// [`ISOLATION_REFUSED_EXIT`] when the namespaces could not be made.
fn exit_code(status: &hakoniwa::ExitStatus) -> i32 {
    if let Some(code) = status.exit_code {
        return code;
    }
    if status.reason.contains("received signal") && status.code > 128 {
        if let Ok(sig) = Signal::try_from(status.code - 128) {
            // Die by the same signal: unblocked, default action.
            let mut set = SigSet::empty();
            set.add(sig);
            let _ = set.thread_unblock();
            // SAFETY: restoring the default action installs no handler.
            let _ = unsafe { signal::signal(sig, signal::SigHandler::SigDfl) };
            let _ = signal::raise(sig);
        }
        return status.code;
    }
    refused(&status.reason)
}

/// Says that the kernel refused the isolation and how to do without it.
fn refused(reason: &str) -> i32 {
    eprintln!(
        "agentix isolate: cannot isolate the sandbox: {reason}. Isolation needs \
         unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, \
         user.max_user_namespaces > 0, and no AppArmor rule refusing them); \
         SandboxConfig::isolation(Isolation::None) runs the sandbox as a plain \
         process tree instead (for trusted code only)"
    );
    ISOLATION_REFUSED_EXIT
}
