//! abridge end to end: an agent's OpenAI request to the endpoint inside the
//! sandbox reaches a real HTTP upstream through the host, with the host's
//! key, and the upstream's answer, errors included, comes back.

mod support;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use agentix_abridge::OpenAiGateway;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use serde_json::{json, Value};

/// What the upstream saw: the `Authorization` header and the JSON body.
type Seen = Arc<Mutex<Vec<(String, Value)>>>;

/// A stand-in for vLLM: completions (a 429 for model `rate-limited`) and
/// a model list; returns its base URL.
async fn upstream(seen: Seen) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let seen = seen.clone();
            let service = hyper::service::service_fn(
                move |request: Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let auth = request
                            .headers()
                            .get("authorization")
                            .map(|v| v.to_str().unwrap().to_owned())
                            .unwrap_or_default();
                        let path = request.uri().path().to_owned();
                        let bytes = request.into_body().collect().await.unwrap().to_bytes();
                        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                        seen.lock().unwrap().push((auth, body.clone()));
                        let response = match path.as_str() {
                            "/v1/models" => Response::new(full(json!({"data": [{"id": "m1"}]}))),
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
                },
            );
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    base
}

fn full(value: Value) -> Full<Bytes> {
    Full::new(Bytes::from(value.to_string()))
}

/// An agent's HTTP request: status, `Retry-After`, body text.
async fn agent(method: &str, url: &str, body: Option<Value>) -> (u16, Option<String>, String) {
    let uri: hyper::Uri = url.parse().unwrap();
    let stream = tokio::net::TcpStream::connect((uri.host().unwrap(), uri.port_u16().unwrap()))
        .await
        .unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_request_reaches_the_upstream_through_the_host_with_the_hosts_key() {
    let seen: Seen = Arc::default();
    let base = upstream(seen.clone()).await;
    let sb = support::sandbox().await;
    sb.register_namespace(OpenAiGateway::new(&base).key("host-secret").namespace())
        .unwrap();
    let url = sb
        .remote(agentix_abridge::serve, 0u16)
        .await
        .expect("the endpoint starts");
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/v1"),
        "{url}"
    );

    // A completion, unknown fields and all, with the host's key upstream.
    let request = json!({
        "model": "m1",
        "messages": [{"role": "user", "content": "hi"}],
        "return_token_ids": true
    });
    let (status, _, text) = agent("POST", &format!("{url}/chat/completions"), Some(request)).await;
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "hi from upstream"
    );
    assert_eq!(
        answer["choices"][0]["logprobs"]["content"][0]["token"],
        "hi"
    );
    let (auth, body) = seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        auth, "Bearer host-secret",
        "the sandbox's placeholder stays inside"
    );
    assert_eq!(
        body["return_token_ids"], true,
        "unknown fields pass through"
    );

    // A 429 stays a 429, with its Retry-After.
    let limited = json!({"model": "rate-limited", "messages": []});
    let (status, retry, text) =
        agent("POST", &format!("{url}/chat/completions"), Some(limited)).await;
    assert_eq!(status, 429, "{text}");
    assert_eq!(retry.as_deref(), Some("7"));

    // A streaming request gets the completion as server-sent events.
    let streamed = json!({"model": "m1", "messages": [], "stream": true});
    let (status, _, text) = agent("POST", &format!("{url}/chat/completions"), Some(streamed)).await;
    assert_eq!(status, 200);
    assert!(text.starts_with("data: {"), "{text}");
    assert!(text.contains("chat.completion.chunk") && text.contains("hi from upstream"));
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    assert_eq!(
        seen.lock().unwrap().last().unwrap().1["stream"],
        false,
        "asked upstream whole"
    );

    // Models, and a path abridge does not serve.
    let (status, _, text) = agent("GET", &format!("{url}/models"), None).await;
    assert_eq!(status, 200);
    assert!(text.contains("m1"), "{text}");
    let (status, _, text) = agent("GET", &format!("{url}/embeddings"), None).await;
    assert_eq!(status, 404);
    assert!(text.contains("POST /v1/chat/completions"), "{text}");

    // Stopped, it answers no more.
    assert!(sb.remote(agentix_abridge::stop, ()).await.unwrap());
    let port = url
        .trim_start_matches("http://127.0.0.1:")
        .trim_end_matches("/v1");
    let refused = tokio::net::TcpStream::connect(format!("127.0.0.1:{port}")).await;
    assert!(refused.is_err(), "the endpoint still listens");
}

#[tokio::test]
async fn the_gateway_overrides_the_model_and_names_a_dead_upstream_502() {
    let seen: Seen = Arc::default();
    let base = upstream(seen.clone()).await;
    let request = json!({"api": "chat_completions", "body": {"model": "asked", "messages": []}});
    let answer = OpenAiGateway::new(&base)
        .model("the-policy")
        .answer(request.clone())
        .await;
    assert_eq!(answer.status, 200);
    assert_eq!(
        seen.lock().unwrap().last().unwrap().1["model"],
        "the-policy"
    );

    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let dead = OpenAiGateway::new(format!("http://127.0.0.1:{closed}/v1"))
        .answer(request)
        .await;
    assert_eq!(dead.status, 502);
    assert!(
        dead.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot connect"),
        "{}",
        dead.body
    );
}

#[tokio::test]
async fn an_endpoint_with_no_gateway_on_the_host_answers_502_and_says_why() {
    let sb = support::sandbox().await;
    let url = sb.remote(agentix_abridge::serve, 0u16).await.unwrap();
    let (status, _, text) = agent(
        "POST",
        &format!("{url}/chat/completions"),
        Some(json!({"model": "m1", "messages": []})),
    )
    .await;
    assert_eq!(status, 502, "{text}");
    assert!(text.contains("OpenAiGateway"), "{text}");
}
