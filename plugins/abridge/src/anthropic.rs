//! Anthropic Messages ⇄ OpenAI chat completions, so an agent that speaks
//! Anthropic's API can be served by an OpenAI-compatible upstream: the
//! request ([`request_to_openai`]), the answer ([`answer_from_openai`]) and
//! errors ([`error_from_openai`]). Streams are translated by
//! [`crate::anthropic_stream`].
//!
//! What is translated: the system prompt, text, image and tool blocks,
//! tools and tool choice, stop sequences, the stop reason and usage. Fields
//! of the request this module does not know are passed on untouched (an RL
//! user's `logprobs` or `return_token_ids`, say).

use serde_json::{json, Map, Value};

/// Anthropic request fields that are translated, and so not passed on.
const TRANSLATED: &[&str] = &[
    "system",
    "messages",
    "tools",
    "tool_choice",
    "stop_sequences",
    "metadata",
    "stream",
    "thinking",
];

/// The OpenAI chat completions body for an Anthropic Messages request.
pub fn request_to_openai(request: &Value) -> Result<Value, String> {
    let fields = request
        .as_object()
        .ok_or("a Messages request is a JSON object")?;
    let mut out = Map::new();
    for (key, value) in fields {
        if !TRANSLATED.contains(&key.as_str()) {
            out.insert(key.clone(), value.clone());
        }
    }
    let mut messages = Vec::new();
    match fields.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => messages.push(json!({"role": "system", "content": text})),
        Some(Value::Array(blocks)) => {
            let text = joined_text(blocks);
            messages.push(json!({"role": "system", "content": text}));
        }
        Some(other) => return Err(format!("`system` is text or text blocks, not {other}")),
    }
    let turns = fields
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("`messages` is a list")?;
    for turn in turns {
        messages.extend(message_to_openai(turn)?);
    }
    out.insert("messages".into(), Value::Array(messages));
    if let Some(tools) = fields.get("tools").and_then(Value::as_array) {
        let tools: Vec<Value> = tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "function": {
                        "name": tool["name"],
                        "description": tool.get("description").cloned().unwrap_or(Value::Null),
                        "parameters": tool.get("input_schema").cloned()
                            .unwrap_or_else(|| json!({"type": "object"})),
                    }
                })
            })
            .collect();
        out.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = fields.get("tool_choice") {
        let choice = match choice["type"].as_str() {
            Some("auto") => json!("auto"),
            Some("any") => json!("required"),
            Some("none") => json!("none"),
            Some("tool") => json!({"type": "function", "function": {"name": choice["name"]}}),
            _ => {
                return Err(format!(
                    "`tool_choice` {choice} is not one Anthropic defines"
                ))
            }
        };
        out.insert("tool_choice".into(), choice);
    }
    if let Some(stop) = fields.get("stop_sequences") {
        out.insert("stop".into(), stop.clone());
    }
    if fields.get("stream") == Some(&Value::Bool(true)) {
        out.insert("stream".into(), Value::Bool(true));
        out.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Ok(Value::Object(out))
}

/// One Anthropic message as OpenAI messages: tool results become `tool`
/// messages of their own, tool uses the assistant's `tool_calls`.
fn message_to_openai(message: &Value) -> Result<Vec<Value>, String> {
    let role = message["role"]
        .as_str()
        .ok_or("every message has a `role`")?;
    let blocks = match &message["content"] {
        Value::String(text) => return Ok(vec![json!({"role": role, "content": text})]),
        Value::Array(blocks) => blocks,
        other => {
            return Err(format!(
                "a message's `content` is text or blocks, not {other}"
            ))
        }
    };
    let mut out = Vec::new();
    let mut parts = Vec::new();
    let mut calls = Vec::new();
    for block in blocks {
        match block["type"].as_str() {
            Some("text") => parts.push(json!({"type": "text", "text": block["text"]})),
            Some("image") => {
                let source = &block["source"];
                let url = match source["type"].as_str() {
                    Some("base64") => format!(
                        "data:{};base64,{}",
                        source["media_type"].as_str().unwrap_or("image/png"),
                        source["data"].as_str().unwrap_or_default()
                    ),
                    _ => source["url"].as_str().unwrap_or_default().to_owned(),
                };
                parts.push(json!({"type": "image_url", "image_url": {"url": url}}));
            }
            Some("tool_use") => calls.push(json!({
                "id": block["id"],
                "type": "function",
                "function": {"name": block["name"], "arguments": block["input"].to_string()},
            })),
            Some("tool_result") => {
                let content = match &block["content"] {
                    Value::String(text) => text.clone(),
                    Value::Array(inner) => joined_text(inner),
                    Value::Null => String::new(),
                    other => other.to_string(),
                };
                out.push(json!({
                    "role": "tool",
                    "tool_call_id": block["tool_use_id"],
                    "content": content,
                }));
            }
            // Reasoning the model showed earlier is not sent back upstream.
            Some("thinking") | Some("redacted_thinking") => {}
            _ => {
                return Err(format!(
                    "a content block of type {} is not supported",
                    block["type"]
                ))
            }
        }
    }
    if !parts.is_empty() || !calls.is_empty() {
        let all_text = parts.iter().all(|p| p["type"] == "text");
        let content = if all_text {
            let texts: Vec<&str> = parts.iter().filter_map(|p| p["text"].as_str()).collect();
            if texts.is_empty() && !calls.is_empty() {
                Value::Null
            } else {
                Value::String(texts.join("\n"))
            }
        } else {
            Value::Array(parts)
        };
        let mut turn = json!({"role": role, "content": content});
        if !calls.is_empty() {
            turn["tool_calls"] = Value::Array(calls);
        }
        out.push(turn);
    }
    Ok(out)
}

fn joined_text(blocks: &[Value]) -> String {
    blocks
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Anthropic's stop reason for an OpenAI finish reason.
pub fn stop_reason(finish_reason: &Value) -> Value {
    match finish_reason.as_str() {
        Some("stop") => json!("end_turn"),
        Some("length") => json!("max_tokens"),
        Some("tool_calls") | Some("function_call") => json!("tool_use"),
        Some("content_filter") => json!("refusal"),
        Some(_) => json!("end_turn"),
        None => Value::Null,
    }
}

/// The Anthropic `usage` for an OpenAI `usage`.
pub fn usage(usage: &Value) -> Value {
    json!({
        "input_tokens": usage["prompt_tokens"].as_u64().unwrap_or(0),
        "output_tokens": usage["completion_tokens"].as_u64().unwrap_or(0),
    })
}

/// The Anthropic Messages answer for an OpenAI chat completion.
pub fn answer_from_openai(completion: &Value) -> Value {
    let choice = &completion["choices"][0];
    let message = &choice["message"];
    let mut content = Vec::new();
    if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
        content.push(json!({"type": "text", "text": text}));
    }
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        content.push(tool_use_block(
            call,
            tool_input(&call["function"]["arguments"]),
        ));
    }
    json!({
        "id": completion["id"],
        "type": "message",
        "role": "assistant",
        "model": completion["model"],
        "content": content,
        "stop_reason": stop_reason(&choice["finish_reason"]),
        "stop_sequence": null,
        "usage": usage(&completion["usage"]),
    })
}

/// A `tool_use` block for an OpenAI tool call and its parsed input.
pub fn tool_use_block(call: &Value, input: Value) -> Value {
    json!({
        "type": "tool_use",
        "id": call["id"],
        "name": call["function"]["name"],
        "input": input,
    })
}

/// A tool call's arguments as the JSON object Anthropic's `input` is; text
/// that is not JSON is kept under `arguments`.
pub fn tool_input(arguments: &Value) -> Value {
    match arguments {
        Value::String(text) if text.trim().is_empty() => json!({}),
        Value::String(text) => {
            serde_json::from_str(text).unwrap_or_else(|_| json!({ "arguments": text }))
        }
        Value::Object(_) => arguments.clone(),
        _ => json!({}),
    }
}

/// The Anthropic error body for an OpenAI-style error answer with `status`.
pub fn error_from_openai(status: u16, body: &Value) -> Value {
    let message = body["error"]["message"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| body.to_string());
    let kind = match status {
        400 | 413 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        529 | 503 => "overloaded_error",
        _ => "api_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_with_system_tools_and_a_tool_round_becomes_openai_chat() {
        let request = json!({
            "model": "claude-x",
            "max_tokens": 100,
            "system": [{"type": "text", "text": "be brief"}],
            "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "checking"},
                    {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "cold"}
                ]}
            ],
            "tools": [{"name": "weather", "description": "d", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any"},
            "stop_sequences": ["END"],
            "logprobs": true
        });
        let out = request_to_openai(&request).unwrap();
        assert_eq!(out["model"], "claude-x");
        assert_eq!(out["max_tokens"], 100);
        assert_eq!(out["logprobs"], true, "unknown fields pass");
        assert_eq!(out["stop"], json!(["END"]));
        assert_eq!(out["tool_choice"], "required");
        assert_eq!(out["tools"][0]["function"]["name"], "weather");
        let messages = out["messages"].as_array().unwrap();
        assert_eq!(
            messages[0],
            json!({"role": "system", "content": "be brief"})
        );
        assert_eq!(messages[1], json!({"role": "user", "content": "weather?"}));
        assert_eq!(messages[2]["content"], "checking");
        assert_eq!(messages[2]["tool_calls"][0]["id"], "t1");
        assert_eq!(
            messages[2]["tool_calls"][0]["function"]["arguments"],
            "{\"city\":\"Oslo\"}"
        );
        assert_eq!(
            messages[3],
            json!({"role": "tool", "tool_call_id": "t1", "content": "cold"})
        );
        assert!(out.get("system").is_none() && out.get("stream").is_none());
    }

    #[test]
    fn a_completion_with_a_tool_call_becomes_a_message_with_a_tool_use_block() {
        let completion = json!({
            "id": "c1", "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "let me look",
                "tool_calls": [{"id": "t9", "type": "function",
                    "function": {"name": "weather", "arguments": "{\"city\":\"Rome\"}"}}]
            }}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7}
        });
        let message = answer_from_openai(&completion);
        assert_eq!(message["type"], "message");
        assert_eq!(message["stop_reason"], "tool_use");
        assert_eq!(
            message["content"][0],
            json!({"type": "text", "text": "let me look"})
        );
        assert_eq!(message["content"][1]["input"], json!({"city": "Rome"}));
        assert_eq!(message["content"][1]["id"], "t9");
        assert_eq!(
            message["usage"],
            json!({"input_tokens": 11, "output_tokens": 7})
        );
    }

    #[test]
    fn errors_keep_their_meaning_in_anthropic_words() {
        let limited = error_from_openai(429, &json!({"error": {"message": "slow"}}));
        assert_eq!(limited["error"]["type"], "rate_limit_error");
        assert_eq!(limited["error"]["message"], "slow");
        assert_eq!(
            error_from_openai(502, &json!({}))["error"]["type"],
            "api_error"
        );
        assert!(request_to_openai(&json!({"messages": "no"})).is_err());
    }
}
