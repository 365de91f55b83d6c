//! [`Snapshot`]: a sandbox's state, captured to start others from
//! ([`Provider::create_from`](crate::Provider::create_from),
//! [`Provider::fork`](crate::Provider::fork)), and [`SnapshotSpec`], what
//! to call it.
//!
//! A provider keeps the state (a directory for local sandboxes); the
//! `Snapshot` is a shared handle on it. An unnamed snapshot is removed
//! when its last handle goes; a named one stays until
//! [`Snapshot::remove`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What to call a snapshot: a name (which keeps it when its handles go)
/// and labels.
#[derive(Debug, Clone, Default)]
pub struct SnapshotSpec {
    /// Its name; `None` for one removed with its last handle.
    pub name: Option<String>,
    /// Labels, for finding it again.
    pub labels: BTreeMap<String, String>,
}

impl SnapshotSpec {
    /// An unnamed snapshot without labels.
    pub fn new() -> Self {
        SnapshotSpec::default()
    }

    /// Names it: a named snapshot outlives its handles.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Adds the label `key=value`.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }
}

/// Where a provider keeps a snapshot's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotStore {
    /// A directory on this machine (the local provider).
    Dir(PathBuf),
    /// An image of the engine (the Docker provider).
    Image(String),
}

/// A captured sandbox state; cheap to clone (clones share it).
#[derive(Clone)]
pub struct Snapshot {
    inner: Arc<SnapshotInner>,
}

struct SnapshotInner {
    id: String,
    spec: SnapshotSpec,
    provider: String,
    source: String,
    store: SnapshotStore,
    bytes: u64,
    created_ms: u64,
    removed: AtomicBool,
    remove: Box<dyn Fn(&SnapshotStore) + Send + Sync>,
}

impl Snapshot {
    /// A snapshot a provider made: `id`, of sandbox `source`, kept in
    /// `store` (`bytes` of files), removed by `remove` when it is removed
    /// (or, unnamed, when its last handle goes).
    pub fn from_parts(
        id: impl Into<String>,
        spec: SnapshotSpec,
        provider: impl Into<String>,
        source: impl Into<String>,
        store: SnapshotStore,
        bytes: u64,
        remove: impl Fn(&SnapshotStore) + Send + Sync + 'static,
    ) -> Self {
        Snapshot {
            inner: Arc::new(SnapshotInner {
                id: id.into(),
                spec,
                provider: provider.into(),
                source: source.into(),
                store,
                bytes,
                created_ms: crate::sandbox_marker::now_ms(),
                removed: AtomicBool::new(false),
                remove: Box::new(remove),
            }),
        }
    }

    /// Its id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// Its name, if it has one.
    pub fn name(&self) -> Option<&str> {
        self.inner.spec.name.as_deref()
    }

    /// Its labels.
    pub fn labels(&self) -> &BTreeMap<String, String> {
        &self.inner.spec.labels
    }

    /// The provider that keeps it (`local`, `docker`).
    pub fn provider(&self) -> &str {
        &self.inner.provider
    }

    /// The id of the sandbox it was taken of.
    pub fn source(&self) -> &str {
        &self.inner.source
    }

    /// Where the provider keeps it.
    pub fn store(&self) -> &SnapshotStore {
        &self.inner.store
    }

    /// Its directory, for a snapshot kept in one.
    pub fn dir(&self) -> Option<&Path> {
        match &self.inner.store {
            SnapshotStore::Dir(dir) => Some(dir),
            SnapshotStore::Image(_) => None,
        }
    }

    /// The bytes of the files it holds.
    pub fn bytes(&self) -> u64 {
        self.inner.bytes
    }

    /// When it was taken, in milliseconds since the Unix epoch.
    pub fn created_ms(&self) -> u64 {
        self.inner.created_ms
    }

    /// Its directory, if it is one `provider` made and this machine still
    /// has; else the error a provider starting a sandbox from it returns.
    pub fn dir_kept_by(&self, provider: &str) -> Result<&Path, crate::ProviderError> {
        match self.dir() {
            Some(dir) if self.provider() == provider && dir.is_dir() => Ok(dir),
            _ => Err(crate::ProviderError::Backend {
                what: format!("start a sandbox from snapshot {}", self.id()),
                reason: format!(
                    "it is not a {provider} snapshot this machine still has ({:?})",
                    self.store()
                ),
            }),
        }
    }

    /// Removes it now, named or not; sandboxes started from it keep what
    /// they copied.
    pub fn remove(&self) {
        self.inner.remove_once();
    }
}

impl SnapshotInner {
    fn remove_once(&self) {
        if !self.removed.swap(true, Ordering::AcqRel) {
            (self.remove)(&self.store);
        }
    }
}

impl Drop for SnapshotInner {
    fn drop(&mut self) {
        if self.spec.name.is_none() {
            self.remove_once();
        }
    }
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("id", &self.inner.id)
            .field("name", &self.inner.spec.name)
            .field("provider", &self.inner.provider)
            .field("source", &self.inner.source)
            .field("store", &self.inner.store)
            .field("bytes", &self.inner.bytes)
            .finish()
    }
}
