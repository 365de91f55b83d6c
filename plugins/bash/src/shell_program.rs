//! Which program runs a command when the caller names none: bash, found
//! so that it runs in a sandbox whose `PATH` names only host directories
//! it cannot see, else `/bin/sh`.

use std::path::Path;
use std::sync::OnceLock;

/// `bash` if this system has it, else `/bin/sh`.
pub(crate) fn default_shell() -> &'static str {
    bash_program().unwrap_or("/bin/sh")
}

/// How to run bash here: the first `bash` on `PATH`, else `/bin/bash` (a
/// sandbox's `PATH` may name host directories it cannot see), else none.
/// A full path, found once: a name would have every start try each `PATH`
/// directory before bash's (one failed `execve` each).
pub(crate) fn bash_program() -> Option<&'static str> {
    static BASH: OnceLock<Option<String>> = OnceLock::new();
    BASH.get_or_init(|| {
        let on_path = std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .filter(|dir| dir.is_absolute())
                .map(|dir| dir.join("bash"))
                .find(|bash| bash.is_file())
        });
        match on_path {
            Some(bash) => bash.to_str().map(str::to_owned),
            None => Path::new("/bin/bash")
                .is_file()
                .then(|| "/bin/bash".to_owned()),
        }
    })
    .as_deref()
}
