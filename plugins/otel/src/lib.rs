//! [`OtlpProcessor`]: agentix spans (the host's own, and those replayed
//! from sandboxes, nested as the host sees them) exported to OpenTelemetry
//! over OTLP/HTTP, on the project's own `opentelemetry` crates.
//!
//! ```no_run
//! # fn main() -> Result<(), agentix_otel::OtelError> {
//! let hub = agentix::trace::TraceHub::new();
//! let otel = agentix_otel::OtlpProcessor::new("http://127.0.0.1:4318")
//!     .service_name("my-eval")
//!     .start()?;
//! hub.add_processor(otel);
//! // Each sandbox's spans too: `SandboxConfig::new(..).trace_hub(hub.clone())`.
//! # Ok(()) }
//! ```
//!
//! Spans travel in batches from the SDK's batch processor (its own thread,
//! a bounded queue: a collector that is down costs dropped spans, counted
//! by the SDK, never a stalled host). A span from a sandbox carries
//! `agentix.sandbox` = the sandbox id. The hub's `flush()` and `shutdown()`
//! reach the exporter.
//!
//! Layout: [`conversion`] maps a span; [`http_client`] posts the batches.

pub mod conversion;
pub mod http_client;

use std::time::Duration;

use agentix::trace::{Processor, SpanData};
use opentelemetry::InstrumentationScope;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SpanProcessor};
use opentelemetry_sdk::Resource;

use crate::http_client::OwnRuntimeClient;

/// How often a batch goes out when it is not full.
const SCHEDULED_DELAY: Duration = Duration::from_secs(1);

/// How long one export may take before it is given up.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the exporter could not be made.
#[derive(Debug, thiserror::Error)]
pub enum OtelError {
    /// The OTLP exporter refused its settings.
    #[error("the OTLP exporter cannot be built: {0}")]
    Exporter(String),
    /// Its HTTP client's runtime did not start.
    #[error("the OTLP exporter's runtime did not start: {0}")]
    Runtime(#[from] std::io::Error),
}

/// Settings for an [`OtlpSpans`] processor: where the collector is, and
/// the service the spans belong to.
#[derive(Debug, Clone)]
pub struct OtlpProcessor {
    endpoint: String,
    service_name: String,
}

impl OtlpProcessor {
    /// Spans for the collector at `base` (`http://host:4318`); they are
    /// posted to `base/v1/traces`.
    pub fn new(base: impl Into<String>) -> Self {
        OtlpProcessor {
            endpoint: base.into(),
            service_name: "agentix".into(),
        }
    }

    /// The `service.name` the spans' resource carries (`agentix` unless
    /// set).
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = name.into();
        self
    }

    /// Starts the exporter; hand the result to `TraceHub::add_processor`.
    pub fn start(self) -> Result<OtlpSpans, OtelError> {
        let url = format!("{}/v1/traces", self.endpoint.trim_end_matches('/'));
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(OwnRuntimeClient::new(EXPORT_TIMEOUT)?)
            .with_endpoint(url)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| OtelError::Exporter(e.to_string()))?;
        // Spans of a live rollout should show within a second, not five
        // (the SDK's default); `OTEL_BSP_*` variables still apply.
        let config = BatchConfigBuilder::default()
            .with_scheduled_delay(SCHEDULED_DELAY)
            .build();
        let mut batch = BatchSpanProcessor::builder(exporter)
            .with_batch_config(config)
            .build();
        batch.set_resource(
            &Resource::builder_empty()
                .with_service_name(self.service_name)
                .build(),
        );
        Ok(OtlpSpans {
            batch,
            scope: InstrumentationScope::builder("agentix")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        })
    }
}

/// The running exporter, as an agentix trace processor.
pub struct OtlpSpans {
    batch: BatchSpanProcessor,
    scope: InstrumentationScope,
}

impl Processor for OtlpSpans {
    fn on_span_end(&mut self, span: &SpanData) {
        if let Some(span) = conversion::to_otel(span, &self.scope) {
            self.batch.on_end(span);
        }
    }

    fn force_flush(&mut self) {
        let _ = self.batch.force_flush();
    }

    fn shutdown(&mut self) {
        let _ = self.batch.shutdown();
    }
}
