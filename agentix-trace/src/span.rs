//! [`Trace`] and [`Span`]: what user code creates, and the [`TraceHub`]
//! methods that create them on a given hub.

use std::future::IntoFuture;
use std::sync::Mutex;

use super::context::{current, hub_here, Entered, InContext, SpanContext};
use super::hub::TraceHub;
use super::model::{now_us, random_id, SpanData, SpanEvent, SpanStatus, TraceData, TraceEvent};

/// A running trace; it ends when dropped.
#[must_use = "a trace ends when dropped"]
pub struct Trace {
    data: TraceData,
    hub: TraceHub,
}

/// Starts a trace named `name` on the hub in scope. Spans created inside
/// [`Trace::scope`] (or while [`Trace::enter`] is held) belong to it.
pub fn trace(name: impl Into<String>) -> Trace {
    hub_here().trace(name)
}

/// Creates a span named `name` under the current context (a new trace if
/// there is none), on the hub in scope.
pub fn span(name: impl Into<String>) -> Span {
    span_under(name, current())
}

/// Creates a span named `name` under `parent` (a new trace if none), on
/// the hub in scope.
pub fn span_under(name: impl Into<String>, parent: Option<SpanContext>) -> Span {
    hub_here().span_under(name, parent)
}

impl TraceHub {
    /// Starts a trace named `name` whose events, and those of the spans
    /// made in its scope, go to this hub.
    pub fn trace(&self, name: impl Into<String>) -> Trace {
        let data = TraceData {
            trace_id: random_id(16),
            name: name.into(),
            start_us: now_us(),
            end_us: None,
            origin: None,
        };
        if self.listening() {
            self.publish(TraceEvent::TraceStart(data.clone()));
        }
        Trace {
            data,
            hub: self.clone(),
        }
    }

    /// Creates a span named `name` under the current context, on this hub.
    pub fn span(&self, name: impl Into<String>) -> Span {
        self.span_under(name, current())
    }

    /// Creates a span named `name` under `parent` (a new trace if none), on
    /// this hub.
    pub fn span_under(&self, name: impl Into<String>, parent: Option<SpanContext>) -> Span {
        let (trace_id, parent_id) = match parent {
            Some(ctx) => (ctx.trace_id, ctx.span_id),
            None => (random_id(16), None),
        };
        Span {
            inner: Mutex::new(SpanInner {
                data: SpanData {
                    trace_id,
                    span_id: random_id(8),
                    parent_id,
                    name: name.into(),
                    start_us: now_us(),
                    end_us: None,
                    attributes: Default::default(),
                    events: Vec::new(),
                    status: SpanStatus::Unset,
                    origin: None,
                },
                announced: false,
            }),
            hub: self.clone(),
        }
    }
}

impl Trace {
    /// Its id.
    pub fn id(&self) -> &str {
        &self.data.trace_id
    }

    /// The context spans at its top level attach to.
    pub fn context(&self) -> SpanContext {
        SpanContext {
            trace_id: self.data.trace_id.clone(),
            span_id: None,
        }
    }

    /// Runs `fut` inside this trace, across every `.await`.
    pub fn scope<F: IntoFuture>(&self, fut: F) -> InContext<F::IntoFuture> {
        InContext::with_hub(Some(self.context()), self.hub.clone(), fut.into_future())
    }

    /// Makes this trace current on this thread while the guard lives (sync
    /// code; use [`Trace::scope`] around `.await`).
    pub fn enter(&self) -> Entered {
        Entered::new(Some(self.context()), Some(self.hub.clone()))
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        if self.hub.listening() {
            self.data.end_us = Some(now_us());
            self.hub.publish(TraceEvent::TraceEnd(self.data.clone()));
        }
    }
}

/// A span: one timed step. It starts when created (processors hear of it
/// when it is first used, so attributes set with [`Span::attr`] are in the
/// start event) and ends when dropped.
#[must_use = "a span ends when dropped"]
pub struct Span {
    inner: Mutex<SpanInner>,
    hub: TraceHub,
}

struct SpanInner {
    data: SpanData,
    announced: bool,
}

impl Span {
    fn with<R>(&self, f: impl FnOnce(&mut SpanInner, &TraceHub) -> R) -> R {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut inner, &self.hub)
    }

    fn announce(inner: &mut SpanInner, hub: &TraceHub) {
        if !inner.announced {
            inner.announced = true;
            if hub.listening() {
                hub.publish(TraceEvent::SpanStart(inner.data.clone()));
            }
        }
    }

    /// Sets attribute `key` before the span is used (builder style).
    pub fn attr(self, key: impl Into<String>, value: impl Into<serde_json::Value>) -> Self {
        self.set_attr(key, value);
        self
    }

    /// Sets attribute `key`.
    pub fn set_attr(&self, key: impl Into<String>, value: impl Into<serde_json::Value>) {
        self.with(|i, _| i.data.attributes.insert(key.into(), value.into()));
    }

    /// Records that `name` happened now.
    pub fn add_event(&self, name: impl Into<String>) {
        self.with(|i, hub| {
            Self::announce(i, hub);
            i.data.events.push(SpanEvent {
                name: name.into(),
                ts_us: now_us(),
                attributes: Default::default(),
            });
        });
    }

    /// Sets how the span ended.
    pub fn set_status(&self, status: SpanStatus) {
        self.with(|i, _| i.data.status = status);
    }

    /// Marks the span failed with `message`.
    pub fn set_error(&self, message: impl Into<String>) {
        self.set_status(SpanStatus::Error(message.into()));
    }

    /// Its id.
    pub fn id(&self) -> String {
        self.with(|i, _| i.data.span_id.clone())
    }

    /// Its trace's id.
    pub fn trace_id(&self) -> String {
        self.with(|i, _| i.data.trace_id.clone())
    }

    /// The context its children attach to.
    pub fn context(&self) -> SpanContext {
        self.with(|i, hub| {
            Self::announce(i, hub);
            SpanContext {
                trace_id: i.data.trace_id.clone(),
                span_id: Some(i.data.span_id.clone()),
            }
        })
    }

    /// Runs `fut` with this span current, across every `.await`.
    pub fn scope<F: IntoFuture>(&self, fut: F) -> InContext<F::IntoFuture> {
        InContext::with_hub(Some(self.context()), self.hub.clone(), fut.into_future())
    }

    /// Makes this span current on this thread while the guard lives (sync
    /// code; use [`Span::scope`] around `.await`).
    pub fn enter(&self) -> Entered {
        Entered::new(Some(self.context()), Some(self.hub.clone()))
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        Self::announce(inner, &self.hub);
        if self.hub.listening() {
            inner.data.end_us = Some(now_us());
            self.hub.publish(TraceEvent::SpanEnd(inner.data.clone()));
        }
    }
}
