//! [`HostReply`]: where a host's unary call ends, emitted to its socket by
//! the `CallRouter` itself.
//!
//! A small result or an error goes out from the router's handler the
//! moment the worker's frame arrives: no task waits on the call, and no
//! channel carries its outcome. Only what must wait gets a task of its
//! own: a result in parts (each part waits for room in the host's part
//! window; at its first part the call table turns the reply into a
//! `Reply::Relayed` feeding that task), and an event the socket's full
//! queue cannot take yet.

use std::sync::Arc;

use agentix_wire::errors::{ErrorKind, RemoteError};
use agentix_wire::part::{split, SPLIT_ABOVE};
use agentix_wire::wire::{
    Attachment, ErrorEvent, PartEvent, ResultEvent, EVENT_ERROR, EVENT_PART, EVENT_RESULT,
};
use bytes::Bytes;
use socketioxide::extract::SocketRef;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::call_outcome::{Outcome, ResultPart};
use crate::emit::{emit, emit_soon};

/// Where a relayed result's parts go, in order, and then its outcome.
pub(crate) type PartRelay = (mpsc::UnboundedSender<ResultPart>, oneshot::Sender<Outcome>);

/// A unary call's reply to the host socket that started it.
pub struct HostReply {
    socket: SocketRef,
    /// The host's id for the call.
    id: u64,
    /// The host's window of unacknowledged result parts, when it reads
    /// results in parts; `None`: the result goes out as one event.
    window: Option<Arc<Semaphore>>,
    /// The message limit: no event to the host is larger.
    max: usize,
}

impl HostReply {
    /// The reply to call `id` of `socket`; `window` paces the result's parts
    /// when the host reads results in parts.
    pub(crate) fn new(
        socket: SocketRef,
        id: u64,
        window: Option<Arc<Semaphore>>,
        max: usize,
    ) -> Self {
        HostReply {
            socket,
            id,
            window,
            max,
        }
    }

    /// Starts the task that sends the result's parts to the host as they
    /// come, then the outcome: where to send each part, in order, and then
    /// the outcome (which holds only the last piece). A host that does not
    /// read parts gets no such task: the reply comes back as it was.
    pub(crate) fn relay(self) -> Result<PartRelay, HostReply> {
        let Some(window) = self.window.clone() else {
            return Err(self);
        };
        let (parts, parts_rx) = mpsc::unbounded_channel();
        let (outcome, outcome_rx) = oneshot::channel();
        let to = Destination {
            socket: self.socket,
            id: self.id,
            window,
        };
        tokio::spawn(to.relay(parts_rx, outcome_rx));
        Ok((parts, outcome))
    }

    /// Ends the call with `error`.
    pub(crate) fn fail(self, error: RemoteError) {
        emit_soon(self.socket, EVENT_ERROR, ErrorEvent::new(self.id, error))
    }

    /// Ends the call to `target` with `outcome`, all of its result.
    pub(crate) fn finish(self, outcome: Outcome, target: &str) {
        let id = self.id;
        let s = self.socket;
        let pieces = match outcome.and_then(|p| checked(p, target, self.max)) {
            Ok(pieces) => pieces,
            Err(error) => return emit_soon(s, EVENT_ERROR, ErrorEvent::new(id, error)),
        };
        let window = match self.window {
            Some(window) if needs_parts(&pieces) => window,
            // One event; Socket.IO attachments carry it in 1 MiB frames.
            _ => {
                let value = Attachment::new(agentix_wire::part::join(pieces));
                return emit_soon(s, EVENT_RESULT, ResultEvent { id, value });
            }
        };
        let to = Destination {
            socket: s,
            id,
            window,
        };
        tokio::spawn(to.send_pieces(pieces));
    }
}

/// `pieces` if their whole is within the `max`-byte message limit.
fn checked(pieces: Vec<Bytes>, target: &str, max: usize) -> Result<Vec<Bytes>, RemoteError> {
    let total: usize = pieces.iter().map(Bytes::len).sum();
    match too_large("the result", target, total, max) {
        Some(error) => Err(error),
        None => Ok(pieces),
    }
}

/// Whether a result in `pieces` goes to a host that reads parts as more
/// than one event.
fn needs_parts(pieces: &[Bytes]) -> bool {
    match pieces {
        [] => false,
        [one] => one.len() > SPLIT_ABOVE,
        _ => true,
    }
}

/// A host socket that reads results in parts, and the call they are for.
struct Destination {
    socket: SocketRef,
    id: u64,
    window: Arc<Semaphore>,
}

impl Destination {
    /// Sends the parts `parts` brings as they come, then the outcome.
    async fn relay(
        self,
        mut parts: mpsc::UnboundedReceiver<ResultPart>,
        mut outcome: oneshot::Receiver<Outcome>,
    ) {
        let outcome = loop {
            tokio::select! {
                biased;
                Some(part) = parts.recv() => {
                    if !self.send_part(part).await {
                        return; // the host is gone
                    }
                }
                outcome = &mut outcome => break outcome,
            }
        };
        let outcome = outcome.unwrap_or_else(|_| Err(shutting_down()));
        let pieces = match outcome {
            // The router sent every part before the outcome; after an error
            // the host drops the parts it has, so the rest are not sent.
            Ok(pieces) => pieces,
            Err(error) => return self.emit_error(error).await,
        };
        while let Ok(part) = parts.try_recv() {
            if !self.send_part(part).await {
                return;
            }
        }
        self.send_pieces(pieces).await;
    }

    /// Sends the last pieces of a result (its caller checked them against
    /// the message limit): all but the last as parts (one piece past the
    /// part size is split first), then the result event.
    async fn send_pieces(self, mut pieces: Vec<Bytes>) {
        if pieces.len() == 1 && pieces[0].len() > SPLIT_ABOVE {
            pieces = split(pieces.pop().expect("one piece"));
        }
        let total = pieces.iter().map(|p| p.len() as u64).sum();
        let value = Attachment::new(pieces.pop().unwrap_or_default());
        // One event per part: replies to other calls go out between them.
        for bytes in pieces {
            if !self.send_part(ResultPart { total, bytes }).await {
                return;
            }
        }
        let id = self.id;
        emit(&self.socket, EVENT_RESULT, &ResultEvent { id, value }).await;
    }

    async fn emit_error(&self, error: RemoteError) {
        emit(&self.socket, EVENT_ERROR, &ErrorEvent::new(self.id, error)).await
    }

    /// Sends one part of the result once the host's window has room; false
    /// when the host is gone.
    async fn send_part(&self, part: ResultPart) -> bool {
        match self.window.acquire().await {
            // Given back by the host's ack.
            Ok(permit) => permit.forget(),
            Err(_) => return false,
        }
        let ResultPart { total, bytes } = part;
        let bytes = Attachment::new(bytes);
        let id = self.id;
        emit(&self.socket, EVENT_PART, &PartEvent { id, total, bytes }).await;
        true
    }
}

/// A `PayloadTooLarge` error if `len` bytes of `what` from `target` are
/// past the `max`-byte message limit: sent as is, the host could not read
/// them and would drop the whole connection.
pub(crate) fn too_large(what: &str, target: &str, len: usize, max: usize) -> Option<RemoteError> {
    (len > max).then(|| {
        RemoteError::new(
            ErrorKind::PayloadTooLarge,
            format!("{what} of `{target}` is {len} bytes, past the {max}-byte message limit"),
        )
        .with_details(
            "send large data in pieces (smaller stream items, or several calls), \
             or raise the limit (`max_message_bytes` in SandboxConfig)",
        )
    })
}

/// The error of a call the server ended because it is going away.
pub(crate) fn shutting_down() -> RemoteError {
    RemoteError::new(ErrorKind::ServerExited, "the server is shutting down")
}
