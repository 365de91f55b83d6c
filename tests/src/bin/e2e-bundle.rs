//! The bundle the end-to-end tests run: the e2e remote functions plus two
//! test-only roles.
//!
//! - `AGENTIX_E2E_WORKER_FAIL=1` makes the worker fail at boot, printing a
//!   reason on stderr (to test "worker failed to start").
//! - `host-then-wait` makes it a host that starts a sandbox of itself, prints
//!   `{server_pid, worker_pid, dir}` and waits to be killed (to test cleanup
//!   when the host dies).
//! - `AGENTIX_E2E_GARBAGE=KIND` with `AGENTIX_E2E_GARBAGE_ONCE=FILE` makes
//!   the first worker (the one that creates FILE) write a bad frame before
//!   serving: `malformed` (valid length, invalid CBOR), `stray` (a result for
//!   a call that does not exist), `oversized` (a length prefix past the
//!   limit) or `truncated` (half a frame, then exit).
//! - `attach-and-call ADDR TOKEN PATH` makes it a host that attaches to a
//!   running server and calls `write_after(PATH, 1500)`, waiting to be
//!   killed mid-call (to test that a dead host's calls are cancelled).

use agentix::{LocalProvider, Provider, SandboxConfig};
use agentix_e2e as _;

fn main() {
    agentix::link_plugins!(agentix_bash, agentix_files, agentix_abridge, agentix_egress);
    let role = std::env::args().nth(1);
    if role.as_deref() == Some("worker") && std::env::var_os("AGENTIX_E2E_WORKER_FAIL").is_some() {
        eprintln!("e2e worker: refusing to start because AGENTIX_E2E_WORKER_FAIL is set");
        std::process::exit(3);
    }
    if role.as_deref() == Some("worker") {
        write_garbage_once();
    }
    if role.as_deref() == Some("host-then-wait") {
        host_then_wait();
        return;
    }
    if role.as_deref() == Some("attach-and-call") {
        let args: Vec<String> = std::env::args().skip(2).collect();
        let [addr, token, path] = args.as_slice() else {
            eprintln!("usage: e2e-bundle attach-and-call ADDR TOKEN PATH");
            std::process::exit(2);
        };
        attach_and_call(addr, token, path);
        return;
    }
    agentix::bundle::main_with(agentix_e2e::worker_setup)
}

#[tokio::main]
async fn host_then_wait() {
    // A plain process tree: the test follows the worker's pid from the host.
    let config = SandboxConfig::current_exe()
        .expect("own path")
        .isolation(agentix::Isolation::None);
    let sandbox = LocalProvider::new().session(config).await.expect("sandbox");
    let worker_pid = sandbox
        .remote(agentix_e2e::worker_pid, ())
        .await
        .expect("worker answers");
    let report = serde_json::json!({
        "server_pid": sandbox.server_pid(),
        "worker_pid": worker_pid,
        "dir": sandbox.local_dir(),
    });
    println!("{report}");
    std::future::pending::<()>().await;
}

#[tokio::main]
async fn attach_and_call(addr: &str, token: &str, path: &str) {
    let sandbox = agentix::Sandbox::attach(addr, token);
    let outcome = sandbox
        .remote(agentix_e2e::write_after, (path.to_owned(), 1500))
        .await;
    println!("{outcome:?}");
}

/// Writes the bad frame `AGENTIX_E2E_GARBAGE` asks for to the frame pipe,
/// in the first worker only.
fn write_garbage_once() {
    use std::io::Write;
    use std::os::fd::FromRawFd;

    let (Ok(kind), Ok(marker)) = (
        std::env::var("AGENTIX_E2E_GARBAGE"),
        std::env::var("AGENTIX_E2E_GARBAGE_ONCE"),
    ) else {
        return;
    };
    let first = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&marker)
        .is_ok();
    if !first {
        return;
    }
    let mut bytes = Vec::new();
    match kind.as_str() {
        "malformed" => {
            bytes.extend_from_slice(&4u32.to_be_bytes());
            bytes.extend_from_slice(&[0xff, 0xfe, 0xfd, 0xfc]);
        }
        "stray" => {
            let frame = agentix_wire::wire::Frame::Result {
                id: 987_654,
                value: vec![0xf6].into(),
            };
            agentix_wire::codec::encode_into(frame, &mut bytes);
        }
        "oversized" => bytes.extend_from_slice(&0xffff_fff0u32.to_be_bytes()),
        "truncated" => {
            bytes.extend_from_slice(&100u32.to_be_bytes());
            bytes.extend_from_slice(&[0xa1; 10]);
        }
        other => panic!("unknown AGENTIX_E2E_GARBAGE kind {other}"),
    }
    // SAFETY: fd 4 is the frame pipe the server gave this worker; the
    // ManuallyDrop keeps it open for the worker runtime that claims it next.
    let mut pipe = std::mem::ManuallyDrop::new(unsafe {
        std::fs::File::from_raw_fd(agentix_wire::wire::WORKER_FRAME_OUT_FD)
    });
    pipe.write_all(&bytes).expect("frame pipe writable");
    if kind == "truncated" {
        std::process::exit(0);
    }
}
