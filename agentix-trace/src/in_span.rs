//! [`InSpan`]: `fut.in_span(span)`, the way `tracing` users write
//! `fut.instrument(span)`: the future runs with the span current and owns
//! it, so the span ends when the future is done with.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{Context, Poll};

use super::context::InContext;
use super::span::Span;

/// Runs a future inside a span it owns.
pub trait InSpan: IntoFuture + Sized {
    /// This future with `span` current on every poll; `span` ends when the
    /// returned future is dropped (right after it completes, at `.await`).
    fn in_span(self, span: Span) -> Spanned<Self::IntoFuture> {
        let inner = span.scope(self);
        Spanned { inner, _span: span }
    }
}

impl<F: IntoFuture> InSpan for F {}

/// A future running inside a span it owns ([`InSpan::in_span`]).
pub struct Spanned<F> {
    inner: InContext<F>,
    // Declared after `inner`: the work is dropped before its span ends.
    _span: Span,
}

impl<F: Future> Future for Spanned<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: `inner` is never moved out of the pinned struct; `_span`
        // is not structurally pinned.
        let inner = unsafe { self.map_unchecked_mut(|s| &mut s.inner) };
        inner.poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{current, span};

    #[tokio::test]
    async fn the_future_runs_in_its_span_and_owns_it() {
        let outer = span("outer");
        let id = outer.id();
        let seen = async { current().and_then(|c| c.span_id) }
            .in_span(outer)
            .await;
        assert_eq!(seen, Some(id));
        assert_eq!(current(), None, "nothing leaks out of the future");
    }
}
