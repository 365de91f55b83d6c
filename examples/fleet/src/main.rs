//! Runs 1,000 small tasks over a pool of local sandboxes (or containers
//! with `--docker`), with a live progress display and a results file.
//!
//! `cargo run -p fleet-example [-- --docker] [--tasks N] [--record PATH]`:
//! the binary is its own bundle. Each task asks a sandbox for the length of
//! a word's `wc -c` and checks it; a tenth of the first attempts kill their
//! worker, to show the pool retrying on fresh sandboxes. Run it twice with
//! the same `--record` and the second run does only what the first did not
//! finish (stop the first with Ctrl-C to see it).

use std::sync::Arc;

use agentix::fleet::{Pool, Task};
use agentix::{Provider, SandboxConfig};
use agentix_bash::BashOptions;

/// Counts the bytes of `word` with `wc -c` in the sandbox.
#[agentix::remote]
async fn count_bytes(word: String) -> Result<u64, String> {
    let out = std::process::Command::new("sh")
        .args(["-c", "printf %s \"$1\" | wc -c", "sh", &word])
        .output()
        .map_err(|e| e.to_string())?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|e| format!("wc said {:?}: {e}", out.stdout))
}

/// Ends the worker, as a crash would.
#[agentix::remote]
async fn crash() -> u64 {
    std::process::exit(3)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    agentix::link_plugins!(agentix_bash);
    agentix::bundle::dispatch();
    host()
}

/// `--name VALUE` from the command line.
fn flag(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).cloned()
}

#[tokio::main]
async fn host() -> Result<(), Box<dyn std::error::Error>> {
    let docker = std::env::args().any(|a| a == "--docker");
    let tasks: usize = flag("--tasks")
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(1000);
    let record = flag("--record").unwrap_or_else(|| "fleet-results.jsonl".into());
    agentix::raise_fd_limit()?;

    let (provider, config): (Arc<dyn Provider>, SandboxConfig) = match docker {
        false => (
            Arc::new(agentix::LocalProvider::new()),
            SandboxConfig::current_exe()?,
        ),
        true => docker_setup().await?,
    };
    let pool = Pool::shared(provider, config)
        .max_sandboxes(if docker { 16 } else { 32 })
        .reuse(50)
        .record(&record);

    let words = ["sandbox", "fleet", "rollout", "évaluation", "agent"];
    let work = (0..tasks).map(|i| Task::new(format!("word-{i}"), (i, words[i % words.len()])));
    let struck = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let run = pool.run(work, move |sandbox, (i, word)| {
        let first = struck.lock().unwrap().insert(i);
        async move {
            if first && i % 10 == 7 {
                sandbox.remote(crash, ()).await?;
            }
            let echoed = sandbox
                .remote(
                    agentix_bash::run,
                    (format!("echo {word}"), BashOptions::new()),
                )
                .await?;
            assert_eq!(echoed.stdout_lossy().trim(), word);
            sandbox.remote(count_bytes, word.to_string()).await
        }
    })?;
    let outcomes = run.collect_all().await;
    let stats = pool.stats();
    let retried = outcomes.iter().filter(|o| o.attempts > 1).count();
    println!(
        "{} tasks run, {} skipped (already in {record}): {} done, {} failed, {retried} retried \
         on a fresh sandbox, {} sandboxes started",
        stats.tasks, stats.skipped, stats.done, stats.failed, stats.created
    );
    for outcome in outcomes.iter().filter(|o| !o.is_done()) {
        println!("{}: {:?}", outcome.task, outcome.result);
    }
    assert_eq!(stats.failed, 0, "every task was retried to done");
    Ok(())
}

/// An empty image and this binary as a bundle, for `--docker`.
async fn docker_setup() -> Result<(Arc<dyn Provider>, SandboxConfig), Box<dyn std::error::Error>> {
    use agentix_provider_docker::DockerProvider;
    let provider = DockerProvider::connect()?;
    provider
        .import_image(
            "agentix-fleet-empty",
            agentix_provider_docker::EMPTY_ROOTFS.to_vec(),
        )
        .await?;
    let out = std::env::temp_dir().join("agentix-fleet-bundle");
    let spec = agentix_cli::BundleSpec::for_binary(
        std::env::current_exe()?,
        "fleet",
        env!("CARGO_PKG_VERSION"),
        &["bash", "sh", "wc"],
        &out,
    )?;
    agentix_cli::assemble(&spec, &mut |_| {})?;
    let config = SandboxConfig::new(&out).image("agentix-fleet-empty");
    Ok((Arc::new(provider), config))
}
