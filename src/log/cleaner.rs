//! Log compaction (`cleanup.policy=compact`): keep the latest record of each key.
//!
//! A pass over one log, as Kafka's cleaner does it:
//! 1. The cleanable range is the sealed segments below the *first uncleanable offset*: the
//!    active segment, the high watermark and `min.compaction.lag.ms` bound it. Segments from
//!    the *first dirty offset* (the cleaner checkpoint) on are dirty; the log is cleaned when
//!    dirty bytes / cleanable bytes reach `min.cleanable.dirty.ratio`, or a tombstone's delete
//!    horizon has passed.
//! 2. An offset map (key hash -> latest offset) is built over the dirty segments, bounded by
//!    `log.cleaner.dedupe.buffer.size`. A record is dropped only when the map holds a later
//!    offset for its key, so a map that filled up early is still safe, only less thorough.
//! 3. Segments are rewritten in groups (up to `segment.bytes` of input) into
//!    `<base>.log.cleaned`. Kept batches keep their base offset, last offset delta, producer
//!    fields and epoch; records keep their offsets. A tombstone (null value) is kept until its
//!    batch's delete horizon (KIP-534: set to now + `delete.retention.ms` the first time the
//!    cleaner keeps it) has passed.
//! 4. Swap, crash-safely: fsync the cleaned files, rename `.cleaned` -> `.swap` (the commit
//!    point: `Log::open` completes a swap it finds), rename the replaced segments to
//!    `.deleted`, then `.swap` -> live names. If the log changed under the cleaner (retention,
//!    truncation), the pass is abandoned.
//!
//! Compressed batches are kept whole and their keys do not enter the map (decompression
//! arrives with the broker's compression support).
//!
//! Transactions: the cleanable range also ends at the first undecided transaction (the last
//! stable offset, as Kafka's), so every transaction in it is decided. The batches of aborted
//! transactions (from the aborted-transaction indexes) neither enter the map (an aborted
//! record never supersedes a committed one) nor survive the rewrite. A marker whose
//! transaction has no record left is stamped with a delete horizon and dropped once it passed,
//! as Kafka's cleaner does (a reader that saw the records in time sees the marker too). A
//! cleaned segment's aborted-transaction index is empty: the aborted data it indexed is gone.

use std::collections::HashMap;
use std::fs::File;
use std::hash::{BuildHasher, RandomState};
use std::path::Path;

use super::batch::{BatchBuilder, BatchHeader, RecordIter};
use super::error::{LogError, Result};
use super::partition_log::Log;
use super::segment::{AppendedBatch, CLEANED_SUFFIX, SWAP_SUFFIX, Segment, SegmentSnapshot};

/// Memory one offset-map entry costs (128-bit key hash, offset, table overhead).
pub const OFFSET_MAP_ENTRY_BYTES: usize = 40;

/// Key hash -> latest offset, with a fixed entry budget.
struct OffsetMap {
    entries: HashMap<[u64; 2], u64>,
    capacity: usize,
    hashers: (RandomState, RandomState),
}

impl OffsetMap {
    fn new(memory_bytes: usize) -> Self {
        let capacity = (memory_bytes / OFFSET_MAP_ENTRY_BYTES).max(1);
        OffsetMap {
            entries: HashMap::new(),
            capacity,
            hashers: (RandomState::new(), RandomState::new()),
        }
    }
    fn hash(&self, key: &[u8]) -> [u64; 2] {
        [self.hashers.0.hash_one(key), self.hashers.1.hash_one(key)]
    }
    /// Records `offset` as the latest for `key`; false when the map is full.
    fn put(&mut self, key: &[u8], offset: u64) -> bool {
        let hash = self.hash(key);
        if let Some(latest) = self.entries.get_mut(&hash) {
            *latest = (*latest).max(offset);
            return true;
        }
        if self.entries.len() >= self.capacity {
            return false;
        }
        self.entries.insert(hash, offset);
        true
    }
    fn latest(&self, key: &[u8]) -> Option<u64> {
        self.entries.get(&self.hash(key)).copied()
    }
}

/// What a cleaning pass could do now.
#[derive(Debug, Clone, PartialEq)]
pub struct CleanablePlan {
    pub first_dirty_offset: u64,
    pub first_uncleanable_offset: u64,
    pub clean_bytes: u64,
    pub dirty_bytes: u64,
    pub dirty_ratio: f64,
    /// Whether `min.cleanable.dirty.ratio` or a passed delete horizon calls for a pass.
    pub due: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanOutcome {
    pub segments_cleaned: usize,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub records_removed: u64,
    pub tombstones_removed: u64,
    /// The checkpoint for the next pass.
    pub first_dirty_offset: u64,
    /// The earliest delete horizon among kept tombstone batches.
    pub next_delete_horizon_ms: Option<i64>,
    pub abandoned: bool,
}

impl Log {
    /// The cleanable range, given the checkpointed first dirty offset; `None` when the log is
    /// not compacted or nothing is cleanable.
    pub fn cleanable(&self, first_dirty_offset: u64) -> Option<CleanablePlan> {
        let config = self.config();
        if !config.cleanup_policy.compact || self.is_offline() {
            return None;
        }
        let now = self.clock().now_ms();
        let state = self.read_state();
        let active_base = state.active().base_offset;
        // Only decided transactions are compacted: not past the first undecided one.
        let mut bound = active_base
            .min(state.high_watermark)
            .min(self.first_unstable_offset());
        if config.min_compaction_lag_ms > 0 {
            let young = state
                .segments
                .values()
                .find(|s| s.max_timestamp() > now.saturating_sub(config.min_compaction_lag_ms));
            if let Some(segment) = young {
                bound = bound.min(segment.base_offset);
            }
        }
        let first_uncleanable = state
            .segments
            .range(..=bound)
            .next_back()
            .map_or(0, |(b, _)| *b);
        // A checkpoint past the log end is stale (the log was cut after it was written):
        // clean from the start again, as Kafka does.
        let first_dirty = if first_dirty_offset > state.log_end_offset {
            state.log_start_offset
        } else {
            first_dirty_offset.max(state.log_start_offset)
        };
        let (mut clean_bytes, mut dirty_bytes) = (0, 0);
        for segment in state.segments.range(..first_uncleanable).map(|(_, s)| s) {
            if segment.next_offset() <= first_dirty {
                clean_bytes += segment.size();
            } else {
                dirty_bytes += segment.size();
            }
        }
        let total = clean_bytes + dirty_bytes;
        if total == 0 {
            return None;
        }
        let dirty_ratio = dirty_bytes as f64 / total as f64;
        let horizon_passed = self.delete_horizon_due_ms() <= now;
        let due =
            (dirty_bytes > 0 && dirty_ratio >= config.min_cleanable_dirty_ratio) || horizon_passed;
        Some(CleanablePlan {
            first_dirty_offset: first_dirty,
            first_uncleanable_offset: first_uncleanable,
            clean_bytes,
            dirty_bytes,
            dirty_ratio,
            due,
        })
    }

    /// Runs one cleaning pass over the cleanable range. `offset_map_bytes` bounds the memory of
    /// the key map.
    pub fn clean(&self, first_dirty_offset: u64, offset_map_bytes: usize) -> Result<CleanOutcome> {
        let Some(plan) = self.cleanable(first_dirty_offset) else {
            return Ok(CleanOutcome {
                first_dirty_offset,
                ..Default::default()
            });
        };
        let generation = self.generation();
        let snapshots: Vec<SegmentSnapshot> = {
            let state = self.read_state();
            state
                .segments
                .range(..plan.first_uncleanable_offset)
                .map(|(_, s)| s.snapshot())
                .collect::<Result<_, _>>()?
        };
        let first_base = snapshots.first().map_or(0, |s| s.base_offset);
        let aborted = Aborted::new(self.collect_aborted(first_base, plan.first_uncleanable_offset));
        let mut map = OffsetMap::new(offset_map_bytes);
        let end = build_offset_map(
            &mut map,
            &snapshots,
            plan.first_dirty_offset,
            plan.first_uncleanable_offset,
            &aborted,
        )?;
        let mut outcome = CleanOutcome {
            first_dirty_offset: end,
            ..Default::default()
        };
        let config = self.config();
        let mut txns = TxnTracking::default();
        let mut group: Vec<&SegmentSnapshot> = Vec::new();
        let mut group_bytes = 0u64;
        for snapshot in snapshots.iter().filter(|s| s.base_offset < end) {
            let fits = group.first().is_none_or(|first| {
                group_bytes + snapshot.size <= config.segment_bytes
                    && snapshot.next_offset - first.base_offset <= u64::from(u32::MAX)
            });
            if !fits {
                self.clean_group(&group, &map, &aborted, &mut txns, generation, &mut outcome)?;
                group.clear();
                group_bytes = 0;
                if outcome.abandoned {
                    return Ok(outcome);
                }
            }
            group_bytes += snapshot.size;
            group.push(snapshot);
        }
        if !group.is_empty() {
            self.clean_group(&group, &map, &aborted, &mut txns, generation, &mut outcome)?;
        }
        if !outcome.abandoned {
            self.set_delete_horizon_due_ms(outcome.next_delete_horizon_ms.unwrap_or(i64::MAX));
            tracing::info!(
                topic_partition = %self.topic_partition(),
                segments = outcome.segments_cleaned,
                bytes_read = outcome.bytes_read,
                bytes_written = outcome.bytes_written,
                records_removed = outcome.records_removed,
                tombstones_removed = outcome.tombstones_removed,
                "compacted log"
            );
        }
        Ok(outcome)
    }

    /// Rewrites one group of segments into a `.cleaned` segment and swaps it in.
    fn clean_group(
        &self,
        group: &[&SegmentSnapshot],
        map: &OffsetMap,
        aborted: &Aborted,
        txns: &mut TxnTracking,
        generation: u64,
        outcome: &mut CleanOutcome,
    ) -> Result<()> {
        let config = self.config();
        let now = self.clock().now_ms();
        let base = group[0].base_offset;
        let _ = std::fs::remove_file(super::segment::segment_path(
            self.dir(),
            base,
            &format!(".log{SWAP_SUFFIX}"),
        ));
        let mut cleaned =
            Segment::create_with_suffix(self.dir(), base, &config, now, CLEANED_SUFFIX)?;
        let mut filter = BatchFilter {
            map,
            aborted,
            txns,
            now,
            delete_retention_ms: config.delete_retention_ms,
            outcome,
        };
        for snapshot in group {
            for item in snapshot.batches() {
                let (header, bytes) = item.map_err(|e| LogError::io(self.dir(), e))?;
                filter.outcome.bytes_read += bytes.len() as u64;
                let Some(kept) = filter.filter(&header, bytes) else {
                    continue;
                };
                let kept_header = BatchHeader::parse(&kept).expect("filter returns whole batches");
                let appended = AppendedBatch {
                    base_offset: kept_header.base_offset as u64,
                    last_offset: kept_header.last_offset() as u64,
                    max_timestamp: kept_header.max_timestamp,
                    relative_position: 0,
                    size: kept.len() as u64,
                };
                cleaned.append(&kept, &[appended], config.index_interval_bytes)?;
                filter.outcome.bytes_written += kept.len() as u64;
            }
        }
        cleaned.seal()?;
        let mut handles = Vec::new();
        cleaned.sync_handles(true, &mut handles);
        super::segment::sync_all(&handles)?;
        self.swap_in(cleaned, group, generation, outcome)
    }

    fn swap_in(
        &self,
        mut cleaned: Segment,
        group: &[&SegmentSnapshot],
        generation: u64,
        outcome: &mut CleanOutcome,
    ) -> Result<()> {
        let mut state = self.write_state();
        // Same generation: no truncation or deletion since the pass began, so segments with the
        // same base and size are the ones read.
        let unchanged = self.generation() == generation
            && group.iter().all(|s| {
                state
                    .segments
                    .get(&s.base_offset)
                    .is_some_and(|live| live.size() == s.size)
                    && state.active().base_offset != s.base_offset
            });
        if !unchanged {
            tracing::info!(topic_partition = %self.topic_partition(), "log changed during cleaning; abandoning the pass");
            outcome.abandoned = true;
            drop(state);
            for path in cleaned.rename_to_deleted()? {
                let _ = std::fs::remove_file(path);
            }
            return Ok(());
        }
        let result = (|| {
            cleaned.rename_suffix(SWAP_SUFFIX)?;
            sync_dir(self.dir())?;
            let mut deleted = Vec::new();
            for snapshot in group {
                let old = state
                    .segments
                    .remove(&snapshot.base_offset)
                    .expect("checked above");
                deleted.extend(old.rename_to_deleted()?);
            }
            self.add_pending_deletes(deleted);
            cleaned.rename_suffix("")?;
            sync_dir(self.dir())?;
            state.segments.insert(cleaned.base_offset, cleaned);
            Ok(())
        })();
        self.mark_offline_on(result)?;
        outcome.segments_cleaned += group.len();
        Ok(())
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| LogError::io(dir, e))
}

/// Fills the map from the dirty segments; returns the offset up to which segments may be
/// cleaned (all dirty ones, or fewer when the map filled up).
fn build_offset_map(
    map: &mut OffsetMap,
    snapshots: &[SegmentSnapshot],
    first_dirty: u64,
    first_uncleanable: u64,
    aborted: &Aborted,
) -> Result<u64> {
    let mut first = true;
    for snapshot in snapshots.iter().filter(|s| s.next_offset > first_dirty) {
        for item in snapshot.batches() {
            let (header, bytes) = item.map_err(|e| LogError::io(Path::new("<segment>"), e))?;
            // An aborted record never supersedes a committed one.
            if header.is_compressed() || header.is_control() || aborted.contains(&header) {
                continue;
            }
            for record in RecordIter::new(&header, &bytes) {
                let Ok(record) = record else { break };
                let Some(key) = record.key else { continue };
                if !map.put(key, record.offset(&header) as u64) {
                    // Full: clean up to this segment (or through it, if it is the first dirty
                    // one, so that every pass makes progress).
                    return Ok(if first {
                        snapshot.next_offset
                    } else {
                        snapshot.base_offset
                    });
                }
            }
        }
        first = false;
    }
    Ok(first_uncleanable)
}

/// The aborted transactions of the range being cleaned, by producer: (first offset, marker).
struct Aborted(HashMap<i64, Vec<(u64, u64)>>);

impl Aborted {
    fn new(entries: Vec<super::txn_index::AbortedTxn>) -> Aborted {
        let mut by_producer: HashMap<i64, Vec<(u64, u64)>> = HashMap::new();
        for entry in entries {
            by_producer
                .entry(entry.producer_id)
                .or_default()
                .push((entry.first_offset, entry.last_offset));
        }
        Aborted(by_producer)
    }

    /// A data batch of an aborted transaction.
    fn contains(&self, header: &BatchHeader) -> bool {
        if !header.is_transactional() || header.is_control() {
            return false;
        }
        let offset = header.base_offset.max(0) as u64;
        self.0.get(&header.producer_id).is_some_and(|ranges| {
            ranges
                .iter()
                .any(|(first, marker)| *first <= offset && offset < *marker)
        })
    }
}

/// Per producer, whether the transaction being read (since its previous marker) kept any
/// record: a marker whose transaction kept none can go, once its delete horizon has passed
/// (Kafka's rule). Each pass reads from the log start, so a transaction's data is always seen
/// before its marker.
#[derive(Default)]
struct TxnTracking {
    retained: HashMap<i64, bool>,
}

struct BatchFilter<'a> {
    map: &'a OffsetMap,
    aborted: &'a Aborted,
    txns: &'a mut TxnTracking,
    now: i64,
    delete_retention_ms: i64,
    outcome: &'a mut CleanOutcome,
}

impl BatchFilter<'_> {
    /// The batch as it should be written to the cleaned segment, or `None` to drop it.
    fn filter(&mut self, header: &BatchHeader, bytes: Vec<u8>) -> Option<Vec<u8>> {
        // Aborted data is dropped whole (Kafka's cleaner does the same): no reader may see it.
        if self.aborted.contains(header) {
            self.outcome.records_removed += header.records_count.max(0) as u64;
            return None;
        }
        if header.is_control() {
            return self.filter_marker(header, bytes);
        }
        let kept = self.filter_records(header, bytes);
        if kept.is_some() && header.is_transactional() {
            self.txns.retained.insert(header.producer_id, true);
        }
        kept
    }

    /// A transaction marker: kept while its transaction kept a record; otherwise stamped with
    /// a delete horizon (now + `delete.retention.ms`, KIP-534) and dropped once it passed, so
    /// a reader that saw the transaction's records still sees its marker.
    fn filter_marker(&mut self, header: &BatchHeader, bytes: Vec<u8>) -> Option<Vec<u8>> {
        let retained = self
            .txns
            .retained
            .insert(header.producer_id, false)
            .unwrap_or(false);
        if retained || header.producer_id < 0 {
            return Some(bytes);
        }
        match header.delete_horizon_ms() {
            Some(horizon) if self.now >= horizon => {
                self.outcome.records_removed += header.records_count.max(0) as u64;
                None
            }
            Some(horizon) => {
                self.note_horizon(horizon);
                Some(bytes)
            }
            None => {
                let horizon = self.now.saturating_add(self.delete_retention_ms);
                let mut builder = BatchBuilder::from_header(header).delete_horizon(horizon);
                for record in RecordIter::new(header, &bytes) {
                    let Ok(record) = record else {
                        return Some(bytes);
                    };
                    builder.push_raw(
                        record.offset_delta,
                        record.timestamp(header),
                        record.key,
                        record.value,
                        record.header_count,
                        record.headers,
                    );
                }
                self.note_horizon(horizon);
                Some(builder.last_offset_delta(header.last_offset_delta).build())
            }
        }
    }

    fn note_horizon(&mut self, horizon: i64) {
        let next = self.outcome.next_delete_horizon_ms.get_or_insert(horizon);
        *next = (*next).min(horizon);
    }

    /// A data batch with superseded records and tombstones past their horizon dropped.
    fn filter_records(&mut self, header: &BatchHeader, bytes: Vec<u8>) -> Option<Vec<u8>> {
        if header.is_compressed() {
            return Some(bytes);
        }
        let horizon = header.delete_horizon_ms();
        let mut kept = Vec::new();
        let mut dropped = false;
        let mut tombstones_kept = false;
        for record in RecordIter::new(header, &bytes) {
            let Ok(record) = record else {
                return Some(bytes);
            };
            let offset = record.offset(header) as u64;
            let superseded = record
                .key
                .and_then(|k| self.map.latest(k))
                .is_some_and(|latest| latest > offset);
            if superseded {
                self.outcome.records_removed += 1;
                dropped = true;
                continue;
            }
            if record.value.is_none() {
                if horizon.is_some_and(|h| self.now >= h) {
                    self.outcome.tombstones_removed += 1;
                    self.outcome.records_removed += 1;
                    dropped = true;
                    continue;
                }
                tombstones_kept = true;
            }
            kept.push(record);
        }
        let needs_horizon = tombstones_kept && horizon.is_none();
        let horizon_after = if needs_horizon {
            Some(self.now.saturating_add(self.delete_retention_ms))
        } else {
            horizon
        };
        if tombstones_kept {
            if let Some(h) = horizon_after {
                let next = self.outcome.next_delete_horizon_ms.get_or_insert(h);
                *next = (*next).min(h);
            }
        }
        if !dropped && !needs_horizon {
            return Some(bytes);
        }
        if kept.is_empty() {
            return None;
        }
        let mut builder = BatchBuilder::from_header(header);
        if let Some(h) = horizon_after.filter(|_| needs_horizon) {
            builder = builder.delete_horizon(h);
        }
        for record in &kept {
            builder.push_raw(
                record.offset_delta,
                record.timestamp(header),
                record.key,
                record.value,
                record.header_count,
                record.headers,
            );
        }
        Some(builder.last_offset_delta(header.last_offset_delta).build())
    }
}
