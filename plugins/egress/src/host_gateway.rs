//! [`EgressGateway`]: the host half of `/egress`. Each tunnel the sandbox
//! opens is checked against the policy, its name resolved by the host,
//! and the address checked is the one dialled (or it goes to one of the
//! host's named routes, whose headers the host adds); then bytes pass
//! each way, the upstream's under the sandbox's window, the sandbox's
//! bounded by the host's (a sandbox that sends past it loses the tunnel).
//! Every connection is a span on the sandbox's trace hub and, if the
//! gateway keeps one, a line of its audit log.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use agentix::{
    Attachment, HostEnd, HostHalf, NamespaceFault, RegisterError, Sandbox, SandboxConfig,
};
use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::audit_log::AuditLog;
use crate::connection_watch::{ConnectionWatch, RecordSinks, Traffic};
use crate::host_name::Destination;
use crate::policy::EgressPolicy;
use crate::protocol::{
    Down, DownAck, DownEnd, Egress, Open, Opened, TunnelTo, Up, UpAck, UpEnd, CHUNK, WINDOW,
};
use crate::resolver::{Resolve, SystemResolver};
use crate::route::EgressRoute;
use crate::route_server::{open_route, ResolveWith, RouteClient};
use crate::sandbox_proxy::PROXY_PORT_VAR;
use crate::window::Window;

/// Tunnels one sandbox may have open at once.
pub const MAX_TUNNELS: usize = 1024;

/// How long dialling one address may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The host half: a policy, the resolver that turns names into the
/// addresses it checks, the named routes, and where records go.
#[derive(Clone)]
pub struct EgressGateway {
    policy: Arc<EgressPolicy>,
    resolver: Arc<dyn Resolve>,
    routes: Arc<HashMap<String, Arc<EgressRoute>>>,
    extra_roots: Vec<Vec<u8>>,
    /// Made on first use, shared by every sandbox's namespace (one pool of
    /// upstream connections); a builder call that changes it starts anew.
    route_client: Arc<OnceLock<Result<RouteClient, String>>>,
    audit: Option<Arc<AuditLog>>,
}

impl EgressGateway {
    /// A gateway that lets sandboxes reach what `policy` allows, resolving
    /// names with this machine's resolver.
    pub fn new(policy: EgressPolicy) -> Self {
        EgressGateway {
            policy: Arc::new(policy),
            resolver: Arc::new(SystemResolver),
            routes: Arc::default(),
            extra_roots: Vec::new(),
            route_client: Arc::default(),
            audit: None,
        }
    }

    /// Resolves names with `resolver` instead (a `MappedResolver` pins
    /// them); routes' upstreams too.
    pub fn resolver(mut self, resolver: impl Resolve + 'static) -> Self {
        self.resolver = Arc::new(resolver);
        self.route_client = Arc::default();
        self
    }

    /// Adds a named route (its name replaces a route of the same name):
    /// inside the sandbox, `$HTTP_PROXY/<name>/rest` reaches the route's
    /// upstream with the headers it adds. Routes are the host's own
    /// choice: the policy does not apply to them.
    pub fn route(mut self, route: EgressRoute) -> Self {
        Arc::make_mut(&mut self.routes).insert(route.name.clone(), Arc::new(route));
        self
    }

    /// Also trusts the DER-encoded certificate `der` for `https://` routes
    /// (a private CA's, say); the public roots are trusted anyway. A
    /// certificate that does not parse makes every route request a 502
    /// saying so.
    pub fn add_root_certificate(mut self, der: impl Into<Vec<u8>>) -> Self {
        self.extra_roots.push(der.into());
        self.route_client = Arc::default();
        self
    }

    /// Appends a JSON line ([`EgressRecord`](crate::EgressRecord)) for every
    /// connection to `path`: allowed, refused or failed, its bytes each
    /// way and its duration.
    pub fn audit_log(mut self, path: impl AsRef<Path>) -> std::io::Result<Self> {
        self.audit = Some(Arc::new(AuditLog::create(path)?));
        Ok(self)
    }

    /// `config`, set so that each of the sandbox's workers starts the
    /// proxy before its first call and puts its URL in `HTTP_PROXY`,
    /// `HTTPS_PROXY`, `ALL_PROXY` (both spellings) and `NO_PROXY` for every
    /// process it starts. Then [`attach`](Self::attach) the sandbox.
    pub fn prepare(&self, config: SandboxConfig) -> SandboxConfig {
        config.env(PROXY_PORT_VAR, "0")
    }

    /// Registers the host half of `/egress` for `sandbox`, its records
    /// labelled with the sandbox's id.
    pub fn attach(&self, sandbox: &Sandbox) -> Result<(), RegisterError> {
        sandbox.register_namespace(self.namespace_for(Some(sandbox.id().into())))
    }

    /// The host half of `/egress` for one sandbox: register it with
    /// `sandbox.register_namespace(..)` before the first call. Its tunnels
    /// end with it.
    pub fn namespace(&self) -> HostHalf<Egress> {
        self.namespace_for(None)
    }

    fn namespace_for(&self, sandbox: Option<Arc<str>>) -> HostHalf<Egress> {
        let tunnels = Arc::new(HostTunnels::default());
        let (up, up_end, acks) = (tunnels.clone(), tunnels.clone(), tunnels.clone());
        let gateway = self.clone();
        HostHalf::<Egress>::new()
            .answer(move |end, open: Open, _| {
                let (gateway, tunnels) = (gateway.clone(), tunnels.clone());
                let sinks = RecordSinks {
                    hub: end.traces().clone(),
                    audit: gateway.audit.clone(),
                    sandbox: sandbox.clone(),
                };
                async move { gateway.open(end, open, tunnels, sinks).await }
            })
            .on(move |_, Up { tunnel, bytes }| {
                up.up(tunnel, bytes);
                async {}
            })
            .on(move |_, UpEnd { tunnel }| {
                up_end.send(tunnel, ToUpstream::End);
                async {}
            })
            .on(move |_, DownAck { tunnel, bytes }| {
                acks.ack(tunnel, bytes);
                async {}
            })
    }

    fn route_client(&self) -> Result<RouteClient, String> {
        self.route_client
            .get_or_init(|| {
                agentix_upstream::client_config(&self.extra_roots).map(|tls| {
                    agentix_upstream::client_resolving(tls, ResolveWith(self.resolver.clone()))
                })
            })
            .clone()
    }

    async fn open(
        &self,
        end: HostEnd<Egress>,
        open: Open,
        tunnels: Arc<HostTunnels>,
        sinks: RecordSinks,
    ) -> Result<Opened, NamespaceFault> {
        let Open { tunnel, to, parent } = open;
        let mut watch = ConnectionWatch::start(&sinks, &to, parent);
        let refuse = |watch: ConnectionWatch, decision: &str, kind: &str, why: String| {
            watch.ended_early(decision, &why);
            Err(NamespaceFault::new(kind, why))
        };
        if tunnels.get(tunnel).is_some() {
            let why = format!("tunnel {tunnel} is open already");
            return refuse(watch, "refused", "TunnelInUse", why);
        }
        if tunnels.count() >= MAX_TUNNELS {
            let why = format!("{MAX_TUNNELS} tunnels are open already");
            return refuse(watch, "refused", "TooManyTunnels", why);
        }
        let (address, reader, writer): (String, Box<dyn Reader>, Box<dyn Writer>) = match to {
            TunnelTo::Route { name } => {
                let Some(route) = self.routes.get(&name) else {
                    let mut known: Vec<_> = self.routes.keys().map(String::as_str).collect();
                    known.sort_unstable();
                    let why = format!(
                        "egress to route `{name}` refused: the host has no such route \
                         (its routes: {})",
                        if known.is_empty() {
                            "none".to_owned()
                        } else {
                            known.join(", ")
                        }
                    );
                    return refuse(watch, "refused", "Refused", why);
                };
                let (reader, writer) =
                    tokio::io::split(open_route(route.clone(), self.route_client()));
                (route.base.clone(), Box::new(reader), Box::new(writer))
            }
            TunnelTo::Address { host, port } => match self.dial(&host, port).await {
                Ok((stream, address)) => {
                    let (reader, writer) = stream.into_split();
                    (address, Box::new(reader), Box::new(writer))
                }
                Err((decision, kind, why)) => return refuse(watch, decision, kind, why),
            },
        };
        watch.connected(address.clone());
        let traffic = watch.traffic.clone();
        let (to_upstream, from_sandbox) = mpsc::unbounded_channel();
        let down = Arc::new(Window::default());
        // The tasks hold the table weakly: the namespace owns it, and its
        // end (the sandbox's) drops every tunnel, which stops its tasks.
        let table = Arc::downgrade(&tunnels);
        // Each direction also ends with the sandbox's connection.
        let writing = tokio::spawn(until_closed(
            (end.clone(), table.clone(), tunnel),
            write_up(
                writer,
                from_sandbox,
                (tunnel, traffic.clone()),
                end.clone(),
                table.clone(),
            ),
        ));
        let reading = tokio::spawn(until_closed(
            (end.clone(), table.clone(), tunnel),
            read_down(reader, (tunnel, traffic), end, down.clone(), table),
        ));
        let entry = HostTunnel {
            to_upstream,
            queued: AtomicU64::new(0),
            down,
            halves: AtomicU8::new(2),
            tasks: [writing.abort_handle(), reading.abort_handle()],
            _watch: watch,
        };
        if !tunnels.insert(tunnel, entry) {
            return Err(NamespaceFault::new(
                "TunnelInUse",
                format!("tunnel {tunnel} is open already"),
            ));
        }
        Ok(Opened { address })
    }

    /// Checks `host:port` against the policy and connects to the address
    /// checked; or why not (`refused` by the policy, or `failed`).
    async fn dial(
        &self,
        host: &str,
        port: u16,
    ) -> Result<(TcpStream, String), (&'static str, &'static str, String)> {
        let refused = |e: crate::refusal::Refusal| ("refused", "Refused", e.to_string());
        let destination = Destination::parse(host).map_err(refused)?;
        let addresses = self
            .policy
            .decide(&*self.resolver, &destination, port)
            .await
            .map_err(refused)?;
        let mut last_error = String::from("no address");
        for address in addresses {
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address)).await {
                Ok(Ok(stream)) => {
                    let _ = stream.set_nodelay(true);
                    return Ok((stream, address.to_string()));
                }
                Ok(Err(e)) => last_error = format!("{address}: {e}"),
                Err(_) => last_error = format!("{address}: no answer in {CONNECT_TIMEOUT:?}"),
            }
        }
        Err((
            "failed",
            "Unreachable",
            format!("cannot connect to {destination}:{port}: {last_error}"),
        ))
    }
}

/// A tunnel's upstream side, read (a TCP stream's, or a route server's).
trait Reader: AsyncRead + Send + Unpin {}
impl<T: AsyncRead + Send + Unpin> Reader for T {}

/// A tunnel's upstream side, written.
trait Writer: AsyncWrite + Send + Unpin {}
impl<T: AsyncWrite + Send + Unpin> Writer for T {}

/// What reaches a tunnel's writer to the upstream.
enum ToUpstream {
    Bytes(Bytes),
    End,
}

/// One tunnel, as the host keeps it; dropping it stops its tasks.
struct HostTunnel {
    /// Unbounded in items; bounded in bytes by `queued` against the window.
    to_upstream: mpsc::UnboundedSender<ToUpstream>,
    queued: AtomicU64,
    down: Arc<Window>,
    /// Directions still running; the tunnel goes when both have ended.
    halves: AtomicU8,
    tasks: [AbortHandle; 2],
    /// Its span and record, finished when the tunnel goes.
    _watch: ConnectionWatch,
}

impl Drop for HostTunnel {
    fn drop(&mut self) {
        self.down.close();
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// One sandbox's tunnels; dropped with its namespace, which ends them.
#[derive(Default)]
struct HostTunnels(Mutex<HashMap<u64, Arc<HostTunnel>>>);

impl HostTunnels {
    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<HostTunnel>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn count(&self) -> usize {
        self.table().len()
    }

    fn get(&self, tunnel: u64) -> Option<Arc<HostTunnel>> {
        self.table().get(&tunnel).cloned()
    }

    /// Adds `entry` unless the number is taken.
    fn insert(&self, tunnel: u64, entry: HostTunnel) -> bool {
        let mut table = self.table();
        if table.contains_key(&tunnel) {
            return false;
        }
        table.insert(tunnel, Arc::new(entry));
        true
    }

    /// The sandbox's bytes for `tunnel`; past the window, it loses the tunnel.
    fn up(&self, tunnel: u64, bytes: Attachment) {
        let Some(entry) = self.get(tunnel) else {
            return;
        };
        let len = bytes.len() as u64;
        if entry.queued.fetch_add(len, Ordering::AcqRel) + len > WINDOW {
            tracing::warn!(
                tunnel,
                "a sandbox sent past its egress window; tunnel closed"
            );
            self.table().remove(&tunnel);
            return;
        }
        let _ = entry
            .to_upstream
            .send(ToUpstream::Bytes(bytes.into_bytes()));
    }

    fn send(&self, tunnel: u64, message: ToUpstream) {
        if let Some(entry) = self.get(tunnel) {
            let _ = entry.to_upstream.send(message);
        }
    }

    fn ack(&self, tunnel: u64, bytes: u64) {
        if let Some(entry) = self.get(tunnel) {
            entry.down.ack(bytes);
        }
    }

    /// One direction of `tunnel` ended; the second removes it.
    fn half_done(&self, tunnel: u64) {
        let mut table = self.table();
        let last = table
            .get(&tunnel)
            .is_some_and(|t| t.halves.fetch_sub(1, Ordering::AcqRel) == 1);
        if last {
            table.remove(&tunnel);
        }
    }
}

/// Runs `direction` until it ends or the sandbox's connection does: then
/// the tunnel goes, its upstream connection closed, and its number is free
/// for a restarted worker's tunnels.
async fn until_closed(
    (end, tunnels, tunnel): (HostEnd<Egress>, Weak<HostTunnels>, u64),
    direction: impl std::future::Future<Output = ()>,
) {
    tokio::select! {
        () = direction => {}
        () = end.closed() => {
            if let Some(tunnels) = tunnels.upgrade() {
                tunnels.table().remove(&tunnel);
            }
        }
    }
}

/// The sandbox's bytes to the upstream, each acknowledged once written.
async fn write_up(
    mut writer: Box<dyn Writer>,
    mut from_sandbox: mpsc::UnboundedReceiver<ToUpstream>,
    (tunnel, traffic): (u64, Arc<Traffic>),
    end: HostEnd<Egress>,
    tunnels: Weak<HostTunnels>,
) {
    while let Some(message) = from_sandbox.recv().await {
        match message {
            ToUpstream::Bytes(bytes) => {
                if writer.write_all(&bytes).await.is_err() {
                    break;
                }
                let len = bytes.len() as u64;
                traffic.up.fetch_add(len, Ordering::Relaxed);
                if let Some(entry) = tunnels.upgrade().and_then(|t| t.get(tunnel)) {
                    entry.queued.fetch_sub(len, Ordering::AcqRel);
                }
                let _ = end.emit(&UpAck { tunnel, bytes: len }).await;
            }
            ToUpstream::End => break,
        }
    }
    let _ = writer.shutdown().await;
    if let Some(tunnels) = tunnels.upgrade() {
        tunnels.half_done(tunnel);
    }
}

/// The upstream's bytes to the sandbox, under its window, then `DownEnd`.
async fn read_down(
    mut reader: Box<dyn Reader>,
    (tunnel, traffic): (u64, Arc<Traffic>),
    end: HostEnd<Egress>,
    window: Arc<Window>,
    tunnels: Weak<HostTunnels>,
) {
    let mut buf = vec![0u8; CHUNK];
    let error = loop {
        match reader.read(&mut buf).await {
            Ok(0) => break None,
            Ok(n) => {
                if !window.take(n).await {
                    break Some("the tunnel closed".to_owned());
                }
                traffic.down.fetch_add(n as u64, Ordering::Relaxed);
                let down = Down {
                    tunnel,
                    bytes: Attachment::new(buf[..n].to_vec()),
                };
                if end.emit(&down).await.is_err() {
                    break Some("the sandbox is gone".to_owned());
                }
            }
            Err(e) => break Some(e.to_string()),
        }
    };
    let _ = end.emit(&DownEnd { tunnel, error }).await;
    if let Some(tunnels) = tunnels.upgrade() {
        tunnels.half_done(tunnel);
    }
}
