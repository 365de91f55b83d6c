//! [`RawEvent`]: an event's packet JSON and binary frames, as they arrived.
//!
//! Socket.IO's own `Data` extractor copies every binary attachment into a
//! fresh buffer and loses the event's id when its payload does not decode;
//! the `/rpc` handlers decode themselves instead, without copying, from
//! this.

use std::convert::Infallible;
use std::sync::Arc;

use agentix_wire::json_text::JsonText;
use bytes::Bytes;
use serde::de::IgnoredAny;
use serde::Deserializer as _;
use serde_json::value::RawValue;
use socketioxide::adapter::Adapter;
use socketioxide::handler::{FromMessage, Value};
use socketioxide::socket::Socket;

/// An event's payload, undecoded: its packet JSON (`[event, payload]`) and
/// the binary frames that followed it.
pub(crate) struct RawEvent {
    json: Bytes,
    frames: Vec<Bytes>,
}

impl RawEvent {
    /// A plugin event's payload as the text it came as, checked to be JSON
    /// and never parsed into a value: the first argument after the event's
    /// name (`null` if none; further ones are ignored), and its binary
    /// attachments, passed on as they came (their placeholders are in the
    /// text).
    pub(crate) fn into_payload(self) -> Result<(JsonText, Vec<Bytes>), String> {
        let mut de = serde_json::Deserializer::from_slice(&self.json);
        let payload = de
            .deserialize_seq(FirstArgument)
            .and_then(|payload| de.end().map(|()| payload))
            .map_err(|e| format!("malformed event: {e}"))?;
        let text = match payload {
            Some(raw) => JsonText::from_raw(raw.to_owned()),
            None => JsonText::from_value(&serde_json::Value::Null),
        };
        Ok((text, self.frames))
    }

    /// Hands `decode` the payload's JSON text as it came (placeholders left
    /// as they are; `null` if there is none) and the frames: a typed
    /// decoding straight from the text, with no JSON value built first.
    pub(crate) fn with_payload<R>(
        self,
        decode: impl FnOnce(&str, Vec<Bytes>) -> R,
    ) -> Result<R, String> {
        let mut de = serde_json::Deserializer::from_slice(&self.json);
        let payload = de
            .deserialize_seq(FirstArgument)
            .and_then(|payload| de.end().map(|()| payload))
            .map_err(|e| format!("malformed event: {e}"))?;
        Ok(decode(payload.map_or("null", RawValue::get), self.frames))
    }

    /// The payload as JSON (placeholders left as they are) and the frames,
    /// for decoding in two steps.
    pub(crate) fn into_parts(self) -> Result<(serde_json::Value, Vec<Bytes>), String> {
        let (_, payload): (IgnoredAny, serde_json::Value) =
            serde_json::from_slice(&self.json).map_err(|e| format!("malformed event: {e}"))?;
        Ok((payload, self.frames))
    }
}

/// Takes `[event, first, ..]` apart: `first`, as its text.
struct FirstArgument;

impl<'de> serde::de::Visitor<'de> for FirstArgument {
    type Value = Option<&'de RawValue>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an event: [name, payload, ..]")
    }

    fn visit_seq<S: serde::de::SeqAccess<'de>>(self, mut seq: S) -> Result<Self::Value, S::Error> {
        let _name: IgnoredAny = seq
            .next_element()?
            .ok_or_else(|| serde::de::Error::invalid_length(0, &self))?;
        let first = seq.next_element::<&RawValue>()?;
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(first)
    }
}

impl<A: Adapter> FromMessage<A> for RawEvent {
    type Error = Infallible;

    fn from_message(_: Arc<Socket<A>>, v: Value, _: Option<i64>) -> Result<Self, Infallible> {
        Ok(RawEvent::from(v))
    }
}

impl From<Value> for RawEvent {
    fn from(v: Value) -> Self {
        match v {
            Value::Str(json, frames) => RawEvent {
                json: Bytes::from(json),
                frames: frames.map(Vec::from).unwrap_or_default(),
            },
            Value::Bytes(bytes) => RawEvent {
                json: Bytes::new(),
                frames: vec![bytes],
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(json: &str, frames: Vec<Bytes>) -> RawEvent {
        RawEvent {
            json: Bytes::copy_from_slice(json.as_bytes()),
            frames,
        }
    }

    #[test]
    fn a_plugin_events_payload_is_its_first_argument_as_sent() {
        let (text, frames) = event(r#"["configure", {"b": 1,  "a": "x\"y"}, 2, [3]]"#, vec![])
            .into_payload()
            .unwrap();
        assert_eq!(text.as_str(), r#"{"b": 1,  "a": "x\"y"}"#);
        assert!(frames.is_empty());
        let (none, _) = event(r#"["ping"]"#, vec![]).into_payload().unwrap();
        assert_eq!(none.to_value(), serde_json::Value::Null);
    }

    #[test]
    fn binary_attachments_pass_on_beside_their_placeholders() {
        let (text, frames) = event(
            r#"["blob", {"_placeholder": true, "num": 0}]"#,
            vec![Bytes::from_static(b"bytes")],
        )
        .into_payload()
        .unwrap();
        assert_eq!(text.as_str(), r#"{"_placeholder": true, "num": 0}"#);
        assert_eq!(frames, [Bytes::from_static(b"bytes")]);
    }

    #[test]
    fn malformed_plugin_events_are_refused() {
        for bad in [
            r#"["x", {"a": }]"#,
            r#"{"not": "an array"}"#,
            "[]",
            r#"["x", 1] 2"#,
        ] {
            let err = event(bad, vec![]).into_payload().unwrap_err();
            assert!(err.contains("malformed"), "{bad}: {err}");
        }
    }
}
