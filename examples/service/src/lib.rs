//! A service that keeps sandboxes under supervision, over HTTP.
//!
//! Each sandbox is an Agentix server embedded in the service's own actix
//! `System` ([`agentix::server::Server`]): its actor tree restarts the
//! worker when it dies, and the service reaches it through a [`Sandbox`]
//! handle like any host. The routes:
//!
//! | route | what it does |
//! |---|---|
//! | `POST /sandboxes` | starts a sandbox; `201 {"id": ..}` |
//! | `POST /sandboxes/{id}/calls/{target}` | calls `target` with the JSON body as its arguments (an array, an object by parameter name, or one bare value); `200` with the result, or an error status with the error (`{"kind", "message", ..}`) |
//! | `GET /sandboxes/{id}/health` | the sandbox server's `/health` report |
//! | `GET /sandboxes/{id}/logs` | what the sandbox logs and prints, live, as server-sent events (one JSON record per `data:`) |
//! | `DELETE /sandboxes/{id}` | lets calls in flight finish, stops the sandbox; `204` |
//!
//! and [`jobs`]' routes: many calls at once over a pool of sandboxes.
//! The remote functions below are what this binary's workers serve.

pub mod jobs;

use std::collections::HashMap;
use std::ffi::OsString;
use std::sync::{Arc, Mutex};

use actix_web::http::StatusCode;
use actix_web::web::{self, Bytes};
use actix_web::{HttpResponse, Responder};
use agentix::server::{Server, ServerConfig};
use agentix::{ErrorKind, RemoteError, Sandbox, SandboxConfig};
use tokio::sync::broadcast;

/// Greets `name`: the smallest call to make.
#[agentix::remote]
pub async fn greet(name: String) -> String {
    format!("hello, {name}")
}

/// Logs one line per step, 20 ms apart; returns the number of steps.
#[agentix::remote]
pub async fn work(steps: u32) -> u32 {
    for step in 1..=steps {
        tracing::info!(step, "working");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    steps
}

/// Records kept for a listener of `/logs` that is behind.
const LOG_BUFFER: usize = 1024;

/// What the service needs to start sandboxes.
#[derive(Clone)]
pub struct ServiceConfig {
    /// The command that runs a worker: a bundle binary and `worker`.
    pub worker_command: Vec<OsString>,
    /// Sandboxes that may run at once; more get `429`.
    pub max_sandboxes: usize,
}

/// One sandbox the service runs.
struct Entry {
    server: Server,
    sandbox: Arc<Sandbox>,
    logs: broadcast::Sender<Bytes>,
}

/// The service's sandboxes, by id; shared by every HTTP worker.
pub struct Sandboxes {
    config: ServiceConfig,
    entries: Mutex<HashMap<String, Entry>>,
}

impl Sandboxes {
    /// No sandboxes yet; they will run `config.worker_command`.
    pub fn new(config: ServiceConfig) -> Self {
        Sandboxes {
            config,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn sandbox(&self, id: &str) -> Option<Arc<Sandbox>> {
        self.entries().get(id).map(|e| e.sandbox.clone())
    }
}

/// Adds the routes to an actix-web app that holds `web::Data<Sandboxes>`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/sandboxes", web::post().to(create))
        .route("/sandboxes/{id}/calls/{target}", web::post().to(call))
        .route("/sandboxes/{id}/health", web::get().to(health))
        .route("/sandboxes/{id}/logs", web::get().to(logs))
        .route("/sandboxes/{id}", web::delete().to(delete));
}

/// The service on `listener`, not yet awaited: await it (or spawn it) to
/// serve. Call it inside an actix system: the jobs' pool is an actor of it.
pub fn start(
    listener: std::net::TcpListener,
    config: ServiceConfig,
) -> std::io::Result<actix_web::dev::Server> {
    let bundle = config
        .worker_command
        .first()
        .map(std::path::PathBuf::from)
        .unwrap_or_default();
    let jobs = web::Data::new(jobs::Jobs::start(&bundle, config.max_sandboxes));
    let sandboxes = web::Data::new(Sandboxes::new(config));
    let server = actix_web::HttpServer::new(move || {
        actix_web::App::new()
            .app_data(sandboxes.clone())
            .app_data(jobs.clone())
            .app_data(web::JsonConfig::default().limit(16 << 20))
            .configure(routes)
            .configure(jobs::routes)
    })
    .listen(listener)?
    .run();
    Ok(server)
}

async fn create(sandboxes: web::Data<Sandboxes>) -> HttpResponse {
    if sandboxes.entries().len() >= sandboxes.config.max_sandboxes {
        return error_body(
            StatusCode::TOO_MANY_REQUESTS,
            "TooManySandboxes",
            format!(
                "{} sandboxes run already; delete one first",
                sandboxes.config.max_sandboxes
            ),
        );
    }
    let id = agentix::random_hex(8);
    let token = agentix::random_hex(16);
    let config = ServerConfig {
        token: Some(token.clone()),
        worker_command: sandboxes.config.worker_command.clone(),
        ..ServerConfig::default()
    };
    let server = match Server::start(config).await {
        Ok(server) => server,
        Err(e) => {
            return error_body(
                StatusCode::INTERNAL_SERVER_ERROR,
                "StartFailed",
                e.to_string(),
            )
        }
    };
    let (logs, _) = broadcast::channel(LOG_BUFFER);
    let tap = logs.clone();
    let sandbox_config = SandboxConfig::new("").on_log(move |_, record| {
        if let Ok(json) = serde_json::to_string(record) {
            // Nobody listening is fine: the records also go to the log.
            let _ = tap.send(Bytes::from(format!("data: {json}\n\n")));
        }
    });
    let sandbox = Arc::new(Sandbox::attach_with(server.addr(), token, sandbox_config));
    tracing::info!(id, addr = server.addr(), "sandbox started");
    sandboxes.entries().insert(
        id.clone(),
        Entry {
            server,
            sandbox,
            logs,
        },
    );
    HttpResponse::Created().json(serde_json::json!({ "id": id }))
}

async fn call(
    sandboxes: web::Data<Sandboxes>,
    path: web::Path<(String, String)>,
    args: web::Json<serde_json::Value>,
) -> HttpResponse {
    let (id, target) = path.into_inner();
    let Some(sandbox) = sandboxes.sandbox(&id) else {
        return no_sandbox(&id);
    };
    match sandbox.call_json(&target, args.into_inner()).await {
        Ok(value) => HttpResponse::Ok().json(value),
        Err(e) => remote_error(&e),
    }
}

async fn health(sandboxes: web::Data<Sandboxes>, id: web::Path<String>) -> HttpResponse {
    let Some(sandbox) = sandboxes.sandbox(&id) else {
        return no_sandbox(&id);
    };
    match sandbox.health().await {
        Ok(report) => HttpResponse::Ok().json(report),
        Err(e) => remote_error(&e),
    }
}

async fn logs(sandboxes: web::Data<Sandboxes>, id: web::Path<String>) -> HttpResponse {
    // The handle joins `/log` with its first call, and the sandbox server
    // keeps what was logged before then for it: a listener that comes
    // first sees everything.
    let records = match sandboxes.entries().get(id.as_str()) {
        Some(entry) => entry.logs.subscribe(),
        None => return no_sandbox(&id),
    };
    let events = futures_util::stream::unfold(records, |mut records| async move {
        let event = match records.recv().await {
            Ok(event) => event,
            // Told, not hidden: the listener missed `n` records.
            Err(broadcast::error::RecvError::Lagged(n)) => {
                Bytes::from(format!("event: lagged\ndata: {n}\n\n"))
            }
            Err(broadcast::error::RecvError::Closed) => return None,
        };
        Some((Ok::<_, actix_web::Error>(event), records))
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("cache-control", "no-cache"))
        .streaming(events)
}

async fn delete(sandboxes: web::Data<Sandboxes>, id: web::Path<String>) -> impl Responder {
    let Some(entry) = sandboxes.entries().remove(id.as_str()) else {
        return no_sandbox(&id);
    };
    drop(entry.sandbox);
    entry.server.shutdown().await;
    tracing::info!(id = id.as_str(), "sandbox deleted");
    HttpResponse::NoContent().finish()
}

fn no_sandbox(id: &str) -> HttpResponse {
    error_body(
        StatusCode::NOT_FOUND,
        "NoSuchSandbox",
        format!("no sandbox {id}"),
    )
}

/// A call's error as an HTTP status and the error itself (`kind`, `type`,
/// `message`, and `details` and `data` when it has them).
fn remote_error(e: &RemoteError) -> HttpResponse {
    let status = match e.kind {
        ErrorKind::UnknownTarget => StatusCode::NOT_FOUND,
        ErrorKind::BadArguments | ErrorKind::TypeMismatch => StatusCode::BAD_REQUEST,
        ErrorKind::Raised => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorKind::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorKind::Degraded => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::BAD_GATEWAY,
    };
    HttpResponse::build(status).json(e)
}

fn error_body(status: StatusCode, kind: &str, message: String) -> HttpResponse {
    HttpResponse::build(status).json(serde_json::json!({ "kind": kind, "message": message }))
}
