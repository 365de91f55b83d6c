//! Shells started ahead of time, so a command does not wait for bash to
//! start (about a millisecond, most of a short command's run).
//!
//! A warm shell is `bash -c ZYGOTE` in a process group of its own, with its
//! stdin, stdout and stderr already piped to the worker, blocked reading its
//! instructions from stdin. Handing it a command writes two NUL-terminated
//! strings there, a preamble (`cd` to the working directory, `export` of the
//! extra variables) and the command, which it then `eval`s: the same shell,
//! variables and exit status as `bash -c COMMAND`, minus the start-up.
//! Bash's `read` takes a pipe one byte at a time, so whatever follows the
//! instructions on stdin is left for the command: the caller's stdin bytes.
//! A warm shell left waiting exits when its stdin closes, which the worker
//! alone holds open: it ends with the worker. Once it runs a command it is
//! that command's shell, found and killed by its process tag like
//! everything the command starts. It has
//! the worker's environment as it was when the shell started. The
//! pool holds one shell after the first command (so a sandbox that never
//! runs one has none, and one that runs a single command, as many rollouts
//! do, started one spare shell rather than [`POOL`]); once a command has
//! taken a warm shell, it holds [`POOL`], topped up whenever a command
//! ends. A
//! command a warm shell cannot take as is (another shell, a variable name
//! that `export` would refuse, a very long script) starts a shell of its own.

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::io::AsyncWriteExt as _;
use tokio::process::{Child, Command};

use crate::options::BashOptions;

/// Warm shells kept ready once commands have used one.
const POOL: usize = 2;

/// Largest preamble plus command handed to a warm shell: `read` takes one
/// system call per byte, so a long script is cheaper as a fresh shell's
/// argument.
const MAX_SCRIPT: usize = 16 << 10;

/// What a warm shell runs: read the preamble and the command from stdin and
/// run them (an empty preamble, the worker gone, ends it). Its own
/// variables are gone before the command runs, and `BASH_EXECUTION_STRING`
/// is the command, as under `bash -c`.
const ZYGOTE: &str = "IFS= read -r -d '' __agentix_pre || exit 0; \
                      IFS= read -r -d '' __agentix_cmd || exit 0; \
                      eval \"$__agentix_pre\" || exit 126; \
                      BASH_EXECUTION_STRING=$__agentix_cmd; \
                      eval \"unset __agentix_pre __agentix_cmd; $__agentix_cmd\"";

/// One worker's warm shells and their process tags (each serves one
/// command), and the thread that starts more: kept in its
/// [`WorkerContext`](agentix::WorkerContext), so they end with it.
#[derive(Default)]
struct WarmShells {
    shells: Mutex<Vec<WarmShell>>,
    /// Whether a command has run in a warm shell: until then one is kept.
    used: AtomicBool,
    starter: OnceLock<Option<std::sync::mpsc::SyncSender<()>>>,
}

/// A shell waiting for its command.
struct WarmShell {
    child: Child,
    /// Its process tag.
    tag: String,
    /// The directory it started in (the worker's then): a command for that
    /// directory needs no `cd`.
    started_in: Option<String>,
}

impl WarmShells {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<WarmShell>> {
        self.shells.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many shells to keep ready now.
    fn wanted(&self) -> usize {
        if self.used.load(Ordering::Relaxed) {
            POOL
        } else {
            1
        }
    }
}

/// This worker's warm shells; none outside a worker (commands then start
/// shells of their own).
fn warm_shells() -> Option<Arc<WarmShells>> {
    agentix::WorkerContext::current().map(|worker| worker.state::<WarmShells>())
}

/// A warm shell already running `command` with `opts`, and its process
/// tag, or `None` when the caller must start a shell itself.
pub(crate) async fn hand_over(
    shell: &str,
    command: &str,
    opts: &BashOptions,
) -> Option<(Child, String)> {
    if !serves(shell, opts) {
        return None;
    }
    let pool = warm_shells()?;
    let warm = pool.lock().pop()?;
    let Some(script) = instructions(command, opts, warm.started_in.as_deref()) else {
        pool.lock().push(warm);
        return None;
    };
    pool.used.store(true, Ordering::Relaxed);
    let WarmShell {
        child: mut warm,
        tag,
        ..
    } = warm;
    let handed = match warm.stdin.as_mut() {
        Some(stdin) => stdin.write_all(&script).await.is_ok(),
        None => false,
    };
    if !handed {
        // The shell is gone (killed from outside).
        agentix::process::signal_group(warm.id().unwrap_or(0), libc::SIGKILL);
        return None;
    }
    Some((warm, tag))
}

/// Whether commands run with `shell` and `opts` use warm shells at all: only
/// those for the default shell, when that is bash.
pub(crate) fn serves(shell: &str, opts: &BashOptions) -> bool {
    opts.shell.is_none() && Some(shell) == crate::shell_program::bash_program()
}

/// The bytes that make a warm shell, started in `started_in`, run
/// `command` as `opts` ask. Bash reads them one byte per system call, so
/// what is not needed is left out: a `cd` to where the shell already is.
fn instructions(command: &str, opts: &BashOptions, started_in: Option<&str>) -> Option<Vec<u8>> {
    // The worker's own directory is re-read each time: it may have changed
    // since the shell started.
    let cwd = match &opts.cwd {
        Some(cwd) => cwd.clone(),
        None => std::env::current_dir().ok()?.to_str()?.to_owned(),
    };
    let mut steps = Vec::new();
    if started_in != Some(cwd.as_str()) {
        steps.push(format!("cd -- {}", quote(&cwd)));
    }
    for (key, value) in &opts.env {
        if !is_shell_name(key) {
            return None;
        }
        steps.push(format!("export {key}={}", quote(value)));
    }
    // Never empty: `:` does nothing.
    let pre = if steps.is_empty() {
        ":".to_owned()
    } else {
        steps.join("; ")
    };
    let mut script = Vec::with_capacity(pre.len() + command.len() + 2);
    script.extend_from_slice(pre.as_bytes());
    script.push(0);
    script.extend_from_slice(command.as_bytes());
    script.push(0);
    (script.len() <= MAX_SCRIPT).then_some(script)
}

/// Asks for the pool to be filled again, once the command that took a shell
/// has finished (so the next shell's start-up does not compete with it).
pub(crate) fn top_up() {
    let Some(pool) = warm_shells() else {
        return;
    };
    let starter = pool.starter.get_or_init(|| {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let filled = pool.clone();
        let (tx, rx) = std::sync::mpsc::sync_channel::<()>(1);
        // Shells are started from one thread of its own: a start waits
        // for the exec, which should not hold up an async thread.
        let spawned = std::thread::Builder::new()
            .name("agentix-bash-warm".into())
            .spawn(move || {
                let _runtime = runtime.enter();
                while rx.recv().is_ok() {
                    fill(&filled);
                }
            });
        spawned.ok().map(|_| tx)
    });
    if let Some(tx) = starter {
        // A request already queued covers this one.
        let _ = tx.try_send(());
    }
}

fn fill(pool: &WarmShells) {
    while pool.lock().len() < pool.wanted() {
        match start() {
            Ok(warm) => pool.lock().push(warm),
            Err(e) => {
                tracing::debug!("no warm shell: {e}");
                return;
            }
        }
    }
}

fn start() -> std::io::Result<WarmShell> {
    let started_in = std::env::current_dir()
        .ok()
        .and_then(|dir| dir.to_str().map(str::to_owned));
    let mut cmd = Command::new(crate::shell_program::bash_program().unwrap_or("bash"));
    cmd.arg("-c").arg(ZYGOTE);
    let tag = crate::command_env::prepare(&mut cmd);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A group of its own, set by the spawn itself: with no code to run
        // between fork and exec, the shell is started without copying the
        // worker (posix_spawn). A fork made the worker copy every page it
        // wrote until the shell's exec, while it sent the command's result:
        // ~200 µs of each `run` (bash_echo_p50_us 706 -> 496 with the
        // start moved out of the way, one run).
        .process_group(0);
    Ok(WarmShell {
        child: cmd.spawn()?,
        tag,
        started_in,
    })
}

/// `s` in single quotes, safe to paste into a shell script.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Whether `name` is a name `export` accepts.
fn is_shell_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_quotes_and_names_are_checked() {
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert!(is_shell_name("_A1"));
        assert!(!is_shell_name("1A") && !is_shell_name("A-B") && !is_shell_name(""));
    }

    #[test]
    fn instructions_carry_the_directory_the_variables_and_the_command() {
        let opts = BashOptions::new().cwd("/tmp/a b").env("K", "v'1");
        let script = instructions("echo hi", &opts, Some("/elsewhere")).unwrap();
        assert_eq!(script, b"cd -- '/tmp/a b'; export K='v'\\''1'\0echo hi\0");
        let here = instructions("echo hi", &opts, Some("/tmp/a b")).unwrap();
        assert_eq!(here, b"export K='v'\\''1'\0echo hi\0", "no cd where it is");
        let bare = BashOptions::new().cwd("/w");
        assert_eq!(instructions("ls", &bare, Some("/w")).unwrap(), b":\0ls\0");
        let env_only = BashOptions::new().env("A-B", "x");
        assert!(instructions("true", &env_only, None).is_none());
        assert!(instructions(&"x".repeat(MAX_SCRIPT), &BashOptions::new(), None).is_none());
    }
}
