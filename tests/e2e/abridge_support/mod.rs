//! What the abridge tests stand up around a sandbox: fake upstreams (an
//! OpenAI-compatible one whole, streaming and for the SDKs, a TLS one, an
//! Anthropic one) and an agent's HTTP client. The Docker tests use them
//! too.

#![allow(dead_code)]

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Response};
use serde_json::{json, Value};

/// What the upstream saw: the `Authorization` header and the JSON body.
pub(crate) type Seen = Arc<Mutex<Vec<(String, Value)>>>;

/// Reads `request`, keeps its `Authorization` and JSON body (null if it is
/// not JSON) in `seen`; returns its path and body.
async fn recorded(request: Request<hyper::body::Incoming>, seen: &Seen) -> (String, Value) {
    let auth = request
        .headers()
        .get("authorization")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let path = request.uri().path().to_owned();
    let bytes = request.into_body().collect().await.unwrap().to_bytes();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    seen.lock().unwrap().push((auth, body.clone()));
    (path, body)
}

/// A stand-in for vLLM: completions (a 429 for model `rate-limited`, an
/// HTML 500 for `broken`) and a model list; returns its base URL.
pub(crate) async fn upstream(seen: Seen) -> String {
    serve_http(move |request: Request<hyper::body::Incoming>| {
        let seen = seen.clone();
        async move {
            let (path, body) = recorded(request, &seen).await;
            let response = match path.as_str() {
                "/v1/models" => Response::new(full(json!({"data": [{"id": "m1"}]}))),
                _ if body["model"] == "broken" => Response::builder()
                    .status(500)
                    .header("content-type", "text/html")
                    .body(Full::new(Bytes::from("<h1>Internal Server Error</h1>")))
                    .unwrap(),
                _ if body["model"] == "rate-limited" => Response::builder()
                    .status(429)
                    .header("retry-after", "7")
                    .body(full(json!({"error": {"message": "slow down"}})))
                    .unwrap(),
                _ => Response::new(full(json!({
                    "id": "c1",
                    "object": "chat.completion",
                    "created": 1,
                    "model": body["model"],
                    "choices": [{
                        "index": 0,
                        "message": {"role": "assistant", "content": "hi from upstream"},
                        "finish_reason": "stop",
                        "logprobs": {"content": [{"token": "hi", "logprob": -0.1}]}
                    }],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}
                }))),
            };
            Ok::<_, Infallible>(response)
        }
    })
    .await
}

/// Serves `handler` on a fresh loopback port, one task per connection;
/// returns the base URL (`http://127.0.0.1:PORT/v1`).
pub(crate) async fn serve_http<F, Fut, B>(handler: F) -> String
where
    F: Fn(Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Response<B>, Infallible>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = hyper::service::service_fn(handler.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    base
}

pub(crate) fn full(value: Value) -> Full<Bytes> {
    Full::new(Bytes::from(value.to_string()))
}

/// A connection to `url`'s host, and `url` parsed.
pub(crate) async fn connect(url: &str) -> (SendRequest<Full<Bytes>>, hyper::Uri) {
    let uri: hyper::Uri = url.parse().unwrap();
    let stream = tokio::net::TcpStream::connect((uri.host().unwrap(), uri.port_u16().unwrap()))
        .await
        .unwrap();
    let (sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    (sender, uri)
}

/// An agent's HTTP request: status, `Retry-After`, body text.
pub(crate) async fn agent(
    method: &str,
    url: &str,
    body: Option<Value>,
) -> (u16, Option<String>, String) {
    let (mut sender, uri) = connect(url).await;
    let request = Request::builder()
        .method(method)
        .uri(uri.path())
        .header("host", uri.authority().unwrap().as_str())
        .header("authorization", "Bearer placeholder-key")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(
            body.map(|b| b.to_string()).unwrap_or_default(),
        )))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let retry = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let text = response.into_body().collect().await.unwrap().to_bytes();
    (status, retry, String::from_utf8_lossy(&text).into_owned())
}

/// What the streaming upstream is told and tells: `release` lets a paused
/// stream go on; `closed` fires when the upstream finds its client gone;
/// `asked` fires when a `held` request arrives.
#[derive(Default)]
pub(crate) struct StreamScript {
    pub(crate) release: tokio::sync::Notify,
    pub(crate) closed: tokio::sync::Notify,
    pub(crate) asked: tokio::sync::Notify,
}

/// Fires `closed` when a request the upstream never answered is dropped,
/// which hyper does when its client closes the connection.
struct Unanswered(Arc<StreamScript>);

impl Drop for Unanswered {
    fn drop(&mut self) {
        self.0.closed.notify_one();
    }
}

/// The `i`-th server-sent event of a streamed completion.
pub(crate) fn event(i: usize) -> String {
    let chunk = json!({
        "id": "s1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": format!("piece {i} ✓")}}]
    });
    format!("data: {chunk}\n\n")
}

/// A streaming upstream. Model `paused`: event 0, then the rest (5 in all)
/// once released. `endless`: an event every 20 ms until its client goes.
/// `long`: 2,000 events at once, cut into odd-sized writes. `dropped`:
/// event 0, then the connection breaks. `slow`: headers after 3 s. `held`
/// (asked whole or as a stream): no answer until its client leaves (then
/// `closed` fires). `unbroken`: event 0, then one line that never ends,
/// until its client goes (then `closed` fires).
/// Anything else: a 429 with `Retry-After: 3`. Every finished stream ends
/// `data: [DONE]`.
pub(crate) async fn streaming_upstream(script: Arc<StreamScript>) -> String {
    use futures_util::StreamExt;
    serve_http(move |request: Request<hyper::body::Incoming>| {
        let script = script.clone();
        async move {
            let bytes = request.into_body().collect().await.unwrap().to_bytes();
            let body: Value = serde_json::from_slice(&bytes).unwrap();
            let model = body["model"].as_str().unwrap_or_default().to_owned();
            // Asked whole or as a stream alike.
            if model == "held" {
                let unanswered = Unanswered(script.clone());
                script.asked.notify_one();
                tokio::time::sleep(std::time::Duration::from_secs(600)).await;
                drop(unanswered);
            }
            assert_eq!(body["stream"], true, "asked upstream as a stream");
            let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(4);
            if model == "slow" {
                tokio::time::sleep(std::time::Duration::from_secs(3)).await;
            }
            let streams = [
                "paused", "endless", "long", "dropped", "slow", "late", "broken", "unbroken",
            ];
            if !streams.contains(&model.as_str()) {
                let limited = Response::builder()
                    .status(429)
                    .header("retry-after", "3")
                    .body(http_body_util::Either::Left(full(
                        json!({"error": {"message": "slow down"}}),
                    )))
                    .unwrap();
                return Ok::<_, Infallible>(limited);
            }
            tokio::spawn(async move {
                let send = |text: String| tx.send(Ok(Bytes::from(text)));
                match model.as_str() {
                    "late" => {
                        // Past the time the gateway's head waits for the
                        // first lines: the head goes without them.
                        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
                        for i in 0..5 {
                            send(event(i)).await.unwrap();
                        }
                    }
                    "unbroken" => {
                        // One line that never ends, until the client goes.
                        send(event(0)).await.unwrap();
                        let mut piece = "x".repeat(1 << 20);
                        piece.insert_str(0, "data: ");
                        while send(piece.clone()).await.is_ok() {}
                        script.closed.notify_one();
                        return;
                    }
                    "broken" => {
                        let broken = std::io::Error::other("the upstream died");
                        let _ = tx.send(Err(broken)).await;
                        return;
                    }
                    "dropped" => {
                        send(event(0)).await.unwrap();
                        // Written out before the break, not lost in a buffer.
                        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                        let broken = std::io::Error::other("the upstream died");
                        let _ = tx.send(Err(broken)).await;
                        return;
                    }
                    "paused" => {
                        send(event(0)).await.unwrap();
                        script.release.notified().await;
                        for i in 1..5 {
                            send(event(i)).await.unwrap();
                        }
                    }
                    "endless" => {
                        for i in 0.. {
                            if send(event(i)).await.is_err() {
                                script.closed.notify_one();
                                return;
                            }
                            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        }
                    }
                    _ => {
                        let all: String = (0..2_000).map(event).collect();
                        let all = all.into_bytes();
                        for piece in all.chunks(1_000 + 7) {
                            let piece = Bytes::copy_from_slice(piece);
                            if tx.send(Ok(piece)).await.is_err() {
                                return;
                            }
                        }
                    }
                }
                let _ = send("data: [DONE]\n\n".into()).await;
            });
            let frames = futures_util::stream::unfold(rx, |mut rx| async move {
                let bytes = rx.recv().await?;
                Some((bytes.map(hyper::body::Frame::data), rx))
            })
            .boxed();
            let body = http_body_util::StreamBody::new(frames);
            Ok(Response::builder()
                .header("content-type", "text/event-stream")
                .body(http_body_util::Either::Right(body))
                .unwrap())
        }
    })
    .await
}

/// An agent's streamed request: the status, `Retry-After`, and the body to
/// read frame by frame.
pub(crate) async fn agent_stream(
    url: &str,
    model: &str,
) -> (u16, Option<String>, hyper::body::Incoming) {
    let (mut sender, uri) = connect(url).await;
    let body = json!({"model": model, "messages": [], "stream": true});
    let request = Request::builder()
        .method("POST")
        .uri(uri.path())
        .header("host", uri.authority().unwrap().as_str())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let retry = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (response.status().as_u16(), retry, response.into_body())
}

/// Reads `body` until `text` holds `want` bytes or more; false at its end.
pub(crate) async fn read_at_least(
    body: &mut hyper::body::Incoming,
    text: &mut Vec<u8>,
    want: usize,
) -> bool {
    while text.len() < want {
        match body.frame().await {
            Some(frame) => {
                if let Ok(data) = frame.unwrap().into_data() {
                    text.extend_from_slice(&data);
                }
            }
            None => return false,
        }
    }
    true
}

/// An upstream for the SDKs: model `limited` gets a 429 (`Retry-After: 1`);
/// with tools offered and no tool result yet it calls `weather` for Oslo;
/// otherwise it answers "hello from upstream", whole or as a stream of
/// three pieces with usage. Records each request's key and body.
pub(crate) async fn sdk_upstream(seen: Seen) -> String {
    serve_http(move |request: Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let (path, body) = recorded(request, &seen).await;
                        if path == "/tokenize" {
                            // vLLM's, beside /v1.
                            let counted = json!({"count": 12, "max_model_len": 4096, "tokens": []});
                            return Ok(Response::new(full(counted)));
                        }
                        let messages = body["messages"].as_array().cloned().unwrap_or_default();
                        let answered_tool = messages.iter().any(|m| m["role"] == "tool");
                        let response = if body["model"] == "limited" {
                            Response::builder()
                                .status(429)
                                .header("retry-after", "1")
                                .body(full(json!({"error": {"message": "slow down", "type": "rate_limit"}})))
                                .unwrap()
                        } else if body["stream"] == true {
                            let mut text = String::new();
                            for piece in ["hello ", "from ", "upstream"] {
                                let chunk = json!({"id": "s1", "object": "chat.completion.chunk",
                                    "created": 1, "model": "m1",
                                    "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}]});
                                text.push_str(&format!("data: {chunk}\n\n"));
                            }
                            let last = json!({"id": "s1", "object": "chat.completion.chunk", "created": 1,
                                "model": "m1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
                            let usage = json!({"id": "s1", "object": "chat.completion.chunk", "created": 1,
                                "model": "m1", "choices": [],
                                "usage": {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}});
                            text.push_str(&format!(
                                "data: {last}\n\ndata: {usage}\n\ndata: [DONE]\n\n"
                            ));
                            Response::builder()
                                .header("content-type", "text/event-stream")
                                .body(Full::new(Bytes::from(text)))
                                .unwrap()
                        } else {
                            let (message, finish) = if body["tools"].is_array() && !answered_tool {
                                (
                                    json!({"role": "assistant", "content": null, "tool_calls": [{
                                    "id": "call_1", "type": "function",
                                    "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}}]}),
                                    "tool_calls",
                                )
                            } else {
                                (
                                    json!({"role": "assistant", "content": "hello from upstream"}),
                                    "stop",
                                )
                            };
                            Response::new(full(json!({
                                "id": "c1", "object": "chat.completion", "created": 1, "model": "m1",
                                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                                "usage": {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}
                            })))
                        };
                        Ok::<_, Infallible>(response)
                    }
                })
    .await
}

/// Each request body the byte-recording upstream got, as its bytes.
pub(crate) type SeenBytes = Arc<Mutex<Vec<Bytes>>>;

/// An upstream that keeps each request's body as it arrived and answers a
/// completion, or a two-event stream when the body asks for one.
pub(crate) async fn byte_upstream(seen: SeenBytes) -> String {
    serve_http(move |request: Request<hyper::body::Incoming>| {
        let seen = seen.clone();
        async move {
            let bytes = request.into_body().collect().await.unwrap().to_bytes();
            seen.lock().unwrap().push(bytes.clone());
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let response = if body["stream"] == true {
                let text = event(0) + &event(1) + "data: [DONE]\n\n";
                Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(Full::new(Bytes::from(text)))
                    .unwrap()
            } else {
                Response::new(full(json!({
                    "id": "c1", "object": "chat.completion", "created": 1, "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "seen"}}]
                })))
            };
            Ok::<_, Infallible>(response)
        }
    })
    .await
}

/// Posts `text` as the body, whatever it is; status and body text.
pub(crate) async fn post_text(url: &str, text: &str) -> (u16, String) {
    let (mut sender, uri) = connect(url).await;
    let request = Request::builder()
        .method("POST")
        .uri(uri.path())
        .header("host", uri.authority().unwrap().as_str())
        .body(Full::new(Bytes::from(text.to_owned())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// A TLS upstream for `localhost` with a certificate of its own making,
/// answering every request with a completion; its base URL and the
/// certificate (DER).
pub(crate) async fn tls_upstream() -> (String, Vec<u8>) {
    use tokio_rustls::rustls;
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert = made.cert.der().to_vec();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(made.signing_key.serialize_der().into());
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone().into()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!(
        "https://localhost:{}/v1",
        listener.local_addr().unwrap().port()
    );
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let service =
                    hyper::service::service_fn(|_: Request<hyper::body::Incoming>| async {
                        Ok::<_, Infallible>(Response::new(full(json!({
                            "id": "t1", "object": "chat.completion", "model": "m1",
                            "choices": [{"index": 0, "finish_reason": "stop",
                                "message": {"role": "assistant", "content": "over TLS"}}]
                        }))))
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (base, cert)
}

/// What the Anthropic upstream saw: path, `x-api-key`, `anthropic-version`.
pub(crate) type SeenHeaders = Arc<Mutex<Vec<(String, String, String)>>>;

/// A stand-in for Anthropic's API: messages whole and streamed, token
/// counts, and a 529 for `max_tokens: 1`.
pub(crate) async fn anthropic_upstream(seen: SeenHeaders) -> String {
    serve_http(move |request: Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let header = |name: &str| {
                            request
                                .headers()
                                .get(name)
                                .map(|v| v.to_str().unwrap().to_owned())
                                .unwrap_or_default()
                        };
                        let path = request.uri().path().to_owned();
                        seen.lock().unwrap().push((
                            path.clone(),
                            header("x-api-key"),
                            header("anthropic-version"),
                        ));
                        let bytes = request.into_body().collect().await.unwrap().to_bytes();
                        let body: Value = serde_json::from_slice(&bytes).unwrap();
                        let response = if body["max_tokens"] == 1 {
                            Response::builder()
                                .status(529)
                                .body(full(json!({"type": "error",
                                    "error": {"type": "overloaded_error", "message": "busy"}})))
                                .unwrap()
                        } else if path == "/v1/messages/count_tokens" {
                            Response::new(full(json!({"input_tokens": 5})))
                        } else if body["stream"] == true {
                            let text = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":5,\"output_tokens\":0}}}\n\n\
                                        event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"native\"}}\n\n\
                                        event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n\
                                        event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
                            Response::new(Full::new(Bytes::from(text)))
                        } else {
                            Response::new(full(
                                json!({"id": "m", "type": "message", "role": "assistant",
                                "model": body["model"], "content": [{"type": "text", "text": "native"}],
                                "stop_reason": "end_turn",
                                "usage": {"input_tokens": 5, "output_tokens": 1}}),
                            ))
                        };
                        Ok::<_, Infallible>(response)
                    }
                })
    .await
}
