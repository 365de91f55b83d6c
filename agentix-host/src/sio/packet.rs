//! Engine.IO v4 and Socket.IO v5 framing for the client: what an incoming
//! websocket message means ([`Decoder`]), and the messages an outgoing
//! packet becomes ([`encode_event`], [`encode_connect`]).
//!
//! The packet codecs are socketioxide's own (`engineioxide-core`,
//! `socketioxide-parser-common`), so client and server agree by
//! construction. Three gaps in them are filled here: the Engine.IO OPEN
//! packet (which their parser leaves to the server side), Socket.IO
//! CONNECT_ERROR (which only servers send, so the common parser never
//! decodes it), and binary attachments, which are collected here without
//! being copied.

use agentix_wire::attachment::{to_json_collecting, PART_BYTES};
use bytes::Bytes;
use engineioxide_core::{OpenPacket, Str};
use serde::Serialize;
use socketioxide_core::packet::{Packet, PacketData};
use socketioxide_core::parser::{Parse, ParseConfig, ParseError, ParserState};
use socketioxide_core::Value;
use socketioxide_parser_common::CommonParser;
use tokio_tungstenite::tungstenite::Message;

/// Binary attachments one event may carry beyond those its largest
/// payload needs (one per [`PART_BYTES`]).
const SPARE_ATTACHMENTS: usize = 64;

/// What one incoming websocket message amounted to.
#[derive(Debug)]
pub(crate) enum Inbound {
    /// The Engine.IO handshake.
    Open(OpenPacket),
    /// The server's heartbeat; it wants a pong.
    Ping,
    /// The server closes the connection.
    Close,
    /// Namespace `ns` accepted our connect.
    Connected(String),
    /// Namespace `ns` refused our connect, saying why.
    ConnectRefused { ns: String, message: String },
    /// The server left namespace `ns`.
    Disconnected(String),
    /// An event on `ns`, complete with its attachments.
    Event { ns: String, event: RawPayload },
    /// Nothing to act on (a pong, a noop, an attachment still awaited, an ack).
    Nothing,
}

/// An event's packet JSON (`[name, payload, ..]`) and its binary frames.
#[derive(Debug)]
pub(crate) struct RawPayload {
    pub(crate) json: Str,
    pub(crate) frames: Vec<Bytes>,
}

/// A message that breaks the protocol; the connection cannot go on.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct ProtocolViolation(String);

/// Turns incoming websocket messages into [`Inbound`]s, holding a binary
/// event until its attachments have arrived.
pub(crate) struct Decoder {
    config: ParseConfig,
    state: ParserState,
    partial: Option<Partial>,
}

struct Partial {
    packet: Packet,
    expected: usize,
    frames: Vec<Bytes>,
}

impl Decoder {
    /// A decoder accepting attachments of up to `max_bytes` in all.
    pub(crate) fn new(max_bytes: usize) -> Self {
        Decoder {
            config: ParseConfig {
                max_incoming_binary_buf_size: max_bytes,
                max_incoming_binaries: max_bytes / PART_BYTES + SPARE_ATTACHMENTS,
                ..ParseConfig::default()
            },
            state: ParserState::default(),
            partial: None,
        }
    }

    /// Decodes one text message.
    pub(crate) fn text(&mut self, text: &str) -> Result<Inbound, ProtocolViolation> {
        if self.partial.is_some() {
            return Err(violation(
                "a text packet arrived while attachments were due",
            ));
        }
        let Some(kind) = text.as_bytes().first() else {
            return Err(violation("an empty Engine.IO packet"));
        };
        match kind {
            b'0' => serde_json::from_str(&text[1..])
                .map(Inbound::Open)
                .map_err(|e| violation(format!("a malformed OPEN packet: {e}"))),
            b'1' => Ok(Inbound::Close),
            b'2' => Ok(Inbound::Ping),
            b'3' | b'6' => Ok(Inbound::Nothing),
            b'4' => self.socketio(&text[1..]),
            other => Err(violation(format!(
                "unknown Engine.IO packet type {:?}",
                char::from(*other)
            ))),
        }
    }

    /// Decodes one binary message: an attachment of the pending event.
    pub(crate) fn binary(&mut self, frame: Bytes) -> Result<Inbound, ProtocolViolation> {
        let Some(partial) = self.partial.as_mut() else {
            return Err(violation("a binary frame arrived that no event announced"));
        };
        let total: usize = partial.frames.iter().map(Bytes::len).sum::<usize>() + frame.len();
        if total > self.config.max_incoming_binary_buf_size {
            return Err(violation(format!(
                "an event's attachments exceed {} bytes",
                self.config.max_incoming_binary_buf_size
            )));
        }
        partial.frames.push(frame);
        if partial.frames.len() < partial.expected {
            return Ok(Inbound::Nothing);
        }
        let Partial { packet, frames, .. } = self.partial.take().expect("checked above");
        Ok(complete(packet, frames))
    }

    fn socketio(&mut self, text: &str) -> Result<Inbound, ProtocolViolation> {
        if let Some(rest) = text.strip_prefix('4') {
            let (ns, json) = split_namespace(rest);
            let message = serde_json::from_str::<serde_json::Value>(json)
                .ok()
                .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
                .unwrap_or_else(|| json.to_owned());
            return Ok(Inbound::ConnectRefused {
                ns: ns.to_owned(),
                message,
            });
        }
        let text = Str::from(text.to_owned());
        match CommonParser.decode_str(&self.config, &self.state, text) {
            Ok(packet) => Ok(complete(packet, Vec::new())),
            Err(ParseError::NeedsMoreBinaryData) => {
                // The parser keeps the header for its own attachment
                // collection, which copies each frame: take it back.
                let packet = self
                    .state
                    .partial_bin_packet
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take()
                    .map(|p| p.packet)
                    .ok_or_else(|| violation("a binary event without its header"))?;
                let expected = self
                    .state
                    .incoming_binary_cnt
                    .load(std::sync::atomic::Ordering::Acquire);
                self.partial = Some(Partial {
                    packet,
                    expected,
                    frames: Vec::with_capacity(expected),
                });
                Ok(Inbound::Nothing)
            }
            Err(e) => Err(violation(format!("a malformed Socket.IO packet: {e}"))),
        }
    }
}

fn complete(packet: Packet, frames: Vec<Bytes>) -> Inbound {
    let ns = packet.ns.as_str().to_owned();
    match packet.inner {
        PacketData::Connect(_) => Inbound::Connected(ns),
        PacketData::Disconnect => Inbound::Disconnected(ns),
        PacketData::Event(Value::Str(json, _), _)
        | PacketData::BinaryEvent(Value::Str(json, _), _) => Inbound::Event {
            ns,
            event: RawPayload { json, frames },
        },
        // We never ask for acks, and the server sends no other packet.
        _ => Inbound::Nothing,
    }
}

/// Splits `/ns,rest` into the namespace and the rest (`/` if none is named).
fn split_namespace(text: &str) -> (&str, &str) {
    if text.starts_with('/') {
        if let Some((ns, rest)) = text.split_once(',') {
            return (ns, rest);
        }
        return (text, "");
    }
    ("/", text)
}

fn violation(why: impl Into<String>) -> ProtocolViolation {
    ProtocolViolation(why.into())
}

/// The websocket messages of event `event` with `data` on `ns`: one text
/// message, then one binary message per attachment.
pub(crate) fn encode_event<T: Serialize + ?Sized>(
    ns: &str,
    event: &str,
    data: &T,
) -> Result<Vec<Message>, String> {
    let value = CommonParser
        .encode_value(data, Some(event))
        .map_err(|e| format!("cannot encode `{event}`: {e}"))?;
    Ok(messages(Packet::event(ns.to_owned(), value)))
}

/// [`encode_event`] for a payload (not a tuple) whose bytes are all
/// [`Attachment`](agentix_wire::attachment::Attachment)s: their bytes
/// become the binary messages as they are, where Socket.IO's serializer
/// copies each. Bytes of any other type would become JSON numbers.
pub(crate) fn encode_attachments_event<T: Serialize + ?Sized>(
    ns: &str,
    event: &str,
    data: &T,
) -> Result<Vec<Message>, String> {
    let (json, frames) =
        to_json_collecting(&(event, data)).map_err(|e| format!("cannot encode `{event}`: {e}"))?;
    let value = Value::Str(Str::from(json), (!frames.is_empty()).then(|| frames.into()));
    Ok(messages(Packet::event(ns.to_owned(), value)))
}

/// The message that joins `ns` with the connect payload `auth`.
pub(crate) fn encode_connect(ns: &str, auth: &serde_json::Value) -> Message {
    let auth = Value::Str(Str::from(auth.to_string()), None);
    let mut out = messages(Packet::connect(ns.to_owned(), Some(auth)));
    out.remove(0)
}

/// Engine.IO's pong, the answer to a ping.
pub(crate) fn pong() -> Message {
    Message::text("3")
}

fn messages(packet: Packet) -> Vec<Message> {
    let Value::Str(text, attachments) = CommonParser.encode(packet) else {
        unreachable!("the common parser encodes to text");
    };
    let attachments = attachments.unwrap_or_default();
    let mut out = Vec::with_capacity(1 + attachments.len());
    let mut header = String::with_capacity(1 + text.len());
    header.push('4');
    header.push_str(&text);
    out.push(Message::text(header));
    // Each at most SPLIT_ABOVE: larger payloads travel as parts (see
    // agentix_wire::attachment), so no one message fills a write buffer.
    out.extend(attachments.into_iter().map(Message::Binary));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_of(message: &Message) -> &str {
        match message {
            Message::Text(t) => t.as_str(),
            other => panic!("not a text message: {other:?}"),
        }
    }

    #[test]
    fn an_event_with_bytes_is_a_header_and_its_attachment() {
        #[derive(Serialize)]
        struct Call {
            id: u64,
            #[serde(with = "serde_bytes")]
            args: Vec<u8>,
        }
        let bytes: Vec<u8> = (0..=255u8).chain([0x1e; 4]).collect();
        let out = encode_event(
            "/rpc",
            "call",
            &Call {
                id: 7,
                args: bytes.clone(),
            },
        )
        .unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(
            text_of(&out[0]),
            r#"451-/rpc,["call",{"id":7,"args":{"_placeholder":true,"num":0}}]"#
        );
        assert_eq!(out[1], Message::Binary(bytes.clone().into()));

        // And back, as the server would send it.
        let mut decoder = Decoder::new(1 << 20);
        assert!(matches!(
            decoder.text(text_of(&out[0])).unwrap(),
            Inbound::Nothing
        ));
        let Inbound::Event { ns, event } = decoder.binary(bytes.clone().into()).unwrap() else {
            panic!("not an event");
        };
        assert_eq!(ns, "/rpc");
        assert_eq!(event.frames, vec![Bytes::from(bytes)]);
        assert!(event.json.as_str().starts_with(r#"["call","#));
    }

    #[test]
    fn attachments_go_out_as_socketio_sends_them_without_a_copy() {
        use agentix_wire::attachment::{Attachment, SPLIT_ABOVE};
        use agentix_wire::wire::{CallEvent, PartEvent};
        let call = |args: Bytes| CallEvent {
            id: 3,
            target: "echo".into(),
            args: Attachment::new(args),
            stream: None,
            trace: None,
            parts: true,
        };
        let small = Bytes::from((0..=255u8).chain([0x1e; 4]).collect::<Vec<_>>());
        let large = Bytes::from(vec![0x1eu8; 3 * SPLIT_ABOVE]);
        for bytes in [Bytes::new(), small, large] {
            let ours = encode_attachments_event("/rpc", "call", &call(bytes.clone())).unwrap();
            let theirs = encode_event("/rpc", "call", &call(bytes.clone())).unwrap();
            assert_eq!(ours, theirs, "{} bytes", bytes.len());
            let mut offset = 0;
            for frame in &ours[1..] {
                let Message::Binary(frame) = frame else {
                    panic!("not binary")
                };
                // The frame is the caller's memory, not a copy of it.
                assert_eq!(frame.as_ptr(), bytes[offset..].as_ptr());
                offset += frame.len();
            }
            assert_eq!(offset, bytes.len());
        }
        let part = PartEvent {
            id: 3,
            total: 9,
            bytes: Attachment::new(Bytes::from_static(b"abc")),
        };
        assert_eq!(
            encode_attachments_event("/rpc", "call:part", &part).unwrap(),
            encode_event("/rpc", "call:part", &part).unwrap()
        );
    }

    #[test]
    fn handshake_packets_decode() {
        let mut d = Decoder::new(1024);
        let open = r#"0{"sid":"abcdefghijklmnop","upgrades":[],"pingInterval":25000,"pingTimeout":20000,"maxPayload":1000}"#;
        let Inbound::Open(open) = d.text(open).unwrap() else {
            panic!("not open")
        };
        assert_eq!(open.ping_interval.as_millis(), 25000);
        assert!(
            matches!(d.text("40/rpc,{\"sid\":\"x\"}").unwrap(), Inbound::Connected(ns) if ns == "/rpc")
        );
        assert!(matches!(
            d.text(r#"44/log,{"message":"auth rejected: wrong sandbox token"}"#).unwrap(),
            Inbound::ConnectRefused { ns, message } if ns == "/log" && message == "auth rejected: wrong sandbox token"
        ));
        assert!(matches!(d.text("2").unwrap(), Inbound::Ping));
        assert!(matches!(d.text("41/rpc,").unwrap(), Inbound::Disconnected(ns) if ns == "/rpc"));
        assert!(
            text_of(&encode_connect("/rpc", &serde_json::json!({"token": "t"})))
                == r#"40/rpc,{"token":"t"}"#
        );
    }

    #[test]
    fn broken_sequences_are_violations() {
        let mut d = Decoder::new(8);
        assert!(d.binary(Bytes::from_static(b"stray")).is_err());
        assert!(d.text("").is_err());
        assert!(d.text("9").is_err());
        assert!(d.text("4garbage").is_err());
        d.text(r#"451-/rpc,["e",{"_placeholder":true,"num":0}]"#)
            .unwrap();
        assert!(d.text("2").is_err(), "text while an attachment is due");
        let mut d = Decoder::new(8);
        d.text(r#"451-/rpc,["e",{"_placeholder":true,"num":0}]"#)
            .unwrap();
        assert!(d.binary(Bytes::from(vec![0; 9])).is_err(), "over the limit");
    }
}
