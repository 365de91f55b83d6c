//! The current trace and span, following a task across `.await`.
//!
//! A thread-local holds the current [`SpanContext`] only while a future that
//! carries one is being polled ([`InContext`]), or while a sync guard lives
//! ([`Entered`]). So a task that moves between threads takes its context
//! with it, and a context never leaks into another task on the same thread.
//! The [`TraceHub`] that new spans publish to follows the same way.

use std::cell::RefCell;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{Context, Poll};

use serde::{Deserialize, Serialize};

use super::hub::TraceHub;
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
    static CURRENT_HUB: RefCell<Option<TraceHub>> = const { RefCell::new(None) };
}

/// The context new spans attach to here, if any.
pub fn current() -> Option<SpanContext> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Makes `ctx` current on this thread and returns the context it replaces:
/// for bridges that enter and leave spans themselves (a `tracing` layer).
pub fn swap(ctx: Option<SpanContext>) -> Option<SpanContext> {
    CURRENT.with(|c| std::mem::replace(&mut *c.borrow_mut(), ctx))
}

fn swap_hub(hub: Option<TraceHub>) -> Option<TraceHub> {
    CURRENT_HUB.with(|c| std::mem::replace(&mut *c.borrow_mut(), hub))
}

/// The hub new spans here publish to: the one in scope, else
/// [`TraceHub::unscoped`].
pub(crate) fn hub_here() -> TraceHub {
    CURRENT_HUB
        .with(|c| c.borrow().clone())
        .unwrap_or_else(|| TraceHub::unscoped().clone())
}

impl TraceHub {
    /// The hub in scope here, if any.
    pub fn current() -> Option<TraceHub> {
        CURRENT_HUB.with(|c| c.borrow().clone())
    }

    /// Runs `fut` with this hub in scope across every `.await`: the traces
    /// and spans it makes with the free functions publish here.
    pub fn scope<F: IntoFuture>(&self, fut: F) -> InContext<F::IntoFuture> {
        InContext {
            ctx: None,
            sets_ctx: false,
            hub: Some(self.clone()),
            fut: fut.into_future(),
        }
    }

    /// Puts this hub in scope on this thread while the guard lives (sync
    /// code; use [`TraceHub::scope`] around `.await`).
    pub fn enter(&self) -> Entered {
        Entered {
            outer: None,
            sets_ctx: false,
            outer_hub: Some(swap_hub(Some(self.clone()))),
            _not_send: std::marker::PhantomData,
        }
    }
}

/// A future that runs with `ctx` as the current context on every poll
/// (and a hub in scope, when it has one).
pub struct InContext<F> {
    ctx: Option<SpanContext>,
    /// Whether `ctx` replaces the context (a hub's scope leaves it).
    sets_ctx: bool,
    hub: Option<TraceHub>,
    fut: F,
}

impl<F> InContext<F> {
    /// Runs `fut` in `ctx` (none: with no current context).
    pub fn new(ctx: Option<SpanContext>, fut: F) -> Self {
        InContext {
            ctx,
            sets_ctx: true,
            hub: None,
            fut,
        }
    }

    /// Runs `fut` in `ctx` with `hub` in scope.
    pub(crate) fn with_hub(ctx: Option<SpanContext>, hub: TraceHub, fut: F) -> Self {
        InContext {
            ctx,
            sets_ctx: true,
            hub: Some(hub),
            fut,
        }
    }
}

impl<F: Future> Future for InContext<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: `fut` is never moved out of the pinned struct; `ctx` is
        // not structurally pinned.
        let this = unsafe { self.get_unchecked_mut() };
        // Restored by the guard's drop, even if the inner future panics.
        let _restore = Entered {
            outer: this.sets_ctx.then(|| swap(this.ctx.clone())).flatten(),
            sets_ctx: this.sets_ctx,
            outer_hub: this.hub.clone().map(|hub| swap_hub(Some(hub))),
            _not_send: std::marker::PhantomData,
        };
        // SAFETY: see above; `fut` stays where it is.
        unsafe { Pin::new_unchecked(&mut this.fut) }.poll(cx)
    }
}

/// While alive, makes a context current on this thread (sync code only:
/// do not hold it across `.await`; use `scope` there).
pub struct Entered {
    outer: Option<SpanContext>,
    /// Whether `outer` is to be put back (a hub's guard leaves the context).
    sets_ctx: bool,
    /// The hub to put back, when a hub was put in scope.
    outer_hub: Option<Option<TraceHub>>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Entered {
    pub(crate) fn new(ctx: Option<SpanContext>, hub: Option<TraceHub>) -> Self {
        Entered {
            outer: swap(ctx),
            sets_ctx: true,
            outer_hub: hub.map(|hub| swap_hub(Some(hub))),
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        if self.sets_ctx {
            swap(self.outer.take());
        }
        if let Some(hub) = self.outer_hub.take() {
            swap_hub(hub);
        }
    }
}
