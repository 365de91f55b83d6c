//! The link-time registry of remote functions in a worker.
//!
//! `#[remote]` submits one [`RemoteFn`] per function with `inventory`, so
//! linking a crate is enough to expose its functions; the worker builds a
//! name -> function map once at boot.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;

use bytes::Bytes;
use futures_util::Stream;

use agentix_wire::errors::{ErrorKind, RemoteError};

/// The future one remote call runs: CBOR value out, or an error.
pub type CallFuture = Pin<Box<dyn Future<Output = Result<Vec<u8>, RemoteError>> + Send>>;

/// The items one streaming call yields, each CBOR-encoded; an error ends it.
pub type ItemStream = Pin<Box<dyn Stream<Item = Result<Vec<u8>, RemoteError>> + Send>>;

/// How a registered function runs: to one value, or to a stream of items.
#[derive(Clone, Copy)]
pub enum Invoke {
    /// Decodes CBOR arguments (in the pieces they arrived in, see
    /// [`agentix_wire::part`]), runs the function, encodes its outcome.
    Unary(fn(Vec<Bytes>) -> CallFuture),
    /// Decodes CBOR arguments (in pieces) and yields the function's items,
    /// encoded.
    Stream(fn(Vec<Bytes>) -> ItemStream),
}

/// One registered remote function.
pub struct RemoteFn {
    /// Wire name: `module::path::fn`.
    pub name: &'static str,
    /// Parameter names, in order (for calls by name with a map of arguments).
    pub params: &'static [&'static str],
    /// How to run it.
    pub invoke: Invoke,
}

inventory::collect!(RemoteFn);

fn table() -> &'static HashMap<&'static str, &'static RemoteFn> {
    static TABLE: OnceLock<HashMap<&'static str, &'static RemoteFn>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut map = HashMap::new();
        for f in inventory::iter::<RemoteFn> {
            if map.insert(f.name, f).is_some() {
                tracing::warn!(
                    name = f.name,
                    "remote function registered twice; last one wins"
                );
            }
        }
        map
    })
}

/// Every registered function name, sorted.
pub fn names() -> Vec<&'static str> {
    let mut names: Vec<_> = table().keys().copied().collect();
    names.sort_unstable();
    names
}

/// Finds the function `name`, or an `UnknownTarget` error listing close matches.
pub fn lookup(name: &str) -> Result<&'static RemoteFn, RemoteError> {
    if let Some(f) = table().get(name) {
        return Ok(f);
    }
    let close = close_matches(name, table().keys().copied());
    let err = RemoteError::new(
        ErrorKind::UnknownTarget,
        format!("no remote function named `{name}` is linked into this worker"),
    );
    Err(if close.is_empty() {
        err.with_details(format!(
            "{} functions are registered; a function from another crate needs \
             `agentix::link_plugins!(that_crate)` in the bundle's main",
            table().len()
        ))
    } else {
        err.with_details(format!("did you mean: {}", close.join(", ")))
    })
}

/// Up to five names that look like `wanted`, best first.
/// Below this, names are not offered as close matches.
const CLOSE: f64 = 0.7;

/// `normalized_damerau_levenshtein`, skipped (as 0) when the lengths alone
/// rule out a close match: the distance is at least the length difference,
/// and computing it costs the product of the lengths, which a long bogus
/// name would turn into seconds of the worker's time per call.
fn similarity(a: &str, b: &str) -> f64 {
    let (la, lb) = (a.chars().count(), b.chars().count());
    let longest = la.max(lb);
    if longest == 0 {
        return 1.0;
    }
    if (la.abs_diff(lb) as f64) / (longest as f64) > 1.0 - CLOSE {
        return 0.0;
    }
    strsim::normalized_damerau_levenshtein(a, b)
}

fn close_matches<'a>(wanted: &str, names: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let short = |n: &str| n.rsplit("::").next().unwrap_or(n).to_owned();
    let wanted_short = short(wanted);
    let mut scored: Vec<(f64, &str)> = names
        .map(|n| {
            let full = similarity(wanted, n);
            let tail = similarity(&wanted_short, &short(n));
            (full.max(tail), n)
        })
        .filter(|(score, _)| *score >= CLOSE)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    scored.into_iter().take(5).map(|(_, n)| n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_matches_prefer_similar_names() {
        let names = ["app::run", "app::runs", "app::stop", "other::run_all"];
        let found = close_matches("app::rnu", names.into_iter());
        assert_eq!(found.first(), Some(&"app::run"));
        assert!(!found.contains(&"app::stop"));
        // Same function name under a wrong module still matches.
        assert!(close_matches("ap::run", names.into_iter()).contains(&"app::run"));
        assert!(close_matches("zzz", names.into_iter()).is_empty());
    }

    #[test]
    fn a_very_long_name_is_ruled_out_by_length() {
        let names = ["app::run", "app::runs"];
        let long = "x".repeat(1_000_000);
        assert!(close_matches(&long, names.into_iter()).is_empty());
        assert_eq!(similarity(&long, "app::run"), 0.0);
        // Within the margin, the distance is still computed.
        assert!(similarity("app::rnu", "app::run") >= CLOSE);
    }
}
