//! The sandbox half of the abridge example: a tiny agent that speaks the
//! OpenAI API to whatever `OPENAI_BASE_URL`-style URL it is given, as any
//! SDK-based agent would. Its output is the sandbox's, so the host sees it
//! live.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

/// Why the agent's request failed.
pub type AgentError = String;

/// Asks `base_url` (`http://127.0.0.1:PORT/v1`) for a completion of
/// `prompt`; with `stream`, prints each piece as it arrives. Returns the
/// status and the text the agent got.
#[agentix::remote]
pub async fn ask(
    base_url: String,
    prompt: String,
    stream: bool,
) -> Result<(u16, String), AgentError> {
    let uri: hyper::Uri = format!("{base_url}/chat/completions")
        .parse()
        .map_err(|e| format!("{e}"))?;
    let authority = uri.authority().ok_or("no host")?.to_string();
    let tcp = tokio::net::TcpStream::connect(&authority)
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let body = json!({
        "model": "any",
        "messages": [{"role": "user", "content": prompt}],
        "stream": stream,
    });
    let request = Request::post(uri.path())
        .header("host", authority)
        // Any key: the real one stays on the host.
        .header("authorization", "Bearer placeholder")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let mut body = response.into_body();
    let mut text = String::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(|e| e.to_string())?.into_data() else {
            continue;
        };
        let data = String::from_utf8_lossy(&data);
        if !stream {
            text.push_str(&data);
            continue;
        }
        for line in data.lines().filter_map(|l| l.strip_prefix("data: ")) {
            let Ok(chunk) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if let Some(piece) = chunk["choices"][0]["delta"]["content"].as_str() {
                println!("agent got a piece: {piece:?}");
                text.push_str(piece);
            }
        }
    }
    if !stream {
        let answer: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        text = answer["choices"][0]["message"]["content"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| answer.to_string());
    }
    Ok((status, text))
}
