//! [`CallRequest`]: a host's `call` event, checked and decoded.
//!
//! Kept apart from the socket code so the decoding of untrusted input is a
//! pure function that property tests can throw anything at.

use agentix_trace::SpanContext;
use agentix_wire::errors::{ErrorKind, RemoteError};
use agentix_wire::wire::{CallEvent, ErrorEvent, Window};
use bytes::Bytes;
use serde_json::Value;

/// The longest target name a call may give: wire names are module paths
/// plus a function name, and searching for close matches of a longer one
/// would only cost the worker time.
pub(crate) const MAX_TARGET_BYTES: usize = 512;

/// A well-formed call: the host's id, the target, CBOR arguments, and the
/// window if it is a streaming call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CallRequest {
    /// The host's call id.
    pub id: u64,
    /// Remote function name.
    pub target: String,
    /// CBOR arguments.
    pub args: Bytes,
    /// Present for a streaming call.
    pub stream: Option<Window>,
    /// The host's trace context.
    pub trace: Option<SpanContext>,
    /// The host takes a large result in acknowledged parts.
    pub parts: bool,
}

impl CallRequest {
    /// Decodes a `call` event payload from its JSON text, as [`parse`]
    /// does from a JSON value: a well-formed call is read straight into
    /// its fields (parsing it into a value first was about 7% of the
    /// server's time per small call); anything else goes through
    /// [`parse`], so every refusal reads the same.
    ///
    /// [`parse`]: CallRequest::parse
    pub(crate) fn parse_text(text: &str, frames: Vec<Bytes>) -> Result<CallRequest, ErrorEvent> {
        // serde would also take `[id, target, args]`; `parse` refuses it.
        if text.trim_start().starts_with('{') {
            if let Ok(event) = serde_json::from_str::<CallEvent>(text) {
                return Self::checked(event, frames);
            }
        }
        match serde_json::from_str::<Value>(text) {
            Ok(data) => Self::parse(data, frames),
            Err(e) => Err(ErrorEvent {
                id: 0,
                error: RemoteError::new(ErrorKind::Protocol, format!("malformed call event: {e}")),
            }),
        }
    }

    /// Decodes a `call` event payload (its JSON and the binary frames that
    /// followed it), or gives the `call:error` to send back: it carries the
    /// event's id when one could be read, else 0.
    pub(crate) fn parse(data: Value, frames: Vec<Bytes>) -> Result<CallRequest, ErrorEvent> {
        let id = data.get("id").and_then(Value::as_u64);
        if !data.is_object() {
            // serde would also take `[id, target, args]`; one shape is enough.
            return Err(ErrorEvent {
                id: 0,
                error: RemoteError::new(
                    ErrorKind::Protocol,
                    "malformed call event: expected a JSON object {id, target, args}",
                ),
            });
        }
        let event = serde_json::from_value::<CallEvent>(data).map_err(|e| ErrorEvent {
            id: id.unwrap_or(0),
            error: RemoteError::new(
                ErrorKind::Protocol,
                format!(
                    "malformed call event (expected {{id, target, args}} with args a binary \
                     attachment): {e}"
                ),
            ),
        })?;
        Self::checked(event, frames)
    }

    /// Fills `event`'s arguments from `frames` and checks what serde could
    /// not: a window with room for an item, a target name of sane length.
    fn checked(mut event: CallEvent, frames: Vec<Bytes>) -> Result<CallRequest, ErrorEvent> {
        agentix_wire::attachment::resolve(&mut event, frames).map_err(|e| ErrorEvent {
            id: event.id,
            error: RemoteError::new(
                ErrorKind::BadArguments,
                format!("arguments for `{}`: {e}", event.target),
            ),
        })?;
        if let Some(window) = event.stream {
            if window.items == 0 || window.bytes == 0 {
                return Err(ErrorEvent {
                    id: event.id,
                    error: RemoteError::new(
                        ErrorKind::Protocol,
                        format!(
                            "the stream window of `{}` ({} items, {} bytes) has no room for \
                             one item: both must be at least 1",
                            event.target, window.items, window.bytes
                        ),
                    ),
                });
            }
        }
        if event.target.len() > MAX_TARGET_BYTES {
            return Err(ErrorEvent {
                id: event.id,
                error: RemoteError::new(
                    ErrorKind::UnknownTarget,
                    format!(
                        "the target name is {} bytes long; no remote function's name is longer \
                         than {MAX_TARGET_BYTES}",
                        event.target.len()
                    ),
                ),
            });
        }
        Ok(CallRequest {
            id: event.id,
            target: event.target,
            args: event.args.into_bytes(),
            stream: event.stream,
            trace: event.trace,
            parts: event.parts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| json!(f)),
            ".{0,20}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::from),
                proptest::collection::hash_map(
                    prop_oneof![
                        Just("id".to_owned()),
                        Just("target".to_owned()),
                        Just("args".to_owned()),
                        Just("stream".to_owned()),
                        "[a-z]{1,6}"
                    ],
                    inner,
                    0..6
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_payload_parses_or_names_its_id(
            data in json_value(),
            frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..8), 0..3),
        ) {
            let id = data.get("id").and_then(Value::as_u64);
            let frames = frames.into_iter().map(Bytes::from).collect();
            match CallRequest::parse(data, frames) {
                Ok(request) => prop_assert_eq!(Some(request.id), id),
                Err(rejected) => {
                    prop_assert_eq!(rejected.id, id.unwrap_or(0));
                    prop_assert!(matches!(
                        rejected.error.kind,
                        ErrorKind::Protocol | ErrorKind::BadArguments | ErrorKind::UnknownTarget
                    ));
                }
            }
        }

        #[test]
        fn the_text_reads_as_its_value_does(
            data in json_value(),
            frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..8), 0..3),
        ) {
            let frames: Vec<Bytes> = frames.into_iter().map(Bytes::from).collect();
            let text = data.to_string();
            // Refusals carry the same id and kind (their messages may print
            // a float that went through text differently).
            let outcome = |r: Result<CallRequest, ErrorEvent>| r.map_err(|e| (e.id, e.error.kind));
            prop_assert_eq!(
                outcome(CallRequest::parse_text(&text, frames.clone())),
                outcome(CallRequest::parse(data, frames))
            );
        }

        #[test]
        fn well_formed_calls_keep_their_bytes(
            id in any::<u64>(),
            target in "[a-z_:]{1,30}",
            args in proptest::collection::vec(any::<u8>(), 0..200),
            window in any::<Option<(u64, u64)>>(),
        ) {
            let stream = window.map(|(items, bytes)| Window { items: items.max(1), bytes: bytes.max(1) });
            let mut data = json!({"id": id, "target": target, "args": {"_placeholder": true, "num": 0}});
            if let Some(window) = stream {
                data["stream"] = json!(window);
            }
            let want = CallRequest { id, target, args: Bytes::from(args.clone()), stream, trace: None, parts: false };
            prop_assert_eq!(CallRequest::parse(data, vec![Bytes::from(args)]), Ok(want));
        }
    }
}
