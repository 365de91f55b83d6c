//! `cargo run -p service-example [-- --bind ADDR]`: the sandbox service on
//! `127.0.0.1:8080`, its workers this same binary.
//!
//! ```text
//! curl -X POST localhost:8080/sandboxes                       # {"id":"…"}
//! curl -N localhost:8080/sandboxes/ID/logs &                  # live records
//! curl -X POST localhost:8080/sandboxes/ID/calls/sandbox_service::work -H 'content-type: application/json' -d '[3]'
//! curl localhost:8080/sandboxes/ID/health
//! curl -X DELETE localhost:8080/sandboxes/ID
//! curl -X POST localhost:8080/jobs -H 'content-type: application/json' -d '{"target": "sandbox_service::greet", "args": ["a", "b", "c"]}'
//! curl localhost:8080/jobs/JOB                                # progress and results
//! ```

use sandbox_service::ServiceConfig;

fn main() -> std::io::Result<()> {
    // Before any runtime: started as `worker`, this binary serves calls.
    agentix::bundle::dispatch();
    agentix::configure_logging("service").map_err(std::io::Error::other)?;
    let bind = std::env::args()
        .skip_while(|a| a != "--bind")
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".into());
    let config = ServiceConfig {
        worker_command: vec![std::env::current_exe()?.into_os_string(), "worker".into()],
        max_sandboxes: 64,
    };
    let listener = std::net::TcpListener::bind(&bind)?;
    println!("sandbox service on http://{}", listener.local_addr()?);
    actix_web::rt::System::new()
        .block_on(async move { sandbox_service::start(listener, config)?.await })
}
