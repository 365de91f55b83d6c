//! [`WithFrames`]: JSON text whose attachment placeholders stand for
//! binary frames kept beside it, serialised again with each frame's bytes
//! where its placeholder is, so a Socket.IO serializer sends them as
//! binary attachments once more. The server passes a plugin's events on
//! with it, never knowing their types.

use bytes::Bytes;
use serde::ser::{Error as _, SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// `json`, its placeholders standing for `frames`.
pub struct WithFrames<'a> {
    /// The payload, placeholders in it.
    pub json: &'a RawValue,
    /// The frames its placeholders name, by number.
    pub frames: &'a [Bytes],
}

impl Serialize for WithFrames<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let value: Value = serde_json::from_str(self.json.get()).map_err(S::Error::custom)?;
        Node {
            value: &value,
            frames: self.frames,
        }
        .serialize(serializer)
    }
}

/// One node of the payload, a placeholder serialised as its frame's bytes.
struct Node<'a> {
    value: &'a Value,
    frames: &'a [Bytes],
}

impl Serialize for Node<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.value {
            Value::Object(map) => match placeholder(map) {
                Some(num) => {
                    let frame = self.frames.get(num).ok_or_else(|| {
                        S::Error::custom(format!("placeholder {num} names no attachment"))
                    })?;
                    serializer.serialize_bytes(frame)
                }
                None => {
                    let mut out = serializer.serialize_map(Some(map.len()))?;
                    for (key, value) in map {
                        out.serialize_entry(key, &self.node(value))?;
                    }
                    out.end()
                }
            },
            Value::Array(items) => {
                let mut out = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    out.serialize_element(&self.node(item))?;
                }
                out.end()
            }
            other => other.serialize(serializer),
        }
    }
}

impl<'a> Node<'a> {
    fn node(&self, value: &'a Value) -> Node<'a> {
        Node {
            value,
            frames: self.frames,
        }
    }
}

/// The frame number of a placeholder `{"_placeholder": true, "num": N}`.
fn placeholder(map: &Map<String, Value>) -> Option<usize> {
    if map.len() != 2 || map.get("_placeholder") != Some(&Value::Bool(true)) {
        return None;
    }
    map.get("num")?.as_u64().map(|n| n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attachment::{resolving, to_raw_value_collecting, Attachment};
    use serde::Deserialize;

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Chunk {
        tunnel: u32,
        bytes: Attachment,
        more: Vec<Attachment>,
    }

    #[test]
    fn a_payload_with_placeholders_goes_out_with_its_bytes_where_they_were() {
        let big = vec![7u8; (crate::part::SPLIT_ABOVE) + 10];
        let chunk = Chunk {
            tunnel: 3,
            bytes: Attachment::new(b"abc".to_vec()),
            more: vec![Attachment::new(big.clone()), Attachment::new(Vec::new())],
        };
        // As a worker sends it: JSON with placeholders, and the frames.
        let (json, frames) = to_raw_value_collecting(&chunk).unwrap();
        assert!(json.get().contains("_placeholder"), "{}", json.get());
        // Serialised again (to a serializer that writes bytes as arrays
        // here; Socket.IO's writes attachments), then read as the type.
        let again = serde_json::to_string(&WithFrames {
            json: &json,
            frames: &frames,
        })
        .unwrap();
        assert!(!again.contains("_placeholder"));
        // And a reader with the frames gets the same bytes back.
        let back: Chunk = resolving(&frames, || serde_json::from_str(json.get())).unwrap();
        assert_eq!(back, chunk);
        assert_eq!(back.more[0].as_bytes(), &big[..]);
    }

    #[test]
    fn a_frame_named_twice_or_not_at_all_is_refused() {
        let frames = [Bytes::from_static(b"x")];
        let twice = r#"{"tunnel":1,"bytes":{"_placeholder":true,"num":0},"more":[{"_placeholder":true,"num":0}]}"#;
        let err = resolving(&frames, || serde_json::from_str::<Chunk>(twice)).unwrap_err();
        assert!(err.to_string().contains("used twice"), "{err}");
        let missing = r#"{"tunnel":1,"bytes":{"_placeholder":true,"num":4},"more":[]}"#;
        let err = resolving(&frames, || serde_json::from_str::<Chunk>(missing)).unwrap_err();
        assert!(err.to_string().contains("names no attachment"), "{err}");
    }
}
