//! [`RawEvent`]: an event's packet JSON and binary frames, as they arrived.
//!
//! Socket.IO's own `Data` extractor copies every binary attachment into a
//! fresh buffer and loses the event's id when its payload does not decode;
//! the `/rpc` handlers decode themselves instead, without copying, from
//! this.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use socketioxide::adapter::Adapter;
use socketioxide::handler::{FromMessage, Value};
use socketioxide::socket::Socket;

/// An event's payload, undecoded: its packet JSON (`[event, payload]`) and
/// the binary frames that followed it.
pub struct RawEvent {
    json: Bytes,
    frames: Vec<Bytes>,
}

impl RawEvent {
    /// The payload as JSON (placeholders left as they are) and the frames,
    /// for decoding in two steps.
    pub fn into_parts(self) -> Result<(serde_json::Value, Vec<Bytes>), String> {
        let (_, payload): (serde::de::IgnoredAny, serde_json::Value) =
            serde_json::from_slice(&self.json).map_err(|e| format!("malformed event: {e}"))?;
        Ok((payload, self.frames))
    }
}

impl<A: Adapter> FromMessage<A> for RawEvent {
    type Error = Infallible;

    fn from_message(_: Arc<Socket<A>>, v: Value, _: Option<i64>) -> Result<Self, Infallible> {
        Ok(match v {
            Value::Str(json, frames) => RawEvent {
                json: json.as_bytes().to_vec().into(),
                frames: frames.map(Vec::from).unwrap_or_default(),
            },
            Value::Bytes(bytes) => RawEvent {
                json: Bytes::new(),
                frames: vec![bytes],
            },
        })
    }
}
