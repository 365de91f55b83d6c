//! Remote functions the end-to-end tests call, and test helpers.
//!
//! The `e2e-bundle` binary links this crate, so every function here is
//! callable in its sandboxes.

use std::time::Duration;

use agentix::{Blob, StreamExt};
use serde::{Deserialize, Serialize};

/// Returns its argument.
#[agentix::remote]
pub async fn echo(text: String) -> String {
    text
}

/// Returns its bytes unchanged.
#[agentix::remote]
pub async fn echo_blob(data: Blob) -> Blob {
    data
}

/// `size` bytes of 0x5a, made in the sandbox.
#[agentix::remote]
pub async fn make_blob(size: usize) -> Blob {
    Blob::from(vec![0x5a; size])
}

/// Adds two numbers.
#[agentix::remote]
pub async fn add(a: i64, b: i64) -> i64 {
    a + b
}

/// A record with several field types.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Person {
    /// Name.
    pub name: String,
    /// Age in years.
    pub age: u32,
    /// Tags.
    pub tags: Vec<String>,
}

/// Ages a person by one year and tags them.
#[agentix::remote]
pub async fn birthday(person: Person, tag: Option<String>) -> Person {
    let mut p = person;
    p.age += 1;
    p.tags.extend(tag);
    p
}

/// The error [`checked_div`] returns.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum MathError {
    /// The divisor was zero.
    DivideByZero {
        /// The dividend.
        dividend: i64,
    },
}

impl std::fmt::Display for MathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MathError::DivideByZero { dividend } => write!(f, "cannot divide {dividend} by zero"),
        }
    }
}

/// Divides, failing on zero.
#[agentix::remote]
pub async fn checked_div(a: i64, b: i64) -> Result<i64, MathError> {
    if b == 0 {
        Err(MathError::DivideByZero { dividend: a })
    } else {
        Ok(a / b)
    }
}

/// Panics with `message`.
#[agentix::remote]
pub async fn explode(message: String) -> u32 {
    panic!("{message}")
}

/// Sleeps `ms` milliseconds, then returns `ms`.
#[agentix::remote]
pub async fn sleep_ms(ms: u64) -> u64 {
    tokio::time::sleep(Duration::from_millis(ms)).await;
    ms
}

/// The SHA-256 (hex) of the file at `path`, read in the sandbox.
#[agentix::remote]
pub async fn sha256_of(path: String) -> Result<String, std::io::Error> {
    use sha2::Digest;
    Ok(format!("{:x}", sha2::Sha256::digest(std::fs::read(path)?)))
}

/// The worker's process id.
#[agentix::remote]
pub async fn worker_pid() -> u32 {
    std::process::id()
}

/// Ends the worker process at once with `code` (to test supervision).
#[agentix::remote]
pub async fn exit_worker(code: i32) -> u32 {
    std::process::exit(code)
}

// ---- streaming -------------------------------------------------------------

static PRODUCED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Yields `0..n`.
#[agentix::remote]
pub fn count(n: u64) -> impl agentix::Stream<Item = u64> + Send {
    agentix::stream::iter(0..n)
}

/// Yields `0..n` as fast as it is allowed to, counting what it produced in
/// a worker-wide counter that [`produced`] reads.
#[agentix::remote]
pub fn count_counted(n: u64) -> impl agentix::Stream<Item = u64> + Send {
    use std::sync::atomic::Ordering;
    PRODUCED.store(0, Ordering::SeqCst);
    agentix::stream::iter(0..n).inspect(|_| {
        PRODUCED.fetch_add(1, Ordering::SeqCst);
    })
}

/// How many items [`count_counted`] has produced so far.
#[agentix::remote]
pub async fn produced() -> u64 {
    PRODUCED.load(std::sync::atomic::Ordering::SeqCst)
}

/// Yields `n` blobs of `size` bytes, each filled with its index.
#[agentix::remote]
pub async fn blobs(n: u32, size: usize) -> impl agentix::Stream<Item = Blob> + Send {
    agentix::stream::iter(0..n).map(move |i| Blob::from(vec![i as u8; size]))
}

/// Yields `0..fail_at`, then fails with a divide-by-zero error.
#[agentix::remote]
pub fn count_then_fail(fail_at: i64) -> impl agentix::Stream<Item = Result<i64, MathError>> + Send {
    agentix::stream::iter(0..=fail_at).map(move |i| {
        if i == fail_at {
            Err(MathError::DivideByZero { dividend: i })
        } else {
            Ok(i)
        }
    })
}

/// Yields `0..panic_at`, then panics.
#[agentix::remote]
pub fn count_then_panic(panic_at: u64) -> impl agentix::Stream<Item = u64> + Send {
    agentix::stream::iter(0..=panic_at).map(move |i| {
        if i == panic_at {
            panic!("stream broke at {i}");
        }
        i
    })
}

/// Yields one item every `ms` milliseconds, forever.
#[agentix::remote]
pub fn tick(ms: u64) -> impl agentix::Stream<Item = u64> + Send {
    agentix::stream::unfold(0u64, move |i| async move {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Some((i, i + 1))
    })
}

// ---- cancellation -----------------------------------------------------------

/// Writes `{path}.started` at once and `path` after `ms` milliseconds.
#[agentix::remote]
pub async fn write_after(path: String, ms: u64) -> bool {
    let _ = std::fs::write(format!("{path}.started"), b"started");
    tokio::time::sleep(Duration::from_millis(ms)).await;
    std::fs::write(&path, b"written").is_ok()
}

/// Starts `sleep 600` (killed when this call is dropped), writes its pid to
/// `pid_file`, and waits for it.
#[agentix::remote]
pub async fn run_child(pid_file: String) -> Result<i32, std::io::Error> {
    let mut child = tokio::process::Command::new("sleep")
        .arg("600")
        .kill_on_drop(true)
        .spawn()?;
    std::fs::write(&pid_file, child.id().unwrap_or(0).to_string())?;
    let status = child.wait().await?;
    Ok(status.code().unwrap_or(-1))
}

/// Writes the wall-clock time in nanoseconds to `path` when dropped.
struct StampOnDrop(String);

impl Drop for StampOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, now_nanos().to_string());
    }
}

/// Nanoseconds since the Unix epoch (the same clock in every process).
pub fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Never returns; writes the time to `marker` when its task is dropped.
#[agentix::remote]
pub async fn hold(marker: String) -> u32 {
    let _stamp = StampOnDrop(marker);
    std::future::pending::<u32>().await
}

// ---- supervision ------------------------------------------------------------

/// Ends the worker process the way `how` says: `abort`, `sigkill`, `oom`
/// (an allocation past a memory limit) or `exit`; prints a line on stderr first.
#[agentix::remote]
pub async fn crash(how: String) -> u32 {
    eprintln!("e2e worker: about to crash by {how}");
    match how.as_str() {
        "abort" => std::process::abort(),
        "sigkill" => {
            // SAFETY: raising a signal on ourselves has no memory effects.
            unsafe { libc::raise(libc::SIGKILL) };
            unreachable!("SIGKILL ends the process")
        }
        "oom" => {
            let limit = libc::rlimit {
                rlim_cur: 2 << 30,
                rlim_max: 2 << 30,
            };
            // SAFETY: setrlimit only reads the struct we pass.
            unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) };
            let hog: Vec<u8> = Vec::with_capacity(4 << 30);
            std::hint::black_box(hog);
            unreachable!("the allocation fails and aborts")
        }
        _ => std::process::exit(7),
    }
}

/// Allocates `mib` MiB and touches every page (past a container's memory
/// limit, the kernel's OOM killer ends the worker).
#[agentix::remote]
pub async fn fill_memory(mib: usize) -> usize {
    let mut filled = vec![0u8; mib << 20];
    for page in filled.chunks_mut(4096) {
        page[0] = 1;
    }
    std::hint::black_box(&filled).len()
}

/// Tries to reach `target` from sandbox code: `tcp:HOST:PORT`, `unix:PATH`
/// or `abstract:NAME` (a Unix socket in the abstract namespace); `read:PATH`
/// reads a file, `mount:PATH` mounts a tmpfs there, `ptrace:PID` attaches
/// to a process as a debugger would, and `syscall:NAME` makes
/// the kernel call `keyctl`, `bpf`, `io_uring` or `unshare` as an exploit
/// would start. Returns `reached` or the error met, for the escape suite.
#[agentix::remote]
pub async fn try_reach(target: String) -> String {
    use std::os::linux::net::SocketAddrExt;
    let outcome = match target.split_once(':') {
        Some(("tcp", addr)) => std::net::TcpStream::connect(addr).map(drop),
        Some(("unix", path)) => std::os::unix::net::UnixStream::connect(path).map(drop),
        Some(("abstract", name)) => std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|addr| std::os::unix::net::UnixStream::connect_addr(&addr))
            .map(drop),
        Some(("read", path)) => std::fs::read(path).map(drop),
        Some(("mount", path)) => {
            let target = std::ffi::CString::new(path).unwrap_or_default();
            // SAFETY: NUL-terminated strings that outlive the call.
            let status = unsafe {
                libc::mount(
                    c"none".as_ptr(),
                    target.as_ptr(),
                    c"tmpfs".as_ptr(),
                    0,
                    std::ptr::null(),
                )
            };
            match status {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        }
        Some(("syscall", name)) => kernel_call(name),
        Some(("ptrace", pid)) => match pid.parse::<libc::pid_t>() {
            // SAFETY: PTRACE_ATTACH takes a pid and no memory of ours.
            Ok(pid) => match unsafe { libc::ptrace(libc::PTRACE_ATTACH, pid, 0, 0) } {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            },
            Err(e) => return format!("not a pid: {e}"),
        },
        _ => return format!("unknown target {target}"),
    };
    match outcome {
        Ok(()) => "reached".to_owned(),
        Err(e) => e.to_string(),
    }
}

/// The first step of an attack through kernel interface `name`: a session
/// keyring, a BPF map, an io_uring instance, new user and mount namespaces.
fn kernel_call(name: &str) -> std::io::Result<()> {
    const KEYCTL_JOIN_SESSION_KEYRING: libc::c_long = 1;
    const BPF_MAP_CREATE: libc::c_long = 0;
    // SAFETY: each call gets arguments of the kernel's documented shapes,
    // in buffers that outlive it; a returned fd is closed.
    let result = unsafe {
        match name {
            "keyctl" => libc::syscall(
                libc::SYS_keyctl,
                KEYCTL_JOIN_SESSION_KEYRING,
                std::ptr::null::<libc::c_char>(),
            ),
            "bpf" => {
                // union bpf_attr for BPF_MAP_CREATE: an array map of one
                // 4-byte key and value.
                let mut attr = [0u32; 32];
                (attr[0], attr[1], attr[2], attr[3]) = (2, 4, 4, 1);
                libc::syscall(
                    libc::SYS_bpf,
                    BPF_MAP_CREATE,
                    attr.as_mut_ptr(),
                    std::mem::size_of_val(&attr),
                )
            }
            "io_uring" => {
                let mut params = [0u8; 120];
                libc::syscall(libc::SYS_io_uring_setup, 1, params.as_mut_ptr())
            }
            "unshare" => return unshare_in_child(),
            _ => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("no such kernel call {name}"),
                ))
            }
        }
    };
    match result {
        -1 => Err(std::io::Error::last_os_error()),
        fd if name != "keyctl" && name != "unshare" => {
            // SAFETY: the call returned a new fd this function owns.
            unsafe { libc::close(fd as libc::c_int) };
            Ok(())
        }
        _ => Ok(()),
    }
}

/// `unshare` of new user and mount namespaces, in a child: the kernel
/// refuses it to a threaded process whatever the policy, and the worker
/// is one.
fn unshare_in_child() -> std::io::Result<()> {
    // SAFETY: the child calls only async-signal-safe functions (`unshare`,
    // `_exit`) before it exits.
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error()),
        0 => unsafe {
            let status = match libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) {
                0 => 0,
                _ => *libc::__errno_location(),
            };
            libc::_exit(status)
        },
        child => {
            let mut status = 0;
            // SAFETY: waits for the child just made.
            unsafe { libc::waitpid(child, &mut status, 0) };
            match libc::WEXITSTATUS(status) {
                0 => Ok(()),
                errno => Err(std::io::Error::from_raw_os_error(errno)),
            }
        }
    }
}

// ---- logs -------------------------------------------------------------------

/// Logs `logs` tracing records (`seq` = 0..), prints `lines` stdout lines
/// (`line <i>`) and creates `spans` spans (`burst.span`, attribute `seq`),
/// interleaved; returns how many items it produced.
#[agentix::remote]
pub async fn chatter(logs: u64, lines: u64, spans: u64) -> u64 {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for i in 0..logs.max(lines).max(spans) {
        if i < logs {
            tracing::info!(seq = i, "log {i}");
        }
        if i < lines {
            let _ = writeln!(out, "line {i}");
        }
        if i < spans {
            drop(agentix::trace::span("burst.span").attr("seq", i));
        }
    }
    let _ = out.flush();
    logs + lines + spans
}

// ---- traces -----------------------------------------------------------------

/// Ends a `huge.span` whose `big` attribute is `bytes` long; returns `bytes`.
#[agentix::remote]
pub async fn huge_span(bytes: usize) -> usize {
    drop(agentix::trace::span("huge.span").attr("big", "x".repeat(bytes)));
    bytes
}

/// Creates a `sandbox.step` span (attribute `children`) with `children`
/// `sandbox.child` spans inside, each with a `tick` event; returns the step
/// span's id.
#[agentix::remote]
pub async fn traced_step(children: u32) -> String {
    let step = agentix::trace::span("sandbox.step").attr("children", children);
    step.scope(async {
        tracing::info!("inside the step");
        for i in 0..children {
            let child = agentix::trace::span("sandbox.child").attr("index", i);
            tokio::task::yield_now().await;
            child.add_event("tick");
        }
    })
    .await;
    step.id()
}

static SANDBOX_SPANS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static SANDBOX_FOREIGN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Counts the spans a processor inside the sandbox sees.
struct SandboxCounter;

impl agentix::trace::Processor for SandboxCounter {
    fn on_span_end(&mut self, span: &agentix::trace::SpanData) {
        use std::sync::atomic::Ordering;
        SANDBOX_SPANS.fetch_add(1, Ordering::SeqCst);
        if span.origin.is_some() || span.name.starts_with("host.") {
            SANDBOX_FOREIGN.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Registers a counting processor inside the sandbox.
#[agentix::remote]
pub async fn install_sandbox_counter() -> bool {
    agentix::trace::TraceHub::unscoped().add_processor(SandboxCounter);
    true
}

/// `(spans, spans not created in this sandbox)` its counting processor saw,
/// after a flush.
#[agentix::remote]
pub async fn sandbox_counts() -> (u64, u64) {
    use std::sync::atomic::Ordering;
    agentix::trace::TraceHub::unscoped().flush().await;
    (
        SANDBOX_SPANS.load(Ordering::SeqCst),
        SANDBOX_FOREIGN.load(Ordering::SeqCst),
    )
}

/// Writes through every path a sandbox can: `println!`, `eprintln!`, a
/// child process, a raw `write(2)`, invalid UTF-8, the `log` crate and a
/// structured `tracing` event.
#[agentix::remote]
pub async fn noisy() -> bool {
    println!("from println");
    eprintln!("from eprintln");
    let child = tokio::process::Command::new("sh")
        .args(["-c", "echo from child; echo child complains >&2"])
        .status()
        .await;
    let raw = b"from write(2)\n";
    let bad = b"bad \xff byte\n";
    // SAFETY: writing a valid buffer to the process's own stdout.
    unsafe {
        libc::write(1, raw.as_ptr().cast(), raw.len());
        libc::write(1, bad.as_ptr().cast(), bad.len());
    }
    log::warn!(target: "legacy::module", "from the log crate");
    tracing::info!(target: "my_eval::agent", step = 3, model = "claude", "structured");
    child.is_ok()
}

/// Writes a line without its newline, then ends the worker.
#[agentix::remote]
pub async fn partial_line_then_exit() -> u32 {
    let text = b"partial without newline";
    // SAFETY: writing a valid buffer to the process's own stdout.
    unsafe { libc::write(1, text.as_ptr().cast(), text.len()) };
    std::process::exit(0)
}

/// Logs `n` records whose message is `width` bytes long (`wide <i> xxx..`).
#[agentix::remote]
pub async fn chatter_wide(n: u64, width: usize) -> u64 {
    let pad = "x".repeat(width);
    for i in 0..n {
        tracing::info!("wide {i} {pad}");
    }
    n
}

// ---- plugin namespaces --------------------------------------------------------

pub mod egress_client;
pub mod typed_plugin;

/// `/e2e-plugin`'s handle, kept in the worker's context.
#[derive(Default)]
struct Plugin(std::sync::OnceLock<agentix::SandboxNamespaceHandle>);

fn plugin_state() -> std::sync::Arc<Plugin> {
    agentix::WorkerContext::current()
        .expect("runs in a worker")
        .state::<Plugin>()
}

fn plugin() -> agentix::SandboxNamespaceHandle {
    plugin_state()
        .0
        .get()
        .expect("open_plugin ran first")
        .clone()
}

/// Registers `/e2e-plugin`: `configure` echoes its data back as
/// `configured`; `explode` panics in its future, `explode-early` in the
/// closure itself, before it makes one.
#[agentix::remote]
pub async fn open_plugin() -> Result<String, agentix::RegisterError> {
    if plugin_state().0.get().is_some() {
        return Ok("already open".into());
    }
    let ns = agentix::SandboxNamespace::new("/e2e-plugin")
        .on("configure", |ns, data| async move {
            ns.emit("configured", data);
        })
        .on("explode", |_, _| async move {
            panic!("a sandbox handler broke")
        })
        .on("explode-early", |_, _| -> std::future::Ready<()> {
            panic!("a sandbox handler broke before its future")
        })
        .on("status:get", |ns, _| async move {
            ns.emit("status:value", serde_json::json!("ready"));
        });
    let handle = agentix::register_namespace(ns)?;
    let _ = plugin_state().0.set(handle);
    Ok("open".into())
}

/// Tries to register `path`; returns the error text, or "ok".
#[agentix::remote]
pub async fn try_register(path: String) -> String {
    match agentix::register_namespace(agentix::SandboxNamespace::new(path)) {
        Ok(_) => "ok".into(),
        Err(e) => e.to_string(),
    }
}

/// Makes `n` concurrent `fetch` requests with bodies `{i}`; returns the replies.
#[agentix::remote]
pub async fn ask_host(n: u64) -> Vec<agentix::JsonValue> {
    let plugin = plugin();
    let requests = (0..n).map(|i| plugin.request("fetch", serde_json::json!({ "i": i })));
    futures_util::future::join_all(requests)
        .await
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() })))
        .collect()
}

/// Requests `event` with a timeout of `ms`; returns the reply or the error text.
#[agentix::remote]
pub async fn ask_host_event(event: String, ms: u64) -> Result<agentix::JsonValue, String> {
    plugin()
        .request_with_timeout(&event, serde_json::json!({}), Duration::from_millis(ms))
        .await
        .map_err(|e| match e {
            agentix::RemoteSioError::Raised { type_name, message } => {
                format!("raised {type_name}: {message}")
            }
            other => other.to_string(),
        })
}

/// Requests `fetch` with a body padded to `bytes`; returns the reply or the
/// error text.
#[agentix::remote]
pub async fn ask_host_padded(bytes: usize) -> Result<agentix::JsonValue, String> {
    let body = serde_json::json!({ "pad": "x".repeat(bytes) });
    plugin()
        .request_with_timeout("fetch", body, Duration::from_secs(30))
        .await
        .map_err(|e| match e {
            agentix::RemoteSioError::Raised { type_name, message } => {
                format!("raised {type_name}: {message}")
            }
            other => other.to_string(),
        })
}

/// Emits `number {i}` on `/e2e-plugin` for `i` in `0..n`, in order; returns `n`.
#[agentix::remote]
pub async fn emit_numbers(n: u64) -> u64 {
    for i in 0..n {
        plugin().emit("number", serde_json::json!(i));
    }
    n
}

/// Sandbox-side namespace actor of `/e2e-actor`: keeps every `number` it
/// gets, and answers `report` by emitting `reported` with all of them.
struct NumberKeeper {
    seen: Vec<agentix::JsonValue>,
}

impl agentix::actix::Actor for NumberKeeper {
    type Context = agentix::actix::Context<Self>;
}

impl agentix::actix::Handler<agentix::NamespaceEvent<agentix::SandboxNamespaceHandle>>
    for NumberKeeper
{
    type Result = ();

    fn handle(
        &mut self,
        msg: agentix::NamespaceEvent<agentix::SandboxNamespaceHandle>,
        _: &mut Self::Context,
    ) {
        match msg.event.as_str() {
            "number" => self.seen.push(msg.data),
            _ => msg
                .ns
                .emit("reported", agentix::JsonValue::Array(self.seen.clone())),
        }
    }
}

/// Registers `/e2e-actor`, its events handled by a [`NumberKeeper`] actor.
#[agentix::remote]
pub async fn open_actor_plugin() -> Result<String, agentix::RegisterError> {
    let keeper = agentix::start_actor(|_| NumberKeeper { seen: Vec::new() });
    let ns = agentix::SandboxNamespace::new("/e2e-actor")
        .on_actor(["number", "report"], keeper.recipient());
    agentix::register_namespace(ns)?;
    Ok("open".into())
}

/// Runs in every e2e worker at start: registers `/boot-plugin`, which
/// answers `ping` with `pong` carrying the worker's pid.
pub fn worker_setup() {
    let ns = agentix::SandboxNamespace::new("/boot-plugin").on("ping", |ns, _| async move {
        ns.emit("pong", serde_json::json!(std::process::id()));
    });
    if let Err(e) = agentix::register_namespace(ns) {
        eprintln!("e2e worker: /boot-plugin not registered: {e}");
    }
}

/// Whether a child process of the worker holds any of the worker's pipes to
/// the server (fds 3, 4, 5): it must not.
#[agentix::remote]
pub async fn child_inherits_frame_pipes() -> Result<bool, std::io::Error> {
    let mine: Vec<std::path::PathBuf> = [3, 4, 5]
        .iter()
        .filter_map(|fd| std::fs::read_link(format!("/proc/self/fd/{fd}")).ok())
        .collect();
    assert_eq!(mine.len(), 3, "the worker has its three pipes");
    let out = tokio::process::Command::new("sh")
        .args(["-c", "for f in /proc/$$/fd/*; do readlink \"$f\"; done"])
        .output()
        .await?;
    let theirs = String::from_utf8_lossy(&out.stdout);
    assert!(theirs.contains("/dev/null"), "the listing worked: {theirs}");
    Ok(mine
        .iter()
        .any(|p| theirs.lines().any(|l| l == p.to_string_lossy())))
}

/// Starts `n` requests to the host that nobody answers and drops each after
/// a moment, long before its timeout; returns how many still wait.
#[agentix::remote]
pub async fn abandon_requests(n: u64) -> usize {
    let plugin = plugin();
    for _ in 0..n {
        let request =
            plugin.request_with_timeout("silent", serde_json::json!({}), Duration::from_secs(300));
        let _ = tokio::time::timeout(Duration::from_millis(1), request).await;
    }
    plugin.waiting_requests().await
}

/// Writes, on the worker's frame pipe, a reply for worker call `id` whose
/// value is text instead of bytes, then sleeps 10 s and returns 1.
#[agentix::remote]
pub async fn reply_garbage(id: u64) -> u32 {
    use ciborium::Value;
    use std::io::Write;
    use std::os::fd::FromRawFd;
    let bad = Value::Map(vec![(
        Value::Text("result".into()),
        Value::Map(vec![
            (Value::Text("id".into()), Value::Integer(id.into())),
            (Value::Text("value".into()), Value::Text("not bytes".into())),
        ]),
    )]);
    // The pipe's layout (`agentix_wire::codec`): body length, envelope
    // length, envelope; no tail.
    let envelope = agentix_wire::cbor::to_vec(&bad).unwrap();
    let mut frame = (envelope.len() as u32 + 4).to_be_bytes().to_vec();
    frame.extend_from_slice(&(envelope.len() as u32).to_be_bytes());
    frame.extend_from_slice(&envelope);
    // SAFETY: fd 4 is the worker's frame pipe; ManuallyDrop leaves it open.
    // The frame is far below PIPE_BUF, so its write is atomic.
    let mut pipe = std::mem::ManuallyDrop::new(unsafe {
        std::fs::File::from_raw_fd(agentix_wire::wire::WORKER_FRAME_OUT_FD)
    });
    let _ = pipe.write_all(&frame);
    tokio::time::sleep(Duration::from_secs(10)).await;
    1
}

/// `threads` threads each print a line and log a record, `rounds` times,
/// alternating: `t<T> line <I>` on stdout, then `t<T> record <I>` through
/// `tracing` (target `order`).
#[agentix::remote]
pub async fn interleave(threads: u32, rounds: u32) -> u32 {
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..rounds {
                    println!("t{t} line {i}");
                    tracing::info!(target: "order", "t{t} record {i}");
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    threads * rounds
}

/// Work instrumented with `tracing`: an `e2e.part` span per part (from
/// `#[instrument]`, with its fields), an agentix `e2e.inner` span inside
/// each, a record logged in each, and one span of a target nobody selects.
#[agentix::remote]
pub async fn instrumented_work(parts: u32) -> u32 {
    let mut done = 0;
    for index in 0..parts {
        done += instrumented_part(index).await;
    }
    let _unselected = tracing::info_span!(target: "unselected", "not.forwarded").entered();
    done
}

#[tracing::instrument(name = "e2e.part", fields(kind = "unit"))]
async fn instrumented_part(index: u32) -> u32 {
    tracing::info!("in part {index}");
    let inner = agentix::trace::span("e2e.inner");
    inner
        .scope(async {
            tokio::task::yield_now().await;
            1
        })
        .await
}

/// The book's code: each chapter's Rust blocks compile as doc tests (run
/// by `cargo test --doc -p agentix-e2e`), so the book cannot drift from the
/// API. Chapters whose code is included from the examples are built with
/// them instead.
#[cfg(doctest)]
mod book {
    #[doc = include_str!("../../docs/src/abridge.md")]
    struct Abridge;
    #[doc = include_str!("../../docs/src/bash-and-files.md")]
    struct BashAndFiles;
    #[doc = include_str!("../../docs/src/bundles.md")]
    struct Bundles;
    #[doc = include_str!("../../docs/src/containers.md")]
    struct Containers;
    #[doc = include_str!("../../docs/src/egress.md")]
    struct Egress;
    #[doc = include_str!("../../docs/src/kubernetes.md")]
    struct Kubernetes;
    #[doc = include_str!("../../docs/src/fleets.md")]
    struct Fleets;
    #[doc = include_str!("../../docs/src/logs-and-traces.md")]
    struct LogsAndTraces;
    #[doc = include_str!("../../docs/src/providers.md")]
    struct Providers;
    #[doc = include_str!("../../docs/src/snapshots.md")]
    struct Snapshots;
    #[doc = include_str!("../../docs/src/remote-functions.md")]
    struct RemoteFunctions;
    #[doc = include_str!("../../docs/src/supervision.md")]
    struct Supervision;
}
