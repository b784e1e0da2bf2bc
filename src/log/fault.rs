//! Storage fault hooks for fault-injection tests. Without their environment variables they
//! cost one atomic load per use.
//!
//! The sync journal lets a harness (`jepsen/`) drop, after a kill -9, the segment bytes that
//! were never fdatasync'ed, as a power cut would.
//!
//! With `SLUICE_FAULT_SYNC_JOURNAL=<file>` in the environment, the log appends one line
//! `<bytes> <segment path>` to that file whenever it knows a prefix of a segment's data is
//! durable: after an fdatasync (the segment's size when the sync was requested) and when a
//! segment is created or truncated (a shorter prefix). The last line for a path bounds what
//! survives a power cut. The journal itself is written without fsync: the harness reads it
//! after killing the process, while the kernel still holds it. Without the variable nothing
//! is recorded and the hook costs one atomic load per sync.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

pub const SYNC_JOURNAL_ENV: &str = "SLUICE_FAULT_SYNC_JOURNAL";

/// With `SLUICE_FAULT_FAIL_WRITES=<file>` in the environment, writes to the log of a partition
/// named (`topic-partition`) on a line of that file fail with an I/O error, as on a failing
/// disk: the test writes the file when the fault should begin. Used by `tests/replication.rs`.
pub const FAIL_WRITES_ENV: &str = "SLUICE_FAULT_FAIL_WRITES";

/// The injected error for a write to `topic_partition`'s log, when the fault hook names it.
pub fn injected_write_error(topic_partition: &impl std::fmt::Display) -> Option<std::io::Error> {
    static FILE: OnceLock<Option<PathBuf>> = OnceLock::new();
    let file = FILE
        .get_or_init(|| {
            let path = PathBuf::from(std::env::var_os(FAIL_WRITES_ENV)?);
            tracing::warn!(file = %path.display(), "storage fault hook on: writes to the partitions this file names fail");
            Some(path)
        })
        .as_ref()?;
    let named = std::fs::read_to_string(file).ok()?;
    let topic_partition = topic_partition.to_string();
    named
        .lines()
        .any(|l| l.trim() == topic_partition)
        .then(|| std::io::Error::other(format!("injected write failure ({FAIL_WRITES_ENV})")))
}

fn journal() -> Option<&'static Mutex<File>> {
    static JOURNAL: OnceLock<Option<Mutex<File>>> = OnceLock::new();
    JOURNAL
        .get_or_init(|| {
            let path = std::env::var_os(SYNC_JOURNAL_ENV)?;
            match OpenOptions::new().create(true).append(true).open(&path) {
                Ok(file) => {
                    tracing::warn!(journal = %Path::new(&path).display(), "storage fault hook on: durable prefixes of segments are journaled");
                    Some(Mutex::new(file))
                }
                Err(error) => {
                    tracing::error!(journal = %Path::new(&path).display(), %error, "cannot open the sync journal; fault hook off");
                    None
                }
            }
        })
        .as_ref()
}

/// Records that the first `bytes` of the segment file at `path` are durable.
pub fn durable_prefix(path: &Path, bytes: u64) {
    let Some(journal) = journal() else { return };
    let line = format!("{bytes} {}\n", path.display());
    let mut file = journal.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(error) = file.write_all(line.as_bytes()) {
        tracing::error!(%error, "cannot write the sync journal");
    }
}
