//! The bash plugin through a real sandbox: results, exits and signals,
//! timeouts and caps, live streams, and cleanup of the process group.

mod support;

use std::time::{Duration, Instant};

use agentix::{ErrorKind, Sandbox, StreamExt};
use agentix_bash::{BashError, BashErrorKind, BashEvent, BashOptions, BashResult};
use support::{sandbox, scratch_dir, wait_until, worker_pid_from_health};

async fn run(sb: &Sandbox, command: &str, opts: BashOptions) -> BashResult {
    sb.remote(agentix_bash::run, (command.to_owned(), opts))
        .await
        .unwrap_or_else(|e| panic!("`{command}` failed to run: {e}"))
}

/// The pids listed one per line in `file`, once it has `count` of them.
async fn pids_in(file: &std::path::Path, count: usize) -> Vec<u32> {
    let mut pids = Vec::new();
    wait_until(
        "the command to write its pids",
        Duration::from_secs(10),
        || {
            pids = std::fs::read_to_string(file)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect();
            pids.len() >= count
        },
    )
    .await;
    pids
}

/// A command that writes the shell's pid and a background `sleep`'s pid to
/// `pids_file` (a process group of two), then runs `rest`.
fn group_of_two(pids_file: &std::path::Path, rest: &str) -> String {
    format!(
        "echo $$ > {p}; sleep 60 & echo $! >> {p}; {rest}",
        p = pids_file.display()
    )
}

async fn all_gone(pids: &[u32]) {
    wait_until(
        "the process group to be gone",
        Duration::from_secs(10),
        || pids.iter().all(|&p| !agentix::process::is_alive(p)),
    )
    .await;
}

#[tokio::test]
async fn output_exit_codes_and_signals_are_reported_faithfully() {
    let sb = sandbox().await;
    let out = run(&sb, "echo hi", BashOptions::new()).await;
    assert_eq!(out.stdout, b"hi\n");
    assert!(out.stderr.is_empty());
    assert_eq!(
        (out.exit_code, out.signal, out.timed_out),
        (Some(0), None, false)
    );
    assert!(out.success());

    let out = run(&sb, "echo oops >&2; exit 3", BashOptions::new()).await;
    assert_eq!(out.stderr, b"oops\n");
    assert_eq!(out.exit_code, Some(3));
    assert!(!out.success());

    let out = run(&sb, "kill -TERM $$", BashOptions::new()).await;
    assert_eq!((out.exit_code, out.signal), (None, Some(libc::SIGTERM)));

    let out = run(&sb, "no-such-command-anywhere", BashOptions::new()).await;
    assert_eq!(out.exit_code, Some(127));
    assert!(
        out.stderr_lossy().contains("not found"),
        "{}",
        out.stderr_lossy()
    );

    // Raw bytes survive, and the lossy view replaces what is not UTF-8.
    let out = run(&sb, r"printf 'a\377\376b'", BashOptions::new()).await;
    assert_eq!(out.stdout, b"a\xff\xfeb");
    assert_eq!(out.stdout_lossy(), "a\u{fffd}\u{fffd}b");
}

#[tokio::test]
async fn cwd_env_and_stdin_reach_the_command() {
    let sb = support::plain_sandbox().await;
    let dir = scratch_dir("bash-cwd");
    let opts = BashOptions::new()
        .cwd(dir.to_string_lossy())
        .env("GREETING", "hello there")
        .stdin("line one\nline two\n");
    let out = run(&sb, "pwd; echo \"$GREETING\"; wc -l", opts).await;
    let want = format!(
        "{}\nhello there\n2\n",
        dir.canonicalize().unwrap().display()
    );
    assert_eq!(out.stdout_lossy(), want);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_runtimes_own_variables_do_not_leak_into_commands() {
    let sb = support::plain_sandbox().await;
    let worker = worker_pid_from_health(&sb).await;
    let environ = std::fs::read(format!("/proc/{worker}/environ")).unwrap();
    let runtime_vars: Vec<String> = environ
        .split(|&b| b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .filter(|v| v.starts_with("AGENTIX_"))
        .collect();
    assert!(
        !runtime_vars.is_empty(),
        "the worker has runtime variables to hide"
    );
    let out = run(&sb, "env", BashOptions::new()).await;
    let env = out.stdout_lossy();
    assert!(env.contains("PATH="), "{env}");
    for var in runtime_vars {
        let name = var.split('=').next().unwrap();
        if name == "AGENTIX_PROCESS_TAG" {
            // Commands carry a tag of their own, under the worker's, which
            // lets the runtime find everything they start.
            let own = env
                .lines()
                .find_map(|l| l.strip_prefix("AGENTIX_PROCESS_TAG="))
                .expect("the command's tag");
            let worker_tag = var.split_once('=').unwrap().1;
            assert!(
                own.starts_with(&format!("{worker_tag}.")),
                "{own} under {worker_tag}"
            );
            continue;
        }
        assert!(!env.contains(name), "{name} leaked into the command");
    }
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_group_and_says_so() {
    let sb = support::plain_sandbox().await;
    let dir = scratch_dir("bash-timeout");
    let pids = dir.join("pids");
    let command = group_of_two(&pids, "echo started; wait");
    let out = run(
        &sb,
        &command,
        BashOptions::new().timeout(Duration::from_millis(1500)),
    )
    .await;
    assert!(out.timed_out);
    assert_eq!((out.exit_code, out.signal), (None, Some(libc::SIGKILL)));
    assert_eq!(out.stdout, b"started\n", "output before the kill is kept");
    all_gone(&pids_in(&pids, 2).await).await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn output_past_the_cap_is_drained_counted_and_marked() {
    let sb = sandbox().await;
    // 10 MB on each stream, far more than a pipe holds: the command only
    // finishes if both are drained.
    let out = run(
        &sb,
        "head -c 10000000 /dev/zero; head -c 10000000 /dev/zero >&2; echo done >&2",
        BashOptions::new().output_cap(1000),
    )
    .await;
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.stdout, vec![0u8; 1000]);
    assert_eq!(out.stdout_bytes, 10_000_000);
    assert_eq!(out.stderr_bytes, 10_000_005);
    assert!(out.stdout_truncated && out.stderr_truncated);

    let out = run(&sb, "printf 12345", BashOptions::new().output_cap(5)).await;
    assert_eq!(out.stdout, b"12345");
    assert!(!out.stdout_truncated, "exactly the cap is not truncated");
}

#[tokio::test]
async fn commands_that_cannot_start_give_clear_errors_and_the_worker_serves_on() {
    let sb = sandbox().await;
    let missing = "/definitely/not/here";
    let err = sb
        .remote(
            agentix_bash::run,
            ("true".into(), BashOptions::new().cwd(missing)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Raised);
    assert!(err.message.contains(missing), "{err}");
    let bash: BashError = err.data_as().expect("the error's fields travel");
    assert_eq!(bash.kind, BashErrorKind::WorkingDirectory);
    assert_eq!(bash.os_kind.as_deref(), Some("NotFound"));
    assert_eq!(bash.path.as_deref(), Some(missing));

    let err = sb
        .remote(
            agentix_bash::run,
            ("true".into(), BashOptions::new().cwd("/etc/hostname")),
        )
        .await
        .unwrap_err();
    let bash: BashError = err.data_as().unwrap();
    assert_eq!(bash.os_kind.as_deref(), Some("NotADirectory"));

    let err = sb
        .remote(
            agentix_bash::run,
            ("true".into(), BashOptions::new().shell("/no/shell")),
        )
        .await
        .unwrap_err();
    let bash: BashError = err.data_as().unwrap();
    assert_eq!(bash.kind, BashErrorKind::Shell);
    assert_eq!(bash.os_kind.as_deref(), Some("NotFound"));

    let err = sb
        .remote(
            agentix_bash::run,
            ("true".into(), BashOptions::new().env("A=B", "x")),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.data_as::<BashError>().unwrap().kind,
        BashErrorKind::Options
    );

    let mut events = sb
        .stream(
            agentix_bash::run_stream,
            ("true".into(), BashOptions::new().cwd(missing)),
        )
        .await
        .unwrap();
    let err = events.next().await.unwrap().unwrap_err();
    assert_eq!(
        err.data_as::<BashError>().unwrap().kind,
        BashErrorKind::WorkingDirectory
    );
    assert!(events.next().await.is_none());

    assert_eq!(
        run(&sb, "echo still here", BashOptions::new()).await.stdout,
        b"still here\n"
    );
}

#[tokio::test]
async fn a_stream_delivers_output_while_the_command_runs() {
    let sb = sandbox().await;
    let command = "for i in 1 2 3 4; do echo out $i; echo err $i >&2; sleep 0.3; done; exit 7";
    let mut events = sb
        .stream(
            agentix_bash::run_stream,
            (command.into(), BashOptions::new()),
        )
        .await
        .unwrap();
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let mut first_output = None;
    let mut exit = None;
    while let Some(event) = events.next().await {
        match event.unwrap() {
            BashEvent::Stdout(chunk) => {
                first_output.get_or_insert_with(Instant::now);
                stdout.extend(chunk);
            }
            BashEvent::Stderr(chunk) => stderr.extend(chunk),
            BashEvent::Exit(e) => {
                assert!(exit.is_none(), "one exit");
                exit = Some((e, Instant::now()));
            }
        }
    }
    let (exit, exit_at) = exit.expect("the stream ends with the exit");
    assert_eq!(
        (exit.code, exit.signal, exit.timed_out),
        (Some(7), None, false)
    );
    assert_eq!(stdout, b"out 1\nout 2\nout 3\nout 4\n");
    assert_eq!(stderr, b"err 1\nerr 2\nerr 3\nerr 4\n");
    // Three more 300 ms sleeps follow the first line: it was not held back
    // until the end (half of that is slack for a loaded machine).
    let lead = exit_at - first_output.unwrap();
    assert!(
        lead >= Duration::from_millis(450),
        "first output only {lead:?} before the exit"
    );
}

#[tokio::test]
async fn dropping_a_stream_kills_its_process_group() {
    let sb = support::plain_sandbox().await;
    let dir = scratch_dir("bash-stream-drop");
    let pids = dir.join("pids");
    let command = group_of_two(&pids, "while true; do echo tick; sleep 0.05; done");
    let mut events = sb
        .stream(agentix_bash::run_stream, (command, BashOptions::new()))
        .await
        .unwrap();
    assert!(matches!(
        events.next().await,
        Some(Ok(BashEvent::Stdout(_)))
    ));
    let pids = pids_in(&pids, 2).await;
    drop(events);
    all_gone(&pids).await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_cancelled_run_kills_its_process_group() {
    let sb = support::plain_sandbox().await;
    let dir = scratch_dir("bash-run-cancel");
    let pids = dir.join("pids");
    let command = group_of_two(&pids, "wait");
    let err = sb
        .remote(agentix_bash::run, (command, BashOptions::new()))
        .timeout(Duration::from_millis(2000))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout);
    all_gone(&pids_in(&pids, 2).await).await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_background_job_holding_the_pipes_does_not_hold_the_result() {
    let sb = sandbox().await;
    let started = Instant::now();
    let out = run(&sb, "sleep 30 & echo spawned", BashOptions::new()).await;
    assert_eq!(out.stdout, b"spawned\n");
    assert_eq!(out.exit_code, Some(0));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "waited for the job"
    );
}

#[tokio::test]
async fn many_commands_at_once_each_get_their_own_output() {
    let sb = sandbox().await;
    let runs = (0..32).map(|i| {
        let sb = &sb;
        async move {
            let out = run(sb, &format!("echo {i}; echo e{i} >&2"), BashOptions::new()).await;
            assert_eq!(out.stdout_lossy(), format!("{i}\n"));
            assert_eq!(out.stderr_lossy(), format!("e{i}\n"));
        }
    });
    futures_util::future::join_all(runs).await;
}

/// The children of `parent`: pid, name and state (`R`, `S`, `Z`, ...).
fn children(parent: u32) -> Vec<(u32, String, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": the name is in parentheses.
        let (Some((head, rest)), Some(open)) = (stat.rsplit_once(')'), stat.find('(')) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or_default().to_owned();
        let ppid = fields.next().and_then(|p| p.parse().ok());
        if ppid == Some(parent) {
            found.push((pid, head[open + 1..].to_owned(), state));
        }
    }
    found
}

/// The pids of the live `bash` processes whose parent is `parent` (an
/// exited one not yet reaped is no shell).
fn bash_children(parent: u32) -> Vec<u32> {
    let bash = children(parent)
        .into_iter()
        .filter(|(_, name, state)| name == "bash" && state != "Z");
    bash.map(|(pid, ..)| pid).collect()
}

#[tokio::test]
async fn warm_shells_run_commands_exactly_like_fresh_ones_and_die_with_the_worker() {
    let sb = support::plain_sandbox().await;
    let worker = worker_pid_from_health(&sb).await;
    assert!(
        bash_children(worker).is_empty(),
        "no shells before the first command"
    );
    run(&sb, "true", BashOptions::new()).await;
    wait_until("a warm shell", Duration::from_secs(10), || {
        !bash_children(worker).is_empty()
    })
    .await;

    let dir = scratch_dir("bash-warm");
    for _ in 0..4 {
        let opts = BashOptions::new()
            .cwd(dir.to_string_lossy())
            .env("GREETING", "it's \"quoted\" $HOME")
            .stdin("a\nb\n");
        // The shell leads its own process group; none of the hand-over's
        // variables is left for the command to see.
        let script = "pwd; echo \"$GREETING\"; wc -l; \
                      [ \"$(cut -d' ' -f5 /proc/$$/stat)\" = \"$$\" ] && echo leader; \
                      set | grep -c ^__agentix; exit 5";
        let out = run(&sb, script, opts).await;
        let want = format!(
            "{}\nit's \"quoted\" $HOME\n2\nleader\n0\n",
            dir.canonicalize().unwrap().display()
        );
        assert_eq!(out.stdout_lossy(), want);
        assert_eq!(out.exit_code, Some(5));

        let out = run(&sb, "cat; echo read-eof", BashOptions::new()).await;
        assert_eq!(out.stdout, b"read-eof\n", "no stdin reads as end-of-file");
        let out = run(&sb, "kill -KILL $$", BashOptions::new()).await;
        assert_eq!((out.exit_code, out.signal), (None, Some(libc::SIGKILL)));
        let out = run(&sb, "if then", BashOptions::new()).await;
        assert_eq!(
            out.exit_code,
            Some(2),
            "a syntax error: {}",
            out.stderr_lossy()
        );
    }
    let out = run(&sb, "env", BashOptions::new()).await;
    let leaked: Vec<String> = out
        .stdout_lossy()
        .lines()
        .filter(|l| l.starts_with("AGENTIX_") && !l.starts_with("AGENTIX_PROCESS_TAG="))
        .map(str::to_owned)
        .collect();
    assert!(leaked.is_empty(), "{leaked:?}");

    let mut warm = bash_children(worker);
    assert!(!warm.is_empty());
    warm.push(worker);
    sb.delete().await;
    all_gone(&warm).await;
    let _ = std::fs::remove_dir_all(dir);
}

/// The children of `parent` that are zombies: exited, never reaped.
fn zombie_children(parent: u32) -> Vec<u32> {
    let zombies = children(parent)
        .into_iter()
        .filter(|(.., state)| state == "Z");
    zombies.map(|(pid, ..)| pid).collect()
}

#[tokio::test]
async fn warm_shells_end_every_way_a_fresh_shell_does_and_leave_no_zombie() {
    let sb = support::plain_sandbox().await;
    let worker = worker_pid_from_health(&sb).await;
    // Ways a command ends that a warm shell's own script (a `read`, an
    // `eval`, and whatever follows it) could change.
    let scripts = [
        "echo hi",
        "false",
        "echo out; echo err >&2; (exit 3)",
        "echo $((6 * 7)); (exit 255)",
        "exit 7",
        "trap 'echo bye' EXIT; echo hi",
        "trap 'echo bye >&2; exit 4' EXIT; true",
        "trap - EXIT; echo reset",
        "set -e; false; echo never",
        "kill -TERM $$",
        "exec echo replaced",
        "sleep 0.3 & echo started",
        "exec() { echo fake; }; printf() { echo fake; }; read() { echo fake; }; echo real",
    ];
    run(&sb, "true", BashOptions::new()).await;
    for round in 0..3 {
        for script in scripts {
            // A shell is pooled, so the default run takes a warm one.
            wait_until("a warm shell", Duration::from_secs(10), || {
                !bash_children(worker).is_empty()
            })
            .await;
            let warm = run(&sb, script, BashOptions::new()).await;
            let fresh = run(&sb, script, BashOptions::new().shell("bash")).await;
            let what = format!("round {round}: `{script}`");
            assert_eq!(warm.stdout_lossy(), fresh.stdout_lossy(), "{what}");
            assert_eq!(warm.stderr_lossy(), fresh.stderr_lossy(), "{what}");
            assert_eq!(
                (warm.exit_code, warm.signal),
                (fresh.exit_code, fresh.signal),
                "{what}"
            );
        }
    }
    // Every shell, warm or fresh, is reaped once it has exited.
    wait_until("no zombie shells", Duration::from_secs(10), || {
        zombie_children(worker).is_empty()
    })
    .await;
    sb.delete().await;
}

#[tokio::test]
async fn output_too_large_for_one_message_is_a_clear_error() {
    let mut config = agentix::SandboxConfig::new(support::bundle_path());
    config.max_message_bytes = 12 << 20;
    let sb = support::sandbox_with(config).await;
    let err = sb
        .remote(
            agentix_bash::run,
            (
                "head -c 20000000 /dev/zero".to_owned(),
                BashOptions::new().output_cap(30_000_000),
            ),
        )
        .timeout(Duration::from_secs(60))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::PayloadTooLarge, "{err}");
    assert_eq!(
        run(&sb, "echo ok", BashOptions::new()).await.stdout,
        b"ok\n"
    );
}

#[tokio::test]
async fn bash_runs_when_path_names_only_directories_the_sandbox_cannot_see() {
    // The host's PATH may be all home or temp directories, which an
    // isolated sandbox does not have: /bin/bash still serves.
    let config = agentix::SandboxConfig::new(support::bundle_path())
        .env("PATH", "/nonexistent/bin:/tmp/host-only/bin");
    let sb = support::sandbox_with(config).await;
    for _ in 0..2 {
        let out: BashResult = sb
            .remote(
                agentix_bash::run,
                ("echo $0 hi".to_string(), BashOptions::new()),
            )
            .await
            .unwrap();
        assert_eq!(out.exit_code, Some(0), "{}", out.stderr_lossy());
        assert!(
            out.stdout_lossy().ends_with("hi\n"),
            "{}",
            out.stdout_lossy()
        );
    }
}

#[tokio::test]
async fn one_command_leaves_one_warm_shell_and_a_second_command_two() {
    let sb = support::plain_sandbox().await;
    let worker = worker_pid_from_health(&sb).await;
    assert_eq!(
        bash_children(worker).len(),
        0,
        "no command ran, no shell waits"
    );
    run(&sb, "true", BashOptions::new()).await;
    wait_until("one warm shell", Duration::from_secs(10), || {
        bash_children(worker).len() == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        bash_children(worker).len(),
        1,
        "a spare shell beyond the first"
    );
    // This one runs in the warm shell; from then on two are kept.
    let out = run(&sb, "echo warm", BashOptions::new()).await;
    assert_eq!(out.stdout, b"warm\n");
    wait_until("two warm shells", Duration::from_secs(10), || {
        bash_children(worker).len() == 2
    })
    .await;
}
