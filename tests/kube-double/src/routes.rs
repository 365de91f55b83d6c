//! The REST paths the double serves, as the API server does: create, get,
//! list (with label and field selectors), watch (a stream of JSON lines)
//! and delete of pods, Secrets, events and network policies in a
//! namespace, and a pod's `portforward` websocket. Errors are `Status`
//! objects with the API server's codes.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};

use crate::selectors::query;
use crate::store::{matches, Kind};
use crate::Double;

/// A response body: whole, or a watch's stream.
pub type Body = BoxBody<Bytes, Infallible>;

/// What one request is about.
struct Target<'a> {
    kind: Kind,
    /// The resource as the path names it (`pods`).
    resource: &'a str,
    namespace: &'a str,
    name: Option<&'a str>,
    subresource: Option<&'a str>,
}

fn target(path: &str) -> Option<Target<'_>> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (rest, group_kinds): (&[&str], &[(&str, Kind)]) = match parts.as_slice() {
        ["api", "v1", "namespaces", rest @ ..] => (
            rest,
            &[
                ("pods", Kind::Pods),
                ("secrets", Kind::Secrets),
                ("events", Kind::Events),
            ],
        ),
        ["apis", "networking.k8s.io", "v1", "namespaces", rest @ ..] => {
            (rest, &[("networkpolicies", Kind::NetworkPolicies)])
        }
        ["apis", "agents.x-k8s.io", "v1beta1", "namespaces", rest @ ..] => {
            (rest, &[("sandboxes", Kind::AgentSandboxes)])
        }
        _ => return None,
    };
    let (namespace, resource, name, subresource) = match rest {
        [ns, resource] => (*ns, *resource, None, None),
        [ns, resource, name] => (*ns, *resource, Some(*name), None),
        [ns, resource, name, sub] => (*ns, *resource, Some(*name), Some(*sub)),
        _ => return None,
    };
    let kind = group_kinds.iter().find(|(r, _)| *r == resource)?.1;
    Some(Target {
        kind,
        resource,
        namespace,
        name,
        subresource,
    })
}

/// Answers `request`.
pub async fn handle(double: Arc<Double>, request: Request<Incoming>) -> Response<Body> {
    double.log_request(request.method(), &request.uri().to_string());
    let path = request.uri().path().to_owned();
    let Some(target) = target(&path) else {
        return status(
            StatusCode::NOT_FOUND,
            "the server could not find the requested resource",
        );
    };
    let params = query(request.uri());
    let labels = params.get("labelSelector").cloned().unwrap_or_default();
    let fields = params.get("fieldSelector").cloned().unwrap_or_default();
    let (kind, namespace) = (target.kind, target.namespace.to_owned());
    if kind == Kind::AgentSandboxes && !double.serves_agent_sandbox() {
        return status(
            StatusCode::NOT_FOUND,
            "the server could not find the requested resource",
        );
    }
    match (request.method().clone(), target.name, target.subresource) {
        (Method::GET, None, None)
            if params.get("watch").is_some_and(|w| w == "true" || w == "1") =>
        {
            let seconds = params
                .get("timeoutSeconds")
                .and_then(|s| s.parse().ok())
                .unwrap_or(290u64);
            watch(
                &double,
                kind,
                namespace,
                labels,
                fields,
                Duration::from_secs(seconds),
            )
        }
        (Method::GET, None, None) => {
            let items = double.store.list(kind, &namespace, &labels, &fields);
            json_response(
                StatusCode::OK,
                &json!({
                    "apiVersion": kind.api_version(),
                    "kind": kind.list_kind(),
                    "metadata": {"resourceVersion": double.store.version().to_string()},
                    "items": items,
                }),
            )
        }
        (Method::POST, None, None) if double.is_forbidden(target.resource) => status(
            StatusCode::FORBIDDEN,
            &format!(
                "{resource} is forbidden: User \"system:serviceaccount:{namespace}:default\" \
                 cannot create resource \"{resource}\" in API group \"\" in the namespace \
                 \"{namespace}\"",
                resource = target.resource
            ),
        ),
        (Method::POST, None, None) => {
            let body = match request.into_body().collect().await {
                Ok(body) => body.to_bytes(),
                Err(e) => return status(StatusCode::BAD_REQUEST, &e.to_string()),
            };
            let object: Value = match serde_json::from_slice(&body) {
                Ok(object) => object,
                Err(e) => return status(StatusCode::BAD_REQUEST, &format!("invalid JSON: {e}")),
            };
            match double.store.create(kind, &namespace, object) {
                Ok(stored) => {
                    if kind == Kind::Pods {
                        let name = stored["metadata"]["name"].as_str().unwrap_or("").to_owned();
                        let uid = stored["metadata"]["uid"].as_str().unwrap_or("").to_owned();
                        double.run_pod(namespace, name, uid);
                    } else if kind == Kind::AgentSandboxes {
                        double.make_sandbox_pod(&namespace, &stored);
                    }
                    json_response(StatusCode::CREATED, &stored)
                }
                Err((code, message)) => status(code_of(code), &message),
            }
        }
        (Method::GET, Some(name), None) => match double.store.get(kind, &namespace, name) {
            Some(object) => json_response(StatusCode::OK, &object),
            None => not_found(kind, name),
        },
        (Method::DELETE, Some(name), None) => match double.store.delete(kind, &namespace, name) {
            Some(object) => {
                if kind == Kind::Pods {
                    let uid = object["metadata"]["uid"].as_str().unwrap_or("").to_owned();
                    double.stop_pod(uid).await;
                } else if kind == Kind::AgentSandboxes {
                    double.delete_sandbox_pod(&namespace, &object).await;
                }
                json_response(
                    StatusCode::OK,
                    &json!({"apiVersion": "v1", "kind": "Status", "metadata": {},
                            "status": "Success", "details": {"name": name}}),
                )
            }
            None => not_found(kind, name),
        },
        (Method::GET, Some(name), Some("portforward")) if kind == Kind::Pods => {
            port_forward(double, request, &namespace, name, &params).await
        }
        _ => status(
            StatusCode::METHOD_NOT_ALLOWED,
            "the double does not serve that",
        ),
    }
}

/// A watch: what matches now as `ADDED`, then every change that matches,
/// for `timeout`.
fn watch(
    double: &Double,
    kind: Kind,
    namespace: String,
    labels: String,
    fields: String,
    timeout: Duration,
) -> Response<Body> {
    // Subscribed before reading what is there: no change falls between.
    let mut changes = double.store.subscribe();
    let now = double.store.list(kind, &namespace, &labels, &fields);
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        let line = |kind_of_change: &str, object: &Value| {
            let mut text = json!({"type": kind_of_change, "object": object}).to_string();
            text.push('\n');
            Bytes::from(text)
        };
        for object in &now {
            if tx.send(line("ADDED", object)).await.is_err() {
                return;
            }
        }
        let until = tokio::time::sleep(timeout);
        tokio::pin!(until);
        loop {
            tokio::select! {
                _ = &mut until => return,
                change = changes.recv() => {
                    let change = match change {
                        Ok(change) => change,
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(_) => return,
                    };
                    if change.kind != kind || change.namespace != namespace
                        || !matches(&change.object, &labels, &fields) {
                        continue;
                    }
                    if tx.send(line(change.kind_of_change, &change.object)).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        let bytes = rx.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(bytes)), rx))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .expect("a valid response")
}

/// The websocket of a pod's port-forward.
async fn port_forward(
    double: Arc<Double>,
    mut request: Request<Incoming>,
    namespace: &str,
    name: &str,
    params: &std::collections::BTreeMap<String, String>,
) -> Response<Body> {
    let Some(pod) = double.store.get(Kind::Pods, namespace, name) else {
        return not_found(Kind::Pods, name);
    };
    if pod["status"]["phase"] != "Running" {
        return status(StatusCode::BAD_REQUEST, "pod is not running");
    }
    let Some(port) = params.get("ports").and_then(|p| p.parse::<u16>().ok()) else {
        return status(StatusCode::BAD_REQUEST, "one port, as ports=N");
    };
    let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_owned();
    let first = pod["spec"]["containers"][0]["name"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    let Some(pid) = double.kubelet.pid_of(&uid, &first).await else {
        return status(
            StatusCode::BAD_REQUEST,
            "the pod's container is not running",
        );
    };
    let Some(key) = request.headers().get("sec-websocket-key").cloned() else {
        return status(StatusCode::BAD_REQUEST, "a port-forward is a websocket");
    };
    let offered = request
        .headers()
        .get("sec-websocket-protocol")
        .and_then(|p| p.to_str().ok())
        .is_some_and(|p| {
            p.split(',')
                .any(|p| p.trim() == crate::port_forward::PROTOCOL)
        });
    if !offered {
        return status(
            StatusCode::BAD_REQUEST,
            "the double speaks v4.channel.k8s.io only",
        );
    }
    let upgrade = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        if let Ok(upgraded) = upgrade.await {
            crate::port_forward::serve(upgraded, pid, port).await;
        }
    });
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-accept", accept)
        .header("sec-websocket-protocol", crate::port_forward::PROTOCOL)
        .body(empty())
        .expect("a valid response")
}

fn code_of(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

fn not_found(kind: Kind, name: &str) -> Response<Body> {
    status(
        StatusCode::NOT_FOUND,
        &format!("{kind:?} \"{name}\" not found"),
    )
}

/// A `Status` response, as the API server reports failures.
fn status(code: StatusCode, message: &str) -> Response<Body> {
    json_response(
        code,
        &json!({
            "apiVersion": "v1", "kind": "Status", "metadata": {},
            "status": "Failure", "message": message,
            "reason": reason_of(code), "code": code.as_u16(),
        }),
    )
}

/// The machine-readable reason the API server gives for `code` (clients
/// match on it: `NotFound`, `AlreadyExists`).
fn reason_of(code: StatusCode) -> &'static str {
    match code.as_u16() {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "AlreadyExists",
        422 => "Invalid",
        _ => "InternalError",
    }
}

fn json_response(code: StatusCode, value: &Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(BodyExt::boxed(Full::new(Bytes::from(value.to_string()))))
        .expect("a valid response")
}

fn empty() -> Body {
    BodyExt::boxed(Full::new(Bytes::new()))
}
