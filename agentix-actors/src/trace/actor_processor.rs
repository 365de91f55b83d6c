//! Trace processors as actors: a `Handler<TraceEvent>` is added with
//! [`TraceHub::add_actor`](super::TraceHub::add_actor); each event is
//! sent once the last is handled, from a task, never a blocked thread.

use actix::{Message, Recipient};

use super::hub::TraceHub;
use super::model::TraceEvent;

impl Message for TraceEvent {
    type Result = ();
}

/// Registers the actor behind `actor` on the hub of spans made where no
/// hub is in scope.
#[deprecated(since = "0.2.0", note = "use `hub.add_actor(recipient)` on the program's TraceHub")]
pub fn add_actor_processor(actor: Recipient<TraceEvent>) {
    TraceHub::unscoped().add_actor(actor);
}
