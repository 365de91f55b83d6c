//! Agentix spans reach OpenTelemetry: a real OTLP/HTTP receiver here
//! decodes what `agentix_otel` posts (protobuf, as a collector would) and
//! the names, parents, attributes and sandbox ids are checked.

mod support;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentix::trace;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use support::wait_until;

/// What the receiver decoded: every span, with its resource's service name.
type Received = Arc<Mutex<Vec<(String, Span)>>>;

/// Starts an OTLP/HTTP receiver on a free port; returns its base URL.
async fn receiver(received: Received) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let received = received.clone();
            let service =
                hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                    let received = received.clone();
                    async move {
                        assert_eq!(request.uri().path(), "/v1/traces");
                        assert_eq!(request.headers()["content-type"], "application/x-protobuf");
                        let body = request.into_body().collect().await.unwrap().to_bytes();
                        let export =
                            ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                        for resource in export.resource_spans {
                            let service = resource
                                .resource
                                .iter()
                                .flat_map(|r| &r.attributes)
                                .find(|a| a.key == "service.name")
                                .and_then(text)
                                .unwrap_or_default();
                            for scope in resource.scope_spans {
                                for span in scope.spans {
                                    received.lock().unwrap().push((service.clone(), span));
                                }
                            }
                        }
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::new())))
                    }
                });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    base
}

fn text(attribute: &KeyValue) -> Option<String> {
    match attribute.value.as_ref()?.value.as_ref()? {
        Value::StringValue(s) => Some(s.clone()),
        _ => None,
    }
}

fn attribute<'a>(span: &'a Span, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref()?.value.as_ref())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

// Two threads: the receiver answers while a flush waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_and_sandbox_spans_reach_an_otlp_receiver_nested_and_labelled() {
    let received: Received = Arc::default();
    let base = receiver(received.clone()).await;
    let exporter = agentix_otel::OtlpProcessor::new(base)
        .service_name("e2e-eval")
        .start()
        .expect("the exporter starts");
    let hub = trace::TraceHub::new();
    hub.add_processor(exporter);
    let sb = support::sandbox_with(
        agentix::SandboxConfig::new(support::bundle_path()).trace_hub(hub.clone()),
    )
    .await;

    let step = hub.span("host.step").attr("model", "claude");
    let (trace_id, step_id) = (step.trace_id(), step.id());
    let sandbox_step = step
        .scope(sb.remote(agentix_e2e::traced_step, 2u32))
        .await
        .unwrap();
    drop(step);
    wait_until(
        "the sandbox's spans at the host",
        Duration::from_secs(10),
        || {
            hub.force_flush();
            received
                .lock()
                .unwrap()
                .iter()
                .filter(|(_, s)| hex(&s.trace_id) == trace_id)
                .count()
                >= 4
        },
    )
    .await;
    let spans: Vec<(String, Span)> = received
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, s)| hex(&s.trace_id) == trace_id)
        .cloned()
        .collect();
    let find = |name: &'static str| spans.iter().filter(move |(_, s)| s.name == name);
    let (service, host) = find("host.step").next().expect("the host span");
    assert_eq!(service, "e2e-eval");
    assert_eq!(hex(&host.span_id), step_id);
    assert!(host.parent_span_id.is_empty(), "a root span");
    assert_eq!(
        attribute(host, "model"),
        Some(&Value::StringValue("claude".into()))
    );
    assert_eq!(attribute(host, "agentix.sandbox"), None, "a host span");

    let (_, in_sandbox) = find("sandbox.step").next().expect("the sandbox span");
    assert_eq!(hex(&in_sandbox.span_id), sandbox_step);
    assert_eq!(
        hex(&in_sandbox.parent_span_id),
        step_id,
        "nested under the host's"
    );
    assert_eq!(attribute(in_sandbox, "children"), Some(&Value::IntValue(2)));
    assert_eq!(
        attribute(in_sandbox, "agentix.sandbox"),
        Some(&Value::StringValue(sb.id().to_owned()))
    );
    assert!(in_sandbox.end_time_unix_nano >= in_sandbox.start_time_unix_nano);
    let children: Vec<&Span> = find("sandbox.child").map(|(_, s)| s).collect();
    assert_eq!(children.len(), 2);
    for child in children {
        assert_eq!(hex(&child.parent_span_id), sandbox_step);
        assert_eq!(child.events.len(), 1);
        assert_eq!(child.events[0].name, "tick");
    }
}
