//! The free functions of v0.1, deprecated: one process-wide set of
//! processors, which is now [`TraceHub::unscoped`].

use actix::Recipient;

use super::hub::TraceHub;
use super::model::TraceEvent;
use super::processor::Processor;

/// Registers `processor` on the hub of spans made where no hub is in scope.
#[deprecated(
    since = "0.2.0",
    note = "use a TraceHub the program owns: `hub.add_processor(p)`, and give it to sandboxes with `SandboxConfig::trace_hub`"
)]
pub fn add_processor(processor: impl Processor) {
    TraceHub::unscoped().add_processor(processor);
}

/// Hands `event` to the processors of [`TraceHub::unscoped`].
#[deprecated(since = "0.2.0", note = "use `TraceHub::publish` on the program's hub")]
pub fn publish(event: TraceEvent) {
    TraceHub::unscoped().publish(event);
}

/// Waits until the processors of [`TraceHub::unscoped`] have handled every
/// event published before, and have flushed.
#[deprecated(since = "0.2.0", note = "use `hub.flush().await` on the program's hub")]
pub fn force_flush() {
    TraceHub::unscoped().force_flush();
}

/// Flushes and shuts down the processors of [`TraceHub::unscoped`].
#[deprecated(
    since = "0.2.0",
    note = "use `hub.shutdown().await` on the program's hub"
)]
pub fn shutdown() {
    futures_executor::block_on(TraceHub::unscoped().shutdown());
}

/// Registers the actor behind `actor` on the hub of spans made where no
/// hub is in scope.
#[deprecated(
    since = "0.2.0",
    note = "use `hub.add_actor(recipient)` on the program's TraceHub"
)]
pub fn add_actor_processor(actor: Recipient<TraceEvent>) {
    TraceHub::unscoped().add_actor(actor);
}
