//! [`NamespaceForwarder`]: one actor per plugin namespace the worker opened,
//! carrying its events both ways.
//!
//! Supervised by the `WorkerSupervisor`, which its [`ChildGuard`] tells
//! when it ends and which then starts another on the same path; it has no
//! children.
//!
//! The server knows no plugin's events or payloads: a payload passes as
//! the JSON text it came as ([`JsonText`]), checked where it comes in and
//! never built into a value. Worker to hosts: the
//! forwarder emits whatever the worker sends to every host on its path, in
//! order, from a pump of its own, so a host slow to take an event never
//! holds up the other direction. Hosts to worker: the plugin namespace
//! handler (see [`register`]) finds the path's forwarder in
//! [`Forwarders`] and hands it each event, which it puts on the worker's
//! pipe queue at once. A host may connect to a path before the worker opens
//! it: it then gets the events the worker emits once it does. A request the
//! worker makes while no host is on its path is answered at once with a
//! `NoHost` error, and one its hosts are too far behind to take with
//! `HostBehind`. A host's socket holds at most 8 MiB of events it has not
//! taken ([`crate::host_backlog`]); past that its events are dropped and
//! counted, as for a host whose socket stays full.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::dev::SendError;
use actix::prelude::*;
use agentix_actors::supervision::ChildGuard;
use agentix_wire::budgeted_channel::{
    budgeted_channel, BudgetedReceiver, BudgetedSender, PayloadLen,
};
use agentix_wire::frame_bytes::FrameBytes;
use agentix_wire::json_text::JsonText;
use agentix_wire::outbox::Outbox;
use agentix_wire::part::MAX_SOCKET_MESSAGE_BYTES;
use agentix_wire::placeholder_json::WithFrames;
use agentix_wire::request_envelope::{
    error_reply, is_reply, request_id_in_text, HOST_BEHIND, NO_HANDLER, NO_HOST, OVERLOADED,
    TOO_LARGE,
};
use agentix_wire::wire::{check_plugin_path, Frame};
use bytes::Bytes;
use socketioxide::extract::{Event, SocketRef};
use socketioxide::handler::ConnectHandler;
use socketioxide::socket::Sid;
use socketioxide::SocketIo;
use tokio::sync::mpsc;

use crate::auth::{auth_middleware, Token};
use crate::emit::emit_within;
use crate::host_backlog::HostBacklogs;
use crate::raw_event::RawEvent;

// ---- messages ------------------------------------------------------------

/// A host emitted `event` on the forwarder's path: for the worker.
#[derive(actix::Message)]
#[rtype(result = "()")]
pub struct HostEvent {
    /// The event name.
    pub event: String,
    /// The payload, as the host's text.
    pub data: JsonText,
    /// Its binary attachments, in placeholder order.
    pub attachments: Vec<Bytes>,
}

/// Emit `event` with `data` to every host on the forwarder's path.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ToHosts {
    /// The event name.
    pub event: String,
    /// The payload, as the worker's text.
    pub data: JsonText,
    /// Its binary attachments, in placeholder order.
    pub attachments: Vec<Bytes>,
}

impl PayloadLen for ToHosts {
    fn payload_len(&self) -> usize {
        self.event.len() + self.data.raw().get().len() + attached_len(&self.attachments)
    }
}

/// The bytes of an event's binary attachments.
fn attached_len(attachments: &[Bytes]) -> usize {
    attachments.iter().map(Bytes::len).sum()
}

/// Where hosts' events go now: the ready worker's pipe queue, or nowhere
/// while no worker is ready (they are dropped).
#[derive(Message)]
#[rtype(result = "()")]
pub struct WorkerFrames(pub Option<Outbox>);

/// Stop forwarding (the supervisor then starts a new forwarder).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopForwarding;

// ---- the registry ----------------------------------------------------------

/// The forwarders of the current worker supervisor, by path: the socket
/// handlers find a host event's forwarder here; and what they all count.
/// Cheap to clone.
#[derive(Clone, Default)]
pub struct Forwarders {
    by_path: Arc<Mutex<HashMap<String, Addr<NamespaceForwarder>>>>,
    counts: ForwarderCounts,
}

impl Forwarders {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Addr<NamespaceForwarder>>> {
        self.by_path.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the forwarders and the socket handlers in front of them count.
    pub fn counts(&self) -> ForwarderCounts {
        self.counts.clone()
    }

    /// The forwarder of `path`, if the worker opened it.
    pub fn get(&self, path: &str) -> Option<Addr<NamespaceForwarder>> {
        self.lock().get(path).cloned()
    }

    /// Whether the worker opened `path`.
    pub fn contains(&self, path: &str) -> bool {
        self.lock().contains_key(path)
    }

    /// Makes `forwarder` the one of `path`.
    pub fn insert(&self, path: String, forwarder: Addr<NamespaceForwarder>) {
        self.lock().insert(path, forwarder);
    }

    /// Every forwarder, for news of the worker.
    pub fn all(&self) -> Vec<Addr<NamespaceForwarder>> {
        self.lock().values().cloned().collect()
    }

    /// Forgets every forwarder (their supervisor ended; they stop once
    /// nobody holds them).
    pub fn clear(&self) {
        self.lock().clear();
    }
}

// ---- the actor -----------------------------------------------------------

/// What the forwarder counts, shared with `/health`.
#[derive(Clone, Default)]
pub struct ForwarderCounts {
    /// Worker events not sent to hosts: hosts too far behind, or lagging.
    pub to_hosts_dropped: Arc<AtomicU64>,
    /// Hosts' events the worker could not take in time.
    pub to_worker_dropped: Arc<AtomicU64>,
}

/// Forwards the worker's events on one namespace path to its hosts, and
/// its hosts' events to the worker.
pub struct NamespaceForwarder {
    path: String,
    io: SocketIo,
    /// The ready worker's pipe queue.
    worker: Option<Outbox>,
    /// Worker events on their way to hosts, in order.
    to_hosts: BudgetedSender<ToHosts>,
    /// Their other end, until `started` hands it to the pump.
    pump_input: Option<BudgetedReceiver<ToHosts>>,
    /// Hosts whose socket stayed full past [`LAG_PATIENCE`].
    lagging: Arc<Mutex<HashSet<Sid>>>,
    counts: ForwarderCounts,
    _guard: ChildGuard<String>,
}

impl NamespaceForwarder {
    /// A forwarder for `path` on `io`, passing hosts' events to `worker`
    /// (if one is ready); `guard` tells its supervisor when it ends.
    pub fn new(
        path: String,
        io: SocketIo,
        worker: Option<Outbox>,
        counts: ForwarderCounts,
        guard: ChildGuard<String>,
    ) -> Self {
        let (to_hosts, pump_input) = budgeted_channel(FORWARDER_MAILBOX, FORWARDER_QUEUE_BYTES);
        NamespaceForwarder {
            path,
            io,
            worker,
            to_hosts,
            pump_input: Some(pump_input),
            lagging: Arc::default(),
            counts,
            _guard: guard,
        }
    }

    /// Puts a host's event (or a reply made on the hosts' behalf) on the
    /// worker's pipe queue.
    fn to_worker(&self, event: String, data: JsonText, attachments: Vec<Bytes>) {
        let Some(frames) = &self.worker else {
            tracing::debug!(
                path = self.path,
                event,
                "no worker is ready for this namespace; event dropped"
            );
            return;
        };
        let answers_a_request = is_reply(&event);
        let frame = Frame::SioEvent {
            path: self.path.clone(),
            event,
            data,
            attachments: attachments.into_iter().map(FrameBytes).collect(),
        };
        // A reply is never dropped for a full pipe: the worker waits for
        // it. Other events queue in order, so a burst arrives whole, until
        // the worker is far behind its pipe: then they are dropped, counted,
        // and a host cannot fill the server's memory.
        if answers_a_request
            || !frames.waiting_past(HOST_EVENTS_WAIT_PAST, HOST_EVENT_BYTES_WAIT_PAST)
        {
            frames.push(frame);
            return;
        }
        let dropped = self
            .counts
            .to_worker_dropped
            .fetch_add(1, Ordering::Relaxed)
            + 1;
        if dropped % 10_000 == 1 {
            tracing::warn!(
                path = self.path,
                dropped,
                "the worker falls behind its pipe; hosts' plugin events are dropped"
            );
        }
    }
}

/// Frames waiting in a worker's outbox past which hosts' plugin events
/// (which nobody waits for) are dropped.
pub(crate) const HOST_EVENTS_WAIT_PAST: usize = 8_192;

/// Payload bytes waiting in a worker's outbox past which hosts' plugin
/// events are dropped: the count alone would let 8,192 large events wait.
pub(crate) const HOST_EVENT_BYTES_WAIT_PAST: usize = 8 << 20;

impl Handler<StopForwarding> for NamespaceForwarder {
    type Result = ();

    fn handle(&mut self, _: StopForwarding, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

impl Handler<WorkerFrames> for NamespaceForwarder {
    type Result = ();

    fn handle(&mut self, WorkerFrames(worker): WorkerFrames, _: &mut Context<Self>) {
        self.worker = worker;
    }
}

impl Handler<HostEvent> for NamespaceForwarder {
    type Result = ();

    fn handle(&mut self, msg: HostEvent, _: &mut Context<Self>) {
        self.to_worker(msg.event, msg.data, msg.attachments);
    }
}

/// Worker events waiting for their hosts; past this new ones are dropped
/// (counted) rather than held. Large, because the worker can hand over a
/// burst before the pump (on the same arbiter) runs at all.
pub(crate) const FORWARDER_MAILBOX: usize = 65_536;

/// Bytes of worker events waiting for their hosts past which new ones are
/// dropped (counted): counted in events alone, a queue of 4 KiB events
/// for a host that reads nothing would hold 256 MiB. One event of any
/// size still passes when nothing waits.
pub(crate) const FORWARDER_QUEUE_BYTES: usize = 8 << 20;

/// How long a host's full socket is waited for before the host counts as
/// lagging: events for it are then dropped (counted) until its socket has
/// room again, so a host that does not read holds nobody else up.
pub(crate) const LAG_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

impl Actor for NamespaceForwarder {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let Some(rx) = self.pump_input.take() else {
            return;
        };
        let pump = ToHostsPump {
            path: self.path.clone(),
            io: self.io.clone(),
            lagging: self.lagging.clone(),
            dropped: self.counts.to_hosts_dropped.clone(),
            // Weak: the pump must not keep its own actor alive.
            forwarder: ctx.address().downgrade(),
            backlogs: HostBacklogs::default(),
        };
        // Spawned in the actor's context: it ends with the actor, and runs
        // beside its handlers, not instead of them.
        ctx.spawn(pump.run(rx).into_actor(self));
    }
}

impl NamespaceForwarder {
    /// Starts the forwarder with a mailbox of [`FORWARDER_MAILBOX`] from its
    /// first message on.
    pub fn start_bounded(self) -> Addr<Self> {
        NamespaceForwarder::create(|ctx| {
            ctx.set_mailbox_capacity(FORWARDER_MAILBOX);
            self
        })
    }
}

impl Handler<ToHosts> for NamespaceForwarder {
    type Result = ();

    fn handle(&mut self, msg: ToHosts, _: &mut Context<Self>) {
        let ToHosts { event, data, .. } = match self.to_hosts.try_send(msg) {
            Ok(()) => return,
            Err(mpsc::error::TrySendError::Full(msg) | mpsc::error::TrySendError::Closed(msg)) => {
                msg
            }
        };
        if let Some((event, data)) = not_forwarded(&self.counts, &self.path, &event, &data) {
            self.to_worker(event, data, Vec::new());
        }
    }
}

/// Counts a worker event on `path` that its hosts are too far behind to
/// be given; if it was a request, returns the `HostBehind` reply the
/// worker gets instead (it must not wait out its timeout).
pub(crate) fn not_forwarded(
    counts: &ForwarderCounts,
    path: &str,
    event: &str,
    data: &JsonText,
) -> Option<(String, JsonText)> {
    let dropped = counts.to_hosts_dropped.fetch_add(1, Ordering::Relaxed) + 1;
    if dropped % 10_000 == 1 {
        tracing::warn!(
            path,
            dropped,
            "the hosts on this namespace fall behind; events to them are dropped"
        );
    }
    let request_id = request_id_in_text(event, data)?;
    let message = format!("the hosts on {path} are too far behind to be asked");
    let (event, reply) = error_reply(event, request_id, HOST_BEHIND, message);
    Some((event, reply.into()))
}

/// Emits a forwarder's worker events to its hosts, one at a time, in order.
struct ToHostsPump {
    path: String,
    io: SocketIo,
    lagging: Arc<Mutex<HashSet<Sid>>>,
    dropped: Arc<AtomicU64>,
    /// Where replies made on the hosts' behalf go, on to the worker.
    forwarder: actix::WeakAddr<NamespaceForwarder>,
    /// What each host's socket may still hold unwritten.
    backlogs: HostBacklogs,
}

impl ToHostsPump {
    async fn run(mut self, mut rx: BudgetedReceiver<ToHosts>) {
        while let Some(msg) = rx.recv().await {
            self.emit(msg).await;
        }
    }

    async fn emit(&mut self, msg: ToHosts) {
        let text = msg.data.as_str().len();
        let size = text + attached_len(&msg.attachments);
        // Room for the packet's framing: namespace, event name, brackets.
        if text + self.path.len() + msg.event.len() + 64 > MAX_SOCKET_MESSAGE_BYTES {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            let message = format!(
                "`{}` on {} is {size} bytes of JSON, over the {} MiB one websocket message \
                 may carry: send large data as bytes (serde_bytes, Blob), which travel in parts",
                msg.event,
                self.path,
                MAX_SOCKET_MESSAGE_BYTES >> 20
            );
            if !self.refuse_request(&msg, TOO_LARGE, message.clone()) {
                tracing::warn!(path = self.path, "{message}; dropped");
            }
            return;
        }
        let hosts = self
            .io
            .of(&self.path)
            .map(|ns| ns.sockets())
            .unwrap_or_default();
        if hosts.is_empty() {
            let message = format!(
                "no host has joined {}: register the namespace on the host first",
                self.path
            );
            if !self.refuse_request(&msg, NO_HOST, message) {
                tracing::debug!(
                    path = self.path,
                    event = msg.event,
                    "no host on this namespace; event dropped"
                );
            }
            return;
        }
        let mut delivered = false;
        for host in &hosts {
            // A host whose socket already holds its share of unwritten
            // events gets no more until it takes some.
            if !self.backlogs.admits(host, size) {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let behind = lock(&self.lagging).contains(&host.id);
            // A lagging host gets one try; it is back once it takes one.
            let patience = if behind { Duration::ZERO } else { LAG_PATIENCE };
            let sent = if msg.attachments.is_empty() {
                emit_within(host, &msg.event, msg.data.raw(), patience).await
            } else {
                let payload = WithFrames {
                    json: msg.data.raw(),
                    frames: &msg.attachments,
                };
                emit_within(host, &msg.event, &payload, patience).await
            };
            if sent {
                delivered = true;
                self.backlogs.handed(host, size);
            }
            if sent && behind {
                lock(&self.lagging).remove(&host.id);
            } else if !sent {
                if !behind {
                    tracing::warn!(socket = %host.id, "a host does not read its plugin events; skipping it until it does");
                    lock(&self.lagging).insert(host.id);
                }
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.backlogs.keep_only(&hosts);
        if !delivered {
            // A request no host got is answered now, not at its timeout.
            let message = format!("the hosts on {} are too far behind to be asked", self.path);
            self.refuse_request(&msg, HOST_BEHIND, message);
        }
    }

    /// If `msg` is a request, answers it on the hosts' behalf with an error
    /// of `type_name`, and says so.
    fn refuse_request(&self, msg: &ToHosts, type_name: &str, message: String) -> bool {
        let Some(request_id) = request_id_in_text(&msg.event, &msg.data) else {
            return false;
        };
        let (event, data) = error_reply(&msg.event, request_id, type_name, message);
        if let Some(forwarder) = self.forwarder.upgrade() {
            forwarder.do_send(HostEvent {
                event,
                data: data.into(),
                attachments: Vec::new(),
            });
        }
        true
    }
}

/// Accepts hosts on any path that is not a core namespace and passes their
/// events to the path's forwarder, found in `forwarders`.
pub(crate) fn register(io: &SocketIo, forwarders: Forwarders, token: Token) {
    // Attached before the connect ack (see `crate::rpc` for why).
    let attach_handlers = move |s: SocketRef| {
        let forwarders = forwarders.clone();
        s.on_fallback(move |s: SocketRef, Event(event): Event, raw: RawEvent| {
            let path = s.ns();
            let refusal = match raw.into_payload() {
                Ok(data) if check_plugin_path(path).is_ok() => {
                    hand_to_forwarder(&forwarders, path, event, data)
                }
                Ok(_) => {
                    tracing::debug!(path, event, "event on a path no plugin may use; dropped");
                    None
                }
                Err(e) => {
                    tracing::debug!(path, event, "malformed plugin event dropped: {e}");
                    None
                }
            };
            async move {
                if let Some((event, reply)) = refusal {
                    crate::emit::emit(&s, &event, &reply).await;
                }
            }
        });
        std::future::ready(Ok::<(), std::convert::Infallible>(()))
    };
    let on_connect = |_: SocketRef| std::future::ready(());
    let handler = on_connect
        .with(attach_handlers)
        .with(auth_middleware(token));
    if let Err(e) = io.dyn_ns("/{*path}", handler) {
        tracing::error!("cannot accept plugin namespaces: {e}");
    }
}

/// Hands a host's event on `path` to the path's forwarder, in the order the
/// host sent it, without waiting: the forwarder takes each in O(1) onto the
/// worker's queue, whose own bound drops what a flood sends past it (see
/// `NamespaceForwarder::to_worker`), and its mailbox is bounded too. What
/// cannot be handed on is dropped and counted; a request among it gets the
/// error reply returned here, for the host, so its asker need not wait out
/// its timeout.
fn hand_to_forwarder(
    forwarders: &Forwarders,
    path: &str,
    event: String,
    (data, attachments): (JsonText, Vec<Bytes>),
) -> Option<(String, serde_json::Value)> {
    let host_event = HostEvent {
        event,
        data,
        attachments,
    };
    let (event, data, type_name, why) = match forwarders.get(path) {
        Some(forwarder) => match forwarder.try_send(host_event) {
            Ok(()) => return None,
            Err(SendError::Full(HostEvent { event, data, .. })) => (
                event,
                data,
                OVERLOADED,
                format!("the worker's end of {path} has {FORWARDER_MAILBOX} events waiting"),
            ),
            Err(SendError::Closed(HostEvent { event, data, .. })) => (
                event,
                data,
                NO_HANDLER,
                format!("{path} is being reopened by a new worker"),
            ),
        },
        None => (
            host_event.event,
            host_event.data,
            NO_HANDLER,
            format!("no worker has opened {path}: nothing in the sandbox handles it"),
        ),
    };
    let Some(request_id) = request_id_in_text(&event, &data) else {
        let dropped = forwarders
            .counts()
            .to_worker_dropped
            .fetch_add(1, Ordering::Relaxed)
            + 1;
        if dropped.is_power_of_two() {
            tracing::warn!(path, event, dropped, "a host's plugin event dropped: {why}");
        }
        return None;
    };
    Some(error_reply(&event, request_id, type_name, why))
}

fn lock(lagging: &Mutex<HashSet<Sid>>) -> std::sync::MutexGuard<'_, HashSet<Sid>> {
    lagging.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    //! The forwarder driven by messages alone: a stub supervisor, a worker
    //! outbox read directly, no process and no host.

    use super::*;
    use agentix_actors::supervision::ChildEnded;
    use serde_json::json;

    /// Stands in for the worker supervisor: reports each end it hears of.
    struct Parent(mpsc::UnboundedSender<ChildEnded<String>>);

    impl Actor for Parent {
        type Context = Context<Self>;
    }

    impl Handler<ChildEnded<String>> for Parent {
        type Result = ();

        fn handle(&mut self, ended: ChildEnded<String>, _: &mut Context<Self>) {
            let _ = self.0.send(ended);
        }
    }

    /// A forwarder of `/p` passing hosts' events to `worker`, its parent's
    /// reports, and its counts.
    fn forwarder(
        worker: Option<Outbox>,
    ) -> (
        Addr<NamespaceForwarder>,
        mpsc::UnboundedReceiver<ChildEnded<String>>,
        ForwarderCounts,
    ) {
        let (_service, io) = SocketIo::new_svc();
        let (ended_tx, ended) = mpsc::unbounded_channel();
        let parent = Parent(ended_tx).start();
        let counts = ForwarderCounts::default();
        let guard = ChildGuard::new("/p".to_owned(), parent.recipient());
        let forwarder = NamespaceForwarder::new("/p".into(), io, worker, counts.clone(), guard);
        (forwarder.start_bounded(), ended, counts)
    }

    fn text(value: serde_json::Value) -> JsonText {
        JsonText::from_value(&value)
    }

    async fn next_frame(frames: &mut mpsc::Receiver<Frame>) -> (String, String, serde_json::Value) {
        match tokio::time::timeout(Duration::from_secs(5), frames.recv()).await {
            Ok(Some(Frame::SioEvent {
                path, event, data, ..
            })) => (path, event, data.to_value()),
            other => panic!("expected a namespace event for the worker, got {other:?}"),
        }
    }

    #[actix_rt::test]
    async fn hosts_events_reach_the_worker_in_order_and_a_request_no_host_takes_is_answered() {
        let (tx, mut frames) = mpsc::channel(64);
        let (forwarder, _ended, _counts) = forwarder(Some(Outbox::new(tx)));
        for i in 0..10 {
            let event = HostEvent {
                attachments: Vec::new(),
                event: "n".into(),
                data: text(json!(i)),
            };
            forwarder.send(event).await.unwrap();
        }
        for i in 0..10 {
            assert_eq!(
                next_frame(&mut frames).await,
                ("/p".into(), "n".into(), json!(i))
            );
        }

        // The worker asks while no host is on the path: it is answered at
        // once, on the hosts' behalf, instead of waiting out its timeout.
        let ask = ToHosts {
            attachments: Vec::new(),
            event: "fetch".into(),
            data: text(json!({"request_id": "r1", "data": 1})),
        };
        forwarder.send(ask).await.unwrap();
        let (path, event, data) = next_frame(&mut frames).await;
        assert_eq!((path.as_str(), event.as_str()), ("/p", "fetch:error"));
        assert_eq!(data["request_id"], "r1");
        assert_eq!(data["error"]["type"], NO_HOST);
    }

    #[actix_rt::test]
    async fn without_a_ready_worker_hosts_events_go_nowhere_and_the_next_worker_gets_what_follows()
    {
        let (forwarder, _ended, _counts) = forwarder(None);
        let lost = HostEvent {
            attachments: Vec::new(),
            event: "lost".into(),
            data: text(json!(1)),
        };
        forwarder.send(lost).await.unwrap();
        let (tx, mut frames) = mpsc::channel(8);
        forwarder
            .send(WorkerFrames(Some(Outbox::new(tx))))
            .await
            .unwrap();
        let kept = HostEvent {
            attachments: Vec::new(),
            event: "kept".into(),
            data: text(json!(2)),
        };
        forwarder.send(kept).await.unwrap();
        assert_eq!(next_frame(&mut frames).await.1, "kept");
        assert!(
            frames.try_recv().is_err(),
            "nothing else reached the worker"
        );
    }

    #[actix_rt::test]
    async fn its_supervisor_hears_when_it_stops() {
        let (forwarder, mut ended, _counts) = forwarder(None);
        forwarder.send(StopForwarding).await.unwrap();
        let report = tokio::time::timeout(Duration::from_secs(5), ended.recv())
            .await
            .expect("the supervisor hears of the end")
            .expect("a report");
        assert_eq!(report.child, "/p");
        assert!(!report.panicked);
    }
}
