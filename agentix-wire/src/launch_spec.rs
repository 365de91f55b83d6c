//! [`LaunchSpec`]: the first steps of a local server's first process,
//! taken by that process itself right after its exec, as the command line
//! between the host that starts it and the bundle that takes them.
//!
//! The host starts a local server with `posix_spawn` (a `vfork` that shares
//! the host's memory until the exec) instead of a `fork`, which copied the
//! host's page tables and made every page it wrote afterwards a private
//! copy: from a host with 1 GiB touched, 55 ms per start against 1.5 ms.
//! `posix_spawn` runs no code of ours between fork and exec, so what ran
//! there runs here, before anything else of the bundle: joining the
//! sandbox's cgroups, dropping to the sandbox's uid, and tying the process
//! to the host's life (`bundle launch <flags> -- isolate|serve ...`).
//!
//! Until the uid drop the process has the host's rights, as the forked
//! child had; nothing of the sandbox's has run by then, and nothing in the
//! sandbox's directory is read.

use std::ffi::OsString;
use std::io;
use std::path::PathBuf;

use crate::command_flags::read_flags;

/// The bundle role that takes these steps, then runs the rest of the
/// command line as the bundle's role.
pub const LAUNCH_ROLE: &str = "launch";

/// The steps, in the order they are taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchSpec {
    /// Files that move the writer into a cgroup when it writes `0` (a v1
    /// hierarchy's `tasks`, a v2 `cgroup.procs`); written while the process
    /// has one thread and its starter's privileges.
    pub cgroup_files: Vec<PathBuf>,
    /// The uid (and gid) to run as from then on, all supplementary groups
    /// dropped.
    pub user: Option<u32>,
    /// The process that started this one: if its parent is another by the
    /// time the death signal is set (the host died in between), it leaves.
    pub parent: u32,
    /// The signal it gets when the thread that started it exits.
    pub death_signal: i32,
}

impl LaunchSpec {
    /// The flags that say this spec, for the command line (up to, not
    /// including, the `--`).
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        for file in &self.cgroup_files {
            args.push("--cgroup-file".into());
            args.push(file.as_os_str().to_owned());
        }
        if let Some(uid) = self.user {
            args.push("--user".into());
            args.push(uid.to_string().into());
        }
        args.push("--parent".into());
        args.push(self.parent.to_string().into());
        args.push("--death-signal".into());
        args.push(self.death_signal.to_string().into());
        args
    }

    /// Reads the flags [`to_args`](Self::to_args) wrote, up to `--`;
    /// returns the spec and the command line after `--`.
    pub fn from_args(
        args: impl IntoIterator<Item = OsString>,
    ) -> Result<(LaunchSpec, Vec<OsString>), String> {
        let mut cgroup_files = Vec::new();
        let (mut user, mut parent, mut death_signal) = (None, None, None);
        let rest = read_flags(args, &[], |flag| {
            match flag.name.as_str() {
                "--cgroup-file" => cgroup_files.push(PathBuf::from(flag.value())),
                "--user" => user = Some(flag.number()?),
                "--parent" => parent = Some(flag.number()?),
                "--death-signal" => death_signal = Some(flag.number()?),
                other => return Err(format!("unknown flag {other}")),
            }
            Ok(())
        })?;
        let spec = LaunchSpec {
            cgroup_files,
            user,
            parent: parent.ok_or("--parent is missing")?,
            death_signal: death_signal.ok_or("--death-signal is missing")?,
        };
        Ok((spec, rest))
    }

    /// Takes the steps in this process. Call it first thing, while the
    /// process has one thread: a cgroup v1 `tasks` file moves the writing
    /// thread alone. Does not return if the parent is already gone.
    pub fn take_steps(&self) -> io::Result<()> {
        for file in &self.cgroup_files {
            std::fs::write(file, b"0").map_err(|e| {
                io::Error::new(e.kind(), format!("cannot join {}: {e}", file.display()))
            })?;
        }
        if let Some(uid) = self.user {
            become_user(uid)?;
        }
        // After the uid change, which clears the death signal.
        crate::process::child_setup(self.parent as libc::pid_t, self.death_signal)
    }
}

/// Drops every supplementary group, then sets the gid and the uid to
/// `uid`, as a privileged parent does between fork and exec; then makes
/// the process dumpable again, as an exec by that user would have left it
/// (the kernel clears it on a uid change, which would leave `/proc/self`
/// to root and the isolated launcher unable to write its own id maps).
fn become_user(uid: u32) -> io::Result<()> {
    let check = |r: libc::c_int, what: &str| {
        if r == 0 {
            Ok(())
        } else {
            let e = io::Error::last_os_error();
            Err(io::Error::new(e.kind(), format!("cannot {what}: {e}")))
        }
    };
    // SAFETY: plain system calls with integer arguments (and no list for
    // setgroups).
    unsafe {
        if libc::getuid() == 0 {
            check(libc::setgroups(0, std::ptr::null()), "drop its groups")?;
        }
        check(libc::setresgid(uid, uid, uid), "set its gid")?;
        check(libc::setresuid(uid, uid, uid), "set its uid")?;
        check(
            libc::prctl(libc::PR_SET_DUMPABLE, 1 as libc::c_ulong, 0, 0, 0),
            "become dumpable",
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_reads_back_as_written_with_the_command_after_it() {
        let spec = LaunchSpec {
            cgroup_files: vec!["/sys/fs/cgroup/pids/agentix-1/tasks".into()],
            user: Some(61_234),
            parent: 4321,
            death_signal: libc::SIGTERM,
        };
        let mut args = spec.to_args();
        args.extend(["--".into(), "serve".into(), "--port".into()]);
        let (read, rest) = LaunchSpec::from_args(args).unwrap();
        assert_eq!(read, spec);
        assert_eq!(rest, vec![OsString::from("serve"), "--port".into()]);
    }

    #[test]
    fn bad_flags_are_named() {
        let err = LaunchSpec::from_args(["--user".into(), "-1".into(), "--".into()]).unwrap_err();
        assert!(err.contains("--user needs a number"), "{err}");
        let err = LaunchSpec::from_args(["--bogus".into(), "1".into()]).unwrap_err();
        assert!(err.contains("unknown flag --bogus"), "{err}");
        let err =
            LaunchSpec::from_args(["--death-signal".into(), "15".into(), "--".into()]).unwrap_err();
        assert!(err.contains("--parent is missing"), "{err}");
        let err = LaunchSpec::from_args(["--parent".into(), "1".into()]).unwrap_err();
        assert!(err.contains("no `--`"), "{err}");
    }
}
