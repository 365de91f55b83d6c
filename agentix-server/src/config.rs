//! Server settings from command-line flags and the environment.

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Environment variable holding the sandbox token (never passed on argv,
/// which other users can read).
pub const ENV_TOKEN: &str = "AGENTIX_TOKEN";

/// The largest call payload by default (arguments, a result, a batch of
/// stream items), as the Python reference allows.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 256 << 20;

/// Everything the server needs to run.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to bind; `127.0.0.1` unless told otherwise.
    pub host: IpAddr,
    /// Port to bind; 0 picks a free one (reported on the ready line).
    pub port: u16,
    /// Listen on this Unix socket instead of `host:port` (`--unix PATH`):
    /// how a sandbox with no network is reached.
    pub unix: Option<PathBuf>,
    /// Also listen on this Unix socket (`--local-socket PATH`): a host on
    /// the same machine dials it and skips the TCP stack (and whatever
    /// packet filter applies to loopback), while third-party clients keep
    /// the TCP address.
    pub local_socket: Option<PathBuf>,
    /// Token every host must present; `None` only with
    /// [`ServerConfig::insecure_no_auth`].
    pub token: Option<String>,
    /// Serve without a token, on purpose (`--insecure-no-auth`); otherwise a
    /// server with no token refuses to start.
    pub insecure_no_auth: bool,
    /// The worker's command line: program and arguments.
    pub worker_command: Vec<OsString>,
    /// Largest Socket.IO message accepted, in bytes.
    pub max_message_bytes: usize,
    /// How long a started worker may take to report ready.
    pub worker_start_timeout: Duration,
    /// Restarts allowed within [`ServerConfig::restart_window`] before degrading.
    pub max_restarts: u32,
    /// Window over which restarts are counted.
    pub restart_window: Duration,
    /// Calls allowed in flight or queued at once; more fail fast.
    pub max_inflight: usize,
    /// A directory the server removes when it exits (the sandbox's private dir).
    pub cleanup_dir: Option<PathBuf>,
    /// On SIGTERM, how long calls in flight may take to finish before the
    /// worker is stopped.
    pub shutdown_grace: Duration,
    /// How often the server pings each host connection (Engine.IO).
    pub ping_interval: Duration,
    /// How long a host may take to answer a ping before it counts as gone.
    pub ping_timeout: Duration,
    /// Shut down once no host has been connected for this long (a host
    /// that died without deleting its sandbox leaves nothing running for
    /// long); `None`, the default, never.
    pub idle_exit: Option<Duration>,
    /// The directories that hold the sandbox's state (`--state-dir`, any
    /// number): what `GET /state.tar` archives for a snapshot.
    pub state_dirs: Vec<PathBuf>,
    /// Unpack a state archive read from standard input, after the token,
    /// into the state directories before the first worker starts
    /// (`--seed-stdin`): a sandbox started from a snapshot.
    pub seed_stdin: bool,
    /// Unpack the state archive at this path into the state directories
    /// before the first worker starts (`--seed-file PATH`): a sandbox
    /// started from a snapshot, its archive mounted read-only.
    pub seed_file: Option<PathBuf>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            host: IpAddr::from([127, 0, 0, 1]),
            port: 0,
            unix: None,
            local_socket: None,
            token: None,
            insecure_no_auth: false,
            worker_command: Vec::new(),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            worker_start_timeout: Duration::from_secs(30),
            max_restarts: 5,
            restart_window: Duration::from_secs(60),
            max_inflight: 100_000,
            cleanup_dir: None,
            shutdown_grace: Duration::from_secs(5),
            ping_interval: Duration::from_secs(25),
            ping_timeout: Duration::from_secs(20),
            idle_exit: None,
            state_dirs: Vec::new(),
            seed_stdin: false,
            seed_file: None,
        }
    }
}

impl ServerConfig {
    /// Parses `--host A --port N --unix PATH --local-socket PATH
    /// --max-message-bytes N --cleanup-dir D --state-dir D.. --seed-stdin --seed-file F
    /// --shutdown-grace-ms N --ping-interval-ms N --ping-timeout-ms N
    /// --max-restarts N --restart-window-ms N --idle-exit-ms N
    /// --token-stdin --token-file F --insecure-no-auth --worker CMD [ARGS..]`;
    /// the token comes from `AGENTIX_TOKEN`, from the first line of standard
    /// input with `--token-stdin` (which keeps it out of
    /// `/proc/<pid>/environ`), or from the file `--token-file` names (a
    /// mounted Kubernetes Secret: in no command line, environment or spec).
    pub fn from_args(args: impl IntoIterator<Item = OsString>) -> Result<Self, String> {
        let mut config = ServerConfig {
            token: std::env::var(ENV_TOKEN).ok().filter(|t| !t.is_empty()),
            ..ServerConfig::default()
        };
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            let flag = flag
                .into_string()
                .map_err(|f| format!("unreadable flag {f:?}"))?;
            let mut value = |name: &str| {
                args.next()
                    .ok_or_else(|| format!("{name} needs a value"))
                    .and_then(|v| v.into_string().map_err(|v| format!("bad value {v:?}")))
            };
            match flag.as_str() {
                "--host" => {
                    config.host = value("--host")?
                        .parse()
                        .map_err(|e| format!("--host: {e}"))?
                }
                "--port" => {
                    config.port = value("--port")?
                        .parse()
                        .map_err(|e| format!("--port: {e}"))?
                }
                "--max-message-bytes" => {
                    config.max_message_bytes = value("--max-message-bytes")?
                        .parse()
                        .map_err(|e| format!("--max-message-bytes: {e}"))?
                }
                "--unix" => config.unix = Some(value("--unix")?.into()),
                "--local-socket" => config.local_socket = Some(value("--local-socket")?.into()),
                "--cleanup-dir" => config.cleanup_dir = Some(value("--cleanup-dir")?.into()),
                "--state-dir" => {
                    let dir = PathBuf::from(value("--state-dir")?);
                    if !dir.is_absolute() {
                        return Err(format!(
                            "--state-dir {}: not an absolute path",
                            dir.display()
                        ));
                    }
                    config.state_dirs.push(dir);
                }
                "--seed-stdin" => config.seed_stdin = true,
                "--seed-file" => config.seed_file = Some(value("--seed-file")?.into()),
                "--token-stdin" => config.token = Some(token_from_stdin()?),
                "--token-file" => {
                    let path = value("--token-file")?;
                    config.token = Some(token_from_file(&path)?);
                }
                "--insecure-no-auth" => config.insecure_no_auth = true,
                "--max-restarts" => {
                    config.max_restarts = value("--max-restarts")?
                        .parse()
                        .map_err(|e| format!("--max-restarts: {e}"))?
                }
                "--idle-exit-ms" => {
                    let ms: u64 = value(&flag)?.parse().map_err(|e| format!("{flag}: {e}"))?;
                    config.idle_exit = Some(Duration::from_millis(ms));
                }
                "--shutdown-grace-ms"
                | "--ping-interval-ms"
                | "--ping-timeout-ms"
                | "--restart-window-ms" => {
                    let ms: u64 = value(&flag)?.parse().map_err(|e| format!("{flag}: {e}"))?;
                    let d = Duration::from_millis(ms);
                    match flag.as_str() {
                        "--shutdown-grace-ms" => config.shutdown_grace = d,
                        "--ping-interval-ms" => config.ping_interval = d,
                        "--restart-window-ms" => config.restart_window = d,
                        _ => config.ping_timeout = d,
                    }
                }
                "--worker" => {
                    config.worker_command = args.by_ref().collect();
                    if config.worker_command.is_empty() {
                        return Err("--worker needs a command".to_owned());
                    }
                }
                other => return Err(format!("unknown flag `{other}`")),
            }
        }
        Ok(config)
    }
}

/// The first line of standard input, which must hold a token.
fn token_from_stdin() -> Result<String, String> {
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|e| format!("--token-stdin: cannot read standard input: {e}"))?;
    let token = line.trim();
    if token.is_empty() {
        return Err("--token-stdin: standard input held no token".to_owned());
    }
    Ok(token.to_owned())
}

/// The first line of the file `path`, which must hold a token.
fn token_from_file(path: &str) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--token-file {path}: cannot read it: {e}"))?;
    let token = text.lines().next().unwrap_or("").trim();
    if token.is_empty() {
        return Err(format!("--token-file {path}: the file holds no token"));
    }
    Ok(token.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<ServerConfig, String> {
        ServerConfig::from_args(args.iter().map(OsString::from))
    }

    #[test]
    fn flags_parse_and_worker_takes_the_rest() {
        let c = parse(&["--port", "7", "--worker", "/bin/w", "worker", "--port"]).unwrap();
        assert_eq!(c.port, 7);
        assert_eq!(c.host, IpAddr::from([127, 0, 0, 1]));
        assert_eq!(c.worker_command, ["/bin/w", "worker", "--port"]);
        let c = parse(&["--shutdown-grace-ms", "250", "--ping-interval-ms", "100"]).unwrap();
        assert_eq!(c.shutdown_grace, Duration::from_millis(250));
        assert_eq!(c.ping_interval, Duration::from_millis(100));
        assert_eq!(c.ping_timeout, ServerConfig::default().ping_timeout);
        let c = parse(&["--local-socket", "/run/s.sock"]).unwrap();
        assert_eq!(c.local_socket, Some(PathBuf::from("/run/s.sock")));
        assert_eq!(c.unix, None);
    }

    #[test]
    fn bad_flags_are_named() {
        assert_eq!(parse(&["--nope"]).unwrap_err(), "unknown flag `--nope`");
        assert_eq!(parse(&["--port"]).unwrap_err(), "--port needs a value");
        assert!(parse(&["--port", "x"]).unwrap_err().starts_with("--port:"));
    }

    #[test]
    fn a_token_file_gives_its_first_line_and_an_empty_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "s3cret\n").unwrap();
        let c = parse(&["--token-file", file.to_str().unwrap()]).unwrap();
        assert_eq!(c.token.as_deref(), Some("s3cret"));
        std::fs::write(&file, "\n").unwrap();
        let e = parse(&["--token-file", file.to_str().unwrap()]).unwrap_err();
        assert!(e.contains("holds no token"), "{e}");
        let missing = dir.path().join("absent");
        let e = parse(&["--token-file", missing.to_str().unwrap()]).unwrap_err();
        assert!(e.contains("cannot read it"), "{e}");
    }
}
