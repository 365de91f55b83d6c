//! Faults and bad input found by an adversarial pass, each kept fixed here:
//! stream windows and acks a peer gets wrong, target names long enough to
//! make a close-match search a denial of service, the token outside a
//! Bearer header, a server reply that cannot be read, and the host's
//! environment leaking into the sandbox.

mod support;

use std::future::IntoFuture;
use std::time::Duration;

use agentix::{ErrorKind, StreamExt};
use serde_json::json;
use support::raw_socket::{placeholder, RawSocket};
use support::sandbox;

#[tokio::test]
async fn the_largest_byte_window_works_and_the_server_serves_on() {
    let sb = sandbox().await;
    let mut items = sb
        .stream(agentix_e2e::count, (1_000,))
        .window(100, u64::MAX)
        .await
        .unwrap();
    let mut n = 0u64;
    while let Some(item) = items.next().await {
        assert_eq!(item.unwrap(), n);
        n += 1;
    }
    assert_eq!(n, 1_000);
    assert_eq!(sb.remote(agentix_e2e::add, (1, 1)).await.unwrap(), 2);
    assert_eq!(sb.health().await.unwrap()["status"], "ok");
}

/// Starts `count(n)` as stream call `id` with `window` from a raw client.
async fn raw_stream(raw: &mut RawSocket, id: u64, n: u64, window: serde_json::Value) {
    raw.emit_binary(
        "call",
        json!({"id": id, "target": "agentix_e2e::count", "args": placeholder(0), "stream": window}),
        vec![agentix_wire::cbor::to_vec(&(n,)).unwrap()],
    )
    .await;
}

#[tokio::test]
async fn an_empty_window_is_refused_not_parked() {
    let sb = sandbox().await;
    let mut raw = RawSocket::connect(sb.addr(), sb.token()).await;
    for (id, window) in [
        (1, json!({"items": 0, "bytes": 0})),
        (2, json!({"items": 5, "bytes": 0})),
    ] {
        raw_stream(&mut raw, id, 10, window).await;
        let (name, payload) = raw.recv_event().await.expect("a reply");
        assert_eq!(name, "call:error", "{payload}");
        assert_eq!(payload["id"], id);
        assert_eq!(payload["error"]["kind"], "Protocol", "{payload}");
    }
    assert_eq!(sb.remote(agentix_e2e::add, (2, 2)).await.unwrap(), 4);
}

#[tokio::test]
async fn an_ack_past_what_was_sent_neither_silences_nor_unbounds_a_stream() {
    let sb = sandbox().await;
    let mut raw = RawSocket::connect(sb.addr(), sb.token()).await;
    const N: u64 = 2_000;
    raw_stream(&mut raw, 1, N, json!({"items": 10, "bytes": 1 << 20})).await;
    let mut got = 0u64;
    let mut bogus_sent = false;
    loop {
        let event = tokio::time::timeout(Duration::from_secs(20), raw.recv_binary_event())
            .await
            .expect("the stream went silent")
            .expect("an event");
        match event.name.as_str() {
            "call:items" => {
                let items: Vec<serde_bytes::ByteBuf> =
                    agentix_wire::cbor::from_slice(&event.attachments[0]).unwrap();
                assert!(items.len() <= 10, "the worker ran past its window");
                got += items.len() as u64;
                let ack = if bogus_sent {
                    json!({"id": 1, "items": items.len(), "bytes": 9 * items.len()})
                } else {
                    // Far more than was ever sent.
                    bogus_sent = true;
                    json!({"id": 1, "items": u64::MAX, "bytes": u64::MAX})
                };
                raw.emit("call:ack", ack).await;
            }
            "call:end" => break,
            other => panic!("unexpected {other}: {}", event.payload),
        }
    }
    assert_eq!(got, N);
}

#[tokio::test]
async fn a_huge_target_name_is_refused_at_once_and_starves_no_one() {
    let sb = sandbox().await;
    let huge = "x".repeat(1_000_000);
    let bogus = || sb.call_json(&huge, json!([]));
    let (a, b, sum) = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::join!(
            bogus(),
            bogus(),
            sb.remote(agentix_e2e::add, (20, 22)).into_future()
        )
    })
    .await
    .expect("calls with a huge target name, and a call beside them, all finish");
    for err in [a.unwrap_err(), b.unwrap_err()] {
        assert_eq!(err.kind, ErrorKind::UnknownTarget, "{err}");
        assert!(err.message.contains("bytes long"), "{err}");
    }
    assert_eq!(sum.unwrap(), 42);
}

#[tokio::test]
async fn http_takes_the_token_only_as_a_bearer_header_and_health_says_little_without_it() {
    use support::raw_socket::http_get;
    let sb = sandbox().await;
    assert_eq!(sb.remote(agentix_e2e::add, (1, 1)).await.unwrap(), 2);
    let (status, body) = http_get(sb.addr(), "/health", None).await;
    assert_eq!(status, 200);
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        health,
        json!({"status": "ok"}),
        "no pids or worker details without the token"
    );
    let bearer = format!("Bearer {}", sb.token());
    let (_, body) = http_get(sb.addr(), "/health", Some(&bearer)).await;
    let full: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(full["worker"]["pid"].is_u64(), "{full}");
    // A token in the URL is not a credential; the scheme's case is free.
    let in_url = format!("/metrics?token={}", sb.token());
    assert_eq!(http_get(sb.addr(), &in_url, None).await.0, 401);
    let lower = format!("bearer {}", sb.token());
    assert_eq!(http_get(sb.addr(), "/metrics", Some(&lower)).await.0, 404);
}

/// A Socket.IO server that accepts every namespace and answers the first
/// `call` with a `call:result` whose placeholder names no attachment.
async fn lying_server() -> String {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    support::fake_server::start(|mut ws| async move {
        while let Some(Ok(message)) = ws.next().await {
            let Message::Text(text) = message else {
                continue;
            };
            if support::fake_server::accept_join(&mut ws, text.as_str()).await {
                continue;
            }
            if text.as_str().contains("\"call\"") {
                let lie =
                    r#"451-/rpc,["call:result",{"id":1,"value":{"_placeholder":true,"num":5}}]"#;
                let _ = ws.send(Message::text(lie)).await;
                let _ = ws.send(Message::binary(vec![1u8, 2, 3])).await;
            }
        }
    })
    .await
}

#[tokio::test]
async fn a_reply_that_cannot_be_read_ends_its_call_with_protocol() {
    let addr = lying_server().await;
    let sb = agentix::Sandbox::attach(addr, "token");
    let err = tokio::time::timeout(
        Duration::from_secs(20),
        sb.remote(agentix_e2e::add, (1, 2)).into_future(),
    )
    .await
    .expect("a call whose reply cannot be read ends, it does not hang")
    .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Protocol, "{err}");
    assert!(err.message.contains("could not be read"), "{err}");
}

/// What `script` prints when bash runs it in `sb`.
async fn stdout_of(sb: &agentix::Sandbox, script: String) -> String {
    sb.remote(
        agentix_bash::run,
        (script, agentix_bash::BashOptions::new()),
    )
    .await
    .unwrap()
    .stdout_lossy()
}

#[tokio::test]
async fn the_hosts_environment_stays_out_of_the_sandbox_unless_passed() {
    // Cargo sets this for the test process; it stands for any host secret.
    let secret = std::env::var("CARGO_PKG_NAME").expect("cargo sets CARGO_PKG_NAME");
    let clean = stdout_of(&sandbox().await, "env".to_owned()).await;
    assert!(!clean.contains("CARGO_PKG_NAME="), "{clean}");
    assert!(!clean.contains("AGENTIX_TOKEN"), "{clean}");
    assert!(clean.contains("PATH="), "{clean}");
    let config = agentix::SandboxConfig::new(support::bundle_path()).pass_env("CARGO_PKG_NAME");
    let passed = stdout_of(&support::sandbox_with(config).await, "env".to_owned()).await;
    assert!(
        passed.contains(&format!("CARGO_PKG_NAME={secret}")),
        "{passed}"
    );
}

#[tokio::test]
async fn sandbox_code_inherits_none_of_the_workers_huge_page_tunables() {
    let sb = support::plain_sandbox().await;
    for sb in [sb, sandbox().await] {
        let seen = stdout_of(&sb, "env".to_owned()).await;
        assert!(!seen.contains("GLIBC_TUNABLES"), "{seen}");
        assert!(!seen.contains("AGENTIX_TUNABLES_ADDED"), "{seen}");
    }
    // Tunables the sandbox's environment sets are its own, left as they are.
    let own = support::plain(agentix::SandboxConfig::new(support::bundle_path()))
        .env("GLIBC_TUNABLES", "glibc.malloc.arena_max=1");
    let sb = support::sandbox_with(own).await;
    let seen = stdout_of(&sb, "env".to_owned()).await;
    assert!(
        seen.contains("GLIBC_TUNABLES=glibc.malloc.arena_max=1"),
        "{seen}"
    );
    assert!(!seen.contains("hugetlb"), "{seen}");
}

#[tokio::test]
async fn sandbox_code_cannot_read_the_servers_token() {
    let sb = sandbox().await;
    let server = sb.server_pid().unwrap();
    let script = format!(
        "cat /proc/{server}/environ /proc/{server}/cmdline | tr '\\0' '\\n'; \
         for p in /proc/[0-9]*; do cat $p/environ $p/cmdline 2>/dev/null | tr '\\0' '\\n'; done"
    );
    let seen = stdout_of(&sb, script).await;
    assert!(
        seen.contains("--token-stdin"),
        "the server's command line was read: {seen}"
    );
    assert!(
        !seen.contains(sb.token()),
        "the token is readable from the sandbox"
    );
}

// Hardening, second round: sandbox code ran as the host's user and its
// server and worker were dumpable, so it read its server's token from
// /proc/<server>/mem, another sandbox's the same way, killed another
// sandbox's worker and read the host's environment (its API keys).
#[tokio::test]
async fn sandbox_code_reads_no_other_memory_and_a_root_hosts_sandboxes_are_unprivileged() {
    let a = support::plain_sandbox().await;
    let b = support::plain_sandbox().await;
    let host = std::process::id();
    let a_server = a.server_pid().unwrap();
    let b_server = b.server_pid().unwrap();
    let a_worker = a.remote(agentix_e2e::worker_pid, ()).await.unwrap();
    let b_worker = b.remote(agentix_e2e::worker_pid, ()).await.unwrap();
    let script = format!(
        "id -u; \
         for p in server:{a_server} worker:{a_worker} other_server:{b_server} host:{host}; do \
           n=${{p%%:*}}; pid=${{p#*:}}; \
           for f in mem environ; do \
             if (exec 3< /proc/$pid/$f) 2>/dev/null; then echo \"$n $f open\"; \
             else echo \"$n $f denied\"; fi; \
           done; \
         done; \
         if kill -0 {b_worker} 2>/dev/null; then echo 'other_worker signalled'; \
         else echo 'other_worker refused'; fi"
    );
    let seen = stdout_of(&a, script).await;
    let mut lines = seen.lines();
    let uid: u32 = lines.next().unwrap().trim().parse().unwrap();
    let seen: Vec<&str> = lines.collect();
    for own in ["server", "worker", "other_server"] {
        for file in ["mem", "environ"] {
            let line = format!("{own} {file} denied");
            assert!(seen.contains(&line.as_str()), "{own}'s {file}: {seen:?}");
        }
    }
    if agentix::RunAs::Default.uid_for("any").is_some() {
        // A root host: the sandbox has a uid of its own, and reaches neither
        // the host nor another sandbox.
        assert!(uid >= agentix::SANDBOX_UID_BASE, "uid {uid}");
        assert!(seen.contains(&"host mem denied"), "{seen:?}");
        assert!(seen.contains(&"host environ denied"), "{seen:?}");
        assert!(seen.contains(&"other_worker refused"), "{seen:?}");
    }
    // The probes did nothing: both sandboxes answer.
    assert_eq!(a.remote(agentix_e2e::add, (1, 1)).await.unwrap(), 2);
    assert_eq!(b.remote(agentix_e2e::add, (2, 2)).await.unwrap(), 4);
}

#[tokio::test]
async fn a_server_without_a_token_refuses_to_start_unless_told() {
    let refused = tokio::process::Command::new(support::bundle_path())
        .arg("serve")
        .env_remove("AGENTIX_TOKEN")
        .output();
    let refused = tokio::time::timeout(Duration::from_secs(20), refused)
        .await
        .expect("the server exits at once")
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("--insecure-no-auth"), "{stderr}");

    let mut open = std::process::Command::new(support::bundle_path())
        .args(["serve", "--insecure-no-auth"])
        .env_remove("AGENTIX_TOKEN")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(open.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.contains("\"ready\""), "{line}");
    let _ = open.kill();
    let _ = open.wait();
}

#[tokio::test]
async fn a_degraded_sandbox_recovers_once_its_restart_window_has_passed() {
    let config = agentix::SandboxConfig::new(support::bundle_path())
        .server_arg("--max-restarts", "2")
        .server_arg("--restart-window-ms", "1500");
    let sb = support::sandbox_with(config).await;
    for _ in 0..3 {
        let err = sb
            .remote(agentix_e2e::crash, ("exit".to_owned(),))
            .timeout(Duration::from_secs(20))
            .await
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::WorkerExited, "{err}");
    }
    let health = sb.health().await.unwrap();
    assert_eq!(health["status"], "degraded", "{health}");
    let budget = &health["worker"]["restart_budget"];
    assert_eq!(budget["restarts"], 2, "{health}");
    assert_eq!(budget["window_s"], 1.5, "{health}");
    assert!(budget["retry_in_s"].as_f64().unwrap() > 0.0, "{health}");
    let err = sb.remote(agentix_e2e::add, (1, 1)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Degraded, "{err}");
    // Once the window has passed, the worker is tried again and serves.
    support::wait_until_async("the sandbox back from degraded", || async {
        sb.health().await.is_ok_and(|h| h["status"] == "ok")
    })
    .await;
    assert_eq!(sb.remote(agentix_e2e::add, (20, 22)).await.unwrap(), 42);
}

#[tokio::test]
async fn a_log_listener_that_never_acks_stalls_nothing() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let received = Arc::new(AtomicU64::new(0));
    let counted = received.clone();
    let config = agentix::SandboxConfig::new(support::bundle_path()).on_log(move |_, r| {
        if r.target == "agentix_e2e" && r.message.starts_with("log ") {
            counted.fetch_add(1, Ordering::Relaxed);
        }
    });
    let sb = support::sandbox_with(config).await;
    // A listener that reads (and answers pings) but never acknowledges.
    let mut deaf = RawSocket::connect_ns(sb.addr(), sb.token(), "/log").await;
    let reader = tokio::spawn(async move { while deaf.recv_binary_event().await.is_some() {} });
    const N: u64 = 20_000;
    let chatter = sb.remote(agentix_e2e::chatter, (N, 0, 0));
    let made = tokio::time::timeout(Duration::from_secs(60), chatter.into_future())
        .await
        .expect("logging went on while a listener did not acknowledge")
        .unwrap();
    assert_eq!(made, N);
    support::wait_until(
        "every record at the listening host",
        Duration::from_secs(30),
        || received.load(Ordering::Relaxed) == N,
    )
    .await;
    assert_eq!(sb.remote(agentix_e2e::add, (1, 2)).await.unwrap(), 3);
    let health = sb.health().await.unwrap();
    let not_sent = health["side_channels"]["not_sent_to_lagging_listeners"]
        .as_u64()
        .unwrap();
    assert!(not_sent > 0, "{health}");
    reader.abort();
}

/// Processes whose command line holds `marker`, found by walking /proc.
fn processes_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        // Zombies have an empty command line; they are gone for good.
        if cmdline.contains(marker) && !cmdline.contains("bash -c") {
            found.push(pid);
        }
    }
    found
}

/// A `sleep` duration no other test uses, as its marker in /proc.
fn unique_sleep() -> String {
    format!("1000.{}", agentix_e2e::now_nanos() % 1_000_000_007)
}

/// Background, setsid'd and piped children of one command.
fn scattered(marker: &str) -> String {
    format!(
        "sleep {marker} & (setsid sleep {marker} &) ; sleep {marker} | cat & \
         nohup sleep {marker} >/dev/null 2>&1 &"
    )
}

async fn gone(marker: &str, when: &str) {
    support::wait_until(
        &format!("every process of the command gone {when}"),
        Duration::from_secs(10),
        || processes_with(marker).is_empty(),
    )
    .await;
}

#[tokio::test]
async fn a_cancelled_or_timed_out_command_leaves_no_process_behind() {
    let sb = sandbox().await;
    let marker = unique_sleep();
    let command = format!("{} sleep {marker}", scattered(&marker));
    let stream = sb
        .stream(
            agentix_bash::run_stream,
            (command, agentix_bash::BashOptions::new()),
        )
        .await
        .unwrap();
    support::wait_until("the command's processes", Duration::from_secs(10), || {
        processes_with(&marker).len() >= 5
    })
    .await;
    drop(stream);
    gone(&marker, "after a cancel").await;

    let marker = unique_sleep();
    let command = format!("{} sleep {marker}", scattered(&marker));
    let opts = agentix_bash::BashOptions::new().timeout(Duration::from_millis(700));
    let out = sb.remote(agentix_bash::run, (command, opts)).await.unwrap();
    assert!(out.timed_out);
    gone(&marker, "after a timeout").await;
}

/// Runs a command that leaves scattered background jobs and ends; returns
/// their marker once they are all seen running.
async fn leave_background_jobs(sb: &agentix::Sandbox) -> String {
    let marker = unique_sleep();
    sb.remote(
        agentix_bash::run,
        (scattered(&marker), agentix_bash::BashOptions::new()),
    )
    .await
    .unwrap();
    support::wait_until("the background jobs", Duration::from_secs(10), || {
        processes_with(&marker).len() >= 4
    })
    .await;
    marker
}

#[tokio::test]
async fn background_jobs_live_until_the_worker_or_the_sandbox_goes() {
    let sb = sandbox().await;
    // A command that ran to its end keeps its background jobs (`server &`).
    let marker = leave_background_jobs(&sb).await;
    let err = sb
        .remote(agentix_e2e::crash, ("sigkill".to_owned(),))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::WorkerExited, "{err}");
    gone(&marker, "after the worker died").await;

    let marker = leave_background_jobs(&sb).await;
    sb.delete().await;
    gone(&marker, "after delete").await;
}

#[tokio::test]
async fn the_durable_log_lives_in_the_sandbox_and_a_shared_directory_is_refused() {
    // By default: inside the sandbox's private directory, gone with it.
    let sb = sandbox().await;
    sb.remote(agentix_e2e::chatter, (3, 0, 0)).await.unwrap();
    let logs = sb.local_dir().unwrap().join("logs");
    support::wait_until("the sandbox log file", Duration::from_secs(10), || {
        std::fs::read_dir(&logs).is_ok_and(|mut d| d.next().is_some())
    })
    .await;
    let root = sb.local_dir().unwrap().to_owned();
    sb.delete().await;
    assert!(!root.exists());

    // A directory others may write, with a symlink planted in it, is not used.
    use std::os::unix::fs::PermissionsExt;
    let shared = support::scratch_dir("shared-logs");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let victim = shared.join("victim.txt");
    std::fs::write(&victim, "one line\n").unwrap();
    for generation in 1..4 {
        let _ =
            std::os::unix::fs::symlink(&victim, shared.join(format!("sandbox-x-{generation}.log")));
    }
    let config = agentix::SandboxConfig::new(support::bundle_path())
        .env("AGENTIX_LOG_DIR", shared.to_str().unwrap());
    let sb = support::sandbox_with(config).await;
    sb.remote(agentix_e2e::chatter, (50, 50, 0)).await.unwrap();
    assert_eq!(sb.remote(agentix_e2e::add, (1, 1)).await.unwrap(), 2);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "one line\n");
    let files: Vec<_> = std::fs::read_dir(&shared)
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.file_name())
        .collect();
    assert_eq!(files, ["victim.txt"], "nothing was written there");
    let _ = std::fs::remove_dir_all(&shared);
}

#[tokio::test]
async fn no_socket_io_session_opens_without_the_token_on_the_request() {
    let sb = sandbox().await;
    for token in [None, Some("not-the-token")] {
        let refused = RawSocket::try_open(sb.addr(), token, "/rpc").await;
        match refused {
            Err(tokio_tungstenite::tungstenite::Error::Http(res)) => {
                assert_eq!(res.status(), 401, "{token:?}")
            }
            Err(other) => panic!("{token:?}: refused, but not with 401: {other}"),
            Ok(_) => panic!("{token:?}: a websocket opened without the token"),
        }
    }
    let polling = "/socket.io/?EIO=4&transport=polling";
    assert_eq!(
        support::raw_socket::http_status(sb.addr(), polling, None).await,
        401
    );
    // With it, a raw client gets in and is served.
    let mut raw = RawSocket::connect(sb.addr(), sb.token()).await;
    raw.emit("heartbeat", json!({"seq": 1})).await;
    let (name, _) = raw.recv_event().await.unwrap();
    assert_eq!(name, "heartbeat");
}

#[tokio::test]
async fn transfers_run_on_spawned_tasks_and_downloads_follow_no_planted_symlink() {
    use std::sync::Arc;
    let sb = Arc::new(sandbox().await);
    let dir = support::scratch_dir("transfer-send");
    let remote = sb.local_dir().unwrap().join("up.bin");
    let remote = remote.to_str().unwrap().to_owned();
    // The helpers' futures are Send: they run inside tokio::spawn.
    let up = {
        let (sb, remote) = (sb.clone(), remote.clone());
        tokio::spawn(async move {
            agentix_files::transfer::upload_bytes(&sb, &[7u8; 3 << 20], &remote).await
        })
    };
    up.await.unwrap().unwrap();
    let local = dir.join("down.bin");
    let down = {
        let (sb, remote, local) = (sb.clone(), remote.clone(), local.clone());
        tokio::spawn(
            async move { agentix_files::transfer::download_to(&sb, &remote, &local).await },
        )
    };
    assert_eq!(down.await.unwrap().unwrap(), 3 << 20);
    assert_eq!(std::fs::read(&local).unwrap(), vec![7u8; 3 << 20]);
    // The old predictable temporary name, planted as a symlink, is not followed.
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, "keep me\n").unwrap();
    let planted = dir.join(format!(
        ".again.bin.agentix-download-{}",
        std::process::id()
    ));
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    agentix_files::transfer::download_to(&sb, &remote, dir.join("again.bin"))
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_upload_commits_only_when_every_byte_came_exactly_once() {
    use agentix::Blob;
    use agentix_files::{upload_chunk, upload_commit, upload_open, FileError, FileErrorKind};
    let sb = sandbox().await;
    let target = sb.local_dir().unwrap().join("covered.bin");
    let target = target.to_str().unwrap().to_owned();
    let kind = |e: agentix::RemoteError| e.data_as::<FileError>().ok().map(|f| f.kind);

    // Two 8-byte chunks at offset 0 do not make 16 bytes.
    let id = sb
        .remote(upload_open, (target.clone(), None))
        .await
        .unwrap();
    sb.remote(upload_chunk, (id, 0, Blob::from(vec![1u8; 8])))
        .await
        .unwrap();
    let again = sb
        .remote(upload_chunk, (id, 0, Blob::from(vec![2u8; 8])))
        .await
        .unwrap_err();
    assert_eq!(kind(again), Some(FileErrorKind::InvalidInput));
    let err = sb.remote(upload_commit, (id, 16)).await.unwrap_err();
    assert_eq!(kind(err), Some(FileErrorKind::InvalidInput));
    assert!(
        !std::path::Path::new(&target).exists(),
        "nothing was written"
    );

    // A chunk a terabyte away is refused; a gap fails the commit.
    let id = sb
        .remote(upload_open, (target.clone(), None))
        .await
        .unwrap();
    let far = sb
        .remote(upload_chunk, (id, 1 << 40, Blob::from(vec![0u8; 8])))
        .await
        .unwrap_err();
    assert_eq!(kind(far), Some(FileErrorKind::InvalidInput));
    sb.remote(upload_chunk, (id, 8, Blob::from(vec![3u8; 8])))
        .await
        .unwrap();
    let gap = sb.remote(upload_commit, (id, 16)).await.unwrap_err();
    assert_eq!(kind(gap), Some(FileErrorKind::InvalidInput));

    // Every byte once, in any order: committed.
    let id = sb
        .remote(upload_open, (target.clone(), None))
        .await
        .unwrap();
    sb.remote(upload_chunk, (id, 8, Blob::from(vec![5u8; 8])))
        .await
        .unwrap();
    sb.remote(upload_chunk, (id, 0, Blob::from(vec![4u8; 8])))
        .await
        .unwrap();
    let stat = sb.remote(upload_commit, (id, 16)).await.unwrap();
    assert_eq!(stat.size, 16);
    let mut want = vec![4u8; 8];
    want.extend([5u8; 8]);
    assert_eq!(std::fs::read(&target).unwrap(), want);
}

#[tokio::test]
async fn a_result_too_large_for_a_frame_fails_its_call_not_the_worker() {
    let sb = sandbox().await;
    let pid = sb.remote(agentix_e2e::worker_pid, ()).await.unwrap();
    let beside = sb.remote(agentix_e2e::sleep_ms, (1_500,));
    let huge = sb
        .remote(agentix_e2e::make_blob, (258 << 20,))
        .timeout(Duration::from_secs(60));
    let (beside, huge) = tokio::join!(beside.into_future(), huge.into_future());
    let err = huge.unwrap_err();
    assert_eq!(err.kind, ErrorKind::PayloadTooLarge, "{err}");
    assert_eq!(beside.unwrap(), 1_500, "a call beside it goes on");
    assert_eq!(sb.remote(agentix_e2e::worker_pid, ()).await.unwrap(), pid);
}

#[tokio::test]
async fn a_namespace_request_dropped_early_leaves_nothing_waiting() {
    let sb = sandbox().await;
    // A host that takes `silent` and never answers it.
    sb.register_namespace(agentix::HostNamespace::new("/e2e-plugin").on("silent", |_, _| async {}))
        .unwrap();
    sb.remote(agentix_e2e::open_plugin, ()).await.unwrap();
    assert_eq!(
        sb.remote(agentix_e2e::abandon_requests, (200,))
            .await
            .unwrap(),
        0
    );
}

#[tokio::test]
async fn a_request_whose_headers_never_end_is_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sb = sandbox().await;
    let mut slow = tokio::net::TcpStream::connect(sb.addr()).await.unwrap();
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .unwrap();
    // Meanwhile the server serves others.
    assert_eq!(
        support::raw_socket::http_status(sb.addr(), "/health", None).await,
        200
    );
    let mut buf = [0u8; 256];
    let closed = tokio::time::timeout(Duration::from_secs(30), slow.read(&mut buf))
        .await
        .expect("the server closes a connection whose headers never end");
    // Closed: end of stream, a reset, or at most an error response first.
    if let Ok(n) = closed {
        let text = String::from_utf8_lossy(&buf[..n]);
        assert!(n == 0 || text.starts_with("HTTP/1.1 408"), "{text}");
    }
}

#[tokio::test]
async fn a_reply_the_server_cannot_read_ends_its_call_with_protocol() {
    let sb = sandbox().await;
    // Worker call ids count from 1 per server: this is call 1, the next 2.
    let pid = sb.remote(agentix_e2e::worker_pid, ()).await.unwrap();
    let err = tokio::time::timeout(
        Duration::from_secs(8),
        sb.remote(agentix_e2e::reply_garbage, (2,)).into_future(),
    )
    .await
    .expect("the call ended at its unreadable reply, not at its real one")
    .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Protocol, "{err}");
    assert!(err.message.contains("could not be read"), "{err}");
    assert_eq!(sb.remote(agentix_e2e::worker_pid, ()).await.unwrap(), pid);
}

#[tokio::test]
async fn unauthenticated_clients_cannot_make_the_server_hold_their_messages() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sb = sandbox().await;
    assert_eq!(sb.remote(agentix_e2e::add, (1, 1)).await.unwrap(), 2);
    let server = sb.server_pid().unwrap();
    let before = support::rss_kib(server);
    let junk = vec![b'A'; 15 << 20];
    let clients = (0..64).map(|_| {
        let (addr, junk) = (sb.addr().to_owned(), junk.clone());
        tokio::spawn(async move {
            let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let upgrade = format!(
                "GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nHost: {addr}\r\n\
                 Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
                 Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
            );
            tcp.write_all(upgrade.as_bytes()).await.unwrap();
            let mut head = [0u8; 12];
            let _ = tcp.read_exact(&mut head).await;
            assert_eq!(
                &head, b"HTTP/1.1 401",
                "an unauthenticated upgrade is refused"
            );
            // Whatever it sends next is not a message the server keeps.
            let _ = tokio::time::timeout(Duration::from_secs(5), tcp.write_all(&junk)).await;
        })
    });
    for client in futures_util::future::join_all(clients).await {
        client.unwrap();
    }
    let after = support::rss_kib(server);
    assert!(
        after < before + (32 << 10),
        "the server grew from {before} to {after} KiB for 64 unauthenticated clients"
    );
    assert_eq!(sb.remote(agentix_e2e::add, (2, 2)).await.unwrap(), 4);
}

#[tokio::test]
async fn a_frozen_worker_shows_in_health_and_the_default_timeout_ends_calls() {
    let config = support::plain(agentix::SandboxConfig::new(support::bundle_path()))
        .call_timeout(Duration::from_millis(1500));
    let sb = support::sandbox_with(config).await;
    let pid = sb.remote(agentix_e2e::worker_pid, ()).await.unwrap();
    assert_eq!(sb.health().await.unwrap()["status"], "ok");
    support::freeze(pid).await;
    let err = sb.remote(agentix_e2e::add, (1, 2)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err}");
    let started = std::time::Instant::now();
    let health = loop {
        let health = sb.health().await.unwrap();
        if health["status"] == "unresponsive" || started.elapsed() > Duration::from_secs(15) {
            break health;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    agentix_wire::process::signal_pid(pid, libc::SIGCONT);
    assert_eq!(health["status"], "unresponsive", "{health}");
    assert_eq!(health["worker"]["state"], "unresponsive", "{health}");
    assert!(
        health["worker"]["silent_ms"].as_u64().unwrap() >= 3000,
        "{health}"
    );
    // Woken up, it answers again, and so does /health.
    assert_eq!(sb.remote(agentix_e2e::add, (2, 2)).await.unwrap(), 4);
    let started = std::time::Instant::now();
    while sb.health().await.unwrap()["status"] != "ok" {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "still unresponsive"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A call's own timeout wins over the sandbox's default.
    let slept = sb
        .remote(agentix_e2e::sleep_ms, (2000,))
        .timeout(Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(slept, 2000);
}

#[tokio::test]
async fn a_host_that_floods_a_plugin_namespace_and_never_reads_costs_the_server_bounded_memory() {
    host_floods_and_never_reads(4 << 10).await;
}

#[tokio::test]
async fn a_flood_of_large_plugin_events_costs_the_server_bounded_memory_too() {
    // Queues bounded by their count of events alone let this one through
    // whole: 3,000 events of 64 KiB fit under every count limit.
    host_floods_and_never_reads(64 << 10).await;
}

/// Every `configure` is echoed back as `configured`, which this host never
/// reads: 200 MB of `bytes`-sized events, and as many echoes, pile up at
/// a worker and a socket nobody drains.
async fn host_floods_and_never_reads(bytes: usize) {
    let _flooding = ONE_FLOOD_AT_A_TIME.lock().await;
    let sb = sandbox().await;
    sb.remote(agentix_e2e::open_plugin, ()).await.unwrap();
    let server = sb.server_pid().expect("a local sandbox");
    let before = support::rss_kib(server);
    let raw = flood_e2e_plugin(&sb, "configure", bytes).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let grown = support::rss_kib(server).saturating_sub(before);
    // Bounded in bytes: 8 MiB queued for the worker's pipe and 8 MiB
    // waiting behind it, 8 MiB of echoes queued for the host and 8 MiB in
    // the host's socket (which, bounded by its count of packets alone,
    // once held 147 MiB of 64 KiB echoes here); the rest is slack for the
    // allocator. Measured: 9–35 MiB.
    assert!(
        grown < 64 << 10,
        "the server grew by {grown} KiB for a host that does not read"
    );
    let health = sb.health().await.unwrap();
    let dropped = health["plugin_events_not_sent_to_lagging_hosts"]
        .as_u64()
        .unwrap()
        + health["plugin_events_not_sent_to_lagging_worker"]
            .as_u64()
            .unwrap();
    assert!(dropped > 0, "nothing was dropped, so it was held: {health}");
    // Other hosts are served meanwhile.
    assert_answers_within(&sb, Duration::from_secs(10)).await;
    drop(raw);
}

#[tokio::test]
async fn a_host_that_floods_a_frozen_worker_costs_the_server_bounded_memory() {
    let _flooding = ONE_FLOOD_AT_A_TIME.lock().await;
    let sb = support::plain_sandbox().await;
    sb.remote(agentix_e2e::open_plugin, ()).await.unwrap();
    let server = sb.server_pid().expect("a local sandbox");
    let worker = support::worker_pid_from_health(&sb).await;
    let before = support::rss_kib(server);
    support::freeze(worker).await;
    // 200 MB of events for a worker that reads nothing.
    let raw = flood_e2e_plugin(&sb, "status:get", 4 << 10).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let grown = support::rss_kib(server).saturating_sub(before);
    let health = sb.health().await.unwrap();
    agentix_wire::process::signal_pid(worker, libc::SIGCONT);
    assert!(
        grown < 96 << 10,
        "the server grew by {grown} KiB for a worker that does not read"
    );
    assert!(
        health["plugin_events_not_sent_to_lagging_worker"]
            .as_u64()
            .unwrap()
            > 0,
        "{health}"
    );
    // Thawed, the worker serves again.
    assert_answers_within(&sb, Duration::from_secs(20)).await;
    drop(raw);
}

/// Held by each test that floods a server with 200 MB: run side by side on
/// two cores, one flood starved the other until its raw connection broke,
/// and each measures its own server's memory besides.
static ONE_FLOOD_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A raw host on `/e2e-plugin` that has emitted 200 MB of `event`s of
/// `bytes` each, or as many as it could before the server cut it off, and
/// reads nothing.
async fn flood_e2e_plugin(sb: &agentix::Sandbox, event: &str, bytes: usize) -> RawSocket {
    let mut raw = RawSocket::connect_ns(sb.addr(), sb.token(), "/e2e-plugin").await;
    let frame = flood_frame(event, bytes);
    for _ in 0..200_000_000 / bytes {
        // On a slow machine the flood can outlast the heartbeat: the server
        // then drops this host, which does not answer pings, and that ends
        // the flood.
        if raw.try_send(&frame).await.is_err() {
            break;
        }
    }
    raw
}

/// One `/e2e-plugin` event frame carrying `bytes` bytes.
fn flood_frame(event: &str, bytes: usize) -> String {
    format!("42/e2e-plugin,{}", json!([event, "x".repeat(bytes)]))
}

#[tokio::test]
async fn a_host_that_takes_no_bytes_is_cut_off_and_its_connection_closed() {
    let _flooding = ONE_FLOOD_AT_A_TIME.lock().await;
    let config = agentix::SandboxConfig::new(support::bundle_path())
        .server_arg("--ping-interval-ms", "1000")
        .server_arg("--ping-timeout-ms", "1000");
    let sb = support::sandbox_with(config).await;
    sb.remote(agentix_e2e::open_plugin, ()).await.unwrap();
    let server = sb.server_pid().expect("a local sandbox");
    let sockets_before = support::open_sockets(server);
    // Every `configure` is echoed back as `configured`; this host reads
    // none of them nor the server's pings, so the server's writes to it
    // stall while it goes on sending.
    let mut raw = RawSocket::connect_ns(sb.addr(), sb.token(), "/e2e-plugin").await;
    let frame = flood_frame("configure", 64 << 10);
    let flood = async {
        let mut sent = 0u64;
        while raw.try_send(&frame).await.is_ok() {
            sent += 1;
        }
        sent
    };
    // Before the server closed a stalled connection, its writer waited on
    // it for ever and the host's sends then blocked for ever.
    let sent = tokio::time::timeout(Duration::from_secs(120), flood)
        .await
        .expect("the server closes the connection of a host that takes no bytes");
    assert!(sent > 0, "the flood never started");
    support::wait_until(
        "the server lets go of the host's socket",
        Duration::from_secs(20),
        || support::open_sockets(server) <= sockets_before,
    )
    .await;
    // The server serves on.
    assert_answers_within(&sb, Duration::from_secs(10)).await;
}

/// Asserts that `sb` answers a call correctly within `limit`.
async fn assert_answers_within(sb: &agentix::Sandbox, limit: Duration) {
    let sum = sb
        .remote(agentix_e2e::add, (1, 2))
        .timeout(limit)
        .await
        .unwrap();
    assert_eq!(sum, 3);
}

/// Sets process `pid`'s soft limit on its user's processes and threads
/// (`hard` for its hard limit, or a number), as that user (root without CAP_SYS_RESOURCE
/// may not change another user's limits).
fn limit_processes(pid: u32, soft: &str) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_owned();
    let soft = match soft {
        "hard" => {
            let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
            let line = limits
                .lines()
                .find(|l| l.starts_with("Max processes"))
                .unwrap();
            line.split_whitespace().nth(3).unwrap().to_owned()
        }
        n => n.to_owned(),
    };
    let prlimit = [
        "prlimit".to_owned(),
        format!("--pid={pid}"),
        format!("--nproc={soft}:"),
    ];
    let mut command = match agentix::host_is_root() {
        true => {
            let mut setpriv = std::process::Command::new("setpriv");
            setpriv.args([
                format!("--reuid={uid}"),
                format!("--regid={uid}"),
                "--clear-groups".to_owned(),
            ]);
            setpriv.args(prlimit);
            setpriv
        }
        // The sandbox runs as this user: its limits are this user's to set.
        false => {
            let mut own = std::process::Command::new(&prlimit[0]);
            own.args(&prlimit[1..]);
            own
        }
    };
    let out = command.output().expect("setpriv and prlimit (util-linux)");
    assert!(out.status.success(), "{out:?}");
}

// Hardening, second round: a fork bomb under a pids limit left the worker
// unable to start a thread; calls that needed one panicked, and one such
// panic in a destructor aborted the worker ("panic in a destructor during
// cleanup"), ending every call with WorkerExited.
#[tokio::test]
async fn a_worker_that_cannot_start_threads_fails_those_calls_clearly_and_lives() {
    let sb = support::plain_sandbox().await;
    let worker = sb.remote(agentix_e2e::worker_pid, ()).await.unwrap();
    // A fork bomb under a process limit: it fails, the worker does not.
    let uid_tasks = std::fs::read_dir("/proc").unwrap().count();
    limit_processes(worker, &(uid_tasks + 60).to_string());
    let options = agentix_bash::BashOptions::new().timeout(Duration::from_secs(3));
    let bomb = sb
        .remote(
            agentix_bash::run,
            (":(){ :|:& };:; sleep 30".to_owned(), options),
        )
        .await
        .expect("the bomb's command ends with a result");
    assert!(bomb.timed_out, "{bomb:?}");
    let stderr = String::from_utf8_lossy(&bomb.stderr);
    assert!(
        stderr.contains("Resource temporarily unavailable"),
        "{stderr}"
    );
    // Let the runtime's idle blocking threads time out, as in a long call,
    // then let the worker's user start no process and no thread at all.
    tokio::time::sleep(Duration::from_secs(11)).await;
    limit_processes(worker, "1");
    // A shell started before may still run it; a new one cannot start.
    let bash = sb
        .remote(
            agentix_bash::run,
            ("/bin/true".to_owned(), Default::default()),
        )
        .await;
    if let Err(e) = &bash {
        assert_eq!(e.kind, ErrorKind::Raised, "{e}");
        assert!(
            e.message.contains("Resource temporarily unavailable"),
            "{e}"
        );
    }
    // What runs on the worker's blocking threads and a flood of logs (whose
    // queue, when full, hands the thread's tasks to another) still work.
    let stat = sb.remote(agentix_files::stat, ".".to_owned()).await;
    assert!(stat.is_ok(), "{stat:?}");
    let flood = sb.remote(agentix_e2e::chatter, (100_000, 100_000, 0)).await;
    assert_eq!(flood.ok(), Some(200_000));
    limit_processes(worker, "hard");
    assert_eq!(
        sb.remote(agentix_e2e::worker_pid, ()).await.unwrap(),
        worker,
        "the worker was replaced"
    );
    assert_eq!(stdout_of(&sb, "echo back".to_owned()).await, "back\n");
}

/// A line of `/proc/<pid>/status` (`VmRSS`, `VmHWM`) in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {status}"))
}

// Hardening, second round: one 200 MiB text event with the token (under the
// 256 MiB message limit) took the server to 648 MB and left the host
// without a successful call for 21-40 s.
#[tokio::test]
async fn a_huge_text_event_is_refused_on_its_header_and_the_host_calls_on() {
    let sb = sandbox().await;
    let server = sb.server_pid().unwrap();
    assert_eq!(sb.remote(agentix_e2e::add, (1, 1)).await.unwrap(), 2);
    let before = status_kib(server, "VmRSS");
    let mut raw = RawSocket::connect(sb.addr(), sb.token()).await;
    let huge = format!(
        "42/rpc,[\"call\",{{\"id\":1,\"target\":\"agentix_e2e::echo\",\"args\":\"{}\"}}]",
        "A".repeat(200 << 20)
    );
    let refused = async { raw.try_send(&huge).await.is_err() || raw.recv().await.is_none() };
    let call = sb.remote(agentix_e2e::add, (1, 2)).into_future();
    let (refused, answer) = tokio::join!(refused, call);
    assert!(refused, "the server read a 200 MiB text event");
    assert_eq!(answer.unwrap(), 3);
    let peak = status_kib(server, "VmHWM");
    assert!(
        peak < before + (64 << 10),
        "the server grew from {before} KiB to a peak of {peak} KiB"
    );
    assert_eq!(sb.remote(agentix_e2e::add, (2, 2)).await.unwrap(), 4);
}

// Hardening, second round: a reply of any size reached the host whole (a
// 200 MiB text reply took it to 814 MB). Now no websocket message is over
// 16 MiB, so a sandbox's error of any size must be cut to fit, not cost
// the host its connection.
#[tokio::test]
async fn an_error_of_any_size_reaches_the_host_cut_to_fit() {
    let sb = sandbox().await;
    let huge = "x".repeat(20 << 20);
    let err = sb.remote(agentix_e2e::explode, huge).await.unwrap_err();
    let start: String = err.message.chars().take(200).collect();
    assert_eq!(err.kind, ErrorKind::Panic, "{start}");
    assert!(
        err.message.len() <= agentix_wire::errors::MAX_ERROR_TEXT + 64,
        "{} bytes",
        err.message.len()
    );
    assert!(
        err.message.ends_with("bytes cut]"),
        "{}",
        &err.message[..200]
    );
    assert_eq!(sb.remote(agentix_e2e::add, (1, 1)).await.unwrap(), 2);
}

// Hardening, second round: one 200 MiB plugin event took the host to
// 425 MB. Now a sandbox's event or request too large for one websocket
// message is refused by its server, with an error, not sent.
#[tokio::test]
async fn a_plugin_request_too_large_for_a_message_is_refused_with_an_error() {
    let sb = sandbox().await;
    let ns = agentix::HostNamespace::new("/e2e-plugin")
        .request_handler("fetch", |_| async { Ok::<_, String>(json!("small")) });
    sb.register_namespace(ns).unwrap();
    assert_eq!(
        sb.remote(agentix_e2e::open_plugin, ()).await.unwrap(),
        "open"
    );
    let small = sb
        .remote(agentix_e2e::ask_host_padded, 1024usize)
        .await
        .unwrap();
    assert_eq!(small, json!("small"));
    let huge = sb
        .remote(agentix_e2e::ask_host_padded, 20usize << 20)
        .await
        .unwrap_err()
        .message;
    assert!(huge.starts_with("raised TooLarge:"), "{huge}");
    assert!(huge.contains("send large data as bytes"), "{huge}");
    assert_eq!(sb.remote(agentix_e2e::add, (1, 1)).await.unwrap(), 2);
}
