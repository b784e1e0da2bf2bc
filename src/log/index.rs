//! Sparse, memory-mapped offset and time indexes, in Kafka's file formats.
//!
//! `.index`: 8-byte entries `relative_offset u32 | position u32`, big-endian, where
//! `relative_offset` is a batch's base offset minus the segment's base offset and `position` is
//! where that batch starts in the `.log` file.
//!
//! `.timeindex`: 12-byte entries `timestamp i64 | relative_offset u32`: up to and including the
//! batch at `relative_offset`, no record's timestamp exceeds `timestamp`. Timestamps strictly
//! increase from entry to entry.
//!
//! The index of the active segment lives in memory (at most `segment.index.bytes`); when the
//! segment is sealed (it rolls, or the log closes) its entries are written to the file, whose
//! length then tells the entry count, and the file is mapped read-only through the bounded set
//! of index mappings (`handles::INDEX_MAPS`), which unmaps the least recently used and maps
//! them again on use. No state holds a file descriptor, and an active index holds no mapping,
//! so neither `RLIMIT_NOFILE` nor `vm.max_map_count` bounds the partitions or segments. The
//! file of an active index is emptied when it becomes active: after a crash it says nothing,
//! and the segment is scanned from its start (recovery rebuilds the entries). An index that
//! cannot be mapped again (its file gone, no memory) reads as empty: lookups then scan the
//! segment from its start, slower but right.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;

use super::error::{LogError, Result};
use super::handles::IndexMap;

#[derive(Debug)]
enum Entries {
    /// Active: appended to in memory.
    Memory(Vec<u8>),
    /// Sealed: the file, mapped read-only on use; `None` when it is empty.
    Mapped(Option<IndexMap>),
}

/// The entries' bytes for one use: borrowed from memory, or a mapping kept while used.
enum View<'a> {
    Borrowed(&'a [u8]),
    Mapped(Arc<Mmap>),
}

impl std::ops::Deref for View<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            View::Borrowed(bytes) => bytes,
            View::Mapped(mapping) => mapping,
        }
    }
}

/// Fixed-size entries, the first `entries` of which are valid.
#[derive(Debug)]
struct IndexFile {
    path: PathBuf,
    data: Entries,
    /// The length of the sealed file, as mapped.
    mapped_bytes: usize,
    entry_bytes: usize,
    entries: usize,
    max_entries: usize,
}

impl IndexFile {
    /// Opens (or creates) the file. A file that exists is taken to hold `len / entry_bytes`
    /// entries; `capacity_bytes` bounds the entries while the segment is active.
    fn open(path: &Path, entry_bytes: usize, capacity_bytes: usize, active: bool) -> Result<Self> {
        let mut index = IndexFile {
            path: path.to_path_buf(),
            data: Entries::Mapped(None),
            mapped_bytes: 0,
            entry_bytes,
            entries: 0,
            max_entries: 0,
        };
        index.map()?;
        if active {
            index.make_active(capacity_bytes)?;
        }
        Ok(index)
    }

    fn open_file(&self) -> Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)
            .map_err(|e| LogError::io(&self.path, e))
    }

    /// Maps the file read-only (creating it empty if it is missing) and takes its length as
    /// the entries.
    fn map(&mut self) -> Result<()> {
        drop(self.open_file()?);
        let (mapping, length) = match IndexMap::open(&self.path) {
            Ok(Some((mapping, length))) => (Some(mapping), length),
            Ok(None) => (None, 0),
            Err(e) => return Err(LogError::io(&self.path, e)),
        };
        self.data = Entries::Mapped(mapping);
        self.mapped_bytes = length;
        self.entries = length / self.entry_bytes;
        self.max_entries = self.entries;
        Ok(())
    }

    /// The valid entries' bytes (`entries * entry_bytes`, or none when a sealed index cannot
    /// be mapped again), for `use_entries`.
    fn with_entries<R>(&self, use_entries: impl FnOnce(&[u8]) -> R) -> R {
        let view = match &self.data {
            Entries::Memory(memory) => View::Borrowed(memory),
            Entries::Mapped(None) => View::Borrowed(&[]),
            Entries::Mapped(Some(mapping)) => match mapping.get() {
                Ok(mapping) => View::Mapped(mapping),
                Err(error) => {
                    tracing::warn!(index = %self.path.display(), %error, "cannot map a sealed index: lookups scan its segment");
                    View::Borrowed(&[])
                }
            },
        };
        let bytes = (self.entries * self.entry_bytes).min(view.len());
        use_entries(&view[..bytes])
    }

    /// Seals: writes the valid entries to the file (cut to their length) and maps it.
    fn trim(&mut self) -> Result<()> {
        let bytes = self.entries * self.entry_bytes;
        if matches!(self.data, Entries::Mapped(_)) && self.mapped_bytes == bytes {
            return Ok(());
        }
        let io = |e| LogError::io(&self.path, e);
        let mut file = self.open_file()?;
        match std::mem::replace(&mut self.data, Entries::Mapped(None)) {
            Entries::Memory(memory) => {
                file.set_len(0).map_err(io)?;
                file.write_all(&memory[..bytes]).map_err(io)?;
            }
            // A truncated sealed index: only the length changes (the mapping is dropped
            // first; one still in use by a reader keeps the old pages).
            Entries::Mapped(mapping) => {
                drop(mapping);
                file.set_len(bytes as u64).map_err(io)?;
            }
        }
        drop(file);
        self.map()
    }

    /// Makes the index appendable again, up to `capacity_bytes`, and empties the file: until
    /// the next seal its entries live only in memory.
    fn make_active(&mut self, capacity_bytes: usize) -> Result<()> {
        self.max_entries = (capacity_bytes / self.entry_bytes).max(self.entries);
        if matches!(self.data, Entries::Memory(_)) {
            return Ok(()); // active already
        }
        let memory = self.with_entries(<[u8]>::to_vec);
        self.entries = memory.len() / self.entry_bytes;
        self.data = Entries::Memory(memory);
        self.mapped_bytes = 0;
        self.open_file()?
            .set_len(0)
            .map_err(|e| LogError::io(&self.path, e))
    }

    fn push(&mut self, bytes: &[u8]) {
        assert!(
            self.entries < self.max_entries,
            "index {} is full",
            self.path.display()
        );
        assert_eq!(bytes.len(), self.entry_bytes);
        let Entries::Memory(memory) = &mut self.data else {
            panic!("index {} is sealed", self.path.display());
        };
        memory.truncate(self.entries * self.entry_bytes);
        memory.extend_from_slice(bytes);
        self.entries += 1;
    }

    fn is_full(&self) -> bool {
        self.entries >= self.max_entries
    }

    fn set_path(&mut self, path: PathBuf) {
        if let Entries::Mapped(Some(mapping)) = &self.data {
            mapping.set_path(path.clone());
        }
        self.path = path;
    }
}

/// The last entry `n` of `entries` (`size` bytes each) for which `below` holds, given it
/// holds for a prefix.
fn last_where(entries: &[u8], size: usize, below: impl Fn(&[u8]) -> bool) -> Option<usize> {
    let entry = |n: usize| &entries[n * size..(n + 1) * size];
    let (mut low, mut high) = (0, entries.len() / size);
    while low < high {
        let middle = low + (high - low) / 2;
        if below(entry(middle)) {
            low = middle + 1;
        } else {
            high = middle;
        }
    }
    low.checked_sub(1)
}

/// Entry `n` of `entries`, `size` bytes each.
fn nth(entries: &[u8], size: usize, n: usize) -> &[u8] {
    &entries[n * size..(n + 1) * size]
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(bytes)
}

pub const OFFSET_ENTRY_BYTES: usize = 8;
pub const TIME_ENTRY_BYTES: usize = 12;

/// Maps batch base offsets to file positions.
#[derive(Debug)]
pub struct OffsetIndex {
    base_offset: u64,
    file: IndexFile,
}

impl OffsetIndex {
    pub fn open(
        path: &Path,
        base_offset: u64,
        capacity_bytes: usize,
        active: bool,
    ) -> Result<Self> {
        let file = IndexFile::open(path, OFFSET_ENTRY_BYTES, capacity_bytes, active)?;
        Ok(OffsetIndex { base_offset, file })
    }

    fn decode(&self, entry: &[u8]) -> (u64, u32) {
        (
            self.base_offset + u64::from(u32_at(entry, 0)),
            u32_at(entry, 4),
        )
    }

    /// The entry with the largest key `<= key` (the segment start when none is).
    fn last_at_or_below(&self, key: impl Fn(&[u8]) -> u64, limit: u64) -> (u64, u32) {
        self.file.with_entries(|entries| {
            last_where(entries, OFFSET_ENTRY_BYTES, |e| key(e) <= limit)
                .map_or((self.base_offset, 0), |n| {
                    self.decode(nth(entries, OFFSET_ENTRY_BYTES, n))
                })
        })
    }

    pub fn entries(&self) -> usize {
        self.file.entries
    }
    pub fn is_full(&self) -> bool {
        self.file.is_full()
    }
    pub fn last(&self) -> Option<(u64, u32)> {
        self.file.with_entries(|entries| {
            entries
                .chunks_exact(OFFSET_ENTRY_BYTES)
                .last()
                .map(|e| self.decode(e))
        })
    }

    pub fn append(&mut self, offset: u64, position: u32) {
        let relative = offset - self.base_offset;
        assert!(
            relative <= u64::from(u32::MAX),
            "relative offset overflows the index"
        );
        if let Some((last_offset, last_position)) = self.last() {
            assert!(
                offset > last_offset && position > last_position,
                "offset index entries must increase"
            );
        }
        let mut entry = [0u8; OFFSET_ENTRY_BYTES];
        entry[..4].copy_from_slice(&(relative as u32).to_be_bytes());
        entry[4..].copy_from_slice(&position.to_be_bytes());
        self.file.push(&entry);
    }

    /// The entry with the largest offset `<= offset`, or the segment start.
    pub fn lookup(&self, offset: u64) -> (u64, u32) {
        let relative = offset.saturating_sub(self.base_offset);
        self.last_at_or_below(|e| u64::from(u32_at(e, 0)), relative)
    }

    /// The entry with the largest position `<= position`, or the segment start.
    pub fn lookup_position(&self, position: u64) -> (u64, u32) {
        self.last_at_or_below(|e| u64::from(u32_at(e, 4)), position)
    }

    /// Drops entries for offsets `>= offset`.
    pub fn truncate_to(&mut self, offset: u64) {
        let relative = offset.saturating_sub(self.base_offset);
        self.file.entries = self.file.with_entries(|entries| {
            last_where(entries, OFFSET_ENTRY_BYTES, |e| {
                u64::from(u32_at(e, 0)) < relative
            })
            .map_or(0, |n| n + 1)
        });
    }

    pub fn reset(&mut self) {
        self.file.entries = 0;
    }

    /// Checks what a file we did not just rebuild claims: increasing offsets and positions
    /// within the segment.
    pub fn sanity_check(&self, segment_bytes: u64) -> Result<(), String> {
        self.file.with_entries(|entries| {
            let mut previous: Option<(u64, u32)> = None;
            for (n, entry) in entries.chunks_exact(OFFSET_ENTRY_BYTES).enumerate() {
                let (offset, position) = self.decode(entry);
                if u64::from(position) >= segment_bytes.max(1) {
                    return Err(format!(
                        "entry {n} points at byte {position} past the segment end"
                    ));
                }
                if let Some((po, pp)) = previous {
                    if offset <= po || position <= pp {
                        return Err(format!("entry {n} does not increase"));
                    }
                }
                previous = Some((offset, position));
            }
            Ok(())
        })
    }

    /// The file, to fsync once sealed (outside the log's lock).
    pub fn path(&self) -> &Path {
        &self.file.path
    }
    /// The file was renamed (the cleaner's suffixes).
    pub fn set_path(&mut self, path: PathBuf) {
        self.file.set_path(path);
    }

    /// Seals: writes the entries to the file and maps it.
    pub fn trim(&mut self) -> Result<()> {
        self.file.trim()
    }
    pub fn make_active(&mut self, capacity_bytes: usize) -> Result<()> {
        self.file.make_active(capacity_bytes)
    }
}

/// Maps timestamps to offsets, for ListOffsets by time and for time-based retention.
#[derive(Debug)]
pub struct TimeIndex {
    base_offset: u64,
    file: IndexFile,
}

impl TimeIndex {
    pub fn open(
        path: &Path,
        base_offset: u64,
        capacity_bytes: usize,
        active: bool,
    ) -> Result<Self> {
        let file = IndexFile::open(path, TIME_ENTRY_BYTES, capacity_bytes, active)?;
        Ok(TimeIndex { base_offset, file })
    }

    fn decode(&self, entry: &[u8]) -> (i64, u64) {
        (
            i64_at(entry, 0),
            self.base_offset + u64::from(u32_at(entry, 8)),
        )
    }

    pub fn entries(&self) -> usize {
        self.file.entries
    }
    pub fn is_full(&self) -> bool {
        self.file.is_full()
    }
    pub fn last(&self) -> Option<(i64, u64)> {
        self.file.with_entries(|entries| {
            entries
                .chunks_exact(TIME_ENTRY_BYTES)
                .last()
                .map(|e| self.decode(e))
        })
    }

    /// Adds an entry when `timestamp` is larger than the last one's; there must be room.
    pub fn maybe_append(&mut self, timestamp: i64, offset: u64) {
        if let Some((last_ts, last_offset)) = self.last() {
            if timestamp <= last_ts {
                return;
            }
            assert!(
                offset >= last_offset,
                "time index offsets must not decrease"
            );
            if offset == last_offset {
                // Same batch, larger timestamp: overwrite rather than add a duplicate offset.
                self.file.entries -= 1;
            }
        }
        if self.file.is_full() {
            return;
        }
        let relative = offset - self.base_offset;
        let mut entry = [0u8; TIME_ENTRY_BYTES];
        entry[..8].copy_from_slice(&timestamp.to_be_bytes());
        entry[8..].copy_from_slice(&(relative as u32).to_be_bytes());
        self.file.push(&entry);
    }

    /// The last entry whose timestamp is strictly below `timestamp`: every record up to its
    /// offset is older than `timestamp`, so a scan for the first record `>= timestamp` can start
    /// after it. `None` when the scan must start at the segment's beginning.
    pub fn lookup_before(&self, timestamp: i64) -> Option<(i64, u64)> {
        self.file.with_entries(|entries| {
            last_where(entries, TIME_ENTRY_BYTES, |e| i64_at(e, 0) < timestamp)
                .map(|n| self.decode(nth(entries, TIME_ENTRY_BYTES, n)))
        })
    }

    /// Drops entries for offsets `>= offset`.
    pub fn truncate_to(&mut self, offset: u64) {
        let relative = offset.saturating_sub(self.base_offset);
        self.file.entries = self.file.with_entries(|entries| {
            last_where(entries, TIME_ENTRY_BYTES, |e| {
                u64::from(u32_at(e, 8)) < relative
            })
            .map_or(0, |n| n + 1)
        });
    }

    pub fn reset(&mut self) {
        self.file.entries = 0;
    }

    pub fn sanity_check(&self) -> Result<(), String> {
        self.file.with_entries(|entries| {
            let mut previous: Option<(i64, u64)> = None;
            for (n, entry) in entries.chunks_exact(TIME_ENTRY_BYTES).enumerate() {
                let entry = self.decode(entry);
                if let Some(p) = previous {
                    if entry.0 <= p.0 || entry.1 < p.1 {
                        return Err(format!("time index entry {n} does not increase"));
                    }
                }
                previous = Some(entry);
            }
            Ok(())
        })
    }

    pub fn path(&self) -> &Path {
        &self.file.path
    }
    pub fn set_path(&mut self, path: PathBuf) {
        self.file.set_path(path);
    }

    pub fn trim(&mut self) -> Result<()> {
        self.file.trim()
    }
    pub fn make_active(&mut self, capacity_bytes: usize) -> Result<()> {
        self.file.make_active(capacity_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_index_lookups_and_truncation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000100.index");
        let mut index = OffsetIndex::open(&path, 100, 64, true).unwrap();
        assert_eq!(index.lookup(150), (100, 0));
        for (i, offset) in [110u64, 120, 130, 140].iter().enumerate() {
            index.append(*offset, (i as u32 + 1) * 4096);
        }
        assert_eq!(index.lookup(99), (100, 0));
        assert_eq!(index.lookup(125), (120, 8192));
        assert_eq!(index.lookup(140), (140, 16384));
        assert_eq!(index.lookup_position(10_000), (120, 8192));
        index.truncate_to(130);
        assert_eq!(index.entries(), 2);
        index.trim().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 16);
        drop(index);
        let reopened = OffsetIndex::open(&path, 100, 64, false).unwrap();
        assert_eq!(reopened.last(), Some((120, 8192)));
        reopened.sanity_check(10_000).unwrap();
        assert!(reopened.sanity_check(8192).is_err());
    }

    #[test]
    fn full_index_reports_full() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = OffsetIndex::open(&dir.path().join("i"), 0, 20, true).unwrap();
        index.append(1, 10);
        index.append(2, 20);
        assert!(index.is_full(), "20 bytes hold two 8-byte entries");
    }

    #[test]
    fn time_index_keeps_timestamps_increasing() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = TimeIndex::open(&dir.path().join("t"), 0, 120, true).unwrap();
        index.maybe_append(1000, 0);
        index.maybe_append(900, 5); // not larger: skipped
        index.maybe_append(2000, 10);
        index.maybe_append(2500, 10); // same offset: replaces
        index.maybe_append(3000, 20);
        assert_eq!(index.entries(), 3);
        assert_eq!(index.lookup_before(1000), None);
        assert_eq!(index.lookup_before(1001), Some((1000, 0)));
        assert_eq!(index.lookup_before(2999), Some((2500, 10)));
        index.truncate_to(10);
        assert_eq!(index.last(), Some((1000, 0)));
        index.sanity_check().unwrap();
    }
}
