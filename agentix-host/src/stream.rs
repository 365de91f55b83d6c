//! [`CallStream`]: the items of a streaming call, as a `Stream`.
//!
//! `sandbox.stream(f, args)` builds a [`StreamCall`]; `.window(..)` and
//! `.timeout(..)` tune it; `.await` starts it and gives the [`CallStream`].
//! Items arrive in batches; each one the caller takes is acknowledged (in
//! groups of half a window), and the worker never runs more than one window
//! ahead, so a slow reader slows the producer instead of filling memory.
//! Dropping the stream before its end cancels the call in the worker.

use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use agentix_wire::cbor;
use agentix_wire::errors::{ErrorKind, RemoteError};
use agentix_wire::wire::Window;
use futures_util::future::BoxFuture;
use futures_util::Stream;
use serde::de::DeserializeOwned;
use serde_bytes::ByteBuf;
use tokio::sync::mpsc;
use tokio::time::Sleep;

use crate::call::{decode_result, timed_out};
use crate::connect::{explain_lost, Connect};
use crate::connection::{CallGuard, StreamEvent};

/// A streaming call yielding items of type `T`, ready to be started with `.await`.
#[must_use = "a streaming call does nothing until it is awaited"]
pub struct StreamCall<'a, T> {
    sandbox: &'a dyn Connect,
    target: String,
    args: Result<Vec<u8>, RemoteError>,
    window: Window,
    timeout: Option<Duration>,
    _item: PhantomData<fn() -> T>,
}

impl<'a, T> StreamCall<'a, T> {
    pub(crate) fn new(
        sandbox: &'a dyn Connect,
        target: String,
        args: Result<Vec<u8>, RemoteError>,
    ) -> Self {
        StreamCall {
            sandbox,
            target,
            args,
            window: Window::DEFAULT,
            timeout: None,
            _item: PhantomData,
        }
    }

    /// Lets the worker run at most `items` items and about `bytes` bytes
    /// ahead of the reader (default 4096 items, 4 MiB). Smaller windows bound
    /// memory tighter; larger ones keep a fast reader busier.
    pub fn window(mut self, items: u64, bytes: u64) -> Self {
        self.window = Window {
            items: items.max(1),
            bytes: bytes.max(1),
        };
        self
    }

    /// Ends the stream with `Timeout` (and cancels the call) if it has not
    /// ended within `limit` of being started.
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }
}

impl<'a, T: DeserializeOwned + 'a> IntoFuture for StreamCall<'a, T> {
    type Output = Result<CallStream<T>, RemoteError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let deadline = self.timeout.map(|d| (d, Box::pin(tokio::time::sleep(d))));
            let args = self.args?;
            let conn = self.sandbox.connection().await?;
            let (guard, events) = conn.open_stream(&self.target, args, self.window).await?;
            Ok(CallStream {
                server_ended: self.sandbox.server_ended(),
                explaining: None,
                target: self.target,
                guard: Some(guard),
                events,
                batch: Vec::new().into_iter(),
                unacked: (0, 0),
                window: self.window,
                deadline,
                _item: PhantomData,
            })
        })
    }
}

/// The items of a running streaming call, in order; an `Err` item is the
/// last one. Dropping it before the end cancels the call.
pub struct CallStream<T> {
    target: String,
    /// `None` once the call has ended.
    guard: Option<CallGuard>,
    events: mpsc::UnboundedReceiver<StreamEvent>,
    batch: std::vec::IntoIter<ByteBuf>,
    unacked: (u64, u64),
    window: Window,
    deadline: Option<(Duration, Pin<Box<Sleep>>)>,
    /// Why the sandbox's server ended, once it has (see `Connect::why_lost`).
    server_ended: Option<BoxFuture<'static, RemoteError>>,
    /// The connection was lost: the error the stream ends with, once the
    /// provider has had its moment to say why.
    explaining: Option<BoxFuture<'static, RemoteError>>,
    _item: PhantomData<fn() -> T>,
}

impl<T> CallStream<T> {
    /// Ends the stream with `error`, or, for a lost connection, with why
    /// the server ended when the provider can tell.
    fn fail(
        &mut self,
        error: RemoteError,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<T, RemoteError>>> {
        if error.kind != ErrorKind::ConnectionLost {
            return Poll::Ready(Some(Err(error)));
        }
        let mut explaining = explain_lost(error, self.server_ended.take());
        match explaining.as_mut().poll(cx) {
            Poll::Ready(error) => Poll::Ready(Some(Err(error))),
            Poll::Pending => {
                self.explaining = Some(explaining);
                Poll::Pending
            }
        }
    }

    /// Counts one consumed item and acknowledges a group of them.
    fn consumed(&mut self, bytes: usize) {
        self.unacked.0 += 1;
        self.unacked.1 += bytes as u64;
        let (items, bytes) = self.unacked;
        if items >= (self.window.items / 2).max(1) || bytes >= (self.window.bytes / 2).max(1) {
            if let Some(conn) = self.guard.as_ref().and_then(CallGuard::connection) {
                conn.ack(self.guard.as_ref().map_or(0, CallGuard::id), items, bytes);
            }
            self.unacked = (0, 0);
        }
    }

    /// The call ended on the server's side: nothing to cancel.
    fn ended(&mut self) {
        if let Some(guard) = self.guard.take() {
            guard.disarm();
        }
        self.batch = Vec::new().into_iter();
    }

    /// The host ends the call: dropping the guard cancels it in the worker.
    fn abandon(&mut self) {
        self.guard = None;
        self.batch = Vec::new().into_iter();
    }
}

impl<T: DeserializeOwned> Stream for CallStream<T> {
    type Item = Result<T, RemoteError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(explaining) = &mut this.explaining {
            let error = ready!(explaining.as_mut().poll(cx));
            this.explaining = None;
            return Poll::Ready(Some(Err(error)));
        }
        loop {
            if let Some(item) = this.batch.next() {
                this.consumed(item.len());
                let decoded = decode_result::<T>(&this.target, &item);
                if decoded.is_err() {
                    this.abandon();
                }
                return Poll::Ready(Some(decoded));
            }
            let Some(guard) = &this.guard else {
                return Poll::Ready(None);
            };
            if let Some((limit, sleep)) = &mut this.deadline {
                if sleep.as_mut().poll(cx).is_ready() {
                    let err = timed_out(&this.target, *limit);
                    this.abandon();
                    return Poll::Ready(Some(Err(err)));
                }
            }
            let event = ready!(this.events.poll_recv(cx));
            match event {
                Some(StreamEvent::Items(encoded)) => match decode_batch(&encoded) {
                    Ok(items) => this.batch = items.into_iter(),
                    Err(e) => {
                        this.abandon();
                        return Poll::Ready(Some(Err(e)));
                    }
                },
                Some(StreamEvent::End) => {
                    this.ended();
                    return Poll::Ready(None);
                }
                Some(StreamEvent::Error(e)) => {
                    this.ended();
                    return this.fail(e, cx);
                }
                None => {
                    let err = guard
                        .connection()
                        .map(|c| c.lost_error())
                        .unwrap_or_else(|| {
                            RemoteError::new(ErrorKind::ConnectionLost, "the connection is closed")
                        });
                    this.ended();
                    return this.fail(err, cx);
                }
            }
        }
    }
}

impl<T> std::fmt::Debug for CallStream<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallStream")
            .field("target", &self.target)
            .field("running", &self.guard.is_some())
            .finish_non_exhaustive()
    }
}

fn decode_batch(bytes: &[u8]) -> Result<Vec<ByteBuf>, RemoteError> {
    cbor::from_slice(bytes).map_err(|_| {
        RemoteError::new(
            ErrorKind::Protocol,
            "stream items are not a CBOR array of byte strings",
        )
    })
}
