//! [`SetupCache`]: a slow setup (clone, install, build) run once per key,
//! snapshotted, and every later sandbox with the same key started from the
//! snapshot.
//!
//! The key is a digest of what the sandboxes start from (the provider's
//! [`environment_id`](agentix_host::Provider::environment_id): the
//! bundle's digest, and a container's image ID, not its tag), the setup's
//! name and its arguments (as JSON). Requests for one key that arrive
//! together run the setup once; a setup that fails is not kept, so the
//! next request tries again. By default the snapshots go with the cache;
//! [`SetupCache::kept_across_runs`] names them by their key instead, so a
//! later run (another process) finds them through the provider's
//! snapshot records and runs no setup at all.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agentix_host::{Provider, ProviderError, Sandbox, SandboxConfig, Snapshot, SnapshotSpec};
use agentix_wire::errors::RemoteError;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;

/// Setups run once per key, their snapshots kept for the cache's life.
pub struct SetupCache {
    provider: Arc<dyn Provider>,
    config: SandboxConfig,
    environment: OnceCell<String>,
    snapshots: Mutex<HashMap<String, Arc<OnceCell<Snapshot>>>>,
    setups_run: AtomicU64,
    kept: bool,
}

impl SetupCache {
    /// A cache of setups of `config`'s sandboxes on `provider`.
    pub fn new(provider: Arc<dyn Provider>, config: SandboxConfig) -> Self {
        SetupCache {
            provider,
            config,
            environment: OnceCell::new(),
            snapshots: Mutex::default(),
            setups_run: AtomicU64::new(0),
            kept: false,
        }
    }

    /// The same cache, whose snapshots outlive it: each is named
    /// [`SetupCache::snapshot_name`] of its key, and a request first looks
    /// for a snapshot of that name the provider recorded (in an earlier
    /// run too). They stay until removed (`Snapshot::remove`, or
    /// `agentix reap --snapshot NAME`).
    pub fn kept_across_runs(mut self) -> Self {
        self.kept = true;
        self
    }

    /// The name a kept snapshot of the setup keyed `key` has.
    pub fn snapshot_name(key: &str) -> String {
        format!("agentix-setup-{}", &key[..key.len().min(32)])
    }

    /// The key of the setup `name` with `args`: a hex SHA-256 of the
    /// environment's identity, the name and the arguments' JSON.
    pub async fn key<A: Serialize>(&self, name: &str, args: &A) -> Result<String, ProviderError> {
        let environment = self
            .environment
            .get_or_try_init(|| self.provider.environment_id(&self.config))
            .await?;
        let args = serde_json::to_vec(args).map_err(|e| ProviderError::Backend {
            what: format!("key the setup `{name}`"),
            reason: format!("its arguments do not serialize: {e}"),
        })?;
        let mut hasher = Sha256::new();
        for part in [environment.as_bytes(), name.as_bytes(), &args] {
            // Each part's length first: no two splits hash alike.
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part);
        }
        Ok(format!("{:x}", hasher.finalize()))
    }

    /// A new sandbox whose state is what `setup(sandbox, args)` left in a
    /// sandbox of the config: the setup runs (once) if no snapshot has
    /// this key yet, then is snapshotted and its sandbox deleted.
    pub async fn sandbox<A, S, Fut>(
        &self,
        name: &str,
        args: A,
        setup: S,
    ) -> Result<Sandbox, ProviderError>
    where
        A: Serialize,
        S: FnOnce(Arc<Sandbox>, A) -> Fut,
        Fut: Future<Output = Result<(), RemoteError>>,
    {
        let snapshot = self.snapshot(name, args, setup).await?;
        self.provider
            .create_from(&snapshot, self.config.clone())
            .await
    }

    /// The snapshot of the setup `name` with `args`, made now if need be.
    pub async fn snapshot<A, S, Fut>(
        &self,
        name: &str,
        args: A,
        setup: S,
    ) -> Result<Snapshot, ProviderError>
    where
        A: Serialize,
        S: FnOnce(Arc<Sandbox>, A) -> Fut,
        Fut: Future<Output = Result<(), RemoteError>>,
    {
        let key = self.key(name, &args).await?;
        let cell = self
            .snapshots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.clone())
            .or_default()
            .clone();
        let snapshot = cell
            .get_or_try_init(|| async {
                if self.kept {
                    if let Some(found) = self.provider.find_snapshot(&Self::snapshot_name(&key)) {
                        return Ok(found);
                    }
                }
                self.setups_run.fetch_add(1, Ordering::Relaxed);
                let sandbox = Arc::new(self.provider.session(self.config.clone()).await?);
                let ran = setup(sandbox.clone(), args).await;
                let taken = match ran {
                    Ok(()) => {
                        let mut spec = SnapshotSpec::new()
                            .label("agentix.setup", name)
                            .label("agentix.setup-key", &key);
                        if self.kept {
                            spec = spec.name(Self::snapshot_name(&key));
                        }
                        sandbox.snapshot(spec).await
                    }
                    Err(e) => Err(ProviderError::Backend {
                        what: format!("run the setup `{name}`"),
                        reason: e.to_string(),
                    }),
                };
                if let Some(sandbox) = Arc::into_inner(sandbox) {
                    sandbox.delete().await;
                }
                taken
            })
            .await?;
        Ok(snapshot.clone())
    }

    /// How many setups this cache has run.
    pub fn setups_run(&self) -> u64 {
        self.setups_run.load(Ordering::Relaxed)
    }
}
