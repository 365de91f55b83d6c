//! The bash and files plugins end to end: stream a long command's output
//! live, upload a file, run a command on it, download the result.
//!
//! `cargo run -p shell`: like the hello example, this binary is both the
//! host and the sandbox's bundle; `link_plugins!` links the two plugin
//! crates' remote functions into the bundle.

use std::io::Write as _;
use std::time::Instant;

use agentix::{LocalProvider, Provider, SandboxConfig, StreamExt};
use agentix_bash::{BashEvent, BashOptions};
use agentix_files::transfer;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    agentix::link_plugins!(agentix_bash, agentix_files);
    agentix::bundle::dispatch();
    host()
}

#[tokio::main]
async fn host() -> Result<(), Box<dyn std::error::Error>> {
    let sandbox = LocalProvider::new()
        .session(SandboxConfig::current_exe()?)
        .await?;

    // 1. A long command, its output shown as it happens.
    let started = Instant::now();
    let command = "for i in 1 2 3 4 5; do echo \"step $i\"; sleep 0.3; done; echo 'all done' >&2";
    let mut events = sandbox
        .stream(
            agentix_bash::run_stream,
            (command.into(), BashOptions::new()),
        )
        .await?;
    while let Some(event) = events.next().await {
        let at = started.elapsed().as_secs_f32();
        match event? {
            BashEvent::Stdout(chunk) => {
                print!("[{at:4.1}s out] {}", String::from_utf8_lossy(&chunk))
            }
            BashEvent::Stderr(chunk) => {
                print!("[{at:4.1}s err] {}", String::from_utf8_lossy(&chunk))
            }
            BashEvent::Exit(exit) => println!("[{at:4.1}s] exited with {:?}", exit.code),
        }
        std::io::stdout().flush()?;
    }

    // 2. A file from the host into a working directory in the sandbox.
    let local_dir =
        std::env::temp_dir().join(format!("agentix-shell-example-{}", std::process::id()));
    std::fs::create_dir_all(&local_dir)?;
    let scores = local_dir.join("scores.txt");
    std::fs::write(&scores, "alice 71\nbob 93\ncarol 88\ndave 64\nerin 93\n")?;
    // Relative paths are inside the sandbox's own directory, for the files
    // plugin and for bash alike; the files plugin reaches nothing outside it.
    let work = "work".to_owned();
    sandbox
        .remote(agentix_files::mkdir, (work.clone(), true))
        .await?;
    let stat = transfer::upload_from(&sandbox, &scores, &format!("{work}/scores.txt")).await?;
    println!(
        "uploaded {} ({} bytes, mode {:o})",
        stat.name, stat.size, stat.mode
    );

    // 3. A command on it, in that directory.
    let out = sandbox
        .remote(
            agentix_bash::run,
            (
                "sort -k2,2nr scores.txt | head -3 > top3.txt && wc -l < top3.txt".into(),
                BashOptions::new().cwd(&work),
            ),
        )
        .await?;
    println!(
        "ranked: exit {:?}, {} lines",
        out.exit_code,
        out.stdout_lossy().trim()
    );

    // 4. The result back to the host.
    for entry in sandbox.remote(agentix_files::list, work.clone()).await? {
        println!(
            "  {:<12} {:>4} bytes  {:?}",
            entry.name, entry.size, entry.entry_type
        );
    }
    let top3 = transfer::download_bytes(&sandbox, &format!("{work}/top3.txt")).await?;
    print!("top 3:\n{}", String::from_utf8_lossy(&top3));

    // 5. Errors name the OS's reason and the path.
    if let Err(e) = transfer::download_bytes(&sandbox, &format!("{work}/missing.txt")).await {
        println!("as expected: {e}");
    }

    sandbox.delete().await;
    std::fs::remove_dir_all(&local_dir)?;
    Ok(())
}
