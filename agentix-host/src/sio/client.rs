//! [`SioClient`]: one websocket to a sandbox server, every namespace of the
//! sandbox multiplexed on it.
//!
//! A reader task owns the receiving half: it answers pings, detects a
//! server that stopped pinging, collects binary attachments, and hands each
//! event to its namespace's handler on the spot (handlers only route: they
//! complete a waiting call or queue work for a task of their own, so one
//! namespace never holds another back).
//!
//! Sending takes a lock over the writing half for a packet and all of its
//! attachments, so concurrent emits never interleave frames; measured, that
//! beats a writer task fed by a channel by about 40 µs at p50 under load.
//! The lock plus the websocket's own write buffer is the whole outgoing
//! queue: a socket the server stops reading makes `emit` wait, never
//! memory grow. An emit whose future is dropped halfway hands the rest of
//! its packet to a task, so the stream of frames stays well formed.
//!
//! An emit flushes one scheduler turn after it wrote its packet, unless
//! another emit's flush already carried it: the packets a runtime writes
//! in one turn (a task that starts 64 calls at once, say) leave in one
//! socket write instead of one write each.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{Sink, SinkExt, StreamExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::{oneshot, watch, OwnedMutexGuard};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::header::{HeaderValue, AUTHORIZATION};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use agentix_wire::part::{MAX_SOCKET_MESSAGE_BYTES, SOCKET_READ_BYTES};
use agentix_wire::wire::{decode_event, WithAttachments};

use super::error::SioError;
use super::packet::{self, Decoder, Inbound, RawPayload};
use super::server_stream::ServerStream;

type Ws = WebSocketStream<ServerStream>;
type Writer = SplitSink<Ws, Message>;

/// Room for an event's JSON header beside its largest attachment.
const HEADER_SLACK: usize = 64 << 10;

/// What a namespace's handler is told.
pub(crate) enum Delivery {
    /// An event arrived on the namespace.
    Event(Incoming),
    /// The namespace is gone (the connection died, or the server left it);
    /// nothing more will arrive.
    Closed(SioError),
}

/// Handles what arrives on one namespace; runs on the reader task, so it
/// must not block.
pub(crate) type Handler = Arc<dyn Fn(Delivery) + Send + Sync>;

/// One incoming event: its name, its payload undecoded, and the client it
/// came on (to answer with).
pub(crate) struct Incoming {
    name: String,
    payload: RawPayload,
    client: SioClient,
}

impl Incoming {
    /// The event's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The bytes the event holds: its JSON and its attachments.
    pub(crate) fn payload_len(&self) -> usize {
        let frames: usize = self.payload.frames.iter().map(|f| f.len()).sum();
        self.payload.json.len() + frames
    }

    /// The packet's JSON (`[name, payload, ..]`), attachments as placeholders.
    pub(crate) fn json(&self) -> &str {
        self.payload.json.as_str()
    }

    /// The client the event came on.
    pub(crate) fn client(&self) -> &SioClient {
        &self.client
    }

    /// Decodes the payload (the event's first argument), attachments
    /// included, without copying them.
    pub(crate) fn decode<T: DeserializeOwned + WithAttachments>(self) -> Result<T, SioError> {
        decode_event(self.payload.json.as_str(), self.payload.frames)
            .map_err(|e| SioError::Malformed(format!("event `{}`: {e}", self.name)))
    }

    /// Like [`decode`](Self::decode), giving the event back with the
    /// error, to read its JSON again as another type (its attachments are
    /// spent: a second read finds none).
    pub(crate) fn try_decode<T: DeserializeOwned + WithAttachments>(
        mut self,
    ) -> Result<T, (SioError, Incoming)> {
        let frames = std::mem::take(&mut self.payload.frames);
        match decode_event(self.payload.json.as_str(), frames) {
            Ok(payload) => Ok(payload),
            Err(e) => {
                let error = SioError::Malformed(format!("event `{}`: {e}", self.name));
                Err((error, self))
            }
        }
    }
}

/// How a client connects and how much it accepts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientSettings {
    /// How long connecting, the handshake and each namespace join may take.
    pub connect_timeout: Duration,
    /// Largest payload (one binary attachment) in either direction.
    pub max_message_bytes: usize,
}

/// A Socket.IO v5 client over one Engine.IO v4 websocket; cheap to clone.
#[derive(Clone)]
pub(crate) struct SioClient {
    shared: Arc<Shared>,
}

struct Shared {
    writer: Arc<tokio::sync::Mutex<Writer>>,
    /// Packets handed to the writer so far; counted under its lock.
    written: AtomicU64,
    /// How many of those a flush has pushed to the socket.
    flushed: AtomicU64,
    /// Wakes the task that answers pings.
    pings: Arc<tokio::sync::Notify>,
    pong_task: tokio::task::AbortHandle,
    namespaces: Mutex<HashMap<String, Slot>>,
    /// `Some(reason)` once the connection is gone.
    closed: watch::Sender<Option<SioError>>,
    reader: tokio::task::AbortHandle,
    settings: ClientSettings,
}

enum Slot {
    Joining(Handler, oneshot::Sender<Result<(), SioError>>),
    Joined(Handler),
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.reader.abort();
        self.pong_task.abort();
    }
}

/// Sends a pong each time `pings` is notified, until the connection goes.
async fn answer_pings(shared: Weak<Shared>, pings: Arc<tokio::sync::Notify>) {
    loop {
        pings.notified().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if (SioClient { shared })
            .send(vec![packet::pong()])
            .await
            .is_err()
        {
            return;
        }
    }
}

impl SioClient {
    /// Opens a websocket over the stream `dial` opens (it names the address
    /// it reached), presenting `token` as `Authorization: Bearer` (the
    /// server opens no session without it), and completes the Engine.IO
    /// handshake, no namespace joined yet; the connect timeout covers
    /// dialing and the handshakes together.
    pub(crate) async fn connect_via<'a>(
        dial: impl std::future::Future<Output = std::io::Result<(ServerStream, &'a str)>>,
        token: &str,
        settings: ClientSettings,
    ) -> Result<SioClient, SioError> {
        let deadline = tokio::time::Instant::now() + settings.connect_timeout;
        let timeout = settings.connect_timeout;
        let within = |what: &'static str| {
            move |_| SioError::Unreachable(format!("{what} took longer than {timeout:?}"))
        };
        let (stream, addr) = tokio::time::timeout_at(deadline, dial)
            .await
            .map_err(within("connecting"))?
            .map_err(|e| SioError::Unreachable(e.to_string()))?;
        // The server sends payloads past SPLIT_ABOVE in parts, so a larger
        // message is JSON, refused on its header before it is buffered.
        let max_frame = settings
            .max_message_bytes
            .min(MAX_SOCKET_MESSAGE_BYTES)
            .saturating_add(HEADER_SLACK);
        let config = WebSocketConfig::default()
            .read_buffer_size(SOCKET_READ_BYTES)
            .max_message_size(Some(max_frame))
            .max_frame_size(Some(max_frame));
        let url = format!(
            "ws://{}/socket.io/?EIO=4&transport=websocket",
            ServerStream::authority(addr)
        );
        let mut request = url
            .as_str()
            .into_client_request()
            .map_err(|e| SioError::Unreachable(format!("bad server address {addr}: {e}")))?;
        let bearer = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| SioError::AuthRejected("the token is not a valid header value".into()))?;
        request.headers_mut().insert(AUTHORIZATION, bearer);
        let (ws, _) = tokio::time::timeout_at(
            deadline,
            tokio_tungstenite::client_async_with_config(request, stream, Some(config)),
        )
        .await
        .map_err(within("the websocket handshake"))?
        .map_err(|e| match e {
            WsError::Http(res) if res.status() == 401 => {
                SioError::AuthRejected(format!("the server at {addr} refused the token (HTTP 401)"))
            }
            e => SioError::Unreachable(format!("websocket handshake with {addr}: {e}")),
        })?;
        let (writer, mut reader) = ws.split();
        let mut decoder = Decoder::new(settings.max_message_bytes);
        let open = loop {
            let message = tokio::time::timeout_at(deadline, reader.next())
                .await
                .map_err(within("the Engine.IO handshake"))?;
            match message {
                Some(Ok(Message::Text(text))) => match decoder.text(text.as_str()) {
                    Ok(Inbound::Open(open)) => break open,
                    Ok(_) => continue,
                    Err(e) => return Err(SioError::Protocol(e.to_string())),
                },
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(SioError::Unreachable(format!("handshake: {e}"))),
                None => {
                    return Err(SioError::Unreachable(
                        "the server closed the connection during the handshake".into(),
                    ))
                }
            }
        };
        let silence_limit = open.ping_interval + open.ping_timeout;
        let (closed, _) = watch::channel(None);
        // The reader is spawned while the connection is being built, and a
        // runtime thread may run it at once. It waits until the connection
        // exists: without the wait, a message already buffered behind the
        // handshake found no connection to report to, the reader ended, and
        // nothing read the socket again.
        let (built, wait_until_built) = oneshot::channel::<()>();
        let shared = Arc::new_cyclic(|weak: &Weak<Shared>| {
            let reader = tokio::spawn(read_loop_once_built(
                wait_until_built,
                weak.clone(),
                reader,
                decoder,
                silence_limit,
            ));
            let pings = Arc::new(tokio::sync::Notify::new());
            let pong_task = tokio::spawn(answer_pings(weak.clone(), pings.clone()));
            Shared {
                writer: Arc::new(tokio::sync::Mutex::new(writer)),
                written: AtomicU64::new(0),
                flushed: AtomicU64::new(0),
                pings,
                pong_task: pong_task.abort_handle(),
                namespaces: Mutex::new(HashMap::new()),
                closed,
                reader: reader.abort_handle(),
                settings,
            }
        });
        let _ = built.send(());
        Ok(SioClient { shared })
    }

    /// Joins namespace `ns` with the connect payload `auth`; `handler` gets
    /// every event from the moment the server accepts.
    pub(crate) async fn join(
        &self,
        ns: &str,
        auth: &serde_json::Value,
        handler: Handler,
    ) -> Result<(), SioError> {
        let (tx, rx) = oneshot::channel();
        {
            let mut namespaces = self.namespaces();
            if namespaces.contains_key(ns) {
                return Err(SioError::Protocol(format!("{ns} is already joined")));
            }
            namespaces.insert(ns.to_owned(), Slot::Joining(handler, tx));
        }
        if let Err(e) = self.send(vec![packet::encode_connect(ns, auth)]).await {
            self.namespaces().remove(ns);
            return Err(e);
        }
        let timeout = self.shared.settings.connect_timeout;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(self.closed_reason()),
            Err(_) => {
                self.namespaces().remove(ns);
                Err(SioError::Unreachable(format!(
                    "{ns} was not accepted within {timeout:?}"
                )))
            }
        }
    }

    /// Emits `event` with `data` on `ns`; byte fields (`serde_bytes`, an
    /// [`agentix_wire::wire::Attachment`]) travel as binary attachments.
    /// Waits while the socket cannot take more.
    pub(crate) async fn emit<T: Serialize + ?Sized>(
        &self,
        ns: &str,
        event: &str,
        data: &T,
    ) -> Result<(), SioError> {
        let messages = packet::encode_event(ns, event, data).map_err(SioError::Encode)?;
        self.send(messages).await
    }

    /// [`SioClient::emit`] for a payload whose bytes are all
    /// [`Attachment`](agentix_wire::attachment::Attachment)s (a call, a
    /// part): their bytes go out as they are, not copied once more.
    pub(crate) async fn emit_attachments<T: Serialize + ?Sized>(
        &self,
        ns: &str,
        event: &str,
        data: &T,
    ) -> Result<(), SioError> {
        let messages =
            packet::encode_attachments_event(ns, event, data).map_err(SioError::Encode)?;
        self.send(messages).await
    }

    /// Whether the connection is gone.
    pub(crate) fn is_closed(&self) -> bool {
        self.shared.closed.borrow().is_some()
    }

    /// Waits until the connection is gone; returns why.
    pub(crate) async fn closed(&self) -> SioError {
        let mut rx = self.shared.closed.subscribe();
        let reason = match rx.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone(),
            Err(_) => None,
        };
        reason.unwrap_or_else(closed_by_us)
    }

    /// Closes the connection (every namespace at once); handlers get
    /// `Closed(reason)`. A peer that stopped reading gets a second at most.
    pub(crate) async fn disconnect(&self, reason: SioError) {
        self.shut(reason);
        close_writer(self.shared.writer.clone()).await;
    }

    /// Like [`SioClient::disconnect`], without waiting for the close to be sent.
    pub(crate) fn disconnect_in_background(&self, reason: SioError) {
        self.shut(reason);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(close_writer(self.shared.writer.clone()));
        }
    }

    fn namespaces(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        self.shared
            .namespaces
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn closed_reason(&self) -> SioError {
        self.shared
            .closed
            .borrow()
            .clone()
            .unwrap_or_else(closed_by_us)
    }

    /// Marks the connection gone for `reason` and tells every namespace.
    fn shut(&self, reason: SioError) {
        shut(&self.shared, reason);
    }

    async fn send(&self, messages: Vec<Message>) -> Result<(), SioError> {
        if let Some(big) = messages.iter().find(|m| m.len() > MAX_SOCKET_MESSAGE_BYTES) {
            return Err(SioError::Encode(format!(
                "an event of {} bytes of JSON is over the {} MiB a websocket message may \
                 carry; send large data as bytes (serde_bytes, Blob), which travel in parts",
                big.len(),
                MAX_SOCKET_MESSAGE_BYTES >> 20
            )));
        }
        if self.is_closed() {
            return Err(self.closed_reason());
        }
        let closed = self.closed();
        tokio::pin!(closed);
        // Waiting for the lock sends nothing, so giving up there is clean.
        let guard = tokio::select! {
            guard = self.shared.writer.clone().lock_owned() => guard,
            reason = &mut closed => return Err(reason),
        };
        let mut out = Outgoing {
            guard: Some(guard),
            queue: messages.into(),
            shared: Arc::downgrade(&self.shared),
        };
        let written = tokio::select! {
            written = out.write() => written,
            reason = &mut closed => return Err(reason),
        };
        let result = match written {
            Ok(seq) => {
                let unflushed = Unflushed {
                    shared: Arc::downgrade(&self.shared),
                    seq,
                };
                // Every emit the runtime runs before this task's next turn
                // joins the same flush.
                tokio::task::yield_now().await;
                tokio::select! {
                    flushed = unflushed.flush() => flushed,
                    reason = &mut closed => return Err(reason),
                }
            }
            Err(e) => Err(e),
        };
        result.map_err(|e| {
            let reason = SioError::Lost(format!("sending failed: {e}"));
            self.shut(reason.clone());
            reason
        })
    }
}

/// Sends a close frame if the socket takes it within a second.
async fn close_writer(writer: Arc<tokio::sync::Mutex<Writer>>) {
    let _ = tokio::time::timeout(Duration::from_secs(1), async move {
        writer.lock().await.close().await
    })
    .await;
}

fn closed_by_us() -> SioError {
    SioError::Lost("the connection was closed".into())
}

fn shut(shared: &Shared, reason: SioError) {
    let first = shared.closed.send_if_modified(|closed| {
        if closed.is_some() {
            return false;
        }
        *closed = Some(reason.clone());
        true
    });
    if !first {
        return;
    }
    shared.reader.abort();
    shared.pong_task.abort();
    let slots: Vec<Slot> = shared
        .namespaces
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .drain()
        .map(|(_, slot)| slot)
        .collect();
    for slot in slots {
        match slot {
            Slot::Joining(_, done) => {
                let _ = done.send(Err(reason.clone()));
            }
            Slot::Joined(handler) => handler(Delivery::Closed(reason.clone())),
        }
    }
}

/// One packet's messages on their way out, under the writer lock.
struct Outgoing {
    guard: Option<OwnedMutexGuard<Writer>>,
    queue: VecDeque<Message>,
    shared: Weak<Shared>,
}

impl Outgoing {
    /// Hands the packet to the writer without flushing it; returns its
    /// sequence number among the packets written.
    async fn write(&mut self) -> Result<u64, WsError> {
        let writer = self.guard.as_mut().expect("held until done");
        // Each message leaves the queue only once the sink took it, so a
        // drop at any await leaves exactly the rest to send.
        while !self.queue.is_empty() {
            std::future::poll_fn(|cx| Sink::poll_ready(std::pin::Pin::new(&mut **writer), cx))
                .await?;
            let message = self.queue.pop_front().expect("not empty");
            Sink::start_send(std::pin::Pin::new(&mut **writer), message)?;
        }
        let seq = match self.shared.upgrade() {
            Some(shared) => shared.written.fetch_add(1, Ordering::AcqRel) + 1,
            None => 0,
        };
        self.guard = None;
        Ok(seq)
    }
}

/// A packet the writer holds that no flush has pushed out yet.
struct Unflushed {
    shared: Weak<Shared>,
    seq: u64,
}

impl Unflushed {
    fn pending(&self, shared: &Shared) -> bool {
        shared.flushed.load(Ordering::Acquire) < self.seq
    }

    /// Flushes the writer unless a flush since the packet was written
    /// already carried it.
    async fn flush(mut self) -> Result<(), WsError> {
        let Some(shared) = self.shared.upgrade() else {
            return Ok(());
        };
        if !self.pending(&shared) {
            return Ok(());
        }
        let mut writer = shared.writer.lock().await;
        let result = flush_all(&shared, &mut writer).await;
        // Flushed or failed (which shuts the connection): nothing for
        // `drop` to finish.
        self.seq = 0;
        result
    }
}

/// Flushes everything written so far; called under the writer lock.
async fn flush_all(shared: &Shared, writer: &mut Writer) -> Result<(), WsError> {
    let upto = shared.written.load(Ordering::Acquire);
    if shared.flushed.load(Ordering::Acquire) >= upto {
        return Ok(());
    }
    writer.flush().await?;
    shared.flushed.fetch_max(upto, Ordering::AcqRel);
    leave_no_waker(writer);
    Ok(())
}

/// Leaves the writer holding a waker that does nothing.
///
/// The websocket crate wakes the task that last flushed whenever the
/// socket turns readable (a read of its may need to write a pong), so the
/// task that sent a call was woken by every message that arrived after it,
/// one wasted thread wake-up per reply. Flushing again with nothing
/// buffered costs no system call and replaces that task's waker.
fn leave_no_waker(writer: &mut Writer) {
    let mut noop = std::task::Context::from_waker(std::task::Waker::noop());
    let _ = Sink::poll_flush(std::pin::Pin::new(writer), &mut noop);
}

impl Drop for Unflushed {
    fn drop(&mut self) {
        // An emit given up between writing and flushing must not leave its
        // packet in the buffer until some later emit.
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        if !self.pending(&shared) || shared.closed.borrow().is_some() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            shut(
                &shared,
                SioError::Lost("a send was abandoned unflushed".into()),
            );
            return;
        };
        let weak = self.shared.clone();
        drop(shared);
        rt.spawn(async move {
            let Some(shared) = weak.upgrade() else { return };
            let mut closed = shared.closed.subscribe();
            let finish = async {
                let mut writer = shared.writer.lock().await;
                if let Err(e) = flush_all(&shared, &mut writer).await {
                    shut(&shared, SioError::Lost(format!("sending failed: {e}")));
                }
            };
            tokio::select! {
                () = finish => {}
                _ = closed.wait_for(Option::is_some) => {}
            }
        });
    }
}

impl Drop for Outgoing {
    fn drop(&mut self) {
        let Some(mut guard) = self.guard.take() else {
            return;
        };
        // A closed connection needs no well-formed end.
        let Some(client) = self.shared.upgrade().map(|shared| SioClient { shared }) else {
            return;
        };
        if client.is_closed() {
            return;
        }
        let queue = std::mem::take(&mut self.queue);
        let shared = self.shared.clone();
        // Only a client, not the connection, is kept alive by the task: it
        // holds a weak reference, and ends when the connection closes.
        drop(client);
        let finish = async move {
            let mut result = Ok(());
            for message in queue {
                result = guard.feed(message).await;
                if result.is_err() {
                    break;
                }
            }
            if result.is_ok() {
                if let Some(shared) = shared.upgrade() {
                    shared.written.fetch_add(1, Ordering::AcqRel);
                    result = flush_all(&shared, &mut guard).await;
                } else {
                    result = guard.flush().await;
                }
            }
            if let (Err(e), Some(shared)) = (result, shared.upgrade()) {
                shut(&shared, SioError::Lost(format!("sending failed: {e}")));
            }
        };
        let closed = self
            .shared
            .upgrade()
            .map(|shared| shared.closed.subscribe());
        let finish = async move {
            let Some(mut closed) = closed else { return };
            tokio::select! {
                () = finish => {}
                _ = closed.wait_for(Option::is_some) => {}
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(finish);
            }
            // No runtime to finish on: half a packet would corrupt the stream.
            Err(_) => {
                if let Some(shared) = self.shared.upgrade() {
                    shut(
                        &shared,
                        SioError::Lost("a send was abandoned halfway".into()),
                    );
                }
            }
        }
    }
}

/// [`read_loop`], once `built` says the connection it reports to exists
/// (a dropped sender: it never will, and there is nothing to read for).
async fn read_loop_once_built(
    built: oneshot::Receiver<()>,
    shared: Weak<Shared>,
    reader: SplitStream<Ws>,
    decoder: Decoder,
    silence_limit: Duration,
) {
    if built.await.is_ok() {
        read_loop(shared, reader, decoder, silence_limit).await;
    }
}

async fn read_loop(
    shared: Weak<Shared>,
    mut reader: SplitStream<Ws>,
    mut decoder: Decoder,
    silence_limit: Duration,
) {
    let reason = loop {
        let message = match tokio::time::timeout(silence_limit, reader.next()).await {
            Ok(Some(Ok(message))) => message,
            Ok(Some(Err(e))) => break SioError::Lost(format!("the connection failed: {e}")),
            Ok(None) => break SioError::Lost("the server closed the connection".into()),
            Err(_) => {
                break SioError::Lost(format!(
                    "the server sent nothing, not even a ping, for {silence_limit:?}; \
                     it is hung or unreachable"
                ))
            }
        };
        let inbound = match message {
            Message::Text(text) => decoder.text(text.as_str()),
            Message::Binary(bytes) => {
                if bytes.len() >= agentix_wire::process::LARGE_BUFFER {
                    // Keeps a tuned allocator from trimming mid-flow.
                    agentix_wire::process::note_large_buffer();
                }
                decoder.binary(bytes)
            }
            Message::Close(_) => break SioError::Lost("the server closed the connection".into()),
            _ => continue,
        };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let client = SioClient { shared };
        match inbound {
            Ok(inbound) => {
                if let Some(reason) = client.dispatch(inbound) {
                    break reason;
                }
            }
            Err(e) => break SioError::Protocol(e.to_string()),
        }
    };
    if let Some(shared) = shared.upgrade() {
        shut(&shared, reason);
    }
}

impl SioClient {
    /// Acts on one inbound packet; `Some(reason)` ends the connection.
    fn dispatch(&self, inbound: Inbound) -> Option<SioError> {
        match inbound {
            Inbound::Ping => {
                // One task answers every ping, and pings that arrive while
                // it sends are answered by one more pong: a server that
                // pings faster than it reads costs nothing more.
                self.shared.pings.notify_one();
            }
            Inbound::Close => {
                return Some(SioError::Lost("the server closed the connection".into()))
            }
            Inbound::Connected(ns) => {
                let mut namespaces = self.namespaces();
                if let Some(Slot::Joining(handler, done)) = namespaces.remove(&ns) {
                    namespaces.insert(ns, Slot::Joined(handler));
                    let _ = done.send(Ok(()));
                }
            }
            Inbound::ConnectRefused { ns, message } => {
                let slot = self.namespaces().remove(&ns);
                let error = if message.contains("auth rejected") {
                    SioError::AuthRejected(message)
                } else {
                    SioError::Refused(format!("{ns}: {message}"))
                };
                match slot {
                    Some(Slot::Joining(_, done)) => {
                        let _ = done.send(Err(error));
                    }
                    Some(Slot::Joined(handler)) => handler(Delivery::Closed(error)),
                    None => {}
                }
            }
            Inbound::Disconnected(ns) => {
                if let Some(Slot::Joined(handler)) = self.namespaces().remove(&ns) {
                    handler(Delivery::Closed(SioError::Lost(format!(
                        "the server left {ns}"
                    ))));
                }
            }
            Inbound::Event { ns, event } => {
                let handler = match self.namespaces().get(&ns) {
                    Some(Slot::Joined(handler)) => handler.clone(),
                    _ => {
                        tracing::debug!(ns, "an event on a namespace not joined; dropped");
                        return None;
                    }
                };
                let name = match event_name(&event) {
                    Ok(name) => name,
                    Err(e) => {
                        tracing::warn!(ns, "an event without a readable name; dropped: {e}");
                        return None;
                    }
                };
                handler(Delivery::Event(Incoming {
                    name,
                    payload: event,
                    client: self.clone(),
                }));
            }
            Inbound::Open(_) | Inbound::Nothing => {}
        }
        None
    }
}

/// The name of an event (`[name, payload..]`), read without reading the
/// payload after it: the handler parses that, and it may be megabytes that
/// a full scan here would read twice.
fn event_name(event: &RawPayload) -> Result<String, String> {
    let json = event.json.as_bytes();
    let elements = json
        .trim_ascii_start()
        .strip_prefix(b"[")
        .ok_or("an event is not a JSON array")?;
    serde_json::Deserializer::from_slice(elements)
        .into_iter::<String>()
        .next()
        .ok_or("an event without a name")?
        .map_err(|e| e.to_string())
}

impl std::fmt::Debug for SioClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SioClient")
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name_of(json: &str) -> Result<String, String> {
        event_name(&RawPayload {
            json: json.to_owned().into(),
            frames: Vec::new(),
        })
    }

    #[test]
    fn an_events_name_is_read_without_its_payload() {
        assert_eq!(name_of(r#"["log", {"a": 1}]"#).unwrap(), "log");
        assert_eq!(name_of(r#" [ "a\"b" ,1]"#).unwrap(), "a\"b");
        assert_eq!(name_of(r#"["ping"]"#).unwrap(), "ping");
        // The payload is its handler's to read, and to refuse.
        assert_eq!(name_of(r#"["stream", {"half": "#).unwrap(), "stream");
        assert!(name_of(r#"{"not": "an array"}"#).is_err());
        assert!(name_of("[]").is_err());
        assert!(name_of("[42, 1]").is_err());
    }

    /// A future that counts how often it is polled.
    struct CountedPolls<F> {
        inner: std::pin::Pin<Box<F>>,
        polls: Arc<AtomicU64>,
    }

    impl<F: std::future::Future> std::future::Future for CountedPolls<F> {
        type Output = F::Output;
        fn poll(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<F::Output> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            self.inner.as_mut().poll(cx)
        }
    }

    /// Serves one connection: the handshake, then a ping in the same write
    /// as the handshake's last packet; whether the pong came.
    async fn ping_right_behind_the_handshake(tcp: tokio::net::TcpStream) -> bool {
        use futures_util::SinkExt;
        let _ = tcp.set_nodelay(true);
        let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
        let open = serde_json::json!({"sid": "fakefakefakefake", "upgrades": [],
            "pingInterval": 300_000, "pingTimeout": 300_000, "maxPayload": 1_000_000});
        ws.feed(Message::text(format!("0{open}"))).await.unwrap();
        ws.feed(Message::text("2")).await.unwrap();
        ws.flush().await.unwrap();
        let pong = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(Ok(message)) = ws.next().await {
                if matches!(&message, Message::Text(text) if text.as_str() == "3") {
                    return true;
                }
            }
            false
        });
        pong.await == Ok(true)
    }

    /// Connections opened one after another, each to a server that sends
    /// a ping right behind its handshake: every ping must be answered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_message_right_behind_the_handshake_is_read() {
        const CONNECTIONS: usize = 300;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        // Each connection is served by a task of its own, so that pings
        // left unanswered cost one wait, not one each.
        let server = tokio::spawn(async move {
            let mut connections = Vec::with_capacity(CONNECTIONS);
            for _ in 0..CONNECTIONS {
                let (tcp, _) = listener.accept().await.unwrap();
                connections.push(tokio::spawn(ping_right_behind_the_handshake(tcp)));
            }
            let mut answered = 0;
            for connection in connections {
                if connection.await.unwrap() {
                    answered += 1;
                }
            }
            answered
        });
        let settings = ClientSettings {
            connect_timeout: Duration::from_secs(10),
            max_message_bytes: 1 << 20,
        };
        for _ in 0..CONNECTIONS {
            let addr = addr.clone();
            let dial = async move {
                let stream = ServerStream::connect(&addr).await?;
                Ok((stream, "127.0.0.1"))
            };
            let client = SioClient::connect_via(dial, "token", settings)
                .await
                .unwrap();
            // Held until the server has its answer or gave up waiting.
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(6)).await;
                drop(client);
            });
        }
        let answered = server.await.unwrap();
        assert_eq!(answered, CONNECTIONS, "pings left unanswered");
    }

    #[tokio::test]
    async fn a_task_that_sent_is_not_woken_by_the_messages_that_arrive_after() {
        use futures_util::SinkExt;
        const ROUNDS: u64 = 20;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        // A server that answers each `ping` with a `noise` event at once and
        // its `pong` a little later.
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
            let open = serde_json::json!({"sid": "fakefakefakefake", "upgrades": [],
                "pingInterval": 300_000, "pingTimeout": 300_000, "maxPayload": 1_000_000});
            ws.send(Message::text(format!("0{open}"))).await.unwrap();
            while let Some(Ok(msg)) = ws.next().await {
                let Message::Text(text) = msg else { continue };
                if text.starts_with("40") {
                    ws.send(Message::text("40/ns,{\"sid\":\"x\"}"))
                        .await
                        .unwrap();
                } else if text.starts_with("42") {
                    ws.send(Message::text("42/ns,[\"noise\"]")).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    ws.send(Message::text("42/ns,[\"pong\"]")).await.unwrap();
                }
            }
        });
        let dial = {
            let addr = addr.clone();
            async move {
                let stream = ServerStream::connect(&addr).await?;
                Ok((stream, "127.0.0.1"))
            }
        };
        let settings = ClientSettings {
            connect_timeout: Duration::from_secs(10),
            max_message_bytes: 1 << 20,
        };
        let client = SioClient::connect_via(dial, "token", settings)
            .await
            .unwrap();
        let pongs = Arc::new(tokio::sync::Notify::new());
        let notify = pongs.clone();
        let handler: Handler = Arc::new(move |delivery| {
            if let Delivery::Event(event) = delivery {
                if event.name() == "pong" {
                    notify.notify_one();
                }
            }
        });
        client
            .join("/ns", &serde_json::json!({}), handler)
            .await
            .unwrap();
        // Each round: send a ping, then wait for its pong; the waits are
        // counted (the noise before each pong is no business of the task's).
        let polls = Arc::new(AtomicU64::new(0));
        let waits = polls.clone();
        let sender = client.clone();
        let task = async move {
            for _ in 0..ROUNDS {
                sender.emit("/ns", "ping", &[1]).await.unwrap();
                CountedPolls {
                    inner: Box::pin(pongs.notified()),
                    polls: waits.clone(),
                }
                .await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), tokio::spawn(task))
            .await
            .expect("every pong arrives")
            .unwrap();
        let polls = polls.load(Ordering::SeqCst);
        // A wait is polled when it starts and when its pong comes; a wake
        // for the noise would make it three.
        assert!(
            polls <= 2 * ROUNDS + ROUNDS / 4,
            "{ROUNDS} waits were polled {polls} times: woken by the noise"
        );
    }
}
