//! [`EgressGateway`]: the host half of `/egress`. Each tunnel the sandbox
//! opens is checked against the policy, its name resolved by the host,
//! and the address checked is the one dialled; then bytes pass each way,
//! the upstream's under the sandbox's window, the sandbox's bounded by the
//! host's (a sandbox that sends past it loses the tunnel).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use agentix::{Attachment, HostEnd, HostHalf, NamespaceFault};
use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::host_name::Destination;
use crate::policy::EgressPolicy;
use crate::protocol::{
    Down, DownAck, DownEnd, Egress, Open, Opened, Up, UpAck, UpEnd, CHUNK, WINDOW,
};
use crate::resolver::{Resolve, SystemResolver};
use crate::window::Window;

/// Tunnels one sandbox may have open at once.
pub const MAX_TUNNELS: usize = 1024;

/// How long dialling one address may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The host half: a policy, and the resolver that turns names into the
/// addresses it checks.
#[derive(Clone)]
pub struct EgressGateway {
    policy: Arc<EgressPolicy>,
    resolver: Arc<dyn Resolve>,
}

impl EgressGateway {
    /// A gateway that lets sandboxes reach what `policy` allows, resolving
    /// names with this machine's resolver.
    pub fn new(policy: EgressPolicy) -> Self {
        EgressGateway {
            policy: Arc::new(policy),
            resolver: Arc::new(SystemResolver),
        }
    }

    /// Resolves names with `resolver` instead (a `MappedResolver` pins them).
    pub fn resolver(mut self, resolver: impl Resolve + 'static) -> Self {
        self.resolver = Arc::new(resolver);
        self
    }

    /// The host half of `/egress` for one sandbox: register it with
    /// `sandbox.register_namespace(..)` before the first call. Its tunnels
    /// end with it.
    pub fn namespace(&self) -> HostHalf<Egress> {
        let tunnels = Arc::new(HostTunnels::default());
        let (up, up_end, acks) = (tunnels.clone(), tunnels.clone(), tunnels.clone());
        let gateway = self.clone();
        HostHalf::<Egress>::new()
            .answer(move |end, open: Open, _| {
                let (gateway, tunnels) = (gateway.clone(), tunnels.clone());
                async move { gateway.open(end, open, tunnels).await }
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

    async fn open(
        &self,
        end: HostEnd<Egress>,
        open: Open,
        tunnels: Arc<HostTunnels>,
    ) -> Result<Opened, NamespaceFault> {
        let refused = |e: crate::refusal::Refusal| NamespaceFault::new("Refused", e.to_string());
        let Open { tunnel, host, port } = open;
        if tunnels.count() >= MAX_TUNNELS {
            return Err(NamespaceFault::new(
                "TooManyTunnels",
                format!("{MAX_TUNNELS} tunnels are open already"),
            ));
        }
        let destination = Destination::parse(&host).map_err(refused)?;
        let addresses = self
            .policy
            .decide(&*self.resolver, &destination, port)
            .await
            .map_err(refused)?;
        let mut last_error = String::from("no address");
        let mut connected = None;
        for address in addresses {
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address)).await {
                Ok(Ok(stream)) => {
                    connected = Some((stream, address));
                    break;
                }
                Ok(Err(e)) => last_error = format!("{address}: {e}"),
                Err(_) => last_error = format!("{address}: no answer in {CONNECT_TIMEOUT:?}"),
            }
        }
        let Some((stream, address)) = connected else {
            return Err(NamespaceFault::new(
                "Unreachable",
                format!("cannot connect to {destination}:{port}: {last_error}"),
            ));
        };
        let _ = stream.set_nodelay(true);
        let (reader, writer) = stream.into_split();
        let (to_upstream, from_sandbox) = mpsc::unbounded_channel();
        let down = Arc::new(Window::default());
        // The tasks hold the table weakly: the namespace owns it, and its
        // end (the sandbox's) drops every tunnel, which stops its tasks.
        let table = Arc::downgrade(&tunnels);
        // Each direction also ends with the sandbox's connection.
        let writing = tokio::spawn(until_closed(
            (end.clone(), table.clone(), tunnel),
            write_up(writer, from_sandbox, tunnel, end.clone(), table.clone()),
        ));
        let reading = tokio::spawn(until_closed(
            (end.clone(), table.clone(), tunnel),
            read_down(reader, tunnel, end, down.clone(), table),
        ));
        let entry = HostTunnel {
            to_upstream,
            queued: AtomicU64::new(0),
            down,
            halves: AtomicU8::new(2),
            tasks: [writing.abort_handle(), reading.abort_handle()],
        };
        if !tunnels.insert(tunnel, entry) {
            return Err(NamespaceFault::new(
                "TunnelInUse",
                format!("tunnel {tunnel} is open already"),
            ));
        }
        Ok(Opened {
            address: address.to_string(),
        })
    }
}

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
    mut writer: tokio::net::tcp::OwnedWriteHalf,
    mut from_sandbox: mpsc::UnboundedReceiver<ToUpstream>,
    tunnel: u64,
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
    mut reader: tokio::net::tcp::OwnedReadHalf,
    tunnel: u64,
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
