//! Producer state of one partition: for each producer id, its epoch, the metadata of its last
//! five batches (sequence range and offsets), and, for a transactional producer, the first
//! offset of its open transaction and the epoch of the coordinator that last wrote it a marker,
//! as Kafka keeps it.
//!
//! Transactions: a producer's first transactional batch opens its transaction at that offset;
//! its commit or abort marker (a control batch the coordinator has the leader write) closes
//! it. The smallest first offset of open transactions bounds the last stable offset. A marker
//! from an older producer epoch is INVALID_PRODUCER_EPOCH, from an older coordinator epoch
//! TRANSACTION_COORDINATOR_FENCED; a non-transactional batch from a producer with an open
//! transaction is INVALID_TXN_STATE.
//!
//! The leader checks every idempotent batch before appending it: a retried batch (same
//! sequences as one of the last five) is a duplicate, answered with the offset it first got and
//! not appended again; a gap in sequences is OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch is
//! INVALID_PRODUCER_EPOCH. The state survives restarts in snapshot files beside the segments
//! (`<offset>.snapshot`, the state after every batch below that offset); on open, the newest
//! snapshot is loaded and the log after it replayed.

use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::protocol::errors::KafkaError;

/// How many batches per producer are remembered for duplicate detection (Kafka's
/// `max.in.flight.requests.per.connection` limit for idempotence).
pub const BATCHES_PER_PRODUCER: usize = 5;
/// Snapshot files kept per partition.
const SNAPSHOTS_KEPT: usize = 2;
const SNAPSHOT_MAGIC: &[u8; 4] = b"SLPS";
/// Version 2 adds each producer's coordinator epoch and open transaction; 1 is still read.
const SNAPSHOT_VERSION: u16 = 2;
const SNAPSHOT_SUFFIX: &str = ".snapshot";
/// Bytes of one batch entry and of one producer entry's fixed part in a snapshot.
const BATCH_ENTRY_BYTES: usize = 4 + 4 + 8 + 8 + 8;
const PRODUCER_ENTRY_BYTES_V1: usize = 8 + 2 + 8 + 1;
const PRODUCER_ENTRY_BYTES: usize = 8 + 2 + 8 + 4 + 8 + 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMetadata {
    pub first_sequence: i32,
    pub last_sequence: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    pub epoch: i16,
    pub batches: VecDeque<BatchMetadata>,
    pub last_timestamp: i64,
    /// The epoch of the transaction coordinator that wrote this producer's last marker (-1:
    /// none yet).
    pub coordinator_epoch: i32,
    /// The first offset of the producer's open transaction in this partition.
    pub current_txn_first_offset: Option<i64>,
}

impl Default for ProducerEntry {
    fn default() -> Self {
        ProducerEntry {
            epoch: 0,
            batches: VecDeque::new(),
            last_timestamp: 0,
            coordinator_epoch: -1,
            current_txn_first_offset: None,
        }
    }
}

/// A transaction a marker closed in this partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// The marker's offset.
    pub last_offset: i64,
    pub aborted: bool,
}

/// A transaction marker as producer state sees it.
#[derive(Debug, Clone, Copy)]
pub struct MarkerBatch {
    pub producer_id: i64,
    pub epoch: i16,
    pub coordinator_epoch: i32,
    pub commit: bool,
    pub offset: i64,
    pub timestamp: i64,
}

/// An idempotent batch as the leader sees it before appending.
#[derive(Debug, Clone, Copy)]
pub struct ProducerBatch {
    pub producer_id: i64,
    pub epoch: i16,
    pub first_sequence: i32,
    pub last_sequence: i32,
    pub transactional: bool,
}

/// What checking a batch found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Append it.
    Append,
    /// Already appended: answer with these offsets.
    Duplicate(BatchMetadata),
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("I/O on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("corrupt producer snapshot {0}")]
    Corrupt(PathBuf),
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProducerStateManager {
    producers: BTreeMap<i64, ProducerEntry>,
    /// Open transactions: first offset -> producer id.
    ongoing: BTreeMap<i64, i64>,
}

fn next_sequence(sequence: i32) -> i32 {
    if sequence == i32::MAX {
        0
    } else {
        sequence + 1
    }
}

impl ProducerStateManager {
    pub fn producer(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// Checks a batch against the state (Kafka's `ProducerAppendInfo.checkSequence`).
    pub fn check(&self, batch: &ProducerBatch) -> Result<Check, KafkaError> {
        let Some(entry) = self.producers.get(&batch.producer_id) else {
            // Unknown producer (new, or its state expired with the log): any sequence starts it.
            return Ok(Check::Append);
        };
        if batch.epoch < entry.epoch {
            return Err(KafkaError::InvalidProducerEpoch);
        }
        if batch.epoch > entry.epoch {
            // A bumped epoch restarts sequences at 0.
            return if batch.first_sequence == 0 {
                Ok(Check::Append)
            } else {
                Err(KafkaError::OutOfOrderSequenceNumber)
            };
        }
        if !batch.transactional && entry.current_txn_first_offset.is_some() {
            return Err(KafkaError::InvalidTxnState);
        }
        if let Some(duplicate) = entry.batches.iter().find(|b| {
            b.first_sequence == batch.first_sequence && b.last_sequence == batch.last_sequence
        }) {
            return Ok(Check::Duplicate(*duplicate));
        }
        match entry.batches.back() {
            Some(last) if batch.first_sequence != next_sequence(last.last_sequence) => {
                Err(KafkaError::OutOfOrderSequenceNumber)
            }
            // A marker bumped the epoch (KIP-890): sequences restart at 0.
            None if batch.first_sequence != 0 => Err(KafkaError::OutOfOrderSequenceNumber),
            _ => Ok(Check::Append),
        }
    }

    /// Records a batch appended at `first_offset..=last_offset` (by this leader, or replayed
    /// from the log).
    pub fn update(&mut self, batch: &ProducerBatch, metadata: BatchMetadata) {
        let entry = self.producers.entry(batch.producer_id).or_default();
        if batch.epoch != entry.epoch {
            entry.epoch = batch.epoch;
            entry.batches.clear();
        }
        if entry.batches.len() == BATCHES_PER_PRODUCER {
            entry.batches.pop_front();
        }
        entry.batches.push_back(metadata);
        entry.last_timestamp = entry.last_timestamp.max(metadata.max_timestamp);
        if batch.transactional && entry.current_txn_first_offset.is_none() {
            entry.current_txn_first_offset = Some(metadata.first_offset);
            self.ongoing
                .insert(metadata.first_offset, batch.producer_id);
        }
    }

    /// Checks a batch the broker writes for a producer (a transactional offset commit of the
    /// group coordinator): its epoch and transaction only, it has no sequence.
    pub fn check_internal(&self, batch: &ProducerBatch) -> Result<(), KafkaError> {
        let Some(entry) = self.producers.get(&batch.producer_id) else {
            return Ok(());
        };
        if batch.epoch < entry.epoch {
            return Err(KafkaError::InvalidProducerEpoch);
        }
        if !batch.transactional && entry.current_txn_first_offset.is_some() {
            return Err(KafkaError::InvalidTxnState);
        }
        Ok(())
    }

    /// Checks a transaction marker the coordinator asks this leader to write (Kafka's
    /// `ProducerAppendInfo.appendEndTxnMarker` checks).
    pub fn check_marker(
        &self,
        producer_id: i64,
        epoch: i16,
        coordinator_epoch: i32,
    ) -> Result<(), KafkaError> {
        let Some(entry) = self.producers.get(&producer_id) else {
            return Ok(());
        };
        if epoch < entry.epoch {
            return Err(KafkaError::InvalidProducerEpoch);
        }
        if coordinator_epoch < entry.coordinator_epoch {
            return Err(KafkaError::TransactionCoordinatorFenced);
        }
        Ok(())
    }

    /// Records a marker appended at `marker.offset`; the transaction it closed, if the producer
    /// had one open here.
    pub fn complete_txn(&mut self, marker: &MarkerBatch) -> Option<CompletedTxn> {
        let entry = self.producers.entry(marker.producer_id).or_default();
        if marker.epoch != entry.epoch {
            entry.epoch = marker.epoch;
            entry.batches.clear();
        }
        entry.coordinator_epoch = marker.coordinator_epoch;
        entry.last_timestamp = entry.last_timestamp.max(marker.timestamp);
        let first_offset = entry.current_txn_first_offset.take()?;
        self.ongoing.remove(&first_offset);
        Some(CompletedTxn {
            producer_id: marker.producer_id,
            first_offset,
            last_offset: marker.offset,
            aborted: !marker.commit,
        })
    }

    /// The first offset of the oldest open transaction.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.ongoing.keys().next().copied()
    }

    /// Every producer with its state (DescribeProducers).
    pub fn producers(&self) -> impl Iterator<Item = (i64, &ProducerEntry)> + '_ {
        self.producers.iter().map(|(id, entry)| (*id, entry))
    }

    /// Writes the state as `<dir>/<offset>.snapshot` (durably), then keeps only the newest.
    pub fn write_snapshot(&self, dir: &Path, offset: u64) -> Result<(), SnapshotError> {
        let mut body = Vec::with_capacity(4 + self.producers.len() * 64);
        body.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        for (producer_id, entry) in &self.producers {
            body.extend_from_slice(&producer_id.to_be_bytes());
            body.extend_from_slice(&entry.epoch.to_be_bytes());
            body.extend_from_slice(&entry.last_timestamp.to_be_bytes());
            body.extend_from_slice(&entry.coordinator_epoch.to_be_bytes());
            body.extend_from_slice(&entry.current_txn_first_offset.unwrap_or(-1).to_be_bytes());
            body.push(entry.batches.len() as u8);
            for b in &entry.batches {
                body.extend_from_slice(&b.first_sequence.to_be_bytes());
                body.extend_from_slice(&b.last_sequence.to_be_bytes());
                body.extend_from_slice(&b.first_offset.to_be_bytes());
                body.extend_from_slice(&b.last_offset.to_be_bytes());
                body.extend_from_slice(&b.max_timestamp.to_be_bytes());
            }
        }
        let mut file_bytes = Vec::with_capacity(10 + body.len());
        file_bytes.extend_from_slice(SNAPSHOT_MAGIC);
        file_bytes.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        file_bytes.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
        file_bytes.extend_from_slice(&body);
        let path = snapshot_path(dir, offset);
        let temporary = path.with_extension("snapshot.tmp");
        let io = |source| SnapshotError::Io {
            path: temporary.clone(),
            source,
        };
        let mut file = fs::File::create(&temporary).map_err(io)?;
        file.write_all(&file_bytes).map_err(io)?;
        file.sync_data().map_err(io)?;
        fs::rename(&temporary, &path).map_err(io)?;
        if let Ok(dir_handle) = fs::File::open(dir) {
            let _ = dir_handle.sync_all();
        }
        let snapshots = list_snapshots(dir);
        for (_, old) in snapshots.iter().rev().skip(SNAPSHOTS_KEPT) {
            let _ = fs::remove_file(old);
        }
        Ok(())
    }

    /// Loads the newest readable snapshot at or below `log_end_offset`; snapshots above it
    /// (from a log since truncated) and unreadable ones are deleted. Returns the state and
    /// the offset replay must start from (`None`: no snapshot, replay the whole log).
    pub fn load_snapshot(dir: &Path, log_end_offset: u64) -> (ProducerStateManager, Option<u64>) {
        let mut snapshots = list_snapshots(dir);
        while let Some((offset, path)) = snapshots.pop() {
            if offset > log_end_offset {
                let _ = fs::remove_file(&path);
                continue;
            }
            match read_snapshot(&path) {
                Ok(state) => return (state, Some(offset)),
                Err(error) => {
                    tracing::warn!(%error, "ignoring an unreadable producer snapshot");
                    let _ = fs::remove_file(&path);
                }
            }
        }
        (ProducerStateManager::default(), None)
    }
}

fn snapshot_path(dir: &Path, offset: u64) -> PathBuf {
    dir.join(format!("{offset:020}{SNAPSHOT_SUFFIX}"))
}

/// Snapshot files of a log dir, oldest first.
fn list_snapshots(dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut found: Vec<(u64, PathBuf)> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let offset = name.strip_suffix(SNAPSHOT_SUFFIX)?.parse().ok()?;
            Some((offset, entry.path()))
        })
        .collect();
    found.sort();
    found
}

fn read_snapshot(path: &Path) -> Result<ProducerStateManager, SnapshotError> {
    let corrupt = || SnapshotError::Corrupt(path.to_owned());
    let bytes = fs::read(path).map_err(|source| SnapshotError::Io {
        path: path.to_owned(),
        source,
    })?;
    if bytes.len() < 14 || &bytes[..4] != SNAPSHOT_MAGIC {
        return Err(corrupt());
    }
    let version = u16::from_be_bytes([bytes[4], bytes[5]]);
    if !(1..=SNAPSHOT_VERSION).contains(&version) {
        return Err(corrupt());
    }
    let crc = u32::from_be_bytes([bytes[6], bytes[7], bytes[8], bytes[9]]);
    let body = &bytes[10..];
    if crc32c::crc32c(body) != crc {
        return Err(corrupt());
    }
    let mut input = body;
    let mut take = |n: usize| -> Result<&[u8], SnapshotError> {
        if input.len() < n {
            return Err(corrupt());
        }
        let (head, rest) = input.split_at(n);
        input = rest;
        Ok(head)
    };
    let be64 = |b: &[u8]| i64::from_be_bytes(b.try_into().unwrap_or_default());
    let be32 = |b: &[u8]| i32::from_be_bytes(b.try_into().unwrap_or_default());
    let count = u32::from_be_bytes(take(4)?.try_into().map_err(|_| corrupt())?) as usize;
    let mut state = ProducerStateManager::default();
    for _ in 0..count {
        let fixed = take(if version == 1 {
            PRODUCER_ENTRY_BYTES_V1
        } else {
            PRODUCER_ENTRY_BYTES
        })?;
        let producer_id = be64(&fixed[..8]);
        let epoch = i16::from_be_bytes([fixed[8], fixed[9]]);
        let last_timestamp = be64(&fixed[10..18]);
        let (coordinator_epoch, current_txn_first_offset) = if version == 1 {
            (-1, None)
        } else {
            let first = be64(&fixed[22..30]);
            (be32(&fixed[18..22]), (first >= 0).then_some(first))
        };
        let batch_count = fixed[fixed.len() - 1] as usize;
        if batch_count > BATCHES_PER_PRODUCER {
            return Err(corrupt());
        }
        let mut batches = VecDeque::with_capacity(batch_count);
        for _ in 0..batch_count {
            let b = take(BATCH_ENTRY_BYTES)?;
            batches.push_back(BatchMetadata {
                first_sequence: be32(&b[..4]),
                last_sequence: be32(&b[4..8]),
                first_offset: be64(&b[8..16]),
                last_offset: be64(&b[16..24]),
                max_timestamp: be64(&b[24..32]),
            });
        }
        if let Some(first) = current_txn_first_offset {
            state.ongoing.insert(first, producer_id);
        }
        state.producers.insert(
            producer_id,
            ProducerEntry {
                epoch,
                batches,
                last_timestamp,
                coordinator_epoch,
                current_txn_first_offset,
            },
        );
    }
    if !input.is_empty() {
        return Err(corrupt());
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(epoch: i16, first: i32, last: i32) -> ProducerBatch {
        ProducerBatch {
            producer_id: 7,
            epoch,
            first_sequence: first,
            last_sequence: last,
            transactional: false,
        }
    }

    fn metadata(first: i32, last: i32, offset: i64) -> BatchMetadata {
        BatchMetadata {
            first_sequence: first,
            last_sequence: last,
            first_offset: offset,
            last_offset: offset + i64::from(last - first),
            max_timestamp: 1000 + offset,
        }
    }

    fn append(state: &mut ProducerStateManager, b: ProducerBatch, offset: i64) {
        assert_eq!(state.check(&b), Ok(Check::Append));
        state.update(&b, metadata(b.first_sequence, b.last_sequence, offset));
    }

    #[test]
    fn sequences_duplicates_and_epochs() {
        let mut state = ProducerStateManager::default();
        // An unknown producer may start anywhere (its state may have expired).
        append(&mut state, batch(0, 10, 14), 0);
        append(&mut state, batch(0, 15, 19), 5);
        // A retry of either batch is a duplicate with its first offsets.
        assert_eq!(
            state.check(&batch(0, 10, 14)),
            Ok(Check::Duplicate(metadata(10, 14, 0)))
        );
        assert_eq!(
            state.check(&batch(0, 15, 19)),
            Ok(Check::Duplicate(metadata(15, 19, 5)))
        );
        // A gap, or an overlap that is not a retry, is out of order.
        assert_eq!(
            state.check(&batch(0, 21, 22)),
            Err(KafkaError::OutOfOrderSequenceNumber)
        );
        assert_eq!(
            state.check(&batch(0, 12, 16)),
            Err(KafkaError::OutOfOrderSequenceNumber)
        );
        // An older epoch is fenced; a newer one must restart at 0.
        append(&mut state, batch(1, 0, 0), 10);
        assert_eq!(
            state.check(&batch(0, 20, 20)),
            Err(KafkaError::InvalidProducerEpoch)
        );
        assert_eq!(
            state.check(&batch(2, 5, 5)),
            Err(KafkaError::OutOfOrderSequenceNumber)
        );
        assert_eq!(state.check(&batch(2, 0, 3)), Ok(Check::Append));
    }

    #[test]
    fn only_the_last_five_batches_are_remembered_and_sequences_wrap() {
        let mut state = ProducerStateManager::default();
        for i in 0..7 {
            append(&mut state, batch(0, i, i), i64::from(i));
        }
        assert_eq!(state.producer(7).map(|p| p.batches.len()), Some(5));
        assert_eq!(
            state.check(&batch(0, 0, 0)),
            Err(KafkaError::OutOfOrderSequenceNumber)
        );
        assert!(matches!(
            state.check(&batch(0, 2, 2)),
            Ok(Check::Duplicate(_))
        ));
        let mut wrapping = ProducerStateManager::default();
        append(&mut wrapping, batch(0, i32::MAX - 1, i32::MAX), 0);
        assert_eq!(wrapping.check(&batch(0, 0, 4)), Ok(Check::Append));
    }

    #[test]
    fn transactions_open_at_their_first_batch_and_close_at_their_marker() {
        let mut state = ProducerStateManager::default();
        let txn = |first, last| ProducerBatch {
            transactional: true,
            ..batch(3, first, last)
        };
        append(&mut state, txn(0, 4), 100);
        append(&mut state, txn(5, 9), 105);
        assert_eq!(state.first_unstable_offset(), Some(100));
        // A non-transactional write inside the transaction is refused.
        assert_eq!(
            state.check(&batch(3, 10, 10)),
            Err(KafkaError::InvalidTxnState)
        );
        // Markers from an older producer epoch or coordinator are fenced.
        assert_eq!(
            state.check_marker(7, 2, 0),
            Err(KafkaError::InvalidProducerEpoch)
        );
        let marker = MarkerBatch {
            producer_id: 7,
            epoch: 3,
            coordinator_epoch: 5,
            commit: false,
            offset: 110,
            timestamp: 2_000,
        };
        assert_eq!(
            state.complete_txn(&marker),
            Some(CompletedTxn {
                producer_id: 7,
                first_offset: 100,
                last_offset: 110,
                aborted: true
            })
        );
        assert_eq!(state.first_unstable_offset(), None);
        assert_eq!(
            state.check_marker(7, 3, 4),
            Err(KafkaError::TransactionCoordinatorFenced)
        );
        // A second marker closes nothing; a new transaction opens at its first batch.
        assert_eq!(
            state.complete_txn(&MarkerBatch {
                offset: 111,
                ..marker
            }),
            None
        );
        append(&mut state, txn(10, 10), 112);
        assert_eq!(state.first_unstable_offset(), Some(112));
        // A marker with a bumped epoch (KIP-890) resets sequences.
        state.complete_txn(&MarkerBatch {
            epoch: 4,
            offset: 113,
            ..marker
        });
        assert_eq!(
            state.check(&batch(4, 3, 3)),
            Err(KafkaError::OutOfOrderSequenceNumber)
        );
        assert_eq!(state.check(&batch(4, 0, 0)), Ok(Check::Append));
    }

    #[test]
    fn snapshots_round_trip_and_bad_ones_are_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut state = ProducerStateManager::default();
        for producer_id in 0..3 {
            for i in 0..6 {
                let b = ProducerBatch {
                    producer_id,
                    epoch: 2,
                    first_sequence: i * 2,
                    last_sequence: i * 2 + 1,
                    transactional: producer_id == 1 && i == 5,
                };
                state.update(&b, metadata(i * 2, i * 2 + 1, i64::from(i) * 2));
            }
        }
        assert_eq!(state.first_unstable_offset(), Some(10));
        state.write_snapshot(dir.path(), 100).expect("write");
        let (loaded, from) = ProducerStateManager::load_snapshot(dir.path(), 100);
        assert_eq!(from, Some(100));
        assert_eq!(loaded, state);
        assert_eq!(loaded.first_unstable_offset(), Some(10));
        // A snapshot past the log end (the log was truncated) is not used.
        let (empty, from) = ProducerStateManager::load_snapshot(dir.path(), 99);
        assert_eq!((empty.len(), from), (0, None));
        // A corrupt snapshot falls back to an older one.
        state.write_snapshot(dir.path(), 50).expect("write");
        state.write_snapshot(dir.path(), 60).expect("write");
        let newest = snapshot_path(dir.path(), 60);
        let mut bytes = fs::read(&newest).expect("read");
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&newest, bytes).expect("write");
        let (loaded, from) = ProducerStateManager::load_snapshot(dir.path(), 100);
        assert_eq!((from, loaded), (Some(50), state));
        assert!(!newest.exists());
    }
}
