//! [`Snapshot`]: a sandbox's state, captured to start others from
//! ([`Provider::create_from`](crate::Provider::create_from),
//! [`Provider::fork`](crate::Provider::fork)), and [`SnapshotSpec`], what
//! to call it.
//!
//! A provider keeps the state (a directory for local sandboxes); the
//! `Snapshot` is a shared handle on it. An unnamed snapshot is removed
//! when its last handle goes; a named one stays until
//! [`Snapshot::remove`]. A provider records each in its marker directory
//! ([`SnapshotRecord`]): how operators list them, a later process opens a
//! named one ([`Snapshot::open`]) and a reap finds a dead owner's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::owner::OwnerId;
use crate::sandbox_marker::MarkerDir;
use crate::snapshot_record::{SnapshotRecord, SnapshotRecords};

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
    /// Whether dropping the last handle leaves it (a handle opened from a
    /// record: its owner decides).
    kept_when_dropped: bool,
    /// Where its record is, removed with it.
    records: Option<SnapshotRecords>,
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
                kept_when_dropped: false,
                records: None,
            }),
        }
    }

    /// The same snapshot, recorded in `markers` (see [`SnapshotRecord`]);
    /// removing it removes the record. A record that cannot be written is
    /// said in the log: the snapshot works, but no reap will find it.
    pub fn recorded_in(mut self, markers: &MarkerDir) -> Self {
        let records = SnapshotRecords::of(markers);
        let Some(record) = self.record() else {
            return self;
        };
        if let Err(error) = records.write(&record) {
            tracing::warn!(
                snapshot = %record.id,
                %error,
                "the snapshot is not recorded: `agentix ps --snapshots` will not list it"
            );
            return self;
        }
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => inner.records = Some(records),
            // Shared already: its record stays when it goes, for a reap.
            None => tracing::warn!(snapshot = %record.id, "recorded after it was shared"),
        }
        self
    }

    /// A handle on the snapshot `record` names, taken by this or another
    /// process: it starts sandboxes like the original handle, and
    /// [`Snapshot::remove`] removes its files and record; dropping it
    /// removes nothing (its owner decides that).
    pub fn open(record: &SnapshotRecord, records: &SnapshotRecords) -> Snapshot {
        let spec = SnapshotSpec {
            name: record.name.clone(),
            labels: record.labels.clone(),
        };
        let (records, removed) = (records.clone(), record.clone());
        let mut snapshot = Snapshot::from_parts(
            record.id.clone(),
            spec,
            record.provider.clone(),
            record.source.clone(),
            SnapshotStore::Dir(record.dir.clone()),
            record.bytes,
            move |_| {
                let _ = records.remove_with_files(&removed);
            },
        );
        if let Some(inner) = Arc::get_mut(&mut snapshot.inner) {
            inner.kept_when_dropped = true;
            inner.created_ms = record.created_ms;
        }
        snapshot
    }

    /// The snapshot of `provider` that `records` name `name_or_id` (a
    /// name, an id or the start of one id), opened as [`Snapshot::open`]
    /// does; `None` unless there is one whose directory is still here.
    pub fn find(records: &SnapshotRecords, name_or_id: &str, provider: &str) -> Option<Snapshot> {
        let record = records.find(name_or_id).ok()?;
        (record.provider == provider && record.dir.is_dir())
            .then(|| Snapshot::open(&record, records))
    }

    /// What a record of it says, with this process as its owner; `None`
    /// for a snapshot kept outside this machine's filesystem.
    pub fn record(&self) -> Option<SnapshotRecord> {
        Some(SnapshotRecord {
            id: self.id().to_owned(),
            name: self.name().map(str::to_owned),
            labels: self.labels().clone(),
            provider: self.provider().to_owned(),
            source: self.source().to_owned(),
            owner: OwnerId::current().to_string(),
            dir: self.dir()?.to_owned(),
            bytes: self.bytes(),
            created_ms: self.created_ms(),
        })
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
            if let Some(records) = &self.records {
                let _ = records.remove(&self.id);
            }
        }
    }
}

impl Drop for SnapshotInner {
    fn drop(&mut self) {
        if self.spec.name.is_none() && !self.kept_when_dropped {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_snapshot_opens_again_and_goes_with_its_record() {
        let base = std::env::temp_dir().join(format!("agentix-snapshot-{}", std::process::id()));
        let markers = MarkerDir::new(base.join("markers"));
        let records = SnapshotRecords::of(&markers);
        let dir = base.join("state");
        std::fs::create_dir_all(&dir).unwrap();
        let remove = |store: &SnapshotStore| {
            if let SnapshotStore::Dir(dir) = store {
                let _ = std::fs::remove_dir_all(dir);
            }
        };
        let spec = SnapshotSpec::new().name("prepared").label("task", "7");
        let taken = Snapshot::from_parts(
            "snap-1",
            spec,
            "local",
            "local-a",
            SnapshotStore::Dir(dir.clone()),
            5,
            remove,
        )
        .recorded_in(&markers);
        let record = records.find("prepared").unwrap();
        assert_eq!(record.labels["task"], "7");
        assert_eq!(record.dir, dir);
        drop(taken);
        assert!(dir.is_dir(), "a named snapshot outlives its handles");

        let opened = Snapshot::open(&records.find("snap-1").unwrap(), &records);
        assert_eq!(opened.dir_kept_by("local").unwrap(), dir);
        drop(opened.clone());
        assert!(dir.is_dir(), "dropping an opened handle keeps it");
        opened.remove();
        assert!(!dir.exists());
        assert!(records.list().unwrap().is_empty());

        let unnamed = base.join("unnamed");
        std::fs::create_dir_all(&unnamed).unwrap();
        let taken = Snapshot::from_parts(
            "snap-2",
            SnapshotSpec::new(),
            "local",
            "local-a",
            SnapshotStore::Dir(unnamed.clone()),
            5,
            remove,
        )
        .recorded_in(&markers);
        assert_eq!(records.list().unwrap().len(), 1);
        drop(taken);
        assert!(
            !unnamed.exists(),
            "the last handle of an unnamed one removes it"
        );
        assert!(records.list().unwrap().is_empty(), "and its record");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
