//! The snapshots this machine's hosts recorded (`agentix::snapshot_record`):
//! listed by `agentix ps --snapshots`, removed by `agentix reap
//! --snapshot NAME`.

use agentix::{MarkerDir, OwnerId, SnapshotRecord, SnapshotRecords};
use serde::Serialize;

use super::listing::{human_age, owner_state};

/// One line of the listing.
#[derive(Debug, Serialize)]
struct Row {
    id: String,
    name: Option<String>,
    provider: String,
    /// The sandbox it was taken of.
    source: String,
    owner_pid: Option<u32>,
    /// `alive`, `dead`, `elsewhere` or `unknown`.
    owner: &'static str,
    /// Whether `agentix reap` removes it (unnamed, its owner dead).
    abandoned: bool,
    age_s: u64,
    bytes: u64,
    labels: std::collections::BTreeMap<String, String>,
    dir: std::path::PathBuf,
}

/// Prints every recorded snapshot, as a table or one JSON array.
pub(crate) fn list(markers: &MarkerDir, json: bool) -> Result<(), String> {
    let records = SnapshotRecords::of(markers);
    let listed = records
        .list()
        .map_err(|e| format!("cannot read the snapshot records: {e}"))?;
    let now_ms = agentix::sandbox_marker::now_ms();
    let rows: Vec<Row> = listed
        .into_iter()
        .map(|r| {
            let owner = OwnerId::parse(&r.owner);
            Row {
                abandoned: r.abandoned(),
                owner_pid: owner.as_ref().map(|o| o.pid),
                owner: owner_state(owner.as_ref()),
                age_s: now_ms.saturating_sub(r.created_ms) / 1000,
                id: r.id,
                name: r.name,
                provider: r.provider,
                source: r.source,
                bytes: r.bytes,
                labels: r.labels,
                dir: r.dir,
            }
        })
        .collect();
    if json {
        let text = serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?;
        println!("{text}");
        return Ok(());
    }
    println!(
        "{:<26} {:<16} {:<8} {:>8} {:<9} {:>7} {:>9}  SOURCE",
        "ID", "NAME", "PROVIDER", "OWNER", "", "AGE", "SIZE"
    );
    for row in &rows {
        println!(
            "{:<26} {:<16} {:<8} {:>8} {:<9} {:>7} {:>9}  {}",
            row.id,
            row.name.as_deref().unwrap_or("-"),
            row.provider,
            row.owner_pid.map(|p| p.to_string()).unwrap_or_default(),
            row.owner,
            human_age(row.age_s),
            format!("{:.1}MB", row.bytes as f64 / 1e6),
            row.source
        );
    }
    Ok(())
}

/// Removes the snapshots `names` name (names, ids or the start of one id),
/// whoever took them; returns what was removed.
pub(crate) fn remove(markers: &MarkerDir, names: &[String]) -> Result<Vec<SnapshotRecord>, String> {
    let records = SnapshotRecords::of(markers);
    let found = names
        .iter()
        .map(|name| records.find(name))
        .collect::<Result<Vec<_>, _>>()?;
    for record in &found {
        records.remove_with_files(record).map_err(|e| {
            format!(
                "cannot remove snapshot {} ({}): {e}",
                record.id,
                record.dir.display()
            )
        })?;
    }
    Ok(found)
}

/// The snapshots a reap would remove.
pub(crate) fn abandoned(markers: &MarkerDir) -> Result<Vec<SnapshotRecord>, String> {
    let listed = SnapshotRecords::of(markers)
        .list()
        .map_err(|e| format!("cannot read the snapshot records: {e}"))?;
    Ok(listed
        .into_iter()
        .filter(SnapshotRecord::abandoned)
        .collect())
}
