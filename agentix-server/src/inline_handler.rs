//! [`Inline`]: a Socket.IO event handler that runs where the event is
//! read, with no task of its own.
//!
//! Socket.IO spawns a task for every event its handlers take, since they
//! are async; a call event that only needs decoding and a message to the
//! `CallRouter` paid more for that task than for its own work. Handlers
//! wrapped in [`Inline`] must not block: what has to wait spawns a task
//! of its own.

use std::sync::Arc;

use socketioxide::adapter::Adapter;
use socketioxide::extract::SocketRef;
use socketioxide::handler::{MessageHandler, Value};
use socketioxide::socket::Socket;

/// An event handler called with the socket and the event's payload as it
/// arrived, in the task that read it.
pub(crate) struct Inline<F>(pub(crate) F);

/// Tells Socket.IO's handler kinds apart: this one runs inline.
pub(crate) enum RunsInline {}

impl<A, F> MessageHandler<A, RunsInline> for Inline<F>
where
    A: Adapter,
    F: Fn(SocketRef<A>, Value) + Send + Sync + 'static,
{
    fn call(&self, s: Arc<Socket<A>>, v: Value, _ack: Option<i64>) {
        (self.0)(SocketRef::from(s), v)
    }
}
