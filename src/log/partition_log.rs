//! `Log`: the segmented log of one partition replica.
//!
//! State and locking:
//! - `state` (RwLock) holds the segments and the offsets. Appends, truncation, retention and
//!   segment swaps take it for writing; reads take it for reading only long enough to find a
//!   byte range, then copy outside it.
//! - `flushing` (a flag under a mutex, with a condvar) lets one thread at a time fsync. The
//!   flusher collects file handles under the read lock and syncs them after releasing it, so
//!   appends continue while the disk works. Appenders that arrive meanwhile wait on the condvar
//!   for the recovery point, not for the lock: when the fsync ends they all see at once whether
//!   it covered them, and one that is not covered starts the next (group commit).
//! - `recovery_point` is the offset below which everything is durable. Only the segments from
//!   the one containing it onwards are rescanned after a crash.
//!
//! Invariants, asserted where they change: `log_start_offset <= high_watermark <=
//! log_end_offset`; batches in segments have strictly increasing offsets; every byte below a
//! segment's `size` is a whole, CRC-valid batch.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::file_slice::FileSlice;

use super::batch::{self, BATCH_HEADER_BYTES, BatchHeader, BatchIter, RecordIter};
use super::config::{Clock, FlushPolicy, LogConfig, TimestampType};
use super::epoch::LeaderEpochCache;
use super::error::{LogError, Result};
use super::segment::{
    AppendedBatch, CLEANED_SUFFIX, DELETED_SUFFIX, LOG_SUFFIX, Overlay, SWAP_SUFFIX, Segment,
    parse_base_offset, segment_path, sync_all,
};
use super::topic_partition::TopicPartition;
use super::txn_index::AbortedTxn;
use crate::protocol::codec;

/// The longest a flusher waits for concurrent appenders to join its fsync.
const GROUP_COMMIT_WAIT_MAX: std::time::Duration = std::time::Duration::from_micros(200);

/// Logs this process took offline after a storage error, counted: the replica layer checks
/// its logs for ones to report to the controller only when this moves.
pub static LOGS_GONE_OFFLINE: AtomicU64 = AtomicU64::new(0);

/// Who is appending as leader: clients may not write control batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendOrigin {
    Client,
    /// The broker itself (group coordinator, transaction markers).
    Internal,
}

/// What an append did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendInfo {
    pub first_offset: u64,
    pub last_offset: u64,
    pub max_timestamp: i64,
    /// The timestamp the broker assigned, for `message.timestamp.type=LogAppendTime`.
    pub log_append_time_ms: Option<i64>,
    pub log_start_offset: u64,
    pub record_count: u64,
    pub bytes: u64,
}

/// What a read found.
#[derive(Debug, Clone)]
pub struct ReadInfo {
    /// Whole batches, the first holding (or following) the requested offset. `None` when there
    /// is nothing to return yet.
    pub slice: Option<FileSlice>,
    /// Base offset of the first batch in `slice` (can be below the requested offset).
    pub first_batch_offset: Option<u64>,
    pub log_start_offset: u64,
    pub log_end_offset: u64,
    pub high_watermark: u64,
    /// No record the read returned is at or past this offset (the bound, or the next
    /// segment's base): a read_committed fetch's upper bound for aborted transactions.
    pub upper_bound: u64,
}

/// What the log dir's checkpoints say about this log when it is opened.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadState {
    pub recovery_point: u64,
    pub log_start_offset: Option<u64>,
    pub high_watermark: u64,
    /// The previous process closed the log cleanly: nothing needs rescanning.
    pub clean_shutdown: bool,
}

/// Figures from opening a log, for the operator.
#[derive(Debug, Clone, Default)]
pub struct LoadStats {
    pub segments: usize,
    pub segments_recovered: usize,
    pub bytes_truncated: u64,
    pub swaps_completed: usize,
}

#[derive(Debug)]
pub(super) struct LogState {
    pub(super) segments: BTreeMap<u64, Segment>,
    pub(super) log_end_offset: u64,
    pub(super) log_start_offset: u64,
    pub(super) high_watermark: u64,
    pub(super) epochs: LeaderEpochCache,
    unflushed_messages: u64,
    pub(super) last_flush_ms: i64,
}

impl LogState {
    pub(super) fn active(&self) -> &Segment {
        self.segments
            .values()
            .next_back()
            .expect("a log always has an active segment")
    }
    fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .values_mut()
            .next_back()
            .expect("a log always has an active segment")
    }
    fn check_invariants(&self) {
        debug_assert!(
            self.log_start_offset <= self.log_end_offset,
            "log start beyond log end"
        );
        debug_assert!(
            self.high_watermark <= self.log_end_offset,
            "high watermark beyond log end"
        );
        debug_assert_eq!(
            self.active().next_offset().max(self.active().base_offset),
            self.log_end_offset
        );
    }
}

#[derive(Debug)]
pub struct Log {
    dir: PathBuf,
    topic_partition: TopicPartition,
    clock: Arc<dyn Clock>,
    config: RwLock<Arc<LogConfig>>,
    state: RwLock<LogState>,
    flushing: Mutex<bool>,
    flushed: Condvar,
    recovery_point: AtomicU64,
    offline: AtomicBool,
    /// Files renamed to `.deleted`, waiting for the log manager to remove them.
    pending_deletes: Mutex<Vec<PathBuf>>,
    /// The earliest delete horizon of a tombstone the cleaner kept (`i64::MAX`: none), so
    /// the cleaner comes back for it even when the log is not dirty.
    delete_horizon_due_ms: AtomicI64,
    /// fsync rounds done by `flush_to` (one round syncs every file with unflushed data).
    flush_count: AtomicU64,
    /// Base offsets of segments sealed since the last fsync.
    sealed_unsynced: Mutex<Vec<u64>>,
    /// Bumped by truncation and deletion: the cleaner abandons a pass that started before.
    generation: AtomicU64,
    /// The first segment whose aborted-transaction index is lost (a cleaner swap completed at
    /// open): producer state is replayed from before it, which rebuilds the index.
    reindex_from: Option<u64>,
    /// Where the first undecided transaction starts (u64::MAX: none), as the replica layer
    /// keeps it: the cleaner compacts only what is decided (Kafka bounds it by the LSO).
    first_unstable_offset: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Log {
    /// Opens the log in `dir` (creating it if missing), completing interrupted segment swaps
    /// and recovering the segments at and after the recovery point.
    pub fn open(
        dir: &Path,
        topic_partition: TopicPartition,
        config: LogConfig,
        load: LoadState,
        clock: Arc<dyn Clock>,
    ) -> Result<(Log, LoadStats)> {
        fs::create_dir_all(dir).map_err(|e| LogError::io(dir, e))?;
        let now = clock.now_ms();
        let mut stats = LoadStats::default();
        let mut force_recovery = std::collections::BTreeSet::new();
        for base in complete_interrupted_swaps(dir)? {
            force_recovery.insert(base);
            stats.swaps_completed += 1;
        }
        let bases = list_segment_bases(dir)?;
        let mut epochs = LeaderEpochCache::open(dir)?;
        let mut segments = BTreeMap::new();
        let last_base = bases.last().copied();
        for &base in &bases {
            let segment = Segment::open(dir, base, &config, Some(base) == last_base, now)?;
            segments.insert(base, segment);
        }
        if segments.is_empty() {
            let base = load.log_start_offset.unwrap_or(0);
            segments.insert(base, Segment::create(dir, base, &config, now)?);
        }

        let recover_from = if load.clean_shutdown {
            u64::MAX
        } else {
            segments
                .range(..=load.recovery_point)
                .next_back()
                .map_or(0, |(base, _)| *base)
        };
        let mut previous_next_offset = 0u64;
        let mut cut_from: Option<u64> = None;
        let mut recovered = Vec::new();
        for (&base, segment) in segments.iter_mut() {
            if base < previous_next_offset {
                // Not something a crash produces: refuse the log rather than guess which data
                // to drop (the operator sees the error and the files stay as they are).
                return Err(LogError::CorruptFile {
                    path: segment.path(),
                    reason: format!(
                        "segment starts at offset {base}, before the previous one ends ({previous_next_offset})"
                    ),
                });
            }
            let truncated = if base >= recover_from || force_recovery.contains(&base) {
                stats.segments_recovered += 1;
                recovered.push(base);
                segment.recover(config.index_interval_bytes, &mut epochs)?
            } else {
                segment.load_without_recovery(config.index_interval_bytes, &mut epochs)?
            };
            if truncated > 0 {
                tracing::warn!(%topic_partition, segment = base, bytes = truncated, "truncated invalid or torn data at the end of a segment");
                stats.bytes_truncated += truncated;
                if !recovered.contains(&base) {
                    recovered.push(base);
                }
                cut_from = Some(base + 1);
                break;
            }
            previous_next_offset = segment.next_offset();
        }
        if let Some(cut) = cut_from {
            for base in segments.range(cut..).map(|(b, _)| *b).collect::<Vec<_>>() {
                let segment = segments.remove(&base).expect("listed above");
                stats.bytes_truncated += segment.size();
                for path in segment.rename_to_deleted()? {
                    fs::remove_file(&path).map_err(|e| LogError::io(&path, e))?;
                }
            }
        }
        let last_base = *segments.keys().next_back().expect("at least one segment");
        for (&base, segment) in segments.iter_mut() {
            if base == last_base {
                segment.unseal()?;
            } else {
                segment.seal()?;
            }
        }

        let active = segments.values().next_back().expect("at least one segment");
        let log_end_offset = active.next_offset().max(active.base_offset);
        let first_base = *segments.keys().next().expect("at least one segment");
        let log_start_offset = load
            .log_start_offset
            .unwrap_or(first_base)
            .max(first_base)
            .min(log_end_offset);
        epochs.truncate_from_end(log_end_offset)?;
        epochs.truncate_from_start(log_start_offset)?;
        // Recovered bytes may live only in the page cache (the process died, not the
        // machine): they are not claimed as durable, so the recovery point stays where the
        // checkpoint had it and the next flush syncs them. (Syncing here would make restart
        // time depend on how much dirty data the dead process left.)
        let recovery_point = if recovered.is_empty() {
            log_end_offset
        } else {
            load.recovery_point.min(log_end_offset)
        };
        stats.segments = segments.len();
        let state = LogState {
            segments,
            log_end_offset,
            log_start_offset,
            high_watermark: load.high_watermark.clamp(log_start_offset, log_end_offset),
            epochs,
            unflushed_messages: 0,
            last_flush_ms: now,
        };
        state.check_invariants();
        tracing::info!(
            %topic_partition,
            log_start_offset,
            log_end_offset,
            segments = stats.segments,
            recovered = stats.segments_recovered,
            truncated_bytes = stats.bytes_truncated,
            "log loaded"
        );
        let log = Log {
            dir: dir.to_path_buf(),
            topic_partition,
            clock,
            config: RwLock::new(Arc::new(config)),
            state: RwLock::new(state),
            flushing: Mutex::new(false),
            flushed: Condvar::new(),
            recovery_point: AtomicU64::new(recovery_point),
            offline: AtomicBool::new(false),
            pending_deletes: Mutex::new(Vec::new()),
            delete_horizon_due_ms: AtomicI64::new(i64::MAX),
            flush_count: AtomicU64::new(0),
            sealed_unsynced: Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
            reindex_from: force_recovery.iter().min().copied(),
            first_unstable_offset: AtomicU64::new(u64::MAX),
        };
        Ok((log, stats))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn topic_partition(&self) -> &TopicPartition {
        &self.topic_partition
    }
    pub fn config(&self) -> Arc<LogConfig> {
        Arc::clone(&self.config.read().unwrap_or_else(|p| p.into_inner()))
    }
    pub fn update_config(&self, config: LogConfig) {
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(config);
    }
    pub(super) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub(super) fn read_state(&self) -> RwLockReadGuard<'_, LogState> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }
    pub(super) fn write_state(&self) -> RwLockWriteGuard<'_, LogState> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The base of the first segment whose aborted-transaction index was lost at open, if
    /// any: producer state must be replayed from at or before it, which rebuilds the index.
    pub fn reindex_from(&self) -> Option<u64> {
        self.reindex_from
    }

    pub fn set_first_unstable_offset(&self, offset: u64) {
        self.first_unstable_offset.store(offset, Ordering::Release);
    }

    pub fn first_unstable_offset(&self) -> u64 {
        self.first_unstable_offset.load(Ordering::Acquire)
    }

    /// Records an aborted transaction in the index of the segment holding its marker
    /// (`entry.last_offset`); nothing when that segment already has it, or is gone.
    /// The file is appended and synced outside the log's lock.
    pub fn add_aborted(&self, entry: AbortedTxn) -> Result<()> {
        self.check_online()?;
        let mut state = self.write_state();
        let Some((_, segment)) = state.segments.range_mut(..=entry.last_offset).next_back() else {
            return Ok(());
        };
        let pending = segment.add_aborted(entry);
        drop(state);
        match pending {
            Some(write) => self.mark_offline_on(write.write()),
            None => Ok(()),
        }
    }

    /// The aborted transactions overlapping `[fetch_offset, upper_bound)`, from the segment
    /// holding `fetch_offset` on (Kafka's `collectAbortedTransactions`).
    pub fn collect_aborted(&self, fetch_offset: u64, upper_bound: u64) -> Vec<AbortedTxn> {
        let state = self.read_state();
        let floor = state
            .segments
            .range(..=fetch_offset)
            .next_back()
            .map_or(0, |(b, _)| *b);
        let mut out = Vec::new();
        for segment in state.segments.range(floor..).map(|(_, s)| s) {
            if segment
                .collect_aborted(fetch_offset, upper_bound, &mut out)
                .complete
            {
                break;
            }
        }
        out
    }

    pub fn log_start_offset(&self) -> u64 {
        self.read_state().log_start_offset
    }
    pub fn log_end_offset(&self) -> u64 {
        self.read_state().log_end_offset
    }
    pub fn high_watermark(&self) -> u64 {
        self.read_state().high_watermark
    }
    /// Everything below this offset is on disk.
    pub fn recovery_point(&self) -> u64 {
        self.recovery_point.load(Ordering::Acquire)
    }
    /// How many fsync rounds this log has done (group commit makes this smaller than the
    /// number of `flush.policy=always` appends).
    pub fn flush_count(&self) -> u64 {
        self.flush_count.load(Ordering::Relaxed)
    }
    pub fn size_bytes(&self) -> u64 {
        self.read_state().segments.values().map(Segment::size).sum()
    }
    pub fn segment_count(&self) -> usize {
        self.read_state().segments.len()
    }
    pub fn segment_base_offsets(&self) -> Vec<u64> {
        self.read_state().segments.keys().copied().collect()
    }
    pub fn latest_epoch(&self) -> Option<i32> {
        self.read_state().epochs.latest().map(|e| e.epoch)
    }
    /// The leader epoch the record at `offset` was written under; `None` when the offset is
    /// outside the log (past its end, or before the first epoch it knows).
    pub fn epoch_at(&self, offset: u64) -> Option<i32> {
        let state = self.read_state();
        if offset >= state.log_end_offset {
            return None;
        }
        state.epochs.epoch_at(offset)
    }
    /// OffsetForLeaderEpoch: the largest epoch `<= epoch` and where it ends.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, u64)> {
        let state = self.read_state();
        state.epochs.end_offset_for(epoch, state.log_end_offset)
    }

    /// Raises the high watermark to `offset` (the replication layer decides when), clamped to
    /// the log, never lowering it; returns (before, after). The comparison is made under the
    /// state lock: appends on several connections complete out of order, and a raiser holding
    /// an older, smaller candidate must not undo a newer one.
    pub fn raise_high_watermark(&self, offset: u64) -> (u64, u64) {
        let mut state = self.write_state();
        let before = state.high_watermark;
        let target = offset.clamp(state.log_start_offset, state.log_end_offset);
        if target > before {
            state.high_watermark = target;
        }
        (before, state.high_watermark)
    }

    /// Sets the high watermark, clamped to the log, lower or higher (tests that place it).
    #[cfg(test)]
    pub fn set_high_watermark(&self, offset: u64) -> u64 {
        let mut state = self.write_state();
        state.high_watermark = offset.clamp(state.log_start_offset, state.log_end_offset);
        state.high_watermark
    }

    pub(super) fn check_online(&self) -> Result<()> {
        if self.offline.load(Ordering::Acquire) {
            return Err(LogError::Offline(self.topic_partition.to_string()));
        }
        Ok(())
    }

    /// A broken invariant of its replica: the log goes offline as after a storage error (its
    /// broker reports it, the controller moves leadership away), instead of serving what may
    /// be wrong.
    pub fn fence(&self, reason: &str) {
        if !self.offline.swap(true, Ordering::AcqRel) {
            tracing::error!(topic_partition = %self.topic_partition, reason, "invariant broken: the log is going offline");
            LOGS_GONE_OFFLINE.fetch_add(1, Ordering::Release);
        }
    }

    /// Storage errors take the log offline: its state on disk is no longer known.
    fn fail<T>(&self, error: LogError) -> Result<T> {
        if error.is_storage_error() {
            tracing::error!(topic_partition = %self.topic_partition, %error, "log is going offline");
            self.offline.store(true, Ordering::Release);
            LOGS_GONE_OFFLINE.fetch_add(1, Ordering::Release);
        }
        Err(error)
    }

    /// Appends a producer's batches (or the broker's own) as the partition leader: validates
    /// every batch before writing any, assigns offsets in place in `records`, stamps
    /// `leader_epoch`, and writes them in one positional write. With `flush.policy=always`
    /// returns only once the batches are on disk.
    pub fn append_as_leader(
        &self,
        records: &[u8],
        leader_epoch: i32,
        origin: AppendOrigin,
    ) -> Result<AppendInfo> {
        let validated = self.validate_leader_append(records, origin)?;
        self.append_validated_as_leader(records, validated, leader_epoch)
    }

    /// Checks a leader append's batches (framing, CRC-32C, sizes, the topic's rules) without
    /// writing anything: the replication layer looks at the producer fields of checked
    /// batches before deciding to append, and each CRC is computed once.
    pub fn validate_leader_append(
        &self,
        records: &[u8],
        origin: AppendOrigin,
    ) -> Result<ValidatedBatches> {
        self.check_online()?;
        let config = self.config();
        Ok(ValidatedBatches {
            headers: validate_leader_batches(records, &config, origin)?,
        })
    }

    /// [`Log::append_as_leader`] for batches [`Log::validate_leader_append`] checked in these
    /// same `records`. The records are not changed: what the leader assigns (offsets, epoch,
    /// a max timestamp or LogAppendTime) is written over them as the log is written.
    pub fn append_validated_as_leader(
        &self,
        records: &[u8],
        validated: ValidatedBatches,
        leader_epoch: i32,
    ) -> Result<AppendInfo> {
        self.check_online()?;
        let config = self.config();
        let headers = validated.headers;
        let now = self.clock.now_ms();
        let log_append_time =
            (config.message_timestamp_type == TimestampType::LogAppendTime).then_some(now);

        let mut state = self.write_state();
        let first_offset = state.log_end_offset;
        let mut next_offset = first_offset;
        let mut appended = Vec::with_capacity(headers.len());
        let mut stamps = Vec::with_capacity(headers.len());
        let mut max_timestamp = i64::MIN;
        for (position, header, record_max_timestamp) in &headers {
            let size = header.total_size().expect("validated") as u64;
            let bytes = &records[*position..*position + size as usize];
            let rewrite = |change: &dyn Fn(&mut [u8])| {
                let mut batch = bytes.to_vec();
                batch::set_base_offset_and_epoch(&mut batch, next_offset as i64, leader_epoch);
                change(&mut batch);
                Stamp::Batch(batch)
            };
            let (stamp, batch_max_timestamp) = match (log_append_time, record_max_timestamp) {
                (Some(now), _) => (
                    rewrite(&|batch| batch::set_log_append_time(batch, now)),
                    now,
                ),
                // The records, not the producer's header, say what the max timestamp is.
                (None, Some(records_max)) if *records_max != header.max_timestamp => (
                    rewrite(&|batch| batch::set_max_timestamp(batch, *records_max)),
                    *records_max,
                ),
                (None, _) => {
                    let mut prefix = [0u8; STAMPED_PREFIX_BYTES];
                    prefix.copy_from_slice(&bytes[..STAMPED_PREFIX_BYTES]);
                    batch::set_base_offset_and_epoch(&mut prefix, next_offset as i64, leader_epoch);
                    (Stamp::Prefix(prefix), header.max_timestamp)
                }
            };
            stamps.push(stamp);
            let last_offset = next_offset + header.last_offset_delta as u64;
            appended.push(AppendedBatch {
                base_offset: next_offset,
                last_offset,
                max_timestamp: batch_max_timestamp,
                relative_position: *position as u64,
                size,
            });
            max_timestamp = max_timestamp.max(batch_max_timestamp);
            next_offset = last_offset + 1;
        }
        let record_count = next_offset - first_offset;
        if let Err(e) = state.epochs.assign(leader_epoch, first_offset) {
            return self.fail(e);
        }
        if let Err(e) = self.write_batches(&mut state, records, &appended, &stamps, &config, now) {
            return self.fail(e);
        }
        let info = AppendInfo {
            first_offset,
            last_offset: next_offset - 1,
            max_timestamp,
            log_append_time_ms: log_append_time,
            log_start_offset: state.log_start_offset,
            record_count,
            bytes: records.len() as u64,
        };
        let flush_now = self.note_unflushed(&mut state, record_count, &config);
        drop(state);
        if flush_now {
            self.flush_to(info.last_offset + 1)?;
        }
        Ok(info)
    }

    /// Appends batches copied from the leader, unchanged. Their offsets must continue the log:
    /// strictly increasing, the first at or after the log end offset. Gaps are allowed, as in
    /// Kafka: a compacted log has them, and keeps them if its policy later becomes `delete`.
    pub fn append_as_follower(&self, records: &[u8]) -> Result<AppendInfo> {
        self.check_online()?;
        let config = self.config();
        let mut state = self.write_state();
        let first_expected = state.log_end_offset;
        let mut expected = first_expected;
        let mut appended = Vec::new();
        let mut epochs = Vec::new();
        let mut max_timestamp = i64::MIN;
        for item in BatchIter::new(records) {
            let (position, header, bytes) = item?;
            if header.magic != batch::MAGIC_V2 || batch::compute_crc(bytes) != header.crc {
                return Err(LogError::Corrupt {
                    position,
                    reason: "bad magic or CRC-32C in replicated batch".into(),
                });
            }
            let base = u64::try_from(header.base_offset).map_err(|_| {
                LogError::OffsetsOutOfOrder(format!("negative base offset {}", header.base_offset))
            })?;
            let last_offset = u64::try_from(header.last_offset_delta)
                .ok()
                .and_then(|delta| base.checked_add(delta))
                .filter(|last| *last < i64::MAX as u64);
            let Some(last_offset) = last_offset.filter(|_| base >= expected) else {
                return Err(LogError::OffsetsOutOfOrder(format!(
                    "batch at offset {base} (last offset delta {}) does not continue the log at {expected}",
                    header.last_offset_delta
                )));
            };
            appended.push(AppendedBatch {
                base_offset: base,
                last_offset,
                max_timestamp: header.max_timestamp,
                relative_position: position as u64,
                size: bytes.len() as u64,
            });
            epochs.push(header.partition_leader_epoch);
            max_timestamp = max_timestamp.max(header.max_timestamp);
            expected = last_offset + 1;
        }
        let Some(first) = appended.first() else {
            return Err(LogError::InvalidRecord {
                position: 0,
                reason: "no record batches".into(),
            });
        };
        let first_offset = first.base_offset;
        for (batch, epoch) in appended.iter().zip(&epochs) {
            if let Err(e) = state.epochs.assign_if_newer(*epoch, batch.base_offset) {
                return self.fail(e);
            }
        }
        let now = self.clock.now_ms();
        if let Err(e) = self.write_batches(&mut state, records, &appended, &[], &config, now) {
            return self.fail(e);
        }
        let record_count = expected - first_offset;
        let info = AppendInfo {
            first_offset,
            last_offset: expected - 1,
            max_timestamp,
            log_append_time_ms: None,
            log_start_offset: state.log_start_offset,
            record_count,
            bytes: records.len() as u64,
        };
        let flush_now = self.note_unflushed(&mut state, record_count, &config);
        drop(state);
        if flush_now {
            self.flush_to(info.last_offset + 1)?;
        }
        Ok(info)
    }

    /// Writes `appended` batches of `bytes`, each with its stamp when `stamps` (one per
    /// batch) are given: a leader's append. A follower's batches go as they are.
    fn write_batches(
        &self,
        state: &mut LogState,
        bytes: &[u8],
        appended: &[AppendedBatch],
        stamps: &[Stamp],
        config: &LogConfig,
        now: i64,
    ) -> Result<()> {
        debug_assert!(stamps.is_empty() || stamps.len() == appended.len());
        if let Some(error) = super::fault::injected_write_error(&self.topic_partition) {
            return Err(LogError::io(state.active().path(), error));
        }
        // Batches go to the active segment in runs; a run ends where the segment would
        // overflow (size, or offsets beyond what 32-bit index entries hold) and a roll follows.
        let mut start = 0;
        while start < appended.len() {
            let first = &appended[start];
            if state
                .active()
                .should_roll(first.size, first.last_offset, config, now)
            {
                self.roll(state, first.base_offset, config, now)?;
            }
            let active = state.active();
            let mut end = start + 1;
            let mut run_bytes = first.size;
            while end < appended.len()
                && active.fits(
                    run_bytes + appended[end].size,
                    appended[end].last_offset,
                    config,
                )
            {
                run_bytes += appended[end].size;
                end += 1;
            }
            let from = appended[start].relative_position;
            let run: Vec<AppendedBatch> = appended[start..end]
                .iter()
                .map(|b| AppendedBatch {
                    relative_position: b.relative_position - from,
                    ..*b
                })
                .collect();
            let bytes = &bytes[from as usize..(from + run_bytes) as usize];
            let overlays: Vec<Overlay<'_>> = stamps
                .get(start..end)
                .unwrap_or_default()
                .iter()
                .zip(&run)
                .map(|(stamp, batch)| Overlay {
                    at: batch.relative_position as usize,
                    bytes: stamp.bytes(),
                })
                .collect();
            state.active_mut().append_overlaid(
                bytes,
                &overlays,
                &run,
                config.index_interval_bytes,
            )?;
            state.log_end_offset = appended[end - 1].last_offset + 1;
            start = end;
        }
        state.check_invariants();
        Ok(())
    }

    /// Seals the active segment and starts a new one at `base_offset`.
    fn roll(
        &self,
        state: &mut LogState,
        base_offset: u64,
        config: &LogConfig,
        now: i64,
    ) -> Result<()> {
        debug_assert!(base_offset >= state.log_end_offset);
        state.active_mut().seal()?;
        lock(&self.sealed_unsynced).push(state.active().base_offset);
        let segment = Segment::create(&self.dir, base_offset, config, now)?;
        tracing::debug!(topic_partition = %self.topic_partition, base_offset, "rolled new segment");
        state.segments.insert(base_offset, segment);
        Ok(())
    }

    /// Makes a new empty active segment at `base_offset`.
    fn start_empty_segment_at(
        &self,
        state: &mut LogState,
        base_offset: u64,
        config: &LogConfig,
    ) -> Result<()> {
        let now = self.clock.now_ms();
        // An empty active segment is replaced, unless it is the first segment: its base
        // offset is what keeps the log start offset across restarts.
        if state.active().is_empty() && state.segments.len() > 1 {
            let base = state.active().base_offset;
            let empty = state.segments.remove(&base).expect("the active segment");
            lock(&self.pending_deletes).extend(empty.rename_to_deleted()?);
            let segment = Segment::create(&self.dir, base_offset, config, now)?;
            state.segments.insert(base_offset, segment);
            return Ok(());
        }
        self.roll(state, base_offset, config, now)
    }

    /// Rolls the active segment if it is non-empty (for tests and `segment.ms` housekeeping).
    pub fn roll_now(&self) -> Result<()> {
        self.check_online()?;
        let config = self.config();
        let mut state = self.write_state();
        if state.active().is_empty() {
            return Ok(());
        }
        let base = state.log_end_offset;
        let now = self.clock.now_ms();
        self.roll(&mut state, base, &config, now)
    }

    fn note_unflushed(&self, state: &mut LogState, records: u64, config: &LogConfig) -> bool {
        state.unflushed_messages += records;
        config.flush_policy == FlushPolicy::Always
            || state.unflushed_messages >= config.flush_messages
    }

    /// Reads whole batches from `offset`: at most `max_bytes` (but always the first batch),
    /// from one segment, and none at or past `max_offset` (the high watermark for consumers).
    pub fn read(&self, offset: u64, max_bytes: u64, max_offset: Option<u64>) -> Result<ReadInfo> {
        self.read_with(offset, max_bytes, max_offset, true)
    }

    /// As [`Log::read`], the first batch included beyond `max_bytes` only with
    /// `min_one_message` (Kafka's `minOneMessage`: a Fetch grants it to the first partition
    /// that returns records, and to no other, so a response stays within its `max_bytes`
    /// but for that one batch, KIP-74). Without it, a first batch larger than `max_bytes`
    /// reads nothing (`slice` is `None`, `first_batch_offset` names the batch).
    pub fn read_with(
        &self,
        offset: u64,
        max_bytes: u64,
        max_offset: Option<u64>,
        min_one_message: bool,
    ) -> Result<ReadInfo> {
        self.check_online()?;
        let state = self.read_state();
        let mut info = ReadInfo {
            slice: None,
            first_batch_offset: None,
            log_start_offset: state.log_start_offset,
            log_end_offset: state.log_end_offset,
            high_watermark: state.high_watermark,
            upper_bound: offset,
        };
        if offset < state.log_start_offset || offset > state.log_end_offset {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start_offset: state.log_start_offset,
                log_end_offset: state.log_end_offset,
            });
        }
        let bound = max_offset
            .unwrap_or(state.log_end_offset)
            .min(state.log_end_offset);
        if offset >= bound {
            return Ok(info);
        }
        let floor = state
            .segments
            .range(..=offset)
            .next_back()
            .map_or(0, |(b, _)| *b);
        for (&base, segment) in state.segments.range(floor..) {
            if base >= bound {
                break;
            }
            if let Some((slice, first)) = segment.read(offset, max_bytes, bound, min_one_message)? {
                info.first_batch_offset = Some(first.header.base_offset as u64);
                info.upper_bound = state
                    .segments
                    .range(base + 1..)
                    .next()
                    .map_or(bound, |(next, _)| (*next).min(bound));
                // No slice: the first batch did not fit, and no later segment may answer in
                // its place.
                info.slice = slice;
                break;
            }
        }
        Ok(info)
    }

    /// ListOffsets by timestamp: the first record whose timestamp is `>= timestamp`, as
    /// (offset, timestamp), or `None` when every record is older.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<(u64, i64)>> {
        self.check_online()?;
        let state = self.read_state();
        for segment in state.segments.values() {
            if segment.max_timestamp() >= timestamp {
                if let Some(found) =
                    segment.find_offset_by_timestamp(timestamp, state.log_start_offset)?
                {
                    return Ok(Some(found));
                }
            }
        }
        Ok(None)
    }

    /// ListOffsets MAX_TIMESTAMP (KIP-734): the first record with the largest timestamp among
    /// records at or after the log start offset.
    pub fn max_timestamp_offset(&self) -> Result<Option<(u64, i64)>> {
        self.check_online()?;
        let mut best: Option<(u64, i64)> = None;
        let mut first_segment_scan = None;
        {
            let state = self.read_state();
            let log_start = state.log_start_offset;
            for segment in state.segments.values().filter(|s| !s.is_empty()) {
                if segment.base_offset < log_start {
                    // Records below the log start are gone for readers: the rest of this
                    // segment is scanned below, outside the lock (it can be large).
                    if let Some(first) = segment.translate_offset(log_start)? {
                        first_segment_scan = Some((segment.snapshot()?, first.position, log_start));
                    }
                    continue;
                }
                if best.is_none_or(|(_, ts)| segment.max_timestamp() > ts) {
                    let found =
                        segment.find_offset_by_timestamp(segment.max_timestamp(), log_start)?;
                    if let Some((offset, ts)) = found {
                        if best.is_none_or(|(_, best_ts)| ts > best_ts) {
                            best = Some((offset, ts));
                        }
                    }
                }
            }
        }
        if let Some((snapshot, position, log_start)) = first_segment_scan {
            let found = snapshot
                .max_timestamp_record(position, log_start)
                .map_err(|e| LogError::io(&self.dir, e))?;
            // The first segment's records come first: they win ties.
            if let Some((offset, ts)) = found {
                if best.is_none_or(|(_, best_ts)| ts >= best_ts) {
                    best = Some((offset, ts));
                }
            }
        }
        Ok(best)
    }

    /// Makes everything below `offset` durable (group commit: one fsync covers every append
    /// that landed before it started).
    pub fn flush_to(&self, offset: u64) -> Result<()> {
        if self.is_durable_to(offset) {
            return Ok(());
        }
        self.check_online()?;
        let Some(_flushing) = self.start_flushing(Some(offset))? else {
            return Ok(());
        };
        self.gather_appenders();
        let recovery_point = self.recovery_point();
        let mut handles = Vec::new();
        let target = {
            let state = self.read_state();
            let active_base = state.active().base_offset;
            // Segments sealed since the last fsync: their trims and final index entries must be
            // on disk before the recovery point may pass them.
            let sealed: Vec<u64> = std::mem::take(&mut *lock(&self.sealed_unsynced));
            for segment in state.segments.values() {
                let has_unflushed_data =
                    segment.next_offset() > recovery_point || segment.base_offset >= recovery_point;
                if has_unflushed_data || sealed.contains(&segment.base_offset) {
                    segment.sync_handles(segment.base_offset != active_base, &mut handles);
                }
            }
            state.log_end_offset
        };
        if let Err(e) = sync_all(&handles) {
            return self.fail(e);
        }
        self.check_online()?;
        self.flush_count.fetch_add(1, Ordering::Relaxed);
        self.recovery_point.fetch_max(target, Ordering::AcqRel);
        let mut state = self.write_state();
        state.unflushed_messages = 0;
        state.last_flush_ms = self.clock.now_ms();
        Ok(())
    }

    /// Before an fsync, gives appenders that are mid-append the chance to join it: while the
    /// log end keeps moving between yields of the CPU, wait (at most `GROUP_COMMIT_WAIT_MAX`).
    /// When the previous fsync ends, every waiter wakes at once; without this the first one
    /// back would sync alone and the rest would wait a whole extra fsync. A lone appender pays
    /// one yield.
    fn gather_appenders(&self) {
        let started = std::time::Instant::now();
        let mut end = self.log_end_offset();
        while started.elapsed() < GROUP_COMMIT_WAIT_MAX {
            std::thread::yield_now();
            let now = self.log_end_offset();
            if now == end {
                break;
            }
            end = now;
        }
    }

    /// Waits until no fsync runs and claims the right to run one; with `covered` given, returns
    /// `None` instead once the recovery point reaches it (another fsync covered the caller).
    /// An fsync that failed takes the log offline, and a waiter must then fail too: a second
    /// fsync of the same file can succeed without the lost pages ever reaching the disk.
    fn start_flushing(&self, covered: Option<u64>) -> Result<Option<FlushGuard<'_>>> {
        let mut flushing = lock(&self.flushing);
        loop {
            self.check_online()?;
            if covered.is_some_and(|offset| self.is_durable_to(offset)) {
                return Ok(None);
            }
            if !*flushing {
                *flushing = true;
                return Ok(Some(FlushGuard { log: self }));
            }
            flushing = self
                .flushed
                .wait(flushing)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Whether everything below `offset` is on disk, and no sealed segment waits for its
    /// indexes to be synced.
    fn is_durable_to(&self, offset: u64) -> bool {
        self.recovery_point() >= offset && lock(&self.sealed_unsynced).is_empty()
    }

    /// Flushes everything appended so far.
    pub fn flush(&self) -> Result<()> {
        let end = self.log_end_offset();
        self.flush_to(end)
    }

    /// `flush.ms` housekeeping, and flushing segments that rolled (Kafka flushes a segment
    /// when it rolls, off the append path). Called by the log manager's scheduler.
    pub fn flush_if_due(&self) -> Result<()> {
        self.check_online()?;
        let config = self.config();
        let (due, active_base) = {
            let state = self.read_state();
            let now = self.clock.now_ms();
            (
                now.saturating_sub(state.last_flush_ms) >= config.flush_ms,
                state.active().base_offset,
            )
        };
        if due {
            self.flush()
        } else {
            self.flush_to(active_base)
        }
    }

    /// Removes every batch from the one holding `offset` on (a follower diverged from its
    /// leader). Returns the new log end offset, which is `offset` when it is a batch boundary.
    /// The recovery point checkpoint must be rewritten right after (`LogManager::truncate_to`
    /// does): a stale one above the new end would skip rescanning what is appended next.
    pub fn truncate_to(&self, offset: u64) -> Result<u64> {
        self.check_online()?;
        let flushing = self.start_flushing(None)?.expect("no cover condition");
        let mut state = self.write_state();
        if offset >= state.log_end_offset {
            return Ok(state.log_end_offset);
        }
        if offset <= state.log_start_offset {
            drop(state);
            drop(flushing);
            self.truncate_fully_and_start_at(offset)?;
            return Ok(offset);
        }
        let config = self.config();
        let result = (|| {
            let removed: Vec<u64> = state
                .segments
                .range(offset + 1..)
                .map(|(b, _)| *b)
                .collect();
            // Segments starting after `offset` go; the segment holding `offset` is cut.
            for base in removed {
                if state.segments.len() == 1 {
                    break;
                }
                let segment = state.segments.remove(&base).expect("listed above");
                let paths = segment.rename_to_deleted()?;
                lock(&self.pending_deletes).extend(paths);
            }
            let LogState {
                segments,
                epochs,
                log_start_offset,
                ..
            } = &mut *state;
            let active = segments
                .values_mut()
                .next_back()
                .expect("one segment stays");
            let removed_base = active.truncate_to(offset, config.index_interval_bytes, epochs)?;
            active.unseal()?;
            // The log ends at `offset`, or at the start of a batch that straddled it (offsets
            // are never skipped), and never before the log start offset.
            let new_end = removed_base
                .map_or(offset, |base| base.min(offset))
                .max(*log_start_offset);
            let in_gap = new_end > active.next_offset().max(active.base_offset);
            state.log_end_offset = new_end;
            if in_gap {
                // The end lies in a gap (compacted away, or below the log start): an empty
                // segment based there makes that end survive a restart.
                self.start_empty_segment_at(&mut state, new_end, &config)?;
            }
            state.high_watermark = state.high_watermark.min(new_end);
            state.epochs.truncate_from_end(new_end)?;
            Ok(new_end)
        })();
        match result {
            Ok(new_end) => {
                self.generation.fetch_add(1, Ordering::AcqRel);
                self.recovery_point.fetch_min(new_end, Ordering::AcqRel);
                state.check_invariants();
                tracing::info!(topic_partition = %self.topic_partition, offset, log_end_offset = new_end, "truncated log");
                Ok(new_end)
            }
            Err(e) => self.fail(e),
        }
    }

    /// Empties the log and restarts it at `offset` (a follower far behind a leader whose log
    /// now starts later).
    pub fn truncate_fully_and_start_at(&self, offset: u64) -> Result<()> {
        self.check_online()?;
        let _flushing = self.start_flushing(None)?.expect("no cover condition");
        let config = self.config();
        let mut state = self.write_state();
        let now = self.clock.now_ms();
        let result = (|| {
            let segments = std::mem::take(&mut state.segments);
            for (_, segment) in segments {
                lock(&self.pending_deletes).extend(segment.rename_to_deleted()?);
            }
            state
                .segments
                .insert(offset, Segment::create(&self.dir, offset, &config, now)?);
            state.log_end_offset = offset;
            state.log_start_offset = offset;
            state.high_watermark = offset;
            state.epochs.clear()
        })();
        if let Err(e) = result {
            return self.fail(e);
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.recovery_point.store(offset, Ordering::Release);
        state.check_invariants();
        Ok(())
    }

    /// DeleteRecords: moves the log start offset forward (never back), at most to the high
    /// watermark (Kafka answers OFFSET_OUT_OF_RANGE beyond it). Segments wholly below it are
    /// deleted by the next retention pass. Returns the log start offset.
    pub fn advance_log_start_offset(&self, offset: u64) -> Result<u64> {
        self.check_online()?;
        let mut state = self.write_state();
        if offset > state.high_watermark {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start_offset: state.log_start_offset,
                log_end_offset: state.log_end_offset,
            });
        }
        if offset > state.log_start_offset {
            state.log_start_offset = offset;
            if let Err(e) = state.epochs.truncate_from_start(offset) {
                return self.fail(e);
            }
        }
        Ok(state.log_start_offset)
    }

    /// Files renamed to `.deleted` since the last call, for the log manager to remove after
    /// `file.delete.delay.ms`.
    pub fn take_pending_deletes(&self) -> Vec<PathBuf> {
        std::mem::take(&mut *lock(&self.pending_deletes))
    }
    /// The log's topic was deleted: every later operation fails, and a cleaner or retention
    /// pass holding the log abandons its work instead of touching files that may by then
    /// belong to a re-created topic of the same name.
    pub fn mark_deleted(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.offline.store(true, Ordering::Release);
    }
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
    pub fn is_offline(&self) -> bool {
        self.offline.load(Ordering::Acquire)
    }
    pub(super) fn delete_horizon_due_ms(&self) -> i64 {
        self.delete_horizon_due_ms.load(Ordering::Acquire)
    }
    pub(super) fn set_delete_horizon_due_ms(&self, due_ms: i64) {
        self.delete_horizon_due_ms.store(due_ms, Ordering::Release);
    }
    pub(super) fn add_pending_deletes(&self, paths: Vec<PathBuf>) {
        lock(&self.pending_deletes).extend(paths);
    }
    pub(super) fn mark_offline_on<T>(&self, result: Result<T>) -> Result<T> {
        result.or_else(|e| self.fail(e))
    }

    /// Flushes everything and seals the active segment's indexes, so that the next open needs
    /// no recovery. Returns the log end offset (the recovery point to checkpoint).
    pub fn close(&self) -> Result<u64> {
        self.flush()?;
        let mut state = self.write_state();
        let result = state.active_mut().seal();
        self.mark_offline_on(result)?;
        let mut handles = Vec::new();
        state.active().sync_handles(true, &mut handles);
        self.mark_offline_on(sync_all(&handles))?;
        Ok(state.log_end_offset)
    }
}

/// The right to fsync (or to change what an fsync would cover); released on drop, waking
/// every thread waiting for the recovery point.
struct FlushGuard<'a> {
    log: &'a Log,
}

impl Drop for FlushGuard<'_> {
    fn drop(&mut self) {
        *lock(&self.log.flushing) = false;
        self.log.flushed.notify_all();
    }
}

/// A leader append's batches, checked: where each is, its header, and the largest record
/// timestamp of an uncompressed batch.
#[derive(Debug)]
pub struct ValidatedBatches {
    headers: Vec<(usize, BatchHeader, Option<i64>)>,
}

impl ValidatedBatches {
    pub fn headers(&self) -> impl Iterator<Item = &BatchHeader> {
        self.headers.iter().map(|(_, header, _)| header)
    }

    /// Each batch's header and bytes in the `records` that were validated.
    pub fn batches<'a>(
        &'a self,
        records: &'a [u8],
    ) -> impl Iterator<Item = (&'a BatchHeader, &'a [u8])> + 'a {
        self.headers.iter().map(move |(position, header, _)| {
            let end = header
                .total_size()
                .map_or(records.len(), |size| position + size)
                .min(records.len());
            (header, &records[(*position).min(end)..end])
        })
    }
}

/// The bytes a leader's stamp covers at the start of a batch: base offset, batch length (kept)
/// and partition leader epoch, none of them under the CRC.
const STAMPED_PREFIX_BYTES: usize = 16;

/// What a leader writes over one producer batch.
enum Stamp {
    /// Offsets and epoch assigned (the common case: the rest of the batch goes as it came).
    Prefix([u8; STAMPED_PREFIX_BYTES]),
    /// The whole batch rewritten: its max timestamp or LogAppendTime changed, so its CRC did.
    Batch(Vec<u8>),
}

impl Stamp {
    fn bytes(&self) -> &[u8] {
        match self {
            Stamp::Prefix(prefix) => prefix,
            Stamp::Batch(batch) => batch,
        }
    }
}

/// Validates every batch of a leader append before anything is written; returns where each is.
fn validate_leader_batches(
    records: &[u8],
    config: &LogConfig,
    origin: AppendOrigin,
) -> Result<Vec<(usize, BatchHeader, Option<i64>)>> {
    let mut headers = Vec::new();
    let mut record_errors: Vec<(i32, String)> = Vec::new();
    // Records are numbered across the request's batches for the partition (one batch, as
    // clients send, numbers them as Kafka does: within the batch).
    let mut record_index = 0i32;
    for item in BatchIter::new(records) {
        let (position, header, bytes) = item?;
        if bytes.len() > config.max_message_bytes {
            return Err(LogError::TooLarge {
                size: bytes.len(),
                max: config.max_message_bytes,
            });
        }
        let record_max_timestamp = batch::validate_batch(position, &header, bytes)?;
        let invalid = |reason: &str| LogError::InvalidRecord {
            position,
            reason: reason.into(),
        };
        if header.is_control() && origin == AppendOrigin::Client {
            return Err(invalid("clients may not write control batches"));
        }
        // The broker's own producer batches (a transactional offset commit) carry no sequence.
        if header.producer_id >= 0 && header.base_sequence < 0 && origin == AppendOrigin::Client {
            return Err(invalid("idempotent batch without a base sequence"));
        }
        if header.is_transactional() && header.producer_id < 0 {
            return Err(invalid("transactional batch without a producer id"));
        }
        // Kafka's LogValidator checks the records of compressed batches too: decompressed.
        let decompressed = if header.is_compressed() {
            let section = &bytes[BATCH_HEADER_BYTES..];
            let plain =
                codec::decompress(i16::from(header.compression()), section).map_err(|e| {
                    LogError::Corrupt {
                        position,
                        reason: format!("records do not decompress: {e}"),
                    }
                })?;
            batch::check_section(position, &header, &plain)?;
            Some(plain)
        } else {
            None
        };
        let records = match &decompressed {
            Some(plain) => RecordIter::decompressed(&header, plain),
            None => RecordIter::new(&header, bytes),
        };
        if config.cleanup_policy.compact && !header.is_control() {
            for (index, record) in records.enumerate() {
                if record.is_ok_and(|r| r.key.is_none()) {
                    record_errors.push((
                        record_index + index as i32,
                        "Compacted topic cannot accept message without key.".to_owned(),
                    ));
                }
            }
        }
        record_index = record_index.saturating_add(header.records_count);
        headers.push((position, header, record_max_timestamp));
    }
    if !record_errors.is_empty() {
        // Kafka's message, naming at most three.
        let shown: Vec<String> = record_errors
            .iter()
            .take(3)
            .map(|(index, message)| format!("RecordError(batchIndex={index}, message='{message}')"))
            .collect();
        return Err(LogError::RecordErrors {
            message: format!(
                "One or more records have been rejected due to {} record errors in total, and only showing the first three errors at most: [{}]",
                record_errors.len(),
                shown.join(", ")
            ),
            errors: record_errors,
        });
    }
    if headers.is_empty() {
        return Err(LogError::InvalidRecord {
            position: 0,
            reason: "no record batches".into(),
        });
    }
    Ok(headers)
}

/// Base offsets of the `.log` files in `dir`; also removes leftovers that are never kept
/// (`.deleted`, `.cleaned`, checkpoint `.tmp`).
fn list_segment_bases(dir: &Path) -> Result<Vec<u64>> {
    let mut bases = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| LogError::io(dir, e))? {
        let entry = entry.map_err(|e| LogError::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(DELETED_SUFFIX)
            || name.ends_with(CLEANED_SUFFIX)
            || name.ends_with(".tmp")
        {
            fs::remove_file(entry.path()).map_err(|e| LogError::io(entry.path(), e))?;
            continue;
        }
        if name.ends_with(LOG_SUFFIX) {
            if let Some(base) = parse_base_offset(&name) {
                bases.push(base);
            }
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

/// Completes cleaner swaps that a crash interrupted. The `.log.swap` file is the commit point
/// of a swap: once it exists, it holds every record the cleaner kept from the segments it
/// replaces (those whose base offset lies in its offset range), so those are removed and the
/// swap file takes the name of the first. Returns the base offsets of completed swaps, whose
/// indexes must be rebuilt.
fn complete_interrupted_swaps(dir: &Path) -> Result<Vec<u64>> {
    let mut swaps = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| LogError::io(dir, e))? {
        let entry = entry.map_err(|e| LogError::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(&format!("{LOG_SUFFIX}{SWAP_SUFFIX}")) {
            if let Some(base) = parse_base_offset(&name) {
                swaps.push(base);
            }
        } else if name.ends_with(SWAP_SUFFIX) {
            // Index swaps are not used: indexes are rebuilt from the swapped log.
            fs::remove_file(entry.path()).map_err(|e| LogError::io(entry.path(), e))?;
        }
    }
    swaps.sort_unstable();
    for &base in &swaps {
        let swap = segment_path(dir, base, &format!("{LOG_SUFFIX}{SWAP_SUFFIX}"));
        let end = swap_end_offset(&swap, base)?;
        for replaced in list_segment_bases(dir)?
            .into_iter()
            .filter(|b| *b >= base && *b < end)
        {
            for suffix in [
                LOG_SUFFIX,
                super::segment::INDEX_SUFFIX,
                super::segment::TIME_INDEX_SUFFIX,
                super::txn_index::TXN_INDEX_SUFFIX,
            ] {
                let path = segment_path(dir, replaced, suffix);
                match fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(LogError::io(path, e)),
                }
            }
        }
        let target = segment_path(dir, base, LOG_SUFFIX);
        fs::rename(&swap, &target).map_err(|e| LogError::io(&swap, e))?;
        tracing::info!(dir = %dir.display(), base, "completed an interrupted segment swap");
    }
    if !swaps.is_empty() {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| LogError::io(dir, e))?;
    }
    Ok(swaps)
}

/// The offset after the last whole batch of a swap file.
fn swap_end_offset(path: &Path, base: u64) -> Result<u64> {
    use std::os::unix::fs::FileExt;
    let file = File::open(path).map_err(|e| LogError::io(path, e))?;
    let size = file.metadata().map_err(|e| LogError::io(path, e))?.len();
    let mut position = 0u64;
    let mut end = base;
    let mut header = [0u8; batch::BATCH_HEADER_BYTES];
    while position + header.len() as u64 <= size {
        file.read_exact_at(&mut header, position)
            .map_err(|e| LogError::io(path, e))?;
        let Some(parsed) = BatchHeader::parse(&header) else {
            break;
        };
        let Some(total) = parsed.total_size() else {
            break;
        };
        end = parsed.last_offset() as u64 + 1;
        position += total as u64;
    }
    Ok(end)
}
