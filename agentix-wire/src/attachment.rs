//! [`Attachment`]: bytes that cross host <-> server as a Socket.IO binary
//! attachment, never as text.
//!
//! Socket.IO sends an event with binary data as one text packet whose JSON
//! holds a placeholder (`{"_placeholder": true, "num": 0}`) where the bytes
//! belong, followed by the bytes themselves as binary frames. Serialising an
//! `Attachment` asks the serializer for bytes, which Socket.IO's serializer
//! turns into such a placeholder plus a frame. Decoding goes the other way
//! without copying: [`decode_event`] parses the JSON, which leaves each
//! attachment as its placeholder's slot number, then hands every slot the
//! frame it names.
//!
//! Bytes past [`SPLIT_ABOVE`] travel as an array of placeholders, one frame
//! per [`PART_BYTES`] part, and are joined again on arrival: a websocket
//! writer keeps the capacity of the largest message it ever wrote, and a
//! 256 MiB message would leave every connection that carried one holding
//! 256 MiB. Up to [`SPLIT_ABOVE`] they are one frame, so a payload of
//! exactly 1 MiB plus its CBOR envelope (a file chunk, a 1 MiB argument)
//! is not cut into a part and a crumb that the receiver would copy to
//! join.

use std::fmt;

use bytes::Bytes;
use serde::de::{self, DeserializeOwned, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Bytes carried beside an event's JSON as a binary attachment.
#[derive(Clone, PartialEq, Eq)]
pub struct Attachment(Slot);

#[derive(Clone, PartialEq, Eq)]
enum Slot {
    Bytes(Bytes),
    /// Parsed from placeholders (one, or one per part); filled by
    /// [`decode_event`].
    Unresolved(Vec<usize>),
}

pub use crate::part::{PART_BYTES, SPLIT_ABOVE};

impl Attachment {
    /// An attachment carrying `bytes`.
    pub fn new(bytes: impl Into<Bytes>) -> Self {
        Attachment(Slot::Bytes(bytes.into()))
    }

    /// The bytes (empty only if the attachment was never resolved, which
    /// [`decode_event`] rules out).
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Slot::Bytes(b) => b,
            Slot::Unresolved(_) => &[],
        }
    }

    /// The bytes, without copying them.
    pub fn into_bytes(self) -> Bytes {
        match self.0 {
            Slot::Bytes(b) => b,
            Slot::Unresolved(_) => Bytes::new(),
        }
    }

    /// How many bytes it carries.
    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    /// Whether it carries no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn resolve(&mut self, frames: &mut [Option<Bytes>]) -> Result<(), String> {
        let Slot::Unresolved(nums) = &self.0 else {
            return Ok(());
        };
        let mut parts = Vec::with_capacity(nums.len());
        for &num in nums {
            let frame = frames
                .get_mut(num)
                .ok_or_else(|| format!("placeholder {num} names no attachment"))?
                .take()
                .ok_or_else(|| format!("attachment {num} is used twice"))?;
            parts.push(frame);
        }
        self.0 = Slot::Bytes(crate::part::join(parts));
        Ok(())
    }
}

impl fmt::Debug for Attachment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Slot::Bytes(b) => write!(f, "Attachment({} bytes)", b.len()),
            Slot::Unresolved(n) => write!(f, "Attachment(placeholders {n:?})"),
        }
    }
}

impl From<Vec<u8>> for Attachment {
    fn from(bytes: Vec<u8>) -> Self {
        Attachment::new(bytes)
    }
}

impl Serialize for Attachment {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let Slot::Bytes(b) = &self.0 else {
            return Err(serde::ser::Error::custom(
                "an unresolved attachment cannot be sent",
            ));
        };
        let collecting = COLLECTED.with_borrow(Option::is_some);
        if b.len() <= SPLIT_ABOVE && collecting {
            return PlaceholderOut(collect([b.clone()])).serialize(serializer);
        }
        if b.len() <= SPLIT_ABOVE {
            return serializer.serialize_bytes(b);
        }
        let pieces = crate::part::split(b.clone());
        let mut seq = serializer.serialize_seq(Some(pieces.len()))?;
        if collecting {
            let first = collect(pieces.iter().cloned());
            for num in first..first + pieces.len() {
                seq.serialize_element(&PlaceholderOut(num))?;
            }
        } else {
            for piece in &pieces {
                seq.serialize_element(serde_bytes::Bytes::new(piece))?;
            }
        }
        seq.end()
    }
}

thread_local! {
    /// The attachments of the event [`to_json_collecting`] is serialising
    /// on this thread, in placeholder order; `None` outside it.
    static COLLECTED: std::cell::RefCell<Option<Vec<Bytes>>> =
        const { std::cell::RefCell::new(None) };
}

/// Serialises `value` as JSON in which each [`Attachment`] is a Socket.IO
/// placeholder, and returns the JSON with the attachments' bytes in
/// placeholder order, not copied: a Socket.IO serializer only sees
/// `&[u8]` and copies every payload it is handed once more.
pub fn to_json_collecting<T: Serialize + ?Sized>(
    value: &T,
) -> serde_json::Result<(String, Vec<Bytes>)> {
    collecting(|| serde_json::to_string(value))
}

/// [`to_json_collecting`], as a [`RawValue`](serde_json::value::RawValue)
/// (no second parse of the text).
pub fn to_raw_value_collecting<T: Serialize + ?Sized>(
    value: &T,
) -> serde_json::Result<(Box<serde_json::value::RawValue>, Vec<Bytes>)> {
    collecting(|| serde_json::value::to_raw_value(value))
}

/// Runs `serialise` with this thread collecting attachments: its output
/// and the attachments' bytes, in placeholder order.
fn collecting<J>(
    serialise: impl FnOnce() -> serde_json::Result<J>,
) -> serde_json::Result<(J, Vec<Bytes>)> {
    // Restores the thread's state even if serialising panics.
    struct Collecting;
    impl Drop for Collecting {
        fn drop(&mut self) {
            COLLECTED.set(None);
        }
    }
    COLLECTED.set(Some(Vec::new()));
    let collecting = Collecting;
    let out = serialise();
    let frames = COLLECTED.take().unwrap_or_default();
    drop(collecting);
    Ok((out?, frames))
}

thread_local! {
    /// The frames of the event being decoded inside [`resolving`] on this
    /// thread; `None` outside it.
    static RESOLVING: std::cell::RefCell<Option<Frames>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `decode` with `frames` as the binary frames its placeholders name:
/// every [`Attachment`] it deserializes (from JSON text or from a parsed
/// value) is filled as it is read, whatever type holds it, so a payload
/// type needs no [`WithAttachments`] of its own. Frames are shared, not
/// copied.
pub fn resolving<R>(frames: &[Bytes], decode: impl FnOnce() -> R) -> R {
    // Restores the thread's state even if decoding panics; nests.
    struct Restore(Option<Frames>);
    impl Drop for Restore {
        fn drop(&mut self) {
            RESOLVING.set(self.0.take());
        }
    }
    let frames = Frames {
        frames: frames.to_vec(),
        used: vec![false; frames.len()],
    };
    let _restore = Restore(RESOLVING.replace(Some(frames)));
    decode()
}

/// An event's frames while it is decoded, and which are taken: a peer
/// naming one frame twice is refused, as [`resolve`] refuses it.
struct Frames {
    frames: Vec<Bytes>,
    used: Vec<bool>,
}

/// An attachment of placeholders `nums`: filled now inside [`resolving`],
/// else left for [`resolve`].
fn resolved_here(nums: Vec<usize>) -> Result<Attachment, String> {
    RESOLVING.with_borrow_mut(|frames| {
        let Some(Frames { frames, used }) = frames else {
            return Ok(Attachment(Slot::Unresolved(nums)));
        };
        let mut parts = Vec::with_capacity(nums.len());
        for num in nums {
            let frame = frames
                .get(num)
                .ok_or_else(|| format!("placeholder {num} names no attachment"))?;
            if std::mem::replace(&mut used[num], true) {
                return Err(format!("attachment {num} is used twice"));
            }
            parts.push(frame.clone());
        }
        Ok(Attachment(Slot::Bytes(crate::part::join(parts))))
    })
}

/// Hands `pieces` to this thread's collector (inside
/// [`to_json_collecting`]); the placeholder number of the first.
fn collect(pieces: impl IntoIterator<Item = Bytes>) -> usize {
    COLLECTED.with_borrow_mut(|frames| {
        let frames = frames.as_mut().expect("collecting");
        let first = frames.len();
        frames.extend(pieces);
        first
    })
}

/// A placeholder as sent: `{"_placeholder": true, "num": N}`.
struct PlaceholderOut(usize);

impl Serialize for PlaceholderOut {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("_placeholder", &true)?;
        map.serialize_entry("num", &self.0)?;
        map.end()
    }
}

impl<'de> Deserialize<'de> for Attachment {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(AttachmentVisitor)
    }
}

/// One placeholder, or an array of them (the parts, in order).
struct AttachmentVisitor;

impl<'de> Visitor<'de> for AttachmentVisitor {
    type Value = Attachment;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a binary attachment placeholder, or an array of them")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Attachment, A::Error> {
        let num = PlaceholderVisitor.visit_map(map)?;
        resolved_here(vec![num]).map_err(de::Error::custom)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Attachment, A::Error> {
        let mut nums = Vec::new();
        while let Some(Placeholder(num)) = seq.next_element()? {
            nums.push(num);
        }
        if nums.is_empty() {
            return Err(de::Error::custom("an attachment of no parts"));
        }
        resolved_here(nums).map_err(de::Error::custom)
    }
}

struct Placeholder(usize);

impl<'de> Deserialize<'de> for Placeholder {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_map(PlaceholderVisitor)
            .map(Placeholder)
    }
}

struct PlaceholderVisitor;

impl<'de> Visitor<'de> for PlaceholderVisitor {
    type Value = usize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a binary attachment placeholder {\"_placeholder\": true, \"num\": N}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
        let (mut placeholder, mut num) = (false, None);
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match &*key {
                "_placeholder" => placeholder = map.next_value()?,
                "num" => num = Some(map.next_value::<usize>()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        match (placeholder, num) {
            (true, Some(num)) => Ok(num),
            _ => Err(de::Error::custom(
                "expected a binary attachment placeholder {\"_placeholder\": true, \"num\": N}",
            )),
        }
    }
}

/// An event payload with binary attachments to fill in after parsing.
pub trait WithAttachments {
    /// Every attachment the payload holds, in any order.
    fn attachments_mut(&mut self) -> Vec<&mut Attachment>;
}

/// Decodes the payload `T` of an event whose packet JSON is `json` (the
/// Socket.IO array `[event, payload, ..]`), filling its attachments from
/// `frames`, the binary frames that followed the packet, in order.
pub fn decode_event<T>(json: &str, frames: Vec<Bytes>) -> Result<T, String>
where
    T: DeserializeOwned + WithAttachments,
{
    let EventArgs(payload) = resolving(&frames, || serde_json::from_str::<EventArgs<T>>(json))
        .map_err(|e| format!("malformed event: {e}"))?;
    Ok(payload)
}

/// The first argument of a packet array `[name, first, rest..]`; a client
/// may send more arguments than an event uses.
struct EventArgs<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for EventArgs<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Args<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Args<T> {
            type Value = EventArgs<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an event array [name, payload, ..]")
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                seq.next_element::<IgnoredAny>()?
                    .ok_or_else(|| de::Error::custom("an event without a name"))?;
                let first = seq
                    .next_element::<T>()?
                    .ok_or_else(|| de::Error::custom("an event without a payload"))?;
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(EventArgs(first))
            }
        }
        deserializer.deserialize_seq(Args(std::marker::PhantomData))
    }
}

/// Fills the attachments of an already parsed `payload` from `frames`.
pub fn resolve<T: WithAttachments>(payload: &mut T, frames: Vec<Bytes>) -> Result<(), String> {
    let mut frames: Vec<Option<Bytes>> = frames.into_iter().map(Some).collect();
    for attachment in payload.attachments_mut() {
        attachment.resolve(&mut frames)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Two {
        a: Attachment,
        b: Attachment,
    }

    impl WithAttachments for Two {
        fn attachments_mut(&mut self) -> Vec<&mut Attachment> {
            vec![&mut self.a, &mut self.b]
        }
    }

    #[test]
    fn placeholders_take_their_frames_in_any_order() {
        let json = r#"["e", {"a": {"num": 1, "_placeholder": true}, "b": {"_placeholder": true, "num": 0}}]"#;
        let frames = vec![Bytes::from_static(b"zero"), Bytes::from_static(b"one")];
        let two: Two = decode_event(json, frames).unwrap();
        assert_eq!(two.a.as_bytes(), b"one");
        assert_eq!(two.b.as_bytes(), b"zero");
    }

    #[test]
    fn large_bytes_travel_in_parts_and_join_again() {
        let bytes: Vec<u8> = (0..(PART_BYTES * 2 + 5)).map(|i| (i % 251) as u8).collect();
        let attachment = Attachment::new(bytes.clone());
        // As JSON the parts are byte arrays; Socket.IO's serializer turns
        // each into a placeholder and a frame.
        let json = serde_json::to_value(&attachment).unwrap();
        assert_eq!(json.as_array().map(Vec::len), Some(3));
        let text = r#"["e", {"a": [{"_placeholder": true, "num": 0}, {"_placeholder": true, "num": 1}, {"_placeholder": true, "num": 2}], "b": {"_placeholder": true, "num": 3}}]"#;
        let frames = bytes
            .chunks(PART_BYTES)
            .map(Bytes::copy_from_slice)
            .chain([Bytes::from_static(b"b")])
            .collect();
        let two: Two = decode_event(text, frames).unwrap();
        assert_eq!(two.a.as_bytes(), bytes.as_slice());
        assert_eq!(two.b.as_bytes(), b"b");
    }

    #[test]
    fn a_part_and_its_envelope_travel_as_one_frame() {
        // A 1 MiB file chunk or argument plus its CBOR envelope.
        let whole = serde_json::to_value(Attachment::new(vec![7u8; PART_BYTES + 20])).unwrap();
        assert!(whole.is_array() && whole[0].is_number(), "one byte string");
        let last_whole = serde_json::to_value(Attachment::new(vec![7u8; SPLIT_ABOVE])).unwrap();
        assert!(last_whole[0].is_number(), "one byte string");
        let parts = serde_json::to_value(Attachment::new(vec![7u8; SPLIT_ABOVE + 1])).unwrap();
        assert_eq!(parts.as_array().map(Vec::len), Some(2), "two parts");
        assert!(parts[0].is_array());
    }

    #[test]
    fn missing_reused_or_fake_attachments_are_errors() {
        let reused = r#"["e", {"a": {"_placeholder": true, "num": 0}, "b": {"_placeholder": true, "num": 0}}]"#;
        let err = decode_event::<Two>(reused, vec![Bytes::new()]).unwrap_err();
        assert!(err.contains("used twice"), "{err}");
        let missing = r#"["e", {"a": {"_placeholder": true, "num": 0}, "b": {"_placeholder": true, "num": 5}}]"#;
        let err = decode_event::<Two>(missing, vec![Bytes::new()]).unwrap_err();
        assert!(err.contains("names no attachment"), "{err}");
        let fake = r#"["e", {"a": "text", "b": {"_placeholder": true, "num": 0}}]"#;
        assert!(decode_event::<Two>(fake, vec![Bytes::new()]).is_err());
        let not_placeholder = r#"["e", {"a": {"num": 0}, "b": {"_placeholder": true, "num": 0}}]"#;
        assert!(decode_event::<Two>(not_placeholder, vec![Bytes::new()]).is_err());
    }
}
