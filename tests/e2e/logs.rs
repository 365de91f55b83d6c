//! `/log`: everything a sandbox logs or prints reaches the host, complete
//! and in order, and stays on disk in the sandbox.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentix::{ErrorKind, LogRecord, SandboxConfig};
use agentix_wire::process::signal_pid;
use support::{bundle_path, rss_kib, sandbox_with, scratch_dir, wait_until};

type Seen = Arc<Mutex<Vec<LogRecord>>>;

/// A config whose log tap collects every record, with logs written to `dir`.
fn collecting(dir: &std::path::Path) -> (SandboxConfig, Seen) {
    let seen: Seen = Arc::default();
    let tap = seen.clone();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    // The log directory is one the test made: the sandbox runs as the
    // host's user, who owns it (a log directory must be the writer's own),
    // as a plain process tree that sees the host's files.
    let config = SandboxConfig::new(bundle_path())
        .isolation(agentix::Isolation::None)
        .run_as(agentix::RunAs::HostUser)
        .env("AGENTIX_LOG_DIR", dir.to_str().unwrap())
        .env("RUST_BACKTRACE", "0")
        .on_log(move |_, r| tap.lock().unwrap().push(r.clone()));
    (config, seen)
}

fn has(seen: &Seen, target: &str, message: &str) -> bool {
    seen.lock()
        .unwrap()
        .iter()
        .any(|r| r.target == target && r.message == message)
}

#[tokio::test]
async fn every_way_of_writing_output_reaches_the_host() {
    let dir = scratch_dir("logs-paths");
    let (config, seen) = collecting(&dir);
    let sb = sandbox_with(config).await;
    assert!(sb.remote(agentix_e2e::noisy, ()).await.unwrap());
    let err = sb
        .remote(agentix_e2e::explode, ("kaboom".into(),))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Panic);
    let expected = [
        ("agentix.sandbox.stdout", "from println"),
        ("agentix.sandbox.stderr", "from eprintln"),
        ("agentix.sandbox.stdout", "from child"),
        ("agentix.sandbox.stderr", "child complains"),
        ("agentix.sandbox.stdout", "from write(2)"),
        ("agentix.sandbox.stdout", "bad \u{fffd} byte"),
        ("legacy::module", "from the log crate"),
        ("my_eval::agent", "structured"),
    ];
    wait_until("every line at the host", Duration::from_secs(10), || {
        expected.iter().all(|(t, m)| has(&seen, t, m))
    })
    .await;
    wait_until("the panic message", Duration::from_secs(10), || {
        seen.lock()
            .unwrap()
            .iter()
            .any(|r| r.target == "agentix.sandbox.stderr" && r.message.contains("kaboom"))
    })
    .await;
    let records = seen.lock().unwrap().clone();
    let structured = records.iter().find(|r| r.message == "structured").unwrap();
    assert_eq!(structured.level, "INFO");
    assert_eq!(structured.fields["step"], "3");
    assert_eq!(structured.fields["model"], "claude");
    assert!(structured.file.as_deref().unwrap().ends_with("lib.rs"));
    assert!(structured.line.is_some());
    let legacy = records
        .iter()
        .find(|r| r.target == "legacy::module")
        .unwrap();
    assert_eq!(legacy.level, "WARN");
    assert!(
        !legacy.fields.keys().any(|k| k.starts_with("log.")),
        "{legacy:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_partial_last_line_is_flushed_when_the_worker_ends() {
    let dir = scratch_dir("logs-partial");
    let (config, seen) = collecting(&dir);
    let sb = sandbox_with(config).await;
    let err = sb
        .remote(agentix_e2e::partial_line_then_exit, ())
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::WorkerExited);
    wait_until("the partial line", Duration::from_secs(10), || {
        has(&seen, "agentix.sandbox.stdout", "partial without newline")
    })
    .await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Collects the `burst.span` spans replayed from one sandbox.
struct BurstSpans {
    sandbox: String,
    seen: Arc<Mutex<Vec<u64>>>,
}

impl agentix::trace::Processor for BurstSpans {
    fn on_span_end(&mut self, span: &agentix::trace::SpanData) {
        if span.origin.as_deref() == Some(self.sandbox.as_str()) && span.name == "burst.span" {
            let seq = span.attributes["seq"].as_u64().unwrap();
            self.seen.lock().unwrap().push(seq);
        }
    }
}

#[tokio::test]
async fn a_burst_arrives_complete_and_in_order_per_stream() {
    let dir = scratch_dir("logs-burst");
    let (config, seen) = collecting(&dir);
    let sb = sandbox_with(config).await;
    let spans: Arc<Mutex<Vec<u64>>> = Arc::default();
    sb.traces().add_processor(BurstSpans {
        sandbox: sb.id().to_owned(),
        seen: spans.clone(),
    });
    const N: u64 = 100_000;
    const SPANS: u64 = 20_000;
    assert_eq!(
        sb.remote(agentix_e2e::chatter, (N, N, SPANS))
            .await
            .unwrap(),
        2 * N + SPANS
    );
    let count = |target: &str| {
        seen.lock()
            .unwrap()
            .iter()
            .filter(|r| r.target == target)
            .count()
    };
    wait_until(
        "every record, line and span",
        Duration::from_secs(60),
        || {
            count("agentix_e2e") as u64 >= N
                && count("agentix.sandbox.stdout") as u64 >= N
                && spans.lock().unwrap().len() as u64 >= SPANS
        },
    )
    .await;
    let spans = spans.lock().unwrap().clone();
    assert!(
        spans.iter().copied().eq(0..SPANS),
        "spans lost, duplicated or out of order"
    );
    let records = seen.lock().unwrap().clone();
    let logs: Vec<&LogRecord> = records
        .iter()
        .filter(|r| r.target == "agentix_e2e")
        .collect();
    let lines: Vec<&LogRecord> = records
        .iter()
        .filter(|r| r.target == "agentix.sandbox.stdout")
        .collect();
    assert_eq!(logs.len() as u64, N, "records lost or duplicated");
    assert_eq!(lines.len() as u64, N, "lines lost or duplicated");
    for (i, r) in logs.iter().enumerate() {
        assert_eq!(r.fields["seq"], i.to_string(), "records out of order");
    }
    for (i, r) in lines.iter().enumerate() {
        assert_eq!(r.message, format!("line {i}"), "lines out of order");
    }
    assert!(
        !records.iter().any(|r| r.message.contains("dropped")),
        "nothing may be dropped while a host listens"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_log_file_keeps_the_output_of_a_killed_worker() {
    let dir = scratch_dir("logs-file");
    let (config, seen) = collecting(&dir);
    let sb = sandbox_with(config).await;
    assert_eq!(
        sb.remote(agentix_e2e::chatter, (50, 50, 0)).await.unwrap(),
        100
    );
    let health = sb.health().await.unwrap();
    let worker_id = health["worker"]["id"].as_str().unwrap().to_owned();
    let pid = health["worker"]["pid"].as_u64().unwrap() as u32;
    wait_until("the lines at the host", Duration::from_secs(10), || {
        has(&seen, "agentix.sandbox.stdout", "line 49")
    })
    .await;
    signal_pid(pid, libc::SIGKILL);
    let file = dir.join(format!("sandbox-{worker_id}.log"));
    wait_until("the log file", Duration::from_secs(10), || file.exists()).await;
    let text = std::fs::read_to_string(&file).unwrap();
    for i in 0..50 {
        assert!(
            text.contains(&format!("agentix.sandbox.stdout: line {i}\n")),
            "line {i} missing"
        );
        assert!(
            text.contains(&format!("agentix_e2e: log {i} seq={i}\n")),
            "log {i} missing"
        );
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "sandbox logs are private");
    // The next worker writes a file of its own.
    support::wait_until_async("the worker to be replaced", || async {
        let h = sb.health().await.unwrap();
        h["worker"]["state"] == "ready" && h["worker"]["pid"] != pid
    })
    .await;
    assert_eq!(sb.remote(agentix_e2e::chatter, (1, 1, 0)).await.unwrap(), 2);
    let health = sb.health().await.unwrap();
    let next_id = health["worker"]["id"].as_str().unwrap().to_owned();
    assert_ne!(next_id, worker_id);
    let next = dir.join(format!("sandbox-{next_id}.log"));
    wait_until("the new worker's log file", Duration::from_secs(10), || {
        next.exists()
    })
    .await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_host_slows_the_sandbox_instead_of_filling_memory() {
    let dir = scratch_dir("logs-slow");
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let tap = seen.clone();
    let config = SandboxConfig::new(bundle_path())
        .env("AGENTIX_LOG_DIR", "")
        .on_log(move |_, r| {
            if r.message.starts_with("wide ") {
                // A host that takes its time with every record.
                std::thread::sleep(Duration::from_micros(40));
                tap.lock().unwrap().push(r.message.clone());
            }
        });
    let sb = sandbox_with(config).await;
    let worker = sb.remote(agentix_e2e::worker_pid, ()).await.unwrap();
    let server = sb.server_pid().unwrap();
    let (worker_before, server_before) = (rss_kib(worker), rss_kib(server));
    const N: u64 = 30_000;
    // 60 MB in all: unbounded queues would grow by that much.
    const WIDTH: usize = 2_000;
    let call = sb.remote(agentix_e2e::chatter_wide, (N, WIDTH));
    let peaks = async {
        let (mut w, mut s) = (0, 0);
        while (seen.lock().unwrap().len() as u64) < N {
            w = w.max(rss_kib(worker));
            s = s.max(rss_kib(server));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (w, s)
    };
    let (done, (worker_peak, server_peak)) = tokio::join!(call, peaks);
    assert_eq!(done.unwrap(), N);
    let got = seen.lock().unwrap().clone();
    for (i, m) in got.iter().enumerate() {
        assert!(
            m.starts_with(&format!("wide {i} ")),
            "record {i} out of order"
        );
    }
    let worker_growth = worker_peak.saturating_sub(worker_before);
    let server_growth = server_peak.saturating_sub(server_before);
    eprintln!("worker grew {worker_growth} KiB, server grew {server_growth} KiB");
    assert!(worker_growth < 12 << 10, "worker grew {worker_growth} KiB");
    assert!(server_growth < 16 << 10, "server grew {server_growth} KiB");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn records_made_while_no_host_listens_are_kept_or_counted() {
    use support::raw_socket::{placeholder, RawSocket};
    let sb = support::sandbox().await;
    // A client that makes calls but does not listen on /log.
    let mut raw = RawSocket::connect(sb.addr(), sb.token()).await;
    let args = agentix_wire::cbor::to_vec(&(120_000u64, 0u64, 0u64)).unwrap();
    raw.emit_binary(
        "call",
        serde_json::json!({"id": 1, "target": "agentix_e2e::chatter", "args": placeholder(0)}),
        vec![args],
    )
    .await;
    let (name, _) = raw.recv_event().await.unwrap();
    assert_eq!(name, "call:result");

    // A host that joins later gets the newest records and a count of the rest.
    let seen: Arc<Mutex<Vec<LogRecord>>> = Arc::default();
    let tap = seen.clone();
    let config = SandboxConfig::new(bundle_path()).on_log(move |_, r| {
        if r.target != "agentix_e2e" || r.message == "log 119999" {
            tap.lock().unwrap().push(r.clone());
        }
    });
    let late = agentix::Sandbox::attach_with(sb.addr(), sb.token(), config);
    assert_eq!(late.remote(agentix_e2e::add, (1, 1)).await.unwrap(), 2);
    wait_until(
        "the backlog at the late host",
        Duration::from_secs(30),
        || {
            seen.lock()
                .unwrap()
                .iter()
                .any(|r| r.message == "log 119999")
        },
    )
    .await;
    let notice = seen
        .lock()
        .unwrap()
        .iter()
        .find(|r| r.target == "agentix.sandbox" && r.message.contains("dropped"))
        .cloned()
        .expect("the loss is reported, not silent");
    let dropped: u64 = notice
        .message
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // About 20,000: all but the newest 100,000, less what was still on its
    // way. The backlog evicts whole batches (up to 512 records each), and the
    // worker's own boot records share it, so up to one batch more may go.
    assert!((10_000..=21_000).contains(&dropped), "{}", notice.message);
}

/// Where `got` first differs from `want`, for a short failure message.
fn first_difference(got: &[String], want: &[String]) -> Option<String> {
    let at = got.iter().zip(want).position(|(g, w)| g != w);
    match at {
        Some(i) => Some(format!("at {i}: got {:?}, want {:?}", got[i], want[i])),
        None if got.len() != want.len() => {
            Some(format!("{} messages, want {}", got.len(), want.len()))
        }
        None => None,
    }
}

/// The messages of thread `t` among `lines`, in their order.
fn thread_order<'a>(lines: impl Iterator<Item = &'a str>, t: u32) -> Vec<String> {
    let prefix = format!("t{t} ");
    lines
        .filter(|m| m.starts_with(&prefix))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn printed_lines_and_records_keep_the_order_each_thread_made_them_in() {
    const THREADS: u32 = 4;
    const ROUNDS: u32 = 300;
    let dir = scratch_dir("logs-order");
    let (config, seen) = collecting(&dir);
    let sb = sandbox_with(config).await;
    let made = sb
        .remote(agentix_e2e::interleave, (THREADS, ROUNDS))
        .await
        .unwrap();
    assert_eq!(made, THREADS * ROUNDS);
    let expected = |t: u32| -> Vec<String> {
        (0..ROUNDS)
            .flat_map(|i| [format!("t{t} line {i}"), format!("t{t} record {i}")])
            .collect()
    };
    wait_until("every line and record", Duration::from_secs(20), || {
        let seen = seen.lock().unwrap();
        seen.iter().filter(|r| r.message.starts_with('t')).count()
            >= (2 * THREADS * ROUNDS) as usize
    })
    .await;
    let records: Vec<LogRecord> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.message.starts_with('t'))
        .cloned()
        .collect();
    for t in 0..THREADS {
        let got = thread_order(records.iter().map(|r| r.message.as_str()), t);
        let diff = first_difference(&got, &expected(t));
        assert!(diff.is_none(), "thread {t}, at the host: {diff:?}");
    }
    // Numbered where they were made, arriving in that order, stamped with
    // the sandbox's clock in that order too.
    let seqs: Vec<u64> = records.iter().map(|r| r.seq.expect("a seq")).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "seq out of order");
    for t in 0..THREADS {
        let prefix = format!("t{t} ");
        let times: Vec<u64> = records
            .iter()
            .filter(|r| r.message.starts_with(&prefix))
            .map(|r| r.ts_us)
            .collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "thread {t}: time");
    }
    // The durable file keeps the same order.
    let worker_id = records[0].worker_id.clone();
    let text = std::fs::read_to_string(dir.join(format!("sandbox-{worker_id}.log"))).unwrap();
    let messages: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_once(": ").map(|(_, m)| m))
        .collect();
    for t in 0..THREADS {
        let got = thread_order(messages.iter().copied(), t);
        let diff = first_difference(&got, &expected(t));
        assert!(diff.is_none(), "thread {t}, in the log file: {diff:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_last_line_of_a_worker_killed_right_after_printing_it_reaches_the_host() {
    let dir = scratch_dir("logs-last-words");
    let (config, seen) = collecting(&dir);
    let sb = sandbox_with(config).await;
    for how in ["sigkill", "abort", "exit"] {
        let err = sb
            .remote(agentix_e2e::crash, how.to_owned())
            .await
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::WorkerExited, "{err}");
        let line = format!("e2e worker: about to crash by {how}");
        wait_until(&line, Duration::from_secs(10), || {
            has(&seen, "agentix.sandbox.stderr", &line)
        })
        .await;
    }
    let _ = std::fs::remove_dir_all(dir);
}
