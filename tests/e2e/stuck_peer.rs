//! A server that stops reading costs the host a timeout, not memory. Alone
//! in its test binary: it measures this process's resident memory.

mod support;

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use agentix::{Blob, ErrorKind, Sandbox, SandboxConfig};
use futures_util::StreamExt;
use support::{bundle_path, fake_server, rss_kib};
use tokio_tungstenite::tungstenite::Message;

/// A Socket.IO server that accepts the handshake and every namespace, then
/// never reads again.
async fn deaf_server() -> String {
    fake_server::start(|mut ws| async move {
        // Accept the namespaces the host joins at once, then stop.
        let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
        while let Ok(Some(Ok(Message::Text(t)))) =
            tokio::time::timeout_at(deadline, ws.next()).await
        {
            fake_server::accept_join(&mut ws, t.as_str()).await;
        }
        // Hold the socket open, unread, until the test ends.
        tokio::time::sleep(Duration::from_secs(120)).await;
        drop(ws);
    })
    .await
}

#[tokio::test]
async fn a_server_that_stops_reading_costs_a_timeout_not_memory() {
    let addr = deaf_server().await;
    let config = SandboxConfig::new(bundle_path())
        .heartbeat(Duration::from_millis(200), Duration::from_secs(30));
    let sb = Sandbox::attach_with(addr, "token", config);
    let me = std::process::id();
    let payload = Blob::from(vec![0x42u8; 32 << 20]);
    // The first call fills the socket's buffers and blocks; the rest wait.
    let before = rss_kib(me);
    for round in 0..10 {
        let started = Instant::now();
        let err = sb
            .remote(agentix_e2e::echo_blob, (payload.clone(),))
            .timeout(Duration::from_millis(700))
            .await
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Timeout, "round {round}: {err}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "round {round} took {:?}",
            started.elapsed()
        );
    }
    let grown = rss_kib(me).saturating_sub(before);
    // One abandoned payload is still on its way out, and the allocator keeps
    // some freed memory; ten payloads kept would be 320 MiB.
    assert!(
        grown < 200 << 10,
        "the host grew by {grown} KiB while a server did not read"
    );
}

/// A Socket.IO server that accepts the namespaces the host joins, then
/// sends Engine.IO pings as fast as it can for `flood`, never reading.
async fn pinging_server(flood: Duration) -> String {
    use futures_util::SinkExt;
    fake_server::start(move |mut ws| async move {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(300);
        while let Ok(Some(Ok(Message::Text(t)))) =
            tokio::time::timeout_at(deadline, ws.next()).await
        {
            fake_server::accept_join(&mut ws, t.as_str()).await;
        }
        let until = Instant::now() + flood;
        while Instant::now() < until {
            for _ in 0..256 {
                if ws.feed(Message::text("2")).await.is_err() {
                    return;
                }
            }
            if ws.flush().await.is_err() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(ws);
    })
    .await
}

// Hardening, second round: every ping spawned a task to send its pong, so
// a server that pinged without reading grew the host to 1.96 GB in 28 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_pings_without_reading_costs_the_host_one_task() {
    let addr = pinging_server(Duration::from_secs(4)).await;
    let config = SandboxConfig::new(bundle_path())
        .heartbeat(Duration::from_millis(200), Duration::from_secs(30));
    let sb = std::sync::Arc::new(Sandbox::attach_with(addr, "token", config));
    let me = std::process::id();
    let before = rss_kib(me);
    let runtime = tokio::runtime::Handle::current();
    let idle_tasks = runtime.metrics().num_alive_tasks();
    // The call connects; its reply never comes.
    let caller = sb.clone();
    let call = tokio::spawn(async move {
        caller
            .remote(agentix_e2e::add, (1, 2))
            .timeout(Duration::from_secs(8))
            .into_future()
            .await
    });
    let mut most_tasks = 0;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        most_tasks = most_tasks.max(runtime.metrics().num_alive_tasks());
    }
    let grown = rss_kib(me).saturating_sub(before);
    assert!(
        most_tasks < idle_tasks + 100,
        "{most_tasks} tasks alive during a ping flood ({idle_tasks} before it)"
    );
    assert!(
        grown < 200 << 10,
        "the host grew by {grown} KiB while a server flooded it with pings"
    );
    let err = call.await.unwrap().unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err}");
}

// Hardening, second round: a worker emitting plugin events at full speed to
// a slow handler drove the host from 14 to 189 MB in 30 s with 345,094
// tasks alive, and a closure request handler took 96,000 requests at once
// (172 MB): each event and request got a task, without bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_flood_to_slow_handlers_is_dropped_and_refused_not_queued() {
    use agentix::HostNamespace;
    let sb = support::sandbox().await;
    let slow = Duration::from_secs(2);
    let ns = HostNamespace::new("/e2e-plugin")
        .on("number", move |_, _| tokio::time::sleep(slow))
        .request_handler("fetch", move |_| async move {
            tokio::time::sleep(slow).await;
            Ok::<_, String>(serde_json::json!("slow"))
        });
    sb.register_namespace(ns).unwrap();
    assert_eq!(
        sb.remote(agentix_e2e::open_plugin, ()).await.unwrap(),
        "open"
    );
    let me = std::process::id();
    let before = rss_kib(me);
    let runtime = tokio::runtime::Handle::current();
    let idle_tasks = runtime.metrics().num_alive_tasks();
    let watch = {
        let runtime = runtime.clone();
        tokio::spawn(async move {
            let mut most = 0;
            for _ in 0..100 {
                most = most.max(runtime.metrics().num_alive_tasks());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            most
        })
    };
    let events = 200_000u64;
    let requests = 2_000u64;
    let (sent, replies) = tokio::join!(
        sb.remote(agentix_e2e::emit_numbers, events).into_future(),
        sb.remote(agentix_e2e::ask_host, requests).into_future(),
    );
    assert_eq!(sent.unwrap(), events);
    let replies = replies.unwrap();
    // Every request was answered: by the handler, or at once as refused.
    assert_eq!(replies.len() as u64, requests);
    let refused = replies
        .iter()
        .filter(|r| {
            r["error"]
                .as_str()
                .is_some_and(|e| e.contains("Overloaded"))
        })
        .count();
    let answered = replies.iter().filter(|r| **r == "slow").count();
    assert_eq!(refused + answered, requests as usize, "{replies:?}");
    assert!(refused > 0, "no request was refused");
    let most_tasks = watch.await.unwrap();
    let grown = rss_kib(me).saturating_sub(before);
    assert!(
        most_tasks < idle_tasks + agentix::namespace_budget::HANDLER_TASKS + 300,
        "{most_tasks} tasks alive during a plugin flood ({idle_tasks} before it)"
    );
    assert!(
        grown < 200 << 10,
        "the host grew by {grown} KiB in a plugin flood"
    );
    // The calls go on, and the host says what it turned away.
    assert_eq!(sb.remote(agentix_e2e::add, (2, 2)).await.unwrap(), 4);
    let health = sb.health().await.unwrap();
    let load = &health["host"]["namespaces"]["/e2e-plugin"];
    assert!(load["dropped_events"].as_u64().unwrap() > 0, "{health}");
    assert_eq!(
        load["overloaded_requests"].as_u64().unwrap(),
        refused as u64
    );
}

// Hardening, second round: sixteen 41 MiB log records took the host to
// 884 MB: a record travelled whole, each in a batch of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_log_records_reach_the_host_cut_and_cost_it_no_memory() {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let tap = seen.clone();
    let config = SandboxConfig::new(bundle_path())
        .on_log(move |_, r| tap.lock().unwrap().push(r.message.clone()));
    let sb = support::sandbox_with(config).await;
    let me = std::process::id();
    let before = rss_kib(me);
    let records = 16u64;
    let (logged, sum) = tokio::join!(
        sb.remote(agentix_e2e::chatter_wide, (records, 41usize << 20))
            .into_future(),
        sb.remote(agentix_e2e::add, (2, 3)).into_future(),
    );
    assert_eq!(logged.unwrap(), records);
    assert_eq!(sum.unwrap(), 5);
    support::wait_until("the cut records", Duration::from_secs(30), || {
        seen.lock()
            .unwrap()
            .iter()
            .filter(|m| m.starts_with("wide "))
            .count()
            == records as usize
    })
    .await;
    let grown = rss_kib(me).saturating_sub(before);
    assert!(grown < 200 << 10, "the host grew by {grown} KiB");
    for message in seen
        .lock()
        .unwrap()
        .iter()
        .filter(|m| m.starts_with("wide "))
    {
        assert!(message.len() <= (64 << 10) + 64, "{} bytes", message.len());
        assert!(
            message.ends_with("bytes cut]"),
            "{}",
            &message[message.len() - 40..]
        );
    }
    assert_eq!(sb.remote(agentix_e2e::add, (1, 1)).await.unwrap(), 2);
}

/// A server that sends `batches` `/log` batches of one `record_bytes`
/// record each at once, without waiting for acks, sets `all_sent` once the
/// socket took them, and counts the acks.
async fn log_flooding_server(
    batches: usize,
    record_bytes: usize,
    acks: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    all_sent: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> String {
    use futures_util::SinkExt;
    let record =
        agentix_wire::log_record::LogRecord::now("INFO", "flood", "y".repeat(record_bytes));
    let mut cbor = Vec::new();
    ciborium::into_writer(&[record], &mut cbor).unwrap();
    let cbor = bytes::Bytes::from(cbor);
    fake_server::start(move |mut ws| {
        let (cbor, acks, all_sent) = (cbor.clone(), acks.clone(), all_sent.clone());
        async move {
            let mut sent = false;
            while let Some(Ok(message)) = ws.next().await {
                let Message::Text(text) = message else {
                    continue;
                };
                if fake_server::accept_join(&mut ws, text.as_str()).await {
                    if text.as_str().starts_with("40/log,") && !sent {
                        sent = true;
                        for _ in 0..batches {
                            let header =
                                r#"451-/log,["records",{"cbor":{"_placeholder":true,"num":0}}]"#;
                            let sent = ws.send(Message::text(header)).await;
                            if sent.is_err()
                                || ws.send(Message::Binary(cbor.clone())).await.is_err()
                            {
                                return;
                            }
                        }
                        all_sent.store(true, std::sync::atomic::Ordering::Release);
                    }
                } else if text.as_str().starts_with("42/log,[\"ack\"") {
                    acks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
    })
    .await
}

// Hardening, second round: sixteen unacknowledged 41 MiB /log batches took
// the host to 884 MB: its queue of batches was bounded in number only.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn log_batches_past_the_hosts_byte_budget_are_dropped_and_still_acknowledged() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let acks = Arc::new(AtomicUsize::new(0));
    let all_sent = Arc::new(AtomicBool::new(false));
    let batches = 16;
    let addr = log_flooding_server(batches, 8 << 20, acks.clone(), all_sent.clone()).await;
    let delivered = Arc::new(AtomicUsize::new(0));
    let tap = delivered.clone();
    let config = SandboxConfig::new(bundle_path()).on_log(move |_, _| {
        // A log sink stuck on the first batch until the host has read
        // (nearly) every batch off its socket: the rest queue behind it.
        // (Bounded: the sink blocks a runtime thread.)
        if tap.fetch_add(1, Ordering::Relaxed) == 0 {
            let given_up = std::time::Instant::now() + Duration::from_secs(60);
            while !all_sent.load(Ordering::Acquire) && std::time::Instant::now() < given_up {
                std::thread::sleep(Duration::from_millis(10));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    let sb = Sandbox::attach_with(addr, "token", config);
    let me = std::process::id();
    let before = rss_kib(me);
    // The call connects (joining /log); its reply never comes, and it keeps
    // the connection open while the batches flow.
    let sb = std::sync::Arc::new(sb);
    let caller = sb.clone();
    let call = tokio::spawn(async move {
        let call = caller.remote(agentix_e2e::add, (1, 2));
        call.timeout(Duration::from_secs(60)).into_future().await
    });
    support::wait_until("every batch acknowledged", Duration::from_secs(90), || {
        acks.load(Ordering::Relaxed) == batches
    })
    .await;
    let grown = rss_kib(me).saturating_sub(before);
    let delivered = delivered.load(Ordering::Relaxed);
    assert!(
        (1..batches).contains(&delivered),
        "{delivered} of {batches} huge batches were handled"
    );
    assert!(grown < 200 << 10, "the host grew by {grown} KiB");
    call.abort();
}

// Hardening, second round: a 200 MiB text reply took the host to 814 MB,
// and it stalled 19 s before it counted the connection as lost.
#[tokio::test]
async fn a_huge_text_message_from_the_server_is_refused_on_its_header() {
    let addr = fake_server::start(|mut ws| async move {
        use tokio::io::AsyncWriteExt;
        while let Some(Ok(Message::Text(text))) = ws.next().await {
            if fake_server::accept_join(&mut ws, text.as_str()).await {
                continue;
            }
            // A call came: the header of a 200 MiB text message, then a
            // trickle of its bytes that never ends.
            let mut header = vec![0x81u8, 127];
            header.extend_from_slice(&(200u64 << 20).to_be_bytes());
            let tcp = ws.get_mut();
            let _ = tcp.write_all(&header).await;
            for _ in 0..300 {
                if tcp.write_all(b"42/rpc,").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    })
    .await;
    let sb = Sandbox::attach_with(addr, "token", SandboxConfig::new(bundle_path()));
    let err = sb
        .remote(agentix_e2e::add, (1, 2))
        .timeout(Duration::from_secs(20))
        .into_future()
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::ConnectionLost, "{err}");
}
