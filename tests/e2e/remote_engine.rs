//! A Docker engine on another host, as a host reaches it: the engine's API
//! served at an address of a network namespace this test makes (a veth
//! pair, `10.251.<n>.2`), by a process inside that namespace that passes
//! connections on to this machine's engine. The provider gets only that
//! address; the sandbox must work end to end with no path of this machine
//! mounted, nothing published, and every byte through that endpoint.

#[allow(dead_code)]
mod docker_support;
mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use agentix::{Provider, SandboxConfig};
use agentix_bash::BashOptions;
use agentix_provider_docker::{DockerProvider, ServerReach};
use docker_support::{
    bundle_dir, container_gone, relay_engine_api, tcp_client, tools_image, TOOLS_IMAGE,
};

/// Names the address and the log file of [`engine_endpoint_in_namespace`],
/// and the directory of its TLS certificates when it speaks TLS.
const LISTEN: &str = "AGENTIX_TEST_ENGINE_LISTEN";
const LOG: &str = "AGENTIX_TEST_ENGINE_LOG";
const TLS_DIR: &str = "AGENTIX_TEST_ENGINE_TLS";

/// The engine's API at `$LISTEN`, passed on to this machine's engine; what
/// clients send is appended to `$LOG`. With `$TLS_DIR`, it speaks TLS and
/// takes only clients with a certificate of that directory's CA, as an
/// engine started with `--tlsverify` does. Run inside the namespace by the
/// tests below.
#[tokio::test]
#[ignore = "run inside its network namespace by an_engine_at_another_address_serves_a_sandbox_through_its_api_alone"]
async fn engine_endpoint_in_namespace() {
    let listen = std::env::var(LISTEN).expect("run by the test");
    let log = PathBuf::from(std::env::var(LOG).expect("run by the test"));
    let tls = std::env::var_os(TLS_DIR).map(|dir| tls_acceptor(Path::new(&dir)));
    let listener = tokio::net::TcpListener::bind(&listen).await.unwrap();
    println!("listening");
    relay_engine_api(listener, tls, move |chunk| {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        file.write_all(chunk).unwrap();
    })
    .await;
}

/// A TLS acceptor with the server certificate in `dir` that requires a
/// client certificate of `dir`'s CA.
fn tls_acceptor(dir: &Path) -> tokio_rustls::TlsAcceptor {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(dir.join("ca.pem")).unwrap())
        .unwrap();
    let clients =
        rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider.clone())
            .build()
            .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(clients)
        .with_single_cert(
            vec![CertificateDer::from_pem_file(dir.join("server-cert.pem")).unwrap()],
            PrivateKeyDer::from_pem_file(dir.join("server-key.pem")).unwrap(),
        )
        .unwrap();
    tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config))
}

/// A CA, a server certificate for `ip` and a client certificate, written
/// into `dir` as Docker's client expects them (`ca.pem`, `cert.pem`,
/// `key.pem`) beside the server's (`server-cert.pem`, `server-key.pem`).
fn make_certificates(dir: &Path, ip: &str) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    std::fs::create_dir_all(dir).unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec![ip.to_owned()])
        .unwrap()
        .signed_by(&server_key, &issuer)
        .unwrap();
    let client_key = KeyPair::generate().unwrap();
    let client = CertificateParams::new(vec!["agentix-test-client".to_owned()])
        .unwrap()
        .signed_by(&client_key, &issuer)
        .unwrap();
    for (file, pem) in [
        ("ca.pem", ca_cert.pem()),
        ("server-cert.pem", server.pem()),
        ("server-key.pem", server_key.serialize_pem()),
        ("cert.pem", client.pem()),
        ("key.pem", client_key.serialize_pem()),
    ] {
        std::fs::write(dir.join(file), pem).unwrap();
    }
}

/// A network namespace with a veth pair to this one, and the endpoint
/// process inside it; all removed when dropped.
struct EngineHost {
    // Dropped after the endpoint (fields drop in order).
    endpoint: Child,
    _namespace: Namespace,
    addr: String,
    log: PathBuf,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("the `ip` command");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A network namespace with a veth pair to this one: the engine host's
/// address, `10.251.<tag>.2`, and this machine's, `.1`.
struct Namespace {
    name: String,
    /// The host's end of the veth pair.
    outside: String,
    host_ip: String,
    engine_ip: String,
}

impl Namespace {
    fn make(n: u32) -> Namespace {
        let tag = (std::process::id() * 2 + n) % 250 + 1;
        let name = format!("agentix-engine-{}-{n}", std::process::id());
        let (outside, inside) = (format!("agxh{tag}"), format!("agxn{tag}"));
        let (host_ip, engine_ip) = (format!("10.251.{tag}.1"), format!("10.251.{tag}.2"));
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        let _ = Command::new("ip").args(["link", "del", &outside]).output();
        ip(&["netns", "add", &name]);
        ip(&[
            "link", "add", &outside, "type", "veth", "peer", "name", &inside,
        ]);
        ip(&["link", "set", &inside, "netns", &name]);
        ip(&["addr", "add", &format!("{host_ip}/30"), "dev", &outside]);
        ip(&["link", "set", &outside, "up"]);
        let in_ns = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &name, "ip"];
            all.extend_from_slice(args);
            ip(&all);
        };
        in_ns(&["addr", "add", &format!("{engine_ip}/30"), "dev", &inside]);
        in_ns(&["link", "set", &inside, "up"]);
        in_ns(&["link", "set", "lo", "up"]);
        Namespace {
            name,
            outside,
            host_ip,
            engine_ip,
        }
    }

    /// `program` run inside the namespace.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name]).arg(program);
        command
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        // The pair goes with either end: now, not when the kernel gets
        // round to freeing the namespace.
        let _ = Command::new("ip")
            .args(["link", "del", &self.outside])
            .output();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

impl EngineHost {
    /// Engine host `n` of this test process (each test its own), speaking
    /// TLS with the certificates in `tls` if given.
    fn start(n: u32, tls: Option<&Path>) -> EngineHost {
        let namespace = Namespace::make(n);
        let addr = format!("{}:2375", namespace.engine_ip);
        let log =
            std::env::temp_dir().join(format!("agentix-engine-log-{}-{n}", std::process::id()));
        let _ = std::fs::remove_file(&log);
        if let Some(dir) = tls {
            make_certificates(dir, &namespace.engine_ip);
        }
        let mut endpoint = namespace
            .command(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "engine_endpoint_in_namespace",
                "--ignored",
                "--nocapture",
            ])
            .env(LISTEN, &addr)
            .env(LOG, &log)
            .envs(tls.map(|dir| (TLS_DIR, dir)))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let listening = BufReader::new(endpoint.stdout.take().unwrap())
            .lines()
            .map_while(Result::ok)
            .any(|line| line.contains("listening"));
        assert!(listening, "the endpoint in the namespace did not start");
        EngineHost {
            _namespace: namespace,
            endpoint,
            addr,
            log,
        }
    }

    /// What clients sent the endpoint, as text.
    fn sent(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log).unwrap_or_default()).into_owned()
    }
}

impl Drop for EngineHost {
    fn drop(&mut self) {
        let _ = self.endpoint.kill();
        let _ = self.endpoint.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Whether the host has a TCP connection open to `addr`, by
/// `/proc/net/tcp` (remote address and port, in the kernel's hex).
fn connected_to(addr: &str) -> bool {
    let (ip, port) = addr.rsplit_once(':').unwrap();
    let octets: Vec<u8> = ip.split('.').map(|o| o.parse().unwrap()).collect();
    let hex = format!(
        "{:02X}{:02X}{:02X}{:02X}:{:04X}",
        octets[3],
        octets[2],
        octets[1],
        octets[0],
        port.parse::<u16>().unwrap()
    );
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap()
        .lines()
        .skip(1)
        .any(|line| line.split_whitespace().nth(2) == Some(hex.as_str()))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[tokio::test]
async fn an_engine_at_another_address_serves_a_sandbox_through_its_api_alone() {
    assert!(
        is_root(),
        "this test makes a network namespace: run it as root"
    );
    let local = DockerProvider::connect().expect("a Docker engine");
    tools_image(&local).await;
    let engine = EngineHost::start(0, None);
    let client = tcp_client(&engine.addr, 120);
    // What `DOCKER_HOST=tcp://..` chooses.
    assert_eq!(
        ServerReach::for_docker_host(Some(&format!("tcp://{}", engine.addr)), true),
        ServerReach::EngineStream
    );
    let provider = DockerProvider::new(client).with_reach(ServerReach::EngineStream);
    let bundle = bundle_dir("remote-engine");
    let mut config = SandboxConfig::new(&bundle).image(TOOLS_IMAGE);
    config.container.network = agentix::ContainerNetwork::None;
    let sb = provider.session(config).await.expect("a sandbox");

    assert_eq!(sb.remote(agentix_e2e::add, (2, 3)).await.unwrap(), 5);
    let ran = sb
        .remote(
            agentix_bash::run,
            ("echo from afar".to_owned(), BashOptions::new()),
        )
        .await
        .unwrap();
    assert_eq!(ran.stdout_lossy(), "from afar\n");
    // Its connection is an exec stream through the endpoint's address.
    assert!(sb.addr().starts_with("unix:"), "{}", sb.addr());
    assert!(
        connected_to(&engine.addr),
        "no connection to {} is open",
        engine.addr
    );
    let sent = engine.sent();
    for request in [
        "POST /containers/create",
        "/start HTTP/1.1",
        "/exec HTTP/1.1",
        "GET /images/agentix-bundle:",
    ] {
        assert!(sent.contains(request), "`{request}` did not come through");
    }
    let name = format!("agentix-{}", sb.id());
    let inspected = local
        .docker()
        .inspect_container(
            &name,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .unwrap();
    let mounts = inspected.mounts.unwrap_or_default();
    assert!(
        mounts
            .iter()
            .all(|m| m.typ != Some(bollard::models::MountPointTypeEnum::BIND)),
        "a path of this machine is mounted: {mounts:?}"
    );
    let deleted = sent.matches("DELETE /containers/").count();
    sb.delete().await;
    assert!(engine.sent().matches("DELETE /containers/").count() > deleted);
    assert!(
        container_gone(local.docker(), &name).await,
        "container {name} is left"
    );
    let _ = std::fs::remove_dir_all(bundle);
}

#[tokio::test]
async fn an_engine_over_tls_at_another_address_serves_a_sandbox_and_refuses_strangers() {
    assert!(
        is_root(),
        "this test makes a network namespace: run it as root"
    );
    let local = DockerProvider::connect().expect("a Docker engine");
    tools_image(&local).await;
    let certs = std::env::temp_dir().join(format!("agentix-engine-tls-{}", std::process::id()));
    let engine = EngineHost::start(1, Some(&certs));
    // A client without a certificate of the engine's CA gets nothing.
    let stranger = tcp_client(&engine.addr, 5);
    assert!(stranger.ping().await.is_err(), "a plain client was served");
    assert!(engine.sent().is_empty(), "{}", engine.sent());

    let client = bollard::Docker::connect_with_ssl(
        &format!("tcp://{}", engine.addr),
        &certs.join("key.pem"),
        &certs.join("cert.pem"),
        &certs.join("ca.pem"),
        120,
        bollard::API_DEFAULT_VERSION,
    )
    .expect("a TLS client");
    let provider = DockerProvider::new(client).with_reach(ServerReach::EngineStream);
    let bundle = bundle_dir("remote-engine-tls");
    let mut config = SandboxConfig::new(&bundle).image(TOOLS_IMAGE);
    config.container.network = agentix::ContainerNetwork::None;
    let sb = provider.session(config).await.expect("a sandbox over TLS");
    assert_eq!(sb.remote(agentix_e2e::add, (20, 22)).await.unwrap(), 42);
    let payload = agentix::Blob::from(vec![7u8; 1 << 20]);
    let back = sb
        .remote(agentix_e2e::echo_blob, payload.clone())
        .await
        .unwrap();
    assert!(
        back == payload,
        "1 MiB through the engine's TLS, byte for byte"
    );
    assert!(connected_to(&engine.addr));
    assert!(engine.sent().contains("/exec HTTP/1.1"));
    let name = format!("agentix-{}", sb.id());
    sb.delete().await;
    assert!(
        container_gone(local.docker(), &name).await,
        "container {name} is left"
    );
    let _ = std::fs::remove_dir_all(bundle);
    let _ = std::fs::remove_dir_all(certs);
}

/// Names, for [`ssh_client_with_a_home_of_its_own`], the directory of the
/// SSH test's keys and the bundle to run.
const SSH_DIR: &str = "AGENTIX_TEST_SSH_DIR";
const SSH_BUNDLE: &str = "AGENTIX_TEST_SSH_BUNDLE";

/// A host whose `DOCKER_HOST` is `ssh://root@<engine host>`: the provider
/// as a user makes it, `DockerProvider::connect()`. Run by the test below
/// in a mount namespace whose home directory holds only the client's key,
/// so the system `ssh` it starts reads and writes nothing of this
/// machine's own `~/.ssh`.
#[tokio::test]
#[ignore = "run with a home of its own by an_engine_over_ssh_at_another_address_serves_a_sandbox"]
async fn ssh_client_with_a_home_of_its_own() {
    let bundle = PathBuf::from(std::env::var(SSH_BUNDLE).expect("run by the test"));
    let host = std::env::var("DOCKER_HOST").expect("run by the test");
    assert!(host.starts_with("ssh://"), "{host}");
    assert_eq!(ServerReach::for_engine(), ServerReach::EngineStream);
    let provider = DockerProvider::connect().expect("a client for the ssh:// engine");
    let mut config = SandboxConfig::new(&bundle).image(TOOLS_IMAGE);
    config.container.network = agentix::ContainerNetwork::None;
    let sb = provider.session(config).await.expect("a sandbox over SSH");
    assert_eq!(sb.remote(agentix_e2e::add, (40, 2)).await.unwrap(), 42);
    let ran = sb
        .remote(
            agentix_bash::run,
            ("echo over ssh".to_owned(), BashOptions::new()),
        )
        .await
        .unwrap();
    assert_eq!(ran.stdout_lossy(), "over ssh\n");
    let name = format!("agentix-{}", sb.id());
    sb.delete().await;
    println!("served {name}");
}

/// The home directory of uid 0, from `/etc/passwd` (where `ssh` looks,
/// whatever `$HOME` says).
fn root_home() -> PathBuf {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let line = passwd
        .lines()
        .find(|l| l.split(':').nth(2) == Some("0"))
        .expect("a uid 0");
    PathBuf::from(line.split(':').nth(5).expect("a home field"))
}

fn ssh_keygen(file: &Path) {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", ""])
        .arg("-f")
        .arg(file)
        .output()
        .expect("ssh-keygen (openssh-client)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `sshd` in its own network namespace; killed, and its files removed,
/// when dropped.
struct SshEngineHost {
    sshd: Child,
    namespace: Namespace,
    dir: PathBuf,
}

impl SshEngineHost {
    /// An SSH server at the namespace's address that takes the key
    /// `<dir>/client_key` for root; its log is `<dir>/sshd.log`.
    fn start(n: u32) -> SshEngineHost {
        let sshd = Path::new("/usr/sbin/sshd");
        assert!(
            sshd.exists(),
            "no /usr/sbin/sshd: install openssh-server (.ci/run does)"
        );
        let namespace = Namespace::make(n);
        let dir = std::env::temp_dir().join(format!("agentix-engine-ssh-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        ssh_keygen(&dir.join("host_key"));
        ssh_keygen(&dir.join("client_key"));
        std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys")).unwrap();
        let config = dir.join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "ListenAddress {}:22\nHostKey {}\nAuthorizedKeysFile {}\n\
                 PermitRootLogin prohibit-password\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n\
                 PidFile none\nLogLevel VERBOSE\n",
                namespace.engine_ip,
                dir.join("host_key").display(),
                dir.join("authorized_keys").display(),
            ),
        )
        .unwrap();
        // sshd's privilege separation directory, as its package makes it.
        std::fs::create_dir_all("/run/sshd").unwrap();
        let sshd = namespace
            .command(sshd)
            .arg("-D")
            .arg("-f")
            .arg(&config)
            .arg("-E")
            .arg(dir.join("sshd.log"))
            .spawn()
            .unwrap();
        let addr: std::net::SocketAddr = format!("{}:22", namespace.engine_ip).parse().unwrap();
        let up = (0..100).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            std::net::TcpStream::connect(addr).is_ok()
        });
        assert!(
            up,
            "sshd did not listen: {}",
            std::fs::read_to_string(dir.join("sshd.log")).unwrap_or_default()
        );
        SshEngineHost {
            sshd,
            namespace,
            dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("sshd.log")).unwrap_or_default()
    }
}

impl Drop for SshEngineHost {
    fn drop(&mut self) {
        let _ = self.sshd.kill();
        let _ = self.sshd.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn an_engine_over_ssh_at_another_address_serves_a_sandbox() {
    assert!(
        is_root(),
        "this test makes a network namespace: run it as root"
    );
    let local = DockerProvider::connect().expect("a Docker engine");
    tools_image(&local).await;
    let engine = SshEngineHost::start(2);
    let bundle = bundle_dir("remote-engine-ssh");
    let home = root_home();
    let known_hosts = home.join(".ssh/known_hosts");
    let known_before = std::fs::read(&known_hosts).ok();
    let script = r#"mount -t tmpfs -o mode=0700 agentix-test-home "$AGENTIX_TEST_HOME" &&
        mkdir -m 700 "$AGENTIX_TEST_HOME/.ssh" &&
        cp "$AGENTIX_TEST_SSH_DIR/client_key" "$AGENTIX_TEST_HOME/.ssh/id_ed25519" &&
        exec "$0" --exact ssh_client_with_a_home_of_its_own --ignored --nocapture"#;
    let out = tokio::process::Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            script,
        ])
        .arg(std::env::current_exe().unwrap())
        .env("AGENTIX_TEST_HOME", &home)
        .env(SSH_DIR, &engine.dir)
        .env(SSH_BUNDLE, &bundle)
        .env(
            "DOCKER_HOST",
            format!("ssh://root@{}", engine.namespace.engine_ip),
        )
        .output()
        .await
        .expect("unshare (util-linux)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}\nsshd: {}",
        String::from_utf8_lossy(&out.stderr),
        engine.log()
    );
    let name = stdout
        .lines()
        .find_map(|l| l.strip_prefix("served "))
        .expect("the sandbox's name")
        .trim()
        .to_owned();
    // Every request came over SSH from this machine's end of the pair.
    let log = engine.log();
    let accepted = format!(
        "Accepted publickey for root from {}",
        engine.namespace.host_ip
    );
    assert!(log.contains(&accepted), "{log}");
    assert!(
        container_gone(local.docker(), &name).await,
        "container {name} is left"
    );
    assert_eq!(
        std::fs::read(&known_hosts).ok(),
        known_before,
        "this machine's known_hosts is untouched"
    );
    let _ = std::fs::remove_dir_all(bundle);
}
