//! [`FrameBytes`]: the payload of a pipe frame (a call's arguments, a
//! result, a part), which [`crate::codec`] sends after the frame's CBOR
//! envelope rather than inside it.
//!
//! Inside the envelope, a megabyte of bytes was copied on every hop: into
//! the encoder's buffer on the way out, and on the way in by the CBOR
//! decoder, which gathers a byte string 4 KiB at a time into a growing
//! vector. As the frame's tail it is written from where it lies and read
//! as a slice of the buffer the pipe filled, so it is never copied in user
//! space between the socket and the worker's function.

use std::fmt;

use bytes::Bytes;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Bytes carried by a frame, kept as [`Bytes`] so that a slice of a larger
/// payload or of a read buffer travels without a copy.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct FrameBytes(pub Bytes);

impl FrameBytes {
    /// The bytes as a vector (a copy only when they are shared).
    pub fn into_vec(self) -> Vec<u8> {
        Vec::from(self.0)
    }
}

impl From<Vec<u8>> for FrameBytes {
    fn from(bytes: Vec<u8>) -> Self {
        FrameBytes(Bytes::from(bytes))
    }
}

impl From<Bytes> for FrameBytes {
    fn from(bytes: Bytes) -> Self {
        FrameBytes(bytes)
    }
}

impl std::ops::Deref for FrameBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for FrameBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FrameBytes({} bytes)", self.0.len())
    }
}

// A byte string when the frame is encoded some other way (in a test, say);
// the codec itself moves these bytes to the frame's tail.
impl Serialize for FrameBytes {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for FrameBytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct BytesVisitor;
        impl<'de> Visitor<'de> for BytesVisitor {
            type Value = FrameBytes;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<FrameBytes, E> {
                Ok(FrameBytes(Bytes::copy_from_slice(v)))
            }
            fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<FrameBytes, E> {
                Ok(FrameBytes(Bytes::from(v)))
            }
        }
        // `deserialize_bytes` in ciborium takes only what fits its scratch buffer.
        deserializer.deserialize_byte_buf(BytesVisitor)
    }
}
