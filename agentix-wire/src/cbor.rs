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
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, RemoteError> {
    let mut out = Vec::with_capacity(64);
    ciborium::into_writer(value, &mut out).map_err(|e| {
        RemoteError::new(
            ErrorKind::TypeMismatch,
            format!(
                "value could not be encoded as CBOR: {}",
                encode_error_text(e)
            ),
        )
    })?;
    Ok(out)
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
