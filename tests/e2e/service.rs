//! The actix-web service example (`examples/service`) over real HTTP: its
//! sandboxes are servers embedded in the service's own actix `System`.

mod support;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use sandbox_service::ServiceConfig;
use serde_json::{json, Value};
use support::{bundle_path, wait_until};

/// A running service and its base URL.
async fn service(max_sandboxes: usize) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let config = ServiceConfig {
        worker_command: vec![bundle_path().into(), "worker".into()],
        max_sandboxes,
    };
    actix_rt::spawn(sandbox_service::start(listener, config).unwrap());
    base
}

async fn send(
    method: &str,
    url: &str,
    body: Option<Value>,
) -> hyper::Response<hyper::body::Incoming> {
    let uri: hyper::Uri = url.parse().unwrap();
    let stream = tokio::net::TcpStream::connect((uri.host().unwrap(), uri.port_u16().unwrap()))
        .await
        .unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let mut request = Request::builder()
        .method(method)
        .uri(uri.path())
        .header("host", uri.authority().unwrap().as_str());
    if body.is_some() {
        request = request.header("content-type", "application/json");
    }
    let body = Full::new(Bytes::from(body.map(|b| b.to_string()).unwrap_or_default()));
    sender
        .send_request(request.body(body).unwrap())
        .await
        .unwrap()
}

/// Status and JSON body (`Null` for an empty one).
async fn http(method: &str, url: &str, body: Option<Value>) -> (u16, Value) {
    let response = send(method, url, body).await;
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{url}: not JSON ({e}): {bytes:?}"))
    };
    (status, value)
}

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| !stat.contains(") Z "))
        .unwrap_or(false)
}

#[actix_rt::test]
async fn a_service_starts_calls_watches_and_deletes_sandboxes_over_http() {
    let base = service(4).await;
    let (status, created) = http("POST", &format!("{base}/sandboxes"), None).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let sandbox = format!("{base}/sandboxes/{id}");

    // Listening first: every record of the calls below arrives.
    let logs = send("GET", &format!("{sandbox}/logs"), None).await;
    assert_eq!(logs.status(), 200);
    assert_eq!(logs.headers()["content-type"], "text/event-stream");
    let (records_tx, mut records) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut body = logs.into_body();
        let mut text = String::new();
        while let Some(Ok(frame)) = body.frame().await {
            if let Some(chunk) = frame.data_ref() {
                text.push_str(&String::from_utf8_lossy(chunk));
                while let Some(end) = text.find("\n\n") {
                    let event: String = text.drain(..end + 2).collect();
                    if let Some(data) = event.strip_prefix("data: ") {
                        let _ =
                            records_tx.send(serde_json::from_str::<Value>(data.trim()).unwrap());
                    }
                }
            }
        }
    });

    let (status, sum) = http(
        "POST",
        &format!("{sandbox}/calls/agentix_e2e::add"),
        Some(json!([20, 22])),
    )
    .await;
    assert_eq!((status, sum), (200, json!(42)));
    let (status, logged) = http(
        "POST",
        &format!("{sandbox}/calls/agentix_e2e::chatter"),
        Some(json!([3, 0, 0])),
    )
    .await;
    assert_eq!((status, logged), (200, json!(3)));
    let mut messages = Vec::new();
    while messages.len() < 3 {
        let record = tokio::time::timeout(Duration::from_secs(10), records.recv())
            .await
            .expect("the sandbox's records as server-sent events")
            .unwrap();
        let message = record["message"].as_str().unwrap().to_owned();
        if message.starts_with("log ") {
            messages.push(message);
        }
    }
    assert_eq!(messages, ["log 0", "log 1", "log 2"]);

    let (status, health) = http("GET", &format!("{sandbox}/health"), None).await;
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["status"], "ok");
    let worker = health["worker"]["pid"].as_u64().unwrap();
    assert!(alive(worker));

    let (status, error) = http(
        "POST",
        &format!("{sandbox}/calls/agentix_e2e::no_such_function"),
        Some(json!([])),
    )
    .await;
    assert_eq!(status, 404, "{error}");
    assert_eq!(error["kind"], "UnknownTarget");
    let (status, error) = http(
        "POST",
        &format!("{sandbox}/calls/agentix_e2e::add"),
        Some(json!(["two", 2])),
    )
    .await;
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["kind"], "TypeMismatch");

    let (status, _) = http("DELETE", &sandbox, None).await;
    assert_eq!(status, 204);
    wait_until(
        "the deleted sandbox's worker to be gone",
        Duration::from_secs(10),
        || !alive(worker),
    )
    .await;
    let (status, error) = http("GET", &format!("{sandbox}/health"), None).await;
    assert_eq!(status, 404);
    assert_eq!(error["kind"], "NoSuchSandbox");
}

#[actix_rt::test]
async fn a_service_keeps_its_sandboxes_apart_and_within_its_limit() {
    let base = service(2).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (status, created) = http("POST", &format!("{base}/sandboxes"), None).await;
        assert_eq!(status, 201);
        ids.push(created["id"].as_str().unwrap().to_owned());
    }
    let (status, refused) = http("POST", &format!("{base}/sandboxes"), None).await;
    assert_eq!(status, 429, "{refused}");

    let mut pids = Vec::new();
    for id in &ids {
        let (status, pid) = http(
            "POST",
            &format!("{base}/sandboxes/{id}/calls/agentix_e2e::worker_pid"),
            Some(json!([])),
        )
        .await;
        assert_eq!(status, 200);
        pids.push(pid.as_u64().unwrap());
    }
    assert_ne!(pids[0], pids[1], "each sandbox has a worker of its own");

    // A worker that dies is restarted by its sandbox's tree; the other
    // sandbox never notices.
    let (status, error) = http(
        "POST",
        &format!("{base}/sandboxes/{}/calls/agentix_e2e::exit_worker", ids[0]),
        Some(json!([3])),
    )
    .await;
    assert_eq!(status, 502, "{error}");
    assert_eq!(error["kind"], "WorkerExited");
    let (_, restarted) = http(
        "POST",
        &format!("{base}/sandboxes/{}/calls/agentix_e2e::worker_pid", ids[0]),
        Some(json!([])),
    )
    .await;
    assert_ne!(restarted.as_u64().unwrap(), pids[0]);
    let (_, same) = http(
        "POST",
        &format!("{base}/sandboxes/{}/calls/agentix_e2e::worker_pid", ids[1]),
        Some(json!([])),
    )
    .await;
    assert_eq!(same.as_u64().unwrap(), pids[1]);

    for id in &ids {
        let (status, _) = http("DELETE", &format!("{base}/sandboxes/{id}"), None).await;
        assert_eq!(status, 204);
    }
    let (status, _) = http("POST", &format!("{base}/sandboxes"), None).await;
    assert_eq!(status, 201, "room again once deleted");
}

#[actix_rt::test]
async fn a_job_runs_many_calls_over_the_services_pool_and_reports_each() {
    let base = service(3).await;
    let args: Vec<Value> = (0..20).map(|i| json!([i, 100])).collect();
    let mut args = args;
    args.push(json!(["not a number", 1]));
    let (status, body) = http(
        "POST",
        &format!("{base}/jobs"),
        Some(json!({ "target": "agentix_e2e::add", "args": args })),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_owned();
    let url = format!("{base}/jobs/{id}");
    let mut seen_running = false;
    let job = loop {
        let (status, job) = http("GET", &url, None).await;
        assert_eq!(status, 200, "{job}");
        seen_running |= !job["finished"].as_bool().unwrap();
        if job["finished"] == true {
            break job;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(seen_running, "the job was never seen in progress");
    assert_eq!(job["stats"]["done"], 20, "{job}");
    assert_eq!(job["stats"]["failed"], 1, "{job}");
    assert_eq!(job["stats"]["sandboxes"], 0, "every sandbox deleted: {job}");
    let results = job["results"].as_array().unwrap();
    assert_eq!(results.len(), 21);
    for result in results {
        let task: i64 = result["task"].as_str().unwrap().parse().unwrap();
        match task {
            20 => assert_eq!(result["kind"], "Task", "{result}"),
            n => assert_eq!(result["value"], n + 100, "{result}"),
        }
    }
    let (status, _) = http("GET", &format!("{base}/jobs/nosuch"), None).await;
    assert_eq!(status, 404);
}
