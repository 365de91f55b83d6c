//! [`SnapshotRecord`]: what a host writes about each snapshot it takes, so
//! that operators list them (`agentix ps --snapshots`), a later process
//! finds a named one again ([`SnapshotRecords::find`],
//! [`Snapshot::open`](crate::Snapshot::open)),
//! and a reap removes those whose owner died without removing them.
//!
//! The records sit in a `snapshots` directory inside the sandbox markers'
//! [`MarkerDir`], one JSON file each, so one directory (private to the
//! host's user) says what this machine's hosts left behind. A record holds
//! no secret: a snapshot's files are reached through its directory, which
//! has its own permissions.

use std::collections::BTreeMap;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::json_files;
use crate::owner::{Liveness, OwnerId};
use crate::sandbox_marker::MarkerDir;

/// One snapshot, as the host that took it recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    /// Its id (`local-snap-…`, `docker-snap-…`).
    pub id: String,
    /// Its name; a named snapshot is kept until removed by name or id.
    pub name: Option<String>,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// The provider that keeps it (`local`, `docker`).
    pub provider: String,
    /// The sandbox it was taken of.
    pub source: String,
    /// The host process that took it ([`OwnerId`]'s text form).
    pub owner: String,
    /// Its directory on this machine.
    pub dir: PathBuf,
    /// The bytes of the files it holds.
    pub bytes: u64,
    /// When it was taken, in milliseconds since the Unix epoch.
    pub created_ms: u64,
}

impl SnapshotRecord {
    /// Whether a reap removes it: unnamed, and its owner is dead.
    pub fn abandoned(&self) -> bool {
        self.name.is_none()
            && OwnerId::parse(&self.owner).map(|o| o.liveness()) == Some(Liveness::Dead)
    }
}

/// The snapshot records of a marker directory.
#[derive(Debug, Clone)]
pub struct SnapshotRecords {
    dir: PathBuf,
}

impl SnapshotRecords {
    /// The records kept beside `markers`' sandbox markers.
    pub fn of(markers: &MarkerDir) -> SnapshotRecords {
        SnapshotRecords {
            dir: markers.path().join("snapshots"),
        }
    }

    /// Writes (or replaces) `record`, whole or not at all.
    pub fn write(&self, record: &SnapshotRecord) -> std::io::Result<()> {
        // The marker directory's own checks (this user's, 0700) first.
        MarkerDir::new(self.dir.parent().unwrap_or(&self.dir)).ensure()?;
        match std::fs::DirBuilder::new().mode(0o700).create(&self.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        json_files::write(&self.dir, &record.id, record)
    }

    /// Removes snapshot `id`'s record (nothing when there is none).
    pub fn remove(&self, id: &str) -> std::io::Result<()> {
        json_files::remove(&self.dir, id)
    }

    /// Every record, oldest first; an absent directory holds none.
    pub fn list(&self) -> std::io::Result<Vec<SnapshotRecord>> {
        let mut records: Vec<SnapshotRecord> = json_files::list(&self.dir)?;
        records.sort_by_key(|r| r.created_ms);
        Ok(records)
    }

    /// The snapshot `name_or_id` names: a name, an id, or the start of
    /// exactly one id.
    pub fn find(&self, name_or_id: &str) -> Result<SnapshotRecord, String> {
        let all = self
            .list()
            .map_err(|e| format!("cannot read {}: {e}", self.dir.display()))?;
        json_files::pick(
            all,
            name_or_id,
            |r| r.id == name_or_id || r.name.as_deref() == Some(name_or_id),
            |r| &r.id,
            json_files::Kind {
                noun: "snapshot",
                dir: &self.dir,
                listed_by: "agentix ps --snapshots",
            },
        )
    }

    /// Removes the files and the record of every snapshot of `provider`
    /// whose owner died without removing it (unnamed ones; a name keeps a
    /// snapshot). Returns how many went; one whose files stay is said in
    /// the log and keeps its record.
    pub fn reap(&self, provider: &str) -> std::io::Result<usize> {
        let doomed: Vec<SnapshotRecord> = self
            .list()?
            .into_iter()
            .filter(|r| r.provider == provider && r.abandoned())
            .collect();
        Ok(doomed
            .iter()
            .filter(|record| self.remove_with_files(record).is_ok())
            .count())
    }

    /// Removes `record`'s directory, then the record.
    pub fn remove_with_files(&self, record: &SnapshotRecord) -> std::io::Result<()> {
        match std::fs::remove_dir_all(&record.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(
                    snapshot = %record.id,
                    dir = %record.dir.display(),
                    error = %e,
                    "a snapshot's directory cannot be removed; its record stays"
                );
                return Err(e);
            }
            _ => {}
        }
        self.remove(&record.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, name: Option<&str>, owner: &str, dir: PathBuf) -> SnapshotRecord {
        SnapshotRecord {
            id: id.into(),
            name: name.map(Into::into),
            labels: BTreeMap::new(),
            provider: "local".into(),
            source: "local-x".into(),
            owner: owner.into(),
            dir,
            bytes: 1,
            created_ms: 1,
        }
    }

    #[test]
    fn a_reap_removes_the_unnamed_snapshots_of_dead_owners_only() {
        let base = std::env::temp_dir().join(format!("agentix-snaprec-{}", std::process::id()));
        let records = SnapshotRecords::of(&MarkerDir::new(base.join("markers")));
        // A dead owner: this machine and boot, a start time no process has.
        let me = OwnerId::current();
        let dead = OwnerId {
            start: me.start + 1,
            ..me.clone()
        };
        assert_eq!(dead.liveness(), Liveness::Dead);
        let (me, dead) = (me.to_string(), dead.to_string());
        let cases = [
            ("snap-dead", None, &dead),
            ("snap-dead-named", Some("kept"), &dead),
            ("snap-alive", None, &me),
        ];
        for (id, name, owner) in cases {
            let dir = base.join(id);
            std::fs::create_dir_all(dir.join("sub")).unwrap();
            std::fs::write(dir.join("sub/file"), b"x").unwrap();
            records.write(&record(id, name, owner, dir)).unwrap();
        }
        assert_eq!(records.find("kept").unwrap().id, "snap-dead-named");
        assert_eq!(records.find("snap-a").unwrap().id, "snap-alive");
        assert!(records
            .find("snap-d")
            .unwrap_err()
            .contains("more than one"));

        assert_eq!(records.reap("docker").unwrap(), 0, "another provider's");
        assert_eq!(records.reap("local").unwrap(), 1);
        assert!(!base.join("snap-dead").exists());
        assert!(base.join("snap-dead-named/sub/file").exists());
        assert!(base.join("snap-alive/sub/file").exists());
        let mut left: Vec<String> = records.list().unwrap().into_iter().map(|r| r.id).collect();
        left.sort();
        assert_eq!(left, ["snap-alive", "snap-dead-named"]);

        std::fs::remove_dir_all(&base).unwrap();
    }
}
