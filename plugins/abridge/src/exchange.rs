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
    /// Anthropic's `POST /messages`.
    Messages,
    /// Anthropic's `POST /messages/count_tokens`.
    CountTokens,
}

/// An agent's request, as the sandbox half forwards it.
///
/// The sandbox half sends the body as the text the agent wrote
/// (`UpstreamRequest<&RawValue>`): an agent's context can be megabytes,
/// and the host, which must read it, is the only one that parses it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamRequest<B = serde_json::Value> {
    /// The API called.
    pub api: Api,
    /// The request's JSON body, untouched (fields the gateway does not know
    /// are passed on as they are); `null` for a `GET`.
    pub body: B,
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

/// The request that opens a streamed answer (`stream`): answered with the
/// upstream's [`StreamHead`], its body following as [`StreamItem`]s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamOpen<B = serde_json::Value> {
    /// Names the stream in every later event, both ways.
    pub stream_id: String,
    /// The agent's request, `"stream": true` and all.
    pub request: UpstreamRequest<B>,
}

/// The upstream's status for a streamed request: on 200 the body follows
/// as items; on anything else `body` holds the whole (error) answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamHead {
    /// The HTTP status the agent sees.
    pub status: u16,
    /// The upstream's `Retry-After`, if it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<String>,
    /// The whole answer when it is not a stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<serde_json::Value>,
    /// The stream's first lines, when they came soon enough to travel with
    /// the head: the agent gets them with the headers, and the items that
    /// follow still count from 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<String>,
}

impl StreamHead {
    /// The head of an answer that is not a stream: `answer` whole.
    pub fn whole(answer: UpstreamAnswer) -> Self {
        StreamHead {
            status: answer.status,
            retry_after: answer.retry_after,
            body: Some(answer.body),
            first: None,
        }
    }
}

/// One piece of a streamed body, host to sandbox (`stream:item`). Items are
/// numbered from 1 so the sandbox replays them in order whatever order its
/// handlers run in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamItem {
    /// The stream.
    pub stream_id: String,
    /// Its place in the stream, from 1.
    pub seq: u64,
    /// What it carries.
    pub part: StreamPart,
}

/// What a [`StreamItem`] carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamPart {
    /// Whole lines of the upstream's server-sent events, as they came.
    Lines(String),
    /// The end: cleanly (`None`) or why it broke off.
    End(Option<String>),
}

/// The sandbox has written every item through `seq` to the agent
/// (`stream:ack`): the host may send up to [`STREAM_WINDOW`] past it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamAck {
    /// The stream.
    pub stream_id: String,
    /// The last item written.
    pub seq: u64,
}

/// The agent went away (`stream:abandon`): the host drops the upstream
/// request, closing its connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamAbandon {
    /// The stream.
    pub stream_id: String,
}

/// Items the host may send past the last acknowledged one: a slow agent
/// slows the upstream read instead of filling memory.
pub const STREAM_WINDOW: u64 = 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_sent_as_the_agents_text_reads_back_on_the_host_as_it_was() {
        let text = r#"{"model": "m", "messages": [{"role": "user", "content": "a \"b\"\n"}], "logprobs": true}"#;
        let raw: Box<serde_json::value::RawValue> = serde_json::from_str(text).unwrap();
        let open = StreamOpen {
            stream_id: "7-1".into(),
            request: UpstreamRequest {
                api: Api::Messages,
                body: &*raw,
            },
        };
        let sent = serde_json::to_string(&open).unwrap();
        assert!(
            sent.contains(text),
            "the body goes out as the agent wrote it: {sent}"
        );
        let read: StreamOpen = serde_json::from_str(&sent).unwrap();
        assert_eq!(read.stream_id, "7-1");
        assert_eq!(read.request.api, Api::Messages);
        assert_eq!(
            read.request.body,
            serde_json::from_str::<serde_json::Value>(text).unwrap()
        );
    }
}
