//! abridge end to end: an agent inside a sandbox calls an LLM through the
//! host, which holds the key, streams the answer back piece by piece and
//! writes the transcript.
//!
//! `cargo run -p abridge-example` uses a stand-in upstream on loopback;
//! `ABRIDGE_UPSTREAM=http://127.0.0.1:8000/v1 ABRIDGE_KEY=... cargo run -p
//! abridge-example` talks to a real OpenAI-compatible server instead (vLLM,
//! SGLang, OpenAI).

use std::convert::Infallible;

use agentix::{LocalProvider, Provider, SandboxConfig};
use agentix_abridge::{ExchangeLog, Gateway, JsonLinesRecorder};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use serde_json::{json, Value};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    agentix::link_plugins!(agentix_abridge);
    agentix::bundle::dispatch();
    host()
}

#[tokio::main]
async fn host() -> Result<(), Box<dyn std::error::Error>> {
    // The agent's output, printed in the sandbox, shows here live.
    agentix::configure_logging("host").map_err(|e| e.to_string())?;
    let (upstream, key) = match std::env::var("ABRIDGE_UPSTREAM") {
        Ok(url) => (url, std::env::var("ABRIDGE_KEY").unwrap_or_default()),
        Err(_) => (stand_in_upstream().await?, "host-only-key".to_owned()),
    };
    let transcript = std::env::temp_dir().join(format!("abridge-{}.jsonl", std::process::id()));
    let log = ExchangeLog::start(JsonLinesRecorder::create(&transcript)?)?;
    let gateway = Gateway::openai(&upstream).key(key).record_to(log);

    let sandbox = LocalProvider::new()
        .session(SandboxConfig::current_exe()?)
        .await?;
    sandbox.register_namespace(gateway.namespace())?;
    let url = sandbox.remote(agentix_abridge::serve, 0u16).await?;
    println!("abridge serves the sandbox at {url}");

    let (status, text) = sandbox
        .remote(abridge_agent::ask, (url.clone(), "hello".into(), false))
        .await?;
    println!("whole answer ({status}): {text}");
    let (status, text) = sandbox
        .remote(abridge_agent::ask, (url, "tell me a story".into(), true))
        .await?;
    println!("streamed answer ({status}): {text}");

    drop(gateway);
    sandbox.delete().await;
    // The recorder writes as exchanges end; give it a moment to finish.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let lines = std::fs::read_to_string(&transcript)?;
    println!(
        "transcript, {} exchanges, at {}",
        lines.lines().count(),
        transcript.display()
    );
    for line in lines.lines() {
        let exchange: Value = serde_json::from_str(line)?;
        let first_piece = match exchange["ttft_ms"].as_f64() {
            Some(ms) => format!(", first piece after {ms:.1} ms"),
            None => String::new(),
        };
        println!(
            "  {} {}: {:.1} ms{first_piece}",
            exchange["api"],
            exchange["status"],
            exchange["latency_ms"].as_f64().unwrap_or(0.0),
        );
    }
    Ok(())
}

/// A stand-in for an OpenAI-compatible server: echoes the last message,
/// whole or word by word as a stream; returns its base URL.
async fn stand_in_upstream() -> std::io::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}/v1", listener.local_addr()?);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service =
                hyper::service::service_fn(|request: Request<hyper::body::Incoming>| async {
                    let bytes = request.into_body().collect().await.map(|b| b.to_bytes());
                    let body: Value = bytes
                        .ok()
                        .and_then(|b| serde_json::from_slice(&b).ok())
                        .unwrap_or(Value::Null);
                    let said = body["messages"][0]["content"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned();
                    let text = if body["stream"] == true {
                        let mut events = String::new();
                        for word in format!("once upon a time: {said}").split(' ') {
                            let chunk = json!({"object": "chat.completion.chunk",
                            "choices": [{"index": 0, "delta": {"content": format!("{word} ")}}]});
                            events.push_str(&format!("data: {chunk}\n\n"));
                        }
                        events + "data: [DONE]\n\n"
                    } else {
                        json!({"object": "chat.completion", "choices": [{"index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": format!("you said {said}")}}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 3}})
                        .to_string()
                    };
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(text))))
                });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(base)
}
