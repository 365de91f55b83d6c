//! [`Egress`]: the `/egress` namespace's protocol. The sandbox half opens
//! a tunnel per proxied connection (`Open`, answered once the host has
//! checked the destination and connected, or opened the named route); bytes then flow as binary
//! attachments, each direction under a window of [`WINDOW`] unacknowledged
//! bytes, so neither side buffers more than that per tunnel; each side
//! says when its direction has ended.

use agentix::trace::SpanContext;
use agentix::Attachment;
use serde::{Deserialize, Serialize};

/// Unacknowledged bytes a tunnel may have in flight each way.
pub const WINDOW: u64 = 1 << 20;

/// Bytes one `Up` or `Down` event carries at most.
pub const CHUNK: usize = 64 << 10;

/// Opens tunnel `tunnel` to `to` (the host checks and dials).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Open {
    /// The sandbox half's number for the tunnel.
    pub tunnel: u64,
    /// Where to.
    pub to: TunnelTo,
    /// The span the connection's span goes under: the sandbox's call that
    /// started the proxy, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<SpanContext>,
}

/// Where a tunnel goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TunnelTo {
    /// `host:port`, as the client wrote it (a name or an address literal);
    /// the policy decides.
    Address {
        /// The host.
        host: String,
        /// The port.
        port: u16,
    },
    /// One of the host's named routes: HTTP requests to it go to the
    /// route's upstream with the headers the host adds.
    Route {
        /// The route's name.
        name: String,
    },
}

impl std::fmt::Display for TunnelTo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TunnelTo::Address { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            TunnelTo::Address { host, port } => write!(f, "{host}:{port}"),
            TunnelTo::Route { name } => write!(f, "route `{name}`"),
        }
    }
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
