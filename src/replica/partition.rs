//! One partition replica on this broker: its log, what the committed metadata says of it
//! (leader, leader epoch, ISR), and, as leader, the producer state that makes appends
//! idempotent.

use std::sync::{Arc, Mutex, RwLock};

use sluice_raft::records::{BrokerId, Uuid};

use crate::log::batch::{BatchHeader, BatchIter, compute_crc};
use crate::log::{AppendInfo, AppendOrigin, Log, LogError, TopicPartition};
use crate::protocol::errors;
use crate::txn::producer_state::{
    BatchMetadata, Check, ProducerBatch, ProducerStateManager, SnapshotError,
};

/// What the metadata image says of this partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    pub topic_id: Uuid,
    pub leader: BrokerId,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub replicas: Vec<BrokerId>,
    pub isr: Vec<BrokerId>,
}

/// A leader append's outcome.
#[derive(Debug, Clone)]
pub struct Appended {
    pub info: AppendInfo,
    /// The batch was a producer's retry of one already appended: nothing was written and
    /// `info` gives the offsets it first got.
    pub duplicate: bool,
}

/// Why an append was refused: a Kafka error code, a message, and for INVALID_RECORD the index
/// of the batch at fault.
#[derive(Debug, Clone)]
pub struct AppendError {
    pub code: i16,
    pub message: String,
}

impl From<LogError> for AppendError {
    fn from(error: LogError) -> Self {
        AppendError {
            code: error.kafka_error_code(),
            message: error.to_string(),
        }
    }
}

/// The most bytes read at once while replaying the log into producer state.
const REPLAY_READ_BYTES: u64 = 1 << 20;

pub struct Partition {
    pub topic_partition: TopicPartition,
    pub log: Arc<Log>,
    broker_id: BrokerId,
    state: RwLock<PartitionState>,
    /// Serializes leader appends, so producer checks and the append they allow are atomic.
    producers: Mutex<ProducerStateManager>,
    /// Segments when producer state was last snapshotted: a roll triggers a new snapshot.
    snapshot_segments: Mutex<usize>,
}

impl Partition {
    /// A replica over an open log; producer state is loaded from its snapshot and the log.
    pub fn open(
        topic_partition: TopicPartition,
        log: Arc<Log>,
        broker_id: BrokerId,
        state: PartitionState,
    ) -> Result<Partition, LogError> {
        let producers = load_producer_state(&log)?;
        let segments = log.segment_count();
        Ok(Partition {
            topic_partition,
            log,
            broker_id,
            state: RwLock::new(state),
            producers: Mutex::new(producers),
            snapshot_segments: Mutex::new(segments),
        })
    }

    pub fn state(&self) -> PartitionState {
        self.state.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set_state(&self, state: PartitionState) {
        *self.state.write().unwrap_or_else(|p| p.into_inner()) = state;
        self.maybe_advance_high_watermark();
    }

    pub fn is_leader(&self) -> bool {
        self.state.read().unwrap_or_else(|p| p.into_inner()).leader == self.broker_id
    }

    /// The leader's high watermark: the smallest log end offset in the ISR. Followers' offsets
    /// come with replication; a leader alone in its ISR has its own log end.
    pub fn maybe_advance_high_watermark(&self) -> bool {
        let state = self.state.read().unwrap_or_else(|p| p.into_inner());
        if state.leader != self.broker_id || state.isr.iter().any(|r| *r != self.broker_id) {
            return false;
        }
        drop(state);
        let before = self.log.high_watermark();
        let after = self.log.set_high_watermark(self.log.log_end_offset());
        after > before
    }

    /// Appends a producer's batches as leader. `min_insync_replicas` applies to `acks=all`.
    pub fn append_as_leader(
        &self,
        records: &mut [u8],
        acks: i16,
        min_insync_replicas: usize,
    ) -> Result<Appended, AppendError> {
        let (leader_epoch, isr_size) = {
            let state = self.state.read().unwrap_or_else(|p| p.into_inner());
            if state.leader != self.broker_id {
                return Err(AppendError {
                    code: errors::NOT_LEADER_OR_FOLLOWER,
                    message: format!(
                        "broker {} is not the leader of {}",
                        self.broker_id, self.topic_partition
                    ),
                });
            }
            (state.leader_epoch, state.isr.len())
        };
        if acks == -1 && isr_size < min_insync_replicas {
            return Err(AppendError {
                code: errors::NOT_ENOUGH_REPLICAS,
                message: format!(
                    "the ISR has {isr_size} replicas, min.insync.replicas is {min_insync_replicas}"
                ),
            });
        }
        let mut producers = self.producers.lock().unwrap_or_else(|p| p.into_inner());
        let batches = producer_batches(records)?;
        for (_, batch) in &batches {
            let Some(batch) = batch else { continue };
            match producers.check(batch) {
                Ok(Check::Append) => {}
                Ok(Check::Duplicate(original)) => {
                    return Ok(Appended {
                        info: AppendInfo {
                            first_offset: original.first_offset as u64,
                            last_offset: original.last_offset as u64,
                            max_timestamp: original.max_timestamp,
                            log_append_time_ms: None,
                            log_start_offset: self.log.log_start_offset(),
                            record_count: 0,
                            bytes: 0,
                        },
                        duplicate: true,
                    });
                }
                Err(code) => {
                    return Err(AppendError {
                        code,
                        message: format!(
                            "producer {} epoch {} sequence {}: refused",
                            batch.producer_id, batch.epoch, batch.first_sequence
                        ),
                    });
                }
            }
        }
        let info = self
            .log
            .append_as_leader(records, leader_epoch, AppendOrigin::Client)?;
        let mut next_offset = info.first_offset as i64;
        for (header, batch) in &batches {
            let first_offset = next_offset;
            let last_offset = first_offset + i64::from(header.last_offset_delta);
            next_offset = last_offset + 1;
            if let Some(batch) = batch {
                producers.update(
                    batch,
                    BatchMetadata {
                        first_sequence: batch.first_sequence,
                        last_sequence: batch.last_sequence,
                        first_offset,
                        last_offset,
                        max_timestamp: info.log_append_time_ms.unwrap_or(header.max_timestamp),
                    },
                );
            }
        }
        self.maybe_snapshot(&producers);
        drop(producers);
        self.maybe_advance_high_watermark();
        Ok(Appended {
            info,
            duplicate: false,
        })
    }

    /// After a segment roll, snapshots producer state at the log end, so a restart replays
    /// at most the active segment.
    fn maybe_snapshot(&self, producers: &ProducerStateManager) {
        let segments = self.log.segment_count();
        let mut last = self
            .snapshot_segments
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if segments != *last {
            *last = segments;
            if let Err(error) = producers.write_snapshot(self.log.dir(), self.log.log_end_offset())
            {
                tracing::warn!(topic_partition = %self.topic_partition, %error, "producer snapshot failed");
            }
        }
    }

    /// Writes a producer snapshot at the log end (at shutdown).
    pub fn snapshot_producer_state(&self) -> Result<(), SnapshotError> {
        let producers = self.producers.lock().unwrap_or_else(|p| p.into_inner());
        if producers.is_empty() {
            return Ok(());
        }
        producers.write_snapshot(self.log.dir(), self.log.log_end_offset())
    }
}

/// The header of each batch in `records` with its producer fields when idempotent. Producer
/// fields are only trusted from a batch whose CRC holds (the log validates the rest).
fn producer_batches(
    records: &[u8],
) -> Result<Vec<(BatchHeader, Option<ProducerBatch>)>, AppendError> {
    let mut batches = Vec::new();
    for item in BatchIter::new(records) {
        let (position, header, bytes) = item?;
        if header.producer_id >= 0 && compute_crc(bytes) != header.crc {
            return Err(LogError::Corrupt {
                position,
                reason: "CRC mismatch".into(),
            }
            .into());
        }
        let producer = (header.producer_id >= 0).then(|| ProducerBatch {
            producer_id: header.producer_id,
            epoch: header.producer_epoch,
            first_sequence: header.base_sequence,
            last_sequence: last_sequence(header.base_sequence, header.last_offset_delta),
        });
        batches.push((header, producer));
    }
    Ok(batches)
}

fn last_sequence(base_sequence: i32, last_offset_delta: i32) -> i32 {
    // Sequences wrap at i32::MAX back to 0.
    let last = i64::from(base_sequence) + i64::from(last_offset_delta);
    if last > i64::from(i32::MAX) {
        (last - i64::from(i32::MAX) - 1) as i32
    } else {
        last as i32
    }
}

/// The newest snapshot, then the log after it, replayed batch by batch (headers only).
fn load_producer_state(log: &Log) -> Result<ProducerStateManager, LogError> {
    let log_end_offset = log.log_end_offset();
    let (mut state, from) = ProducerStateManager::load_snapshot(log.dir(), log_end_offset);
    let mut offset = from
        .unwrap_or_else(|| log.log_start_offset())
        .max(log.log_start_offset());
    let mut buffer = Vec::new();
    while offset < log_end_offset {
        let read = log.read(offset, REPLAY_READ_BYTES, None)?;
        let Some(slice) = read.slice else { break };
        buffer.clear();
        slice
            .read_into(&mut buffer)
            .map_err(|e| LogError::io(log.dir(), e))?;
        let mut advanced = false;
        for (_, header, _) in BatchIter::new(&buffer).filter_map(Result::ok) {
            let last_offset = header.last_offset();
            if last_offset < offset as i64 {
                continue;
            }
            if header.producer_id >= 0 {
                let batch = ProducerBatch {
                    producer_id: header.producer_id,
                    epoch: header.producer_epoch,
                    first_sequence: header.base_sequence,
                    last_sequence: last_sequence(header.base_sequence, header.last_offset_delta),
                };
                state.update(
                    &batch,
                    BatchMetadata {
                        first_sequence: batch.first_sequence,
                        last_sequence: batch.last_sequence,
                        first_offset: header.base_offset,
                        last_offset,
                        max_timestamp: header.max_timestamp,
                    },
                );
            }
            offset = last_offset as u64 + 1;
            advanced = true;
        }
        if !advanced {
            break;
        }
    }
    Ok(state)
}
