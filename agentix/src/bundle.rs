//! The bundle binary's entry point: one binary is server and worker alike.
//!
//! A bundle is the user's binary linking their remote functions. Run as
//! `serve` it is the generic Agentix server, which starts the same binary as
//! `worker` to run the calls. A program can also be host and bundle at once
//! by calling [`dispatch`] first thing in `main`, before any async runtime.

use std::ffi::OsString;

use agentix_wire::isolation_spec::ISOLATE_ROLE;
use agentix_wire::launch_spec::{LaunchSpec, LAUNCH_ROLE};

/// Runs the bundle: `serve [server flags]` or `worker`; exits the process.
pub fn main() -> ! {
    main_with(|| {})
}

/// Like [`main`], running `worker_setup` in every worker before it takes
/// calls: the place to register plugin namespaces, which a restarted worker
/// then registers again.
pub fn main_with(worker_setup: fn()) -> ! {
    dispatch_with(worker_setup);
    eprintln!(
        "usage: {} serve [--host ADDR] [--port N] | worker\n\
         (a bundle binary is started by an Agentix provider)",
        std::env::args().next().unwrap_or_else(|| "bundle".into())
    );
    std::process::exit(2)
}

/// If this process was started as `serve`, `worker`, `isolate` (the
/// server in namespaces of its own), `relay` (stdio to the server's
/// socket), `install` (the bundle copied into a directory) or `launch`
/// (a local server's first steps, then one of those), runs that role and
/// exits; otherwise returns so the program can go on as a host.
pub fn dispatch() {
    dispatch_with(|| {})
}

/// Like [`dispatch`], running `worker_setup` in every worker before it
/// takes calls.
pub fn dispatch_with(worker_setup: fn()) {
    dispatch_args(worker_setup, std::env::args_os().skip(1).collect());
}

/// Runs the role `args` name (the command line after the program), if it
/// is one; returns otherwise.
fn dispatch_args(worker_setup: fn(), args: Vec<OsString>) {
    let mut args = args.into_iter();
    let role = args.next();
    match role.as_ref().and_then(|r| r.to_str()) {
        // A local server's first steps (see `launch_spec`), then its role.
        Some(LAUNCH_ROLE) => {
            let (spec, rest) = match LaunchSpec::from_args(args) {
                Ok(parsed) => parsed,
                Err(e) => {
                    eprintln!("agentix launch: {e}");
                    std::process::exit(2)
                }
            };
            if let Err(e) = spec.take_steps() {
                eprintln!("agentix launch: {e}");
                std::process::exit(1)
            }
            dispatch_args(worker_setup, rest);
            // Never on as a host, with the host's rights given away.
            eprintln!("agentix launch: no bundle role after `--`");
            std::process::exit(2)
        }
        Some("serve") => {
            // First, before any thread: as PID 1, the server is the init's
            // child from here on.
            agentix_server::init_process::become_init_if_pid_one();
            // Before the token is read: sandbox code runs as this user. (A
            // worker's run does the same for itself.)
            if let Err(e) = agentix_wire::process::hide_memory() {
                eprintln!("agentix bundle: cannot keep its memory private: {e}");
                std::process::exit(1);
            }
            let rest: Vec<OsString> = args.collect();
            std::process::exit(serve(rest))
        }
        Some(WORKER_ROLE) => std::process::exit(agentix_worker::worker::run_with(worker_setup)),
        Some(ISOLATE_ROLE) => {
            // The sandbox's first process runs the role after `--` itself.
            let run_role = move |command: Vec<OsString>| {
                dispatch_args(worker_setup, command);
                eprintln!("agentix isolate: no bundle role after `--`");
                2
            };
            std::process::exit(agentix_server::isolation::run(args.collect(), run_role))
        }
        Some(RELAY_ROLE) => std::process::exit(agentix_server::stdio_relay::run(args.collect())),
        Some(INSTALL_ROLE) => std::process::exit(install(args.collect())),
        _ => {}
    }
}

/// The role a sandbox's server starts its worker in.
pub const WORKER_ROLE: &str = "worker";

/// Whether `role`, a bundle's first argument, is one a sandbox starts the
/// bundle in by itself (its worker, its isolation and launch steps): a
/// binary with a command line of its own hands these to [`dispatch_with`]
/// before parsing its arguments.
pub fn is_sandbox_role(role: &str) -> bool {
    [WORKER_ROLE, ISOLATE_ROLE, LAUNCH_ROLE].contains(&role)
}

/// The role that joins stdio to the server's socket, for a host that
/// reaches a container only through its engine (`agentix_server::stdio_relay`).
pub const RELAY_ROLE: &str = "relay";

/// The role that copies a bundle into a directory (`BUNDLE install FROM
/// TO`): how a Kubernetes pod's init container, running the bundle's image
/// (which holds nothing else, not even `cp`), fills the volume the
/// sandbox's server then runs from.
pub const INSTALL_ROLE: &str = "install";

/// Copies the bundle directory `FROM` into the directory `TO` (made if
/// missing): files with their modes, directories, links.
fn install(args: Vec<OsString>) -> i32 {
    let [from, to] = args.as_slice() else {
        eprintln!("usage: BUNDLE install FROM TO");
        return 2;
    };
    let (from, to) = (std::path::Path::new(from), std::path::Path::new(to));
    let copied = std::fs::create_dir_all(to)
        .and_then(|()| agentix_host::tree_copy::copy_tree(from, to, &[], None));
    match copied {
        Ok(bytes) => {
            println!(
                "agentix install: {bytes} bytes from {} to {}",
                from.display(),
                to.display()
            );
            0
        }
        Err(e) => {
            eprintln!(
                "agentix install: cannot copy {} to {}: {e}",
                from.display(),
                to.display()
            );
            1
        }
    }
}

/// The running program's own binary, as the kernel names it.
const SELF_EXE: &str = "/proc/self/exe";

fn serve(args: Vec<OsString>) -> i32 {
    // The running binary itself, not its path: a sandbox of a root host
    // runs as a uid that may not reach the path, and a rebuilt binary may
    // have replaced the file since.
    let exe = std::path::PathBuf::from(SELF_EXE);
    if let Err(e) = std::fs::metadata(&exe) {
        eprintln!("agentix bundle: cannot locate its own binary ({SELF_EXE}): {e}");
        return 1;
    }
    let mut config = match agentix_server::ServerConfig::from_args(args) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("agentix bundle serve: {e}");
            return 2;
        }
    };
    config.worker_command = vec![exe.into_os_string(), WORKER_ROLE.into()];
    agentix_server::run(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_roles_a_sandbox_starts_by_itself_are_told_from_commands() {
        for role in [WORKER_ROLE, ISOLATE_ROLE, LAUNCH_ROLE] {
            assert!(is_sandbox_role(role), "{role}");
        }
        // `serve` and `relay` are asked for by a host, `install` by a pod's
        // init container; the rest are a command line's own words.
        for other in ["serve", RELAY_ROLE, INSTALL_ROLE, "call", "", "Worker"] {
            assert!(!is_sandbox_role(other), "{other}");
        }
    }
}
