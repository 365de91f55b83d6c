//! [`IsolationSpec`]: what an isolated local sandbox may see and use, as the
//! command line between the host that asks for it and the bundle's launcher
//! that builds it.
//!
//! The host writes it (`bundle isolate <flags> -- serve ...`), the launcher
//! in the bundle reads it back; both sides share this one encoding so a
//! flag cannot mean one thing to one side and another to the other.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use crate::command_flags::read_flags;

/// The bundle role that runs the rest of the command line isolated.
pub const ISOLATE_ROLE: &str = "isolate";

/// The launcher's exit status when the kernel refuses the isolation (no
/// unprivileged user namespaces, say): the host reports it as such.
pub const ISOLATION_REFUSED_EXIT: i32 = 126;

/// Everything the launcher needs to build one sandbox's namespaces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IsolationSpec {
    /// Host directories the sandbox may write, at the same path inside.
    pub writable: Vec<PathBuf>,
    /// Host paths the sandbox may read and run, at the same path inside.
    pub read_only: Vec<PathBuf>,
    /// The sandbox's host name.
    pub hostname: String,
    /// Keep the host's network namespace instead of one with only `lo`.
    pub host_network: bool,
    /// Size of the sandbox's own `/tmp`, in bytes.
    pub tmp_bytes: u64,
    /// Most processes (and threads) the sandbox's user may have, by rlimit.
    pub processes: Option<u64>,
    /// Most data memory each sandbox process may map, by rlimit.
    pub memory_bytes: Option<u64>,
    /// Directories the launcher removes once the sandbox has exited.
    pub remove_after: Vec<PathBuf>,
    /// Where the launcher stages the sandbox's root when it can: a
    /// directory it makes, on a memory filesystem, and removes after. The
    /// host names it, so that it can remove it when the launcher could not
    /// (the launcher killed); without it, or where it cannot be made, the
    /// root is staged in the temp directory.
    pub staging_root: Option<PathBuf>,
}

impl IsolationSpec {
    /// The flags that say this spec, for the launcher's command line.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let mut flag = |name: &str, value: &OsStr| {
            args.push(name.into());
            args.push(value.to_owned());
        };
        for dir in &self.writable {
            flag("--writable", dir.as_os_str());
        }
        for path in &self.read_only {
            flag("--read-only", path.as_os_str());
        }
        for dir in &self.remove_after {
            flag("--remove-after", dir.as_os_str());
        }
        if let Some(dir) = &self.staging_root {
            flag("--staging-root", dir.as_os_str());
        }
        flag("--hostname", OsStr::new(&self.hostname));
        flag("--tmp-bytes", OsStr::new(&self.tmp_bytes.to_string()));
        if let Some(n) = self.processes {
            flag("--processes", OsStr::new(&n.to_string()));
        }
        if let Some(n) = self.memory_bytes {
            flag("--memory-bytes", OsStr::new(&n.to_string()));
        }
        if self.host_network {
            args.push("--host-network".into());
        }
        args
    }

    /// Reads the flags [`to_args`](Self::to_args) wrote, up to `--`; returns
    /// the spec and the command line after `--`.
    pub fn from_args(
        args: impl IntoIterator<Item = OsString>,
    ) -> Result<(IsolationSpec, Vec<OsString>), String> {
        let mut spec = IsolationSpec::default();
        let rest = read_flags(args, &["--host-network"], |flag| {
            match flag.name.as_str() {
                "--host-network" => spec.host_network = true,
                "--writable" => spec.writable.push(flag.value().into()),
                "--read-only" => spec.read_only.push(flag.value().into()),
                "--remove-after" => spec.remove_after.push(flag.value().into()),
                "--staging-root" => spec.staging_root = Some(flag.value().into()),
                "--hostname" => spec.hostname = flag.value().to_string_lossy().into_owned(),
                "--tmp-bytes" => spec.tmp_bytes = flag.number()?,
                "--processes" => spec.processes = Some(flag.number()?),
                "--memory-bytes" => spec.memory_bytes = Some(flag.number()?),
                other => return Err(format!("unknown flag {other}")),
            }
            Ok(())
        })?;
        Ok((spec, rest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_reads_back_as_written_with_the_command_after_it() {
        let spec = IsolationSpec {
            writable: vec!["/tmp/agentix-1".into()],
            read_only: vec!["/data set".into(), "/opt/tools".into()],
            hostname: "agentix-1".into(),
            host_network: true,
            tmp_bytes: 1 << 30,
            processes: Some(512),
            memory_bytes: None,
            remove_after: vec!["/tmp/agentix-1".into()],
            staging_root: Some("/dev/shm/agentix-1-root".into()),
        };
        let mut args = spec.to_args();
        args.extend(["--".into(), "serve".into(), "--port".into()]);
        let (read, rest) = IsolationSpec::from_args(args).unwrap();
        assert_eq!(read, spec);
        assert_eq!(rest, vec![OsString::from("serve"), "--port".into()]);
    }

    #[test]
    fn bad_flags_are_named() {
        let err = IsolationSpec::from_args(["--processes".into(), "many".into()]).unwrap_err();
        assert!(err.contains("--processes needs a number"), "{err}");
        let err = IsolationSpec::from_args(["--bogus".into(), "1".into()]).unwrap_err();
        assert!(err.contains("unknown flag --bogus"), "{err}");
        let err = IsolationSpec::from_args(["--host-network".into()]).unwrap_err();
        assert!(err.contains("no `--`"), "{err}");
    }
}
