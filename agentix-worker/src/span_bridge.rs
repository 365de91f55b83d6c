//! [`SpanBridge`]: `tracing` spans in sandbox code (`#[instrument]`,
//! `info_span!`) become agentix spans, so one trace holds both and the host
//! sees them nested under the call that made them.
//!
//! Opt-in, by `tracing` filter directives in [`ENV_TRACING_SPANS`]
//! (`my_eval=info,my_eval::tools=debug`, the `RUST_LOG` syntax), which the
//! host sets with `SandboxConfig::tracing_spans`; the worker installs the
//! layer when the variable is set. A bridged span starts under the current
//! agentix context (or under its explicit `tracing` parent, when that one
//! is bridged), takes its fields as attributes (plus `code.target`), is the
//! current agentix context while it is entered, and ends when `tracing`
//! closes it.

use std::cell::RefCell;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use agentix_trace::{self as trace, span_under, Span, SpanContext};

pub(crate) use agentix_wire::wire::ENV_TRACING_SPANS;

/// The layer; filter it with the directives of [`ENV_TRACING_SPANS`].
pub(crate) struct SpanBridge;

/// What a bridged span keeps in its `tracing` extensions.
struct Bridged {
    span: Span,
    context: SpanContext,
}

thread_local! {
    /// The contexts that entering bridged spans replaced, innermost last.
    static OUTER: RefCell<Vec<Option<SpanContext>>> = const { RefCell::new(Vec::new()) };
}

impl<S> Layer<S> for SpanBridge
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(new) = ctx.span(id) else { return };
        let parent = if attrs.is_contextual() {
            trace::current()
        } else {
            // An explicit parent counts if it is bridged; a root is a root.
            attrs.parent().and_then(|p| ctx.span(p)).and_then(|p| {
                let extensions = p.extensions();
                extensions.get::<Bridged>().map(|b| b.context.clone())
            })
        };
        let meta = attrs.metadata();
        let span = span_under(meta.name(), parent).attr("code.target", meta.target());
        attrs.record(&mut Attrs(&span));
        let context = span.context();
        new.extensions_mut().insert(Bridged { span, context });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            let extensions = span.extensions();
            if let Some(b) = extensions.get::<Bridged>() {
                values.record(&mut Attrs(&b.span));
            }
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let context = span
            .extensions()
            .get::<Bridged>()
            .map(|b| b.context.clone());
        if let Some(context) = context {
            let outer = trace::swap(Some(context));
            OUTER.with(|o| o.borrow_mut().push(outer));
        }
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let bridged = span.extensions().get::<Bridged>().is_some();
        if bridged {
            if let Some(outer) = OUTER.with(|o| o.borrow_mut().pop()) {
                trace::swap(outer);
            }
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            // Dropping the agentix span ends it.
            drop(span.extensions_mut().remove::<Bridged>());
        }
    }
}

/// Records `tracing` fields as span attributes: numbers and booleans as
/// themselves, anything else as its text.
struct Attrs<'a>(&'a Span);

impl Visit for Attrs<'_> {
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.set_attr(field.name(), value);
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.set_attr(field.name(), value);
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.set_attr(field.name(), value);
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.set_attr(field.name(), value);
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.set_attr(field.name(), value);
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.set_attr(field.name(), format!("{value:?}"));
    }
}
