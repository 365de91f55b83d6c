//! [`SandboxRegistry`]: the sandboxes a provider started and that still
//! live, for its `list`, `get` and `delete`.
//!
//! It holds no managed sandbox alive: an entry refers to the handle's
//! resources weakly, so a dropped or deleted handle leaves the list by
//! itself. A kept sandbox ([`SandboxRegistry::keep`]) is the exception: the
//! registry owns it until it is deleted, and deletes what it still owns
//! when the provider's last clone of it goes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::config::SandboxConfig;
use crate::endpoint::Endpoint;
use crate::provider_error::ProviderError;
use crate::sandbox::Sandbox;
use crate::sandbox_info::SandboxInfo;
use crate::sandbox_resources::SandboxResources;

/// The live sandboxes of one provider; clones share it.
#[derive(Clone, Default)]
pub struct SandboxRegistry {
    entries: Arc<Entries>,
}

#[derive(Default)]
struct Entries(Mutex<HashMap<String, Entry>>);

struct Entry {
    /// Where handles connect, with the Unix socket if the provider gave one.
    endpoint: Endpoint,
    resources: Weak<dyn SandboxResources>,
    /// Set for a kept sandbox: the registry is its owner.
    kept: Option<Arc<dyn SandboxResources>>,
}

impl Drop for Entries {
    fn drop(&mut self) {
        let entries = self.0.get_mut().unwrap_or_else(|p| p.into_inner());
        for kept in entries.values_mut().filter_map(|e| e.kept.take()) {
            // The deletion starts with the call; nobody waits for it here.
            drop(kept.shutdown());
        }
    }
}

impl SandboxRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        SandboxRegistry::default()
    }

    /// Records `sandbox`, which a provider just built with
    /// [`Sandbox::from_parts`]; a handle without resources is not recorded.
    pub fn add(&self, sandbox: &Sandbox) {
        let Some(resources) = sandbox.resources() else {
            return;
        };
        let entry = Entry {
            endpoint: sandbox.endpoint().clone(),
            resources: Arc::downgrade(resources),
            kept: None,
        };
        self.lock().insert(sandbox.id().to_owned(), entry);
    }

    /// Makes `sandbox` (a handle [`SandboxRegistry::add`] recorded) a kept
    /// one: the registry becomes its owner, and the returned handle, like
    /// every other, leaves it running when dropped.
    pub fn keep(&self, mut sandbox: Sandbox) -> Sandbox {
        if let Some(resources) = sandbox.take_resources() {
            if let Some(entry) = self.lock().get_mut(sandbox.id()) {
                entry.kept = Some(resources);
            }
        }
        sandbox
    }

    /// The sandboxes whose owner (a handle, or this registry) still lives,
    /// by id.
    pub fn list(&self) -> Vec<SandboxInfo> {
        let mut entries = self.lock();
        entries.retain(|_, e| e.resources.strong_count() > 0);
        let mut list: Vec<SandboxInfo> = entries
            .iter()
            .map(|(id, e)| SandboxInfo {
                id: id.clone(),
                addr: e.endpoint.addr.clone(),
            })
            .collect();
        list.sort_by(|a, b| a.id.cmp(&b.id));
        list
    }

    /// A second handle on live sandbox `id`, with the connection settings
    /// of `config`; dropping it leaves the sandbox running.
    pub fn get(&self, id: &str, config: SandboxConfig) -> Option<Sandbox> {
        let entries = self.lock();
        let entry = entries.get(id).filter(|e| e.resources.strong_count() > 0)?;
        Some(Sandbox::another(id, entry.endpoint.clone(), config))
    }

    /// Deletes live sandbox `id` and waits until it is gone (what
    /// [`Provider::delete`](crate::Provider::delete) does); `NotFound` if no
    /// such sandbox lives. Its owning handle's calls then fail.
    pub async fn delete(&self, id: &str) -> Result<(), ProviderError> {
        let resources = self.lock().remove(id).and_then(|e| e.resources.upgrade());
        let resources = resources.ok_or_else(|| ProviderError::NotFound { id: id.to_owned() })?;
        resources.shutdown().await;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl std::fmt::Debug for SandboxRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxRegistry")
            .field("sandboxes", &self.list())
            .finish()
    }
}
