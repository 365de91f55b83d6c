//! [`Trace`] and [`Span`]: what user code creates.

use std::future::IntoFuture;
use std::sync::Mutex;

use super::context::{current, Entered, InContext, SpanContext};
use super::model::{random_id, SpanData, SpanEvent, SpanStatus, TraceData, TraceEvent};
use super::processor::publish;
use crate::log_record::now_us;

/// A running trace; it ends when dropped.
#[must_use = "a trace ends when dropped"]
pub struct Trace {
    data: TraceData,
}

/// Starts a trace named `name`. Spans created inside [`Trace::scope`] (or
/// while [`Trace::enter`] is held) belong to it.
pub fn trace(name: impl Into<String>) -> Trace {
    let data = TraceData {
        trace_id: random_id(16),
        name: name.into(),
        start_us: now_us(),
        end_us: None,
        origin: None,
    };
    publish(TraceEvent::TraceStart(data.clone()));
    Trace { data }
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
        InContext::new(Some(self.context()), fut.into_future())
    }

    /// Makes this trace current on this thread while the guard lives (sync
    /// code; use [`Trace::scope`] around `.await`).
    pub fn enter(&self) -> Entered {
        Entered::new(Some(self.context()))
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        self.data.end_us = Some(now_us());
        publish(TraceEvent::TraceEnd(self.data.clone()));
    }
}

/// A span: one timed step. It starts when created (processors hear of it
/// when it is first used, so attributes set with [`Span::attr`] are in the
/// start event) and ends when dropped.
#[must_use = "a span ends when dropped"]
pub struct Span {
    inner: Mutex<SpanInner>,
}

struct SpanInner {
    data: SpanData,
    announced: bool,
}

/// Creates a span named `name` under the current context (a new trace if
/// there is none).
pub fn span(name: impl Into<String>) -> Span {
    span_under(name, current())
}

/// Creates a span named `name` under `parent` (a new trace if none).
pub fn span_under(name: impl Into<String>, parent: Option<SpanContext>) -> Span {
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
    }
}

impl Span {
    fn with<R>(&self, f: impl FnOnce(&mut SpanInner) -> R) -> R {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut inner)
    }

    fn announce(inner: &mut SpanInner) {
        if !inner.announced {
            inner.announced = true;
            publish(TraceEvent::SpanStart(inner.data.clone()));
        }
    }

    /// Sets attribute `key` before the span is used (builder style).
    pub fn attr(self, key: impl Into<String>, value: impl Into<serde_json::Value>) -> Self {
        self.set_attr(key, value);
        self
    }

    /// Sets attribute `key`.
    pub fn set_attr(&self, key: impl Into<String>, value: impl Into<serde_json::Value>) {
        self.with(|i| i.data.attributes.insert(key.into(), value.into()));
    }

    /// Records that `name` happened now.
    pub fn add_event(&self, name: impl Into<String>) {
        self.with(|i| {
            Self::announce(i);
            i.data.events.push(SpanEvent {
                name: name.into(),
                ts_us: now_us(),
                attributes: Default::default(),
            });
        });
    }

    /// Sets how the span ended.
    pub fn set_status(&self, status: SpanStatus) {
        self.with(|i| i.data.status = status);
    }

    /// Marks the span failed with `message`.
    pub fn set_error(&self, message: impl Into<String>) {
        self.set_status(SpanStatus::Error(message.into()));
    }

    /// Its id.
    pub fn id(&self) -> String {
        self.with(|i| i.data.span_id.clone())
    }

    /// Its trace's id.
    pub fn trace_id(&self) -> String {
        self.with(|i| i.data.trace_id.clone())
    }

    /// The context its children attach to.
    pub fn context(&self) -> SpanContext {
        self.with(|i| {
            Self::announce(i);
            SpanContext {
                trace_id: i.data.trace_id.clone(),
                span_id: Some(i.data.span_id.clone()),
            }
        })
    }

    /// Runs `fut` with this span current, across every `.await`.
    pub fn scope<F: IntoFuture>(&self, fut: F) -> InContext<F::IntoFuture> {
        InContext::new(Some(self.context()), fut.into_future())
    }

    /// Makes this span current on this thread while the guard lives (sync
    /// code; use [`Span::scope`] around `.await`).
    pub fn enter(&self) -> Entered {
        Entered::new(Some(self.context()))
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        Self::announce(inner);
        inner.data.end_us = Some(now_us());
        publish(TraceEvent::SpanEnd(inner.data.clone()));
    }
}
