//! The calls the server knows about: queued for a worker, or in flight.
//!
//! A plain data structure owned by the `WorkerSupervisor` actor, so every
//! change to it goes through that actor's mailbox and no lock guards it. Each
//! call is known by the host's `(socket, call id)` and by the id the server
//! gives it on the worker pipe; a call leaves the table exactly once, which is
//! what makes "exactly one terminal reply per call" hold.

use std::collections::{HashMap, VecDeque};

use agentix_actors::errors::RemoteError;
use agentix_actors::wire::Frame;
use serde_bytes::ByteBuf;
use socketioxide::socket::Sid;
use tokio::sync::oneshot;

/// Where a call's outcome goes.
pub type Reply = oneshot::Sender<Result<Vec<u8>, RemoteError>>;

/// Who asked: the host's socket and its own call id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The host's Socket.IO socket.
    pub socket: Sid,
    /// The id the host gave the call.
    pub host_id: u64,
}

/// A call not yet sent to a worker.
pub struct NewCall {
    /// Who asked.
    pub origin: Origin,
    /// Remote function name.
    pub target: String,
    /// CBOR arguments.
    pub args: Vec<u8>,
    /// Where the outcome goes.
    pub reply: Reply,
}

struct InFlight {
    origin: Origin,
    reply: Reply,
}

/// What cancelling a call found.
pub enum Cancelled {
    /// It was still queued; here is its reply.
    Queued(Reply),
    /// It was running in the worker under this id; here is its reply.
    InFlight(u64, Reply),
    /// No such call (already finished, or never started).
    Unknown,
}

/// The supervisor's table of calls.
#[derive(Default)]
pub struct CallTable {
    next_id: u64,
    inflight: HashMap<u64, InFlight>,
    by_origin: HashMap<Origin, u64>,
    queued: VecDeque<NewCall>,
}

impl CallTable {
    /// Calls queued or in flight.
    pub fn len(&self) -> usize {
        self.inflight.len() + self.queued.len()
    }

    /// Whether no call is queued or in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `origin` already has a call queued or in flight.
    pub fn contains(&self, origin: Origin) -> bool {
        self.by_origin.contains_key(&origin) || self.queued.iter().any(|c| c.origin == origin)
    }

    /// Keeps `call` until a worker is ready.
    pub fn queue(&mut self, call: NewCall) {
        self.queued.push_back(call);
    }

    /// Takes every queued call, oldest first.
    pub fn take_queued(&mut self) -> Vec<NewCall> {
        self.queued.drain(..).collect()
    }

    /// Records `call` as in flight and returns the frame that starts it.
    pub fn start(&mut self, call: NewCall) -> Frame {
        self.next_id += 1;
        let id = self.next_id;
        self.by_origin.insert(call.origin, id);
        self.inflight.insert(
            id,
            InFlight {
                origin: call.origin,
                reply: call.reply,
            },
        );
        Frame::Call {
            id,
            target: call.target,
            args: ByteBuf::from(call.args),
        }
    }

    /// Removes the call with worker id `id`; `None` if it already ended.
    pub fn finish(&mut self, id: u64) -> Option<Reply> {
        let call = self.inflight.remove(&id)?;
        self.by_origin.remove(&call.origin);
        Some(call.reply)
    }

    /// Removes the call `origin` asked for.
    pub fn cancel(&mut self, origin: Origin) -> Cancelled {
        if let Some(id) = self.by_origin.remove(&origin) {
            let call = self.inflight.remove(&id).expect("indexes agree");
            return Cancelled::InFlight(id, call.reply);
        }
        match self.queued.iter().position(|c| c.origin == origin) {
            Some(at) => Cancelled::Queued(self.queued.remove(at).expect("in range").reply),
            None => Cancelled::Unknown,
        }
    }

    /// Every call of `socket`, queued or in flight.
    pub fn origins_of(&self, socket: Sid) -> Vec<Origin> {
        let inflight = self.by_origin.keys().filter(|o| o.socket == socket);
        let queued = self.queued.iter().map(|c| &c.origin);
        inflight
            .chain(queued.filter(|o| o.socket == socket))
            .copied()
            .collect()
    }

    /// Removes every in-flight call (its worker is gone).
    pub fn take_inflight(&mut self) -> Vec<Reply> {
        self.by_origin.clear();
        self.inflight.drain().map(|(_, c)| c.reply).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(
        socket: Sid,
        host_id: u64,
    ) -> (NewCall, oneshot::Receiver<Result<Vec<u8>, RemoteError>>) {
        let (reply, rx) = oneshot::channel();
        let origin = Origin { socket, host_id };
        let call = NewCall {
            origin,
            target: "t".into(),
            args: vec![1],
            reply,
        };
        (call, rx)
    }

    #[test]
    fn a_call_leaves_the_table_once() {
        let sid = Sid::new();
        let mut table = CallTable::default();
        let (c, _rx) = call(sid, 7);
        let Frame::Call { id, .. } = table.start(c) else {
            panic!("not a call frame")
        };
        assert!(table.contains(Origin {
            socket: sid,
            host_id: 7
        }));
        assert!(table.finish(id).is_some());
        assert!(table.finish(id).is_none());
        assert!(matches!(
            table.cancel(Origin {
                socket: sid,
                host_id: 7
            }),
            Cancelled::Unknown
        ));
        assert!(table.is_empty());
    }

    #[test]
    fn cancel_finds_queued_and_inflight_calls_per_socket() {
        let (a, b) = (Sid::new(), Sid::new());
        let mut table = CallTable::default();
        let (c1, _r1) = call(a, 1);
        let (c2, _r2) = call(a, 2);
        let (c3, _r3) = call(b, 1);
        table.start(c1);
        table.queue(c2);
        table.queue(c3);
        let mut mine = table.origins_of(a);
        mine.sort_by_key(|o| o.host_id);
        assert_eq!(mine.iter().map(|o| o.host_id).collect::<Vec<_>>(), [1, 2]);
        assert!(matches!(table.cancel(mine[0]), Cancelled::InFlight(1, _)));
        assert!(matches!(table.cancel(mine[1]), Cancelled::Queued(_)));
        assert_eq!(table.len(), 1);
        assert_eq!(table.take_queued().len(), 1);
        assert!(table.take_inflight().is_empty());
    }
}
