//! What crosses the `/abridge` namespace: the request an agent made, and
//! the upstream's answer as HTTP status, body and retry hint.

use serde::{Deserialize, Serialize};

/// Which upstream API a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// `POST /chat/completions`.
    ChatCompletions,
    /// `GET /models`.
    Models,
}

/// An agent's request, as the sandbox half forwards it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamRequest {
    /// The API called.
    pub api: Api,
    /// The request's JSON body, untouched (fields the gateway does not know
    /// are passed on as they are); `null` for a `GET`.
    pub body: serde_json::Value,
}

/// The upstream's answer, as the sandbox half replays it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamAnswer {
    /// The HTTP status the agent sees.
    pub status: u16,
    /// The response's JSON body.
    pub body: serde_json::Value,
    /// The upstream's `Retry-After`, if it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<String>,
}

impl UpstreamAnswer {
    /// An OpenAI-style error answer: `{"error": {"message", "type"}}`.
    pub fn error(status: u16, kind: &str, message: impl Into<String>) -> Self {
        UpstreamAnswer {
            status,
            body: serde_json::json!({
                "error": { "message": message.into(), "type": kind }
            }),
            retry_after: None,
        }
    }
}
