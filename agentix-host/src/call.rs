//! [`Call`]: one unary call, awaited like the function it stands for.
//!
//! `sandbox.remote(f, args)` builds it; `.timeout(d)` sets a deadline; `.await`
//! runs it. Dropping it before it finishes (or the deadline passing) sends
//! `cancel`, and the worker drops the call's task.

use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
use std::time::Duration;

use agentix_wire::cbor::{self, DecodeFailure};
use agentix_wire::errors::{ErrorKind, RemoteError};
use serde::de::DeserializeOwned;

use crate::connect::Connect;

/// A unary remote call returning `O`, ready to be awaited.
#[must_use = "a call does nothing until it is awaited"]
pub struct Call<'a, O> {
    sandbox: &'a dyn Connect,
    target: &'static str,
    args: Result<Vec<u8>, RemoteError>,
    timeout: Option<Duration>,
    _out: PhantomData<fn() -> O>,
}

impl<'a, O> Call<'a, O> {
    pub(crate) fn new(
        sandbox: &'a dyn Connect,
        target: &'static str,
        args: Result<Vec<u8>, RemoteError>,
    ) -> Self {
        Call {
            sandbox,
            target,
            args,
            timeout: sandbox.call_timeout(),
            _out: PhantomData,
        }
    }

    /// Ends the call with `Timeout` (and cancels it in the worker) if it has
    /// not finished within `limit` (instead of the sandbox's
    /// [`call_timeout`](crate::SandboxConfig::call_timeout), if it has one).
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }
}

impl<'a, O: DeserializeOwned + Send + 'a> IntoFuture for Call<'a, O> {
    type Output = Result<O, RemoteError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let args = self.args?;
            let run = async {
                let conn = self.sandbox.connection().await?;
                conn.call_in_pieces(self.target, args).await
            };
            let pieces = match with_deadline(self.target, self.timeout, run).await {
                Ok(pieces) => pieces,
                Err(e) if e.kind == ErrorKind::ConnectionLost => {
                    return Err(self.sandbox.why_lost(e).await)
                }
                Err(e) => return Err(e),
            };
            // A large result is decoded from its parts as they came: joining
            // them first would copy it once more.
            decode_failure(self.target, cbor::from_pieces(&pieces))
        })
    }
}

/// Runs `fut`, ending it with `Timeout` after `limit`; dropping `fut` is
/// what cancels the call.
pub(crate) async fn with_deadline<T>(
    target: &str,
    limit: Option<Duration>,
    fut: impl Future<Output = Result<T, RemoteError>>,
) -> Result<T, RemoteError> {
    let Some(limit) = limit else {
        return fut.await;
    };
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or_else(|_| Err(timed_out(target, limit)))
}

/// The error of a call that ran past its deadline.
pub(crate) fn timed_out(target: &str, limit: Duration) -> RemoteError {
    RemoteError::new(
        ErrorKind::Timeout,
        format!("`{target}` did not finish within {limit:?}; it was cancelled"),
    )
}

/// Decodes a CBOR result of `target` as `O`.
pub(crate) fn decode_result<O: DeserializeOwned>(
    target: &str,
    value: &[u8],
) -> Result<O, RemoteError> {
    decode_failure(target, cbor::from_slice(value))
}

/// A decoded result of `target`, or why it did not decode as `O`.
fn decode_failure<O>(target: &str, decoded: Result<O, DecodeFailure>) -> Result<O, RemoteError> {
    decoded.map_err(|failure| {
        let why = match failure {
            DecodeFailure::Malformed(m) | DecodeFailure::Mismatch(m) => m,
        };
        RemoteError::new(
            ErrorKind::TypeMismatch,
            format!(
                "the result of `{target}` does not decode as {}: {why}",
                std::any::type_name::<O>()
            ),
        )
        .with_details("are the host and the bundle built from the same version of that crate?")
    })
}
