//! The environment every shell starts with: the worker's, less the
//! runtime's own variables, plus a process tag of its own.

use tokio::process::Command;

/// Variables that start with this belong to the runtime (the sandbox token
/// among them) and are not passed on to commands.
const RUNTIME_ENV_PREFIX: &str = "AGENTIX_";

/// Removes the runtime's variables from what `cmd` inherits and gives it a
/// fresh process tag (which everything it starts inherits, so all of it
/// can be found and killed); returns the tag.
pub(crate) fn prepare(cmd: &mut Command) -> String {
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with(RUNTIME_ENV_PREFIX) {
            cmd.env_remove(key);
        }
    }
    let tag = agentix::process::child_tag();
    cmd.env(agentix::process::ENV_PROCESS_TAG, &tag);
    tag
}
