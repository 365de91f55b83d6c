//! `/jobs`: many calls at once over a pool of sandboxes, with progress
//! and results by job id.
//!
//! The pool is an [`agentix::fleet::PoolActor`] in the service's actix
//! system; each job gets a `JobRecorder` actor whose `Recipient` receives
//! the job's outcomes as messages and keeps them for `GET /jobs/{id}`.
//!
//! | route | what it does |
//! |---|---|
//! | `POST /jobs` | `{"target": "crate::function", "args": [a, b, ..]}`: one task per element of `args` (each the call's arguments, as `/calls` takes them); `201 {"id": ..}` |
//! | `GET /jobs/{id}` | `{"finished", "stats", "results"}`: the pool's counters for the job (done, failed, retries, running, starting, warm ..) and each ended task's value or error |

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use actix::prelude::*;
use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use agentix::fleet::{JobEvent, Pool, PoolActor, PoolStats, ProgressDisplay, RunJob, Task};
use agentix::{LocalProvider, SandboxConfig};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// One task's input: the function and its arguments.
type Call = (String, Value);

/// Where the jobs run, and what each has done so far.
pub struct Jobs {
    pool: Addr<PoolActor<Call, Value>>,
    states: Arc<Mutex<HashMap<String, JobState>>>,
}

/// A job as `GET /jobs/{id}` shows it.
#[derive(Debug, Clone, Default, Serialize)]
struct JobState {
    finished: bool,
    stats: PoolStats,
    results: Vec<Value>,
}

impl Jobs {
    /// A pool of up to `max_sandboxes` local sandboxes of `bundle`, each
    /// serving up to ten tasks; started in the current actix system.
    pub fn start(bundle: &std::path::Path, max_sandboxes: usize) -> Jobs {
        let pool = Pool::new(LocalProvider::new(), SandboxConfig::new(bundle))
            .max_sandboxes(max_sandboxes)
            .reuse(10)
            .progress(ProgressDisplay::Off);
        let actor = PoolActor::new(pool, |sandbox, (target, args): Call| async move {
            sandbox.call_json(&target, args).await
        });
        Jobs {
            pool: actor.start(),
            states: Arc::default(),
        }
    }
}

/// Adds the job routes to an app that holds `web::Data<Jobs>`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/jobs", web::post().to(create))
        .route("/jobs/{id}", web::get().to(show));
}

/// What `POST /jobs` takes.
#[derive(Deserialize)]
struct NewJob {
    target: String,
    args: Vec<Value>,
}

async fn create(jobs: web::Data<Jobs>, job: web::Json<NewJob>) -> HttpResponse {
    let NewJob { target, args } = job.into_inner();
    let id = agentix::random_hex(8);
    let tasks = args
        .into_iter()
        .enumerate()
        .map(|(n, args)| Task::new(n.to_string(), (target.clone(), args)))
        .collect();
    jobs.states
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id.clone(), JobState::default());
    let recorder = JobRecorder {
        id: id.clone(),
        states: jobs.states.clone(),
    }
    .start();
    let started = jobs
        .pool
        .send(RunJob {
            tasks,
            events: recorder.recipient(),
        })
        .await;
    match started {
        Ok(Ok(())) => HttpResponse::Created().json(json!({ "id": id })),
        Ok(Err(e)) => error(StatusCode::BAD_REQUEST, e.to_string()),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

async fn show(jobs: web::Data<Jobs>, id: web::Path<String>) -> HttpResponse {
    let states = jobs.states.lock().unwrap_or_else(|p| p.into_inner());
    match states.get(id.as_str()) {
        Some(state) => HttpResponse::Ok().json(state),
        None => error(StatusCode::NOT_FOUND, format!("no job {id}")),
    }
}

fn error(status: StatusCode, message: String) -> HttpResponse {
    HttpResponse::build(status).json(json!({ "message": message }))
}

/// Receives one job's events and keeps them for `GET /jobs/{id}`.
struct JobRecorder {
    id: String,
    states: Arc<Mutex<HashMap<String, JobState>>>,
}

impl Actor for JobRecorder {
    type Context = Context<Self>;
}

impl Handler<JobEvent<Value>> for JobRecorder {
    type Result = ();

    fn handle(&mut self, event: JobEvent<Value>, ctx: &mut Context<Self>) {
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        let Some(state) = states.get_mut(&self.id) else {
            return;
        };
        match event {
            JobEvent::Outcome { outcome, stats } => {
                state.stats = stats;
                state.results.push(match &outcome.result {
                    Ok(value) => json!({ "task": outcome.task, "value": value }),
                    Err(failure) => json!({
                        "task": outcome.task,
                        "error": failure.message,
                        "kind": format!("{:?}", failure.kind),
                        "attempts": outcome.attempts,
                    }),
                });
            }
            JobEvent::Finished(stats) => {
                state.stats = stats;
                state.finished = true;
                ctx.stop();
            }
        }
    }
}
