//! Tracing: traces and spans, processors, and the context that links them.
//!
//! The same API works in the sandbox and on the host:
//!
//! ```ignore
//! use agentix::trace;
//! let t = trace::trace("eval");
//! t.scope(async {
//!     let step = trace::span("agent.step").attr("model", "claude");
//!     step.scope(async { /* work */ }).await;
//!     step.add_event("first_token");
//! }).await;
//! ```
//!
//! - `model`: what processors see ([`TraceData`], [`SpanData`], [`TraceEvent`]).
//! - `context`: the current trace/span, carried by futures across `.await`.
//! - `span`: [`trace()`], [`span()`], [`Trace`], [`Span`].
//! - `in_span`: [`InSpan`], `fut.in_span(span)` as `tracing` users write
//!   `fut.instrument(span)`.
//! - `processor`: the [`Processor`] trait, [`add_processor`], [`force_flush`].
//! - `processors`: [`ConsoleProcessor`] and [`JsonLinesProcessor`].
//! - `actor_processor`: [`add_actor_processor`], an actix actor as a processor.
//!
//! In a worker, an internal processor forwards every event to the host over
//! `/trace`, where it is replayed to the host's processors; a remote call
//! made inside a host span carries that span's context, so the sandbox's
//! spans for the call are its children.

mod actor_processor;
mod context;
mod in_span;
mod model;
mod processor;
mod processors;
mod span;
pub mod span_bound;

pub use actor_processor::add_actor_processor;
pub(crate) use context::swap;
pub use context::{current, Entered, InContext, SpanContext};
pub use in_span::{InSpan, Spanned};
pub(crate) use model::random_id;
pub use model::{SpanData, SpanEvent, SpanId, SpanStatus, TraceData, TraceEvent, TraceId};
pub use processor::{add_processor, force_flush, publish, shutdown, Processor};
pub use processors::{ConsoleProcessor, JsonLinesProcessor};
pub use span::{span, span_under, trace, Span, Trace};
