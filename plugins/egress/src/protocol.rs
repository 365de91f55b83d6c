//! [`Egress`]: the `/egress` namespace's protocol. The sandbox half opens
//! a tunnel per proxied connection (`Open`, answered once the host has
//! checked the destination and connected); bytes then flow as binary
//! attachments, each direction under a window of [`WINDOW`] unacknowledged
//! bytes, so neither side buffers more than that per tunnel; each side
//! says when its direction has ended.

use agentix::Attachment;
use serde::{Deserialize, Serialize};

/// Unacknowledged bytes a tunnel may have in flight each way.
pub const WINDOW: u64 = 1 << 20;

/// Bytes one `Up` or `Down` event carries at most.
pub const CHUNK: usize = 64 << 10;

/// Opens tunnel `tunnel` to `host:port` (the host checks and dials).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Open {
    /// The sandbox half's number for the tunnel.
    pub tunnel: u64,
    /// The host as the client wrote it (a name or an address literal).
    pub host: String,
    /// The port.
    pub port: u16,
}

/// The tunnel is open: the host connected to the address it checked.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Opened {
    /// The address connected to.
    pub address: String,
}

/// Bytes from the sandbox's client, for the upstream.
#[derive(Debug, Serialize, Deserialize)]
pub struct Up {
    /// The tunnel.
    pub tunnel: u64,
    /// The bytes.
    pub bytes: Attachment,
}

/// The sandbox's client sent its last byte (the host shuts the upstream's
/// write side).
#[derive(Debug, Serialize, Deserialize)]
pub struct UpEnd {
    /// The tunnel.
    pub tunnel: u64,
}

/// The host wrote `bytes` more of the tunnel's `Up` to the upstream.
#[derive(Debug, Serialize, Deserialize)]
pub struct UpAck {
    /// The tunnel.
    pub tunnel: u64,
    /// How many bytes.
    pub bytes: u64,
}

/// Bytes from the upstream, for the sandbox's client.
#[derive(Debug, Serialize, Deserialize)]
pub struct Down {
    /// The tunnel.
    pub tunnel: u64,
    /// The bytes.
    pub bytes: Attachment,
}

/// The upstream sent its last byte, or the tunnel failed (`error`).
#[derive(Debug, Serialize, Deserialize)]
pub struct DownEnd {
    /// The tunnel.
    pub tunnel: u64,
    /// Why it ended, if not by the upstream closing its side.
    pub error: Option<String>,
}

/// The sandbox half wrote `bytes` more of the tunnel's `Down` to its client.
#[derive(Debug, Serialize, Deserialize)]
pub struct DownAck {
    /// The tunnel.
    pub tunnel: u64,
    /// How many bytes.
    pub bytes: u64,
}

agentix::namespace_protocol! {
    /// What the two halves of `/egress` say.
    pub struct Egress = "/egress";
    to_sandbox { events [Down, DownEnd, UpAck] requests [] }
    to_host { events [Up, UpEnd, DownAck] requests [Open => Opened] }
}
