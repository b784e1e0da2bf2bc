//! [`Producer`]: records to partitions, batched, compressed, retried and idempotent by default
//! (as Java's producer since 3.0).
//!
//! `send` picks the partition (explicit, the key's murmur2 hash, or a sticky partition for
//! records without a key), waits for buffer space (`buffer.memory`, for at most
//! `max.block.ms`) and appends the record to its partition's open batch; it returns a
//! [`DeliveryFuture`] that resolves with the record's offset once the broker acknowledged it.
//!
//! One sender task drains the batches: a batch goes when it is full (`batch.size`), after
//! `linger.ms`, or on `flush`. Its sequence number is assigned when it is sent, so the
//! sequences of a partition follow the order of its batches. Up to
//! `max.in.flight.requests.per.connection` batches of a partition are in flight. A batch that
//! fails with a retriable error (a leader moved, not enough replicas) goes back in sequence
//! order, and the partition then sends one batch at a time until its retries are through:
//! the order of records is kept, and the broker's sequence checks drop what it already has
//! (DUPLICATE_SEQUENCE_NUMBER counts as delivered). A batch is failed after
//! `delivery.timeout.ms`; a failed batch leaves a hole in its partition's sequences, so the
//! producer then takes a new producer id once nothing is in flight.
//!
//! With `transactional.id` the producer is transactional (Kafka's transactions, KIP-98):
//! `init_transactions` takes the id's producer id and epoch (fencing older instances),
//! records sent between `begin_transaction` and `commit_transaction` (and offsets given to
//! `send_offsets_to_transaction`) become visible to `read_committed` consumers together, or
//! not at all after `abort_transaction`. The sender adds each partition to the transaction
//! (AddPartitionsToTxn, the partitions waiting batched in one request) before its first
//! batch goes; batches carry the transactional flag. The state machine and the coordinator
//! requests are in `transaction.rs`; errors say whether the producer can go on
//! ([`Error::is_abortable`], [`Error::is_fatal`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    InitProducerIdRequest, ProduceRequest, ProduceResponse, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::{Notify, Semaphore};

use super::cluster::Cluster;
use super::config::{ClientConfig, CommonConfig};
use super::connection::PendingResponse;
use super::consumer::{ConsumerGroupMetadata, TopicPartition as GroupPartition};
use super::error::{Error, Result, TransactionErrorKind, is_retriable_code};
use super::partitioner::{Random, partition_for_key};
use super::transaction::{
    Coordinator, ErrorClass, KEY_TYPE_TRANSACTION, ProducerIdAndEpoch, TransactionManager,
    TransactionState, TxnApi, TxnIdentity, classified, classify,
};
use crate::protocol::batch::BatchBuilder;
use crate::protocol::errors;

/// The highest Produce version sent: v13 names topics by id.
const PRODUCE_VERSION_MAX: i16 = 12;
/// A transactional producer speaks transaction version 1, whose Produce stops at v11: v12
/// tells a broker the client uses transaction version 2 (KIP-890 part 2), in which the
/// broker adds partitions to the transaction itself.
const PRODUCE_VERSION_MAX_TRANSACTIONAL: i16 = 11;
/// Bytes a record costs beyond its key, value and headers (framing, varints), for batch and
/// buffer accounting.
const RECORD_OVERHEAD_BYTES: usize = 24;

/// A record to send.
#[derive(Debug, Clone, Default)]
pub struct ProducerRecord {
    /// The topic to write to.
    pub topic: String,
    /// An explicit partition; otherwise the key's hash or a sticky partition.
    pub partition: Option<i32>,
    /// The key (hashed to pick the partition).
    pub key: Option<Bytes>,
    /// The value.
    pub value: Option<Bytes>,
    /// Headers: key and optional value.
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Milliseconds since the epoch; now when unset.
    pub timestamp: Option<i64>,
}

impl ProducerRecord {
    /// A record with a value and no key.
    pub fn new(topic: &str, value: impl Into<Bytes>) -> Self {
        ProducerRecord {
            topic: topic.to_owned(),
            value: Some(value.into()),
            ..ProducerRecord::default()
        }
    }

    /// Sets the key.
    pub fn key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sends to this partition.
    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }

    /// Adds a header.
    pub fn header(mut self, key: &str, value: impl Into<Bytes>) -> Self {
        self.headers.push((key.to_owned(), Some(value.into())));
        self
    }

    /// Sets the timestamp (milliseconds since the epoch).
    pub fn timestamp(mut self, timestamp_ms: i64) -> Self {
        self.timestamp = Some(timestamp_ms);
        self
    }

    fn size_bytes(&self) -> usize {
        RECORD_OVERHEAD_BYTES
            + self.key.as_ref().map_or(0, Bytes::len)
            + self.value.as_ref().map_or(0, Bytes::len)
            + self
                .headers
                .iter()
                .map(|(k, v)| k.len() + v.as_ref().map_or(0, Bytes::len) + 4)
                .sum::<usize>()
    }
}

/// Where an acknowledged record was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    /// The record's topic.
    pub topic: String,
    /// The partition it was stored in.
    pub partition: i32,
    /// -1 with acks=0 (the broker does not answer).
    pub offset: i64,
    /// The record's timestamp (the broker's, for LogAppendTime topics).
    pub timestamp: i64,
}

/// Resolves when the record is acknowledged (or has failed for good).
///
/// The records of a batch share one completion (no channel per record): the future holds
/// the batch and the record's place in it.
pub struct DeliveryFuture {
    batch: Arc<BatchCompletion>,
    index: i64,
    timestamp: i64,
    registered: Option<Waker>,
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let mut shared = this.batch.lock();
        match &shared.outcome {
            Some(Ok((base_offset, log_append_time))) => Poll::Ready(Ok(RecordMetadata {
                topic: this.batch.topic.to_string(),
                partition: this.batch.partition,
                offset: if *base_offset < 0 {
                    -1
                } else {
                    base_offset + this.index
                },
                timestamp: if *log_append_time >= 0 {
                    *log_append_time
                } else {
                    this.timestamp
                },
            })),
            Some(Err(error)) => Poll::Ready(Err(error.clone())),
            None => {
                if !this
                    .registered
                    .as_ref()
                    .is_some_and(|w| w.will_wake(cx.waker()))
                {
                    shared.wakers.push(cx.waker().clone());
                    this.registered = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}

/// The outcome of one batch, shared by its records' futures.
struct BatchCompletion {
    topic: Arc<str>,
    partition: i32,
    shared: Mutex<CompletionState>,
}

#[derive(Default)]
struct CompletionState {
    /// (base offset, log append time or -1), or the batch's error.
    outcome: Option<Result<(i64, i64)>>,
    wakers: Vec<Waker>,
}

impl BatchCompletion {
    fn lock(&self) -> MutexGuard<'_, CompletionState> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Settles the batch once (later calls are ignored) and wakes its waiting futures.
    fn complete(&self, outcome: Result<(i64, i64)>) {
        let wakers = {
            let mut state = self.lock();
            if state.outcome.is_some() {
                return;
            }
            state.outcome = Some(outcome);
            std::mem::take(&mut state.wakers)
        };
        for waker in wakers {
            waker.wake();
        }
    }
}

#[derive(Debug, Clone)]
struct Settings {
    acks: i16,
    linger: Duration,
    batch_size: usize,
    buffer_memory: usize,
    codec: i16,
    idempotent: bool,
    max_in_flight: usize,
    retries: u32,
    delivery_timeout: Duration,
    max_request_size: usize,
    max_block: Duration,
    retry_backoff: Duration,
    ignore_keys: bool,
    /// `transactional.id`: a transactional producer.
    transactional_id: Option<String>,
    /// `transaction.timeout.ms`: the coordinator aborts a transaction open longer.
    transaction_timeout_ms: i32,
}

const PRODUCER_KEYS: &[&str] = &[
    "acks",
    "linger.ms",
    "batch.size",
    "buffer.memory",
    "compression.type",
    "enable.idempotence",
    "max.in.flight.requests.per.connection",
    "retries",
    "delivery.timeout.ms",
    "max.request.size",
    "max.block.ms",
    "partitioner.ignore.keys",
    "transactional.id",
    "transaction.timeout.ms",
];

impl Settings {
    fn from_config(config: &ClientConfig, common: &CommonConfig) -> Result<Settings> {
        let acks = match config.get("acks").map(str::trim) {
            None | Some("all") | Some("-1") => -1,
            Some("0") => 0,
            Some("1") => 1,
            Some(other) => {
                return Err(Error::Config {
                    key: "acks".into(),
                    reason: format!("{other:?} is not one of all, -1, 0, 1"),
                });
            }
        };
        let codec = match config.get("compression.type").map(str::trim) {
            None | Some("none") => 0,
            Some("gzip") => 1,
            Some("snappy") => 2,
            Some("lz4") => 3,
            Some("zstd") => 4,
            Some(other) => {
                return Err(Error::Config {
                    key: "compression.type".into(),
                    reason: format!("{other:?} is not one of none, gzip, snappy, lz4, zstd"),
                });
            }
        };
        let max_in_flight =
            config.number("max.in.flight.requests.per.connection", 5, 1, 1000)? as usize;
        let idempotent: bool = config.parse("enable.idempotence", true)?;
        if idempotent && (acks != -1 || max_in_flight > 5) {
            let explicit = config.get("enable.idempotence").is_some();
            if explicit {
                return Err(Error::Config {
                    key: "enable.idempotence".into(),
                    reason: "needs acks=all and max.in.flight.requests.per.connection <= 5".into(),
                });
            }
        }
        let transactional_id = config
            .get("transactional.id")
            .map(str::trim)
            .filter(|id| !id.is_empty())
            .map(str::to_owned);
        if transactional_id.is_some() && !(idempotent && acks == -1 && max_in_flight <= 5) {
            // As Java: a transactional producer is idempotent, so it needs what that needs.
            return Err(Error::Config {
                key: "transactional.id".into(),
                reason: "needs enable.idempotence=true, acks=all and \
                         max.in.flight.requests.per.connection <= 5"
                    .into(),
            });
        }
        // As Java: idempotence on by default, off when the other settings forbid it.
        let idempotent = idempotent && acks == -1 && max_in_flight <= 5;
        let linger = config.millis("linger.ms", 5, 0, 3_600_000)?;
        let delivery_timeout = config.millis("delivery.timeout.ms", 120_000, 1, 86_400_000)?;
        if delivery_timeout < linger + common.request_timeout {
            return Err(Error::Config {
                key: "delivery.timeout.ms".into(),
                reason: "must be at least linger.ms + request.timeout.ms".into(),
            });
        }
        Ok(Settings {
            acks,
            linger,
            batch_size: config.number("batch.size", 16_384, 1, 1 << 30)? as usize,
            buffer_memory: config.number("buffer.memory", 32 << 20, 1 << 10, 1 << 40)? as usize,
            codec,
            idempotent,
            max_in_flight,
            retries: config.number(
                "retries",
                u64::from(i32::MAX as u32),
                0,
                u64::from(u32::MAX),
            )? as u32,
            delivery_timeout,
            max_request_size: config.number("max.request.size", 1 << 20, 1, 1 << 30)? as usize,
            max_block: config.millis("max.block.ms", 60_000, 0, 86_400_000)?,
            retry_backoff: config.millis("retry.backoff.ms", 100, 0, 3_600_000)?,
            ignore_keys: config.parse("partitioner.ignore.keys", false)?,
            transactional_id,
            transaction_timeout_ms: config.number(
                "transaction.timeout.ms",
                60_000,
                1,
                i32::MAX as u64,
            )? as i32,
        })
    }
}

/// Records appended to a partition, not yet sent.
struct OpenBatch {
    builder: BatchBuilder,
    size_bytes: usize,
    created: Instant,
    completion: Arc<BatchCompletion>,
    records: usize,
}

/// A batch that was sent at least once: its bytes carry its producer id and sequence.
struct SentBatch {
    bytes: Bytes,
    sequence: i32,
    created: Instant,
    completion: Arc<BatchCompletion>,
    size_bytes: usize,
    attempts: u32,
}

#[derive(Default)]
struct PartitionQueue {
    /// The partition's topic, for its batches' completions.
    topic: Arc<str>,
    /// Open batches, oldest first; all but the last are full.
    open: VecDeque<OpenBatch>,
    /// Batches to send again, by sequence (or send order, without idempotence).
    retry: BTreeMap<i32, SentBatch>,
    in_flight: usize,
    next_sequence: i32,
    /// A batch failed: send one at a time, from `retry`, until it is empty.
    recovering: bool,
    /// No retry before this (`retry.backoff.ms` after a failure).
    backoff_until: Option<Instant>,
}

impl PartitionQueue {
    fn is_idle(&self) -> bool {
        self.open.is_empty() && self.retry.is_empty() && self.in_flight == 0
    }
}

type TopicPartition = (String, i32);

struct State {
    partitions: HashMap<TopicPartition, PartitionQueue>,
    sticky: HashMap<String, i32>,
    random: Random,
    producer_id: i64,
    producer_epoch: i16,
    /// A failed batch left a hole in some partition's sequences.
    needs_new_producer_id: bool,
    /// Flushes waiting: send everything now, linger or not.
    flushing: usize,
    /// Topics whose leaders must be looked up again.
    stale_topics: Vec<String>,
    /// The topics of the metadata refresh under way, if one is: their partitions wait for it
    /// rather than go to a leader just found wanting.
    refreshing_topics: Option<Vec<String>>,
    /// A transactional producer's state (`transactional.id` set).
    txn: Option<TransactionManager>,
}

impl State {
    fn producer(&self) -> ProducerIdAndEpoch {
        ProducerIdAndEpoch {
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
        }
    }
}

struct Inner {
    cluster: Arc<Cluster>,
    settings: Settings,
    state: Mutex<State>,
    /// Wakes the sender: a batch is ready, a response came, a flush began.
    wake: Notify,
    /// Wakes flushes: a batch completed.
    progress: Notify,
    memory: Semaphore,
    closed: AtomicBool,
    /// The transaction coordinator of `transactional.id`.
    txn_coordinator: Option<Coordinator>,
    /// One transactional call (init, begin, offsets, commit, abort) at a time.
    txn_calls: tokio::sync::Mutex<()>,
}

/// Sends records to Kafka.
///
/// ```no_run
/// # async fn example() -> sluice::client::Result<()> {
/// use sluice::client::{ClientConfig, Producer, ProducerRecord};
/// let producer = Producer::new(ClientConfig::new("127.0.0.1:9092").set("linger.ms", "5"))?;
/// let delivery = producer
///     .send(ProducerRecord::new("orders", "shipped").key("order-17"))
///     .await?;
/// let stored = delivery.await?;
/// println!("stored at {}-{} offset {}", stored.topic, stored.partition, stored.offset);
/// producer.close().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Producer {
    inner: Arc<Inner>,
    /// Dropped with the last clone: the sender then sends what is buffered and stops.
    _last: Arc<CloseOnDrop>,
}

/// Closes the producer when the last handle goes (the sender task holds `Inner` too, so it
/// would otherwise run for ever).
struct CloseOnDrop(Arc<Inner>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::Release);
        self.0.wake.notify_one();
    }
}

impl Producer {
    /// A producer; it connects on first use. Must be created inside a tokio runtime.
    pub fn new(config: ClientConfig) -> Result<Producer> {
        config.warn_unknown("producer", PRODUCER_KEYS);
        let common = CommonConfig::from_config(&config)?;
        let settings = Settings::from_config(&config, &common)?;
        let txn_coordinator = settings
            .transactional_id
            .as_deref()
            .map(|id| Coordinator::new(KEY_TYPE_TRANSACTION, id));
        let txn = settings
            .transactional_id
            .is_some()
            .then(TransactionManager::new);
        let inner = Arc::new(Inner {
            memory: Semaphore::new(settings.buffer_memory),
            cluster: Cluster::shared(common),
            settings,
            state: Mutex::new(State {
                partitions: HashMap::new(),
                sticky: HashMap::new(),
                random: Random::new(),
                producer_id: -1,
                producer_epoch: -1,
                needs_new_producer_id: false,
                flushing: 0,
                stale_topics: Vec::new(),
                refreshing_topics: None,
                txn,
            }),
            wake: Notify::new(),
            progress: Notify::new(),
            closed: AtomicBool::new(false),
            txn_coordinator,
            txn_calls: tokio::sync::Mutex::new(()),
        });
        tokio::spawn(run_sender(inner.clone()));
        Ok(Producer {
            _last: Arc::new(CloseOnDrop(inner.clone())),
            inner,
        })
    }

    /// Appends `record` to its partition's batch, waiting for buffer space if needed, and
    /// returns the future of its delivery.
    pub async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        let inner = &self.inner;
        if inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        // Checked again when the record is appended; here so a refused send waits for
        // nothing (and a producer without transactions takes no lock for it).
        if inner.settings.transactional_id.is_some() {
            if let Some(txn) = &inner.lock().txn {
                txn.check_open("send")?;
            }
        }
        let size = record.size_bytes();
        let limit = inner
            .settings
            .max_request_size
            .min(inner.settings.buffer_memory);
        if size > limit {
            return Err(Error::Kafka {
                code: errors::MESSAGE_TOO_LARGE,
                context: format!("topic {}", record.topic),
                message: Some(format!(
                    "the record is {size} bytes serialized, more than max.request.size or \
                     buffer.memory ({limit})"
                )),
            });
        }
        let mut partition_count = self.partition_count(&record.topic).await?;
        if let Some(partition) = record.partition
            && partition >= partition_count
        {
            // A partition added since the metadata was read: asked for again.
            partition_count = self.refresh_for_partition(&record.topic, partition).await?;
        }
        let permits = u32::try_from(size).unwrap_or(u32::MAX);
        // Room in buffer.memory is the common case: taken without arming a timer.
        let permit = match inner.memory.try_acquire_many(permits) {
            Ok(permit) => permit,
            Err(tokio::sync::TryAcquireError::Closed) => return Err(Error::Closed),
            Err(tokio::sync::TryAcquireError::NoPermits) => {
                tokio::time::timeout(inner.settings.max_block, inner.memory.acquire_many(permits))
                    .await
                    .map_err(|_| Error::Timeout {
                        what: format!(
                            "buffer space for a record to {} (buffer.memory is full)",
                            record.topic
                        ),
                        after: inner.settings.max_block,
                    })?
                    .map_err(|_| Error::Closed)?
            }
        };
        // The bytes are given back when the batch completes.
        permit.forget();
        let timestamp = record.timestamp.unwrap_or_else(now_ms);
        {
            let mut state = inner.lock();
            let partition = match record.partition {
                Some(p) if (0..partition_count).contains(&p) => p,
                Some(p) => {
                    drop(state);
                    inner.memory.add_permits(permits as usize);
                    return Err(Error::Kafka {
                        code: errors::UNKNOWN_TOPIC_OR_PARTITION,
                        context: format!("partition {}-{p}", record.topic),
                        message: Some(format!("the topic has {partition_count} partitions")),
                    });
                }
                None => match &record.key {
                    Some(key) if !inner.settings.ignore_keys => {
                        partition_for_key(key, partition_count)
                    }
                    _ => {
                        let State { sticky, random, .. } = &mut *state;
                        match sticky.get(&record.topic) {
                            Some(partition) => *partition,
                            None => *sticky
                                .entry(record.topic.clone())
                                .or_insert_with(|| random.below(partition_count)),
                        }
                    }
                },
            };
            if let Some(txn) = &mut state.txn {
                // The transaction may have failed (or ended) while this send waited.
                let key = (record.topic.clone(), partition);
                if let Err(error) = txn.check_open("send") {
                    drop(state);
                    inner.memory.add_permits(permits as usize);
                    return Err(error);
                }
                txn.record_for(&key);
            }
            // The record's topic becomes the key (no copy per record); a new partition's
            // queue keeps it once more, shared, for its batches' completions.
            let queue = match state.partitions.entry((record.topic, partition)) {
                std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
                std::collections::hash_map::Entry::Vacant(entry) => {
                    let topic = Arc::from(entry.key().0.as_str());
                    entry.insert(PartitionQueue {
                        topic,
                        ..PartitionQueue::default()
                    })
                }
            };
            let batch_size = inner.settings.batch_size;
            let needs_new = queue
                .open
                .back()
                .is_none_or(|b| b.size_bytes + size > batch_size && b.records > 0);
            if needs_new {
                queue.open.push_back(OpenBatch {
                    builder: BatchBuilder::new(0, timestamp),
                    size_bytes: crate::protocol::batch::BATCH_HEADER_BYTES,
                    created: Instant::now(),
                    completion: Arc::new(BatchCompletion {
                        topic: queue.topic.clone(),
                        partition,
                        shared: Mutex::new(CompletionState::default()),
                    }),
                    records: 0,
                });
            }
            let batch = queue.open.back_mut().ok_or(Error::Closed)?;
            let headers: Vec<(&[u8], Option<&[u8]>)> = record
                .headers
                .iter()
                .map(|(k, v)| (k.as_bytes(), v.as_deref()))
                .collect();
            batch.builder.push(
                timestamp,
                record.key.as_deref(),
                record.value.as_deref(),
                &headers,
            );
            batch.size_bytes += size;
            let future = DeliveryFuture {
                batch: batch.completion.clone(),
                index: batch.records as i64,
                timestamp,
                registered: None,
            };
            batch.records += 1;
            let full = batch.size_bytes >= batch_size;
            let first = batch.records == 1;
            // Wake the sender for a full batch, for a new one (it must learn its linger
            // deadline), and for a partition whose oldest batch has lingered long enough: a
            // busy runtime fires the sender's timer late, a steady stream of sends notices
            // the deadline within microseconds.
            let lingered = queue
                .open
                .front()
                .is_some_and(|front| front.created + inner.settings.linger <= Instant::now());
            if full || first || lingered || inner.settings.linger.is_zero() {
                inner.wake.notify_one();
            }
            Ok(future)
        }
    }

    /// Sends everything buffered now and waits until all of it is acknowledged or failed.
    pub async fn flush(&self) -> Result<()> {
        let inner = &self.inner;
        inner.lock().flushing += 1;
        inner.wake.notify_one();
        loop {
            let progress = inner.progress.notified();
            tokio::pin!(progress);
            // Registered before the check, so a completion in between is not missed.
            progress.as_mut().enable();
            if inner
                .lock()
                .partitions
                .values()
                .all(PartitionQueue::is_idle)
            {
                break;
            }
            progress.await;
        }
        inner.lock().flushing -= 1;
        Ok(())
    }

    /// Flushes, then stops the sender and closes the connections. Sends after this fail.
    pub async fn close(&self) -> Result<()> {
        self.flush().await?;
        self.inner.closed.store(true, Ordering::Release);
        self.inner.wake.notify_one();
        self.inner.cluster.close();
        Ok(())
    }

    /// The number of partitions of `topic`, from metadata (fetched, asking the broker to
    /// create the topic when it allows, for at most `max.block.ms`).
    pub async fn partition_count(&self, topic: &str) -> Result<i32> {
        self.partition_count_waiting(topic, true).await
    }

    /// [`Producer::partition_count`], but failing at once when the cluster says the topic
    /// does not exist and will not be created (UNKNOWN_TOPIC_OR_PARTITION after asking for
    /// it), instead of waiting `max.block.ms` for someone to create it: for tools.
    pub async fn existing_partition_count(&self, topic: &str) -> Result<i32> {
        self.partition_count_waiting(topic, false).await
    }

    /// The topic's partition count, asked of the cluster again because the cached metadata
    /// does not have `partition` (added since it was read). The fresh answer is the cluster's
    /// own, so a partition it does not have either fails at once with
    /// UNKNOWN_TOPIC_OR_PARTITION (Kafka's producer would wait `max.block.ms` for it).
    async fn refresh_for_partition(&self, topic: &str, partition: i32) -> Result<i32> {
        let metadata = self
            .inner
            .cluster
            .refresh_with(Some(&[topic.to_owned()]), true)
            .await?;
        let count = metadata
            .topics
            .get(topic)
            .map_or(0, |t| t.partitions.len() as i32);
        if partition < count {
            return Ok(count);
        }
        Err(Error::Kafka {
            code: errors::UNKNOWN_TOPIC_OR_PARTITION,
            context: format!("partition {topic}-{partition}"),
            message: Some(format!("the topic has {count} partitions")),
        })
    }

    async fn partition_count_waiting(&self, topic: &str, wait_for_creation: bool) -> Result<i32> {
        let inner = &self.inner;
        let known = |metadata: &super::ClusterMetadata| {
            metadata
                .topics
                .get(topic)
                .filter(|t| t.error_code == errors::NONE && !t.partitions.is_empty())
                .map(|t| t.partitions.len() as i32)
        };
        if let Some(count) = known(&inner.cluster.cached()) {
            return Ok(count);
        }
        let deadline = Instant::now() + inner.settings.max_block;
        let topics = [topic.to_owned()];
        loop {
            let last = match inner.cluster.refresh_with(Some(&topics), true).await {
                Ok(metadata) => match known(&metadata) {
                    Some(count) => return Ok(count),
                    None => metadata.topics.get(topic).map(|t| t.error_code),
                },
                Err(error) if !error.is_retriable() => return Err(error),
                Err(error) if Instant::now() >= deadline => return Err(error),
                Err(_) => None,
            };
            let absent = last == Some(errors::UNKNOWN_TOPIC_OR_PARTITION);
            // A topic error no retry mends (an auto-create the cluster refused, an invalid
            // name) is said at once rather than after max.block.ms.
            let permanent = last.is_some_and(|c| c != errors::NONE && !is_retriable_code(c));
            if Instant::now() >= deadline || (absent && !wait_for_creation) || permanent {
                let code = last
                    .filter(|&c| c != errors::NONE)
                    .unwrap_or(errors::UNKNOWN_TOPIC_OR_PARTITION);
                return Err(Error::Kafka {
                    code,
                    context: format!("topic {topic}"),
                    message: (!permanent && (!absent || wait_for_creation)).then(|| {
                        format!(
                            "not present in metadata after {} ms (max.block.ms)",
                            inner.settings.max_block.as_millis()
                        )
                    }),
                });
            }
            tokio::time::sleep(inner.settings.retry_backoff.max(Duration::from_millis(10))).await;
        }
    }
}

/// Transactions (`transactional.id` set), as Kafka's producer has them.
///
/// ```no_run
/// # async fn example() -> sluice::client::Result<()> {
/// use sluice::client::{ClientConfig, Producer, ProducerRecord};
/// let producer = Producer::new(
///     ClientConfig::new("127.0.0.1:9092").set("transactional.id", "billing-1"),
/// )?;
/// producer.init_transactions().await?;
/// producer.begin_transaction()?;
/// producer.send(ProducerRecord::new("invoices", "inv-17")).await?;
/// producer.send(ProducerRecord::new("ledger", "+17")).await?;
/// match producer.commit_transaction().await {
///     Ok(()) => {}
///     Err(error) if error.is_abortable() => producer.abort_transaction().await?,
///     Err(error) => return Err(error), // fatal (fenced...): this producer is done
/// }
/// # Ok(())
/// # }
/// ```
///
/// Each call waits at most `max.block.ms` for the coordinators; one that timed out
/// (`Error::Timeout`) leaves the state as it was and may be called again (a commit or abort
/// then resumes). Errors of the transaction are [`Error::Transaction`]:
/// [`Error::is_abortable`] (call [`Producer::abort_transaction`], then begin anew) or
/// [`Error::is_fatal`] (the producer refuses everything from then on: close it).
impl Producer {
    /// Registers `transactional.id` with its transaction coordinator and takes the id's
    /// producer id and a new epoch, fencing any older producer with the same id (its open
    /// transaction is aborted). Once, before the first transaction.
    pub async fn init_transactions(&self) -> Result<()> {
        let identity = self.transactional("init_transactions")?;
        let _call = self.inner.txn_calls.lock().await;
        self.transition(TransactionState::Initializing, "init_transactions")?;
        // KIP-360: a producer that already has an id and epoch names them.
        let current = {
            let state = self.inner.lock();
            (state.producer_id >= 0).then(|| state.producer())
        };
        match identity
            .init_producer_id(self.inner.settings.transaction_timeout_ms, current)
            .await
        {
            Ok(producer) => {
                self.take_producer_id(producer);
                self.transition(TransactionState::Ready, "init_transactions")
            }
            Err(error @ Error::Transaction { .. }) => {
                Err(self.request_failed("init_transactions", error))
            }
            Err(error) => {
                // Timed out: init_transactions may be called again.
                self.transition(TransactionState::Uninitialized, "init_transactions")?;
                Err(error)
            }
        }
    }

    /// Opens a transaction: the records sent until [`Producer::commit_transaction`] or
    /// [`Producer::abort_transaction`] are committed or aborted together.
    pub fn begin_transaction(&self) -> Result<()> {
        self.transactional("begin_transaction")?;
        self.transition(TransactionState::InTransaction, "begin_transaction")
    }

    /// Commits `offsets` (the next offset to read, per partition) for the consumer group
    /// `group` as part of the transaction: they take effect if and only if it commits
    /// (consume-transform-produce exactly once). `group` is the consumer's
    /// [`Consumer::group_metadata`](super::Consumer::group_metadata), so the group refuses the
    /// offsets of a member that is no longer in its generation (then the transaction must
    /// abort).
    pub async fn send_offsets_to_transaction(
        &self,
        offsets: &BTreeMap<GroupPartition, i64>,
        group: &ConsumerGroupMetadata,
    ) -> Result<()> {
        let identity = self.transactional("send_offsets_to_transaction")?;
        let _call = self.inner.txn_calls.lock().await;
        let producer = {
            let state = self.inner.lock();
            if let Some(txn) = &state.txn {
                txn.check_open("send_offsets_to_transaction")?;
            }
            state.producer()
        };
        if offsets.is_empty() {
            return Ok(());
        }
        let outcome = async {
            identity.add_offsets(producer, &group.group_id).await?;
            if let Some(txn) = &mut self.inner.lock().txn {
                txn.offsets_added();
            }
            identity.txn_offset_commit(producer, group, offsets).await
        }
        .await;
        outcome.map_err(|error| self.request_failed("send_offsets_to_transaction", error))
    }

    /// Sends what is buffered, then commits the transaction: its records become visible to
    /// `read_committed` consumers, its offsets take effect. Fails with an abortable error
    /// when a record of it failed (then abort).
    pub async fn commit_transaction(&self) -> Result<()> {
        let identity = self.transactional("commit_transaction")?;
        let _call = self.inner.txn_calls.lock().await;
        self.transition(
            TransactionState::CommittingTransaction,
            "commit_transaction",
        )?;
        self.flush().await?;
        let (producer, started) = {
            let state = self.inner.lock();
            let Some(txn) = &state.txn else {
                return Err(Error::Closed);
            };
            // A record failed while flushing: the transaction can only abort.
            if let Some(error) = txn.error() {
                return Err(error);
            }
            (state.producer(), txn.started())
        };
        // A transaction that wrote nothing ends without the coordinator, as Java's does.
        if started {
            if let Err(error) = identity.end_txn(producer, true).await {
                return Err(self.request_failed("commit_transaction", error));
            }
        }
        self.with_transaction(|txn| {
            txn.transaction_ended();
            txn.transition(TransactionState::Ready, "commit_transaction", None)
        })
    }

    /// Aborts the transaction: records not yet sent are dropped (their deliveries fail with
    /// [`Error::TransactionAborted`]), those sent are never shown to `read_committed`
    /// consumers, its offsets never take effect. The way out of an abortable error. When a
    /// batch had failed, the producer's epoch is then bumped (KIP-360) so its sequences start
    /// again.
    pub async fn abort_transaction(&self) -> Result<()> {
        let identity = self.transactional("abort_transaction")?;
        let _call = self.inner.txn_calls.lock().await;
        self.transition(TransactionState::AbortingTransaction, "abort_transaction")?;
        self.drop_unsent_batches();
        self.wait_for_in_flight().await;
        // A batch in flight may have come back to be retried meanwhile.
        self.drop_unsent_batches();
        let (producer, started, bump) = {
            let state = self.inner.lock();
            let Some(txn) = &state.txn else {
                return Err(Error::Closed);
            };
            (state.producer(), txn.started(), txn.epoch_bump_required())
        };
        if started {
            if let Err(error) = identity.end_txn(producer, false).await {
                return Err(self.request_failed("abort_transaction", error));
            }
        }
        self.with_transaction(|txn| {
            txn.transaction_ended();
            Ok(())
        })?;
        if !bump {
            return self.transition(TransactionState::Ready, "abort_transaction");
        }
        self.transition(TransactionState::Initializing, "abort_transaction")?;
        match identity
            .init_producer_id(self.inner.settings.transaction_timeout_ms, Some(producer))
            .await
        {
            Ok(bumped) => {
                self.take_producer_id(bumped);
                self.with_transaction(|txn| {
                    txn.epoch_bumped();
                    txn.transition(TransactionState::Ready, "abort_transaction", None)
                })
            }
            Err(error @ Error::Transaction { .. }) if error.is_fatal() => {
                Err(self.request_failed("abort_transaction", error))
            }
            Err(error) => {
                // The transaction is aborted but the epoch not bumped: abort_transaction
                // again does only the bump.
                self.with_transaction(|txn| {
                    txn.transition(
                        TransactionState::AbortableError,
                        "abort_transaction",
                        Some(error),
                    )?;
                    Err(txn.error().unwrap_or(Error::Closed))
                })
            }
        }
    }

    /// The transactional state (`None` without `transactional.id`).
    pub fn transaction_state(&self) -> Option<TransactionState> {
        self.inner
            .lock()
            .txn
            .as_ref()
            .map(TransactionManager::state)
    }

    /// The coordinator requests of `transactional.id`, or why `operation` needs it.
    fn transactional(&self, operation: &str) -> Result<TxnIdentity<'_>> {
        let inner = &*self.inner;
        match (
            &inner.txn_coordinator,
            inner.settings.transactional_id.as_deref(),
        ) {
            (Some(coordinator), Some(transactional_id)) => Ok(TxnIdentity {
                cluster: &inner.cluster,
                coordinator,
                transactional_id,
                bound: inner.settings.max_block,
                backoff: inner.settings.retry_backoff,
            }),
            _ => Err(Error::Config {
                key: "transactional.id".into(),
                reason: format!("must be set to call {operation}"),
            }),
        }
    }

    fn with_transaction<T>(
        &self,
        f: impl FnOnce(&mut TransactionManager) -> Result<T>,
    ) -> Result<T> {
        match &mut self.inner.lock().txn {
            Some(txn) => f(txn),
            None => Err(Error::Config {
                key: "transactional.id".into(),
                reason: "is not set".into(),
            }),
        }
    }

    fn transition(&self, to: TransactionState, operation: &str) -> Result<()> {
        self.with_transaction(|txn| txn.transition(to, operation, None))
    }

    /// A coordinator request failed: the state moves as the error's class says.
    fn request_failed(&self, operation: &str, error: Error) -> Error {
        match &mut self.inner.lock().txn {
            Some(txn) => txn.request_failed(operation, error),
            None => error,
        }
    }

    /// A new producer id or epoch: every partition's sequences start again from 0.
    fn take_producer_id(&self, producer: ProducerIdAndEpoch) {
        let mut state = self.inner.lock();
        debug_assert!(state.partitions.values().all(PartitionQueue::is_idle));
        state.producer_id = producer.producer_id;
        state.producer_epoch = producer.producer_epoch;
        state.needs_new_producer_id = false;
        for queue in state.partitions.values_mut() {
            queue.next_sequence = 0;
        }
        tracing::debug!(
            producer_id = producer.producer_id,
            producer_epoch = producer.producer_epoch,
            "transactional producer id taken"
        );
    }

    /// Fails the batches not yet sent with [`Error::TransactionAborted`].
    fn drop_unsent_batches(&self) {
        let mut state = self.inner.lock();
        if fail_unsent_batches(&self.inner, &mut state, &Error::TransactionAborted) {
            drop(state);
            self.inner.progress.notify_waiters();
        }
    }

    /// Waits until no batch and no AddPartitionsToTxn is in flight (their answers settle
    /// what the coordinator and the leaders hold of the transaction).
    async fn wait_for_in_flight(&self) {
        let inner = &self.inner;
        loop {
            let progress = inner.progress.notified();
            tokio::pin!(progress);
            progress.as_mut().enable();
            {
                let state = inner.lock();
                let batches = state.partitions.values().all(|q| q.in_flight == 0);
                let adding = state.txn.as_ref().is_some_and(TransactionManager::adding);
                if batches && !adding {
                    return;
                }
            }
            progress.await;
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A batch on its way to a leader.
struct Outgoing {
    tp: TopicPartition,
    batch: SentBatch,
}

/// The sender: drains ready batches into Produce requests, one request task per leader.
async fn run_sender(inner: Arc<Inner>) {
    // One request queue per leader: a leader whose connection hangs (a partitioned broker's
    // connect waits `socket.connection.setup.timeout.ms`) delays only its own partitions.
    let mut leaders: HashMap<i32, tokio::sync::mpsc::UnboundedSender<Vec<Outgoing>>> =
        HashMap::new();
    loop {
        if inner.closed.load(Ordering::Acquire)
            && inner
                .lock()
                .partitions
                .values()
                .all(PartitionQueue::is_idle)
        {
            return;
        }
        if let Err(error) = ensure_producer_id(&inner).await {
            tracing::debug!(%error, "InitProducerId failed; retrying");
            tokio::time::sleep(inner.settings.retry_backoff.max(Duration::from_millis(50))).await;
            continue;
        }
        let mut transaction_due = None;
        if inner.settings.transactional_id.is_some() {
            transaction_due = add_partitions_to_transaction(&inner).await;
            fail_batches_of_failed_transaction(&inner);
        }
        start_refresh(&inner);
        let wake = inner.wake.notified();
        let (by_leader, next_deadline) = drain(&inner);
        let next_deadline = match (next_deadline, transaction_due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        for (leader, batches) in by_leader {
            let batches = match leaders.get(&leader) {
                Some(queue) => match queue.send(batches) {
                    Ok(()) => continue,
                    Err(tokio::sync::mpsc::error::SendError(batches)) => batches,
                },
                None => batches,
            };
            let (queue, requests) = tokio::sync::mpsc::unbounded_channel();
            tokio::spawn(send_to_leader(inner.clone(), leader, requests));
            // A new channel takes every send.
            let _ = queue.send(batches);
            leaders.insert(leader, queue);
        }
        match next_deadline {
            Some(deadline) => {
                let _ = tokio::time::timeout_at(deadline.into(), wake).await;
            }
            None => wake.await,
        }
    }
}

/// Queues the requests for `leader`, one after another, so its connection carries each
/// partition's batches in sequence order; the answers are awaited apart. Ends when the sender
/// drops its queue (the producer closed).
async fn send_to_leader(
    inner: Arc<Inner>,
    leader: i32,
    mut requests: tokio::sync::mpsc::UnboundedReceiver<Vec<Outgoing>>,
) {
    while let Some(batches) = requests.recv().await {
        let queued = queue_request(&inner, leader, &batches).await;
        tokio::spawn(complete_request(inner.clone(), batches, queued));
    }
}

/// Takes a producer id when the producer is idempotent and has none (or needs a new one and
/// nothing is in flight).
async fn ensure_producer_id(inner: &Arc<Inner>) -> Result<()> {
    // A transactional producer's id comes from init_transactions (and the epoch bump after
    // an abort), never from the sender.
    if !inner.settings.idempotent || inner.settings.transactional_id.is_some() {
        return Ok(());
    }
    {
        let state = inner.lock();
        let needed = state.producer_id < 0
            || (state.needs_new_producer_id
                && state
                    .partitions
                    .values()
                    .all(|q| q.in_flight == 0 && q.retry.is_empty()));
        if !needed {
            return Ok(());
        }
    }
    let request = InitProducerIdRequest::default()
        // Null: an idempotent producer (the codec's default is an empty transactional id).
        .with_transactional_id(None)
        .with_transaction_timeout_ms(i32::MAX)
        .with_producer_id(kafka_protocol::messages::ProducerId(-1))
        .with_producer_epoch(-1);
    let response = inner.cluster.any().await?.send(&request).await?;
    if let Some(error) = Error::kafka(response.error_code, "InitProducerId", None) {
        return Err(error);
    }
    let mut state = inner.lock();
    state.producer_id = response.producer_id.0;
    state.producer_epoch = response.producer_epoch;
    state.needs_new_producer_id = false;
    for queue in state.partitions.values_mut() {
        queue.next_sequence = 0;
    }
    tracing::debug!(producer_id = response.producer_id.0, "producer id taken");
    Ok(())
}

/// Adds the partitions whose records wait to the transaction before their first batch goes:
/// one AddPartitionsToTxn for all of them. Returns when to try again after a retriable
/// answer; partitions still waiting after `delivery.timeout.ms` fail the transaction
/// (abortable), as their batches would have expired.
async fn add_partitions_to_transaction(inner: &Arc<Inner>) -> Option<Instant> {
    let coordinator = inner.txn_coordinator.as_ref()?;
    let transactional_id = inner.settings.transactional_id.as_deref()?;
    let (partitions, producer, waiting_since) = {
        let mut state = inner.lock();
        let producer = state.producer();
        let txn = state.txn.as_mut()?;
        let Some(partitions) = txn.partitions_to_add(Instant::now()) else {
            // Waiting out a backoff: the sender comes back then.
            return txn.add_partitions_due();
        };
        txn.set_adding(true);
        (partitions, producer, txn.add_partitions_waiting_since())
    };
    let identity = TxnIdentity {
        cluster: &inner.cluster,
        coordinator,
        transactional_id,
        bound: inner.settings.max_block,
        backoff: inner.settings.retry_backoff,
    };
    let outcome = identity.add_partitions(producer, &partitions).await;
    let mut state = inner.lock();
    let txn = state.txn.as_mut()?;
    txn.set_adding(false);
    // An abort may wait for this answer.
    inner.progress.notify_waiters();
    let error = match outcome {
        Ok(()) => {
            tracing::debug!(?partitions, "partitions added to the transaction");
            txn.partitions_added(&partitions);
            return None;
        }
        Err(error) => error,
    };
    let class = classify(TxnApi::AddPartitionsToTxn, &error);
    let expired =
        waiting_since.is_some_and(|since| since.elapsed() >= inner.settings.delivery_timeout);
    let kind = match class {
        ErrorClass::Retry | ErrorClass::FindCoordinator if !expired => {
            if class == ErrorClass::FindCoordinator {
                coordinator.forget(&inner.cluster);
            }
            // CONCURRENT_TRANSACTIONS mostly means the last transaction's markers are still
            // being written: a few milliseconds, not a full backoff.
            let backoff = if error.code() == Some(crate::protocol::errors::CONCURRENT_TRANSACTIONS)
            {
                Duration::from_millis(20)
            } else {
                inner.settings.retry_backoff.max(Duration::from_millis(10))
            };
            let until = Instant::now() + backoff;
            txn.add_partitions_later(until);
            tracing::debug!(%error, "AddPartitionsToTxn will be retried");
            return Some(until);
        }
        ErrorClass::Fatal => TransactionErrorKind::Fatal,
        _ => TransactionErrorKind::Abortable,
    };
    let error = if expired && kind == TransactionErrorKind::Abortable {
        Error::Timeout {
            what: format!("adding partitions to the transaction (last error: {error})"),
            after: inner.settings.delivery_timeout,
        }
    } else {
        error
    };
    txn.request_failed("send", classified(kind, error));
    None
}

/// Fails the batches not yet sent of a transaction that cannot commit (or of a producer
/// that cannot go on) with the transaction's error, as Kafka's sender aborts undrained
/// batches: they would never be added to it.
fn fail_batches_of_failed_transaction(inner: &Inner) {
    let mut state = inner.lock();
    let Some(error) = state.txn.as_ref().and_then(TransactionManager::error) else {
        return;
    };
    if fail_unsent_batches(inner, &mut state, &error) {
        drop(state);
        inner.progress.notify_waiters();
    }
}

/// Completes every batch that is not in flight with `error` and gives back its memory;
/// whether there were any. A batch that had taken a sequence number (one to retry) leaves a
/// hole in its partition's sequences: the transaction's epoch must then be bumped.
fn fail_unsent_batches(inner: &Inner, state: &mut State, error: &Error) -> bool {
    let mut failed = false;
    let mut sequence_hole = false;
    for queue in state.partitions.values_mut() {
        for open in queue.open.drain(..) {
            open.completion.complete(Err(error.clone()));
            inner
                .memory
                .add_permits(open.size_bytes - crate::protocol::batch::BATCH_HEADER_BYTES);
            failed = true;
        }
        for (_, batch) in std::mem::take(&mut queue.retry) {
            batch.completion.complete(Err(error.clone()));
            inner.memory.add_permits(batch.size_bytes);
            failed = true;
            sequence_hole = true;
        }
        queue.backoff_until = None;
        if queue.in_flight == 0 {
            queue.recovering = false;
        }
    }
    if sequence_hole {
        if let Some(txn) = &mut state.txn {
            txn.sequence_hole();
        }
    }
    failed
}

/// Refreshes the metadata of topics whose partitions have no known leader (or one that failed
/// them), in a task of its own: a refresh waiting on a broker that does not answer (paused, or
/// cut off) holds up only those topics, not every leader's batches. One refresh at a time;
/// when it ends, the sender looks again.
fn start_refresh(inner: &Arc<Inner>) {
    let topics = {
        let mut state = inner.lock();
        if state.stale_topics.is_empty() || state.refreshing_topics.is_some() {
            return;
        }
        let topics = std::mem::take(&mut state.stale_topics);
        state.refreshing_topics = Some(topics.clone());
        topics
    };
    let inner = inner.clone();
    tokio::spawn(async move {
        let failed = inner.cluster.refresh(Some(&topics)).await.err();
        if let Some(error) = &failed {
            tracing::debug!(%error, "metadata refresh failed");
            tokio::time::sleep(inner.settings.retry_backoff).await;
        }
        let mut state = inner.lock();
        state.refreshing_topics = None;
        if failed.is_some() {
            add_stale_topics(&mut state, topics);
        }
        drop(state);
        inner.wake.notify_one();
    });
}

/// Marks `topics` for a metadata refresh, each once.
fn add_stale_topics(state: &mut State, topics: impl IntoIterator<Item = String>) {
    for topic in topics {
        if !state.stale_topics.contains(&topic) {
            state.stale_topics.push(topic);
        }
    }
}

/// How much earlier than its linger a batch may go (the timer's granularity).
const LINGER_SLACK: Duration = Duration::from_millis(1);

/// The batches to send now, by leader, and when the next lingering batch is due.
#[allow(clippy::type_complexity)]
fn drain(inner: &Arc<Inner>) -> (BTreeMap<i32, Vec<Outgoing>>, Option<Instant>) {
    let settings = &inner.settings;
    let metadata = inner.cluster.cached();
    let mut state = inner.lock();
    let now = Instant::now();
    let flushing = state.flushing > 0 || inner.closed.load(Ordering::Acquire);
    let (producer_id, producer_epoch) = (state.producer_id, state.producer_epoch);
    if state.txn.as_ref().is_some_and(|txn| !txn.sending()) {
        // No transaction open (or it is aborting, or failed): its batches wait to be
        // dropped or failed, none goes.
        return (BTreeMap::new(), None);
    }
    if settings.idempotent && (producer_id < 0 || state.needs_new_producer_id) {
        // No new batches go out until the (new) producer id is taken.
        let retries_pending = state.partitions.values().any(|q| !q.retry.is_empty());
        if producer_id < 0 || !retries_pending {
            return (BTreeMap::new(), Some(now + settings.retry_backoff));
        }
    }
    // A hole in some partition's sequences: only retries go out until a new producer id.
    let hold_new_batches = settings.idempotent && state.needs_new_producer_id;
    let mut by_leader: BTreeMap<i32, Vec<Outgoing>> = BTreeMap::new();
    let mut next_deadline: Option<Instant> = None;
    let mut stale = Vec::new();
    let mut rotate_sticky = Vec::new();
    let mut request_bytes: HashMap<i32, usize> = HashMap::new();
    let refreshing = state.refreshing_topics.clone().unwrap_or_default();
    let transactional = settings.transactional_id.is_some();
    let State {
        partitions, txn, ..
    } = &mut *state;
    for (tp, queue) in partitions.iter_mut() {
        if (queue.retry.is_empty() && queue.open.is_empty()) || refreshing.contains(&tp.0) {
            continue;
        }
        // A transaction's batch goes only once its partition is in the transaction.
        if txn.as_ref().is_some_and(|txn| !txn.is_added(tp)) {
            continue;
        }
        let leader = match metadata.partition(&tp.0, tp.1) {
            Some(p) if p.leader >= 0 => p.leader,
            _ => {
                stale.push(tp.0.clone());
                continue;
            }
        };
        let limit = if queue.recovering {
            1
        } else {
            settings.max_in_flight
        };
        if queue.in_flight >= limit {
            continue;
        }
        let bytes_so_far = request_bytes.entry(leader).or_default();
        if let Some(until) = queue.backoff_until {
            if until > now {
                next_deadline = Some(next_deadline.map_or(until, |d| d.min(until)));
                continue;
            }
            queue.backoff_until = None;
        }
        if let Some((&sequence, _)) = queue.retry.iter().next() {
            let Some(mut batch) = queue.retry.remove(&sequence) else {
                continue;
            };
            batch.attempts += 1;
            *bytes_so_far += batch.bytes.len();
            queue.in_flight += 1;
            by_leader.entry(leader).or_default().push(Outgoing {
                tp: tp.clone(),
                batch,
            });
            continue;
        }
        if queue.recovering {
            if queue.in_flight > 0 {
                continue;
            }
            queue.recovering = false;
        }
        if hold_new_batches {
            continue;
        }
        let Some(front) = queue.open.front() else {
            continue;
        };
        // The timer wakes up to a millisecond late: a batch within a millisecond of its
        // linger goes now, so none waits longer than linger.ms.
        let due = front.created + settings.linger;
        let ready = queue.open.len() > 1
            || front.size_bytes >= settings.batch_size
            || due <= now + LINGER_SLACK
            || flushing;
        if !ready {
            let wake_at = due.checked_sub(LINGER_SLACK).unwrap_or(due);
            next_deadline = Some(next_deadline.map_or(wake_at, |d| d.min(wake_at)));
            continue;
        }
        if *bytes_so_far > 0 && *bytes_so_far + front.size_bytes > settings.max_request_size {
            // The request to this leader is full: next round.
            next_deadline = Some(now);
            continue;
        }
        let Some(open) = queue.open.pop_front() else {
            continue;
        };
        let sequence = queue.next_sequence;
        let count = open.records as i32;
        queue.next_sequence = queue.next_sequence.wrapping_add(count) & i32::MAX;
        let builder = match (settings.idempotent, transactional) {
            (true, true) => open
                .builder
                .producer(producer_id, producer_epoch, sequence)
                .transactional(),
            (true, false) => open.builder.producer(producer_id, producer_epoch, sequence),
            (false, _) => open.builder,
        };
        let bytes = match builder.build_compressed(settings.codec) {
            Ok(bytes) => Bytes::from(bytes),
            Err(reason) => {
                open.completion.complete(Err(Error::Protocol(format!(
                    "compressing a batch: {reason}"
                ))));
                inner
                    .memory
                    .add_permits(open.size_bytes - crate::protocol::batch::BATCH_HEADER_BYTES);
                continue;
            }
        };
        *bytes_so_far += bytes.len();
        queue.in_flight += 1;
        rotate_sticky.push(tp.clone());
        by_leader.entry(leader).or_default().push(Outgoing {
            tp: tp.clone(),
            batch: SentBatch {
                bytes,
                sequence,
                created: open.created,
                completion: open.completion,
                size_bytes: open.size_bytes - crate::protocol::batch::BATCH_HEADER_BYTES,
                attempts: 1,
            },
        });
        if !queue.open.is_empty() {
            // More to send from this partition: come back at once.
            next_deadline = Some(now);
        }
    }
    // A sent batch moves a topic's sticky partition on (KIP-480).
    for (topic, partition) in rotate_sticky {
        let count = metadata
            .topics
            .get(&topic)
            .map_or(1, |t| t.partitions.len() as i32);
        let State { sticky, random, .. } = &mut *state;
        if sticky.get(&topic) == Some(&partition) && count > 1 {
            let mut next = random.below(count);
            if next == partition {
                next = (next + 1) % count;
            }
            sticky.insert(topic, next);
        }
    }
    if !stale.is_empty() {
        add_stale_topics(&mut state, stale);
        next_deadline = Some(now + settings.retry_backoff);
    }
    (by_leader, next_deadline)
}

/// A request queued on its leader's connection: its answer to come (`None` with acks=0).
type Queued = Result<Option<(PendingResponse<ProduceResponse>, String)>>;

/// Queues one Produce request for `batches` on the connection to `leader`.
async fn queue_request(inner: &Arc<Inner>, leader: i32, batches: &[Outgoing]) -> Queued {
    let settings = &inner.settings;
    let mut topics: BTreeMap<&str, Vec<PartitionProduceData>> = BTreeMap::new();
    for outgoing in batches {
        topics.entry(outgoing.tp.0.as_str()).or_default().push(
            PartitionProduceData::default()
                .with_index(outgoing.tp.1)
                .with_records(Some(outgoing.batch.bytes.clone())),
        );
    }
    let request = ProduceRequest::default()
        .with_transactional_id(
            settings
                .transactional_id
                .as_ref()
                .map(|id| TransactionalId(StrBytes::from_string(id.clone()))),
        )
        .with_acks(settings.acks)
        .with_timeout_ms(
            i32::try_from(inner.cluster.config.request_timeout.as_millis()).unwrap_or(i32::MAX),
        )
        .with_topic_data(
            topics
                .into_iter()
                .map(|(topic, partitions)| {
                    TopicProduceData::default()
                        .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                        .with_partition_data(partitions)
                })
                .collect(),
        );
    let max_version = if settings.transactional_id.is_some() {
        PRODUCE_VERSION_MAX_TRANSACTIONAL
    } else {
        PRODUCE_VERSION_MAX
    };
    let connection = inner.cluster.broker(leader).await?;
    if settings.acks == 0 {
        connection
            .send_without_response(&request, max_version)
            .await?;
        return Ok(None);
    }
    match connection.queue(&request, max_version).await {
        Ok(pending) => Ok(Some((pending, connection.addr().to_owned()))),
        Err(error) => {
            inner.cluster.forget(connection.addr());
            Err(error)
        }
    }
}

/// Waits for a Produce request's answer and settles each of its batches.
async fn complete_request(inner: Arc<Inner>, batches: Vec<Outgoing>, queued: Queued) {
    let settings = &inner.settings;
    let result = match queued {
        Ok(Some((pending, addr))) => match pending.wait().await {
            Ok(response) => Ok(Some(response)),
            Err(error) => {
                inner.cluster.forget(&addr);
                Err(error)
            }
        },
        Ok(None) => Ok(None),
        Err(error) => Err(error),
    };
    let mut state = inner.lock();
    for Outgoing { tp, batch } in batches {
        let outcome: std::result::Result<(i64, i64), Error> = match &result {
            Ok(None) => Ok((-1, -1)),
            Ok(Some(response)) => partition_outcome(response, &tp),
            // The whole request failed: each batch keeps the error (retriable or not).
            Err(error) => Err(error.clone()),
        };
        let Some(queue) = state.partitions.get_mut(&tp) else {
            continue;
        };
        queue.in_flight = queue.in_flight.saturating_sub(1);
        match outcome {
            Ok((base_offset, log_append_time)) => {
                batch
                    .completion
                    .complete(Ok((base_offset, log_append_time)));
                inner.memory.add_permits(batch.size_bytes);
            }
            Err(error) => {
                let code = error.code();
                let out_of_order = code == Some(errors::OUT_OF_ORDER_SEQUENCE_NUMBER)
                    && (queue.recovering || !queue.retry.is_empty());
                let retriable = error.is_retriable() || out_of_order;
                let expired = batch.created.elapsed() >= settings.delivery_timeout;
                if retriable && !expired && batch.attempts <= settings.retries {
                    // KIP-951: the answer may name the new leader; then the retry goes
                    // there without a Metadata request.
                    let learned = match &result {
                        Ok(Some(response)) => learn_leader(&inner, response, &tp),
                        _ => false,
                    };
                    if !learned
                        && (matches!(
                            code,
                            Some(
                                errors::NOT_LEADER_OR_FOLLOWER
                                    | errors::LEADER_NOT_AVAILABLE
                                    | errors::UNKNOWN_TOPIC_OR_PARTITION
                                    | errors::FENCED_LEADER_EPOCH
                            )
                        ) || code.is_none())
                    {
                        add_stale_topics(&mut state, [tp.0.clone()]);
                    }
                    tracing::debug!(topic = tp.0, partition = tp.1, %error, "batch will be retried");
                    let Some(queue) = state.partitions.get_mut(&tp) else {
                        continue;
                    };
                    queue.recovering = true;
                    queue.backoff_until = Some(Instant::now() + settings.retry_backoff);
                    queue.retry.insert(batch.sequence, batch);
                } else {
                    let error = if expired {
                        Error::Timeout {
                            what: format!(
                                "delivery of a batch to {}-{} (delivery.timeout.ms; last error: {error})",
                                tp.0, tp.1
                            ),
                            after: settings.delivery_timeout,
                        }
                    } else {
                        error
                    };
                    if let Some(txn) = &mut state.txn {
                        // The transaction cannot commit without this batch; its sequence
                        // is a hole until the epoch is bumped after the abort.
                        txn.batch_failed(&error, true);
                    } else if settings.idempotent {
                        state.needs_new_producer_id = true;
                    }
                    batch.completion.complete(Err(error));
                    inner.memory.add_permits(batch.size_bytes);
                }
            }
        }
    }
    drop(state);
    inner.progress.notify_waiters();
    inner.wake.notify_one();
}

/// Takes a partition's new leader from a Produce answer's KIP-951 fields into the metadata
/// cache; false when the answer names none (or none newer than what is known).
fn learn_leader(inner: &Inner, response: &ProduceResponse, tp: &TopicPartition) -> bool {
    let Some(partition) = response
        .responses
        .iter()
        .filter(|t| t.name.0.as_str() == tp.0)
        .flat_map(|t| t.partition_responses.iter())
        .find(|p| p.index == tp.1)
    else {
        return false;
    };
    let leader = partition.current_leader.leader_id.0;
    if leader < 0 {
        return false;
    }
    let endpoint = response
        .node_endpoints
        .iter()
        .find(|e| e.node_id.0 == leader)
        .map(|e| super::BrokerInfo {
            node_id: leader,
            host: e.host.to_string(),
            port: e.port,
            rack: e.rack.as_ref().map(|r| r.to_string()),
        });
    inner.cluster.learn_leader(
        &tp.0,
        tp.1,
        leader,
        partition.current_leader.leader_epoch,
        endpoint,
    )
}

/// A partition's answer: (base offset, log append time) or its error.
fn partition_outcome(response: &ProduceResponse, tp: &TopicPartition) -> Result<(i64, i64)> {
    let partition = response
        .responses
        .iter()
        .filter(|t| t.name.0.as_str() == tp.0)
        .flat_map(|t| t.partition_responses.iter())
        .find(|p| p.index == tp.1)
        .ok_or_else(|| {
            Error::Protocol(format!(
                "Produce response has no answer for {}-{}",
                tp.0, tp.1
            ))
        })?;
    if partition.error_code == errors::DUPLICATE_SEQUENCE_NUMBER {
        // Already stored by an earlier attempt.
        return Ok((partition.base_offset, partition.log_append_time_ms));
    }
    match Error::kafka(
        partition.error_code,
        format!("partition {}-{}", tp.0, tp.1),
        partition.error_message.as_deref(),
    ) {
        Some(error) => Err(error),
        None => Ok((partition.base_offset, partition.log_append_time_ms)),
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::produce_response::{
        PartitionProduceResponse, TopicProduceResponse,
    };
    use kafka_protocol::messages::{
        ApiKey, InitProducerIdResponse, ProducerId, RequestKind, ResponseKind,
    };

    use std::collections::BTreeSet;

    use super::*;
    use crate::client::fake_broker::{self, FakeBroker, Received};
    use crate::protocol::batch::{BatchHeader, BatchIter, RecordIter};

    /// One batch as a Produce request carried it.
    struct SentBatch {
        partition: i32,
        header: BatchHeader,
        bytes: Vec<u8>,
        values: Vec<String>,
    }

    fn batches(request: &ProduceRequest) -> Vec<SentBatch> {
        let mut out = Vec::new();
        for topic in &request.topic_data {
            for partition in &topic.partition_data {
                let Some(records) = &partition.records else {
                    continue;
                };
                for batch in BatchIter::new(records) {
                    let (_, header, raw) = batch.expect("a whole batch");
                    let values = RecordIter::new(&header, raw)
                        .map(|record| {
                            let value = record.expect("a record").value.unwrap_or_default();
                            String::from_utf8_lossy(value).into_owned()
                        })
                        .collect();
                    out.push(SentBatch {
                        partition: partition.index,
                        header,
                        bytes: raw.to_vec(),
                        values,
                    });
                }
            }
        }
        out
    }

    /// An answer to every partition of `request`: `error_code`, and `base_offset` for each.
    fn produce_answer(
        request: &ProduceRequest,
        error_code: i16,
        mut base_offset: impl FnMut(i32, &BatchHeader) -> i64,
    ) -> ResponseKind {
        ResponseKind::Produce(
            ProduceResponse::default().with_responses(
                request
                    .topic_data
                    .iter()
                    .map(|topic| {
                        TopicProduceResponse::default()
                            .with_name(topic.name.clone())
                            .with_partition_responses(
                                topic
                                    .partition_data
                                    .iter()
                                    .map(|p| {
                                        let records = p.records.clone().unwrap_or_default();
                                        let header =
                                            BatchHeader::parse(&records).expect("a batch header");
                                        PartitionProduceResponse::default()
                                            .with_index(p.index)
                                            .with_error_code(error_code)
                                            .with_base_offset(if error_code == errors::NONE {
                                                base_offset(p.index, &header)
                                            } else {
                                                -1
                                            })
                                            .with_log_append_time_ms(-1)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        )
    }

    /// Serves topic `t` (`partitions` partitions, all led by `broker`), producer ids 1000,
    /// 1001, ... with epoch 7, and Produce as `produce` answers.
    fn serve_topic(
        broker: &FakeBroker,
        partitions: usize,
        mut produce: impl FnMut(&Received, &ProduceRequest) -> ResponseKind + Send + 'static,
    ) {
        let node = broker.node();
        let leaders = vec![node.node_id; partitions];
        broker.serve(move |received| match &received.request {
            RequestKind::Metadata(_) => Some(fake_broker::metadata(&[node], &[("t", &leaders)])),
            RequestKind::InitProducerId(_) => Some(ResponseKind::InitProducerId(
                InitProducerIdResponse::default()
                    .with_producer_id(ProducerId(1000 + received.nth as i64))
                    .with_producer_epoch(7),
            )),
            RequestKind::Produce(request) => Some(produce(received, request)),
            _ => None,
        });
    }

    fn config(broker: &FakeBroker) -> ClientConfig {
        ClientConfig::new(&broker.addr())
            .set("linger.ms", "0")
            .set("retry.backoff.ms", "10")
    }

    /// The APIs `broker` received, ApiVersions left out.
    fn api_order(broker: &FakeBroker) -> Vec<ApiKey> {
        broker
            .received()
            .iter()
            .map(|r| r.api_key)
            .filter(|&key| key != ApiKey::ApiVersions)
            .collect()
    }

    #[tokio::test]
    async fn a_batch_refused_as_not_the_leader_is_resent_unchanged_after_a_metadata_refresh() {
        let broker = FakeBroker::bind(1).await;
        serve_topic(&broker, 1, |received, request| match received.nth {
            0 => produce_answer(request, errors::NOT_LEADER_OR_FOLLOWER, |_, _| -1),
            _ => produce_answer(request, errors::NONE, |_, _| 42),
        });
        let producer = Producer::new(config(&broker)).expect("producer");
        let delivery = producer
            .send(ProducerRecord::new("t", "v").partition(0))
            .await
            .expect("queued");
        let stored = delivery.await.expect("delivered on the retry");
        assert_eq!((stored.partition, stored.offset), (0, 42));

        let requests = broker.requests::<ProduceRequest>();
        assert_eq!(requests.len(), 2, "one refusal, one retry");
        assert!(requests.iter().all(|r| r.acks == -1), "acks=all by default");
        let (first, retry) = (&batches(&requests[0])[0], &batches(&requests[1])[0]);
        assert_eq!(
            (first.header.producer_id, first.header.producer_epoch),
            (1000, 7)
        );
        assert_eq!(first.header.base_sequence, 0);
        // The same bytes: same producer id and sequence, so a broker that had stored the
        // first attempt would drop the second as a duplicate.
        assert_eq!(first.bytes, retry.bytes);
        // The leader was looked up again between the refusal and the retry.
        let order = api_order(&broker);
        let produces: Vec<usize> = (0..order.len())
            .filter(|&i| order[i] == ApiKey::Produce)
            .collect();
        assert!(
            order[produces[0]..produces[1]].contains(&ApiKey::Metadata),
            "{order:?}"
        );
        assert_eq!(broker.count(ApiKey::InitProducerId), 1);
    }

    #[tokio::test]
    async fn a_non_retriable_error_fails_the_record_naming_it_and_the_next_batch_takes_a_new_producer_id()
     {
        let broker = FakeBroker::bind(1).await;
        serve_topic(&broker, 1, |received, request| match received.nth {
            0 => produce_answer(request, errors::TOPIC_AUTHORIZATION_FAILED, |_, _| -1),
            _ => produce_answer(request, errors::NONE, |_, _| 5),
        });
        let producer = Producer::new(config(&broker)).expect("producer");
        let refused = producer
            .send(ProducerRecord::new("t", "first").partition(0))
            .await
            .expect("queued")
            .await
            .expect_err("not authorized");
        assert_eq!(refused.code(), Some(errors::TOPIC_AUTHORIZATION_FAILED));
        assert!(
            refused
                .to_string()
                .starts_with("TOPIC_AUTHORIZATION_FAILED: partition t-0"),
            "{refused}"
        );
        assert_eq!(broker.count(ApiKey::Produce), 1, "not retried");

        let stored = producer
            .send(ProducerRecord::new("t", "second").partition(0))
            .await
            .expect("queued")
            .await
            .expect("delivered");
        assert_eq!(stored.offset, 5);
        // The failed batch left a hole in the partition's sequences: a new producer id, whose
        // sequences start again from 0.
        assert_eq!(broker.count(ApiKey::InitProducerId), 2);
        let requests = broker.requests::<ProduceRequest>();
        let second = &batches(&requests[1])[0];
        assert_eq!(second.values, ["second"]);
        assert_eq!(
            (second.header.producer_id, second.header.base_sequence),
            (1001, 0)
        );
    }

    #[tokio::test]
    async fn a_partitions_batches_go_in_order_with_consecutive_sequences() {
        let broker = FakeBroker::bind(1).await;
        // The broker gives offsets as a log does: each batch's base is the end so far.
        let mut log_end_offset = 0;
        serve_topic(&broker, 2, move |_, request| {
            produce_answer(request, errors::NONE, |partition, header| {
                assert_eq!(partition, 1, "every record was sent to partition 1");
                let base = log_end_offset;
                log_end_offset += i64::from(header.records_count);
                base
            })
        });
        // 61 header bytes and about 33 per record: three records per batch.
        let producer = Producer::new(
            config(&broker)
                .set("batch.size", "160")
                .set("linger.ms", "60000"),
        )
        .expect("producer");
        let mut deliveries = Vec::new();
        for i in 0..20 {
            let record = ProducerRecord::new("t", format!("record-{i:02}")).partition(1);
            deliveries.push(producer.send(record).await.expect("queued"));
        }
        producer.flush().await.expect("flushed");
        for (i, delivery) in deliveries.into_iter().enumerate() {
            assert_eq!(delivery.await.expect("delivered").offset, i as i64);
        }

        let sent: Vec<SentBatch> = broker
            .requests::<ProduceRequest>()
            .iter()
            .flat_map(batches)
            .collect();
        assert!(sent.len() >= 7, "{} batches", sent.len());
        let values: Vec<String> = sent.iter().flat_map(|b| b.values.clone()).collect();
        let expected: Vec<String> = (0..20).map(|i| format!("record-{i:02}")).collect();
        assert_eq!(values, expected, "records in send order");
        let mut sequence = 0;
        for batch in &sent {
            assert_eq!(batch.partition, 1);
            assert_eq!(
                (batch.header.producer_id, batch.header.producer_epoch),
                (1000, 7)
            );
            assert_eq!(batch.header.base_sequence, sequence);
            sequence += batch.header.records_count;
        }
    }

    /// Serves a transactional producer: topic `t` (2 partitions), this broker its
    /// transaction coordinator, producer id 4000 (epoch 3, bumped by one per InitProducerId
    /// that names it), AddPartitionsToTxn as `add_partitions` answers each partition, Produce
    /// as `produce`, EndTxn accepted.
    fn serve_transactions(
        broker: &FakeBroker,
        mut add_partitions: impl FnMut(&Received) -> i16 + Send + 'static,
        mut produce: impl FnMut(&Received, &ProduceRequest) -> ResponseKind + Send + 'static,
    ) {
        use kafka_protocol::messages::add_partitions_to_txn_response::{
            AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
        };
        use kafka_protocol::messages::{AddPartitionsToTxnResponse, EndTxnResponse};
        let node = broker.node();
        let leaders = vec![node.node_id; 2];
        broker.serve(move |received| match &received.request {
            RequestKind::Metadata(_) => Some(fake_broker::metadata(&[node], &[("t", &leaders)])),
            RequestKind::FindCoordinator(_) => Some(fake_broker::find_coordinator(node)),
            RequestKind::InitProducerId(request) => {
                let epoch = if request.producer_id.0 == 4000 {
                    request.producer_epoch + 1
                } else {
                    3
                };
                Some(ResponseKind::InitProducerId(
                    InitProducerIdResponse::default()
                        .with_producer_id(ProducerId(4000))
                        .with_producer_epoch(epoch),
                ))
            }
            RequestKind::AddPartitionsToTxn(request) => {
                let code = add_partitions(received);
                Some(ResponseKind::AddPartitionsToTxn(
                    AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(
                        request
                            .v3_and_below_topics
                            .iter()
                            .map(|topic| {
                                AddPartitionsToTxnTopicResult::default()
                                    .with_name(topic.name.clone())
                                    .with_results_by_partition(
                                        topic
                                            .partitions
                                            .iter()
                                            .map(|&p| {
                                                AddPartitionsToTxnPartitionResult::default()
                                                    .with_partition_index(p)
                                                    .with_partition_error_code(code)
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    ),
                ))
            }
            RequestKind::Produce(request) => Some(produce(received, request)),
            RequestKind::EndTxn(_) => Some(ResponseKind::EndTxn(EndTxnResponse::default())),
            _ => None,
        });
    }

    fn transactional_config(broker: &FakeBroker) -> ClientConfig {
        config(broker).set("transactional.id", "tx")
    }

    /// The partitions each AddPartitionsToTxn named, in order.
    fn added_partitions(broker: &FakeBroker) -> Vec<Vec<i32>> {
        broker
            .requests::<kafka_protocol::messages::AddPartitionsToTxnRequest>()
            .iter()
            .map(|r| {
                assert_eq!(r.v3_and_below_transactional_id.as_str(), "tx");
                r.v3_and_below_topics
                    .iter()
                    .flat_map(|t| t.partitions.clone())
                    .collect()
            })
            .collect()
    }

    #[tokio::test]
    async fn a_transaction_adds_its_partitions_before_their_first_batch_and_commits_with_end_txn() {
        let broker = FakeBroker::bind(1).await;
        // The last transaction's markers are still being written: retried.
        serve_transactions(
            &broker,
            |received| match received.nth {
                0 => errors::CONCURRENT_TRANSACTIONS,
                _ => errors::NONE,
            },
            |_, request| {
                produce_answer(request, errors::NONE, |_, header| {
                    header.base_sequence.into()
                })
            },
        );
        let producer = Producer::new(transactional_config(&broker)).expect("producer");
        let refused = producer
            .send(ProducerRecord::new("t", "early"))
            .await
            .err()
            .expect("no transaction yet");
        assert!(
            refused.to_string().contains("call init_transactions first"),
            "{refused}"
        );
        producer.init_transactions().await.expect("init");
        producer.begin_transaction().expect("begin");
        let mut deliveries = Vec::new();
        for (partition, value) in [(0, "a"), (1, "b"), (0, "c")] {
            let record = ProducerRecord::new("t", value).partition(partition);
            deliveries.push(producer.send(record).await.expect("queued"));
        }
        producer.commit_transaction().await.expect("commit");
        for delivery in deliveries {
            delivery.await.expect("delivered");
        }
        // The next transaction adds its partition again; sequences go on.
        producer.begin_transaction().expect("begin");
        let delivery = producer
            .send(ProducerRecord::new("t", "d").partition(0))
            .await
            .expect("queued");
        producer.commit_transaction().await.expect("commit");
        delivery.await.expect("delivered");

        let init = &broker.requests::<InitProducerIdRequest>()[0];
        assert_eq!(
            init.transactional_id.as_ref().map(|id| id.as_str()),
            Some("tx")
        );
        assert_eq!((init.producer_id.0, init.producer_epoch), (-1, -1));
        assert_eq!(init.transaction_timeout_ms, 60_000);
        let added = added_partitions(&broker);
        assert!(added.len() >= 3, "{added:?}");
        assert_eq!(
            added[added.len() - 1],
            [0],
            "the second transaction's partition"
        );
        assert_eq!(
            added[..added.len() - 1]
                .iter()
                .flatten()
                .collect::<BTreeSet<_>>(),
            BTreeSet::from([&0, &1]),
            "the first transaction's partitions, batched: {added:?}"
        );
        // Every batch went after its partition was added, flagged, with the producer's id.
        let order = api_order(&broker);
        let first_produce = order.iter().position(|&k| k == ApiKey::Produce);
        let first_added_ok = order
            .iter()
            .enumerate()
            .filter(|(_, k)| **k == ApiKey::AddPartitionsToTxn)
            .nth(1)
            .map(|(i, _)| i);
        assert!(first_added_ok < first_produce, "{order:?}");
        let mut sequences: BTreeMap<i32, Vec<(i32, Vec<String>)>> = BTreeMap::new();
        for request in broker.requests::<ProduceRequest>() {
            assert_eq!(
                request.transactional_id.as_ref().map(|id| id.as_str()),
                Some("tx")
            );
            for batch in batches(&request) {
                assert!(batch.header.is_transactional());
                assert_eq!(
                    (batch.header.producer_id, batch.header.producer_epoch),
                    (4000, 3)
                );
                sequences
                    .entry(batch.partition)
                    .or_default()
                    .push((batch.header.base_sequence, batch.values));
            }
        }
        let p0: Vec<i32> = sequences[&0].iter().map(|(s, _)| *s).collect();
        assert_eq!(
            p0.last(),
            Some(&2),
            "partition 0's sequences go on: {sequences:?}"
        );
        let ends: Vec<bool> = broker
            .requests::<kafka_protocol::messages::EndTxnRequest>()
            .iter()
            .map(|r| r.committed)
            .collect();
        assert_eq!(ends, [true, true]);
        // A transaction that wrote nothing ends without EndTxn.
        producer.begin_transaction().expect("begin");
        producer.commit_transaction().await.expect("commit");
        assert_eq!(broker.count(ApiKey::EndTxn), 2);
    }

    #[tokio::test]
    async fn a_failed_batch_makes_the_transaction_abortable_and_the_abort_bumps_the_epoch() {
        let broker = FakeBroker::bind(1).await;
        serve_transactions(
            &broker,
            |_| errors::NONE,
            |received, request| match received.nth {
                0 => produce_answer(request, errors::TOPIC_AUTHORIZATION_FAILED, |_, _| -1),
                _ => produce_answer(request, errors::NONE, |_, _| 10),
            },
        );
        let producer = Producer::new(transactional_config(&broker)).expect("producer");
        producer.init_transactions().await.expect("init");
        producer.begin_transaction().expect("begin");
        let failed = producer
            .send(ProducerRecord::new("t", "refused").partition(0))
            .await
            .expect("queued")
            .await
            .expect_err("not authorized");
        assert_eq!(failed.code(), Some(errors::TOPIC_AUTHORIZATION_FAILED));
        let commit = producer.commit_transaction().await.expect_err("abortable");
        assert!(commit.is_abortable() && !commit.is_fatal(), "{commit}");
        assert!(
            commit.to_string().starts_with("TOPIC_AUTHORIZATION_FAILED"),
            "{commit}"
        );
        assert_eq!(
            producer.transaction_state(),
            Some(TransactionState::AbortableError)
        );
        let send = producer
            .send(ProducerRecord::new("t", "x").partition(0))
            .await
            .err()
            .expect("only abort now");
        assert!(send.is_abortable(), "{send}");

        producer.abort_transaction().await.expect("abort");
        // KIP-360: the epoch is bumped with the producer's own id and epoch.
        let inits = broker.requests::<InitProducerIdRequest>();
        assert_eq!(inits.len(), 2);
        assert_eq!((inits[1].producer_id.0, inits[1].producer_epoch), (4000, 3));
        producer.begin_transaction().expect("begin");
        producer
            .send(ProducerRecord::new("t", "after").partition(0))
            .await
            .expect("queued");
        producer.commit_transaction().await.expect("commit");
        let last = broker
            .requests::<ProduceRequest>()
            .pop()
            .expect("a produce");
        let batch = &batches(&last)[0];
        assert_eq!(batch.values, ["after"]);
        assert_eq!(
            (batch.header.producer_epoch, batch.header.base_sequence),
            (4, 0),
            "the bumped epoch starts its sequences at 0"
        );
        let ends: Vec<bool> = broker
            .requests::<kafka_protocol::messages::EndTxnRequest>()
            .iter()
            .map(|r| r.committed)
            .collect();
        assert_eq!(ends, [false, true]);
    }

    #[tokio::test]
    async fn acks_reach_the_request_and_acks_0_resolves_without_an_answer() {
        let broker = FakeBroker::bind(1).await;
        serve_topic(&broker, 1, |_, request| {
            produce_answer(request, errors::NONE, |_, _| 9)
        });
        let leader_only = Producer::new(config(&broker).set("acks", "1")).expect("producer");
        let stored = leader_only
            .send(ProducerRecord::new("t", "one").partition(0))
            .await
            .expect("queued")
            .await
            .expect("delivered");
        assert_eq!(stored.offset, 9);
        let fire_and_forget = Producer::new(config(&broker).set("acks", "0")).expect("producer");
        let sent = fire_and_forget
            .send(ProducerRecord::new("t", "zero").partition(0))
            .await
            .expect("queued")
            .await
            .expect("written");
        assert_eq!(sent.offset, -1, "no answer, no offset");
        // Resolved once queued on the connection: the broker reads it a moment later.
        broker.wait_for(ApiKey::Produce, 2).await;

        let requests = broker.requests::<ProduceRequest>();
        let acks: Vec<i16> = requests.iter().map(|r| r.acks).collect();
        assert_eq!(acks, [1, 0]);
        // Idempotence needs acks=all: without it no producer id is taken.
        assert_eq!(broker.count(ApiKey::InitProducerId), 0);
        for request in &requests {
            assert_eq!(batches(request)[0].header.producer_id, -1);
        }
    }
}
