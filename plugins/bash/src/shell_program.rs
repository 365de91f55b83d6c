//! Which program runs a command when the caller names none: bash, found
//! so that it runs in a sandbox whose `PATH` names only host directories
//! it cannot see, else `/bin/sh`.

use std::path::Path;
use std::sync::OnceLock;

/// `bash` if this system has it, else `/bin/sh`.
pub(crate) fn default_shell() -> &'static str {
    bash_program().unwrap_or("/bin/sh")
}

/// How to run bash here: by name when `PATH` has it, else `/bin/bash` (a
/// sandbox's `PATH` may name host directories it cannot see), else none.
pub(crate) fn bash_program() -> Option<&'static str> {
    static BASH: OnceLock<Option<&'static str>> = OnceLock::new();
    *BASH.get_or_init(|| {
        let on_path = std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("bash").is_file()));
        if on_path {
            Some("bash")
        } else if Path::new("/bin/bash").is_file() {
            Some("/bin/bash")
        } else {
            None
        }
    })
}
