//! Tracing: traces and spans, processors, and the context that links them.
//! The kernel's tracing layer: it depends on nothing else of Agentix's, and
//! the wire format, the worker and the host build on it.
//!
//! The same API works in the sandbox and on the host:
//!
//! ```no_run
//! use agentix_trace::{self as trace, ConsoleProcessor, TraceHub};
//! # async fn eval() {
//! let hub = TraceHub::new();
//! hub.add_processor(ConsoleProcessor::new());
//! let t = hub.trace("eval");
//! t.scope(async {
//!     // In the trace's scope, the free functions make spans on its hub.
//!     let step = trace::span("agent.step").attr("model", "claude");
//!     step.scope(async { /* work */ }).await;
//!     step.add_event("first_token");
//! }).await;
//! hub.flush().await;
//! # }
//! ```
//!
//! - `model`: what processors see ([`TraceData`], [`SpanData`], [`TraceEvent`]).
//! - `context`: the current trace/span, carried by futures across `.await`.
//! - `span`: [`trace()`], [`span()`], [`Trace`], [`Span`].
//! - `in_span`: [`InSpan`], `fut.in_span(span)` as `tracing` users write
//!   `fut.instrument(span)`.
//! - `hub`: [`TraceHub`], the processors a program owns and where spans
//!   made in its scope go; `processor_lane`: the bounded queue in front of
//!   each processor.
//! - `processor`: the [`Processor`] trait; an actix actor is one too
//!   (`TraceHub::add_actor`).
//! - `unscoped_functions`: v0.1's free functions, deprecated.
//! - `processors`: [`ConsoleProcessor`] and [`JsonLinesProcessor`].
//!
//! In a worker, an internal processor forwards every event to the host over
//! `/trace`, where it is replayed to the sandbox's hub (its own processors,
//! then the hub the program gave the sandbox); a remote call made inside a
//! host span carries that span's context, so the sandbox's spans for the
//! call are its children.

mod context;
mod hub;
mod in_span;
mod model;
mod processor;
mod processor_lane;
mod processors;
mod span;
mod unscoped_functions;

pub use context::swap;
pub use context::{current, Entered, InContext, SpanContext};
pub use hub::TraceHub;
pub use in_span::{InSpan, Spanned};
pub use model::{now_us, random_id};
pub use model::{SpanData, SpanEvent, SpanId, SpanStatus, TraceData, TraceEvent, TraceId};
pub use processor::Processor;
pub use processor_lane::PROCESSOR_QUEUE;
pub use processors::{ConsoleProcessor, JsonLinesProcessor};
pub use span::{span, span_under, trace, Span, Trace};
#[allow(deprecated)]
pub use unscoped_functions::{add_actor_processor, add_processor, force_flush, publish, shutdown};
