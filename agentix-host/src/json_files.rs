//! A directory of JSON files, one per id: what sandbox markers and
//! snapshot records are kept as. A file is written whole or not at all (to
//! a file of its own, then renamed, so a reader never sees half of one),
//! readable by the owner alone (0600); files that do not parse are skipped
//! when listing.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The file of `id` in `dir`.
pub(crate) fn file_of(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.json"))
}

/// Writes (or replaces) `id`'s file in `dir`, which must exist.
pub(crate) fn write<T: Serialize>(dir: &Path, id: &str, value: &T) -> std::io::Result<()> {
    let partial = dir.join(format!(".{id}.partial"));
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)?;
    out.write_all(&serde_json::to_vec(value)?)?;
    drop(out);
    std::fs::rename(&partial, file_of(dir, id))
}

/// `id`'s file in `dir`, parsed, if there is one.
pub(crate) fn read<T: DeserializeOwned>(dir: &Path, id: &str) -> Option<T> {
    let bytes = std::fs::read(file_of(dir, id)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Removes `id`'s file from `dir` (nothing when there is none).
pub(crate) fn remove(dir: &Path, id: &str) -> std::io::Result<()> {
    match std::fs::remove_file(file_of(dir, id)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Every file of `dir` that parses; an absent directory holds none.
pub(crate) fn list<T: DeserializeOwned>(dir: &Path) -> std::io::Result<Vec<T>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".json"))
        .filter_map(|entry| std::fs::read(entry.path()).ok())
        .filter_map(|bytes| serde_json::from_slice(&bytes).ok())
        .collect())
}

/// What [`pick`] is told about the kind of record it picks from.
pub(crate) struct Kind<'a> {
    /// One record, in an error (`sandbox`, `snapshot`).
    pub noun: &'a str,
    /// Where the records are, in an error.
    pub dir: &'a Path,
    /// The command that lists them (`agentix ps`).
    pub listed_by: &'a str,
}

/// The one of `records` that `name` names: one `exact` says it is, else
/// the only one whose id (`id_of`) starts with `name`; otherwise why not,
/// as a sentence.
pub(crate) fn pick<T>(
    records: Vec<T>,
    name: &str,
    exact: impl Fn(&T) -> bool,
    id_of: impl Fn(&T) -> &str,
    kind: Kind<'_>,
) -> Result<T, String> {
    let mut records = records;
    if let Some(at) = records.iter().position(&exact) {
        return Ok(records.swap_remove(at));
    }
    let mut matching = records.into_iter().filter(|r| id_of(r).starts_with(name));
    match (matching.next(), matching.next()) {
        (Some(only), None) => Ok(only),
        (Some(a), Some(b)) => Err(format!(
            "`{name}` names more than one {} ({}, {}, ...): give more of the id",
            kind.noun,
            id_of(&a),
            id_of(&b)
        )),
        (None, _) => Err(format!(
            "no {} `{name}` is recorded in {} (`{}` lists them)",
            kind.noun,
            kind.dir.display(),
            kind.listed_by
        )),
    }
}
