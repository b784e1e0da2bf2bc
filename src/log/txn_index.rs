//! A segment's aborted-transaction index, `<base>.txnindex` in Kafka's format: one entry per
//! transaction whose abort marker is in the segment, in marker order.
//!
//! ```text
//! entry  version i16 (0) | producer_id i64 | first_offset i64 | last_offset i64
//!        | last_stable_offset i64                                          (34 bytes)
//! ```
//!
//! `first_offset` is the transaction's first record, `last_offset` its abort marker, and
//! `last_stable_offset` the partition's last stable offset once the marker was written: no
//! transaction aborted later started before it. A read_committed fetch asks each segment from
//! the fetch offset on for the aborted transactions overlapping what it returns, and stops at
//! the first entry whose last stable offset passes its upper bound (Kafka's
//! `TransactionIndex.collectAbortedTxns`).
//!
//! The entries are kept in memory too (the file is only appended and read at open). An entry
//! is synced as it is added (aborts are rare; Kafka syncs the index with its segment), before
//! the producer snapshot that follows its marker can be: after a crash the index holds every
//! marker below the snapshot replay starts from, and the replay adds the rest
//! ([`TxnIndex::add`] ignores an entry it already has). Recovery drops the entries past the
//! data it keeps.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use super::error::{LogError, Result};

pub const TXN_INDEX_SUFFIX: &str = ".txnindex";
pub const ENTRY_BYTES: usize = 34;
const ENTRY_VERSION: i16 = 0;

/// One aborted transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: u64,
    pub last_offset: u64,
    pub last_stable_offset: u64,
}

impl AbortedTxn {
    fn encode(&self) -> [u8; ENTRY_BYTES] {
        let mut out = [0u8; ENTRY_BYTES];
        out[..2].copy_from_slice(&ENTRY_VERSION.to_be_bytes());
        out[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        out[10..18].copy_from_slice(&(self.first_offset as i64).to_be_bytes());
        out[18..26].copy_from_slice(&(self.last_offset as i64).to_be_bytes());
        out[26..34].copy_from_slice(&(self.last_stable_offset as i64).to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<AbortedTxn> {
        let i64_at = |at: usize| {
            bytes
                .get(at..at + 8)
                .and_then(|b| b.try_into().ok())
                .map(i64::from_be_bytes)
        };
        let version = i16::from_be_bytes(bytes.get(..2)?.try_into().ok()?);
        if version != ENTRY_VERSION {
            return None;
        }
        let offset = |at| i64_at(at).and_then(|o| u64::try_from(o).ok());
        Some(AbortedTxn {
            producer_id: i64_at(2)?,
            first_offset: offset(10)?,
            last_offset: offset(18)?,
            last_stable_offset: offset(26)?,
        })
    }
}

/// An entry to append to an index file and sync.
#[derive(Debug)]
pub struct PendingWrite {
    path: PathBuf,
    bytes: [u8; ENTRY_BYTES],
}

impl PendingWrite {
    pub fn write(self) -> Result<()> {
        let io = |e| LogError::io(&self.path, e);
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(io)?;
        file.write_all(&self.bytes).map_err(io)?;
        file.sync_data().map_err(io)
    }
}

/// What [`TxnIndex::collect`] found.
#[derive(Debug, Default)]
pub struct Collected {
    /// No later segment can hold a transaction that overlaps the range.
    pub complete: bool,
}

#[derive(Debug)]
pub struct TxnIndex {
    path: PathBuf,
    entries: Vec<AbortedTxn>,
}

impl TxnIndex {
    /// A new, empty index (an older file of that name is removed).
    pub fn create(path: PathBuf) -> Result<TxnIndex> {
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(LogError::io(path, e)),
        }
        Ok(TxnIndex {
            path,
            entries: Vec::new(),
        })
    }

    /// Loads the index at `path` (none: empty). A torn last entry, an entry out of order or of
    /// an unknown version ends what is kept, and the file is cut there: the replay of the
    /// segment's producer state adds what is missing.
    pub fn open(path: PathBuf) -> Result<TxnIndex> {
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(LogError::io(path, e)),
        };
        let mut entries = Vec::with_capacity(bytes.len() / ENTRY_BYTES);
        for chunk in bytes.chunks(ENTRY_BYTES) {
            let Some(entry) = AbortedTxn::decode(chunk).filter(|e| {
                chunk.len() == ENTRY_BYTES
                    && entries
                        .last()
                        .is_none_or(|last: &AbortedTxn| last.last_offset < e.last_offset)
            }) else {
                break;
            };
            entries.push(entry);
        }
        let mut index = TxnIndex { path, entries };
        if index.entries.len() * ENTRY_BYTES != bytes.len() {
            tracing::warn!(path = %index.path.display(), kept = index.entries.len(), "cutting a damaged transaction index");
            index.rewrite()?;
        }
        Ok(index)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn set_path(&mut self, path: PathBuf) {
        self.path = path;
    }

    pub fn entries(&self) -> &[AbortedTxn] {
        &self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Appends `entry` unless the index already holds a marker at or past its offset (a
    /// replay re-adding what is there).
    pub fn add(&mut self, entry: AbortedTxn) -> Result<bool> {
        match self.push(entry) {
            Some(pending) => pending.write().map(|()| true),
            None => Ok(false),
        }
    }

    /// Takes `entry` into memory (unless the index has it) and returns the file write that
    /// makes it durable, to run outside the log's lock: entries of one log are added by one
    /// writer at a time (the replica layer holds its producer-state lock), so writes land in
    /// order.
    pub fn push(&mut self, entry: AbortedTxn) -> Option<PendingWrite> {
        if self
            .entries
            .last()
            .is_some_and(|last| last.last_offset >= entry.last_offset)
        {
            return None;
        }
        self.entries.push(entry);
        Some(PendingWrite {
            path: self.path.clone(),
            bytes: entry.encode(),
        })
    }

    /// Drops the entries whose marker is at or past `offset` (a truncation).
    pub fn truncate_to(&mut self, offset: u64) -> Result<()> {
        let keep = self.entries.partition_point(|e| e.last_offset < offset);
        if keep < self.entries.len() {
            self.entries.truncate(keep);
            self.rewrite()?;
        }
        Ok(())
    }

    /// The entries overlapping `[fetch_offset, upper_bound)` pushed to `out`.
    pub fn collect(
        &self,
        fetch_offset: u64,
        upper_bound: u64,
        out: &mut Vec<AbortedTxn>,
    ) -> Collected {
        for entry in &self.entries {
            if entry.last_offset >= fetch_offset && entry.first_offset < upper_bound {
                out.push(*entry);
            }
            if entry.last_stable_offset >= upper_bound {
                return Collected { complete: true };
            }
        }
        Collected { complete: false }
    }

    fn rewrite(&mut self) -> Result<()> {
        let io = |e| LogError::io(&self.path, e);
        if self.entries.is_empty() {
            return match fs::remove_file(&self.path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io(e)),
                _ => Ok(()),
            };
        }
        let mut bytes = Vec::with_capacity(self.entries.len() * ENTRY_BYTES);
        for entry in &self.entries {
            bytes.extend_from_slice(&entry.encode());
        }
        let mut file = File::create(&self.path).map_err(io)?;
        file.write_all(&bytes).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(producer_id: i64, first: u64, last: u64, lso: u64) -> AbortedTxn {
        AbortedTxn {
            producer_id,
            first_offset: first,
            last_offset: last,
            last_stable_offset: lso,
        }
    }

    #[test]
    fn entries_are_kafkas_34_bytes() {
        let bytes = entry(7, 10, 20, 21).encode();
        let mut expected = vec![0u8, 0];
        for field in [7i64, 10, 20, 21] {
            expected.extend_from_slice(&field.to_be_bytes());
        }
        assert_eq!(bytes.to_vec(), expected);
        assert_eq!(AbortedTxn::decode(&bytes), Some(entry(7, 10, 20, 21)));
    }

    #[test]
    fn add_open_truncate_and_damage() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("00000000000000000000.txnindex");
        let mut index = TxnIndex::create(path.clone()).expect("create");
        assert!(index.add(entry(1, 0, 5, 6)).expect("add"));
        assert!(index.add(entry(2, 3, 9, 10)).expect("add"));
        // A replay re-adding an entry it has changes nothing.
        assert!(!index.add(entry(2, 3, 9, 10)).expect("add"));
        assert!(index.add(entry(3, 11, 14, 15)).expect("add"));
        let reopened = TxnIndex::open(path.clone()).expect("open");
        assert_eq!(reopened.entries(), index.entries());
        index.truncate_to(9).expect("truncate");
        assert_eq!(index.entries(), &[entry(1, 0, 5, 6)]);
        assert_eq!(
            TxnIndex::open(path.clone()).expect("open").entries(),
            index.entries()
        );
        // A torn tail is cut.
        let mut bytes = fs::read(&path).expect("read");
        bytes.extend_from_slice(&entry(4, 20, 30, 31).encode()[..20]);
        fs::write(&path, &bytes).expect("write");
        let cut = TxnIndex::open(path.clone()).expect("open");
        assert_eq!(cut.entries(), &[entry(1, 0, 5, 6)]);
        assert_eq!(fs::metadata(&path).expect("stat").len(), 34);
        index.truncate_to(0).expect("truncate");
        assert!(!path.exists());
    }

    #[test]
    fn collect_stops_once_no_later_transaction_can_overlap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut index = TxnIndex::create(dir.path().join("x.txnindex")).expect("create");
        index.add(entry(1, 0, 5, 2)).expect("add");
        index.add(entry(2, 2, 8, 9)).expect("add");
        index.add(entry(3, 9, 12, 13)).expect("add");
        let mut out = Vec::new();
        let found = index.collect(6, 9, &mut out);
        assert!(found.complete);
        assert_eq!(out, vec![entry(2, 2, 8, 9)]);
        out.clear();
        let found = index.collect(0, 100, &mut out);
        assert!(!found.complete);
        assert_eq!(out.len(), 3);
    }
}
