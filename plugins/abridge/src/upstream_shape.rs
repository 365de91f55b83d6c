//! [`UpstreamShape`]: which API a gateway's upstream speaks, and so how an
//! agent's request goes to it and how its answer comes back.
//!
//! * **OpenAI** (OpenAI, vLLM, SGLang, any compatible server): chat
//!   completions pass as they are; Anthropic Messages requests are
//!   translated ([`crate::anthropic`]), streams too; `count_tokens` asks
//!   vLLM's `POST /tokenize`.
//! * **Anthropic**: Messages and `count_tokens` pass as they are, with the
//!   key as `x-api-key` and an `anthropic-version`; an OpenAI-speaking
//!   agent is refused with a 400 that says so.

use hyper::Method;
use serde_json::{json, Value};

use crate::anthropic;
use crate::anthropic_stream::StreamTranslator;
use crate::exchange::{Api, UpstreamAnswer};

/// The `anthropic-version` sent to an Anthropic upstream.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Which API the upstream speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamShape {
    /// OpenAI's chat completions API.
    OpenAi,
    /// Anthropic's Messages API.
    Anthropic,
}

/// Where and what to send upstream.
pub struct UpstreamCall {
    /// `GET` or `POST`.
    pub method: Method,
    /// The full URL.
    pub url: String,
    /// The JSON body, if any.
    pub body: Option<Value>,
}

impl UpstreamShape {
    /// Whether an agent of `api` speaks this upstream's own API, so that
    /// [`call`](Self::call) passes its body on as it is.
    pub fn speaks(&self, api: Api) -> bool {
        matches!(
            (self, api),
            (UpstreamShape::OpenAi, Api::ChatCompletions)
                | (UpstreamShape::Anthropic, Api::Messages | Api::CountTokens)
        )
    }

    /// The upstream request for an agent's `api` request with `body`; the
    /// answer that refuses it if it cannot be sent.
    pub fn call(
        &self,
        base_url: &str,
        api: Api,
        body: Value,
    ) -> Result<UpstreamCall, UpstreamAnswer> {
        let post = |path: &str, body: Value| UpstreamCall {
            method: Method::POST,
            url: format!("{base_url}/{path}"),
            body: Some(body),
        };
        Ok(match (self, api) {
            (_, Api::Models) => UpstreamCall {
                method: Method::GET,
                url: format!("{base_url}/models"),
                body: None,
            },
            (UpstreamShape::OpenAi, Api::ChatCompletions) => post("chat/completions", body),
            (UpstreamShape::OpenAi, Api::Messages) => post("chat/completions", to_openai(&body)?),
            (UpstreamShape::OpenAi, Api::CountTokens) => {
                let chat = to_openai(&body)?;
                // vLLM serves /tokenize beside /v1, not under it.
                let root = base_url.strip_suffix("/v1").unwrap_or(base_url);
                UpstreamCall {
                    method: Method::POST,
                    url: format!("{root}/tokenize"),
                    body: Some(json!({"model": chat["model"], "messages": chat["messages"]})),
                }
            }
            (UpstreamShape::Anthropic, Api::Messages) => post("messages", body),
            (UpstreamShape::Anthropic, Api::CountTokens) => post("messages/count_tokens", body),
            (UpstreamShape::Anthropic, Api::ChatCompletions) => {
                return Err(UpstreamAnswer::error(
                    400,
                    "invalid_request",
                    "this sandbox's gateway speaks Anthropic's Messages API to its upstream: send \
                     POST /v1/messages, or give the host a Gateway::openai",
                ))
            }
        })
    }

    /// The headers that carry `key`.
    pub fn auth_headers(&self, key: Option<&str>) -> Vec<(&'static str, String)> {
        let mut headers = Vec::new();
        match self {
            UpstreamShape::OpenAi => {
                if let Some(key) = key {
                    headers.push(("authorization", format!("Bearer {key}")));
                }
            }
            UpstreamShape::Anthropic => {
                if let Some(key) = key {
                    headers.push(("x-api-key", key.to_owned()));
                }
                headers.push(("anthropic-version", ANTHROPIC_VERSION.to_owned()));
            }
        }
        headers
    }

    /// The upstream's whole answer to an `api` request in the agent's API
    /// (errors are put in the agent's words by the gateway).
    pub fn answer(&self, api: Api, answer: UpstreamAnswer) -> UpstreamAnswer {
        match (self, api) {
            (UpstreamShape::OpenAi, Api::Messages) if answer.status == 200 => UpstreamAnswer {
                body: anthropic::answer_from_openai(&answer.body),
                ..answer
            },
            (UpstreamShape::OpenAi, Api::CountTokens) if answer.status == 200 => {
                match answer.body["count"].as_u64() {
                    Some(count) => UpstreamAnswer {
                        body: json!({"input_tokens": count}),
                        ..answer
                    },
                    None => anthropic_error(UpstreamAnswer::error(
                        502,
                        "upstream_error",
                        format!(
                            "the upstream's /tokenize answer has no count: {}",
                            answer.body
                        ),
                    )),
                }
            }
            (UpstreamShape::OpenAi, Api::CountTokens) if answer.status == 404 => {
                anthropic_error(UpstreamAnswer::error(
                    501,
                    "not_supported",
                    "the upstream counts no tokens: an OpenAI-compatible upstream needs \
                     POST /tokenize (vLLM has it)",
                ))
            }
            _ => answer,
        }
    }

    /// What rewrites a stream's events for the agent, if anything must.
    pub fn stream_translator(&self, api: Api) -> Option<StreamTranslator> {
        (*self == UpstreamShape::OpenAi && api == Api::Messages).then(StreamTranslator::default)
    }
}

fn to_openai(body: &Value) -> Result<Value, UpstreamAnswer> {
    anthropic::request_to_openai(body)
        .map_err(|why| anthropic_error(UpstreamAnswer::error(400, "invalid_request", why)))
}

/// `answer` with its OpenAI-style error body in Anthropic's words.
fn anthropic_error(answer: UpstreamAnswer) -> UpstreamAnswer {
    UpstreamAnswer {
        body: anthropic::error_from_openai(answer.status, &answer.body),
        ..answer
    }
}
