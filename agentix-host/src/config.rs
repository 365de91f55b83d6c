//! [`SandboxConfig`]: what a sandbox is made of.

use std::path::PathBuf;
use std::time::Duration;

use agentix_trace::TraceHub;

use agentix_wire::log_record::LogRecord;

use crate::container_settings::ContainerSettings;
use crate::isolation::Isolation;
use crate::log_replay::LogTap;
use crate::sandbox_limits::SandboxLimits;
use crate::sandbox_user::RunAs;

/// The host variables a local sandbox starts with, if the host has them
/// (and every `LC_*`): a clean environment, not the host's.
pub const BASE_ENV: [&str; 9] = [
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR",
];

/// What to run in a sandbox: the bundle binary and its settings.
#[derive(Clone)]
pub struct SandboxConfig {
    /// The bundle: a binary whose `main` is `agentix::bundle::main()` (or
    /// that calls `agentix::bundle::dispatch()` first).
    pub bundle: PathBuf,
    /// Environment for the server and worker, on top of [`BASE_ENV`].
    pub env: Vec<(String, String)>,
    /// Host variables passed into the sandbox as they are, besides
    /// [`BASE_ENV`] (nothing else of the host's environment is: API keys and
    /// other secrets stay on the host).
    pub pass_env: Vec<String>,
    /// How long the server may take to start listening.
    pub ready_timeout: Duration,
    /// How long the first connection to the server may take.
    pub connect_timeout: Duration,
    /// Largest call payload (arguments, a result or a batch of stream
    /// items), in bytes of CBOR; 256 MiB by default, as the server's.
    pub max_message_bytes: usize,
    /// How often the host checks that the server still answers.
    pub heartbeat_interval: Duration,
    /// How long the server may stay silent before every pending call ends
    /// with `ConnectionLost` (a hung machine keeps TCP open forever).
    pub heartbeat_timeout: Duration,
    /// Extra flags for the server a provider starts, e.g.
    /// `["--shutdown-grace-ms", "10000"]` (see `agentix-server --help`).
    pub server_args: Vec<String>,
    /// Sees every record the sandbox logs or prints, besides the replay
    /// into the host's logging.
    pub log_tap: Option<LogTap>,
    /// The container, for providers that make one (`DockerProvider`).
    pub container: ContainerSettings,
    /// The directory the files plugin keeps every path beneath; `None`
    /// (the default) is the sandbox's own directory. `Some("/")` opens the
    /// whole filesystem to it.
    pub files_root: Option<PathBuf>,
    /// The deadline of every unary call that sets none itself (`None`, the
    /// default: calls wait as long as they take). A frozen sandbox then
    /// costs a caller this long, not forever.
    pub call_timeout: Option<Duration>,
    /// Which user the sandbox's processes run as: by default the host's,
    /// or an unprivileged uid of the sandbox's own when the host is root.
    pub run_as: RunAs,
    /// How a local sandbox is kept apart from the host: namespaces of its
    /// own by default (see [`Isolation`]).
    pub isolation: Isolation,
    /// How much memory, how many processes and how much CPU the sandbox
    /// may use (see [`SandboxLimits`] for the defaults).
    pub limits: SandboxLimits,
    /// Where the sandbox's spans go after its own processors: `None` (the
    /// default) is the hub in scope where the sandbox is created, else
    /// [`TraceHub::unscoped`].
    pub trace_hub: Option<TraceHub>,
}

impl std::fmt::Debug for SandboxConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxConfig")
            .field("bundle", &self.bundle)
            .field("env", &self.env)
            .field("server_args", &self.server_args)
            .field("log_tap", &self.log_tap.is_some())
            .finish_non_exhaustive()
    }
}

impl SandboxConfig {
    /// A sandbox running `bundle`, with default settings.
    pub fn new(bundle: impl Into<PathBuf>) -> Self {
        SandboxConfig {
            bundle: bundle.into(),
            env: Vec::new(),
            ready_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            // The server's default; bytes travel as they are, so this is
            // the payload itself, and memory holds only what is in flight.
            max_message_bytes: 256 << 20,
            heartbeat_interval: Duration::from_secs(5),
            heartbeat_timeout: Duration::from_secs(20),
            server_args: Vec::new(),
            log_tap: None,
            pass_env: Vec::new(),
            call_timeout: None,
            files_root: None,
            run_as: RunAs::Default,
            isolation: Isolation::default(),
            limits: SandboxLimits::default(),
            container: ContainerSettings::default(),
            trace_hub: None,
        }
    }

    /// Sends the sandbox's spans to `hub`'s processors (after the
    /// sandbox's own, [`Sandbox::traces`](crate::Sandbox::traces)).
    pub fn trace_hub(mut self, hub: TraceHub) -> Self {
        self.trace_hub = Some(hub);
        self
    }

    /// The hub a sandbox made now with this config sends its spans on to.
    pub(crate) fn hub_to_trace_to(&self) -> TraceHub {
        self.trace_hub
            .clone()
            .or_else(TraceHub::current)
            .unwrap_or_else(|| TraceHub::unscoped().clone())
    }

    /// Runs the sandbox's processes as `run_as` says (see [`RunAs`]).
    pub fn run_as(mut self, run_as: RunAs) -> Self {
        self.run_as = run_as;
        self
    }

    /// Keeps the sandbox apart from the host as `isolation` says.
    pub fn isolation(mut self, isolation: Isolation) -> Self {
        self.isolation = isolation;
        self
    }

    /// Limits what the sandbox may use (see [`SandboxLimits`]).
    pub fn limits(mut self, limits: SandboxLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Runs the sandbox in a container of `image` (for container providers).
    pub fn image(mut self, image: impl Into<String>) -> Self {
        self.container.image = Some(image.into());
        self
    }

    /// Runs the sandbox's container under the engine's runtime `name`
    /// (for container providers): gVisor as registered by the Docker
    /// provider's `scripts/setup-gvisor`, say.
    pub fn runtime(mut self, name: impl Into<String>) -> Self {
        self.container.runtime = Some(name.into());
        self
    }

    /// Keeps the files plugin's paths beneath `dir` instead of the
    /// sandbox's own directory.
    pub fn files_root(mut self, dir: impl Into<PathBuf>) -> Self {
        self.files_root = Some(dir.into());
        self
    }

    /// Gives every unary call that sets no `.timeout` of its own this one.
    pub fn call_timeout(mut self, limit: Duration) -> Self {
        self.call_timeout = Some(limit);
        self
    }

    /// A sandbox whose bundle is the running program itself (see
    /// `agentix::bundle::dispatch`).
    pub fn current_exe() -> std::io::Result<Self> {
        Ok(SandboxConfig::new(std::env::current_exe()?))
    }

    /// A sandbox running the bundle binary `name` that sits beside the
    /// running program: cargo puts every binary of a workspace in the same
    /// target directory, so a host binary finds the workspace's bundle
    /// binary this way once both are built (`cargo build -p my-bundle`).
    /// Fails, naming the path it looked at, when there is no such file.
    pub fn beside_current_exe(name: &str) -> std::io::Result<Self> {
        let exe = std::env::current_exe()?;
        let bundle = exe.with_file_name(name);
        if !bundle.is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "no bundle binary at {}: build it into the same target directory first \
                     (`cargo build -p <its package>`)",
                    bundle.display()
                ),
            ));
        }
        Ok(SandboxConfig::new(bundle))
    }

    /// Adds a flag and its value for the sandbox's server.
    pub fn server_arg(mut self, flag: impl Into<String>, value: impl Into<String>) -> Self {
        self.server_args.push(flag.into());
        self.server_args.push(value.into());
        self
    }

    /// Sets how often the host checks on the server and how long the server
    /// may stay silent before pending calls end with `ConnectionLost`.
    pub fn heartbeat(mut self, interval: Duration, timeout: Duration) -> Self {
        self.heartbeat_interval = interval;
        self.heartbeat_timeout = timeout;
        self
    }

    /// Calls `tap(sandbox_id, record)` for every record the sandbox logs or
    /// prints (it runs on the connection's receive path: keep it quick).
    /// Taps add up: each one set sees every record.
    pub fn on_log(mut self, tap: impl Fn(&str, &LogRecord) + Send + Sync + 'static) -> Self {
        self.log_tap = Some(match self.log_tap.take() {
            None => std::sync::Arc::new(tap),
            Some(earlier) => std::sync::Arc::new(move |id: &str, record: &LogRecord| {
                earlier(id, record);
                tap(id, record);
            }),
        });
        self
    }

    /// Passes the host's variable `name` (if set) into the sandbox.
    pub fn pass_env(mut self, name: impl Into<String>) -> Self {
        self.pass_env.push(name.into());
        self
    }

    /// Adds an environment variable for the sandbox's processes.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Forwards the sandbox code's `tracing` spans (`#[instrument]`,
    /// `info_span!`) that `directives` select (`RUST_LOG` syntax:
    /// `my_eval=info,my_eval::tools=debug`) as agentix spans, nested in the
    /// trace of the call that made them; none are by default.
    pub fn tracing_spans(self, directives: impl Into<String>) -> Self {
        self.env(agentix_wire::wire::ENV_TRACING_SPANS, directives.into())
    }
}
