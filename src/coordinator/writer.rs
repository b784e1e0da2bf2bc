//! Where a shard's records go: `PartitionWriter` gives the runtime the epoch-fenced append,
//! the wait for the in-sync replicas and the read that loads a shard. `ReplicaWriter` is the
//! broker's (a partition replica of the internal topic); `MemoryWriter` is for unit tests,
//! where a test decides when records are committed and which appends fail.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::protocol::errors::KafkaError;

/// A record as stored: its key and value bytes (`None`: a tombstone).
pub type EncodedRecord = (Vec<u8>, Option<Vec<u8>>);

/// What a load finds in the log, in order.
#[derive(Debug, Clone, Copy)]
pub enum LoadItem<'a> {
    /// A record: its key and value, and the producer when it is part of a transaction (it
    /// counts only once that producer's commit marker follows).
    Record {
        key: &'a [u8],
        value: Option<&'a [u8]>,
        producer_id: Option<i64>,
    },
    /// A transaction marker for a producer.
    Marker { producer_id: i64, commit: bool },
}

/// What a load hands each item to.
pub type RecordVisitor<'a> = dyn FnMut(LoadItem<'_>) + 'a;

/// The producer a write belongs to, when it is part of its transaction (a transactional
/// offset commit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnProducer {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// What an append wrote: the runtime waits for `last_offset` to be committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub last_offset: u64,
    /// The leader epoch the records were written at (`None` when the log keeps no epochs):
    /// records truncated and replaced at another epoch are not the ones written.
    pub records_epoch: Option<i32>,
}

pub type CommitFuture = Pin<Box<dyn Future<Output = Result<(), KafkaError>> + Send>>;

pub trait PartitionWriter: Send + Sync + 'static {
    /// Appends `records` as leader at `leader_epoch` (refused unless this broker still leads
    /// at that epoch). Nothing is written when it fails.
    fn append(
        &self,
        leader_epoch: i32,
        records: &[EncodedRecord],
        producer: Option<TxnProducer>,
        timestamp_ms: i64,
    ) -> Result<Written, KafkaError>;

    /// Appends a transaction marker for `producer` at `leader_epoch` (WriteTxnMarkers on a
    /// partition a coordinator serves).
    fn append_marker(
        &self,
        leader_epoch: i32,
        producer: TxnProducer,
        marker: crate::protocol::batch::TxnMarker,
    ) -> Result<Written, KafkaError>;

    /// Resolves once the in-sync replicas hold `written` (the high watermark passed it), or
    /// with why not within `timeout`.
    fn committed(self: Arc<Self>, written: Written, timeout: Duration) -> CommitFuture;

    /// Every record from the log start to the log end, in order (loading); the number read.
    fn read_all(&self, visit: &mut RecordVisitor<'_>) -> Result<u64, String>;

    /// The offset below which records are committed.
    fn high_watermark(&self) -> u64;
}

/// An in-memory partition for unit tests.
#[derive(Default)]
pub struct MemoryWriter {
    state: Mutex<MemoryLog>,
    changed: Notify,
}

/// An entry of the in-memory log.
#[derive(Debug, Clone)]
enum MemoryEntry {
    Record(EncodedRecord, Option<TxnProducer>),
    Marker(TxnProducer, bool),
}

#[derive(Default)]
struct MemoryLog {
    records: Vec<MemoryEntry>,
    /// Records below this offset are committed.
    high_watermark: u64,
    /// Commit every append at once.
    manual_commit: bool,
    fail_appends: Option<KafkaError>,
    fail_commits: Option<KafkaError>,
    leader_epoch: i32,
}

impl MemoryWriter {
    pub fn new() -> Arc<MemoryWriter> {
        Arc::new(MemoryWriter::default())
    }

    fn log(&self) -> std::sync::MutexGuard<'_, MemoryLog> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// From now on appends wait for `commit_all` (or fail with `fail_commits`).
    pub fn set_manual_commit(&self, manual: bool) {
        self.log().manual_commit = manual;
    }

    /// Appends fail with `error` until cleared with `None`.
    pub fn fail_appends(&self, error: Option<KafkaError>) {
        self.log().fail_appends = error;
    }

    /// Waiting commits (and later ones) fail with `error` until cleared with `None`.
    pub fn fail_commits(&self, error: Option<KafkaError>) {
        self.log().fail_commits = error;
        self.changed.notify_waiters();
    }

    /// Appends are refused unless made at this epoch (a leadership change).
    pub fn set_leader_epoch(&self, epoch: i32) {
        self.log().leader_epoch = epoch;
    }

    /// Commits everything appended.
    pub fn commit_all(&self) {
        let mut log = self.log();
        log.high_watermark = log.records.len() as u64;
        drop(log);
        self.changed.notify_waiters();
    }

    /// The records appended, markers left out.
    pub fn records(&self) -> Vec<EncodedRecord> {
        self.log()
            .records
            .iter()
            .filter_map(|entry| match entry {
                MemoryEntry::Record(record, _) => Some(record.clone()),
                MemoryEntry::Marker(..) => None,
            })
            .collect()
    }

    fn push(&self, leader_epoch: i32, entries: Vec<MemoryEntry>) -> Result<Written, KafkaError> {
        let mut log = self.log();
        if let Some(error) = log.fail_appends {
            return Err(error);
        }
        if leader_epoch != log.leader_epoch {
            return Err(KafkaError::NotLeaderOrFollower);
        }
        log.records.extend(entries);
        let end = log.records.len() as u64;
        if !log.manual_commit {
            log.high_watermark = end;
        }
        Ok(Written {
            last_offset: end.saturating_sub(1),
            records_epoch: Some(leader_epoch),
        })
    }
}

impl PartitionWriter for MemoryWriter {
    fn append(
        &self,
        leader_epoch: i32,
        records: &[EncodedRecord],
        producer: Option<TxnProducer>,
        _timestamp_ms: i64,
    ) -> Result<Written, KafkaError> {
        let entries = records
            .iter()
            .map(|r| MemoryEntry::Record(r.clone(), producer))
            .collect();
        self.push(leader_epoch, entries)
    }

    fn append_marker(
        &self,
        leader_epoch: i32,
        producer: TxnProducer,
        marker: crate::protocol::batch::TxnMarker,
    ) -> Result<Written, KafkaError> {
        self.push(
            leader_epoch,
            vec![MemoryEntry::Marker(producer, marker.commit)],
        )
    }

    fn committed(self: Arc<Self>, written: Written, timeout: Duration) -> CommitFuture {
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + timeout;
            loop {
                let notified = self.changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                {
                    let log = self.log();
                    if let Some(error) = log.fail_commits {
                        return Err(error);
                    }
                    if log.high_watermark > written.last_offset {
                        return Ok(());
                    }
                }
                if tokio::time::timeout_at(deadline, notified).await.is_err() {
                    return Err(KafkaError::RequestTimedOut);
                }
            }
        })
    }

    fn read_all(&self, visit: &mut RecordVisitor<'_>) -> Result<u64, String> {
        let entries = self.log().records.clone();
        for entry in &entries {
            visit(match entry {
                MemoryEntry::Record((key, value), producer) => LoadItem::Record {
                    key,
                    value: value.as_deref(),
                    producer_id: producer.map(|p| p.producer_id),
                },
                MemoryEntry::Marker(producer, commit) => LoadItem::Marker {
                    producer_id: producer.producer_id,
                    commit: *commit,
                },
            });
        }
        Ok(entries.len() as u64)
    }

    fn high_watermark(&self) -> u64 {
        self.log().high_watermark
    }
}

/// The broker's writer: a replica of an internal topic's partition this broker leads.
pub struct ReplicaWriter {
    pub partition: Arc<crate::replica::Partition>,
    replicas: Arc<crate::replica::ReplicaManager>,
    images: crate::controller::client::ImageWatch,
    topic: String,
}

/// How much of the partition one read during a load takes.
const LOAD_READ_BYTES: u64 = 4 * 1024 * 1024;

impl ReplicaWriter {
    pub fn new(
        partition: Arc<crate::replica::Partition>,
        replicas: Arc<crate::replica::ReplicaManager>,
        images: crate::controller::client::ImageWatch,
    ) -> ReplicaWriter {
        let topic = partition.topic_partition.topic.clone();
        ReplicaWriter {
            partition,
            replicas,
            images,
            topic,
        }
    }

    fn min_insync_replicas(&self) -> usize {
        self.replicas
            .min_insync_replicas(&self.images.image(), &self.topic)
    }
}

impl PartitionWriter for ReplicaWriter {
    fn append(
        &self,
        leader_epoch: i32,
        records: &[EncodedRecord],
        producer: Option<TxnProducer>,
        timestamp_ms: i64,
    ) -> Result<Written, KafkaError> {
        let state = self.partition.state();
        if state.leader != self.replicas.broker_id() || state.leader_epoch != leader_epoch {
            return Err(KafkaError::NotLeaderOrFollower);
        }
        let mut batch = crate::log::batch::BatchBuilder::new(0, timestamp_ms);
        if let Some(producer) = producer {
            // No sequence: the broker writes it (Kafka's coordinators do the same).
            batch = batch
                .producer(producer.producer_id, producer.producer_epoch, -1)
                .transactional();
        }
        for (key, value) in records {
            batch.push(timestamp_ms, Some(key), value.as_deref(), &[]);
        }
        let bytes = batch.build();
        let min_insync = self.min_insync_replicas();
        // The append writes to the log (a write, no fsync): not long, but not async either.
        let appended = tokio::task::block_in_place(|| {
            self.partition
                .append_as_leader_at_epoch(&bytes, leader_epoch, min_insync)
        });
        match appended {
            Ok(appended) => Ok(Written {
                last_offset: appended.pending.last_offset,
                records_epoch: appended.pending.records_epoch,
            }),
            Err(error) => {
                tracing::debug!(partition = %self.partition.topic_partition, error = %error.error, message = %error.message, "coordinator append refused");
                Err(error.error)
            }
        }
    }

    fn append_marker(
        &self,
        leader_epoch: i32,
        producer: TxnProducer,
        marker: crate::protocol::batch::TxnMarker,
    ) -> Result<Written, KafkaError> {
        let min_insync = self.min_insync_replicas();
        let appended = tokio::task::block_in_place(|| {
            self.partition.append_txn_marker(
                producer.producer_id,
                producer.producer_epoch,
                marker,
                min_insync,
                Some(leader_epoch),
            )
        });
        match appended {
            Ok(appended) => Ok(Written {
                last_offset: appended.pending.last_offset,
                records_epoch: appended.pending.records_epoch,
            }),
            Err(error) => {
                tracing::debug!(partition = %self.partition.topic_partition, error = %error.error, message = %error.message, "coordinator marker refused");
                Err(error.error)
            }
        }
    }

    fn committed(self: Arc<Self>, written: Written, timeout: Duration) -> CommitFuture {
        use crate::replica::{AckState, Delayed, PendingAck};
        Box::pin(async move {
            let min_insync = self.min_insync_replicas();
            let deadline = tokio::time::Instant::now() + timeout;
            let delayed = Delayed::new(deadline, [self.partition.watchers()]);
            let pending = PendingAck {
                last_offset: written.last_offset,
                records_epoch: written.records_epoch,
            };
            let mut state = AckState::Waiting;
            delayed
                .until(|| {
                    state = self.partition.ack_state(&pending, min_insync);
                    matches!(state, AckState::Acknowledged | AckState::NotLeader)
                })
                .await;
            match state {
                AckState::Acknowledged => Ok(()),
                AckState::NotLeader => Err(KafkaError::NotLeaderOrFollower),
                AckState::UnderMinIsr => Err(KafkaError::NotEnoughReplicas),
                AckState::Waiting => Err(KafkaError::RequestTimedOut),
            }
        })
    }

    fn read_all(&self, visit: &mut RecordVisitor<'_>) -> Result<u64, String> {
        use crate::log::batch::{BATCH_HEADER_BYTES, BatchIter, RecordIter};
        use crate::replica::ReadBound;
        let partition = &self.partition;
        let end = partition.log_end_offset();
        let mut offset = partition.log_start_offset();
        let mut records = 0u64;
        while offset < end {
            let Some(slice) = partition
                .read(offset, LOAD_READ_BYTES, ReadBound::LogEnd)
                .map_err(|e| e.to_string())?
            else {
                break;
            };
            let bytes = slice.to_vec().map_err(|e| e.to_string())?;
            let before = offset;
            for item in BatchIter::new(&bytes) {
                let (_, header, batch) = item.map_err(|e| e.to_string())?;
                offset = (header.last_offset() + 1) as u64;
                if header.is_control() {
                    if let Some(marker) = crate::protocol::batch::TxnMarker::parse(&header, batch) {
                        visit(LoadItem::Marker {
                            producer_id: header.producer_id,
                            commit: marker.commit,
                        });
                    }
                    continue;
                }
                let producer_id = header.is_transactional().then_some(header.producer_id);
                let section;
                let iter = if header.is_compressed() {
                    match crate::protocol::codec::decompress(
                        i16::from(header.compression()),
                        &batch[BATCH_HEADER_BYTES.min(batch.len())..],
                    ) {
                        Ok(decompressed) => section = decompressed,
                        Err(error) => {
                            tracing::warn!(partition = %partition.topic_partition, base_offset = header.base_offset, %error, "skipping a batch that does not decompress");
                            continue;
                        }
                    }
                    RecordIter::decompressed(&header, &section)
                } else {
                    RecordIter::new(&header, batch)
                };
                for record in iter {
                    let record = match record {
                        Ok(record) => record,
                        Err(error) => {
                            tracing::warn!(partition = %partition.topic_partition, base_offset = header.base_offset, error, "skipping the rest of a malformed batch");
                            break;
                        }
                    };
                    records += 1;
                    if let Some(key) = record.key {
                        visit(LoadItem::Record {
                            key,
                            value: record.value,
                            producer_id,
                        });
                    }
                }
            }
            if offset <= before {
                break;
            }
        }
        Ok(records)
    }

    fn high_watermark(&self) -> u64 {
        self.partition.high_watermark()
    }
}
