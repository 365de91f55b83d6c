//! Argument decoding and outcome encoding around one remote call.
//!
//! The code `#[remote]` generates calls [`plain`] or [`fallible`]; both decode
//! the CBOR arguments into the function's parameter tuple, run it and encode
//! what it returned. The arguments are decoded from the pieces they arrived
//! in (a large payload comes in parts, `agentix_wire::part`), never joined into one
//! more buffer first. Arguments arrive as an array (typed host calls) or as a
//! map by parameter name (untyped calls, the CLI); a function with a single
//! parameter also takes the bare value. Streaming functions go through
//! [`stream_plain`] or [`stream_fallible`], which encode item by item.

use std::future::Future;

use bytes::Bytes;
use ciborium::Value;
use futures_util::{stream, StreamExt};
use serde::{de::DeserializeOwned, Serialize};

use crate::registry::ItemStream;
use agentix_wire::cbor::{self, DecodeFailure};
use agentix_wire::errors::{ErrorKind, RemoteError};

/// Runs a remote function that returns a plain value.
pub async fn plain<A, F, Fut>(
    name: &str,
    params: &[&str],
    args: Vec<Bytes>,
    f: F,
) -> Result<Vec<u8>, RemoteError>
where
    A: DeserializeOwned,
    F: FnOnce(A) -> Fut,
    Fut: Future,
    Fut::Output: Serialize,
{
    let args = decode_args::<A>(name, params, &args)?;
    cbor::to_vec(&f(args).await)
}

/// Runs a remote function that returns `Result<T, E>`; the expansion has
/// already turned `E` into its `Raised` form (see [`agentix_wire::raised`]).
pub async fn fallible<A, F, Fut, T>(
    name: &str,
    params: &[&str],
    args: Vec<Bytes>,
    f: F,
) -> Result<Vec<u8>, RemoteError>
where
    A: DeserializeOwned,
    F: FnOnce(A) -> Fut,
    Fut: Future<Output = Result<T, RemoteError>>,
    T: Serialize,
{
    let args = decode_args::<A>(name, params, &args)?;
    cbor::to_vec(&f(args).await?)
}

/// Runs a streaming remote function whose items are plain values.
pub fn stream_plain<A, F, Fut>(name: &str, params: &[&str], args: Vec<Bytes>, f: F) -> ItemStream
where
    A: DeserializeOwned,
    F: FnOnce(A) -> Fut,
    Fut: Future + Send + 'static,
    Fut::Output: futures_util::Stream + Send + 'static,
    <Fut::Output as futures_util::Stream>::Item: Serialize,
{
    match decode_args::<A>(name, params, &args) {
        Ok(args) => stream::once(f(args))
            .flatten()
            .map(|item| cbor::to_vec(&item))
            .boxed(),
        Err(e) => stream::once(std::future::ready(Err(e))).boxed(),
    }
}

/// Runs a streaming remote function whose items are `Result<T, E>`, with
/// `E` already in its `Raised` form; an `Err` item ends the stream.
pub fn stream_fallible<A, F, Fut, S, T>(
    name: &str,
    params: &[&str],
    args: Vec<Bytes>,
    f: F,
) -> ItemStream
where
    A: DeserializeOwned,
    F: FnOnce(A) -> Fut,
    Fut: Future<Output = S> + Send + 'static,
    S: futures_util::Stream<Item = Result<T, RemoteError>> + Send + 'static,
    T: Serialize,
{
    match decode_args::<A>(name, params, &args) {
        Ok(args) => stream::once(f(args))
            .flatten()
            .map(|item| cbor::to_vec(&item?))
            .boxed(),
        Err(e) => stream::once(std::future::ready(Err(e))).boxed(),
    }
}

/// Decodes CBOR arguments, in the `pieces` they arrived in, for the
/// function `name` with parameters `params`.
pub fn decode_args<A: DeserializeOwned>(
    name: &str,
    params: &[&str],
    pieces: &[Bytes],
) -> Result<A, RemoteError> {
    let first_failure = match cbor::from_pieces::<A>(pieces) {
        Ok(args) => return Ok(args),
        Err(DecodeFailure::Malformed(m)) => {
            return Err(RemoteError::new(
                ErrorKind::BadArguments,
                format!("arguments for `{name}` are not valid CBOR: {m}"),
            ))
        }
        Err(DecodeFailure::Mismatch(m)) => m,
    };
    let mismatch = |why: String| {
        RemoteError::new(
            ErrorKind::TypeMismatch,
            format!("arguments for `{name}` do not match its parameters: {why}"),
        )
        .with_details(format!("expected ({})", params.join(", ")))
    };
    // `from_pieces` already told malformed bytes apart, so this parse succeeds.
    let value: Value = cbor::from_pieces(pieces).map_err(|_| mismatch(first_failure.clone()))?;
    let reshaped = match value {
        Value::Map(entries) => by_name(entries, params).map_err(mismatch)?,
        Value::Array(items) if items.is_empty() && params.is_empty() => Value::Null,
        Value::Array(_) => return Err(mismatch(first_failure)),
        Value::Null if params.is_empty() => Value::Null,
        bare if params.len() == 1 => Value::Array(vec![bare]),
        _ => return Err(mismatch(first_failure)),
    };
    reshaped
        .deserialized::<A>()
        .map_err(|e| mismatch(e.to_string()))
}

/// Orders a map of named arguments into the parameter order.
fn by_name(entries: Vec<(Value, Value)>, params: &[&str]) -> Result<Value, String> {
    let mut slots: Vec<Option<Value>> = vec![None; params.len()];
    for (key, value) in entries {
        let Value::Text(key) = key else {
            return Err("argument names must be strings".to_owned());
        };
        let Some(at) = params.iter().position(|p| *p == key) else {
            return Err(format!("unexpected argument `{key}`"));
        };
        slots[at] = Some(value);
    }
    if params.is_empty() {
        return Ok(Value::Null);
    }
    let values = slots
        .into_iter()
        .zip(params)
        .map(|(slot, p)| slot.ok_or_else(|| format!("missing argument `{p}`")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Value::Array(values))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc<T: Serialize>(v: T) -> Vec<Bytes> {
        vec![Bytes::from(cbor::to_vec(&v).unwrap())]
    }

    #[test]
    fn tuples_maps_and_bare_values_decode() {
        let params = &["name", "count"];
        let a: (String, u32) = decode_args("f", params, &enc(("x", 2u32))).unwrap();
        assert_eq!(a, ("x".to_owned(), 2));
        let map = serde_json::json!({"count": 3, "name": "y"});
        let a: (String, u32) = decode_args("f", params, &enc(map)).unwrap();
        assert_eq!(a, ("y".to_owned(), 3));
        let a: (String,) = decode_args("f", &["name"], &enc("bare")).unwrap();
        assert_eq!(a.0, "bare");
        let _: () = decode_args("f", &[], &enc(serde_json::json!([]))).unwrap();
        let _: () = decode_args("f", &[], &enc(serde_json::json!({}))).unwrap();
    }

    #[test]
    fn wrong_shapes_name_the_problem() {
        let params = &["name", "count"];
        let err = decode_args::<(String, u32)>("f", params, &enc(("x", "two"))).unwrap_err();
        assert_eq!(err.kind, ErrorKind::TypeMismatch);
        assert!(err.message.contains("`f`"), "{err}");
        let map = serde_json::json!({"name": "y"});
        let err = decode_args::<(String, u32)>("f", params, &enc(map)).unwrap_err();
        assert!(err.message.contains("missing argument `count`"), "{err}");
        let map = serde_json::json!({"name": "y", "count": 1, "extra": 0});
        let err = decode_args::<(String, u32)>("f", params, &enc(map)).unwrap_err();
        assert!(err.message.contains("unexpected argument `extra`"), "{err}");
    }

    #[test]
    fn arguments_in_pieces_decode_as_they_do_whole() {
        let params = &["data", "name"];
        let data = (0..3_000u32).map(|i| (i % 251) as u8).collect::<Vec<u8>>();
        let cut = |whole: Vec<u8>| -> Vec<Bytes> {
            whole.chunks(1_000).map(Bytes::copy_from_slice).collect()
        };
        let in_order = cbor::to_vec(&(serde_bytes::ByteBuf::from(data.clone()), "n")).unwrap();
        let (got, name): (serde_bytes::ByteBuf, String) =
            decode_args("f", params, &cut(in_order)).unwrap();
        assert_eq!((got.into_vec(), name.as_str()), (data.clone(), "n"));
        // By name: the reshaping path reads the pieces a second time.
        let by_name = Value::Map(vec![
            (Value::Text("name".into()), Value::Text("m".into())),
            (Value::Text("data".into()), Value::Bytes(data.clone())),
        ]);
        let (got, name): (serde_bytes::ByteBuf, String) =
            decode_args("f", params, &cut(cbor::to_vec(&by_name).unwrap())).unwrap();
        assert_eq!((got.into_vec(), name.as_str()), (data, "m"));
        // Pieces that stop short are malformed, not a mismatch.
        let mut short = cut(cbor::to_vec(&by_name).unwrap());
        short.pop();
        let err = decode_args::<(serde_bytes::ByteBuf, String)>("f", params, &short).unwrap_err();
        assert_eq!(err.kind, ErrorKind::BadArguments);
    }

    #[test]
    fn garbage_is_bad_arguments() {
        let err = decode_args::<(String,)>("f", &["a"], &[Bytes::from_static(&[0xff, 0xff])])
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::BadArguments);
    }
}
