//! abridge end to end: an agent's OpenAI request to the endpoint inside the
//! sandbox reaches a real HTTP upstream through the host, with the host's
//! key, and the upstream's answer, errors included, comes back; a streamed
//! answer arrives event by event as the upstream sends it.

#[path = "abridge_support/mod.rs"]
mod fakes;
mod support;

use std::sync::{Arc, Mutex};

use agentix::protocol::Protocol;
use agentix_abridge::exchange::Api;
use agentix_abridge::{Abridge, Exchange, ExchangeLog, Gateway, JsonLinesRecorder};
use serde_json::{json, Value};

use fakes::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_request_reaches_the_upstream_through_the_host_with_the_hosts_key() {
    let seen: Seen = Arc::default();
    let base = upstream(seen.clone()).await;
    let sb = support::host_network_sandbox().await;
    sb.register_namespace(Gateway::openai(&base).key("host-secret").namespace())
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

    // A 500 with an HTML page stays a 500, the page's text in an error.
    let broken = json!({"model": "broken", "messages": []});
    let (status, _, text) = agent("POST", &format!("{url}/chat/completions"), Some(broken)).await;
    assert_eq!(status, 500, "{text}");
    let error: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(error["error"]["message"], "<h1>Internal Server Error</h1>");

    // A 429 stays a 429, with its Retry-After.
    let limited = json!({"model": "rate-limited", "messages": []});
    let (status, retry, text) =
        agent("POST", &format!("{url}/chat/completions"), Some(limited)).await;
    assert_eq!(status, 429, "{text}");
    assert_eq!(retry.as_deref(), Some("7"));

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
    let answer = Gateway::openai(&base)
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
    let dead = Gateway::openai(format!("http://127.0.0.1:{closed}/v1"))
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
    let sb = support::host_network_sandbox().await;
    let url = sb.remote(agentix_abridge::serve, 0u16).await.unwrap();
    let (status, _, text) = agent(
        "POST",
        &format!("{url}/chat/completions"),
        Some(json!({"model": "m1", "messages": []})),
    )
    .await;
    assert_eq!(status, 502, "{text}");
    assert!(text.contains("a Gateway's namespace()"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_reaches_the_agent_event_by_event_as_the_upstream_sends_it() {
    let script = Arc::new(StreamScript::default());
    let base = streaming_upstream(script.clone()).await;
    let (_sandbox, url) = serving(Gateway::openai(&base)).await;
    let completions = format!("{url}/chat/completions");

    // The first event reaches the agent while the upstream holds the rest.
    let (status, _, mut body) = agent_stream(&completions, "paused").await;
    assert_eq!(status, 200);
    let mut text = Vec::new();
    let first = event(0);
    let early = read_at_least(&mut body, &mut text, first.len());
    let early = tokio::time::timeout(std::time::Duration::from_secs(30), early).await;
    assert_eq!(
        early,
        Ok(true),
        "the first event came while the upstream held the rest"
    );
    assert_eq!(
        String::from_utf8_lossy(&text),
        first,
        "only the first event so far"
    );
    script.release.notify_one();
    assert!(!read_at_least(&mut body, &mut text, usize::MAX).await);
    let want: String = (0..5).map(event).collect::<String>() + "data: [DONE]\n\n";
    assert_eq!(String::from_utf8(text).unwrap(), want);

    // First lines later than the head waits for them: the head goes
    // without them, and they follow as items, none lost or doubled.
    let (status, _, mut body) = agent_stream(&completions, "late").await;
    assert_eq!(status, 200);
    let mut text = Vec::new();
    assert!(!read_at_least(&mut body, &mut text, usize::MAX).await);
    assert_eq!(String::from_utf8(text).unwrap(), want);

    // Broken before its first line: the agent gets the error event alone.
    let (status, _, mut body) = agent_stream(&completions, "broken").await;
    assert_eq!(status, 200);
    let mut text = Vec::new();
    assert!(!read_at_least(&mut body, &mut text, usize::MAX).await);
    let text = String::from_utf8(text).unwrap();
    let error: Value = serde_json::from_str(text.trim().strip_prefix("data: ").unwrap()).unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("the upstream broke off"),
        "{text}"
    );

    // A long stream, written in pieces that cut events and characters,
    // arrives whole and in order past the flow-control window many times.
    let (status, _, mut body) = agent_stream(&completions, "long").await;
    assert_eq!(status, 200);
    let mut text = Vec::new();
    assert!(!read_at_least(&mut body, &mut text, usize::MAX).await);
    let want: String = (0..2_000).map(event).collect::<String>() + "data: [DONE]\n\n";
    assert!(
        String::from_utf8(text).unwrap() == want,
        "the long stream differs"
    );

    // An upstream error before the stream keeps its status and Retry-After.
    let (status, retry, mut body) = agent_stream(&completions, "refused").await;
    assert_eq!((status, retry.as_deref()), (429, Some("3")));
    let mut text = Vec::new();
    read_at_least(&mut body, &mut text, usize::MAX).await;
    assert!(String::from_utf8_lossy(&text).contains("slow down"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_body_reaches_the_upstream_as_written_whole_or_streamed_unless_rewritten() {
    // Spacing, key order, an escape and a number's spelling: all lost if
    // the body were rebuilt on the way.
    let written = |stream: bool| {
        format!(
            "{{ \"stream\" : {stream},\n  \"temperature\": 0.10, \"model\": \"m1\",\
             \"messages\": [{{\"role\": \"user\", \"content\": \"caf\\u00e9\"}}] }}"
        )
    };
    let seen: SeenBytes = Arc::default();
    let base = byte_upstream(seen.clone()).await;
    let (_sandbox, url) = serving(Gateway::openai(&base).key("k")).await;
    let completions = format!("{url}/chat/completions");
    for stream in [false, true] {
        let (status, text) = post_text(&completions, &written(stream)).await;
        assert_eq!(status, 200, "{text}");
        if stream {
            assert_eq!(text, event(0) + &event(1) + "data: [DONE]\n\n");
        } else {
            assert!(text.contains("\"seen\""), "{text}");
        }
        let got = seen.lock().unwrap().pop().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&got),
            written(stream),
            "the upstream got the agent's own bytes (stream: {stream})"
        );
    }

    // A gateway that puts in its model rewrites the body, streams too,
    // keeping what the agent asked for besides.
    let (_sandbox, url) = serving(Gateway::openai(&base).model("the-policy")).await;
    let (status, text) = post_text(&format!("{url}/chat/completions"), &written(true)).await;
    assert_eq!(status, 200, "{text}");
    let got = seen.lock().unwrap().pop().unwrap();
    let got: Value = serde_json::from_slice(&got).unwrap();
    assert_eq!(got["model"], "the-policy");
    assert_eq!(got["stream"], true);
    assert_eq!(got["messages"][0]["content"], "café");
    assert_eq!(got["temperature"], 0.1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_leaves_mid_stream_closes_the_upstream_connection() {
    let script = Arc::new(StreamScript::default());
    let base = streaming_upstream(script.clone()).await;
    let (_sandbox, url) = serving(Gateway::openai(&base)).await;
    let (status, _, mut body) = agent_stream(&format!("{url}/chat/completions"), "endless").await;
    assert_eq!(status, 200);
    let mut text = Vec::new();
    assert!(read_at_least(&mut body, &mut text, 3 * event(0).len()).await);
    drop(body);
    tokio::time::timeout(std::time::Duration::from_secs(30), script.closed.notified())
        .await
        .expect("the upstream saw its client go");
    // The endpoint serves on.
    let (status, _, _) = agent("GET", &format!("{url}/models"), None).await;
    assert_eq!(status, 502, "no models upstream here, but an answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_leaves_before_the_upstream_answers_closes_the_upstream_connection() {
    leaving_before_the_answer_closes_the_upstream_and_frees_the_slot(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_leaves_a_whole_request_closes_the_upstream_connection() {
    leaving_before_the_answer_closes_the_upstream_and_frees_the_slot(false).await;
}

/// An agent asks for a `held` answer (streamed or whole) and leaves: the
/// upstream sees its connection close and the sandbox's only slot is free.
async fn leaving_before_the_answer_closes_the_upstream_and_frees_the_slot(stream: bool) {
    let script = Arc::new(StreamScript::default());
    let base = streaming_upstream(script.clone()).await;
    let transcript = support::scratch_dir("abridge-leaving").join("exchanges.jsonl");
    let log = ExchangeLog::start(JsonLinesRecorder::create(&transcript).unwrap()).unwrap();
    // One slot: the next stream is served only if the abandoned one freed it.
    let gateway = Gateway::openai(&base).max_concurrent(1).record_to(log);
    let (_sandbox, url) = serving(gateway).await;
    let completions = format!("{url}/chat/completions");
    let agent = tokio::spawn({
        let completions = completions.clone();
        async move {
            if stream {
                let _ = agent_stream(&completions, "held").await;
            } else {
                let whole = json!({"model": "held", "messages": []});
                agent("POST", &completions, Some(whole)).await;
            }
        }
    });
    let within = std::time::Duration::from_secs(30);
    tokio::time::timeout(within, script.asked.notified())
        .await
        .expect("the upstream was asked");
    agent.abort();
    // The gateway's timeout is 600 s: only the agent's leaving closes it.
    tokio::time::timeout(within, script.closed.notified())
        .await
        .expect("the upstream saw its client go before it answered");

    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let (status, mut body) = loop {
        let (status, _, body) = agent_stream(&completions, "long").await;
        // The slot is given back just after the connection is dropped.
        if status != 429 || tokio::time::Instant::now() > deadline {
            break (status, body);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(status, 200, "the abandoned stream gave its slot back");
    let mut text = Vec::new();
    read_at_least(&mut body, &mut text, usize::MAX).await;
    assert!(String::from_utf8_lossy(&text).ends_with("data: [DONE]\n\n"));
    // The abandoned exchange is recorded as such, before the one after it.
    let exchanges = wait_for_lines(&transcript, 2).await;
    assert_eq!(exchanges[0].model, json!("held"));
    assert_eq!(exchanges[0].status, 499, "{:?}", exchanges[0]);
    assert!(
        exchanges[0]
            .error
            .as_deref()
            .unwrap_or("")
            .contains("went away"),
        "{:?}",
        exchanges[0]
    );
    assert_eq!(
        (exchanges[1].model.clone(), exchanges[1].status),
        (json!("long"), 200)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_and_anthropic_sdks_in_the_sandbox_work_through_abridge_without_the_key(
) {
    let seen: Seen = Arc::default();
    let base = sdk_upstream(seen.clone()).await;
    let hub = agentix::trace::TraceHub::new();
    let ended = Arc::new(Mutex::new(Vec::new()));
    hub.add_processor(EndedSpans(ended.clone()));
    let sb = hub.scope(support::python_sandbox()).await;
    let transcript = support::scratch_dir("abridge-transcript").join("exchanges.jsonl");
    let log = ExchangeLog::start(JsonLinesRecorder::create(&transcript).unwrap()).unwrap();
    let gateway = Gateway::openai(&base).key("host-secret").record_to(log);
    // The rollout's span is current where the namespace is made.
    let rollout = hub.trace("rollout");
    let namespace = {
        let _current = rollout.enter();
        gateway.namespace()
    };
    sb.register_namespace(namespace).unwrap();
    let url = sb.remote(agentix_abridge::serve, 0u16).await.unwrap();
    let python = support::python();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("interop/llm_sdk_agent.py");
    // A second host on /abridge sees everything the sandbox sends there.
    let mut spy =
        support::raw_socket::RawSocket::connect_ns(sb.addr(), sb.token(), Abridge::PATH).await;
    let crossed = Arc::new(Mutex::new(Vec::new()));
    let spying = tokio::spawn({
        let crossed = crossed.clone();
        async move {
            // Quiet while the agent's Python starts; pinged meanwhile.
            while let Some(text) = spy.recv_within(std::time::Duration::from_secs(150)).await {
                crossed.lock().unwrap().push(text);
            }
        }
    });
    // What a user sets for an agent inside the sandbox.
    let opts = agentix_bash::BashOptions::new()
        .env("OPENAI_BASE_URL", &url)
        .env("OPENAI_API_KEY", "placeholder")
        .env("ANTHROPIC_BASE_URL", url.trim_end_matches("/v1"))
        .env("ANTHROPIC_API_KEY", "placeholder")
        .timeout(std::time::Duration::from_secs(120));
    let command = format!("{} {}", python.display(), script.display());
    let ran = sb.remote(agentix_bash::run, (command, opts)).await.unwrap();
    assert_eq!(
        ran.exit_code,
        Some(0),
        "the agent failed: {}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let saw: Value = serde_json::from_slice(&ran.stdout).unwrap();
    assert_eq!(saw["openai_text"], "hello from upstream");
    assert_eq!(saw["openai_stream"], json!(["hello ", "from ", "upstream"]));
    assert_eq!(saw["openai_429"], json!(["RateLimitError", 429, "1"]));
    assert_eq!(
        saw["anthropic_tool"],
        json!(["tool_use", "weather", {"city": "Oslo"}])
    );
    assert_eq!(
        saw["anthropic_after_tool"],
        json!(["end_turn", "hello from upstream"])
    );
    assert_eq!(
        saw["anthropic_stream"],
        json!([["hello ", "from ", "upstream"], "end_turn", 3])
    );
    assert_eq!(saw["anthropic_429"], json!(["RateLimitError", 429]));
    assert_eq!(
        saw["anthropic_count"], 12,
        "counted by the upstream's /tokenize"
    );
    assert_eq!(
        saw["env_values_with_secret"],
        json!([]),
        "the key is not in the sandbox"
    );
    spying.abort();
    let crossed = crossed.lock().unwrap().clone();
    let requests = crossed
        .iter()
        .filter(|t| t.contains("[\"upstream\",") || t.contains("[\"stream\","))
        .count();
    assert_eq!(requests, 8, "every request the sandbox made was seen");
    assert!(
        crossed.iter().all(|t| !t.contains("host-secret")),
        "the key never crossed the namespace"
    );

    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 8, "every request reached the upstream once");
        assert!(seen.iter().all(|(auth, _)| auth == "Bearer host-secret"));
        // The Anthropic tool round reached the upstream in OpenAI's words.
        let after_tool = &seen[4].1;
        assert_eq!(after_tool["messages"][2]["role"], "tool");
        assert_eq!(after_tool["messages"][2]["content"], "cold");
        assert_eq!(
            seen[3].1["messages"][0],
            json!({"role": "system", "content": "be brief"})
        );
    }

    // Every exchange is a span under the rollout, with its model, status,
    // tokens and timings; streams have a time to first piece.
    // A stream's span ends when its pump does, which may be just after the
    // agent has read the last piece.
    let ours = || -> Vec<agentix::trace::SpanData> {
        hub.force_flush();
        ended
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.trace_id == rollout.id() && s.name.starts_with("abridge."))
            .cloned()
            .collect()
    };
    support::wait_until(
        "every exchange's span to end",
        std::time::Duration::from_secs(10),
        || ours().len() >= 8,
    )
    .await;
    let spans = ours();
    let named = |name: &str| spans.iter().filter(|s| s.name == name).count();
    assert_eq!(named("abridge.chat_completions"), 3);
    assert_eq!(named("abridge.messages"), 4);
    assert_eq!(named("abridge.count_tokens"), 1);
    assert!(spans
        .iter()
        .all(|s| s.parent_id.is_none() && s.end_us.is_some()));
    let limited = spans
        .iter()
        .filter(|s| s.attributes["http.status_code"] == 429)
        .count();
    assert_eq!(limited, 2);
    let streamed: Vec<_> = spans
        .iter()
        .filter(|s| s.attributes["llm.streamed"] == true)
        .collect();
    assert_eq!(streamed.len(), 2);
    for span in &streamed {
        let ttft = span.attributes["llm.ttft_ms"].as_f64().unwrap();
        assert!(ttft > 0.0);
        assert!(span.attributes["llm.latency_ms"].as_f64().unwrap() >= ttft);
        assert!(span.events.iter().any(|e| e.name == "first_piece"));
    }
    let whole_ok = spans
        .iter()
        .find(|s| {
            s.name == "abridge.chat_completions"
                && s.attributes["llm.streamed"] == false
                && s.attributes["http.status_code"] == 200
        })
        .unwrap();
    assert_eq!(whole_ok.attributes["llm.prompt_tokens"], 4);
    assert_eq!(whole_ok.attributes["llm.completion_tokens"], 3);
    assert_eq!(whole_ok.attributes["llm.model"], "m1");

    // The transcript: one line per exchange, matching what the SDKs saw.
    let records: Vec<Exchange> = wait_for_lines(&transcript, 8).await;
    // Found by what they are: a stream's record is written when its pump
    // ends, which may be after the agent's next request.
    let find = |api: Api, streamed: bool, status: u16| -> Vec<&Exchange> {
        records
            .iter()
            .filter(|r| r.api == api && r.stream.is_some() == streamed && r.status == status)
            .collect()
    };
    let whole = find(Api::ChatCompletions, false, 200)[0];
    assert_eq!(
        whole.response.as_ref().unwrap()["choices"][0]["message"]["content"],
        "hello from upstream"
    );
    assert_eq!(
        (whole.prompt_tokens, whole.completion_tokens),
        (Some(4), Some(3))
    );
    let stream = find(Api::ChatCompletions, true, 200)[0]
        .stream
        .as_deref()
        .unwrap();
    assert!(stream.ends_with("data: [DONE]\n\n"), "{stream}");
    assert!(stream.contains("\"upstream\""), "{stream}");
    assert_eq!(find(Api::ChatCompletions, false, 429).len(), 1);
    assert_eq!(find(Api::Messages, false, 429).len(), 1);
    let tools = find(Api::Messages, false, 200);
    assert_eq!(tools.len(), 2);
    assert_eq!(
        tools[0].response.as_ref().unwrap()["content"][0]["name"],
        "weather"
    );
    let anthropic = find(Api::Messages, true, 200)[0];
    assert!(anthropic
        .stream
        .as_deref()
        .unwrap()
        .contains("event: message_stop"));
    assert_eq!(anthropic.completion_tokens, Some(3));
    let text = std::fs::read_to_string(&transcript).unwrap();
    assert!(!text.contains("host-secret"), "the key is not recorded");
}

/// A sandbox whose `/abridge` is `gateway`, and its endpoint's URL.
async fn serving(gateway: Gateway) -> (agentix::Sandbox, String) {
    let sb = support::host_network_sandbox().await;
    sb.register_namespace(gateway.namespace()).unwrap();
    let url = sb.remote(agentix_abridge::serve, 0u16).await.unwrap();
    (sb, url)
}

/// Keeps every span that ends.
struct EndedSpans(Arc<Mutex<Vec<agentix::trace::SpanData>>>);

impl agentix::trace::Processor for EndedSpans {
    fn on_span_end(&mut self, span: &agentix::trace::SpanData) {
        self.0.lock().unwrap().push(span.clone());
    }
}

/// The exchanges in the JSON-lines file at `path` once it holds `n`.
async fn wait_for_lines(path: &std::path::Path, n: usize) -> Vec<Exchange> {
    // Only whole lines count: a long one may be half written.
    support::wait_until_async("the recorder to write every exchange", || async {
        std::fs::read_to_string(path).is_ok_and(|t| t.matches('\n').count() >= n)
    })
    .await;
    std::fs::read_to_string(path)
        .unwrap()
        .split_inclusive('\n')
        .take(n)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_answer_at_once_a_busy_sandbox_429_a_large_body_413_a_bad_one_400() {
    let script = Arc::new(StreamScript::default());
    let base = streaming_upstream(script.clone()).await;
    let sb = support::host_network_sandbox().await;
    sb.register_namespace(Gateway::openai(&base).max_concurrent(1).namespace())
        .unwrap();
    let options = agentix_abridge::EndpointOptions {
        max_request_bytes: 4096,
        ..Default::default()
    };
    let url = sb
        .remote(agentix_abridge::serve_with, options)
        .await
        .unwrap();
    let completions = format!("{url}/chat/completions");

    // The sandbox's one slot is held by a paused stream.
    let (status, _, mut held) = agent_stream(&completions, "paused").await;
    assert_eq!(status, 200);
    let whole = json!({"model": "paused", "messages": []});
    let (status, retry, text) = agent("POST", &completions, Some(whole)).await;
    assert_eq!((status, retry.as_deref()), (429, Some("1")), "{text}");
    assert!(text.contains("already has 1 requests in flight"), "{text}");
    let (status, retry, _) = agent_stream(&completions, "paused").await;
    assert_eq!((status, retry.as_deref()), (429, Some("1")));
    script.release.notify_one();
    let mut text = Vec::new();
    assert!(!read_at_least(&mut held, &mut text, usize::MAX).await);

    // Once it ends the slot is free again.
    support::wait_until_async("the slot to be free", || async {
        let (status, _, mut body) = agent_stream(&completions, "long").await;
        let mut text = Vec::new();
        read_at_least(&mut body, &mut text, usize::MAX).await;
        status == 200
    })
    .await;

    // Bodies past the limit, or not JSON, get a readable error.
    let big = json!({"model": "m", "messages": [{"role": "user", "content": "x".repeat(5000)}]});
    let (status, text) = post_text(&completions, &big.to_string()).await;
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("limit of 4096 bytes"), "{text}");
    let (status, text) = post_text(&completions, "{\"model\": ").await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("not JSON"), "{text}");
    let (status, text) = post_text(&format!("{url}/messages"), "{\"messages\": 3}").await;
    assert_eq!(status, 400, "{text}");
    let error: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(error["type"], "error", "in Anthropic's words: {text}");
    assert_eq!(error["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn an_https_upstream_is_reached_over_tls_and_an_unknown_certificate_is_a_502_saying_so() {
    let (base, cert) = tls_upstream().await;
    let request = json!({"api": "chat_completions", "body": {"model": "m1", "messages": []}});
    let answer = Gateway::openai(&base)
        .add_root_certificate(cert)
        .answer(request.clone())
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.body["choices"][0]["message"]["content"], "over TLS");

    let untrusted = Gateway::openai(&base).answer(request.clone()).await;
    assert_eq!(untrusted.status, 502);
    let message = untrusted.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("TLS") && message.contains("certificate"),
        "{message}"
    );

    let garbage = Gateway::openai(&base)
        .add_root_certificate(b"not a certificate".to_vec())
        .answer(request)
        .await;
    assert_eq!(garbage.status, 502);
    assert!(garbage.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("root certificate"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_upstream_gets_messages_as_they_are_with_its_key_and_version() {
    let seen: SeenHeaders = Arc::default();
    let base = anthropic_upstream(seen.clone()).await;
    let sb = support::host_network_sandbox().await;
    let gateway = Gateway::anthropic(&base)
        .key("sk-ant-host")
        .model("claude-policy");
    sb.register_namespace(gateway.namespace()).unwrap();
    let url = sb.remote(agentix_abridge::serve, 0u16).await.unwrap();
    let messages = format!("{url}/messages");
    let ask =
        json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]});

    let (status, _, text) = agent("POST", &messages, Some(ask.clone())).await;
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["content"][0]["text"], "native");
    assert_eq!(answer["model"], "claude-policy", "the model was overridden");

    let (status, _, mut body) = agent_stream(&messages, "m").await;
    assert_eq!(status, 200);
    let mut streamed = Vec::new();
    read_at_least(&mut body, &mut streamed, usize::MAX).await;
    let streamed = String::from_utf8(streamed).unwrap();
    assert!(streamed.starts_with("event: message_start"), "{streamed}");
    assert!(streamed.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));

    let (status, _, text) = agent("POST", &format!("{messages}/count_tokens"), Some(ask)).await;
    assert_eq!((status, text.as_str()), (200, "{\"input_tokens\":5}"));

    // Its own errors pass as they are; an OpenAI agent is told what to do.
    let overloaded = json!({"model": "m", "max_tokens": 1, "messages": []});
    let (status, _, text) = agent("POST", &messages, Some(overloaded)).await;
    assert_eq!(status, 529);
    assert!(text.contains("overloaded_error"), "{text}");
    let chat = json!({"model": "m", "messages": []});
    let (status, _, text) = agent("POST", &format!("{url}/chat/completions"), Some(chat)).await;
    assert_eq!(status, 400);
    assert!(text.contains("POST /v1/messages"), "{text}");

    let seen = seen.lock().unwrap();
    assert_eq!(
        seen.len(),
        4,
        "the refused chat request never went upstream"
    );
    assert!(seen
        .iter()
        .all(|(_, key, version)| key == "sk-ant-host" && version == "2023-06-01"));
    assert_eq!(seen[2].0, "/v1/messages/count_tokens");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_breaks_mid_stream_or_answers_late_is_told_to_the_agent() {
    let script = Arc::new(StreamScript::default());
    let base = streaming_upstream(script).await;
    let gateway = Gateway::openai(&base).timeout(std::time::Duration::from_millis(500));
    let (_sandbox, url) = serving(gateway).await;
    let completions = format!("{url}/chat/completions");

    // The first event arrives, then an error event, then the end.
    let (status, _, mut body) = agent_stream(&completions, "dropped").await;
    assert_eq!(status, 200);
    let mut text = Vec::new();
    assert!(!read_at_least(&mut body, &mut text, usize::MAX).await);
    let text = String::from_utf8(text).unwrap();
    let (first, rest) = text.split_at(event(0).len());
    assert_eq!(first, event(0));
    let error: Value = serde_json::from_str(rest.trim().strip_prefix("data: ").unwrap()).unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("the upstream broke off"),
        "{rest}"
    );

    // A line that never ends is cut off past the longest answer read,
    // and the upstream connection closed, not held in memory for ever.
    let script = Arc::new(StreamScript::default());
    let base = streaming_upstream(script.clone()).await;
    let (_unbroken_sandbox, unbroken_url) = serving(Gateway::openai(&base)).await;
    let (status, _, mut body) =
        agent_stream(&format!("{unbroken_url}/chat/completions"), "unbroken").await;
    assert_eq!(status, 200);
    let mut text = Vec::new();
    let read = read_at_least(&mut body, &mut text, usize::MAX);
    let read = tokio::time::timeout(std::time::Duration::from_secs(60), read).await;
    assert_eq!(read, Ok(false), "the stream ended");
    let text = String::from_utf8(text).unwrap();
    let (first, rest) = text.split_at(event(0).len());
    assert_eq!(first, event(0));
    assert!(
        rest.contains("64 MiB without ending a line"),
        "{}",
        &rest[..rest.len().min(300)]
    );
    tokio::time::timeout(std::time::Duration::from_secs(10), script.closed.notified())
        .await
        .expect("the upstream saw its connection closed");

    // Headers later than the gateway's timeout: a 504 saying so.
    let (status, _, mut body) = agent_stream(&completions, "slow").await;
    let mut text = Vec::new();
    read_at_least(&mut body, &mut text, usize::MAX).await;
    let text = String::from_utf8(text).unwrap();
    assert_eq!(status, 504, "{text}");
    assert!(text.contains("did not answer within 500ms"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_gets_the_first_piece_before_the_upstream_finishes_and_leaving_closes_it() {
    let script = Arc::new(StreamScript::default());
    let base = streaming_upstream(script.clone()).await;
    let sb = support::python_sandbox().await;
    sb.register_namespace(Gateway::openai(&base).namespace())
        .unwrap();
    let url = sb.remote(agentix_abridge::serve, 0u16).await.unwrap();
    let marker = support::scratch_dir("abridge-sdk-stream").join("first-piece");
    let python = support::python();
    let agent_script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("interop/llm_sdk_stream_agent.py");
    let opts = agentix_bash::BashOptions::new()
        .env("OPENAI_BASE_URL", &url)
        .env("OPENAI_API_KEY", "placeholder")
        .timeout(std::time::Duration::from_secs(120));
    let command = format!(
        "{} {} {}",
        python.display(),
        agent_script.display(),
        marker.display()
    );
    let agent = std::future::IntoFuture::into_future(sb.remote(agentix_bash::run, (command, opts)));
    let upstream = async {
        // The SDK holds the first piece while the upstream holds the rest.
        support::wait_until_async("the SDK to read the first piece", || async {
            marker.exists()
        })
        .await;
        script.release.notify_one();
    };
    let (ran, ()) = tokio::join!(agent, upstream);
    let ran = ran.unwrap();
    assert_eq!(
        ran.exit_code,
        Some(0),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let read: Value = serde_json::from_slice(&ran.stdout).unwrap();
    let pieces: Vec<String> = (0..5).map(|i| format!("piece {i} ✓")).collect();
    assert_eq!(read["paused"], json!(pieces));
    assert_eq!(read["endless_read"], 3);
    tokio::time::timeout(std::time::Duration::from_secs(30), script.closed.notified())
        .await
        .expect("the upstream saw the SDK leave");
}
