//! [`RunRecord`]: a run's outcomes as JSON lines, one per finished task,
//! written as each task ends, and read back so that running the same job
//! again skips what is already there.
//!
//! Each line is written with one `write` to a file opened for appending,
//! without user-space buffering and without `fsync`: what a killed host had
//! finished is on disk (the kernel has it), and 20,000 lines a second stay
//! cheap. A line cut short by a crash is ignored on reading and ended
//! before the next is written.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Serialize;

use crate::failure::Failure;
use crate::outcome::Outcome;

/// An open record: the tasks it holds, and the file new lines go to.
#[derive(Debug)]
pub struct RunRecord {
    path: PathBuf,
    /// `None` once closed: nothing more is written.
    file: Mutex<Option<File>>,
    finished: HashSet<String>,
    unreadable_lines: usize,
}

/// One line of the record.
#[derive(Serialize)]
struct Line<'a, O> {
    task: &'a str,
    outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<&'a O>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failure: Option<&'a Failure>,
    attempts: u32,
    #[serde(skip_serializing_if = "<[Failure]>::is_empty")]
    retried: &'a [Failure],
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox: Option<&'a str>,
    queued_ms: f64,
    start_ms: f64,
    call_ms: f64,
    total_ms: f64,
}

impl RunRecord {
    /// Opens the record at `path`, creating it if missing, and reads which
    /// tasks it already holds.
    pub fn open(path: impl AsRef<Path>) -> std::io::Result<RunRecord> {
        let path = path.as_ref().to_owned();
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)?;
        let mut text = Vec::new();
        file.read_to_end(&mut text)?;
        let mut finished = HashSet::new();
        let mut unreadable_lines = 0;
        for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            match serde_json::from_slice::<serde_json::Value>(line) {
                Ok(value) => match value.get("task").and_then(|t| t.as_str()) {
                    Some(task) => {
                        finished.insert(task.to_owned());
                    }
                    None => unreadable_lines += 1,
                },
                Err(_) => unreadable_lines += 1,
            }
        }
        // A line a crash cut short is ended, so the next starts clean.
        if text.last().is_some_and(|&b| b != b'\n') {
            file.seek(SeekFrom::End(0))?;
            file.write_all(b"\n")?;
        }
        Ok(RunRecord {
            path,
            file: Mutex::new(Some(file)),
            finished,
            unreadable_lines,
        })
    }

    /// Where the record is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether `task` already has an outcome in the record.
    pub fn has(&self, task: &str) -> bool {
        self.finished.contains(task)
    }

    /// How many tasks the record held when opened.
    pub fn finished(&self) -> usize {
        self.finished.len()
    }

    /// Lines of the record that could not be read (a crash cut them short).
    pub fn unreadable_lines(&self) -> usize {
        self.unreadable_lines
    }

    /// Closes the record: once this returns, nothing more is written to it
    /// (a stopped run's last tasks are then run again by the next run,
    /// never recorded twice).
    pub fn close(&self) {
        *self.file.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Appends `outcome` as one line (nothing once the record is closed).
    pub fn write<O: Serialize>(&self, outcome: &Outcome<O>) -> std::io::Result<()> {
        let (output, failure) = match &outcome.result {
            Ok(value) => (Some(value), None),
            Err(failure) => (None, Some(failure)),
        };
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        let line = Line {
            task: &outcome.task,
            outcome: if output.is_some() { "done" } else { "failed" },
            output,
            failure,
            attempts: outcome.attempts,
            retried: &outcome.retried,
            sandbox: outcome.sandbox.as_deref(),
            queued_ms: ms(outcome.timings.queued),
            start_ms: ms(outcome.timings.start),
            call_ms: ms(outcome.timings.call),
            total_ms: ms(outcome.timings.total),
        };
        let mut bytes = serde_json::to_vec(&line).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        match self.file.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            Some(file) => file.write_all(&bytes),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::FailureKind;
    use crate::outcome::Timings;

    fn outcome(task: &str, result: Result<u32, Failure>) -> Outcome<u32> {
        Outcome {
            task: task.into(),
            result,
            attempts: 1,
            retried: Vec::new(),
            sandbox: Some("local-x".into()),
            timings: Timings::default(),
        }
    }

    #[test]
    fn lines_written_are_read_back_and_a_torn_last_line_is_skipped_and_ended() {
        let path = std::env::temp_dir().join(format!("agentix-record-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let record = RunRecord::open(&path).unwrap();
        assert_eq!(record.finished(), 0);
        record.write(&outcome("a", Ok(1))).unwrap();
        let failure = Failure {
            kind: FailureKind::Task,
            error: None,
            message: "no".into(),
            sandbox: None,
        };
        record.write(&outcome("b", Err(failure))).unwrap();
        drop(record);
        // A host killed mid-line.
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(br#"{"task":"c","outc"#).unwrap();
        drop(file);

        let record = RunRecord::open(&path).unwrap();
        assert!(record.has("a") && record.has("b") && !record.has("c"));
        assert_eq!(record.unreadable_lines(), 1);
        record.write(&outcome("c", Ok(3))).unwrap();
        drop(record);
        let text = std::fs::read_to_string(&path).unwrap();
        let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!(last["task"], "c");
        assert_eq!(last["output"], 3);
        assert_eq!(RunRecord::open(&path).unwrap().finished(), 3);
        let _ = std::fs::remove_file(&path);
    }
}
