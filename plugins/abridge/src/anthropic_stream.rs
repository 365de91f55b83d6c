//! [`StreamTranslator`]: an OpenAI chat completion stream, read as whole
//! lines of server-sent events, rewritten as Anthropic Messages stream
//! events (`message_start`, a `content_block_start` / `_delta` / `_stop`
//! triple per text or tool-use block, `message_delta` with the stop reason
//! and usage, `message_stop`), piece by piece as the pieces come.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::anthropic::{stop_reason, usage};

/// The block being written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    /// A text block at this index.
    Text(usize),
    /// A tool-use block at this index.
    Tool(usize),
}

/// Rewrites one OpenAI stream as an Anthropic one.
#[derive(Debug, Default)]
pub struct StreamTranslator {
    started: bool,
    finished: bool,
    open: Option<Open>,
    next_block: usize,
    /// Block index of each OpenAI tool call index.
    tools: HashMap<u64, usize>,
    finish_reason: Value,
    usage: Value,
}

impl StreamTranslator {
    /// The Anthropic events for `lines` (whole lines of the OpenAI stream).
    pub fn feed(&mut self, lines: &str) -> String {
        let mut out = String::new();
        for line in lines.lines() {
            let Some(data) = line.strip_prefix("data:") else {
                continue;
            };
            let data = data.trim();
            if data == "[DONE]" {
                out.push_str(&self.finish());
                continue;
            }
            match serde_json::from_str::<Value>(data) {
                Ok(chunk) => self.chunk(&chunk, &mut out),
                Err(e) => tracing::debug!("abridge: a stream line that is not JSON: {e}"),
            }
        }
        out
    }

    /// The closing events, once: the open block's stop, the stop reason and
    /// usage, `message_stop`.
    pub fn finish(&mut self) -> String {
        let mut out = String::new();
        if self.finished {
            return out;
        }
        self.finished = true;
        self.start(&Value::Null, &mut out);
        self.close(&mut out);
        let mut usage = usage(&self.usage);
        if let Some(fields) = usage.as_object_mut() {
            fields.remove("input_tokens");
        }
        event(
            &mut out,
            "message_delta",
            json!({
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason(&self.finish_reason), "stop_sequence": null},
                "usage": usage,
            }),
        );
        event(&mut out, "message_stop", json!({"type": "message_stop"}));
        out
    }

    fn chunk(&mut self, chunk: &Value, out: &mut String) {
        if self.finished {
            return;
        }
        self.start(chunk, out);
        if chunk["usage"].is_object() {
            self.usage = chunk["usage"].clone();
        }
        let choice = &chunk["choices"][0];
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            let index = match self.open {
                Some(Open::Text(index)) => index,
                _ => {
                    self.close(out);
                    let index = self.next_block();
                    self.open = Some(Open::Text(index));
                    event(
                        out,
                        "content_block_start",
                        json!({"type": "content_block_start", "index": index,
                               "content_block": {"type": "text", "text": ""}}),
                    );
                    index
                }
            };
            event(
                out,
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "text_delta", "text": text}}),
            );
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let key = call["index"].as_u64().unwrap_or(0);
            let index = match self.tools.get(&key) {
                Some(index) => *index,
                None => {
                    self.close(out);
                    let index = self.next_block();
                    self.tools.insert(key, index);
                    self.open = Some(Open::Tool(index));
                    event(
                        out,
                        "content_block_start",
                        json!({"type": "content_block_start", "index": index,
                               "content_block": {"type": "tool_use", "id": call["id"],
                                                 "name": call["function"]["name"], "input": {}}}),
                    );
                    index
                }
            };
            if let Some(part) = call["function"]["arguments"]
                .as_str()
                .filter(|p| !p.is_empty())
            {
                event(
                    out,
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index,
                           "delta": {"type": "input_json_delta", "partial_json": part}}),
                );
            }
        }
        if !choice["finish_reason"].is_null() {
            self.finish_reason = choice["finish_reason"].clone();
        }
    }

    fn start(&mut self, chunk: &Value, out: &mut String) {
        if self.started {
            return;
        }
        self.started = true;
        event(
            out,
            "message_start",
            json!({"type": "message_start", "message": {
                "id": chunk["id"], "type": "message", "role": "assistant",
                "model": chunk["model"], "content": [], "stop_reason": null,
                "stop_sequence": null, "usage": {"input_tokens": 0, "output_tokens": 0}
            }}),
        );
    }

    fn close(&mut self, out: &mut String) {
        if let Some(Open::Text(index) | Open::Tool(index)) = self.open.take() {
            event(
                out,
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            );
        }
    }

    fn next_block(&mut self) -> usize {
        self.next_block += 1;
        self.next_block - 1
    }
}

fn event(out: &mut String, name: &str, data: Value) {
    out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(chunk: Value) -> String {
        format!("data: {chunk}\n\n")
    }

    /// The `data` of each event, in order.
    fn events(text: &str) -> Vec<Value> {
        text.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }

    #[test]
    fn text_then_a_tool_call_become_two_blocks_with_the_stop_reason_and_usage() {
        let mut t = StreamTranslator::default();
        let mut out = String::new();
        for chunk in [
            json!({"id": "c1", "model": "m", "choices": [{"delta": {"role": "assistant", "content": ""}}]}),
            json!({"choices": [{"delta": {"content": "Hel"}}]}),
            json!({"choices": [{"delta": {"content": "lo"}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "t1",
                "function": {"name": "weather", "arguments": ""}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0,
                "function": {"arguments": "{\"city\":"}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0,
                "function": {"arguments": "\"Oslo\"}"}}]}}]}),
            json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9}}),
        ] {
            out.push_str(&t.feed(&data(chunk)));
        }
        out.push_str(&t.feed("data: [DONE]\n\n"));
        out.push_str(&t.finish());
        let kinds: Vec<&str> = out
            .lines()
            .filter_map(|l| l.strip_prefix("event: "))
            .collect();
        assert_eq!(
            kinds,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        let all = events(&out);
        assert_eq!(all[0]["message"]["id"], "c1");
        assert_eq!(all[2]["delta"]["text"], "Hel");
        assert_eq!(all[5]["content_block"]["name"], "weather");
        assert_eq!(all[5]["index"], 1);
        let json: String = [&all[6], &all[7]]
            .iter()
            .map(|e| e["delta"]["partial_json"].as_str().unwrap())
            .collect();
        assert_eq!(json, "{\"city\":\"Oslo\"}");
        assert_eq!(all[9]["delta"]["stop_reason"], "tool_use");
        assert_eq!(all[9]["usage"]["output_tokens"], 9);
    }

    #[test]
    fn a_stream_that_ends_without_done_is_still_closed_once() {
        let mut t = StreamTranslator::default();
        let first = t.feed(&data(json!({"choices": [{"delta": {"content": "x"}}]})));
        assert!(first.starts_with("event: message_start"));
        let end = t.finish();
        assert!(
            end.contains("content_block_stop") && end.ends_with("{\"type\":\"message_stop\"}\n\n")
        );
        assert_eq!(t.finish(), "");
        assert_eq!(
            t.feed(&data(json!({"choices": [{"delta": {"content": "late"}}]}))),
            ""
        );
    }
}
