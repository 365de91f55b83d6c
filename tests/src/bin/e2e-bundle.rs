//! The bundle the end-to-end tests run: the e2e remote functions plus two
//! test-only roles.
//!
//! - `AGENTIX_E2E_WORKER_FAIL=1` makes the worker fail at boot, printing a
//!   reason on stderr (to test "worker failed to start").
//! - `host-then-wait` makes it a host that starts a sandbox of itself, prints
//!   `{server_pid, worker_pid, dir}` and waits to be killed (to test cleanup
//!   when the host dies).
//! - `attach-and-call ADDR TOKEN PATH` makes it a host that attaches to a
//!   running server and calls `write_after(PATH, 1500)`, waiting to be
//!   killed mid-call (to test that a dead host's calls are cancelled).

use agentix::{LocalProvider, Provider, SandboxConfig};
use agentix_e2e as _;

fn main() {
    let role = std::env::args().nth(1);
    if role.as_deref() == Some("worker") && std::env::var_os("AGENTIX_E2E_WORKER_FAIL").is_some() {
        eprintln!("e2e worker: refusing to start because AGENTIX_E2E_WORKER_FAIL is set");
        std::process::exit(3);
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
    agentix::bundle::main()
}

#[tokio::main]
async fn host_then_wait() {
    let config = SandboxConfig::current_exe().expect("own path");
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
