//! The `egress` section (only with `--only egress`): tunnels through the
//! host's egress gateway, timed from inside a plain sandbox (whose direct
//! connections reach the host's loopback, for the comparison).

use std::time::Duration;

use agentix::{LocalProvider, Provider};
use agentix_egress::{EgressGateway, EgressPolicy, MappedResolver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::egress_fns;
use crate::report::Report;

/// Bytes the upstream sends for `GET /`.
const DOWNLOAD: usize = 64 << 20;

/// A server on the host's loopback: answers a request with [`DOWNLOAD`]
/// bytes; a connection that sends nothing is closed when its client goes.
async fn upstream() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let port = listener.local_addr().expect("its address").port();
    let body: std::sync::Arc<[u8]> = vec![7u8; DOWNLOAD].into();
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
                let reply = format!("HTTP/1.1 200 OK\r\nContent-Length: {DOWNLOAD}\r\n\r\n");
                let _ = conn.write_all(reply.as_bytes()).await;
                let _ = conn.write_all(&body).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    port
}

pub(crate) async fn egress(report: &mut Report) {
    let port = upstream().await;
    let resolver = MappedResolver::new()
        .map("upstream.test", ["127.0.0.1".parse().expect("an address")])
        .expect("a name");
    let policy = EgressPolicy::new()
        .allow(&format!("upstream.test:{port}"))
        .allow_addresses("127.0.0.1");
    let gateway = EgressGateway::new(policy).resolver(resolver);
    let sb = LocalProvider::new()
        .session(crate::plain_config())
        .await
        .expect("sandbox starts");
    sb.register_namespace(gateway.namespace())
        .expect("egress registers");
    let proxy = sb
        .remote(agentix_egress::serve_proxy, 0u16)
        .await
        .expect("the proxy starts");
    let target = format!("upstream.test:{port}");

    let (through, direct) = sb
        .remote(
            egress_fns::egress_connects,
            (
                proxy.clone(),
                target.clone(),
                format!("127.0.0.1:{port}"),
                300u32,
            ),
        )
        .await
        .expect("connects succeed");
    report.add(
        "egress_connect_overhead_p50_us",
        "a CONNECT tunnel through the host beyond a direct loopback connect, p50 of 300",
        "µs",
        through - direct,
    );

    let mut rates = Vec::new();
    for _ in 0..3 {
        let rate = sb
            .remote(egress_fns::egress_download, (proxy.clone(), target.clone()))
            .await
            .expect("the download succeeds");
        rates.push(rate);
    }
    rates.sort_by(f64::total_cmp);
    report.add(
        "egress_download_mb_per_s",
        "64 MiB through one tunnel, median of 3",
        "MB/s",
        rates[1],
    );

    let before = crate::rss_kib(std::process::id());
    let held = sb
        .remote(egress_fns::egress_hold, (proxy, target, 200u32))
        .await
        .expect("every tunnel opens");
    assert_eq!(held, 200);
    tokio::time::sleep(Duration::from_millis(200)).await;
    report.add(
        "egress_tunnels_200_host_rss_mib",
        "what 200 open egress tunnels add to the host's RSS",
        "MiB",
        (crate::rss_kib(std::process::id()) - before) / 1024.0,
    );
    let _ = sb.remote(egress_fns::egress_release, ()).await;
    sb.delete().await;
}
