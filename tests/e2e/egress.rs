//! Egress through the host: from inside an isolated sandbox (no network of
//! its own), curl reaches a server on the host's loopback only through
//! the sandbox's proxy, by a name the policy allows, and gets a 403 naming
//! the rule otherwise. Every address is this machine's loopback; names are
//! pinned to it by the gateway's resolver.

mod support;

use agentix::prelude::*;
use agentix_bash::BashOptions;
use agentix_egress::{EgressGateway, EgressPolicy, MappedResolver};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A server on the host's loopback answering every request with `body`.
async fn upstream(body: Vec<u8>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let body = body.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
                let _ = conn.write_all(&body).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    port
}

/// Runs `command` in the sandbox's shell: its stdout, and its exit code.
async fn sh(sb: &Sandbox, command: String) -> (String, Option<i32>) {
    let ran = sb
        .remote(agentix_bash::run, (command.clone(), BashOptions::new()))
        .await
        .unwrap_or_else(|e| panic!("`{command}` did not run: {e}"));
    (ran.stdout_lossy().trim().to_owned(), ran.exit_code)
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
    let policy = EgressPolicy::new()
        .allow(&format!("upstream.test:{port}"))
        .allow_addresses("127.0.0.1");
    let resolver = MappedResolver::new()
        .map("upstream.test", ["127.0.0.1".parse().unwrap()])
        .unwrap();
    let sb = support::sandbox().await;
    sb.register_namespace(EgressGateway::new(policy).resolver(resolver).namespace())
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
