//! abridge measured against a fake OpenAI-compatible upstream on loopback:
//! what the trip through the sandbox endpoint, the namespace and the host's
//! gateway adds to a request and to a stream's first piece, a long
//! stream's pieces per second, and 64 agents at once.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentix::{LocalProvider, Provider};
use agentix_abridge::Gateway;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

use crate::report::Report;
use crate::{median, us};

/// Pieces in the long stream.
const LONG_STREAM: usize = 50_000;
/// Turns in the long history, about 256 KiB of JSON.
const LONG_PROMPT_TURNS: usize = 200;

/// The fake upstream: a small completion, or with `"stream": true` the
/// number of pieces asked for in `n` (one at first, then the rest at once).
async fn upstream() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}/v1", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let service =
                hyper::service::service_fn(|request: Request<hyper::body::Incoming>| async {
                    let bytes = request.into_body().collect().await.map(|b| b.to_bytes());
                    let body: Value = bytes
                        .ok()
                        .and_then(|b| serde_json::from_slice(&b).ok())
                        .unwrap_or(Value::Null);
                    let pieces = if body["stream"] == true {
                        let n = body["n"].as_u64().unwrap_or(3) as usize;
                        let chunk = |i: usize| {
                            let c = json!({"id": "b", "object": "chat.completion.chunk",
                            "choices": [{"index": 0, "delta": {"content": format!("t{i}")}}]});
                            Bytes::from(format!("data: {c}\n\n"))
                        };
                        let mut pieces: Vec<Bytes> = (0..n).map(chunk).collect();
                        pieces.push(Bytes::from_static(b"data: [DONE]\n\n"));
                        pieces
                    } else {
                        let answer = json!({"id": "b", "object": "chat.completion", "model": "m",
                        "choices": [{"index": 0, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": "ok"}}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1}});
                        vec![Bytes::from(answer.to_string())]
                    };
                    let frames = futures_util::stream::iter(
                        pieces
                            .into_iter()
                            .map(|p| Ok::<_, Infallible>(Frame::data(p))),
                    );
                    Ok::<_, Infallible>(Response::new(StreamBody::new(frames)))
                });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    base
}

/// An agent's keep-alive connection to `base` (`http://host:port/v1`).
struct Agent {
    sender: SendRequest<Full<Bytes>>,
    authority: String,
}

impl Agent {
    async fn connect(base: &str) -> Agent {
        let uri: hyper::Uri = base.parse().expect("a URL");
        let authority = uri.authority().expect("an authority").to_string();
        let stream = tokio::net::TcpStream::connect(&authority)
            .await
            .expect("connect");
        let _ = stream.set_nodelay(true);
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        tokio::spawn(connection);
        Agent { sender, authority }
    }

    /// POSTs `body` to `/v1/chat/completions`; the time to the first body
    /// piece, the time to the end, and the events received.
    async fn post(&mut self, body: &Value) -> (Duration, Duration, usize) {
        let request = Request::post("/v1/chat/completions")
            .header("host", &self.authority)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("a request");
        let start = Instant::now();
        self.sender
            .ready()
            .await
            .expect("the connection stays open");
        let response = self.sender.send_request(request).await.expect("an answer");
        assert_eq!(response.status(), 200, "the bench's requests succeed");
        let mut body = response.into_body();
        let mut first = None;
        let mut newlines = 0;
        while let Some(frame) = body.frame().await {
            let frame = frame.expect("a body");
            if let Ok(data) = frame.into_data() {
                first.get_or_insert_with(|| start.elapsed());
                newlines += data.iter().filter(|&&b| b == b'\n').count();
            }
        }
        // Each server-sent event ends with a blank line.
        (first.unwrap_or_default(), start.elapsed(), newlines / 2)
    }
}

/// Each figure through abridge and straight to the upstream, same run, in
/// a sandbox of its own (the gateway joins before the first call).
pub(crate) async fn abridge(provider: &LocalProvider, report: &mut Report) {
    let base = upstream().await;
    let config = crate::plain_config();
    let sb = provider.session(config).await.expect("sandbox starts");
    sb.register_namespace(Gateway::openai(&base).namespace())
        .expect("registered before the first call");
    let url = sb
        .remote(agentix_abridge::serve, 0u16)
        .await
        .expect("the endpoint starts");
    let whole = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let streamed = json!({"model": "m", "messages": [], "stream": true, "n": 3});

    let mut through = Agent::connect(&url).await;
    let mut direct = Agent::connect(&base).await;
    let timed = |times: Vec<Duration>| median(&mut times.clone());
    let (mut via, mut straight, mut via_first, mut straight_first) =
        (vec![], vec![], vec![], vec![]);
    for round in 0..1_100 {
        let (_, t_via, _) = through.post(&whole).await;
        let (_, t_straight, _) = direct.post(&whole).await;
        let (f_via, _, _) = through.post(&streamed).await;
        let (f_straight, _, _) = direct.post(&streamed).await;
        if round >= 100 {
            via.push(t_via);
            straight.push(t_straight);
            via_first.push(f_via);
            straight_first.push(f_straight);
        }
    }
    let (via, straight) = (timed(via), timed(straight));
    report.add(
        "abridge_request_p50_us",
        "a whole completion through abridge, p50 of 1,000",
        "µs",
        us(via),
    );
    report.add(
        "abridge_overhead_p50_us",
        "the same minus straight to the upstream, same run",
        "µs",
        us(via) - us(straight),
    );
    let (via_first, straight_first) = (timed(via_first), timed(straight_first));
    report.add(
        "abridge_ttft_overhead_us",
        "a stream's first piece through abridge minus straight, p50",
        "µs",
        us(via_first) - us(straight_first),
    );

    // An agent deep in its task sends its whole history each turn.
    let history: Vec<Value> = (0..LONG_PROMPT_TURNS)
        .map(|turn| {
            let role = if turn % 2 == 0 { "user" } else { "assistant" };
            let text = format!("turn {turn}: \"quoted\" tool output, line\n").repeat(32);
            json!({"role": role, "content": text})
        })
        .collect();
    let long_prompt = json!({"model": "m", "messages": history});
    let long_streamed = json!({"model": "m", "messages": history, "stream": true, "n": 3});
    let (mut via, mut straight, mut via_first, mut straight_first) =
        (vec![], vec![], vec![], vec![]);
    for round in 0..220 {
        let (_, t_via, _) = through.post(&long_prompt).await;
        let (_, t_straight, _) = direct.post(&long_prompt).await;
        let (f_via, _, _) = through.post(&long_streamed).await;
        let (f_straight, _, _) = direct.post(&long_streamed).await;
        if round >= 20 {
            via.push(t_via);
            straight.push(t_straight);
            via_first.push(f_via);
            straight_first.push(f_straight);
        }
    }
    report.add(
        "abridge_long_prompt_overhead_us",
        "a whole completion with a 256 KiB history, through abridge minus straight, p50 of 200",
        "µs",
        us(timed(via)) - us(timed(straight)),
    );
    report.add(
        "abridge_long_prompt_ttft_overhead_us",
        "a stream's first piece with a 256 KiB history, through abridge minus straight, p50",
        "µs",
        us(timed(via_first)) - us(timed(straight_first)),
    );

    let long = json!({"model": "m", "messages": [], "stream": true, "n": LONG_STREAM});
    let mut rates = Vec::new();
    for _ in 0..3 {
        let (_, took, pieces) = through.post(&long).await;
        assert!(pieces > LONG_STREAM, "the long stream arrived whole");
        rates.push(LONG_STREAM as f64 / took.as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    report.add(
        "abridge_chunks_per_s",
        "pieces of one 50,000-piece stream reaching the agent, median of 3",
        "pieces/s",
        rates[1],
    );

    const AGENTS: usize = 64;
    const EACH: usize = 50;
    let url = Arc::new(url);
    let start = Instant::now();
    let agents: Vec<_> = (0..AGENTS)
        .map(|_| {
            let (url, whole) = (url.clone(), whole.clone());
            tokio::spawn(async move {
                let mut agent = Agent::connect(&url).await;
                for _ in 0..EACH {
                    agent.post(&whole).await;
                }
            })
        })
        .collect();
    for agent in agents {
        agent.await.expect("an agent");
    }
    report.add(
        "abridge_concurrent_64_rps",
        "whole completions per second, 64 agents at once",
        "req/s",
        (AGENTS * EACH) as f64 / start.elapsed().as_secs_f64(),
    );
    sb.delete().await;
}
