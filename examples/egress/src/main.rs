//! Egress end to end, on the embedded local provider: an isolated sandbox
//! (no network of its own) runs curl with nothing but the environment its
//! workers set. A name the policy allows is fetched through the host; any
//! other is refused with a 403 naming the rule; a named route reaches an
//! API with a token only the host holds. Then the host's audit log.
//!
//! The "internet" here is a small server on this machine's 127.0.0.1,
//! reached by name through a resolver that pins the names to it (and a
//! policy that allows that address, which a real one would not).

use agentix::{LocalProvider, Provider, SandboxConfig};
use agentix_bash::BashOptions;
use agentix_egress::{EgressGateway, EgressPolicy, EgressRoute, MappedResolver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The token the API wants; it never enters the sandbox.
const TOKEN: &str = "Bearer example-host-only-token";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    agentix::link_plugins!(agentix_bash, agentix_egress);
    agentix::bundle::dispatch();
    host()
}

#[tokio::main]
async fn host() -> Result<(), Box<dyn std::error::Error>> {
    let port = stand_in_internet().await?;
    let loopback = "127.0.0.1".parse()?;
    let resolver = MappedResolver::new()
        .map("packages.example.test", [loopback])?
        .map("api.example.test", [loopback])?
        .map("elsewhere.example.test", [loopback])?;
    let api = EgressRoute::new("api", &format!("http://api.example.test:{port}"))?
        .header("authorization", TOKEN)?;
    let audit = std::env::temp_dir().join(format!("egress-{}.jsonl", std::process::id()));
    let gateway = EgressGateway::new(
        EgressPolicy::new()
            .allow(&format!("packages.example.test:{port}"))
            .allow_addresses("127.0.0.1"),
    )
    .resolver(resolver)
    .route(api)
    .audit_log(&audit)?;

    let config = gateway.prepare(SandboxConfig::current_exe()?);
    let sandbox = LocalProvider::new().session(config).await?;
    gateway.attach(&sandbox)?;

    let allowed = format!("curl -sS http://packages.example.test:{port}/simple/requests/");
    let refused = format!("curl -sS http://elsewhere.example.test:{port}/");
    let routed = "curl -sS \"$HTTP_PROXY/api/user\"".to_owned();
    for (what, command) in [
        ("allowed", allowed),
        ("refused", refused),
        ("routed", routed),
    ] {
        let ran = sandbox
            .remote(agentix_bash::run, (command.clone(), BashOptions::new()))
            .await?;
        println!(
            "{what:>8}: {command}\n          -> {}",
            ran.stdout_lossy().trim()
        );
    }
    sandbox.delete().await;

    println!("audit log {}:", audit.display());
    for line in std::fs::read_to_string(&audit)?.lines() {
        println!("  {line}");
    }
    let _ = std::fs::remove_file(&audit);
    Ok(())
}

/// A server on 127.0.0.1 standing in for the internet: the package index
/// lists a file; the API says who the token belongs to, if it is the one.
async fn stand_in_internet() -> std::io::Result<u16> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let body = if head.starts_with("get /simple/") {
                    "requests-2.32.3-py3-none-any.whl".to_owned()
                } else if head.contains(&format!("authorization: {}", TOKEN.to_ascii_lowercase())) {
                    r#"{"login": "example-bot"}"#.to_owned()
                } else {
                    "who are you?".to_owned()
                };
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
            });
        }
    });
    Ok(port)
}
