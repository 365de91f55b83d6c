//! Egress through the host: from inside an isolated sandbox (no network of
//! its own), curl reaches a server on the host's loopback only through
//! the sandbox's proxy, by a name the policy allows, and gets a 403 naming
//! the rule otherwise. Every address is this machine's loopback; names are
//! pinned to it by the gateway's resolver.

mod egress_checks;
mod support;

use agentix::prelude::*;
use agentix_bash::BashOptions;
use agentix_egress::{EgressGateway, EgressPolicy, EgressRoute, MappedResolver};
use egress_checks::upstream;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Runs `command` in the sandbox's shell: its stdout, and its exit code.
async fn sh(sb: &Sandbox, command: String) -> (String, Option<i32>) {
    let ran = sb
        .remote(agentix_bash::run, (command.clone(), BashOptions::new()))
        .await
        .unwrap_or_else(|e| panic!("`{command}` did not run: {e}"));
    (ran.stdout_lossy().trim().to_owned(), ran.exit_code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_local_sandbox_reaches_the_host_only_through_egress() {
    let config = SandboxConfig::new(support::bundle_path());
    egress_checks::reaches_the_host_only_through_egress(&LocalProvider::new(), config).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_in_an_isolated_sandbox_reaches_only_what_the_policy_allows_through_the_host() {
    let body: Vec<u8> = (0..(5u32 << 20)).map(|i| (i % 251) as u8).collect();
    let digest = format!("{:x}", Sha256::digest(&body));
    let port = upstream(body).await;

    let loopback = "127.0.0.1".parse().unwrap();
    let resolver = MappedResolver::new()
        .map("upstream.test", [loopback])
        .unwrap()
        .map("inside.test", ["10.1.2.3".parse().unwrap()])
        .unwrap();
    let policy = EgressPolicy::new()
        .allow(&format!("upstream.test:{port}"))
        .allow(&format!("inside.test:{port}"))
        .allow_addresses("127.0.0.1");
    let gateway = EgressGateway::new(policy).resolver(resolver);
    let sb = support::sandbox().await;
    sb.register_namespace(gateway.namespace()).unwrap();

    // Without the proxy the host's server is out of reach: the sandbox
    // has a loopback of its own.
    let direct = format!("curl -sS --max-time 5 -o /dev/null http://127.0.0.1:{port}/");
    let (_, code) = sh(&sb, direct).await;
    assert_ne!(
        code,
        Some(0),
        "the sandbox reached the host's loopback directly"
    );

    let proxy = sb.remote(agentix_egress::serve_proxy, 0u16).await.unwrap();
    assert!(proxy.starts_with("http://egress:"), "{proxy}");
    // Without the URL's credential, the proxy takes nothing.
    let bare = format!("http://{}", proxy.rsplit_once('@').unwrap().1);
    let anonymous = format!(
        "curl -s --max-time 10 -w ' %{{http_code}}' -x {bare} http://upstream.test:{port}/"
    );
    let (out, _) = sh(&sb, anonymous).await;
    assert!(out.ends_with(" 407"), "{out}");
    assert_eq!(
        sb.remote(agentix_egress::serve_proxy, 0u16).await.unwrap(),
        proxy,
        "serving again returns the running proxy"
    );

    // Through a CONNECT tunnel, and as plain HTTP with an absolute URI.
    for mode in ["--proxytunnel", ""] {
        let fetch = format!(
            "curl -sS --max-time 30 {mode} -x {proxy} http://upstream.test:{port}/big | sha256sum"
        );
        let (out, code) = sh(&sb, fetch).await;
        assert_eq!(code, Some(0), "{mode}: {out}");
        assert!(
            out.starts_with(&digest),
            "{mode}: the bytes came back changed: {out}"
        );
    }
    // Several at once share the connection.
    let parallel = format!(
        "for i in 1 2 3 4; do curl -sS --max-time 30 --proxytunnel -x {proxy} \
         http://upstream.test:{port}/$i | sha256sum & done; wait"
    );
    let (out, _) = sh(&sb, parallel).await;
    assert_eq!(
        out.lines().filter(|l| l.starts_with(&digest)).count(),
        4,
        "{out}"
    );

    // Refusals: a 403 whose body names the rule.
    let refused = |target: &str| {
        format!("curl -s --max-time 10 -w ' %{{http_code}}' -x {proxy} http://{target}/")
    };
    let cases = [
        (format!("elsewhere.test:{port}"), "not on the allow-list"),
        (
            format!("upstream.test:{}", port.wrapping_add(1).max(1)),
            "not allowed",
        ),
        (format!("inside.test:{port}"), "10.1.2.3, a private address"),
        (format!("10.9.8.7:{port}"), "an address literal"),
    ];
    for (target, reason) in cases {
        let (out, _) = sh(&sb, refused(&target)).await;
        assert!(out.ends_with(" 403"), "{target}: {out}");
        assert!(out.contains(reason), "{target}: {out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxs_tunnels_end_with_it() {
    // An upstream that holds each connection until its client closes it,
    // and says so.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (events, mut seen) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let events = events.clone();
            let _ = events.send("accepted");
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while matches!(conn.read(&mut buf).await, Ok(n) if n > 0) {}
                let _ = events.send("closed");
            });
        }
    });
    let sb = support::sandbox().await;
    sb.register_namespace(egress_checks::gateway_to_loopback(port).namespace())
        .unwrap();
    let proxy = sb.remote(agentix_egress::serve_proxy, 0u16).await.unwrap();
    let target = format!("upstream.test:{port}");
    let status = sb
        .remote(agentix_e2e::egress_client::hold_tunnel, (proxy, target))
        .await
        .unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert_eq!(next(&mut seen).await, "accepted");
    // The tunnel is open and idle; the sandbox goes, and the host's side
    // of it with it.
    sb.delete().await;
    assert_eq!(next(&mut seen).await, "closed");
}

/// The upstream's next news, within 10 s.
async fn next(seen: &mut tokio::sync::mpsc::UnboundedReceiver<&'static str>) -> &'static str {
    tokio::time::timeout(std::time::Duration::from_secs(10), seen.recv())
        .await
        .expect("the upstream hears of it")
        .unwrap()
}

/// What the TLS upstream saw: each request's path and `authorization`.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>;

/// A TLS server on the host's loopback for `names`, with a certificate of
/// its own making (the private CA a client must be told of): `/big`
/// answers `big`; any other path answers whether its `authorization` was
/// `expected` (never the header itself). Its port, and the certificate
/// as PEM and DER.
async fn tls_upstream(
    names: &[&str],
    big: Vec<u8>,
    expected: &'static str,
    seen: Seen,
) -> (u16, String, Vec<u8>) {
    use http_body_util::Full;
    use hyper::{Request, Response};
    use tokio_rustls::rustls;
    let made =
        rcgen::generate_simple_self_signed(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    let (pem, der) = (made.cert.pem(), made.cert.der().to_vec());
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(made.signing_key.serialize_der().into());
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![der.clone().into()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let big = bytes::Bytes::from(big);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, big, seen) = (acceptor.clone(), big.clone(), seen.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |request: Request<_>| {
                    let (big, seen) = (big.clone(), seen.clone());
                    async move {
                        let path = request.uri().to_string();
                        let auth = request
                            .headers()
                            .get("authorization")
                            .map(|v| v.to_str().unwrap().to_owned())
                            .unwrap_or_default();
                        seen.lock().unwrap().push((path.clone(), auth.clone()));
                        let body = if path == "/big" {
                            big
                        } else {
                            let verdict = if auth == expected {
                                "auth-ok"
                            } else {
                                "auth-wrong"
                            };
                            bytes::Bytes::from(format!("{verdict} {path}"))
                        };
                        Ok::<_, std::convert::Infallible>(Response::new(Full::new(body)))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (port, pem, der)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_sandbox_finds_the_proxy_in_its_environment_and_routes_keep_the_token_on_the_host(
) {
    const TOKEN: &str = "Bearer host-only-7d1f0c";
    let body: Vec<u8> = (0..(64u32 << 20)).map(|i| (i % 249) as u8).collect();
    let digest = format!("{:x}", Sha256::digest(&body));
    let seen = Seen::default();
    let (port, pem, der) =
        tls_upstream(&["secure.test", "api.test"], body, TOKEN, seen.clone()).await;

    let loopback: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    let resolver = MappedResolver::new()
        .map("secure.test", [loopback])
        .unwrap()
        .map("api.test", [loopback])
        .unwrap();
    let audit = std::env::temp_dir().join(format!("egress-audit-{}.jsonl", agentix::random_hex(6)));
    let route = EgressRoute::new("api", &format!("https://api.test:{port}/base"))
        .unwrap()
        .header("authorization", TOKEN)
        .unwrap();
    let gateway = EgressGateway::new(
        EgressPolicy::new()
            .allow(&format!("secure.test:{port}"))
            .allow_addresses("127.0.0.1"),
    )
    .resolver(resolver)
    .route(route)
    .add_root_certificate(der)
    .audit_log(&audit)
    .unwrap();
    let config = gateway.prepare(SandboxConfig::new(support::bundle_path()));
    let sb = support::sandbox_with(config).await;
    gateway.attach(&sb).unwrap();
    let spans = SpanCapture::default();
    sb.traces().add_processor(spans.clone());

    // Every spelling of the proxy variables, the same URL; loopback
    // reached directly.
    let (out, _) = sh(
        &sb,
        "echo \"$HTTP_PROXY $http_proxy $HTTPS_PROXY $https_proxy $ALL_PROXY $all_proxy|$NO_PROXY\""
            .into(),
    )
    .await;
    let (urls, no_proxy) = out.split_once('|').unwrap();
    let urls: Vec<&str> = urls.split(' ').collect();
    assert_eq!(urls.len(), 6, "{out}");
    assert!(urls[0].starts_with("http://egress:"), "{out}");
    assert!(urls.iter().all(|u| *u == urls[0]), "{out}");
    assert_eq!(no_proxy, agentix_egress::NO_PROXY);

    // Direct, the upstream is out of reach.
    let direct = format!("curl -sS --noproxy '*' --max-time 5 -k https://127.0.0.1:{port}/big");
    assert_ne!(sh(&sb, direct).await.1, Some(0));

    // curl with no proxy option: HTTPS through the tunnel, checked
    // end to end against the private CA only the sandbox's client trusts.
    let (_, wrote) = sh(
        &sb,
        format!("cat > ca.pem <<'EOF'\n{}\nEOF", pem.trim_end()),
    )
    .await;
    assert_eq!(wrote, Some(0));
    let fetch = format!(
        "curl -sS --max-time 30 --cacert ca.pem https://secure.test:{port}/big | sha256sum"
    );
    let (out, code) = sh(&sb, fetch).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.starts_with(&digest),
        "the bytes came back changed: {out}"
    );

    // A named route: the host adds the token; the sandbox sees neither it
    // in its answers nor anywhere it can look.
    let via_route = "curl -sS -D - --max-time 30 \"$HTTP_PROXY/api/check?x=1\"".to_owned();
    let (out, code) = sh(&sb, via_route).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.ends_with("auth-ok /base/check?x=1"), "{out}");
    assert!(!out.contains("host-only"), "{out}");
    assert!(seen
        .lock()
        .unwrap()
        .iter()
        .any(|(path, auth)| path == "/base/check?x=1" && auth == TOKEN));
    let look = "{ env; cat /proc/*/environ /proc/*/cmdline; grep -rs . . /tmp; } 2>/dev/null \
                | grep -c host-onl[y]"
        .to_owned();
    assert_eq!(
        sh(&sb, look).await.0,
        "0",
        "the token is inside the sandbox"
    );
    let unknown = "curl -s --max-time 10 -w ' %{http_code}' \"$HTTP_PROXY/nope/x\"".to_owned();
    let (out, _) = sh(&sb, unknown).await;
    assert!(
        out.ends_with(" 403") && out.contains("no such route"),
        "{out}"
    );

    // What the host kept: a record and a span per connection.
    let id = sb.id().to_owned();
    sb.delete().await;
    let records: Vec<agentix_egress::EgressRecord> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let _ = std::fs::remove_file(&audit);
    let find = |to: &str, decision: &str| {
        records
            .iter()
            .find(|r| r.to == to && r.decision == decision)
            .unwrap_or_else(|| panic!("no {decision} record of {to}: {records:?}"))
    };
    let download = find(&format!("secure.test:{port}"), "allowed");
    assert!(download.bytes_down >= 64 << 20, "{download:?}");
    assert!(
        download.bytes_up > 0 && download.address.as_deref() == Some(&*format!("127.0.0.1:{port}"))
    );
    assert_eq!(download.sandbox.as_deref(), Some(id.as_str()));
    assert!(find("api", "allowed").route);
    assert!(find("nope", "refused")
        .reason
        .as_deref()
        .unwrap()
        .contains("no such route"));
    support::wait_until(
        "the egress spans",
        std::time::Duration::from_secs(10),
        || spans.egress().len() >= 3,
    )
    .await;
    let ended = spans.egress();
    let secure = ended
        .iter()
        .find(|s| s.attributes["egress.to"] == format!("secure.test:{port}"))
        .unwrap();
    assert_eq!(secure.attributes["egress.allowed"], true);
    assert!(secure.attributes["egress.bytes_down"].as_u64().unwrap() >= 64 << 20);
    assert!(ended
        .iter()
        .any(|s| s.attributes["egress.to"] == "nope" && s.attributes["egress.allowed"] == false));
}

/// Keeps the `egress` spans that end.
#[derive(Clone, Default)]
struct SpanCapture(std::sync::Arc<std::sync::Mutex<Vec<agentix::trace::SpanData>>>);

impl agentix::trace::Processor for SpanCapture {
    fn on_span_end(&mut self, span: &agentix::trace::SpanData) {
        if span.name == "egress" {
            self.0.lock().unwrap().push(span.clone());
        }
    }
}

impl SpanCapture {
    fn egress(&self) -> Vec<agentix::trace::SpanData> {
        self.0.lock().unwrap().clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_holds_its_upstream_back_and_no_other_tunnel_and_the_span_joins_the_call(
) {
    use agentix::prelude::InSpan;
    use std::sync::atomic::{AtomicU64, Ordering};
    // An upstream that sends for as long as it is let, and counts.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let written = std::sync::Arc::new(AtomicU64::new(0));
    let counter = written.clone();
    let (ended, upstream_ended) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let Ok((mut conn, _)) = listener.accept().await else {
            return;
        };
        let chunk = vec![7u8; 64 << 10];
        while conn.write_all(&chunk).await.is_ok() {
            counter.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
        let _ = ended.send(());
    });
    let other = upstream(b"beside".to_vec()).await;
    let gateway = EgressGateway::new(
        EgressPolicy::new()
            .allow(&format!("upstream.test:{port}"))
            .allow(&format!("other.test:{other}"))
            .allow_addresses("127.0.0.1"),
    )
    .resolver(
        MappedResolver::new()
            .map("upstream.test", ["127.0.0.1".parse().unwrap()])
            .unwrap()
            .map("other.test", ["127.0.0.1".parse().unwrap()])
            .unwrap(),
    );
    let sb = support::sandbox().await;
    sb.register_namespace(gateway.namespace()).unwrap();
    let spans = SpanCapture::default();
    sb.traces().add_processor(spans.clone());
    let step = sb.traces().span("host.step");
    let trace_id = step.trace_id();
    let proxy = sb
        .remote(agentix_egress::serve_proxy, 0u16)
        .in_span(step)
        .await
        .unwrap();
    let status = sb
        .remote(
            agentix_e2e::egress_client::hold_tunnel,
            (proxy.clone(), format!("upstream.test:{port}")),
        )
        .await
        .unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");

    // The client never reads: the window and the sockets' buffers fill,
    // then nothing moves, and nothing piles up on the host.
    let watched = written.clone();
    let settled = |limit| async move {
        let mut last = u64::MAX;
        for _ in 0..limit {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            let now = watched.load(Ordering::Relaxed);
            if now == last {
                return now;
            }
            last = now;
        }
        panic!("the upstream still sends after {limit} half-seconds: {last} bytes");
    };
    let first = settled(40).await;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(
        written.load(Ordering::Relaxed),
        first,
        "the upstream moved again"
    );
    assert!(first < 48 << 20, "{first} bytes left the upstream");
    // The stalled tunnel holds up no other: fresh tunnels carry their
    // bytes beside it.
    let digests = sb
        .remote(
            agentix_e2e::egress_client::fetch_through_many,
            (proxy.clone(), format!("other.test:{other}"), 4u32),
        )
        .await
        .unwrap();
    assert_eq!(digests, vec![format!("{:x}", Sha256::digest(b"beside")); 4]);

    // The sandbox goes mid-transfer: the host closes the upstream's
    // connection (its next write fails).
    sb.delete().await;
    tokio::time::timeout(std::time::Duration::from_secs(10), upstream_ended)
        .await
        .expect("the upstream's connection closes with the sandbox")
        .unwrap();
    support::wait_until(
        "the tunnel's span",
        std::time::Duration::from_secs(10),
        || !spans.egress().is_empty(),
    )
    .await;
    let span = &spans.egress()[0];
    assert_eq!(
        span.trace_id, trace_id,
        "the connection's span is under the call that started the proxy"
    );
    assert!(span.attributes["egress.bytes_down"].as_u64().unwrap() <= first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_tunnels_at_once_all_carry_their_bytes() {
    let body = vec![3u8; 64 << 10];
    let port = upstream(body).await;
    let gateway = egress_checks::gateway_to_loopback(port);
    let sb = support::sandbox().await;
    sb.register_namespace(gateway.namespace()).unwrap();
    let proxy = sb.remote(agentix_egress::serve_proxy, 0u16).await.unwrap();
    let sizes = sb
        .remote(
            agentix_e2e::egress_client::fetch_through_many,
            (proxy, format!("upstream.test:{port}"), 200u32),
        )
        .await
        .unwrap();
    let digest = format!("{:x}", Sha256::digest(vec![3u8; 64 << 10]));
    assert_eq!(sizes.len(), 200);
    assert!(sizes.iter().all(|d| *d == digest), "{sizes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_and_literals_that_reach_the_host_or_the_metadata_address_are_refused() {
    let port = upstream(b"inside".to_vec()).await;
    // Every name is on the allow-list; what they resolve to is not.
    let resolver = MappedResolver::new()
        .map("localhost", ["127.0.0.1".parse().unwrap()])
        .unwrap()
        .map("rebound.test", ["127.0.0.1".parse().unwrap()])
        .unwrap()
        .map("metadata.test", ["169.254.169.254".parse().unwrap()])
        .unwrap();
    let gateway = EgressGateway::new(
        EgressPolicy::new()
            .allow("localhost")
            .allow("*.test")
            .ports([port]),
    )
    .resolver(resolver);
    let config = gateway.prepare(SandboxConfig::new(support::bundle_path()));
    let sb = support::sandbox_with(config).await;
    gateway.attach(&sb).unwrap();
    let cases = [
        ("localhost", "127.0.0.1, a loopback address"),
        ("rebound.test", "127.0.0.1, a loopback address"),
        ("metadata.test", "169.254.169.254"),
        ("127.0.0.1", "an address literal"),
        ("[::1]", "an address literal"),
        ("2130706433", "an address literal"),
    ];
    for (host, reason) in cases {
        // Through the proxy even for loopback names (NO_PROXY lists them).
        let fetch = format!(
            "env -u NO_PROXY -u no_proxy curl -s --max-time 10 -w ' %{{http_code}}' \
             http://{host}:{port}/"
        );
        let (out, _) = sh(&sb, fetch).await;
        assert!(out.ends_with(" 403"), "{host}: {out}");
        assert!(out.contains(reason), "{host}: {out}");
        assert!(!out.contains("inside"), "{host} reached the host: {out}");
    }
}
