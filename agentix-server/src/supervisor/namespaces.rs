//! The worker's plugin namespaces, as its supervisor sees them: one
//! [`NamespaceForwarder`] per path the worker opened (started again when
//! one ends), the worker's events handed to it, and hosts' events queued
//! for the worker. Both directions are bounded: see `forward_to_hosts` and
//! the `HostEvent` handler.

use std::sync::atomic::Ordering;

use actix::prelude::*;
use agentix_actors::request_envelope::{error_reply, request_id, HOST_BEHIND};
use agentix_actors::supervision::{ChildEnded, ChildGuard};
use agentix_actors::wire::Frame;

use super::{AttachIo, Phase, StopForwarder, WorkerSupervisor, HOST_EVENTS_WAIT_PAST};
use crate::forwarder::{HostEvent, NamespaceForwarder, StopForwarding, ToHosts};

impl WorkerSupervisor {
    pub(super) fn open_namespace(&mut self, path: String, ctx: &mut Context<Self>) {
        if let Err(why) = agentix_actors::wire::check_plugin_path(&path) {
            tracing::warn!("the worker tried to open a namespace: {why}");
            return;
        }
        if self.forwarders.contains_key(&path) {
            return;
        }
        let Some(io) = self.io.clone() else {
            self.early_opens.push(path);
            return;
        };
        tracing::info!(path, "plugin namespace opened");
        self.start_forwarder(path, io, ctx);
    }

    fn start_forwarder(&mut self, path: String, io: socketioxide::SocketIo, ctx: &Context<Self>) {
        let guard = ChildGuard::new(path.clone(), ctx.address().recipient());
        let dropped = self.events_dropped.clone();
        let to_worker = ctx.address().recipient();
        let forwarder =
            NamespaceForwarder::new(path.clone(), io, to_worker, dropped, guard).start_bounded();
        self.forwarders.insert(path, forwarder);
    }
}

impl WorkerSupervisor {
    /// Hands a worker's event to its namespace's forwarder without waiting:
    /// a forwarder a whole mailbox behind (its hosts do not read) loses the
    /// event, counted, and a request among them is answered at once.
    pub(super) fn forward_to_hosts(
        &mut self,
        path: String,
        event: String,
        data: serde_json::Value,
    ) {
        let Some(forwarder) = self.forwarders.get(&path) else {
            tracing::debug!(
                path,
                event,
                "event for a namespace the worker never opened; dropped"
            );
            return;
        };
        let ToHosts { event, data } = match forwarder.try_send(ToHosts { event, data }) {
            Ok(()) => return,
            Err(SendError::Full(msg) | SendError::Closed(msg)) => msg,
        };
        let dropped = self.events_dropped.fetch_add(1, Ordering::Relaxed) + 1;
        if dropped % 10_000 == 1 {
            tracing::warn!(
                path,
                dropped,
                "the hosts on this namespace fall behind; events to them are dropped"
            );
        }
        if let Some(request_id) = request_id(&event, &data) {
            let message = format!("the hosts on {path} are too far behind to be asked");
            let (event, data) = error_reply(&event, request_id, HOST_BEHIND, message);
            self.send_frame(Frame::SioEvent { path, event, data });
        }
    }
}

impl Handler<ChildEnded<String>> for WorkerSupervisor {
    type Result = ();

    // A forwarder holds no state a new one lacks (its path is registered
    // with Socket.IO once, for good), so it is started again at once.
    fn handle(&mut self, msg: ChildEnded<String>, ctx: &mut Context<Self>) {
        let path = msg.child;
        if self.phase == Phase::Stopped || !self.forwarders.contains_key(&path) {
            return;
        }
        let Some(io) = self.io.clone() else {
            return;
        };
        let how = if msg.panicked { "panicked" } else { "stopped" };
        tracing::error!(path, "the namespace forwarder {how}; starting a new one");
        self.start_forwarder(path, io, ctx);
    }
}

impl Handler<StopForwarder> for WorkerSupervisor {
    type Result = ();

    fn handle(&mut self, StopForwarder(path): StopForwarder, _: &mut Context<Self>) {
        match self.forwarders.get(&path) {
            Some(forwarder) => forwarder.do_send(StopForwarding),
            None => tracing::warn!(path, "no forwarder on this path to restart"),
        }
    }
}

impl Handler<HostEvent> for WorkerSupervisor {
    type Result = ();

    fn handle(&mut self, msg: HostEvent, _: &mut Context<Self>) {
        if !self.forwarders.contains_key(&msg.path) {
            tracing::debug!(
                path = msg.path,
                event = msg.event,
                "event for a namespace no worker opened; dropped"
            );
            return;
        }
        let Some(w) = &self.worker else {
            return;
        };
        let is_reply = msg.event.ends_with(":result") || msg.event.ends_with(":error");
        let frame = Frame::SioEvent {
            path: msg.path,
            event: msg.event,
            data: msg.data,
        };
        if is_reply {
            // The worker waits for it: never dropped for a full pipe.
            w.frames.push(frame);
            return;
        }
        // Queued in order, so a burst arrives whole; an event nobody waits
        // for is dropped, counted, once the worker is far behind its pipe:
        // a host cannot fill the server's memory.
        if w.frames.waiting() < HOST_EVENTS_WAIT_PAST {
            w.frames.push(frame);
        } else {
            let Frame::SioEvent { path, .. } = frame else {
                unreachable!("built above")
            };
            self.host_events_dropped += 1;
            if self.host_events_dropped % 10_000 == 1 {
                tracing::warn!(
                    path,
                    dropped = self.host_events_dropped,
                    "the worker falls behind its pipe; hosts' plugin events are dropped"
                );
            }
        }
    }
}

impl Handler<AttachIo> for WorkerSupervisor {
    type Result = ();

    fn handle(&mut self, AttachIo(io): AttachIo, ctx: &mut Context<Self>) {
        self.io = Some(io);
        for path in std::mem::take(&mut self.early_opens) {
            self.open_namespace(path, ctx);
        }
    }
}
