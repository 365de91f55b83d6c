//! The worker's plugin namespaces, as its supervisor sees them: one
//! [`NamespaceForwarder`] per path the worker opened (started again when
//! one ends), each told where the worker's pipe queue is, and the worker's
//! events handed to them. Hosts' events reach the forwarders without this
//! actor (see [`crate::forwarder::register`]).

use actix::prelude::*;
use agentix_actors::supervision::{ChildEnded, ChildGuard};
use agentix_wire::outbox::Outbox;
use agentix_wire::wire::Frame;

use super::{AttachIo, Phase, StopForwarder, WorkerSupervisor};
use crate::forwarder::{not_forwarded, NamespaceForwarder, StopForwarding, ToHosts, WorkerFrames};

impl WorkerSupervisor {
    pub(super) fn open_namespace(&mut self, path: String, ctx: &mut Context<Self>) {
        if let Err(why) = agentix_wire::wire::check_plugin_path(&path) {
            tracing::warn!("the worker tried to open a namespace: {why}");
            return;
        }
        if self.forwarders.contains(&path) {
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
        let forwarder = NamespaceForwarder::new(
            path.clone(),
            io,
            self.ready_frames(),
            self.forwarder_counts.clone(),
            guard,
        )
        .start_bounded();
        self.forwarders.insert(path, forwarder);
    }

    /// The ready worker's pipe queue, if a worker is ready.
    pub(super) fn ready_frames(&self) -> Option<Outbox> {
        match (self.phase, &self.worker) {
            (Phase::Ready, Some(w)) => Some(w.frames.clone()),
            _ => None,
        }
    }

    /// Tells every forwarder where hosts' events go now.
    pub(super) fn tell_forwarders(&self) {
        let frames = self.ready_frames();
        for forwarder in self.forwarders.all() {
            // One message per change of the worker's state, which no peer
            // can cause faster than workers start and die.
            forwarder.do_send(WorkerFrames(frames.clone()));
        }
    }

    /// Hands a worker's event to its namespace's forwarder without waiting:
    /// a forwarder a whole mailbox behind (a burst it has not run for yet)
    /// loses the event, counted, and a request among them is answered at
    /// once.
    pub(super) fn forward_to_hosts(
        &mut self,
        path: String,
        event: String,
        data: agentix_wire::json_text::JsonText,
        attachments: Vec<bytes::Bytes>,
    ) {
        let Some(forwarder) = self.forwarders.get(&path) else {
            tracing::debug!(
                path,
                event,
                "event for a namespace the worker never opened; dropped"
            );
            return;
        };
        let to_hosts = ToHosts {
            event,
            data,
            attachments,
        };
        let ToHosts { event, data, .. } = match forwarder.try_send(to_hosts) {
            Ok(()) => return,
            Err(SendError::Full(msg) | SendError::Closed(msg)) => msg,
        };
        if let Some((event, data)) = not_forwarded(&self.forwarder_counts, &path, &event, &data) {
            self.send_frame(Frame::SioEvent {
                path,
                event,
                data,
                attachments: Vec::new(),
            });
        }
    }
}

impl Handler<ChildEnded<String>> for WorkerSupervisor {
    type Result = ();

    // A forwarder holds no state a new one lacks (its path is registered
    // with Socket.IO once, for good), so it is started again at once.
    fn handle(&mut self, msg: ChildEnded<String>, ctx: &mut Context<Self>) {
        let path = msg.child;
        if self.phase == Phase::Stopped || !self.forwarders.contains(&path) {
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

impl Handler<AttachIo> for WorkerSupervisor {
    type Result = ();

    fn handle(&mut self, AttachIo(io): AttachIo, ctx: &mut Context<Self>) {
        self.io = Some(io);
        for path in std::mem::take(&mut self.early_opens) {
            self.open_namespace(path, ctx);
        }
    }
}
