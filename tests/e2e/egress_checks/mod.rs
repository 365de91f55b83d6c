//! The egress check every provider's tests run: a sandbox made from a
//! gateway's config reaches a server on the host's loopback only through
//! the proxy its environment names, byte-exact, and not directly.

use agentix::{Provider, SandboxConfig};
use agentix_bash::BashOptions;
use agentix_egress::{EgressGateway, EgressPolicy, MappedResolver};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A server on the host's 127.0.0.1 answering every request with `body`.
pub(crate) async fn upstream(body: Vec<u8>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
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

/// A gateway that allows `upstream.test:port` alone, the name pinned to
/// the host's 127.0.0.1 (and that address allowed, for the tests).
pub(crate) fn gateway_to_loopback(port: u16) -> EgressGateway {
    EgressGateway::new(
        EgressPolicy::new()
            .allow(&format!("upstream.test:{port}"))
            .allow_addresses("127.0.0.1"),
    )
    .resolver(
        MappedResolver::new()
            .map("upstream.test", ["127.0.0.1".parse().unwrap()])
            .unwrap(),
    )
}

/// Creates a sandbox with `provider` from `config` prepared by a gateway
/// that allows one name, mapped to a server on the host's loopback, and
/// checks: no direct route to it; its proxy in the environment; eight
/// tunnels at once through it, each answer byte-exact.
pub(crate) async fn reaches_the_host_only_through_egress(
    provider: &dyn Provider,
    config: SandboxConfig,
) {
    let body: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 241) as u8).collect();
    let digest = format!("{:x}", Sha256::digest(&body));
    let port = upstream(body).await;
    let gateway = gateway_to_loopback(port);
    let sb = provider
        .create(gateway.prepare(config))
        .await
        .expect("the sandbox starts");
    gateway.attach(&sb).unwrap();
    let bash = |script: String| {
        let sb = &sb;
        async move {
            let options = BashOptions::new().timeout(std::time::Duration::from_secs(10));
            let out = sb
                .remote(agentix_bash::run, (script, options))
                .await
                .unwrap();
            (out.exit_code, out.stdout_lossy().trim().to_owned())
        }
    };
    let (code, _) = within(
        "the direct probe",
        bash(format!("echo probe > /dev/tcp/127.0.0.1/{port}")),
    )
    .await;
    assert_ne!(
        code,
        Some(0),
        "the sandbox reached the host's loopback directly"
    );
    let (_, proxy) = within("echo $HTTP_PROXY", bash("echo $HTTP_PROXY".into())).await;
    assert!(proxy.starts_with("http://egress:"), "{proxy:?}");
    let fetch = sb.remote(
        agentix_e2e::egress_client::fetch_through_many,
        (proxy, format!("upstream.test:{port}"), 8u32),
    );
    let digests = within("eight fetches through the proxy", fetch)
        .await
        .unwrap();
    assert_eq!(digests, vec![digest; 8]);
    sb.delete().await;
}

/// `step`'s outcome, or a failure naming it after a minute.
async fn within<T>(what: &str, step: impl std::future::IntoFuture<Output = T>) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(60), step)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer in a minute"))
}
