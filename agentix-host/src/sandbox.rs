//! [`Sandbox`]: the handle user code calls through.
//!
//! A sandbox connects lazily: its websocket opens on the first call (so host
//! namespaces can still be registered before it) and carries every call
//! after it, and `/log`, `/trace` and the plugin namespaces beside `/rpc`.
//! When the connection is lost, pending calls end with `ConnectionLost` and
//! the next call opens a new one, joining every namespace again. A sandbox
//! created by a provider is deleted when its handle is dropped.

use std::sync::{Arc, Mutex};

use agentix_wire::call_args::CallArgs;
use agentix_wire::cbor;
use agentix_wire::errors::{ErrorKind, RemoteError};
use agentix_wire::remote::{Remote, RemoteStream};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::call::Call;
use crate::config::SandboxConfig;
use crate::connect::Connect;
use crate::connection::{ConnectionSettings, RpcConnection};
use crate::endpoint::{Endpoint, LocalSocket};
use crate::log_replay::{self, LogTap};
use crate::namespace::{self, HostNamespace, HostNamespaceHandle};
use crate::provider_error::ProviderError;
use crate::sandbox_resources::SandboxResources;
use crate::sandbox_state::SandboxState;
use crate::sio::SioClient;
use crate::snapshot::{Snapshot, SnapshotSpec};
use crate::stream::StreamCall;
use crate::trace_replay;
use agentix_trace::TraceHub;
use agentix_wire::register_error::RegisterError;
use agentix_wire::wire::check_plugin_path;
use futures_util::future::BoxFuture;

/// A running sandbox.
pub struct Sandbox {
    id: String,
    endpoint: Endpoint,
    settings: ConnectionSettings,
    conn: Mutex<Option<Arc<RpcConnection>>>,
    connecting: tokio::sync::Mutex<()>,
    log_tap: Option<LogTap>,
    /// Plugin namespaces to join on every connection.
    namespaces: Mutex<Vec<HostNamespace>>,
    /// Set by the first connection: namespaces register before it.
    connected_once: std::sync::atomic::AtomicBool,
    /// The joined plugin namespaces of the current connection, by path.
    joined: Mutex<std::collections::HashMap<String, HostNamespaceHandle>>,
    /// What deletes the sandbox; `None` for a handle that does not own it.
    resources: Option<Arc<dyn SandboxResources>>,
    /// The deadline of unary calls that set none.
    call_timeout: Option<std::time::Duration>,
    /// This sandbox's own processors; its spans go on to the hub it was
    /// created with.
    traces: TraceHub,
}

impl Sandbox {
    /// The handle a provider gives out for a sandbox it started: its server
    /// listens at `addr` (`host:port`) and wants `token`; `resources`
    /// deletes it when the handle is deleted or dropped. Connection settings
    /// come from `config`.
    pub fn from_parts(
        id: impl Into<String>,
        addr: impl Into<String>,
        token: impl Into<String>,
        config: SandboxConfig,
        resources: Arc<dyn SandboxResources>,
    ) -> Self {
        let endpoint = Endpoint {
            addr: addr.into(),
            local: None,
            token: token.into(),
        };
        Sandbox::new(id.into(), endpoint, config, Some(resources))
    }

    /// Has this handle connect through `local` (`unix:PATH`), a Unix socket
    /// the same server (process `server_pid`) listens on beside
    /// [`Sandbox::addr`]: for a host on the sandbox's machine, which then
    /// skips the TCP stack (a quarter to a third less CPU per small call).
    /// A socket that another process holds is not used. Third-party
    /// clients keep using [`Sandbox::addr`].
    pub fn with_local_addr(mut self, local: impl Into<String>, server_pid: u32) -> Self {
        self.endpoint.local = Some(LocalSocket {
            addr: local.into(),
            server_pid,
        });
        self
    }

    fn new(
        id: String,
        endpoint: Endpoint,
        config: SandboxConfig,
        resources: Option<Arc<dyn SandboxResources>>,
    ) -> Self {
        Sandbox {
            id,
            endpoint,
            settings: ConnectionSettings {
                connect_timeout: config.connect_timeout,
                max_message_bytes: config.max_message_bytes,
                heartbeat_interval: config.heartbeat_interval,
                heartbeat_timeout: config.heartbeat_timeout,
            },
            conn: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            log_tap: config.log_tap.clone(),
            namespaces: Mutex::new(Vec::new()),
            connected_once: std::sync::atomic::AtomicBool::new(false),
            joined: Mutex::new(std::collections::HashMap::new()),
            resources,
            call_timeout: config.call_timeout,
            traces: config.hub_to_trace_to().child(),
        }
    }

    /// The sandbox's own trace hub: a processor added here sees this
    /// sandbox's spans (replayed from it, and those its plugin namespaces'
    /// host handlers make) and no other's; they go on to the hub the
    /// sandbox was created with ([`SandboxConfig::trace_hub`]).
    pub fn traces(&self) -> &TraceHub {
        &self.traces
    }

    /// What deletes the sandbox, if this handle owns it.
    pub(crate) fn resources(&self) -> Option<&Arc<dyn SandboxResources>> {
        self.resources.as_ref()
    }

    /// Gives up owning the sandbox (its registry keeps it instead): the
    /// handle is then one like [`Provider::get`](crate::Provider::get) gives.
    pub(crate) fn take_resources(&mut self) -> Option<Arc<dyn SandboxResources>> {
        self.resources.take()
    }

    /// A second handle, not owning it, on sandbox `id` at `endpoint`.
    pub(crate) fn another(id: &str, endpoint: Endpoint, config: SandboxConfig) -> Self {
        Sandbox::new(id.to_owned(), endpoint, config, None)
    }

    /// A handle on a server someone else started, at `addr` (`host:port`)
    /// with `token`; dropping it leaves the server running.
    pub fn attach(addr: impl Into<String>, token: impl Into<String>) -> Self {
        Sandbox::attach_with(addr, token, SandboxConfig::new(""))
    }

    /// Like [`Sandbox::attach`], with the connection settings of `config`
    /// (timeouts, heartbeat, message limit; its bundle is not used).
    pub fn attach_with(
        addr: impl Into<String>,
        token: impl Into<String>,
        config: SandboxConfig,
    ) -> Self {
        let addr = addr.into();
        let endpoint = Endpoint {
            addr: addr.clone(),
            local: None,
            token: token.into(),
        };
        Sandbox::new(format!("attached-{addr}"), endpoint, config, None)
    }

    /// The sandbox's id (unique per provider).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Where its server listens (`host:port`), for third-party Socket.IO clients.
    pub fn addr(&self) -> &str {
        &self.endpoint.addr
    }

    /// The Unix socket this handle connects through instead of
    /// [`Sandbox::addr`] (`unix:PATH`), if its provider gave one.
    pub fn local_addr(&self) -> Option<&str> {
        self.endpoint.local.as_ref().map(|l| l.addr.as_str())
    }

    /// Where its server listens, the token, and how this host dials it.
    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Its token, for third-party clients (`auth: {"token": ..}`).
    pub fn token(&self) -> &str {
        &self.endpoint.token
    }

    /// The local server's process id, for a sandbox of the local provider.
    pub fn server_pid(&self) -> Option<u32> {
        self.resources.as_ref().and_then(|r| r.server_pid())
    }

    /// The private working directory, for a sandbox of the local provider.
    pub fn local_dir(&self) -> Option<&std::path::Path> {
        self.resources.as_ref().and_then(|r| r.local_dir())
    }

    /// Calls the remote function `f` with `args`: the argument tuple, or
    /// for a function of one argument the bare value ([`CallArgs`]).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # #[allow(non_upper_case_globals)]
    /// # mod app {
    /// #     use agentix_wire::remote::Remote;
    /// #     pub const run: Remote<(String,), String> = Remote::new("app::run");
    /// #     pub const add: Remote<(i64, i64), i64> = Remote::new("app::add");
    /// #     pub const slow: Remote<(), ()> = Remote::new("app::slow");
    /// # }
    /// # async fn demo(sandbox: &agentix_host::Sandbox) -> Result<(), agentix_wire::RemoteError> {
    /// let out = sandbox.remote(app::run, "hello".to_string()).await?;
    /// let sum = sandbox.remote(app::add, (2, 3)).await?;
    /// sandbox.remote(app::slow, ()).timeout(Duration::from_secs(5)).await?;
    /// # Ok(()) }
    /// ```
    pub fn remote<A: Serialize, O: DeserializeOwned>(
        &self,
        f: Remote<A, O>,
        args: impl CallArgs<A>,
    ) -> Call<'_, O> {
        Call::new(self, f.name(), cbor::to_vec(&args.into_args()))
    }

    /// Starts the streaming remote function `f` with `args` (the argument
    /// tuple, or the bare value of a single argument).
    ///
    /// ```no_run
    /// # use futures_util::StreamExt;
    /// # #[allow(non_upper_case_globals)]
    /// # mod app {
    /// #     use agentix_wire::remote::RemoteStream;
    /// #     pub const count: RemoteStream<(u64,), u64> = RemoteStream::new("app::count");
    /// # }
    /// # async fn demo(sandbox: &agentix_host::Sandbox) -> Result<(), agentix_wire::RemoteError> {
    /// let mut items = sandbox.stream(app::count, 100u64).await?;
    /// while let Some(n) = items.next().await {
    ///     let n: u64 = n?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn stream<A: Serialize, T: DeserializeOwned>(
        &self,
        f: RemoteStream<A, T>,
        args: impl CallArgs<A>,
    ) -> StreamCall<'_, T> {
        StreamCall::new(self, f.name().to_owned(), cbor::to_vec(&args.into_args()))
    }

    /// Starts the streaming function `target` by name with JSON arguments
    /// (as [`Sandbox::call_json`]); items arrive as JSON values.
    pub fn stream_json(
        &self,
        target: &str,
        args: serde_json::Value,
    ) -> StreamCall<'_, serde_json::Value> {
        StreamCall::new(self, target.to_owned(), cbor::to_vec(&args))
    }

    /// Opens the connection now, joining `/log`, `/trace` and the plugin
    /// namespaces, instead of at the first call: for a handle that only
    /// listens (to logs, to a namespace's events).
    pub async fn connect(&self) -> Result<(), RemoteError> {
        self.connection().await.map(drop)
    }

    /// Calls `target` by name with CBOR-encoded arguments; returns CBOR.
    pub async fn call_cbor(&self, target: &str, args: &[u8]) -> Result<Vec<u8>, RemoteError> {
        self.call_bytes(target, args.to_vec()).await.map(Vec::from)
    }

    /// Calls `target` with CBOR `args`, taking them without a copy.
    pub(crate) async fn call_bytes(
        &self,
        target: &str,
        args: Vec<u8>,
    ) -> Result<bytes::Bytes, RemoteError> {
        let conn = self.connection().await?;
        conn.call(target, args).await
    }

    /// Calls `target` by name with JSON arguments: an array (positional), an
    /// object (by parameter name) or, for one parameter, the bare value.
    pub async fn call_json(
        &self,
        target: &str,
        args: serde_json::Value,
    ) -> Result<serde_json::Value, RemoteError> {
        let args = cbor::to_vec(&args)?;
        cbor::to_json(&self.call_cbor(target, &args).await?)
    }

    /// The server's `/health` report, with this host's own under `host`:
    /// what each plugin namespace turned away because it was full
    /// (`host.namespaces["/path"]`, a [`crate::NamespaceLoad`]).
    pub async fn health(&self) -> Result<serde_json::Value, RemoteError> {
        let mut report =
            crate::health::fetch(&self.endpoint, self.settings.connect_timeout).await?;
        let namespaces: serde_json::Map<String, serde_json::Value> = self
            .namespaces
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|ns| (ns.path.clone(), serde_json::json!(ns.load())))
            .collect();
        if let Some(fields) = report.as_object_mut() {
            fields.insert(
                "host".into(),
                serde_json::json!({ "namespaces": namespaces }),
            );
        }
        Ok(report)
    }

    /// Freezes the sandbox's work: its worker and every process it started
    /// stop (SIGSTOP, found by the tag they all carry) until
    /// [`resume`](Self::resume). Calls made meanwhile wait; a call's
    /// timeout keeps counting. The sandbox's server goes on, so its
    /// connection, heartbeat and log live on; `/health` says `paused`. A
    /// worker that is replaced while paused (it was killed) starts thawed.
    /// Answers how many processes were stopped.
    pub async fn pause(&self) -> Result<usize, RemoteError> {
        self.pause_or_resume(true)
            .await
            .map(|(processes, _)| processes)
    }

    /// Thaws what [`pause`](Self::pause) froze; calls that waited go on.
    /// Answers how many processes were continued.
    pub async fn resume(&self) -> Result<usize, RemoteError> {
        self.pause_or_resume(false)
            .await
            .map(|(processes, _)| processes)
    }

    /// Captures the sandbox's state into a [`Snapshot`] its provider keeps
    /// (for a local sandbox: its directory, what its code wrote there), its
    /// work paused meanwhile so the state is consistent (a sandbox that was
    /// paused already stays paused). Start sandboxes
    /// from it with [`Provider::create_from`](crate::Provider::create_from)
    /// (or [`Provider::fork`](crate::Provider::fork) for both at once).
    pub async fn snapshot(&self, spec: SnapshotSpec) -> Result<Snapshot, ProviderError> {
        let Some(resources) = self.resources.clone() else {
            return Err(ProviderError::Backend {
                what: "snapshot a sandbox".into(),
                reason: "an attached handle does not own the sandbox; its provider's does".into(),
            });
        };
        let paused = |e: RemoteError| ProviderError::Backend {
            what: format!("pause sandbox {} for its snapshot", self.id),
            reason: e.to_string(),
        };
        let (_, was_paused) = self.pause_or_resume(true).await.map_err(paused)?;
        let state = SandboxState::new(&self.id, &self.endpoint, self.settings.connect_timeout);
        let taken = resources.snapshot(state, spec).await;
        // Resumed whatever became of the snapshot, unless it was paused
        // before (by its owner, who resumes it).
        let resumed = match was_paused {
            true => Ok((0, true)),
            false => self.pause_or_resume(false).await,
        };
        let snapshot = taken?;
        resumed.map_err(|e| ProviderError::Backend {
            what: format!("resume sandbox {} after its snapshot", self.id),
            reason: e.to_string(),
        })?;
        Ok(snapshot)
    }

    /// Writes the sandbox's state (the directories its server was told
    /// hold it, `--state-dir`) as one tar archive to the new file `to`;
    /// the archive's bytes. Pause the sandbox first for a consistent
    /// state.
    pub async fn download_state(&self, to: &std::path::Path) -> Result<u64, RemoteError> {
        SandboxState::new(&self.id, &self.endpoint, self.settings.connect_timeout)
            .download(to)
            .await
    }

    /// Pauses or resumes: how many processes were signalled, and whether
    /// the worker was paused before.
    async fn pause_or_resume(&self, pause: bool) -> Result<(usize, bool), RemoteError> {
        let path = if pause { "/pause" } else { "/resume" };
        let (status, body) = crate::health::request(
            &self.endpoint,
            hyper::Method::POST,
            path,
            self.settings.connect_timeout,
        )
        .await?;
        if !status.is_success() {
            let why = body["error"].as_str().unwrap_or("no reason given");
            let kind = match status {
                // No worker runs: it is starting, restarting or gone.
                hyper::StatusCode::CONFLICT => ErrorKind::WorkerExited,
                hyper::StatusCode::UNAUTHORIZED => ErrorKind::AuthRejected,
                _ => ErrorKind::ServerUnreachable,
            };
            return Err(RemoteError::new(kind, format!("POST {path}: {why}")));
        }
        let processes = body["processes"].as_u64().unwrap_or(0) as usize;
        Ok((processes, body["was_paused"].as_bool().unwrap_or(false)))
    }

    pub(crate) async fn connection(&self) -> Result<Arc<RpcConnection>, RemoteError> {
        if let Some(conn) = self.live_connection() {
            return Ok(conn);
        }
        // Boxed: connecting is a large future, and inlining it would make
        // every call's future that large (and slow to move) for one use.
        Box::pin(self.open_connection()).await
    }

    async fn open_connection(&self) -> Result<Arc<RpcConnection>, RemoteError> {
        let _one_at_a_time = self.connecting.lock().await;
        if let Some(conn) = self.live_connection() {
            return Ok(conn);
        }
        if let Some(err) = self.server_exited_error() {
            return Err(err);
        }
        let conn = match RpcConnection::connect(&self.endpoint, self.settings).await {
            Ok(conn) => conn,
            Err(e) => return Err(self.explain_unreachable(e).await),
        };
        if let Some(resources) = &self.resources {
            let ended = resources.ended();
            let weak = Arc::downgrade(&conn);
            tokio::spawn(async move {
                let error = ended.await;
                if let Some(conn) = weak.upgrade() {
                    conn.fail(error);
                }
            });
        }
        self.connected_once
            .store(true, std::sync::atomic::Ordering::Release);
        self.join_side_channels(conn.client()).await;
        *self.conn.lock().unwrap_or_else(|p| p.into_inner()) = Some(conn.clone());
        Ok(conn)
    }

    /// Joins `/log`, `/trace` and the plugin namespaces on `client`, all at
    /// once; a failure costs that namespace, not the calls.
    async fn join_side_channels(&self, client: &SioClient) {
        let id: Arc<str> = Arc::from(self.id.as_str());
        let plugins = self
            .namespaces
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let joins = plugins.into_iter().map(|ns| {
            let path = ns.path.clone();
            async move {
                let joined = namespace::join(client, &self.endpoint, ns, self.traces.clone());
                (path, joined.await)
            }
        });
        let (logs, traces, plugins) = tokio::join!(
            log_replay::listen(client, &self.endpoint, id.clone(), self.log_tap.clone()),
            trace_replay::listen(client, &self.endpoint, id, self.traces.clone()),
            futures_util::future::join_all(joins),
        );
        for (what, joined) in [("logs", logs), ("traces", traces)] {
            if let Err(e) = joined {
                tracing::warn!(sandbox = %self.id, "sandbox {what} will not reach this host: {e}")
            }
        }
        let mut joined = self.joined.lock().unwrap_or_else(|p| p.into_inner());
        joined.clear();
        for (path, outcome) in plugins {
            match outcome {
                Ok(ns) => {
                    joined.insert(path, ns);
                }
                Err(e) => {
                    tracing::warn!(sandbox = %self.id, path, "plugin namespace not joined: {e}")
                }
            }
        }
    }

    /// Registers a host-side plugin namespace; it is joined when the
    /// sandbox first connects, so this must come before the first call.
    pub fn register_namespace(
        &self,
        namespace: impl Into<HostNamespace>,
    ) -> Result<(), RegisterError> {
        let namespace = namespace.into();
        check_plugin_path(&namespace.path).map_err(RegisterError::BadPath)?;
        let mut list = self.namespaces.lock().unwrap_or_else(|p| p.into_inner());
        if self
            .connected_once
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return Err(RegisterError::AfterConnect);
        }
        if list.iter().any(|n| n.path == namespace.path) {
            return Err(RegisterError::Duplicate(namespace.path));
        }
        list.push(namespace.with_own_budget());
        Ok(())
    }

    /// Emits `event` with `data` to the sandbox on plugin namespace `path`
    /// (registered with [`Sandbox::register_namespace`]); connects first if
    /// no connection is open.
    pub async fn emit(
        &self,
        path: &str,
        event: &str,
        data: serde_json::Value,
    ) -> Result<(), RemoteError> {
        self.joined_namespace(path).await?.emit(event, data).await
    }

    /// The host's typed end of protocol `P`'s namespace on the current
    /// connection (its half registered with
    /// [`Sandbox::register_namespace`]), to send `P`'s events and requests
    /// to the sandbox; connects first if no connection is open. After a
    /// reconnection, ask again.
    pub async fn namespace<P: agentix_actors::protocol::Protocol>(
        &self,
    ) -> Result<crate::HostEnd<P>, RemoteError> {
        self.joined_namespace(P::PATH)
            .await
            .map(crate::HostEnd::new)
    }

    /// The joined namespace at `path` on the current connection.
    async fn joined_namespace(&self, path: &str) -> Result<HostNamespaceHandle, RemoteError> {
        self.connection().await?;
        let ns = self
            .joined
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(path)
            .cloned();
        match ns {
            Some(ns) => Ok(ns),
            None => Err(RemoteError::new(
                ErrorKind::Protocol,
                format!(
                    "no joined namespace `{path}`: register it before the first call \
                     (or the server refused it: see the log)"
                ),
            )),
        }
    }

    fn live_connection(&self) -> Option<Arc<RpcConnection>> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        conn.as_ref().filter(|c| c.is_alive()).cloned()
    }

    /// A server that refuses connections has usually just died: wait a
    /// moment for its provider to see the end, and say that, not
    /// "unreachable".
    async fn explain_unreachable(&self, error: RemoteError) -> RemoteError {
        let Some(resources) = self.resources.as_ref() else {
            return error;
        };
        if error.kind != ErrorKind::ServerUnreachable {
            return error;
        }
        let ended = resources.ended();
        tokio::time::timeout(std::time::Duration::from_secs(1), ended)
            .await
            .unwrap_or(error)
    }

    /// Resolves, with the error calls end with, once the sandbox's server
    /// has ended by itself; `None` for a handle whose provider cannot tell
    /// (an attached one, for instance).
    pub fn ended(&self) -> Option<BoxFuture<'static, RemoteError>> {
        self.resources.as_ref().map(|r| r.ended())
    }

    fn server_exited_error(&self) -> Option<RemoteError> {
        self.resources.as_ref()?.ended_now()
    }

    /// Deletes the sandbox now and waits until its processes are gone.
    pub async fn delete(mut self) {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(conn) = conn {
            conn.close().await;
        }
        if let Some(resources) = self.resources.take() {
            resources.shutdown().await;
        }
    }
}

impl Connect for Sandbox {
    fn connection(&self) -> BoxFuture<'_, Result<Arc<RpcConnection>, RemoteError>> {
        Box::pin(Sandbox::connection(self))
    }

    fn call_timeout(&self) -> Option<std::time::Duration> {
        self.call_timeout
    }

    fn server_ended(&self) -> Option<BoxFuture<'static, RemoteError>> {
        self.ended()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.lock().unwrap_or_else(|p| p.into_inner()).take() {
            conn.close_in_background("the sandbox was dropped");
        }
        if let Some(resources) = self.resources.take() {
            // The deletion starts with the call; nobody waits for it here.
            drop(resources.shutdown());
        }
    }
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("id", &self.id)
            .field("addr", &self.endpoint.addr)
            .field("local_addr", &self.endpoint.local)
            .finish_non_exhaustive()
    }
}
