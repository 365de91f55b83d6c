//! The [`Provider`] trait: where sandboxes come from.
//!
//! Object-safe, so a harness can pick a provider at run time
//! (`Box<dyn Provider>`). A provider outside this crate builds its handles
//! with [`Sandbox::from_parts`] and keeps them in a [`SandboxRegistry`],
//! which gives it `list`, `get`, `delete` and kept sandboxes.

use futures_util::future::BoxFuture;

use crate::config::SandboxConfig;
use crate::provider_error::ProviderError;
use crate::sandbox::Sandbox;
use crate::sandbox_info::SandboxInfo;
use crate::sandbox_registry::SandboxRegistry;
use crate::snapshot::{Snapshot, SnapshotSpec};

/// Creates, finds and deletes sandboxes.
///
/// A provider writes [`Provider::create`] (start a sandbox, build its
/// owning handle with [`Sandbox::from_parts`], record it in its registry)
/// and [`Provider::sandboxes`]; the rest come with the trait. Callers pick
/// by name how long a sandbox lives: a [`Provider::session`] ends with its
/// handle, a [`Provider::create_kept`] sandbox lives on until
/// [`Provider::delete`] names it.
pub trait Provider: Send + Sync {
    /// Starts a sandbox for `config` and returns its owning handle: the
    /// sandbox lives until that handle is deleted or dropped, or until
    /// [`Provider::delete`] names it. (Callers say [`Provider::session`];
    /// this is the method a provider implements.)
    fn create(&self, config: SandboxConfig) -> BoxFuture<'_, Result<Sandbox, ProviderError>>;

    /// The provider's live sandboxes, which `create` records.
    fn sandboxes(&self) -> &SandboxRegistry;

    /// A managed sandbox: deleted when the returned handle is dropped, on
    /// every path out of the caller's scope (return, `?`, panic), or by
    /// [`Sandbox::delete`]. The Python API's `async with
    /// provider.session(..)`.
    fn session(&self, config: SandboxConfig) -> BoxFuture<'_, Result<Sandbox, ProviderError>> {
        self.create(config)
    }

    /// A kept sandbox: it lives on when the returned handle (and every
    /// other) is dropped, until [`Provider::delete`] names it or the
    /// provider itself is dropped; [`Provider::get`] gives a handle on it
    /// again. For pools of warm sandboxes that outlive the code that made
    /// them.
    fn create_kept(&self, config: SandboxConfig) -> BoxFuture<'_, Result<Sandbox, ProviderError>> {
        Box::pin(async move {
            let sandbox = self.create(config).await?;
            Ok(self.sandboxes().keep(sandbox))
        })
    }

    /// The sandboxes this provider started that still live.
    fn list(&self) -> Vec<SandboxInfo> {
        self.sandboxes().list()
    }

    /// Another handle on live sandbox `id`; dropping it leaves the sandbox
    /// running.
    fn get(&self, id: &str) -> Option<Sandbox> {
        self.sandboxes().get(id, SandboxConfig::new(""))
    }

    /// Deletes live sandbox `id` and waits until it is gone.
    fn delete<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(self.sandboxes().delete(id))
    }

    /// Starts a sandbox for `config` whose state is `snapshot`'s (taken of
    /// a sandbox of this provider by [`Sandbox::snapshot`]): what it
    /// wrote is there, its own from then on. The default: this provider
    /// cannot.
    fn create_from<'a>(
        &'a self,
        snapshot: &'a Snapshot,
        config: SandboxConfig,
    ) -> BoxFuture<'a, Result<Sandbox, ProviderError>> {
        let _ = (snapshot, config);
        Box::pin(std::future::ready(Err(ProviderError::Backend {
            what: "start a sandbox from a snapshot".into(),
            reason: "this provider does not take snapshots".into(),
        })))
    }

    /// `n` sandboxes for `config` started at once from a snapshot of
    /// `sandbox` (paused while it is taken), and the snapshot (unnamed: it
    /// goes with its last handle). All start or none is kept.
    fn fork<'a>(
        &'a self,
        sandbox: &'a Sandbox,
        n: usize,
        config: SandboxConfig,
    ) -> BoxFuture<'a, Result<(Snapshot, Vec<Sandbox>), ProviderError>> {
        Box::pin(async move {
            let snapshot = sandbox.snapshot(SnapshotSpec::new()).await?;
            let starts = (0..n).map(|_| self.create_from(&snapshot, config.clone()));
            let started = futures_util::future::join_all(starts).await;
            let mut children = Vec::with_capacity(n);
            let mut failed = None;
            for child in started {
                match child {
                    Ok(child) => children.push(child),
                    Err(e) => failed = failed.or(Some(e)),
                }
            }
            if let Some(error) = failed {
                futures_util::future::join_all(children.into_iter().map(Sandbox::delete)).await;
                return Err(error);
            }
            Ok((snapshot, children))
        })
    }

    /// What the sandboxes of `config` start from, as a digest: equal
    /// digests, equal starting points. The default digests the bundle (its
    /// file, or a bundle directory's manifest, which lists every file's
    /// digest); a container provider adds its image's ID (not its tag). A
    /// setup cache keys its snapshots by it.
    fn environment_id<'a>(
        &'a self,
        config: &'a SandboxConfig,
    ) -> BoxFuture<'a, Result<String, ProviderError>> {
        let bundle = config.bundle.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || crate::bundle_digest::bundle_digest(&bundle))
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())))
                .map_err(|e| ProviderError::BadBundle {
                    path: config.bundle.display().to_string(),
                    reason: format!("cannot read it: {e}"),
                })
        })
    }

    /// A snapshot of this provider's that this or an earlier process
    /// recorded ([`crate::SnapshotRecord`]), by name, id or the start of
    /// one id, opened ([`Snapshot::open`]: dropping it removes nothing);
    /// `None` if there is none whose files this machine still has. The
    /// default: this provider keeps no records.
    fn find_snapshot(&self, name_or_id: &str) -> Option<Snapshot> {
        let _ = name_or_id;
        None
    }

    /// Removes what hosts that died left of this provider's sandboxes on
    /// this machine (see `OwnerId`), never a live host's: their sandboxes,
    /// and their unnamed snapshots (see `SnapshotRecord`); returns how many
    /// sandboxes. A pool calls it before its first create. The default
    /// does nothing, for providers that leave nothing behind.
    fn reap(&self) -> BoxFuture<'_, Result<usize, ProviderError>> {
        Box::pin(std::future::ready(Ok(0)))
    }
}
