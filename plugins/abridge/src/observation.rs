//! [`Observation`]: one exchange watched from the gateway, as a span on the
//! host's `/trace` (under the span that was current when the gateway's
//! namespace was made) and, if the gateway has one, a record in its
//! [`ExchangeLog`].
//!
//! The span is `abridge.<api>` with `llm.model`, `http.status_code`,
//! `llm.prompt_tokens`, `llm.completion_tokens`, `llm.latency_ms` and, for
//! streams, `llm.ttft_ms` and a `first_piece` event.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use agentix::trace::{self, SpanContext};
use serde_json::Value;

use crate::exchange::Api;
use crate::exchange_log::{Exchange, ExchangeLog};

/// The status an exchange is recorded with when its agent left before the
/// upstream answered (nginx's "client closed request").
pub(crate) const CLIENT_GONE: u16 = 499;

/// An exchange under way. Dropped before [`Observation::end`] (the agent
/// went away and its request's future with it), it ends as
/// [`CLIENT_GONE`].
pub struct Observation(Option<Watching>);

/// What an exchange's watch holds until it ends.
struct Watching {
    span: trace::Span,
    log: Option<ExchangeLog>,
    began: Instant,
    record: Exchange,
}

impl Observation {
    /// Starts watching `request` for `api`.
    pub fn begin(
        api: Api,
        request: &Value,
        upstream_model: Option<&str>,
        parent: Option<SpanContext>,
        log: Option<ExchangeLog>,
    ) -> Self {
        let name = match api {
            Api::ChatCompletions => "abridge.chat_completions",
            Api::Messages => "abridge.messages",
            Api::Models => "abridge.models",
            Api::CountTokens => "abridge.count_tokens",
        };
        let model = request.get("model").cloned().unwrap_or(Value::Null);
        let span = trace::span_under(name, parent)
            .attr(
                "llm.model",
                upstream_model.map(Value::from).unwrap_or(model.clone()),
            )
            .attr(
                "llm.streamed",
                request.get("stream") == Some(&Value::Bool(true)),
            );
        let started_at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        // Copied only when it will be recorded: an agent's context can be
        // megabytes.
        let recorded = if log.is_some() {
            request.clone()
        } else {
            Value::Null
        };
        Observation(Some(Watching {
            span,
            log,
            began: Instant::now(),
            record: Exchange {
                api,
                model,
                upstream_model: upstream_model.map(str::to_owned),
                request: recorded,
                response: None,
                stream: None,
                status: 0,
                error: None,
                prompt_tokens: None,
                completion_tokens: None,
                started_at_ms,
                latency_ms: 0.0,
                ttft_ms: None,
            },
        }))
    }

    /// Whether a record of this exchange will be kept.
    pub fn recording(&self) -> bool {
        self.0.as_ref().is_some_and(|w| w.log.is_some())
    }

    /// Notes the first streamed piece.
    pub fn first_piece(&mut self) {
        let Some(w) = self.0.as_mut() else { return };
        if w.record.ttft_ms.is_none() {
            let ms = w.began.elapsed().as_secs_f64() * 1e3;
            w.record.ttft_ms = Some(ms);
            w.span.set_attr("llm.ttft_ms", ms);
            w.span.add_event("first_piece");
        }
    }

    /// Takes the token counts from a `usage` object, OpenAI's
    /// (`prompt_tokens`, `completion_tokens`) or Anthropic's (`input_tokens`,
    /// `output_tokens`).
    pub fn usage(&mut self, usage: &Value) {
        let Some(w) = self.0.as_mut() else { return };
        let count = |openai: &str, anthropic: &str| {
            usage[openai].as_u64().or_else(|| usage[anthropic].as_u64())
        };
        if let Some(prompt) = count("prompt_tokens", "input_tokens") {
            w.record.prompt_tokens = Some(prompt);
        }
        if let Some(completion) = count("completion_tokens", "output_tokens") {
            w.record.completion_tokens = Some(completion);
        }
    }

    /// Ends the exchange with the agent's `status`, a whole `response` or
    /// the `stream` text, and why it failed if it did; the response is
    /// copied only when it will be recorded.
    pub async fn end(
        mut self,
        status: u16,
        response: Option<&Value>,
        stream: Option<String>,
        error: Option<String>,
    ) {
        let Some(watching) = self.0.take() else {
            return;
        };
        if let Some((log, record)) = watching.close(status, response, stream, error) {
            log.send(record).await;
        }
    }
}

impl Watching {
    /// Ends the span; the record and the log to send it to, if any.
    fn close(
        mut self,
        status: u16,
        response: Option<&Value>,
        stream: Option<String>,
        error: Option<String>,
    ) -> Option<(ExchangeLog, Exchange)> {
        let record = &mut self.record;
        record.status = status;
        record.latency_ms = self.began.elapsed().as_secs_f64() * 1e3;
        record.response = response.filter(|_| self.log.is_some()).cloned();
        record.stream = stream;
        self.span.set_attr("http.status_code", status);
        self.span.set_attr("llm.latency_ms", record.latency_ms);
        if let Some(tokens) = record.prompt_tokens {
            self.span.set_attr("llm.prompt_tokens", tokens);
        }
        if let Some(tokens) = record.completion_tokens {
            self.span.set_attr("llm.completion_tokens", tokens);
        }
        match (&error, status) {
            (Some(why), _) => self.span.set_error(why.clone()),
            (None, 200..=299) => self.span.set_status(trace::SpanStatus::Ok),
            (None, _) => self
                .span
                .set_error(format!("the upstream answered {status}")),
        }
        record.error = error;
        Some((self.log?, self.record))
    }
}

impl Drop for Observation {
    fn drop(&mut self) {
        let Some(watching) = self.0.take() else {
            return;
        };
        let why = "the agent went away before the upstream answered";
        if let Some((log, record)) = watching.close(CLIENT_GONE, None, None, Some(why.into())) {
            // Off the dropping task: the recorder's mailbox may make it wait.
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(async move { log.send(record).await });
                }
                Err(_) => tracing::warn!("abridge: an abandoned exchange was not recorded"),
            }
        }
    }
}
