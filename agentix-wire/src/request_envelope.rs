//! The request envelope of plugin namespaces, shared by the sandbox, the
//! server and the host: a request is `<event> {request_id, data}`, its reply
//! `<event>:result {request_id, data}` or `<event>:error {request_id, error:
//! {type, message}}`. An asker that stops waiting emits `<event>:cancel
//! {request_id}`, so the answering side can stop working on it; no reply
//! follows a cancel.
//!
//! Whoever cannot deliver a request (no handler for its event, no host on
//! its namespace) answers it with an error at once, so the asking side never
//! waits out its timeout for a reply nobody will send.

use std::time::Duration;

use serde_json::{json, Value};

/// How long a namespace request waits for its reply by default, either way.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// The error type of a request whose event has no handler on the far side.
pub const NO_HANDLER: &str = "NoHandler";
/// The error type of a sandbox request on a namespace no host has joined.
pub const NO_HOST: &str = "NoHost";
/// The error type of a sandbox request whose hosts are too far behind to
/// take it (they do not read their connection).
pub const HOST_BEHIND: &str = "HostBehind";
/// The error type of a request turned away because its namespace is
/// answering as many as it may at once.
pub const OVERLOADED: &str = "Overloaded";
/// The error type of a request whose JSON is too large for one websocket
/// message ([`crate::part::MAX_SOCKET_MESSAGE_BYTES`]).
pub const TOO_LARGE: &str = "TooLarge";

/// The request id of `event` if it is a request (not a reply) that
/// expects an answer.
pub fn request_id(event: &str, data: &Value) -> Option<Value> {
    if is_reply_or_cancel(event) {
        return None;
    }
    data.get("request_id").cloned()
}

/// [`request_id`] for a payload still in its text: read without building
/// the rest of it (it may be large).
pub fn request_id_in_text(event: &str, data: &crate::json_text::JsonText) -> Option<Value> {
    #[derive(serde::Deserialize)]
    struct Envelope {
        request_id: Option<Value>,
    }
    if is_reply_or_cancel(event) {
        return None;
    }
    serde_json::from_str::<Envelope>(data.as_str())
        .ok()?
        .request_id
}

/// Whether `event` answers a request (`<name>:result` or `<name>:error`).
pub fn is_reply(event: &str) -> bool {
    event.ends_with(":result") || event.ends_with(":error")
}

fn is_reply_or_cancel(event: &str) -> bool {
    is_reply(event) || event.ends_with(CANCEL_SUFFIX)
}

const CANCEL_SUFFIX: &str = ":cancel";

/// The event that cancels a request made with `event`.
pub fn cancel_event(event: &str) -> String {
    format!("{event}{CANCEL_SUFFIX}")
}

/// The request event `event` cancels, if it is a cancel.
pub fn cancelled_event(event: &str) -> Option<&str> {
    event.strip_suffix(CANCEL_SUFFIX)
}

/// The `<event>:error` reply to request `request_id`.
pub fn error_reply(
    event: &str,
    request_id: Value,
    type_name: impl Into<String>,
    message: impl Into<String>,
) -> (String, Value) {
    (
        format!("{event}:error"),
        json!({
            "request_id": request_id,
            "error": { "type": type_name.into(), "message": message.into() },
        }),
    )
}

/// The reply to a request whose event nobody handles on `path`.
pub fn no_handler_reply(path: &str, event: &str, request_id: Value) -> (String, Value) {
    error_reply(
        event,
        request_id,
        NO_HANDLER,
        format!("nothing handles `{event}` on {path}"),
    )
}

/// A request's reply: the value, or the other half's error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RemoteSioError {
    /// The other half's handler failed: its error type and message.
    #[error("{type_name}: {message}")]
    Raised {
        /// The error's type, as the other half named it.
        type_name: String,
        /// Its message.
        message: String,
    },
    /// No reply came within the timeout.
    #[error("no reply to `{event}` on {path} within {timeout:?}")]
    Timeout {
        /// The namespace.
        path: String,
        /// The request's event.
        event: String,
        /// How long it waited.
        timeout: Duration,
    },
    /// The namespace is closed: its worker or connection is gone.
    #[error("the namespace {0} is closed")]
    Closed(String),
    /// The reply was not an envelope the protocol allows.
    #[error("malformed reply: {0}")]
    Malformed(String),
}

/// The key a request is known by on the side that made it or answers it:
/// its id as a string (other JSON ids as their JSON text).
pub fn request_key(id: &Value) -> String {
    match id {
        Value::String(id) => id.clone(),
        other => other.to_string(),
    }
}

/// For `x:result` / `x:error` events carrying a request id: the request's
/// key ([`request_key`]) and its outcome. A result's data is taken out of
/// `data`, not copied: it may be large.
pub fn reply_outcome(
    event: &str,
    data: &mut Value,
) -> Option<(String, Result<Value, RemoteSioError>)> {
    let key = request_key(data.get("request_id")?);
    if event.ends_with(":result") {
        let value = data.get_mut("data").map(Value::take).unwrap_or_default();
        return Some((key, Ok(value)));
    }
    if event.ends_with(":error") {
        let error = data.get("error");
        let text = |key: &str| {
            error
                .and_then(|e| e.get(key))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let outcome = match (text("type"), text("message")) {
            (Some(type_name), Some(message)) => Err(RemoteSioError::Raised { type_name, message }),
            _ => Err(RemoteSioError::Malformed(format!(
                "`{event}` needs error: {{type, message}}, got {data}"
            ))),
        };
        return Some((key, outcome));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_requests_have_a_request_id_to_answer() {
        let envelope = json!({"request_id": "r1", "data": 1});
        assert_eq!(request_id("fetch", &envelope), Some(json!("r1")));
        assert_eq!(request_id("fetch:result", &envelope), None);
        assert_eq!(request_id("fetch:error", &envelope), None);
        assert_eq!(request_id("progress", &json!({"data": 1})), None);
        assert_eq!(request_id("fetch:cancel", &envelope), None);
    }

    #[test]
    fn the_request_id_is_found_in_a_payload_still_in_its_text() {
        let text = |v: Value| crate::json_text::JsonText::from_value(&v);
        let envelope = text(json!({"data": {"request_id": "inner"}, "request_id": "r1"}));
        assert_eq!(request_id_in_text("fetch", &envelope), Some(json!("r1")));
        assert_eq!(request_id_in_text("fetch:result", &envelope), None);
        assert_eq!(request_id_in_text("fetch:cancel", &envelope), None);
        assert_eq!(
            request_id_in_text("progress", &text(json!({"data": 1}))),
            None
        );
        assert_eq!(request_id_in_text("progress", &text(json!([1, 2]))), None);
    }

    #[test]
    fn a_cancel_names_the_request_event_it_stops() {
        assert_eq!(cancel_event("fetch"), "fetch:cancel");
        assert_eq!(cancelled_event("fetch:cancel"), Some("fetch"));
        assert_eq!(cancelled_event("a:b:cancel"), Some("a:b"));
        assert_eq!(cancelled_event("fetch"), None);
    }

    #[test]
    fn an_error_reply_is_what_the_asking_side_decodes() {
        let (event, data) = no_handler_reply("/p", "fetch", json!("r1"));
        assert_eq!(event, "fetch:error");
        assert_eq!(data["request_id"], "r1");
        assert_eq!(data["error"]["type"], NO_HANDLER);
        assert_eq!(data["error"]["message"], "nothing handles `fetch` on /p");
    }
}
