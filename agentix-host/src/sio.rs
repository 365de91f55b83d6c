//! The host's own Socket.IO client: one websocket per sandbox, every
//! namespace on it, payload bytes as binary attachments.
//!
//! Built on the server's own codec crates (`engineioxide-core`,
//! `socketioxide-core`, `socketioxide-parser-common`) and
//! `tokio-tungstenite`, talking websocket directly
//! (`?EIO=4&transport=websocket`); only the client's state machine lives
//! here. (The `rust_socketio` clients split binary frames on byte 0x1e,
//! interleave concurrent binary sends and hand acks to the wrong callback.)
//!
//! - [`client`]: [`SioClient`]: connect, join, emit, the reader task, pings.
//! - `packet`: what an incoming message means, what an outgoing one is.
//! - [`error`]: [`SioError`], why a connection failed.
//! - [`server_stream`]: TCP or a Unix socket, as the server's address says.

pub(crate) mod client;
pub(crate) mod error;
mod packet;
pub(crate) mod server_stream;

pub(crate) use client::{ClientSettings, Delivery, Handler, Incoming, SioClient};
pub(crate) use error::SioError;
