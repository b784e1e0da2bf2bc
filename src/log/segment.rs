//! One segment of a partition log: `<base>.log` with its `.index`, `.timeindex` and
//! `.txnindex` (aborted transactions, `txn_index.rs`).
//!
//! The segment owns its files. Appends are positional writes at the end of the `.log`; the
//! committed `size` is what readers see, so a reader never observes a half-written append.
//! Reads hand out [`FileSlice`]s (an `Arc<File>` and a byte range) that stay valid after the
//! segment is deleted, because an unlinked file lives on while open.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::file_slice::FileSlice;

use super::batch::{BATCH_HEADER_BYTES, BatchHeader, MAGIC_V2, RecordIter};
use super::config::LogConfig;
use super::epoch::LeaderEpochCache;
use super::error::{LogError, Result};
use super::handles::SegmentFile;
use super::index::{OffsetIndex, TimeIndex};
use super::txn_index::{AbortedTxn, Collected, PendingWrite, TXN_INDEX_SUFFIX, TxnIndex};

pub const LOG_SUFFIX: &str = ".log";
pub const INDEX_SUFFIX: &str = ".index";
pub const TIME_INDEX_SUFFIX: &str = ".timeindex";
pub const DELETED_SUFFIX: &str = ".deleted";
pub const CLEANED_SUFFIX: &str = ".cleaned";
pub const SWAP_SUFFIX: &str = ".swap";
/// How far ahead zeros are written for `flush.policy=always` segments.
const PREALLOCATE_BYTES: u64 = 4 * 1024 * 1024;
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];
/// Reads during recovery and scans go through a buffer of this size, whatever the batch size.
const SCAN_BUFFER_BYTES: usize = 1024 * 1024;

/// `<dir>/<20-digit base offset><suffix>`, Kafka's file naming.
pub fn segment_path(dir: &Path, base_offset: u64, suffix: &str) -> PathBuf {
    dir.join(format!("{base_offset:020}{suffix}"))
}

/// Parses `<20 digits>.<ext>[.<state>]` into the base offset.
pub fn parse_base_offset(file_name: &str) -> Option<u64> {
    let digits = file_name.get(..20)?;
    (digits.bytes().all(|b| b.is_ascii_digit()) && file_name[20..].starts_with('.'))
        .then(|| digits.parse().ok())?
}

/// A file to fsync, with its path for the error message.
pub struct SyncHandle {
    pub path: PathBuf,
    /// `None` for a sealed index, which holds no descriptor: it is opened by its path. One
    /// gone by then was deleted or replaced meanwhile, and has nothing left to sync.
    pub file: Option<Arc<File>>,
    /// For a segment's `.log` file: its data size when the sync was asked for.
    pub data_bytes: Option<u64>,
}

/// fdatasyncs every handle (outside any lock; see [`Segment::sync_handles`]).
pub fn sync_all(handles: &[SyncHandle]) -> Result<()> {
    for handle in handles {
        let io = |e| LogError::io(&handle.path, e);
        match &handle.file {
            Some(file) => file.sync_data().map_err(io)?,
            None => match File::open(&handle.path) {
                Ok(file) => file.sync_data().map_err(io)?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io(e)),
            },
        }
        if let Some(bytes) = handle.data_bytes {
            super::fault::durable_prefix(&handle.path, bytes);
        }
    }
    Ok(())
}

/// A batch located in a segment: its decoded header and where it starts.
#[derive(Debug, Clone, Copy)]
pub struct BatchLocation {
    pub header: BatchHeader,
    pub position: u64,
    pub size: u64,
}

/// Bytes written in place of the same number of bytes of an appended buffer, `at` bytes from
/// its start: the leader's stamps (offsets and epoch, or a rewritten batch) over a producer's
/// batches, which stay as they arrived.
#[derive(Debug, Clone, Copy)]
pub struct Overlay<'a> {
    pub at: usize,
    pub bytes: &'a [u8],
}

/// What the log tells a segment about a batch it appends.
#[derive(Debug, Clone, Copy)]
pub struct AppendedBatch {
    pub base_offset: u64,
    pub last_offset: u64,
    pub max_timestamp: i64,
    /// Byte position of the batch within the appended buffer.
    pub relative_position: u64,
    pub size: u64,
}

#[derive(Debug)]
pub struct Segment {
    pub base_offset: u64,
    dir: PathBuf,
    /// Appended to every file name: empty for a live segment, `.cleaned` / `.swap` while the
    /// cleaner builds a replacement.
    suffix: String,
    /// The `.log`, through the bounded set of open files (`handles`).
    file: SegmentFile,
    size: u64,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    txn_index: TxnIndex,
    bytes_since_index_entry: u64,
    max_timestamp: i64,
    next_offset: u64,
    /// Base offset of the last batch, for the final time index entry written at roll.
    last_batch_offset: Option<u64>,
    created_ms: i64,
    index_capacity_bytes: usize,
    /// The `.log` file's length: `size` plus zeros written ahead when preallocating.
    allocated: u64,
    /// Appended data before this position has had its writeback started (`writeback`).
    written_back: u64,
    /// Zeros are written this far ahead of appends (0: never). Overwriting blocks that already
    /// exist lets an fdatasync skip the journal commit that a growing file needs, which halves
    /// its latency: this serves `flush.policy=always`.
    preallocate_bytes: u64,
}

impl Segment {
    /// Creates an empty active segment (truncating leftovers of the same name).
    pub fn create(
        dir: &Path,
        base_offset: u64,
        config: &LogConfig,
        now_ms: i64,
    ) -> Result<Segment> {
        Self::create_with_suffix(dir, base_offset, config, now_ms, "")
    }

    /// Creates an empty segment whose files carry `suffix` (the cleaner's `.cleaned`).
    pub fn create_with_suffix(
        dir: &Path,
        base_offset: u64,
        config: &LogConfig,
        now_ms: i64,
        suffix: &str,
    ) -> Result<Segment> {
        let path = segment_path(dir, base_offset, &format!("{LOG_SUFFIX}{suffix}"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| LogError::io(&path, e))?;
        super::fault::durable_prefix(&path, 0);
        for kind in [INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX] {
            let index = segment_path(dir, base_offset, &format!("{kind}{suffix}"));
            if let Err(e) = fs::remove_file(&index) {
                if e.kind() != io::ErrorKind::NotFound {
                    return Err(LogError::io(index, e));
                }
            }
        }
        Self::with_file(dir, base_offset, suffix, file, 0, config, true, now_ms)
    }

    /// Opens an existing segment. Its indexes are taken as they are; the caller either recovers
    /// the segment or calls [`Segment::load_without_recovery`].
    pub fn open(
        dir: &Path,
        base_offset: u64,
        config: &LogConfig,
        active: bool,
        now_ms: i64,
    ) -> Result<Segment> {
        let path = segment_path(dir, base_offset, LOG_SUFFIX);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| LogError::io(&path, e))?;
        let size = file.metadata().map_err(|e| LogError::io(&path, e))?.len();
        Self::with_file(dir, base_offset, "", file, size, config, active, now_ms)
    }

    #[allow(clippy::too_many_arguments)]
    fn with_file(
        dir: &Path,
        base_offset: u64,
        suffix: &str,
        file: File,
        size: u64,
        config: &LogConfig,
        active: bool,
        now_ms: i64,
    ) -> Result<Segment> {
        // `segment.ms` counts from the first batch's timestamp, as Kafka's roll does, so that a
        // restart does not restart the clock.
        let mut created_ms = now_ms;
        if size >= BATCH_HEADER_BYTES as u64 {
            let mut header = [0u8; BATCH_HEADER_BYTES];
            if file.read_exact_at(&mut header, 0).is_ok() {
                if let Some(first) = BatchHeader::parse(&header).filter(|h| h.max_timestamp > 0) {
                    created_ms = first.max_timestamp.min(now_ms);
                }
            }
        }
        let capacity = config.segment_index_bytes;
        let index_path = segment_path(dir, base_offset, &format!("{INDEX_SUFFIX}{suffix}"));
        let time_index_path =
            segment_path(dir, base_offset, &format!("{TIME_INDEX_SUFFIX}{suffix}"));
        let offset_index = OffsetIndex::open(&index_path, base_offset, capacity, active)?;
        let time_index = TimeIndex::open(&time_index_path, base_offset, capacity, active)?;
        let txn_index = TxnIndex::open(segment_path(
            dir,
            base_offset,
            &format!("{TXN_INDEX_SUFFIX}{suffix}"),
        ))?;
        Ok(Segment {
            base_offset,
            dir: dir.to_path_buf(),
            suffix: suffix.to_owned(),
            file: SegmentFile::new(
                &segment_path(dir, base_offset, &format!("{LOG_SUFFIX}{suffix}")),
                file,
            ),
            size,
            offset_index,
            time_index,
            txn_index,
            bytes_since_index_entry: 0,
            max_timestamp: -1,
            next_offset: base_offset,
            last_batch_offset: None,
            created_ms,
            index_capacity_bytes: capacity,
            allocated: size,
            written_back: size,
            preallocate_bytes: if config.flush_policy == super::config::FlushPolicy::Always {
                PREALLOCATE_BYTES
            } else {
                0
            },
        })
    }

    pub fn size(&self) -> u64 {
        self.size
    }
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }
    /// The offset after this segment's last batch (its base offset when empty).
    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }
    /// The largest record timestamp in the segment, -1 when it has none.
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }
    pub fn created_ms(&self) -> i64 {
        self.created_ms
    }
    pub fn path(&self) -> PathBuf {
        segment_path(
            &self.dir,
            self.base_offset,
            &format!("{LOG_SUFFIX}{}", self.suffix),
        )
    }

    /// Renames the segment's three files to carry `suffix` instead of the current one. The
    /// mappings and handles stay valid: they belong to the inodes, not the names.
    /// The `.log` goes last: while it still carries `.swap`, `Log::open` completes the swap
    /// and rebuilds the indexes, whatever names they had reached.
    pub fn rename_suffix(&mut self, suffix: &str) -> Result<()> {
        for kind in [
            INDEX_SUFFIX,
            TIME_INDEX_SUFFIX,
            TXN_INDEX_SUFFIX,
            LOG_SUFFIX,
        ] {
            let from = segment_path(
                &self.dir,
                self.base_offset,
                &format!("{kind}{}", self.suffix),
            );
            let to = segment_path(&self.dir, self.base_offset, &format!("{kind}{suffix}"));
            if kind == TXN_INDEX_SUFFIX && self.txn_index.is_empty() {
                // Written only once it has an entry.
                self.txn_index.set_path(to);
                continue;
            }
            fs::rename(&from, &to).map_err(|e| LogError::io(from, e))?;
            match kind {
                INDEX_SUFFIX => self.offset_index.set_path(to),
                TIME_INDEX_SUFFIX => self.time_index.set_path(to),
                TXN_INDEX_SUFFIX => self.txn_index.set_path(to),
                _ => self.file.set_path(to),
            }
        }
        self.suffix = suffix.to_owned();
        Ok(())
    }

    /// The `.log`'s descriptor, opened again if the handle set closed it.
    fn file(&self) -> Result<Arc<File>> {
        self.file.get().map_err(|e| LogError::io(self.path(), e))
    }

    pub fn snapshot(&self) -> Result<SegmentSnapshot> {
        Ok(SegmentSnapshot {
            base_offset: self.base_offset,
            next_offset: self.next_offset,
            size: self.size,
            max_timestamp: self.max_timestamp,
            file: self.file()?,
        })
    }

    /// Whether an append of `bytes` bytes ending at `last_offset` must go to a new segment.
    pub fn should_roll(
        &self,
        bytes: u64,
        last_offset: u64,
        config: &LogConfig,
        now_ms: i64,
    ) -> bool {
        if self.is_empty() {
            // Only offsets too far above an empty segment's base (a follower's gap) need a
            // new segment; any one batch fits an empty segment otherwise.
            return last_offset.saturating_sub(self.base_offset) > u64::from(u32::MAX);
        }
        !self.fits(bytes, last_offset, config)
            || now_ms.saturating_sub(self.created_ms) >= config.segment_ms
            || self.offset_index.is_full()
            // Keep one slot so the final entry written at roll always fits.
            || self.time_index.entries() + 2 > self.time_index_capacity()
    }

    /// Whether `bytes` more, ending at `last_offset`, fit this segment's size and the 32-bit
    /// relative offsets and positions of its indexes.
    pub fn fits(&self, bytes: u64, last_offset: u64, config: &LogConfig) -> bool {
        let size = self.size + bytes;
        size <= config.segment_bytes
            && size <= u64::from(u32::MAX)
            && last_offset.saturating_sub(self.base_offset) <= u64::from(u32::MAX)
    }

    fn time_index_capacity(&self) -> usize {
        self.index_capacity_bytes / super::index::TIME_ENTRY_BYTES
    }

    /// Writes already validated and offset-assigned batches at the end of the segment.
    /// On a failed write the file is cut back, so no partial append stays behind.
    pub fn append(
        &mut self,
        bytes: &[u8],
        batches: &[AppendedBatch],
        index_interval_bytes: u64,
    ) -> Result<()> {
        self.append_overlaid(bytes, &[], batches, index_interval_bytes)
    }

    /// [`Segment::append`] of `bytes` with `overlays` (in order, not overlapping, within
    /// `bytes`) written in place of the bytes they cover, in one vectored write: the buffer
    /// itself is neither changed nor copied.
    pub fn append_overlaid(
        &mut self,
        bytes: &[u8],
        overlays: &[Overlay<'_>],
        batches: &[AppendedBatch],
        index_interval_bytes: u64,
    ) -> Result<()> {
        debug_assert!(!batches.is_empty());
        debug_assert!(batches[0].base_offset >= self.next_offset);
        let position = self.size;
        let file = self.file()?;
        let written = self
            .preallocate(&file, position + bytes.len() as u64)
            .and_then(|()| write_overlaid_at(&file, bytes, overlays, position));
        if let Err(e) = written {
            self.allocated = position;
            if let Err(cut) = file.set_len(position) {
                return Err(LogError::io(
                    self.path(),
                    io::Error::other(format!("{e}; truncating back failed: {cut}")),
                ));
            }
            return Err(LogError::io(self.path(), e));
        }
        for batch in batches {
            self.index_batch(
                batch.base_offset,
                batch.max_timestamp,
                position + batch.relative_position,
                batch.size,
                index_interval_bytes,
            );
            self.next_offset = batch.last_offset + 1;
            self.last_batch_offset = Some(batch.base_offset);
        }
        self.size = position + bytes.len() as u64;
        // Behind a truncation, writeback resumes from the new end. flush.policy=always (which
        // preallocates) syncs every append itself.
        self.written_back = self.written_back.min(position);
        let pending = self.size - self.written_back;
        if self.preallocate_bytes == 0 && pending >= super::writeback::WRITEBACK_BYTES {
            super::writeback::start(file, self.written_back, pending);
            self.written_back = self.size;
        }
        Ok(())
    }

    /// Writes zeros from the allocated end to well past `end`, when preallocating.
    fn preallocate(&mut self, file: &File, end: u64) -> io::Result<()> {
        if self.preallocate_bytes == 0 || end <= self.allocated {
            return Ok(());
        }
        let target = end.max(self.allocated + self.preallocate_bytes);
        while self.allocated < target {
            let chunk = (target - self.allocated).min(ZEROS.len() as u64) as usize;
            file.write_all_at(&ZEROS[..chunk], self.allocated)?;
            self.allocated += chunk as u64;
        }
        Ok(())
    }

    fn index_batch(
        &mut self,
        base_offset: u64,
        max_timestamp: i64,
        position: u64,
        size: u64,
        interval: u64,
    ) {
        if self.bytes_since_index_entry > interval && !self.offset_index.is_full() {
            self.offset_index.append(base_offset, position as u32);
            self.time_index
                .maybe_append(self.max_timestamp.max(max_timestamp), base_offset);
            self.bytes_since_index_entry = 0;
        }
        self.bytes_since_index_entry += size;
        self.max_timestamp = self.max_timestamp.max(max_timestamp);
    }

    /// The segment stops being active: record the final max timestamp and trim the indexes
    /// to their entries, so that their length alone describes them on the next start.
    pub fn seal(&mut self) -> Result<()> {
        if let Some(last_batch_offset) = self.last_batch_offset {
            self.time_index
                .maybe_append(self.max_timestamp, last_batch_offset);
        }
        self.offset_index.trim()?;
        self.time_index.trim()?;
        self.trim_preallocation()
    }

    /// Cuts preallocated zeros off, so a sealed segment's length is its data.
    fn trim_preallocation(&mut self) -> Result<()> {
        if self.allocated > self.size {
            self.file()?
                .set_len(self.size)
                .map_err(|e| LogError::io(self.path(), e))?;
            self.allocated = self.size;
        }
        Ok(())
    }

    /// Makes a sealed segment active again (after truncation removed the segments after it).
    pub fn unseal(&mut self) -> Result<()> {
        self.offset_index.make_active(self.index_capacity_bytes)?;
        self.time_index.make_active(self.index_capacity_bytes)
    }

    /// The files to fsync to make this segment durable, so that the sync can run outside the
    /// log's lock: the `.log`, and with `indexes` the index files too (needed once the recovery
    /// point passes the segment, since it will not be rescanned).
    pub fn sync_handles(&self, indexes: bool, out: &mut Vec<SyncHandle>) {
        out.push(SyncHandle {
            path: self.path(),
            file: self.file.get().ok(),
            data_bytes: Some(self.size),
        });
        if indexes {
            let txn_index = (!self.txn_index.is_empty()).then(|| self.txn_index.path());
            for path in [self.offset_index.path(), self.time_index.path()]
                .into_iter()
                .chain(txn_index)
            {
                out.push(SyncHandle {
                    path: path.to_path_buf(),
                    file: None,
                    data_bytes: None,
                });
            }
        }
    }

    /// Reads the header of the batch at `position`; `None` at (or too close to) the end.
    pub fn header_at(&self, position: u64) -> Result<Option<BatchLocation>> {
        if position + BATCH_HEADER_BYTES as u64 > self.size {
            return Ok(None);
        }
        let mut bytes = [0u8; BATCH_HEADER_BYTES];
        self.file()?
            .read_exact_at(&mut bytes, position)
            .map_err(|e| LogError::io(self.path(), e))?;
        let header = BatchHeader::parse(&bytes).expect("a whole header was read");
        let corrupt = || LogError::CorruptFile {
            path: self.path(),
            reason: format!(
                "batch at byte {position} has length {}",
                header.batch_length
            ),
        };
        let size = header.total_size().ok_or_else(corrupt)? as u64;
        if position + size > self.size {
            return Err(corrupt());
        }
        Ok(Some(BatchLocation {
            header,
            position,
            size,
        }))
    }

    /// The first batch whose last offset is `>= offset`, scanning from the index entry below it.
    pub fn translate_offset(&self, offset: u64) -> Result<Option<BatchLocation>> {
        let (_, indexed) = self.offset_index.lookup(offset);
        let mut position = u64::from(indexed);
        while let Some(location) = self.header_at(position)? {
            if location.header.last_offset() >= offset as i64 {
                return Ok(Some(location));
            }
            position = location.position + location.size;
        }
        Ok(None)
    }

    /// A batch boundary at or before `limit`, at least `floor` (a boundary the caller knows),
    /// from the offset index alone: reading headers ahead of the data would defeat the
    /// kernel's readahead on cold reads, and costs a syscall per batch on hot ones.
    fn batch_boundary_before(&self, limit: u64, floor: u64) -> u64 {
        let (_, indexed) = self.offset_index.lookup_position(limit);
        u64::from(indexed).max(floor)
    }

    /// Whole batches from the one holding `offset`, up to `max_bytes`, none starting at or
    /// after `max_offset`. With `min_one_message` the first batch is returned whatever its size
    /// (Kafka's rule, so a consumer always progresses); without it a first batch larger than
    /// `max_bytes` gives no slice (Kafka's `MemoryRecords.EMPTY`), only the batch's location:
    /// the segment was found, so no later one may answer in its place. Below the limit the
    /// slice ends at an indexed batch boundary, so it can fall short of `max_bytes` by up to
    /// `index.interval.bytes` plus a batch; a slice that reaches `max_offset` ends exactly there.
    /// `None` when this segment holds nothing from `offset` below `max_offset`.
    pub fn read(
        &self,
        offset: u64,
        max_bytes: u64,
        max_offset: u64,
        min_one_message: bool,
    ) -> Result<Option<(Option<FileSlice>, BatchLocation)>> {
        let Some(first) = self.translate_offset(offset)? else {
            return Ok(None);
        };
        if first.header.base_offset as u64 >= max_offset {
            return Ok(None);
        }
        if !min_one_message && first.size > max_bytes {
            return Ok(Some((None, first)));
        }
        let max_position = if max_offset < self.next_offset {
            self.translate_offset(max_offset)?
                .map_or(self.size, |l| l.position)
        } else {
            self.size
        };
        let first_end = first.position + first.size;
        let end = if first.position.saturating_add(max_bytes) >= max_position {
            max_position.max(first_end)
        } else {
            self.batch_boundary_before(first.position + max_bytes, first_end)
        };
        debug_assert!(
            end - first.position <= max_bytes.max(first.size),
            "a read exceeds its limit by more than its first batch"
        );
        let slice = FileSlice::new(self.file()?, first.position, end - first.position);
        Ok(Some((Some(slice), first)))
    }

    /// The first record with timestamp `>= timestamp`, as (offset, timestamp). For compressed
    /// batches the batch's first offset and max timestamp stand in (records are not decoded here).
    pub fn find_offset_by_timestamp(
        &self,
        timestamp: i64,
        min_offset: u64,
    ) -> Result<Option<(u64, i64)>> {
        if self.max_timestamp < timestamp {
            return Ok(None);
        }
        let start = self
            .time_index
            .lookup_before(timestamp)
            .map_or(self.base_offset, |(_, o)| o)
            .max(min_offset);
        let (_, indexed) = self.offset_index.lookup(start);
        let mut position = u64::from(indexed);
        while let Some(location) = self.header_at(position)? {
            position = location.position + location.size;
            let header = location.header;
            if header.max_timestamp < timestamp || (header.last_offset() as u64) < min_offset {
                continue;
            }
            if header.is_compressed() || header.is_log_append_time() {
                return Ok(Some((
                    (header.base_offset as u64).max(min_offset),
                    header.max_timestamp,
                )));
            }
            let batch = self.read_batch(&location)?;
            for record in RecordIter::new(&header, &batch) {
                let record = record.map_err(|reason| LogError::CorruptFile {
                    path: self.path(),
                    reason: reason.into(),
                })?;
                let offset = record.offset(&header) as u64;
                if offset >= min_offset && record.timestamp(&header) >= timestamp {
                    return Ok(Some((offset, record.timestamp(&header))));
                }
            }
        }
        Ok(None)
    }

    pub fn read_batch(&self, location: &BatchLocation) -> Result<Vec<u8>> {
        let mut bytes = vec![0u8; location.size as usize];
        self.file()?
            .read_exact_at(&mut bytes, location.position)
            .map_err(|e| LogError::io(self.path(), e))?;
        Ok(bytes)
    }

    /// Rebuilds the segment's state from its `.log`: every batch is checked (header, offsets
    /// increasing and within the segment, CRC-32C) and indexed; at the first that fails, the
    /// file is truncated. Leader epochs seen are recorded. Returns the bytes cut off.
    pub fn recover(
        &mut self,
        index_interval_bytes: u64,
        epochs: &mut LeaderEpochCache,
    ) -> Result<u64> {
        // Full-size indexes while rebuilding; the log seals the segment again if it is not the
        // active one.
        self.unseal()?;
        self.offset_index.reset();
        self.time_index.reset();
        self.bytes_since_index_entry = 0;
        self.max_timestamp = -1;
        self.next_offset = self.base_offset;
        self.last_batch_offset = None;
        let file = self.file()?;
        let file_size = file
            .metadata()
            .map_err(|e| LogError::io(self.path(), e))?
            .len();
        let mut reader = ScanReader::new(&file, file_size);
        let mut position = 0u64;
        let mut valid = Vec::new();
        while let Some(batch) = reader
            .next_valid_batch(position, self.base_offset, self.next_offset)
            .map_err(|e| LogError::io(self.path(), e))?
        {
            valid.push(batch);
            position += batch.size;
            self.next_offset = batch.last_offset + 1;
            self.last_batch_offset = Some(batch.base_offset);
            if valid.len() >= 1024 {
                self.index_recovered(&mut valid, index_interval_bytes, epochs)?;
            }
        }
        self.index_recovered(&mut valid, index_interval_bytes, epochs)?;
        let truncated = file_size - position;
        if truncated > 0 {
            file.set_len(position)
                .map_err(|e| LogError::io(self.path(), e))?;
            super::fault::durable_prefix(&self.path(), position);
        }
        self.size = position;
        self.allocated = position;
        // Entries past the recovered data go (`txn_index.rs` says why the rest is whole).
        self.txn_index.truncate_to(self.next_offset)?;
        Ok(truncated)
    }

    /// Records an aborted transaction whose marker is in this segment (`None` when the index
    /// already has it); the returned write makes it durable.
    pub fn add_aborted(&mut self, entry: AbortedTxn) -> Option<PendingWrite> {
        self.txn_index.push(entry)
    }

    /// This segment's aborted transactions overlapping `[fetch_offset, upper_bound)`.
    pub fn collect_aborted(
        &self,
        fetch_offset: u64,
        upper_bound: u64,
        out: &mut Vec<AbortedTxn>,
    ) -> Collected {
        self.txn_index.collect(fetch_offset, upper_bound, out)
    }

    fn index_recovered(
        &mut self,
        batches: &mut Vec<RecoveredBatch>,
        interval: u64,
        epochs: &mut LeaderEpochCache,
    ) -> Result<()> {
        for batch in batches.drain(..) {
            if self.offset_index.is_full() {
                // A full index only means coarser lookups; the data is fine.
                self.bytes_since_index_entry = 0;
            }
            self.index_batch(
                batch.base_offset,
                batch.max_timestamp,
                batch.position,
                batch.size,
                interval,
            );
            epochs.assign_if_newer(batch.leader_epoch, batch.base_offset)?;
        }
        Ok(())
    }

    /// Loads what recovery would compute, for a segment below the recovery point: checks the
    /// indexes (recovering if they are damaged), takes the max timestamp from the time index
    /// and finds the next offset by scanning from the last index entry.
    /// Returns the bytes cut off when it had to fall back to recovery.
    pub fn load_without_recovery(
        &mut self,
        index_interval_bytes: u64,
        epochs: &mut LeaderEpochCache,
    ) -> Result<u64> {
        if let Err(reason) = self
            .offset_index
            .sanity_check(self.size)
            .and(self.time_index.sanity_check())
        {
            tracing::warn!(segment = %self.path().display(), %reason, "rebuilding damaged index");
            return self.recover(index_interval_bytes, epochs);
        }
        self.max_timestamp = self.time_index.last().map_or(-1, |(ts, _)| ts);
        let (indexed_offset, indexed) = self.offset_index.lookup(u64::MAX);
        let mut position = u64::from(indexed);
        self.next_offset = self.base_offset;
        // The tail is trusted for its CRCs (it was fsynced) but its offsets, which the CRC does
        // not cover, are checked as recovery would.
        let scanned = loop {
            match self.header_at(position) {
                Ok(Some(location)) => {
                    let header = location.header;
                    let plausible = header.base_offset >= 0
                        && header.last_offset_delta >= 0
                        && header.base_offset as u64 >= self.next_offset.max(indexed_offset)
                        && (header.last_offset() as u64).saturating_sub(self.base_offset)
                            <= u64::from(u32::MAX);
                    if !plausible {
                        break false;
                    }
                    self.next_offset = location.header.last_offset() as u64 + 1;
                    self.last_batch_offset = Some(location.header.base_offset as u64);
                    self.max_timestamp = self.max_timestamp.max(location.header.max_timestamp);
                    self.bytes_since_index_entry += location.size;
                    position = location.position + location.size;
                }
                Ok(None) => break position == self.size,
                Err(_) => break false,
            }
        };
        if !scanned {
            // The tail is not whole, ordered batches: the file is not what was sealed.
            tracing::warn!(segment = %self.path().display(), "segment tail is not whole batches; recovering it");
            return self.recover(index_interval_bytes, epochs);
        }
        Ok(0)
    }

    /// Removes batches from the one holding `offset` on. Returns the base offset of the first
    /// batch removed, if any; the segment's next offset is then the end of its last kept batch.
    pub fn truncate_to(
        &mut self,
        offset: u64,
        index_interval_bytes: u64,
        epochs: &mut LeaderEpochCache,
    ) -> Result<Option<u64>> {
        let Some(location) = self.translate_offset(offset)? else {
            return Ok(None);
        };
        self.file()?
            .set_len(location.position)
            .map_err(|e| LogError::io(self.path(), e))?;
        self.size = location.position;
        self.allocated = location.position;
        super::fault::durable_prefix(&self.path(), location.position);
        // Indexes, max timestamp and next offset are cheapest to get right by rebuilding; a
        // truncation is rare (leader change) and touches only the tail segment in practice.
        // Epochs of the kept batches are all known, so the cache is not changed here.
        self.recover(index_interval_bytes, epochs)?;
        Ok(Some(location.header.base_offset as u64))
    }

    /// Renames the segment's files to `<name>.deleted`, returning the new paths; the files are
    /// removed later (`file.delete.delay.ms`) so readers holding slices finish undisturbed.
    pub fn rename_to_deleted(self) -> Result<Vec<PathBuf>> {
        let mut renamed = Vec::with_capacity(4);
        for kind in [
            LOG_SUFFIX,
            INDEX_SUFFIX,
            TIME_INDEX_SUFFIX,
            TXN_INDEX_SUFFIX,
        ] {
            let from = segment_path(
                &self.dir,
                self.base_offset,
                &format!("{kind}{}", self.suffix),
            );
            let to = segment_path(
                &self.dir,
                self.base_offset,
                &format!("{kind}{DELETED_SUFFIX}"),
            );
            match fs::rename(&from, &to) {
                Ok(()) => renamed.push(to),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(LogError::io(from, e)),
            }
        }
        Ok(renamed)
    }
}

/// A sealed segment's data as of one moment, readable without the log's lock (the cleaner's
/// view). The file handle keeps the data readable even if the segment is deleted meanwhile.
#[derive(Debug, Clone)]
pub struct SegmentSnapshot {
    pub base_offset: u64,
    pub next_offset: u64,
    pub size: u64,
    pub max_timestamp: i64,
    file: Arc<File>,
}

impl SegmentSnapshot {
    /// Each batch with its bytes, in order. A batch is read whole: its size was checked
    /// against the segment's when it was appended.
    pub fn batches(&self) -> impl Iterator<Item = io::Result<(BatchHeader, Vec<u8>)>> + '_ {
        self.batches_from(0)
    }

    /// Like [`SegmentSnapshot::batches`], from a batch boundary.
    pub fn batches_from(
        &self,
        mut position: u64,
    ) -> impl Iterator<Item = io::Result<(BatchHeader, Vec<u8>)>> + '_ {
        std::iter::from_fn(move || {
            if position + BATCH_HEADER_BYTES as u64 > self.size {
                return None;
            }
            let result = (|| {
                let mut header_bytes = [0u8; BATCH_HEADER_BYTES];
                self.file.read_exact_at(&mut header_bytes, position)?;
                let header = BatchHeader::parse(&header_bytes).expect("whole header read");
                let size = header
                    .total_size()
                    .filter(|size| position + *size as u64 <= self.size)
                    .ok_or_else(|| {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("bad batch length at byte {position}"),
                        )
                    })?;
                let mut bytes = vec![0u8; size];
                self.file.read_exact_at(&mut bytes, position)?;
                position += size as u64;
                Ok((header, bytes))
            })();
            if result.is_err() {
                position = u64::MAX / 2;
            }
            Some(result)
        })
    }
}

impl SegmentSnapshot {
    /// The first record with the largest timestamp at or after `min_offset`, scanning from
    /// `position` (a batch boundary at or before `min_offset`). Runs without the log's lock.
    pub fn max_timestamp_record(
        &self,
        position: u64,
        min_offset: u64,
    ) -> io::Result<Option<(u64, i64)>> {
        let mut best: Option<(u64, i64)> = None;
        let mut consider = |offset: u64, ts: i64| {
            if best.is_none_or(|(_, best_ts)| ts > best_ts) {
                best = Some((offset, ts));
            }
        };
        for item in self.batches_from(position) {
            let (header, batch) = item?;
            if (header.last_offset() as u64) < min_offset {
                continue;
            }
            if header.is_compressed() || header.is_log_append_time() {
                consider(
                    (header.base_offset as u64).max(min_offset),
                    header.max_timestamp,
                );
                continue;
            }
            for record in RecordIter::new(&header, &batch) {
                let record =
                    record.map_err(|reason| io::Error::new(io::ErrorKind::InvalidData, reason))?;
                let offset = record.offset(&header) as u64;
                if offset >= min_offset {
                    consider(offset, record.timestamp(&header));
                }
            }
        }
        Ok(best)
    }
}

#[derive(Debug, Clone, Copy)]
struct RecoveredBatch {
    base_offset: u64,
    last_offset: u64,
    max_timestamp: i64,
    leader_epoch: i32,
    position: u64,
    size: u64,
}

/// Sequential reader for recovery: positional reads into one bounded buffer, CRC computed
/// chunk by chunk, so a batch of any size is checked without allocating it.
struct ScanReader<'a> {
    file: &'a File,
    file_size: u64,
    buffer: Vec<u8>,
}

impl<'a> ScanReader<'a> {
    fn new(file: &'a File, file_size: u64) -> Self {
        ScanReader {
            file,
            file_size,
            buffer: vec![0; SCAN_BUFFER_BYTES],
        }
    }

    /// The batch at `position` if it is whole and valid, else `None` (the end of good data).
    fn next_valid_batch(
        &mut self,
        position: u64,
        segment_base: u64,
        next_offset: u64,
    ) -> io::Result<Option<RecoveredBatch>> {
        if position + BATCH_HEADER_BYTES as u64 > self.file_size {
            return Ok(None);
        }
        let mut header_bytes = [0u8; BATCH_HEADER_BYTES];
        self.file.read_exact_at(&mut header_bytes, position)?;
        let Some(header) = BatchHeader::parse(&header_bytes) else {
            return Ok(None);
        };
        let Some(size) = header.total_size().map(|s| s as u64) else {
            return Ok(None);
        };
        let offsets_ok = header.base_offset >= 0
            && header.base_offset as u64 >= next_offset.max(segment_base)
            && header.last_offset_delta >= 0
            && (header.last_offset() as u64) - segment_base <= u64::from(u32::MAX);
        if header.magic != MAGIC_V2 || position + size > self.file_size || !offsets_ok {
            return Ok(None);
        }
        let mut crc = crc32c::crc32c(&header_bytes[21..]);
        let mut at = position + BATCH_HEADER_BYTES as u64;
        let end = position + size;
        while at < end {
            let chunk = ((end - at) as usize).min(self.buffer.len());
            self.file.read_exact_at(&mut self.buffer[..chunk], at)?;
            crc = crc32c::crc32c_append(crc, &self.buffer[..chunk]);
            at += chunk as u64;
        }
        if crc != header.crc {
            return Ok(None);
        }
        Ok(Some(RecoveredBatch {
            base_offset: header.base_offset as u64,
            last_offset: header.last_offset() as u64,
            max_timestamp: header.max_timestamp,
            leader_epoch: header.partition_leader_epoch,
            position,
            size,
        }))
    }
}

/// The most buffers one `pwritev` takes (Linux's `IOV_MAX`).
const IOV_MAX: usize = 1024;

/// Writes `bytes` at `position` with `overlays` in place of the bytes they cover.
fn write_overlaid_at(
    file: &File,
    bytes: &[u8],
    overlays: &[Overlay<'_>],
    position: u64,
) -> io::Result<()> {
    if overlays.is_empty() {
        return file.write_all_at(bytes, position);
    }
    let mut slices = Vec::with_capacity(overlays.len() * 2 + 1);
    let mut cursor = 0;
    for overlay in overlays {
        let end = overlay.at + overlay.bytes.len();
        if overlay.at < cursor || end > bytes.len() {
            return Err(io::Error::other(format!(
                "overlay of {} bytes at {} outside the {}-byte buffer past {cursor}",
                overlay.bytes.len(),
                overlay.at,
                bytes.len()
            )));
        }
        slices.push(io::IoSlice::new(&bytes[cursor..overlay.at]));
        slices.push(io::IoSlice::new(overlay.bytes));
        cursor = end;
    }
    slices.push(io::IoSlice::new(&bytes[cursor..]));
    write_all_vectored_at(file, &mut slices, position)
}

/// `pwritev` until every slice is written (a positional `write_all` for several buffers).
fn write_all_vectored_at(
    file: &File,
    mut slices: &mut [io::IoSlice<'_>],
    mut position: u64,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    io::IoSlice::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        let count = slices.len().min(IOV_MAX);
        let offset = libc::off_t::try_from(position).map_err(io::Error::other)?;
        // SAFETY: `IoSlice` is ABI-compatible with `iovec` on Unix, and the `count` slices
        // it points at are borrowed for the call; the descriptor is open.
        let written = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                slices.as_ptr().cast::<libc::iovec>(),
                count as libc::c_int,
                offset,
            )
        };
        if written < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        position += written as u64;
        io::IoSlice::advance_slices(&mut slices, written as usize);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Overlays land where they say and nowhere else, over more buffers than one `pwritev`
    /// takes; out-of-order or out-of-range overlays are refused before anything is written.
    #[test]
    fn overlaid_writes_put_each_overlay_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("overlaid");
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let bytes: Vec<u8> = (0..12_000u32).map(|i| (i % 251) as u8).collect();
        let patches: Vec<[u8; 3]> = (0..900u32).map(|i| [0xff, i as u8, 0xee]).collect();
        let overlays: Vec<Overlay<'_>> = patches
            .iter()
            .enumerate()
            .map(|(i, patch)| Overlay {
                at: i * 13 + 1,
                bytes: patch,
            })
            .collect();
        write_overlaid_at(&file, &bytes, &overlays, 7).unwrap();
        let mut expected = bytes.clone();
        for overlay in &overlays {
            expected[overlay.at..overlay.at + overlay.bytes.len()].copy_from_slice(overlay.bytes);
        }
        let written = fs::read(&path).unwrap();
        assert_eq!(written.len(), 7 + bytes.len());
        assert!(written[..7].iter().all(|b| *b == 0));
        assert!(written[7..] == expected[..], "overlaid bytes differ");

        let crossing = [
            Overlay {
                at: 10,
                bytes: &patches[0],
            },
            Overlay {
                at: 11,
                bytes: &patches[1],
            },
        ];
        assert!(write_overlaid_at(&file, &bytes, &crossing, 0).is_err());
        let past_end = [Overlay {
            at: bytes.len() - 2,
            bytes: &patches[0],
        }];
        assert!(write_overlaid_at(&file, &bytes, &past_end, 0).is_err());
        assert!(
            fs::read(&path).unwrap()[7..] == expected[..],
            "a refused write wrote"
        );
    }
}
