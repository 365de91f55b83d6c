//! The sandbox half: an HTTP proxy on 127.0.0.1 inside the sandbox, each
//! of whose connections is a tunnel through the host ([`serve_proxy`]).
//!
//! Each client connection gets a tunnel number, asks the host to `Open`
//! it, and on success passes bytes each way: the client's as `Up` events
//! under the host's window, the upstream's (`Down`) written to the client
//! and acknowledged. A refusal is the client's `403` with the host's
//! reason. The proxy's state lives in the worker's context.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use agentix::{Attachment, RemoteSioError, SandboxEnd, SandboxHalf};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::protocol::{Down, DownAck, DownEnd, Egress, Open, TunnelTo, Up, UpAck, UpEnd, CHUNK};
use crate::proxy_request::{parse, ProxyRequest, MAX_HEAD};
use crate::window::Window;

/// Why the proxy could not start.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EgressError {
    /// What went wrong.
    pub message: String,
}

impl std::fmt::Display for EgressError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for EgressError {}

/// What reaches a tunnel's writer to its client.
enum ToClient {
    Bytes(Bytes),
    End(Option<String>),
}

/// One tunnel, as the sandbox half keeps it.
struct SandboxTunnel {
    /// Unbounded in items, bounded in bytes by the host's window (the host
    /// is the trusted side: it sends at most
    /// [`WINDOW`](crate::protocol::WINDOW) unacknowledged).
    to_client: mpsc::UnboundedSender<ToClient>,
    up: Arc<Window>,
}

/// One worker's proxy: its namespace end, tunnels, and URL.
struct ProxyState {
    end: OnceLock<SandboxEnd<Egress>>,
    tunnels: Mutex<HashMap<u64, SandboxTunnel>>,
    next: AtomicU64,
    url: Mutex<Option<String>>,
    /// `Basic` credentials a request must carry: the base64 of
    /// `egress:<token>`, the token in the URL [`serve_proxy`] returns.
    credential: String,
    /// `egress:<token>`, for the URL.
    user_token: String,
    /// The span of the call that started the proxy, if one did: its
    /// connections' spans go under it.
    parent: Mutex<Option<agentix::trace::SpanContext>>,
}

impl Default for ProxyState {
    fn default() -> Self {
        use base64::Engine;
        let user_token = format!("{USER}:{}", agentix::random_hex(16));
        ProxyState {
            end: OnceLock::new(),
            tunnels: Mutex::default(),
            next: AtomicU64::new(0),
            url: Mutex::new(None),
            credential: base64::engine::general_purpose::STANDARD.encode(&user_token),
            user_token,
            parent: Mutex::new(None),
        }
    }
}

/// The user name in the proxy's URL.
const USER: &str = "egress";

/// Whether a request's `Proxy-Authorization` carries `credential`.
fn authorized(header: Option<&str>, credential: &str) -> bool {
    let given = header
        .and_then(|h| h.strip_prefix("Basic "))
        .unwrap_or_default()
        .trim();
    // Every byte compared, equal or not: no early exit to time.
    given.len() == credential.len()
        && given
            .bytes()
            .zip(credential.bytes())
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

impl ProxyState {
    fn tunnels(&self) -> std::sync::MutexGuard<'_, HashMap<u64, SandboxTunnel>> {
        self.tunnels.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Starts the proxy on 127.0.0.1:`port` (0: any free port) and returns its
/// URL (`http://egress:<token>@127.0.0.1:PORT`) for `HTTP_PROXY` and
/// `HTTPS_PROXY`; if it already runs, returns its URL. A request without
/// the URL's credential gets `407`: under `Isolation::None` the port is on
/// the host's loopback, where any local process could reach it. The host
/// must have registered the egress gateway's namespace.
///
/// A sandbox made from `EgressGateway::prepare`'s config needs no call:
/// its workers start the proxy themselves and put its URL in the
/// environment of every process they start.
#[agentix::remote]
pub async fn serve_proxy(port: u16) -> Result<String, EgressError> {
    let worker = agentix::WorkerContext::current().ok_or_else(|| EgressError {
        message: "the egress proxy runs in an Agentix worker".into(),
    })?;
    start(&worker, port)
}

/// The variable that makes a worker start the proxy before its first call
/// (its value: the port, `0` for any) and export its URL.
pub const PROXY_PORT_VAR: &str = "AGENTIX_EGRESS_PROXY_PORT";

/// The variables a started proxy's URL goes into: both spellings, since
/// curl reads only the lowercase `http_proxy`, and others only uppercase.
pub const PROXY_VARS: [&str; 6] = [
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// What `NO_PROXY` says: the sandbox's own loopback is reached directly
/// (the proxy's named routes live there).
pub const NO_PROXY: &str = "localhost,127.0.0.1,::1";

agentix::on_worker_start!(start_for_worker);

/// Starts the proxy in a worker whose sandbox asked for it
/// ([`PROXY_PORT_VAR`]) and exports its URL, so that curl, pip, git and
/// HTTP libraries in processes the worker starts use it unchanged.
fn start_for_worker() {
    let Ok(port) = std::env::var(PROXY_PORT_VAR) else {
        return;
    };
    let started = port
        .parse::<u16>()
        .map_err(|_| format!("{PROXY_PORT_VAR}={port} is not a port"))
        .and_then(|port| {
            let worker =
                agentix::WorkerContext::current().ok_or_else(|| "no worker context".to_owned())?;
            start(&worker, port).map_err(|e| e.message)
        });
    match started {
        Ok(url) => {
            // The worker has taken no call yet and its threads are idle:
            // nothing reads the environment while it changes.
            for var in PROXY_VARS {
                std::env::set_var(var, &url);
            }
            for var in ["NO_PROXY", "no_proxy"] {
                std::env::set_var(var, NO_PROXY);
            }
        }
        Err(why) => eprintln!("agentix worker: the egress proxy did not start: {why}"),
    }
}

/// Starts `worker`'s proxy on 127.0.0.1:`port` unless it runs; its URL.
/// Runs inside the worker's runtime.
fn start(worker: &agentix::WorkerContext, port: u16) -> Result<String, EgressError> {
    let failed = |message: String| EgressError { message };
    let state = worker.state::<ProxyState>();
    let mut url = state.url.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(url) = url.clone() {
        return Ok(url);
    }
    let end = match state.end.get() {
        Some(end) => end.clone(),
        None => {
            let end = sandbox_half(&state)
                .register_in(worker)
                .map_err(|e| failed(format!("cannot open /egress: {e}")))?;
            state.end.get_or_init(|| end).clone()
        }
    };
    let listener = std::net::TcpListener::bind(("127.0.0.1", port))
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .and_then(TcpListener::from_std)
        .map_err(|e| failed(format!("cannot listen on 127.0.0.1:{port}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| failed(format!("no local address: {e}")))?;
    let started = format!("http://{}@{addr}", state.user_token);
    *state.parent.lock().unwrap_or_else(|p| p.into_inner()) = agentix::trace::current();
    *url = Some(started.clone());
    drop(url);
    tokio::spawn(accept(listener, end, state));
    Ok(started)
}

/// The sandbox half's handlers: the host's bytes and acknowledgements, to
/// the tunnels they name (one that names none is dropped).
fn sandbox_half(state: &Arc<ProxyState>) -> SandboxHalf<Egress> {
    let (down, down_end, acks) = (state.clone(), state.clone(), state.clone());
    SandboxHalf::<Egress>::new()
        .on(move |_, Down { tunnel, bytes }| {
            let to_client = down.tunnels().get(&tunnel).map(|t| t.to_client.clone());
            async move {
                if let Some(to_client) = to_client {
                    let _ = to_client.send(ToClient::Bytes(bytes.into_bytes()));
                }
            }
        })
        .on(move |_, DownEnd { tunnel, error }| {
            let to_client = down_end.tunnels().get(&tunnel).map(|t| t.to_client.clone());
            async move {
                if let Some(to_client) = to_client {
                    let _ = to_client.send(ToClient::End(error));
                }
            }
        })
        .on(move |_, UpAck { tunnel, bytes }| {
            if let Some(t) = acks.tunnels().get(&tunnel) {
                t.up.ack(bytes);
            }
            async {}
        })
}

async fn accept(listener: TcpListener, end: SandboxEnd<Egress>, state: Arc<ProxyState>) {
    loop {
        match listener.accept().await {
            Ok((client, _)) => {
                // A tunnel's small writes (an SSH keystroke, a TLS alert)
                // go at once, not after the client's delayed ACK.
                let _ = client.set_nodelay(true);
                tokio::spawn(serve_client(client, end.clone(), state.clone()));
            }
            Err(e) => {
                tracing::warn!("egress proxy: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

async fn serve_client(mut client: TcpStream, end: SandboxEnd<Egress>, state: Arc<ProxyState>) {
    let mut buf = Vec::with_capacity(4096);
    let head = loop {
        match parse(&buf) {
            Ok(Some(head)) => break head,
            Ok(None) => {}
            Err(why) => return refuse(&mut client, 400, "Bad Request", &why).await,
        }
        let mut chunk = [0u8; 4096];
        match client.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) if buf.len() + n <= MAX_HEAD + 4096 => buf.extend_from_slice(&chunk[..n]),
            Ok(_) => return refuse(&mut client, 431, "Too Large", "request head too large").await,
        }
    };
    if !authorized(head.authorization.as_deref(), &state.credential) {
        let why = "no or a wrong credential: use the proxy URL serve_proxy returned";
        return refuse(&mut client, 407, "Proxy Authentication Required", why).await;
    }
    let early = buf.split_off(head.used);
    let (to, first) = match head.request {
        ProxyRequest::Connect { host, port } => (TunnelTo::Address { host, port }, None),
        ProxyRequest::Forward { host, port, head } => {
            (TunnelTo::Address { host, port }, Some(head))
        }
        ProxyRequest::Route { name, head } => (TunnelTo::Route { name }, Some(head)),
    };
    let tunnel = state.next.fetch_add(1, Ordering::Relaxed);
    // Known before `Open` goes out: the host's first bytes may follow its
    // answer at once.
    let (to_client, from_host) = mpsc::unbounded_channel();
    let up = Arc::new(Window::default());
    state.tunnels().insert(
        tunnel,
        SandboxTunnel {
            to_client,
            up: up.clone(),
        },
    );
    let parent = state
        .parent
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let open = Open { tunnel, to, parent };
    match end.request(&open).await {
        Ok(_) => {}
        Err(e) => {
            state.tunnels().remove(&tunnel);
            let why = match e {
                RemoteSioError::Raised { message, .. } => message,
                other => other.to_string(),
            };
            return refuse(&mut client, 403, "Forbidden", &why).await;
        }
    }
    if first.is_none()
        && client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .is_err()
    {
        end.emit(&UpEnd { tunnel });
        state.tunnels().remove(&tunnel);
        return;
    }
    let (reader, writer) = client.into_split();
    let pending: Vec<Bytes> = first
        .into_iter()
        .map(Bytes::from)
        .chain((!early.is_empty()).then(|| Bytes::from(early)))
        .collect();
    let upward = tokio::spawn(send_up(reader, pending, tunnel, end.clone(), up.clone()));
    write_down(writer, from_host, tunnel, &end).await;
    up.close();
    let _ = upward.await;
    state.tunnels().remove(&tunnel);
}

/// The client's bytes to the host, under the window, then `UpEnd`.
async fn send_up(
    mut reader: tokio::net::tcp::OwnedReadHalf,
    pending: Vec<Bytes>,
    tunnel: u64,
    end: SandboxEnd<Egress>,
    window: Arc<Window>,
) {
    for bytes in pending {
        if !send_chunk(bytes, tunnel, &end, &window).await {
            return;
        }
    }
    let mut buf = vec![0u8; CHUNK];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if !send_chunk(Bytes::copy_from_slice(&buf[..n]), tunnel, &end, &window).await {
                    return;
                }
            }
        }
    }
    end.emit_paced(&UpEnd { tunnel }).await;
}

async fn send_chunk(bytes: Bytes, tunnel: u64, end: &SandboxEnd<Egress>, window: &Window) -> bool {
    for piece in bytes.chunks(CHUNK) {
        if !window.take(piece.len()).await {
            return false;
        }
        let up = Up {
            tunnel,
            bytes: Attachment::new(bytes.slice_ref(piece)),
        };
        end.emit_paced(&up).await;
    }
    true
}

/// The host's bytes to the client, each acknowledged once written, until
/// the host's `DownEnd`.
async fn write_down(
    mut writer: tokio::net::tcp::OwnedWriteHalf,
    mut from_host: mpsc::UnboundedReceiver<ToClient>,
    tunnel: u64,
    end: &SandboxEnd<Egress>,
) {
    while let Some(message) = from_host.recv().await {
        match message {
            ToClient::Bytes(bytes) => {
                if writer.write_all(&bytes).await.is_err() {
                    break;
                }
                end.emit(&DownAck {
                    tunnel,
                    bytes: bytes.len() as u64,
                });
            }
            ToClient::End(error) => {
                if let Some(error) = error {
                    tracing::debug!(tunnel, "egress tunnel ended: {error}");
                }
                break;
            }
        }
    }
    let _ = writer.shutdown().await;
}

async fn refuse(client: &mut TcpStream, status: u16, reason: &str, why: &str) {
    let body = format!("{why}\n");
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(response.as_bytes()).await;
    let _ = client.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_urls_own_credential_is_authorized() {
        let state = ProxyState::default();
        let right = format!("Basic {}", state.credential);
        assert!(authorized(Some(&right), &state.credential));
        assert!(state.user_token.starts_with("egress:"));
        let other = ProxyState::default();
        let wrong = format!("Basic {}", other.credential);
        for header in [None, Some(""), Some("Basic "), Some(wrong.as_str())] {
            assert!(!authorized(header, &state.credential), "{header:?}");
        }
        let bearer = format!("Bearer {}", state.credential);
        assert!(!authorized(Some(&bearer), &state.credential));
    }
}
