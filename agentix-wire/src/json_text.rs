//! [`JsonText`]: a plugin event's payload as the JSON text it is, carried
//! between worker, server and hosts without being parsed on the way.
//!
//! A plugin event crosses the worker's pipe to the server, which passes it
//! on to its hosts as Socket.IO text. Held as a parsed value, a payload was
//! built into a tree three times on its way (a worker turned it into CBOR,
//! the server back into a tree, then into Socket.IO's JSON), which for an
//! agent's 256 KiB request cost milliseconds. As text it is written once
//! where it is made, checked once where it comes from an untrusted peer,
//! and otherwise copied.

use std::fmt;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;

/// Valid JSON text: a plugin event's payload on its way.
#[derive(Clone)]
pub struct JsonText(Box<RawValue>);

impl JsonText {
    /// `value` written out as JSON.
    pub fn from_value(value: &Value) -> JsonText {
        Self::to_json(value)
    }

    /// Anything serializable, written out as JSON (a map whose keys are
    /// not strings, which JSON cannot hold, becomes `null`).
    pub fn to_json<T: Serialize + ?Sized>(value: &T) -> JsonText {
        match serde_json::value::to_raw_value(value) {
            Ok(raw) => JsonText(raw),
            Err(_) => {
                JsonText(serde_json::value::to_raw_value(&Value::Null).expect("null is JSON"))
            }
        }
    }

    /// `text`, if it is valid JSON.
    pub fn parse(text: String) -> Result<JsonText, serde_json::Error> {
        RawValue::from_string(text).map(JsonText)
    }

    /// Already-checked JSON, as it is.
    pub fn from_raw(raw: Box<RawValue>) -> JsonText {
        JsonText(raw)
    }

    /// The checked JSON itself, taken without a copy.
    pub fn into_raw(self) -> Box<RawValue> {
        self.0
    }

    /// The text, for serializers that write it verbatim (serde_json's, and
    /// so Socket.IO's).
    pub fn raw(&self) -> &RawValue {
        &self.0
    }

    /// The text as a string.
    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// The payload parsed into a value.
    pub fn to_value(&self) -> Value {
        // Valid by construction; `null` only if a peer's text held a
        // number serde_json cannot represent.
        serde_json::from_str(self.0.get()).unwrap_or(Value::Null)
    }
}

impl From<Value> for JsonText {
    fn from(value: Value) -> Self {
        JsonText::from_value(&value)
    }
}

impl PartialEq for JsonText {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

impl fmt::Debug for JsonText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.get())
    }
}

/// On the worker's pipe (CBOR) the text is one text string.
impl Serialize for JsonText {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0.get())
    }
}

/// Checked on the way in: the text may come from sandbox code.
impl<'de> Deserialize<'de> for JsonText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        JsonText::parse(text).map_err(|e| D::Error::custom(format!("not JSON: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_payload_crosses_cbor_as_the_text_it_was() {
        let value =
            json!({"request_id": "r1", "data": {"text": "a \"quoted\"\nline", "n": [1, 2.5]}});
        let text = JsonText::from_value(&value);
        let mut cbor = Vec::new();
        ciborium::into_writer(&text, &mut cbor).unwrap();
        let back: JsonText = ciborium::from_reader(cbor.as_slice()).unwrap();
        assert_eq!(back, text);
        assert_eq!(back.to_value(), value);
    }

    #[test]
    fn text_that_is_not_json_is_refused_on_the_way_in() {
        let mut cbor = Vec::new();
        ciborium::into_writer(&"{\"open\": ", &mut cbor).unwrap();
        let err = ciborium::from_reader::<JsonText, _>(cbor.as_slice()).unwrap_err();
        assert!(err.to_string().contains("not JSON"), "{err}");
    }

    #[test]
    fn serde_json_writes_the_text_verbatim() {
        let text = JsonText::parse("{\"b\":1,  \"a\":[true]}".into()).unwrap();
        let written = serde_json::to_string(&("event", text.raw())).unwrap();
        assert_eq!(written, "[\"event\",{\"b\":1,  \"a\":[true]}]");
    }
}
