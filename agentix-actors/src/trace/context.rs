//! The current trace and span, following a task across `.await`.
//!
//! A thread-local holds the current [`SpanContext`] only while a future that
//! carries one is being polled ([`InContext`]), or while a sync guard lives
//! ([`Entered`]). So a task that moves between threads takes its context
//! with it, and a context never leaks into another task on the same thread.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use serde::{Deserialize, Serialize};

use super::model::{SpanId, TraceId};

/// Where new spans attach: a trace, and the span inside it (if any).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpanContext {
    /// The trace.
    pub trace_id: TraceId,
    /// The enclosing span; `None` at the trace's top level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_id: Option<SpanId>,
}

thread_local! {
    static CURRENT: RefCell<Option<SpanContext>> = const { RefCell::new(None) };
}

/// The context new spans attach to here, if any.
pub fn current() -> Option<SpanContext> {
    CURRENT.with(|c| c.borrow().clone())
}

pub(crate) fn swap(ctx: Option<SpanContext>) -> Option<SpanContext> {
    CURRENT.with(|c| std::mem::replace(&mut *c.borrow_mut(), ctx))
}

/// A future that runs with `ctx` as the current context on every poll.
pub struct InContext<F> {
    ctx: Option<SpanContext>,
    fut: F,
}

impl<F> InContext<F> {
    /// Runs `fut` in `ctx` (none: with no current context).
    pub fn new(ctx: Option<SpanContext>, fut: F) -> Self {
        InContext { ctx, fut }
    }
}

impl<F: Future> Future for InContext<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: `fut` is never moved out of the pinned struct; `ctx` is
        // not structurally pinned.
        let this = unsafe { self.get_unchecked_mut() };
        let outer = swap(this.ctx.clone());
        // Restore even if the inner future panics.
        struct Restore(Option<Option<SpanContext>>);
        impl Drop for Restore {
            fn drop(&mut self) {
                if let Some(outer) = self.0.take() {
                    swap(outer);
                }
            }
        }
        let _restore = Restore(Some(outer));
        // SAFETY: see above; `fut` stays where it is.
        unsafe { Pin::new_unchecked(&mut this.fut) }.poll(cx)
    }
}

/// While alive, makes a context current on this thread (sync code only:
/// do not hold it across `.await`; use `scope` there).
pub struct Entered {
    outer: Option<SpanContext>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Entered {
    pub(crate) fn new(ctx: Option<SpanContext>) -> Self {
        Entered {
            outer: swap(ctx),
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        swap(self.outer.take());
    }
}
