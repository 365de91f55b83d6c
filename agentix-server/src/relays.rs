//! [`Relays`]: where everything the sandbox logs, prints or traces goes
//! on its way to hosts — a handle over the server's two relay actors
//! ([`ChannelRelay`]: one for `/log`, one for `/trace`), cheap to clone and
//! always reaching the incarnation that runs now.

use actix::Addr;
use agentix_actors::supervision::ChildAddr;
use agentix_wire::wire::SideBatch;

use crate::channel_relay::{ChannelRelay, HostJoined, Relay};

/// The log and trace relays, as the worker's pumps and the namespaces see
/// them.
#[derive(Clone)]
pub struct Relays {
    logs: ChildAddr<ChannelRelay>,
    traces: ChildAddr<ChannelRelay>,
}

impl Relays {
    /// A handle over the relays now at `logs` and `traces`.
    pub fn new(logs: ChildAddr<ChannelRelay>, traces: ChildAddr<ChannelRelay>) -> Self {
        Relays { logs, traces }
    }

    /// Relays a batch of log records, waiting while the relay is behind.
    pub async fn send_logs(&self, batch: SideBatch) {
        relay(self.logs.get(), batch).await;
    }

    /// Relays a batch of trace events, waiting while the relay is behind.
    pub async fn send_traces(&self, batch: SideBatch) {
        relay(self.traces.get(), batch).await;
    }

    /// A host joined `/log` or `/trace`: it gets the backlog at once.
    pub fn host_joined(&self) {
        // A relay whose mailbox is full sends its backlog with the next
        // batch anyway: nothing is lost by not waiting here.
        let _ = self.logs.get().try_send(HostJoined);
        let _ = self.traces.get().try_send(HostJoined);
    }
}

async fn relay(to: Addr<ChannelRelay>, batch: SideBatch) {
    if batch.count > 0 {
        // A relay that ended (its parent starts another) lost this batch;
        // the sandbox log file has it.
        let _ = to.send(Relay(batch)).await;
    }
}
