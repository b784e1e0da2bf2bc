//! A storage fault hook for the fault-injection suite (`jepsen/`): it lets a harness drop, after
//! a kill -9, the segment bytes that were never fdatasync'ed, as a power cut would.
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
use std::path::Path;
use std::sync::{Mutex, OnceLock};

pub const SYNC_JOURNAL_ENV: &str = "SLUICE_FAULT_SYNC_JOURNAL";

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
