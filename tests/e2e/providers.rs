//! Providers as a harness uses them: picked at run time as `dyn Provider`,
//! one of them written here, outside the host crate, from the public parts
//! (`Sandbox::from_parts`, `SandboxResources`, `SandboxRegistry`); `list`,
//! `get` and `delete` by id beside `create`.

mod support;

use std::io::BufRead;
use std::sync::Arc;
use std::time::Duration;

use agentix::{
    ErrorKind, LocalProvider, Provider, ProviderError, RemoteError, Sandbox, SandboxConfig,
    SandboxInfo, SandboxRegistry, SandboxResources,
};
use futures_util::future::BoxFuture;
use support::bundle_path;
use tokio::sync::watch;

/// Runs the bundle's server as a plain child process, the way a provider
/// for another kind of machine would start it there.
#[derive(Default)]
struct ChildProvider {
    sandboxes: SandboxRegistry,
}

/// A server child: signalled to stop, watched until it exits.
struct ChildServer {
    pid: u32,
    exited: watch::Receiver<Option<String>>,
}

impl SandboxResources for ChildServer {
    fn shutdown(&self) -> BoxFuture<'static, ()> {
        // SAFETY: kill only reads its integer arguments.
        unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGTERM) };
        let mut exited = self.exited.clone();
        Box::pin(async move {
            let _ = exited.wait_for(Option::is_some).await;
        })
    }

    fn ended(&self) -> BoxFuture<'static, RemoteError> {
        let mut exited = self.exited.clone();
        Box::pin(async move {
            let status = match exited.wait_for(Option::is_some).await {
                Ok(status) => status.clone().unwrap_or_default(),
                Err(_) => "unknown".into(),
            };
            RemoteError::new(
                ErrorKind::ServerExited,
                format!("the child server {status}"),
            )
        })
    }

    fn ended_now(&self) -> Option<RemoteError> {
        let status = self.exited.borrow().clone()?;
        Some(RemoteError::new(
            ErrorKind::ServerExited,
            format!("the child server {status}"),
        ))
    }

    fn server_pid(&self) -> Option<u32> {
        Some(self.pid)
    }
}

impl Provider for ChildProvider {
    fn create(&self, config: SandboxConfig) -> BoxFuture<'_, Result<Sandbox, ProviderError>> {
        Box::pin(async move {
            let token = format!("child-{}", agentix_e2e::now_nanos());
            let mut child = tokio::process::Command::new(&config.bundle)
                .args(["serve", "--host", "127.0.0.1", "--port", "0"])
                .env("AGENTIX_TOKEN", &token)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .map_err(|e| ProviderError::Backend {
                    what: "cannot start the server".into(),
                    reason: e.to_string(),
                })?;
            let pid = child.id().expect("a running child");
            let stdout = child
                .stdout
                .take()
                .expect("piped stdout")
                .into_owned_fd()
                .unwrap();
            let line = tokio::task::spawn_blocking(move || {
                let mut line = String::new();
                let file = std::fs::File::from(stdout);
                let _ = std::io::BufReader::new(file).read_line(&mut line);
                line
            })
            .await
            .unwrap();
            let ready: serde_json::Value =
                serde_json::from_str(&line).map_err(|e| ProviderError::ServerStartFailed {
                    reason: format!("no ready line ({e})"),
                    output: line.clone(),
                })?;
            let addr = ready["addr"].as_str().unwrap_or_default().to_owned();
            let (tx, exited) = watch::channel(None);
            tokio::spawn(async move {
                let status = child.wait().await;
                let _ = tx.send(Some(format!("{status:?}")));
            });
            let resources = Arc::new(ChildServer { pid, exited });
            let sandbox =
                Sandbox::from_parts(format!("child-{pid}"), addr, token, config, resources);
            self.sandboxes.add(&sandbox);
            Ok(sandbox)
        })
    }

    fn sandboxes(&self) -> &SandboxRegistry {
        &self.sandboxes
    }
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

#[tokio::test]
async fn every_provider_creates_lists_gets_and_deletes_by_id() {
    let providers: Vec<(&str, Box<dyn Provider>)> = vec![
        ("local", Box::new(LocalProvider::new())),
        ("child", Box::new(ChildProvider::default())),
    ];
    for (name, provider) in &providers {
        let first = provider
            .create(SandboxConfig::new(bundle_path()))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            first.remote(agentix_e2e::add, (2, 3)).await.unwrap(),
            5,
            "{name}"
        );
        let pid = first
            .server_pid()
            .expect("both providers know the server's pid");
        let id = first.id().to_owned();
        assert_eq!(
            provider.list(),
            vec![SandboxInfo {
                id: id.clone(),
                addr: first.addr().to_owned()
            }],
            "{name}"
        );

        // A second handle works, and dropping it leaves the sandbox running.
        let second = provider.get(&id).expect("the sandbox is listed");
        assert_eq!(second.id(), id);
        assert_eq!(
            second.remote(agentix_e2e::add, (1, 1)).await.unwrap(),
            2,
            "{name}"
        );
        drop(second);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            alive(pid),
            "{name}: dropping a second handle stopped the server"
        );
        assert_eq!(
            first.remote(agentix_e2e::add, (3, 3)).await.unwrap(),
            6,
            "{name}"
        );

        // Deleting by id stops it under its first handle.
        provider.delete(&id).await.unwrap();
        assert!(!alive(pid), "{name}: server {pid} still runs after delete");
        let err = first.remote(agentix_e2e::add, (1, 2)).await.unwrap_err();
        assert!(
            matches!(
                err.kind,
                ErrorKind::ServerExited | ErrorKind::ConnectionLost
            ),
            "{name}: {err}"
        );
        assert!(provider.list().is_empty(), "{name}");
        assert!(provider.get(&id).is_none(), "{name}");
        assert!(
            matches!(
                provider.delete(&id).await,
                Err(ProviderError::NotFound { .. })
            ),
            "{name}"
        );
        drop(first);

        // A dropped handle leaves the list by itself.
        let dropped = provider
            .create(SandboxConfig::new(bundle_path()))
            .await
            .unwrap();
        let pid = dropped.server_pid().unwrap();
        drop(dropped);
        assert!(provider.list().is_empty(), "{name}");
        support::wait_until(
            "the dropped sandbox's server to exit",
            Duration::from_secs(20),
            || !alive(pid),
        )
        .await;
    }
}

#[tokio::test]
async fn providers_are_found_by_name_and_an_unknown_name_lists_the_known_ones() {
    agentix::link_plugins!(agentix_provider_docker);
    assert_eq!(agentix::provider_names(), ["docker", "local"]);
    let local = agentix::provider("local").unwrap();
    let sb = local
        .session(SandboxConfig::new(bundle_path()))
        .await
        .unwrap();
    assert_eq!(sb.remote(agentix_e2e::add, (20, 22)).await.unwrap(), 42);
    assert!(
        agentix::provider("docker").is_ok(),
        "the engine answers here"
    );
    match agentix::provider("nope") {
        Err(e @ ProviderError::UnknownProvider { .. }) => {
            let e = e.to_string();
            assert!(e.contains("`nope`") && e.contains("docker, local"), "{e}");
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("a provider named nope"),
    }
}

#[tokio::test]
async fn a_kept_sandbox_outlives_its_handles_until_deleted_or_its_provider_goes() {
    let providers: Vec<(&str, Box<dyn Provider>)> = vec![
        ("local", Box::new(LocalProvider::new())),
        ("child", Box::new(ChildProvider::default())),
    ];
    for (name, provider) in providers {
        let kept = provider
            .create_kept(SandboxConfig::new(bundle_path()))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let id = kept.id().to_owned();
        drop(kept);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(provider.list().len(), 1, "{name}: kept past its handle");
        let again = provider.get(&id).expect("a handle on it again");
        assert_eq!(again.remote(agentix_e2e::add, (4, 4)).await.unwrap(), 8);
        drop(again);
        provider.delete(&id).await.unwrap();
        assert!(provider.list().is_empty(), "{name}: deleted by id");

        // A kept sandbox goes with its provider.
        let owned = provider
            .create(SandboxConfig::new(bundle_path()))
            .await
            .unwrap();
        let pid = owned.server_pid().expect("both providers know the pid");
        drop(provider.sandboxes().keep(owned));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(alive(pid), "{name}: kept, so still running");
        drop(provider);
        support::wait_until(
            "the kept sandbox to go with its provider",
            Duration::from_secs(15),
            || !alive(pid),
        )
        .await;
    }
}
