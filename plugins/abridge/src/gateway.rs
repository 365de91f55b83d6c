//! [`OpenAiGateway`]: the host half, for an upstream that speaks the OpenAI
//! API (OpenAI, vLLM, SGLang, any compatible server). It holds the key;
//! the sandbox never sees it.

use std::time::Duration;

use agentix::ClientNamespace;
use hyper::Method;

use crate::exchange::{Api, UpstreamAnswer, UpstreamRequest};
use crate::upstream::{send, Outgoing};
use crate::{EVENT_UPSTREAM, NAMESPACE};

/// How long an upstream may take to answer in full, unless set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// An OpenAI-compatible upstream, with its key and an optional model that
/// replaces whatever model the agent asked for.
#[derive(Debug, Clone)]
pub struct OpenAiGateway {
    base_url: String,
    key: Option<String>,
    model: Option<String>,
    timeout: Duration,
}

impl OpenAiGateway {
    /// A gateway to the API at `base_url` (`http://127.0.0.1:8000/v1`: the
    /// part before `/chat/completions`).
    pub fn new(base_url: impl Into<String>) -> Self {
        OpenAiGateway {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            key: None,
            model: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The key sent upstream as `Authorization: Bearer`.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sends every request to `model`, whatever the agent asked for (the
    /// policy being trained, say).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// How long an upstream answer may take (10 minutes unless set); past
    /// it the agent gets a 504.
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = limit;
        self
    }

    /// The host half of `/abridge`: register it on the sandbox with
    /// `sandbox.register_namespace(..)`.
    pub fn namespace(&self) -> ClientNamespace {
        let gateway = self.clone();
        ClientNamespace::new(NAMESPACE).request_handler(EVENT_UPSTREAM, move |body| {
            let gateway = gateway.clone();
            async move { Ok::<_, std::convert::Infallible>(gateway.answer(body).await) }
        })
    }

    /// Answers one forwarded request.
    pub async fn answer(&self, request: serde_json::Value) -> UpstreamAnswer {
        let request: UpstreamRequest = match serde_json::from_value(request) {
            Ok(r) => r,
            Err(e) => {
                return UpstreamAnswer::error(400, "invalid_request", format!("not a request: {e}"))
            }
        };
        let (method, path, body) = match request.api {
            Api::Models => (Method::GET, "models", None),
            Api::ChatCompletions => {
                let mut body = request.body;
                if let (Some(model), Some(fields)) = (&self.model, body.as_object_mut()) {
                    fields.insert("model".into(), model.clone().into());
                }
                (
                    Method::POST,
                    "chat/completions",
                    Some(body.to_string().into_bytes()),
                )
            }
        };
        let url = format!("{}/{path}", self.base_url);
        send(Outgoing {
            method,
            url: &url,
            key: self.key.as_deref(),
            body,
            timeout: self.timeout,
        })
        .await
    }
}
