//! CBOR helpers: one place that turns serde values into bytes and back.

use bytes::Bytes;
use serde::{de::DeserializeOwned, Serialize};

use crate::errors::{ErrorKind, RemoteError};
use crate::part::PiecesReader;

/// Bytes that travel as one CBOR byte string (not an array of integers).
///
/// Use it for binary arguments and results: `Vec<u8>` would be encoded one
/// integer per byte.
pub type Blob = serde_bytes::ByteBuf;

/// Encodes `value` as CBOR.
///
/// A value past [`GROWN_ABOVE`] bytes is encoded again into a buffer of
/// exactly its size: a 64 MiB blob written into a growing buffer was
/// copied at every doubling on the way (another 64 MiB of copying), and
/// the result held twice the memory it needed.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, RemoteError> {
    let mut out = Vec::with_capacity(64);
    let mut capped = Capped {
        out: &mut out,
        room: GROWN_ABOVE,
    };
    match ciborium::into_writer(value, &mut capped) {
        Ok(()) => return Ok(out),
        Err(ciborium::ser::Error::Io(e)) if e.get_ref().is_some_and(|e| e.is::<OverCap>()) => {}
        Err(e) => return Err(encode_failed(e)),
    }
    drop(out);
    let mut size = Counted(0);
    ciborium::into_writer(value, &mut size).map_err(encode_failed)?;
    let mut out = Vec::with_capacity(size.0);
    ciborium::into_writer(value, &mut out).map_err(encode_failed)?;
    Ok(out)
}

/// Encodings up to this size are written once, into a growing buffer.
const GROWN_ABOVE: usize = 64 << 10;

fn encode_failed<E: std::fmt::Display>(e: ciborium::ser::Error<E>) -> RemoteError {
    RemoteError::new(
        ErrorKind::TypeMismatch,
        format!(
            "value could not be encoded as CBOR: {}",
            encode_error_text(e)
        ),
    )
}

/// A writer that refuses to grow `out` past `room` more bytes.
struct Capped<'a> {
    out: &'a mut Vec<u8>,
    room: usize,
}

/// [`Capped`]'s refusal.
#[derive(Debug)]
struct OverCap;

impl std::fmt::Display for OverCap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the encoding is larger than the first buffer")
    }
}

impl std::error::Error for OverCap {}

impl std::io::Write for Capped<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.len() > self.room {
            return Err(std::io::Error::other(OverCap));
        }
        self.room -= buf.len();
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A writer that only counts the bytes written to it.
struct Counted(usize);

impl std::io::Write for Counted {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Why CBOR bytes did not decode to the requested type.
#[derive(Debug)]
pub enum DecodeFailure {
    /// The bytes are not valid CBOR.
    Malformed(String),
    /// Valid CBOR, but not of the requested shape.
    Mismatch(String),
}

/// Decodes CBOR `bytes` as `T`, telling malformed input from a type mismatch.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeFailure> {
    decode(|| bytes)
}

/// Decodes the CBOR payload that arrived as `pieces` (in order) as `T`,
/// like [`from_slice`], without joining the pieces into one buffer first.
pub fn from_pieces<T: DeserializeOwned>(pieces: &[Bytes]) -> Result<T, DecodeFailure> {
    match pieces {
        [one] => from_slice(one),
        _ => decode(|| PiecesReader::new(pieces)),
    }
}

/// Decodes what `read` returns (a fresh reader at the payload's start each
/// time it is called) as `T`.
fn decode<T: DeserializeOwned, R: std::io::Read>(read: impl Fn() -> R) -> Result<T, DecodeFailure> {
    use ciborium::de::Error;
    match ciborium::from_reader(read()) {
        Ok(v) => Ok(v),
        // ciborium reports some malformed input (a stray break byte) as a
        // semantic error; only input that is valid CBOR is a mismatch.
        Err(Error::Semantic(_, msg)) => match ciborium::from_reader::<ciborium::Value, _>(read()) {
            Ok(_) => Err(DecodeFailure::Mismatch(msg)),
            Err(e) => Err(DecodeFailure::Malformed(decode_error_text(e))),
        },
        Err(e) => Err(DecodeFailure::Malformed(decode_error_text(e))),
    }
}

/// A ciborium decoding error as a sentence (its own `Display` is its
/// `Debug`: `Semantic(None, "..")`).
pub fn decode_error_text<E: std::fmt::Display>(e: ciborium::de::Error<E>) -> String {
    use ciborium::de::Error;
    match e {
        Error::Semantic(Some(at), msg) => format!("{msg} (at byte {at})"),
        Error::Semantic(None, msg) => msg,
        Error::Syntax(at) => format!("invalid CBOR at byte {at}"),
        Error::Io(e) => format!("truncated CBOR: {e}"),
        Error::RecursionLimitExceeded => "CBOR nesting is too deep".to_owned(),
    }
}

/// A ciborium encoding error as a sentence.
pub fn encode_error_text<E: std::fmt::Display>(e: ciborium::ser::Error<E>) -> String {
    match e {
        ciborium::ser::Error::Io(e) => e.to_string(),
        ciborium::ser::Error::Value(why) => why,
    }
}

/// Decodes a CBOR value into JSON for untyped callers (byte strings become arrays).
pub fn to_json(bytes: &[u8]) -> Result<serde_json::Value, RemoteError> {
    let value: ciborium::Value = from_slice(bytes).map_err(|f| match f {
        DecodeFailure::Malformed(m) | DecodeFailure::Mismatch(m) => RemoteError::new(
            ErrorKind::Protocol,
            format!("result is not valid CBOR: {m}"),
        ),
    })?;
    serde_json::to_value(&value).map_err(|e| {
        RemoteError::new(
            ErrorKind::TypeMismatch,
            format!("result has no JSON form: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_value_is_encoded_into_a_buffer_of_its_exact_size() {
        let value = (Blob::from(vec![0xa5u8; 3 << 20]), "tail".to_owned(), 7u32);
        let bytes = to_vec(&value).unwrap();
        assert_eq!(bytes.capacity(), bytes.len(), "no room left over");
        let mut grown = Vec::new();
        ciborium::into_writer(&value, &mut grown).unwrap();
        assert!(bytes == grown, "the same bytes as a plain encoding");
        let back: (Blob, String, u32) = from_slice(&bytes).unwrap();
        assert!(back == value);
        // Right at the first buffer's limit and just past it.
        for len in [
            GROWN_ABOVE - 8,
            GROWN_ABOVE - 3,
            GROWN_ABOVE,
            GROWN_ABOVE + 1,
        ] {
            let blob = Blob::from(vec![1u8; len]);
            let bytes = to_vec(&blob).unwrap();
            assert_eq!(from_slice::<Blob>(&bytes).unwrap().len(), len);
        }
    }

    #[test]
    fn a_value_that_cannot_be_encoded_is_a_type_mismatch_at_any_size() {
        struct Refuses(usize);
        impl Serialize for Refuses {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::{Error, SerializeSeq};
                let mut seq = s.serialize_seq(Some(2))?;
                seq.serialize_element(&Blob::from(vec![0u8; self.0]))?;
                Err(S::Error::custom("no, thanks"))
            }
        }
        for len in [10, GROWN_ABOVE * 2] {
            let err = to_vec(&Refuses(len)).unwrap_err();
            assert_eq!(err.kind, ErrorKind::TypeMismatch);
            assert!(err.message.contains("no, thanks"), "{}", err.message);
        }
    }

    #[test]
    fn blobs_encode_as_one_byte_string() {
        let blob = Blob::from(vec![7u8; 1000]);
        let bytes = to_vec(&blob).unwrap();
        // 3 header bytes (major type 2, 16-bit length) + payload.
        assert_eq!(bytes.len(), 1003);
        let back: Blob = from_slice(&bytes).unwrap();
        assert_eq!(back, blob);
    }

    #[test]
    fn a_payload_in_pieces_decodes_as_it_does_whole() {
        let value = (Blob::from(vec![0x1e; 70_000]), "tail".to_owned());
        let bytes = to_vec(&value).unwrap();
        // Cuts inside the header, the byte string and the string after it.
        let cuts = [1, 2, 40_000, bytes.len() - 3];
        let mut pieces = Vec::new();
        let mut from = 0;
        for cut in cuts {
            pieces.push(Bytes::copy_from_slice(&bytes[from..cut]));
            from = cut;
        }
        pieces.push(Bytes::copy_from_slice(&bytes[from..]));
        let back: (Blob, String) = from_pieces(&pieces).unwrap();
        assert_eq!(back, value);
        assert!(matches!(
            from_pieces::<(String, String)>(&pieces),
            Err(DecodeFailure::Mismatch(_))
        ));
        assert!(matches!(
            from_pieces::<(Blob, String)>(&pieces[..3]),
            Err(DecodeFailure::Malformed(_))
        ));
    }

    #[test]
    fn garbage_is_malformed_and_wrong_shapes_are_mismatches() {
        assert!(matches!(
            from_slice::<String>(&[0xff, 0x00]),
            Err(DecodeFailure::Malformed(_))
        ));
        let number = to_vec(&5u32).unwrap();
        assert!(matches!(
            from_slice::<String>(&number),
            Err(DecodeFailure::Mismatch(_))
        ));
        assert!(matches!(
            from_slice::<String>(&number[..0]),
            Err(DecodeFailure::Malformed(_))
        ));
    }

    #[test]
    fn results_convert_to_json() {
        let bytes = to_vec(&("a", 3u8, true)).unwrap();
        assert_eq!(to_json(&bytes).unwrap(), serde_json::json!(["a", 3, true]));
    }
}
