//! The consumer: partitions assigned by hand ([`Consumer::assign`]) or by a consumer group
//! ([`Consumer::subscribe`], with the classic protocol or KIP-848), records fetched from each
//! partition's leader with one fetch in flight per broker, positions that start from the
//! group's committed offsets or `auto.offset.reset`, commits, seeks, pause and resume.
//!
//! As in Kafka's clients, [`Consumer::poll`] drives everything: it joins the group when needed,
//! finds starting positions, sends fetches and returns what has arrived. A background task
//! heartbeats to the group coordinator; a consumer that stops polling for longer than
//! `max.poll.interval.ms` leaves the group so its partitions go to others.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    BrokerId, FetchRequest, FetchResponse, GroupId, ListOffsetsRequest, OffsetCommitRequest,
    OffsetFetchRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::{Notify, mpsc};

use super::assignor::Assignor;
use super::cluster::Cluster;
use super::config::{ClientConfig, CommonConfig};
use super::error::{Error, Result, is_retriable_code};
use super::group::{self, GroupProtocol, GroupShared};
use crate::protocol::batch::{BatchHeader, BatchIter, RecordIter, compute_crc, read_varint};
use crate::protocol::codec;
use crate::protocol::errors;

pub use crate::protocol::topic_partition::TopicPartition;

/// What a record's timestamp means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    /// Set by the producer.
    CreateTime,
    /// Set by the broker when it appended the record (`message.timestamp.type=LogAppendTime`).
    LogAppendTime,
}

/// One record as the consumer returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// The topic.
    pub topic: Arc<str>,
    /// The partition.
    pub partition: i32,
    /// Its offset in the partition.
    pub offset: i64,
    /// Its timestamp, in milliseconds since the epoch.
    pub timestamp: i64,
    /// Whether the timestamp is the producer's or the broker's.
    pub timestamp_type: TimestampType,
    /// The key, if any.
    pub key: Option<Bytes>,
    /// The value (`None` for a tombstone).
    pub value: Option<Bytes>,
    /// The headers, in order.
    pub headers: Vec<(String, Option<Bytes>)>,
    /// The leader epoch of the batch it came in.
    pub leader_epoch: Option<i32>,
}

/// Where to start a partition that has no committed offset (`auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    /// The oldest record still in the log.
    Earliest,
    /// The end of the log: only records produced from now on.
    Latest,
    /// Fail the poll ([`Error::NoOffset`]): the application must seek.
    None,
}

/// Which records a fetch may return (`isolation.level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationLevel {
    /// Everything up to the high watermark.
    ReadUncommitted,
    /// Only committed transactional records, up to the last stable offset.
    ReadCommitted,
}

/// Told about partitions as a group moves them: in `on_partitions_revoked` the consumer still
/// owns them (commit there to keep exactly what was processed); `on_partitions_lost` means
/// the group already gave them to others (the member was fenced or timed out).
pub trait RebalanceListener: Send + Sync {
    /// Partitions given to this consumer.
    fn on_partitions_assigned(&self, _partitions: &[TopicPartition]) {}
    /// Partitions this consumer gives up.
    fn on_partitions_revoked(&self, _partitions: &[TopicPartition]) {}
    /// Partitions this consumer lost without giving them up.
    fn on_partitions_lost(&self, partitions: &[TopicPartition]) {
        self.on_partitions_revoked(partitions);
    }
}

/// The consumer settings, read from a [`ClientConfig`].
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub group_id: Option<String>,
    pub group_instance_id: Option<String>,
    pub group_protocol: GroupProtocol,
    pub assignors: Vec<Assignor>,
    pub session_timeout: Duration,
    pub heartbeat_interval: Duration,
    pub max_poll_interval: Duration,
    pub auto_offset_reset: OffsetReset,
    pub enable_auto_commit: bool,
    pub auto_commit_interval: Duration,
    pub fetch_min_bytes: i32,
    pub fetch_max_bytes: i32,
    pub fetch_max_wait: Duration,
    pub max_partition_fetch_bytes: i32,
    pub max_poll_records: usize,
    pub isolation_level: IsolationLevel,
    pub check_crcs: bool,
    pub retry_backoff: Duration,
    pub metadata_max_age: Duration,
}

const KNOWN_KEYS: &[&str] = &[
    "group.id",
    "group.instance.id",
    "group.protocol",
    "partition.assignment.strategy",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "auto.offset.reset",
    "enable.auto.commit",
    "auto.commit.interval.ms",
    "fetch.min.bytes",
    "fetch.max.bytes",
    "fetch.max.wait.ms",
    "max.partition.fetch.bytes",
    "max.poll.records",
    "isolation.level",
    "check.crcs",
    "key.deserializer",
    "value.deserializer",
];

impl Settings {
    fn from_config(config: &ClientConfig) -> Result<Settings> {
        let invalid = |key: &str, reason: String| Error::Config {
            key: key.to_owned(),
            reason,
        };
        let group_id = config
            .get("group.id")
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .map(str::to_owned);
        let group_protocol = match config.get("group.protocol").map(str::trim) {
            None => GroupProtocol::Classic,
            Some(p) if p.eq_ignore_ascii_case("classic") => GroupProtocol::Classic,
            Some(p) if p.eq_ignore_ascii_case("consumer") => GroupProtocol::Consumer,
            Some(other) => {
                return Err(invalid(
                    "group.protocol",
                    format!("{other:?} is not classic or consumer"),
                ));
            }
        };
        let assignors = match config.get("partition.assignment.strategy") {
            None => vec![Assignor::Range, Assignor::CooperativeSticky],
            Some(list) => {
                let mut assignors = Vec::new();
                for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                    let assignor = Assignor::parse(name).ok_or_else(|| {
                        invalid(
                            "partition.assignment.strategy",
                            format!("{name:?} is not range, roundrobin or cooperative-sticky"),
                        )
                    })?;
                    assignors.push(assignor);
                }
                if assignors.is_empty() {
                    return Err(invalid(
                        "partition.assignment.strategy",
                        "names no assignor".into(),
                    ));
                }
                assignors
            }
        };
        let auto_offset_reset = match config.get("auto.offset.reset").map(str::trim) {
            None | Some("latest") | Some("largest") | Some("end") => OffsetReset::Latest,
            Some("earliest") | Some("smallest") | Some("beginning") => OffsetReset::Earliest,
            Some("none") | Some("error") => OffsetReset::None,
            Some(other) => {
                return Err(invalid(
                    "auto.offset.reset",
                    format!("{other:?} is not earliest, latest or none"),
                ));
            }
        };
        let isolation_level = match config.get("isolation.level").map(str::trim) {
            None | Some("read_uncommitted") => IsolationLevel::ReadUncommitted,
            Some("read_committed") => IsolationLevel::ReadCommitted,
            Some(other) => {
                return Err(invalid(
                    "isolation.level",
                    format!("{other:?} is not read_uncommitted or read_committed"),
                ));
            }
        };
        let session_timeout = config.millis("session.timeout.ms", 45_000, 1, 3_600_000)?;
        let heartbeat_interval = config.millis("heartbeat.interval.ms", 3_000, 1, 3_600_000)?;
        if heartbeat_interval >= session_timeout {
            return Err(invalid(
                "heartbeat.interval.ms",
                "must be lower than session.timeout.ms".into(),
            ));
        }
        Ok(Settings {
            enable_auto_commit: config.parse("enable.auto.commit", group_id.is_some())?,
            group_id,
            group_instance_id: config
                .get("group.instance.id")
                .map(str::trim)
                .filter(|g| !g.is_empty())
                .map(str::to_owned),
            group_protocol,
            assignors,
            session_timeout,
            heartbeat_interval,
            max_poll_interval: config.millis(
                "max.poll.interval.ms",
                300_000,
                1,
                i32::MAX as u64,
            )?,
            auto_offset_reset,
            auto_commit_interval: config.millis("auto.commit.interval.ms", 5_000, 0, 86_400_000)?,
            fetch_min_bytes: config.number("fetch.min.bytes", 1, 0, i32::MAX as u64)? as i32,
            fetch_max_bytes: config.number("fetch.max.bytes", 52_428_800, 1, 1 << 30)? as i32,
            fetch_max_wait: config.millis("fetch.max.wait.ms", 500, 0, 60_000)?,
            max_partition_fetch_bytes: config.number(
                "max.partition.fetch.bytes",
                1_048_576,
                1,
                1 << 30,
            )? as i32,
            max_poll_records: config.number("max.poll.records", 500, 1, 1 << 24)? as usize,
            isolation_level,
            check_crcs: config.parse("check.crcs", true)?,
            retry_backoff: config.millis("retry.backoff.ms", 100, 0, 60_000)?,
            metadata_max_age: config.millis("metadata.max.age.ms", 300_000, 0, 86_400_000)?,
        })
    }
}

/// What the consumer reads: nothing yet, partitions by hand, or a group subscription.
#[derive(Debug, Clone)]
pub(crate) enum Subscription {
    None,
    Assigned,
    Topics(BTreeSet<String>),
    Pattern(regex::Regex),
}

/// Where a partition's next fetch starts when it has no position yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// Ask the group for its committed offset, then `auto.offset.reset`.
    Committed,
    /// The policy (`auto.offset.reset`), or after OFFSET_OUT_OF_RANGE.
    Reset(OffsetReset),
    /// The first offset whose timestamp is at least this (or the end).
    Timestamp(i64),
}

#[derive(Debug)]
pub(crate) struct PartitionState {
    /// The offset of the next record poll returns, once known.
    position: Option<i64>,
    /// How to find the position while it is unknown.
    start: Start,
    /// The offset the next fetch asks for (past what is buffered).
    fetch_offset: i64,
    /// Bumped by every seek, so answers to fetches sent before are dropped.
    epoch: u64,
    paused: bool,
    in_flight: bool,
    buffered: VecDeque<ConsumerRecord>,
    high_watermark: i64,
    last_leader_epoch: Option<i32>,
    /// When a fetch last brought records (`State::served_count` then; 0 never): fetches name
    /// the partitions served longest ago first.
    served_at: u64,
}

impl PartitionState {
    fn new(start: Start) -> PartitionState {
        PartitionState {
            position: None,
            start,
            fetch_offset: 0,
            epoch: 0,
            paused: false,
            in_flight: false,
            buffered: VecDeque::new(),
            high_watermark: -1,
            last_leader_epoch: None,
            served_at: 0,
        }
    }

    fn seek(&mut self, offset: i64) {
        self.position = Some(offset);
        self.fetch_offset = offset;
        self.epoch += 1;
        self.buffered.clear();
    }

    fn unknown(&mut self, start: Start) {
        self.position = None;
        self.start = start;
        self.epoch += 1;
        self.buffered.clear();
    }
}

/// A partition the next fetch asks for.
struct ToFetch {
    tp: TopicPartition,
    /// The partition's seek epoch when asked.
    epoch: u64,
    fetch_offset: i64,
    leader_epoch: i32,
    served_at: u64,
}

/// A fetch's answer (or failure) with what was asked.
struct FetchDone {
    broker: i32,
    asked: Vec<(TopicPartition, u64, i64)>,
    topic_ids: HashMap<[u8; 16], String>,
    result: Result<FetchResponse>,
}

pub(crate) struct State {
    pub subscription: Subscription,
    pub partitions: BTreeMap<TopicPartition, PartitionState>,
    brokers_in_flight: BTreeSet<i32>,
    results: mpsc::UnboundedReceiver<FetchDone>,
    results_tx: mpsc::UnboundedSender<FetchDone>,
    /// Rotates which partition poll drains first, so none starves.
    drain_from: usize,
    /// Counts partitions served records by fetches, to order the next fetches.
    served_count: u64,
    last_auto_commit: Instant,
    metadata_stale: bool,
    last_metadata_check: Instant,
}

impl State {
    /// Partitions assigned now.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.partitions.keys().cloned().collect()
    }

    /// Adds partitions (with no position: the group's commits or the reset policy decide).
    pub fn add_partitions(&mut self, partitions: &[TopicPartition]) {
        for tp in partitions {
            self.partitions
                .entry(tp.clone())
                .or_insert_with(|| PartitionState::new(Start::Committed));
        }
    }

    /// Removes partitions and what is buffered for them.
    pub fn remove_partitions(&mut self, partitions: &[TopicPartition]) {
        for tp in partitions {
            self.partitions.remove(tp);
        }
    }

    /// The positions to commit: each partition whose position is known.
    pub fn positions(&self, only: Option<&[TopicPartition]>) -> BTreeMap<TopicPartition, i64> {
        self.partitions
            .iter()
            .filter(|(tp, _)| only.is_none_or(|only| only.contains(tp)))
            .filter_map(|(tp, p)| p.position.map(|offset| (tp.clone(), offset)))
            .collect()
    }
}

pub(crate) struct Inner {
    pub cluster: Arc<Cluster>,
    pub settings: Settings,
    pub state: tokio::sync::Mutex<State>,
    pub group: Option<Arc<GroupShared>>,
    pub listener: Mutex<Option<Arc<dyn RebalanceListener>>>,
    pub closed: AtomicBool,
    /// Wakes a waiting poll ([`Consumer::wakeup`], a rebalance).
    pub wake: Notify,
}

impl Inner {
    /// [`list_offsets`] with this consumer's isolation level and backoff.
    async fn list_offsets(
        &self,
        asked: &BTreeMap<TopicPartition, i64>,
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        list_offsets(
            &self.cluster,
            asked,
            self.settings.isolation_level,
            self.settings.retry_backoff,
        )
        .await
    }

    pub fn listener(&self) -> Option<Arc<dyn RebalanceListener>> {
        self.listener
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// A Kafka consumer.
///
/// ```no_run
/// # async fn example() -> sluice::client::Result<()> {
/// use std::time::Duration;
/// use sluice::client::{ClientConfig, Consumer};
///
/// let consumer = Consumer::new(
///     ClientConfig::new("127.0.0.1:9092")
///         .set("group.id", "billing")
///         .set("auto.offset.reset", "earliest"),
/// )?;
/// consumer.subscribe(&["orders"])?;
/// loop {
///     for record in consumer.poll(Duration::from_secs(1)).await? {
///         println!("{}-{}@{}: {:?}", record.topic, record.partition, record.offset, record.value);
///     }
/// }
/// # }
/// ```
pub struct Consumer {
    inner: Arc<Inner>,
}

impl Consumer {
    /// A consumer with `config` (Kafka's consumer config names). Connects on first use.
    pub fn new(config: ClientConfig) -> Result<Consumer> {
        let common = CommonConfig::from_config(&config)?;
        let settings = Settings::from_config(&config)?;
        config.warn_unknown("consumer", KNOWN_KEYS);
        let group = settings
            .group_id
            .clone()
            .map(|group_id| Arc::new(GroupShared::new(group_id, &settings)));
        let (results_tx, results) = mpsc::unbounded_channel();
        let now = Instant::now();
        Ok(Consumer {
            inner: Arc::new(Inner {
                cluster: Arc::new(Cluster::new(common)),
                settings,
                state: tokio::sync::Mutex::new(State {
                    subscription: Subscription::None,
                    partitions: BTreeMap::new(),
                    brokers_in_flight: BTreeSet::new(),
                    results,
                    results_tx,
                    drain_from: 0,
                    served_count: 0,
                    last_auto_commit: now,
                    metadata_stale: true,
                    last_metadata_check: now,
                }),
                group,
                listener: Mutex::new(None),
                closed: AtomicBool::new(false),
                wake: Notify::new(),
            }),
        })
    }

    /// Subscribes to `topics` through the consumer group (`group.id` must be set). Replaces any
    /// earlier subscription or assignment; the group assigns partitions on the next poll.
    pub fn subscribe(&self, topics: &[&str]) -> Result<()> {
        let topics: BTreeSet<String> = topics
            .iter()
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
            .collect();
        if topics.is_empty() {
            return Err(Error::Config {
                key: "subscribe".into(),
                reason: "names no topic".into(),
            });
        }
        self.set_subscription(Subscription::Topics(topics))
    }

    /// Subscribes to every topic whose whole name matches `pattern` (a regular expression),
    /// now and as topics are created (checked every `metadata.max.age.ms`).
    pub fn subscribe_pattern(&self, pattern: &str) -> Result<()> {
        let regex = regex::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| Error::Config {
            key: "subscribe pattern".into(),
            reason: format!("{pattern:?} is not a regular expression: {e}"),
        })?;
        self.set_subscription(Subscription::Pattern(regex))
    }

    /// Subscribes with a listener told of partitions assigned and revoked.
    pub fn set_rebalance_listener(&self, listener: Arc<dyn RebalanceListener>) {
        *self
            .inner
            .listener
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(listener);
    }

    fn set_subscription(&self, subscription: Subscription) -> Result<()> {
        let Some(group) = &self.inner.group else {
            return Err(Error::Config {
                key: "group.id".into(),
                reason: "is required to subscribe; set it, or assign partitions instead".into(),
            });
        };
        let mut state = self.try_state()?;
        state.subscription = subscription;
        state.metadata_stale = true;
        group.request_rejoin();
        Ok(())
    }

    /// Reads exactly `partitions`, without a group (commits still go to `group.id` if set).
    /// Replaces any subscription; positions start from the committed offsets if there is a
    /// group, else from `auto.offset.reset`, unless [`Consumer::seek`] sets them.
    pub async fn assign(&self, partitions: &[TopicPartition]) -> Result<()> {
        let mut state = self.state().await?;
        if !matches!(
            state.subscription,
            Subscription::Assigned | Subscription::None
        ) {
            self.leave_group(&mut state).await;
        }
        state.subscription = Subscription::Assigned;
        let wanted: BTreeSet<&TopicPartition> = partitions.iter().collect();
        state.partitions.retain(|tp, _| wanted.contains(tp));
        state.add_partitions(partitions);
        Ok(())
    }

    /// Stops reading: leaves the group and drops the assignment.
    pub async fn unsubscribe(&self) -> Result<()> {
        let mut state = self.state().await?;
        self.leave_group(&mut state).await;
        state.subscription = Subscription::None;
        state.partitions.clear();
        Ok(())
    }

    /// The partitions assigned now.
    pub async fn assignment(&self) -> Vec<TopicPartition> {
        self.inner.state.lock().await.assignment()
    }

    /// Records from the assigned partitions: what has arrived, or what arrives within
    /// `timeout` (an empty list when nothing does). At most `max.poll.records` per call.
    /// Joining or rejoining a group happens here and may take longer than `timeout`.
    pub async fn poll(&self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        let deadline = Instant::now() + timeout;
        let mut state = self.state().await?;
        if let Some(group) = &self.inner.group {
            group.polled();
        }
        loop {
            if let Some(group) = &self.inner.group {
                if !matches!(
                    state.subscription,
                    Subscription::Assigned | Subscription::None
                ) {
                    self.check_metadata(&mut state).await;
                    group::ensure_active(&self.inner, group, &mut state).await?;
                }
            }
            self.maybe_auto_commit(&mut state);
            self.update_positions(&mut state).await?;
            let records = self.drain(&mut state);
            self.send_fetches(&mut state).await;
            if !records.is_empty() {
                return Ok(records);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            let rejoin = async {
                match &self.inner.group {
                    Some(group) => group.rejoin_requested.notified().await,
                    None => std::future::pending().await,
                }
            };
            let wait = deadline
                .saturating_duration_since(now)
                .min(Duration::from_secs(1));
            tokio::select! {
                done = state.results.recv() => {
                    if let Some(done) = done {
                        self.complete_fetch(&mut state, done).await?;
                    }
                }
                _ = tokio::time::sleep(wait) => {}
                _ = rejoin => {}
                _ = self.inner.wake.notified() => return Ok(Vec::new()),
            }
            if self.inner.closed.load(Ordering::Acquire) {
                return Err(Error::Closed);
            }
        }
    }

    /// Makes a waiting [`Consumer::poll`] return now (with what it has, possibly nothing).
    pub fn wakeup(&self) {
        self.inner.wake.notify_waiters();
    }

    /// The offset of the next record poll returns for `partition`, once known.
    pub async fn position(&self, partition: &TopicPartition) -> Option<i64> {
        let state = self.inner.state.lock().await;
        state.partitions.get(partition).and_then(|p| p.position)
    }

    /// Records between the position and the high watermark the last fetch reported.
    pub async fn lag(&self, partition: &TopicPartition) -> Option<i64> {
        let state = self.inner.state.lock().await;
        let p = state.partitions.get(partition)?;
        let position = p.position?;
        (p.high_watermark >= 0).then(|| (p.high_watermark - position).max(0))
    }

    /// Reads `partition` from `offset` next.
    pub async fn seek(&self, partition: &TopicPartition, offset: i64) -> Result<()> {
        let mut state = self.state().await?;
        let p = assigned(&mut state, partition)?;
        p.seek(offset.max(0));
        Ok(())
    }

    /// Reads `partitions` from their first offset still in the log.
    pub async fn seek_to_beginning(&self, partitions: &[TopicPartition]) -> Result<()> {
        self.seek_start(partitions, Start::Reset(OffsetReset::Earliest))
            .await
    }

    /// Reads `partitions` from their end (only records produced from now on).
    pub async fn seek_to_end(&self, partitions: &[TopicPartition]) -> Result<()> {
        self.seek_start(partitions, Start::Reset(OffsetReset::Latest))
            .await
    }

    /// Reads `partitions` from the first record whose timestamp is at least `timestamp_ms`
    /// (from the end when there is none).
    pub async fn seek_to_timestamp(
        &self,
        partitions: &[TopicPartition],
        timestamp_ms: i64,
    ) -> Result<()> {
        self.seek_start(partitions, Start::Timestamp(timestamp_ms))
            .await
    }

    async fn seek_start(&self, partitions: &[TopicPartition], start: Start) -> Result<()> {
        let mut state = self.state().await?;
        for tp in partitions {
            assigned(&mut state, tp)?.unknown(start);
        }
        Ok(())
    }

    /// Stops fetching `partitions` (they stay assigned; what is buffered is kept).
    pub async fn pause(&self, partitions: &[TopicPartition]) -> Result<()> {
        let mut state = self.state().await?;
        for tp in partitions {
            assigned(&mut state, tp)?.paused = true;
        }
        Ok(())
    }

    /// Fetches `partitions` again.
    pub async fn resume(&self, partitions: &[TopicPartition]) -> Result<()> {
        let mut state = self.state().await?;
        for tp in partitions {
            assigned(&mut state, tp)?.paused = false;
        }
        Ok(())
    }

    /// The partitions paused now.
    pub async fn paused(&self) -> Vec<TopicPartition> {
        let state = self.inner.state.lock().await;
        state
            .partitions
            .iter()
            .filter(|(_, p)| p.paused)
            .map(|(tp, _)| tp.clone())
            .collect()
    }

    /// Commits the positions of every assigned partition and waits for the answer.
    pub async fn commit_sync(&self) -> Result<()> {
        let offsets = self.state().await?.positions(None);
        self.commit_offsets(offsets).await
    }

    /// Commits `offsets` (the next offset to read, per partition) and waits for the answer.
    pub async fn commit_offsets(&self, offsets: BTreeMap<TopicPartition, i64>) -> Result<()> {
        commit(&self.inner, offsets).await
    }

    /// Commits the positions of every assigned partition without waiting; the returned task
    /// tells the outcome when awaited.
    pub async fn commit_async(&self) -> Result<tokio::task::JoinHandle<Result<()>>> {
        let offsets = self.state().await?.positions(None);
        let inner = self.inner.clone();
        Ok(tokio::spawn(async move { commit(&inner, offsets).await }))
    }

    /// The group's committed offsets for `partitions` (absent: none committed).
    pub async fn committed(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        Ok(committed(&self.inner, partitions)
            .await?
            .into_iter()
            .map(|(tp, (offset, _))| (tp, offset))
            .collect())
    }

    /// The first offset of each partition whose timestamp is at least the one given (absent:
    /// no such record).
    pub async fn offsets_for_times(
        &self,
        timestamps: &BTreeMap<TopicPartition, i64>,
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        self.inner.list_offsets(timestamps).await
    }

    /// The first offset of each partition still in the log.
    pub async fn beginning_offsets(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        let asked = partitions.iter().map(|tp| (tp.clone(), -2)).collect();
        self.inner.list_offsets(&asked).await
    }

    /// The end of each partition (the high watermark, or the last stable offset for
    /// `read_committed`).
    pub async fn end_offsets(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        let asked = partitions.iter().map(|tp| (tp.clone(), -1)).collect();
        self.inner.list_offsets(&asked).await
    }

    /// The partition count of `topic` (UNKNOWN_TOPIC_OR_PARTITION when it does not exist).
    pub async fn partitions_for(&self, topic: &str) -> Result<Vec<TopicPartition>> {
        let metadata = self
            .inner
            .cluster
            .refresh(Some(&[topic.to_owned()]))
            .await?;
        let entry = metadata
            .topics
            .get(topic)
            .ok_or_else(|| Error::Protocol(format!("no metadata for topic {topic}")))?;
        if let Some(error) = Error::kafka(entry.error_code, format!("topic {topic}"), None) {
            return Err(error);
        }
        Ok(entry
            .partitions
            .iter()
            .map(|p| TopicPartition::new(topic, p.partition))
            .collect())
    }

    /// The member id the group gave this consumer, once it joined.
    pub fn member_id(&self) -> Option<String> {
        self.inner.group.as_ref().and_then(|g| g.member_id())
    }

    /// Commits (with `enable.auto.commit`; a failure is logged, as in Java), leaves the group
    /// and closes the connections.
    pub async fn close(&self) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut state = self.inner.state.lock().await;
        if self.inner.settings.enable_auto_commit && self.inner.group.is_some() {
            let offsets = state.positions(None);
            // As Java's close: a failed commit is reported, not raised; the group's next
            // member starts from the last commit that succeeded.
            if let Err(error) = commit(&self.inner, offsets).await {
                tracing::warn!(%error, "committing positions on close failed");
            }
        }
        self.leave_group(&mut state).await;
        self.inner.closed.store(true, Ordering::Release);
        self.inner.wake.notify_waiters();
        if let Some(group) = &self.inner.group {
            group.close();
        }
        self.inner.cluster.close();
        Ok(())
    }

    async fn leave_group(&self, state: &mut State) {
        if let Some(group) = &self.inner.group {
            let owned = state.assignment();
            if !owned.is_empty() && !matches!(state.subscription, Subscription::Assigned) {
                if let Some(listener) = self.inner.listener() {
                    listener.on_partitions_revoked(&owned);
                }
                state.partitions.clear();
            }
            group::leave(&self.inner, group).await;
        }
    }

    async fn state(&self) -> Result<tokio::sync::MutexGuard<'_, State>> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(self.inner.state.lock().await)
    }

    fn try_state(&self) -> Result<tokio::sync::MutexGuard<'_, State>> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        self.inner.state.try_lock().map_err(|_| Error::Config {
            key: "subscribe".into(),
            reason: "called while a poll is running on another task".into(),
        })
    }

    /// For pattern subscriptions and missing topics: looks at the topics again every
    /// `metadata.max.age.ms` (every second while a subscribed topic is missing) and asks the
    /// group to rebalance when what this member reads would change.
    async fn check_metadata(&self, state: &mut State) {
        let Some(group) = &self.inner.group else {
            return;
        };
        let due = state.last_metadata_check.elapsed() >= self.inner.settings.metadata_max_age
            || (group.missing_topics()
                && state.last_metadata_check.elapsed() >= Duration::from_secs(1));
        if !state.metadata_stale && !due {
            return;
        }
        state.last_metadata_check = Instant::now();
        state.metadata_stale = false;
        let topics: Option<Vec<String>> = match &state.subscription {
            Subscription::Topics(topics) => Some(topics.iter().cloned().collect()),
            _ => None,
        };
        match self.inner.cluster.refresh(topics.as_deref()).await {
            Ok(metadata) => group.metadata_changed(&subscribed_topics(state, &metadata), &metadata),
            Err(error) => tracing::debug!(%error, "metadata refresh failed"),
        }
    }

    fn maybe_auto_commit(&self, state: &mut State) {
        let settings = &self.inner.settings;
        if !settings.enable_auto_commit || self.inner.group.is_none() {
            return;
        }
        if state.last_auto_commit.elapsed() < settings.auto_commit_interval {
            return;
        }
        state.last_auto_commit = Instant::now();
        let offsets = state.positions(None);
        if offsets.is_empty() {
            return;
        }
        let inner = self.inner.clone();
        tokio::spawn(async move {
            if let Err(error) = commit(&inner, offsets).await {
                tracing::warn!(%error, "auto-commit failed; the next one retries");
            }
        });
    }

    /// Finds the position of every partition that has none: the group's committed offset,
    /// else `auto.offset.reset`; or the offset a seek asked for.
    async fn update_positions(&self, state: &mut State) -> Result<()> {
        let unknown: Vec<(TopicPartition, Start)> = state
            .partitions
            .iter()
            .filter(|(_, p)| p.position.is_none())
            .map(|(tp, p)| (tp.clone(), p.start))
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        let mut to_list: BTreeMap<TopicPartition, i64> = BTreeMap::new();
        let need_committed: Vec<TopicPartition> = unknown
            .iter()
            .filter(|(_, start)| *start == Start::Committed)
            .map(|(tp, _)| tp.clone())
            .collect();
        let mut committed_offsets = BTreeMap::new();
        if !need_committed.is_empty() && self.inner.group.is_some() {
            committed_offsets = committed(&self.inner, &need_committed).await?;
        }
        for (tp, start) in &unknown {
            let reset = |policy: OffsetReset| -> Result<i64> {
                match policy {
                    OffsetReset::Earliest => Ok(-2),
                    OffsetReset::Latest => Ok(-1),
                    OffsetReset::None => Err(Error::NoOffset {
                        partition: tp.to_string(),
                    }),
                }
            };
            match start {
                Start::Committed => match committed_offsets.get(tp) {
                    Some(&(offset, leader_epoch)) => {
                        if let Some(p) = state.partitions.get_mut(tp) {
                            p.seek(offset);
                            p.last_leader_epoch = leader_epoch;
                        }
                    }
                    None => {
                        to_list.insert(tp.clone(), reset(self.inner.settings.auto_offset_reset)?);
                    }
                },
                Start::Reset(policy) => {
                    to_list.insert(tp.clone(), reset(*policy)?);
                }
                Start::Timestamp(timestamp) => {
                    to_list.insert(tp.clone(), *timestamp);
                }
            }
        }
        if to_list.is_empty() {
            return Ok(());
        }
        let found = self.inner.list_offsets(&to_list).await?;
        for (tp, asked) in to_list {
            let Some(p) = state.partitions.get_mut(&tp) else {
                continue;
            };
            match found.get(&tp) {
                Some(&offset) => p.seek(offset),
                // No record at or after the timestamp: the end, as Kafka's tools do.
                None if asked >= 0 => p.start = Start::Reset(OffsetReset::Latest),
                None => {}
            }
        }
        Ok(())
    }

    /// Takes up to `max.poll.records` buffered records, a partition at a time, starting from
    /// a different partition each call.
    fn drain(&self, state: &mut State) -> Vec<ConsumerRecord> {
        let max = self.inner.settings.max_poll_records;
        let mut out = Vec::new();
        let count = state.partitions.len();
        if count == 0 {
            return out;
        }
        let start = state.drain_from % count;
        state.drain_from = state.drain_from.wrapping_add(1);
        let keys: Vec<TopicPartition> = state
            .partitions
            .keys()
            .cycle()
            .skip(start)
            .take(count)
            .cloned()
            .collect();
        for tp in keys {
            let Some(p) = state.partitions.get_mut(&tp) else {
                continue;
            };
            if p.paused {
                continue;
            }
            while out.len() < max {
                let Some(record) = p.buffered.pop_front() else {
                    break;
                };
                p.position = Some(record.offset + 1);
                out.push(record);
            }
            if p.buffered.is_empty() && p.position.is_some() {
                // Past filtered records (control batches, aborted transactions) too.
                p.position = Some(p.fetch_offset);
            }
            if out.len() >= max {
                break;
            }
        }
        out
    }

    /// Sends a fetch to each leader that has fetchable partitions and no fetch in flight.
    async fn send_fetches(&self, state: &mut State) {
        let metadata = self.inner.cluster.cached();
        if state.metadata_stale
            || state.partitions.iter().any(|(tp, p)| {
                p.position.is_some()
                    && metadata
                        .partition(&tp.topic, tp.partition)
                        .is_none_or(|m| m.leader < 0)
            })
        {
            let topics: BTreeSet<String> =
                state.partitions.keys().map(|tp| tp.topic.clone()).collect();
            if !topics.is_empty() {
                let topics: Vec<String> = topics.into_iter().collect();
                if let Err(error) = self.inner.cluster.refresh(Some(&topics)).await {
                    tracing::debug!(%error, "metadata refresh failed");
                }
            }
            state.metadata_stale = false;
        }
        let metadata = self.inner.cluster.cached();
        let settings = &self.inner.settings;
        let mut by_leader: BTreeMap<i32, Vec<ToFetch>> = BTreeMap::new();
        for (tp, p) in &state.partitions {
            if p.paused || p.in_flight || p.position.is_none() || !p.buffered.is_empty() {
                continue;
            }
            let Some(leader) = metadata.partition(&tp.topic, tp.partition) else {
                continue;
            };
            if leader.leader < 0 || state.brokers_in_flight.contains(&leader.leader) {
                continue;
            }
            by_leader.entry(leader.leader).or_default().push(ToFetch {
                tp: tp.clone(),
                epoch: p.epoch,
                fetch_offset: p.fetch_offset,
                leader_epoch: leader.leader_epoch,
                served_at: p.served_at,
            });
        }
        for (broker, mut partitions) in by_leader {
            // The broker gives `fetch.max.bytes` to partitions in request order, and only the
            // first to return records may exceed it (KIP-74): as Kafka's consumer does, the
            // partitions served longest ago go first, so a busy one cannot starve the rest.
            partitions.sort_by_key(|p| p.served_at);
            let mut topics: Vec<(String, Vec<FetchPartition>)> = Vec::new();
            let mut topic_ids = HashMap::new();
            let mut asked = Vec::new();
            for ToFetch {
                tp,
                epoch,
                fetch_offset,
                leader_epoch,
                ..
            } in partitions
            {
                let at = match topics.iter().position(|(topic, _)| *topic == tp.topic) {
                    Some(at) => at,
                    None => {
                        topics.push((tp.topic.clone(), Vec::new()));
                        topics.len() - 1
                    }
                };
                topics[at].1.push(
                    FetchPartition::default()
                        .with_partition(tp.partition)
                        .with_current_leader_epoch(leader_epoch)
                        .with_fetch_offset(fetch_offset)
                        .with_log_start_offset(-1)
                        .with_partition_max_bytes(settings.max_partition_fetch_bytes),
                );
                if let Some(p) = state.partitions.get_mut(&tp) {
                    p.in_flight = true;
                }
                asked.push((tp, epoch, fetch_offset));
            }
            let request = FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(settings.fetch_max_wait.as_millis() as i32)
                .with_min_bytes(settings.fetch_min_bytes)
                .with_max_bytes(settings.fetch_max_bytes)
                .with_isolation_level(match settings.isolation_level {
                    IsolationLevel::ReadUncommitted => 0,
                    IsolationLevel::ReadCommitted => 1,
                })
                .with_session_id(0)
                .with_session_epoch(-1)
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(topic, partitions)| {
                            let id = metadata
                                .topics
                                .get(&topic)
                                .map(|t| t.topic_id)
                                .unwrap_or_default();
                            topic_ids.insert(id, topic.clone());
                            FetchTopic::default()
                                .with_topic(TopicName(StrBytes::from_string(topic)))
                                .with_topic_id(uuid::Uuid::from_bytes(id))
                                .with_partitions(partitions)
                        })
                        .collect(),
                );
            state.brokers_in_flight.insert(broker);
            let cluster = self.inner.cluster.clone();
            let results = state.results_tx.clone();
            tokio::spawn(async move {
                let result = async {
                    let connection = cluster.broker(broker).await?;
                    connection.send(&request).await
                }
                .await;
                let _ = results.send(FetchDone {
                    broker,
                    asked,
                    topic_ids,
                    result,
                });
            });
        }
    }

    /// Buffers a fetch's records and acts on its errors.
    async fn complete_fetch(&self, state: &mut State, done: FetchDone) -> Result<()> {
        state.brokers_in_flight.remove(&done.broker);
        for (tp, _, _) in &done.asked {
            if let Some(p) = state.partitions.get_mut(tp) {
                p.in_flight = false;
            }
        }
        let response = match done.result {
            Ok(response) => response,
            Err(error) => {
                tracing::debug!(broker = done.broker, %error, "fetch failed");
                if let Some(addr) = self
                    .inner
                    .cluster
                    .cached()
                    .brokers
                    .get(&done.broker)
                    .map(|b| b.address())
                {
                    self.inner.cluster.forget(&addr);
                }
                state.metadata_stale = true;
                tokio::time::sleep(self.inner.settings.retry_backoff).await;
                return Ok(());
            }
        };
        if response.error_code != errors::NONE {
            let error = Error::from_code(
                response.error_code,
                format!("fetch from broker {}", done.broker),
                None,
            );
            if !error.is_retriable() {
                return Err(error);
            }
            tracing::debug!(broker = done.broker, %error, "fetch refused; retrying");
            state.metadata_stale = true;
            tokio::time::sleep(self.inner.settings.retry_backoff).await;
            return Ok(());
        }
        let asked: HashMap<TopicPartition, (u64, i64)> = done
            .asked
            .into_iter()
            .map(|(tp, epoch, offset)| (tp, (epoch, offset)))
            .collect();
        for topic in response.responses {
            let name = if topic.topic.is_empty() {
                match done.topic_ids.get(topic.topic_id.as_bytes()) {
                    Some(name) => name.clone(),
                    None => continue,
                }
            } else {
                topic.topic.to_string()
            };
            let topic_name: Arc<str> = Arc::from(name.as_str());
            for partition in topic.partitions {
                let tp = TopicPartition::new(&name, partition.partition_index);
                let Some(&(epoch, offset)) = asked.get(&tp) else {
                    continue;
                };
                let Some(p) = state.partitions.get_mut(&tp) else {
                    continue;
                };
                if p.epoch != epoch || p.fetch_offset != offset {
                    continue; // sought meanwhile
                }
                match partition.error_code {
                    errors::NONE => {}
                    errors::OFFSET_OUT_OF_RANGE => {
                        tracing::info!(partition = %tp, offset, "offset out of range; resetting by auto.offset.reset");
                        p.unknown(Start::Reset(self.inner.settings.auto_offset_reset));
                        continue;
                    }
                    // A leader moved or is catching up: find it again and fetch on.
                    code if code != errors::CORRUPT_MESSAGE && is_retriable_code(code) => {
                        tracing::debug!(partition = %tp, error = %errors::name(code), "fetch error; refreshing metadata");
                        state.metadata_stale = true;
                        continue;
                    }
                    // Not authorized, corrupt, unsupported: the application must know.
                    code => {
                        return Err(Error::from_code(code, format!("partition {tp}"), None));
                    }
                }
                p.high_watermark = if self.inner.settings.isolation_level
                    == IsolationLevel::ReadCommitted
                    && partition.last_stable_offset >= 0
                {
                    partition.last_stable_offset
                } else {
                    partition.high_watermark
                };
                let Some(records) = partition.records else {
                    continue;
                };
                let aborted: Vec<(i64, i64)> = match self.inner.settings.isolation_level {
                    IsolationLevel::ReadCommitted => partition
                        .aborted_transactions
                        .unwrap_or_default()
                        .iter()
                        .map(|a| (a.producer_id.0, a.first_offset))
                        .collect(),
                    IsolationLevel::ReadUncommitted => Vec::new(),
                };
                let decoded = decode_records(
                    &topic_name,
                    partition.partition_index,
                    &records,
                    offset,
                    aborted,
                    self.inner.settings.check_crcs,
                )
                .map_err(|reason| Error::Kafka {
                    code: errors::CORRUPT_MESSAGE,
                    context: format!("partition {tp}"),
                    message: Some(reason),
                })?;
                if let Some(next) = decoded.next_offset {
                    p.fetch_offset = next;
                    p.buffered.extend(decoded.records);
                    state.served_count += 1;
                    p.served_at = state.served_count;
                }
            }
        }
        Ok(())
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.inner.closed.store(true, Ordering::Release);
        if let Some(group) = &self.inner.group {
            group.close();
        }
    }
}

fn assigned<'a>(state: &'a mut State, tp: &TopicPartition) -> Result<&'a mut PartitionState> {
    state.partitions.get_mut(tp).ok_or_else(|| Error::Config {
        key: "partition".into(),
        reason: format!("{tp} is not assigned to this consumer"),
    })
}

/// The topics a subscription names, given what metadata shows exists.
pub(crate) fn subscribed_topics(
    state: &State,
    metadata: &super::cluster::ClusterMetadata,
) -> BTreeSet<String> {
    match &state.subscription {
        Subscription::Topics(topics) => topics.clone(),
        Subscription::Pattern(regex) => metadata
            .topics
            .values()
            .filter(|t| !t.is_internal && t.error_code == errors::NONE && regex.is_match(&t.name))
            .map(|t| t.name.clone())
            .collect(),
        Subscription::None | Subscription::Assigned => BTreeSet::new(),
    }
}

/// Commits `offsets` to the group coordinator, as the member when in a group.
pub(crate) async fn commit(inner: &Inner, offsets: BTreeMap<TopicPartition, i64>) -> Result<()> {
    let Some(group) = &inner.group else {
        return Err(Error::Config {
            key: "group.id".into(),
            reason: "is required to commit offsets".into(),
        });
    };
    if offsets.is_empty() {
        return Ok(());
    }
    let mut topics: BTreeMap<String, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for (tp, offset) in &offsets {
        topics.entry(tp.topic.clone()).or_default().push(
            OffsetCommitRequestPartition::default()
                .with_partition_index(tp.partition)
                .with_committed_offset(*offset)
                .with_committed_leader_epoch(-1)
                .with_committed_metadata(Some(StrBytes::from_static_str(""))),
        );
    }
    let topics: Vec<OffsetCommitRequestTopic> = topics
        .into_iter()
        .map(|(name, partitions)| {
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_string(name)))
                .with_partitions(partitions)
        })
        .collect();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let (member_id, generation) = group.commit_identity();
        let request = OffsetCommitRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.group_id.clone())))
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(StrBytes::from_string(member_id))
            .with_group_instance_id(
                inner
                    .settings
                    .group_instance_id
                    .clone()
                    .map(StrBytes::from_string),
            )
            .with_retention_time_ms(-1)
            .with_topics(topics.clone());
        let outcome = async {
            let coordinator = group::coordinator(inner, group).await?;
            let response = coordinator.send(&request).await?;
            for topic in &response.topics {
                for partition in &topic.partitions {
                    if let Some(error) = Error::kafka(
                        partition.error_code,
                        format!(
                            "commit of {}-{} for group {}",
                            topic.name.as_str(),
                            partition.partition_index,
                            group.group_id
                        ),
                        None,
                    ) {
                        return Err(error);
                    }
                }
            }
            Ok(())
        }
        .await;
        match outcome {
            Ok(()) => return Ok(()),
            Err(error) if attempt < 5 && group::is_coordinator_error(&error) => {
                group.forget_coordinator();
                tokio::time::sleep(inner.settings.retry_backoff).await;
            }
            // KIP-848: a heartbeat moved the member to a newer epoch meanwhile.
            Err(error) if attempt < 5 && error.code() == Some(errors::STALE_MEMBER_EPOCH) => {
                tokio::time::sleep(inner.settings.retry_backoff).await;
            }
            Err(error) => {
                if matches!(
                    error.code(),
                    Some(
                        errors::UNKNOWN_MEMBER_ID
                            | errors::ILLEGAL_GENERATION
                            | errors::REBALANCE_IN_PROGRESS
                            | errors::STALE_MEMBER_EPOCH
                            | errors::FENCED_MEMBER_EPOCH
                    )
                ) {
                    group.request_rejoin();
                }
                return Err(error);
            }
        }
    }
}

/// The group's committed offsets (and their leader epochs) for `partitions`.
pub(crate) async fn committed(
    inner: &Inner,
    partitions: &[TopicPartition],
) -> Result<BTreeMap<TopicPartition, (i64, Option<i32>)>> {
    let Some(group) = &inner.group else {
        return Err(Error::Config {
            key: "group.id".into(),
            reason: "is required to read committed offsets".into(),
        });
    };
    let mut topics: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        topics
            .entry(tp.topic.clone())
            .or_default()
            .push(tp.partition);
    }
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.group_id.clone())))
        .with_topics(Some(
            topics
                .into_iter()
                .map(|(name, partition_indexes)| {
                    OffsetFetchRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_string(name)))
                        .with_partition_indexes(partition_indexes)
                })
                .collect(),
        ))
        .with_require_stable(true);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let outcome = async {
            let coordinator = group::coordinator(inner, group).await?;
            // Versions 8 and up batch groups in other fields; 7 carries all this needs.
            let response = coordinator.send_at_most(&request, 7).await?;
            if let Some(error) = Error::kafka(
                response.error_code,
                format!("group {}", group.group_id),
                None,
            ) {
                return Err(error);
            }
            let mut found = BTreeMap::new();
            for topic in &response.topics {
                for p in &topic.partitions {
                    let tp = TopicPartition::new(topic.name.as_str(), p.partition_index);
                    if let Some(error) = Error::kafka(p.error_code, format!("partition {tp}"), None)
                    {
                        return Err(error);
                    }
                    if p.committed_offset >= 0 {
                        let epoch =
                            (p.committed_leader_epoch >= 0).then_some(p.committed_leader_epoch);
                        found.insert(tp, (p.committed_offset, epoch));
                    }
                }
            }
            Ok(found)
        }
        .await;
        match outcome {
            Err(error)
                if attempt < 10
                    && (group::is_coordinator_error(&error)
                        || error.code() == Some(errors::UNSTABLE_OFFSET_COMMIT)) =>
            {
                group.forget_coordinator();
                tokio::time::sleep(inner.settings.retry_backoff).await;
            }
            other => return other,
        }
    }
}

/// ListOffsets for each partition at its timestamp (-2 earliest, -1 latest), asked of each
/// partition's leader; partitions with no such offset are absent.
pub(crate) async fn list_offsets(
    cluster: &Cluster,
    asked: &BTreeMap<TopicPartition, i64>,
    isolation_level: IsolationLevel,
    retry_backoff: Duration,
) -> Result<BTreeMap<TopicPartition, i64>> {
    let mut found = BTreeMap::new();
    let mut pending: BTreeMap<TopicPartition, i64> = asked.clone();
    let mut attempt = 0;
    while !pending.is_empty() {
        attempt += 1;
        let topics: Vec<String> = pending
            .keys()
            .map(|tp| tp.topic.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let metadata = cluster.refresh(Some(&topics)).await?;
        let mut by_leader: BTreeMap<i32, BTreeMap<String, Vec<ListOffsetsPartition>>> =
            BTreeMap::new();
        for (tp, &timestamp) in &pending {
            let Some(topic) = metadata.topics.get(&tp.topic) else {
                continue;
            };
            if let Some(error) = Error::kafka(topic.error_code, format!("topic {}", tp.topic), None)
            {
                if !error.is_retriable() || attempt >= 10 {
                    return Err(error);
                }
                continue;
            }
            let Some(partition) = metadata.partition(&tp.topic, tp.partition) else {
                return Err(Error::from_code(
                    errors::UNKNOWN_TOPIC_OR_PARTITION,
                    format!("partition {tp}"),
                    None,
                ));
            };
            by_leader
                .entry(partition.leader)
                .or_default()
                .entry(tp.topic.clone())
                .or_default()
                .push(
                    ListOffsetsPartition::default()
                        .with_partition_index(tp.partition)
                        .with_current_leader_epoch(partition.leader_epoch)
                        .with_timestamp(timestamp),
                );
        }
        let mut last_error = None;
        for (leader, topics) in by_leader {
            let request = ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_isolation_level(match isolation_level {
                    IsolationLevel::ReadUncommitted => 0,
                    IsolationLevel::ReadCommitted => 1,
                })
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(name, partitions)| {
                            ListOffsetsTopic::default()
                                .with_name(TopicName(StrBytes::from_string(name)))
                                .with_partitions(partitions)
                        })
                        .collect(),
                );
            let response = match async {
                if leader < 0 {
                    return Err(Error::from_code(
                        errors::LEADER_NOT_AVAILABLE,
                        "list offsets",
                        None,
                    ));
                }
                cluster.broker(leader).await?.send(&request).await
            }
            .await
            {
                Ok(response) => response,
                Err(error) if error.is_retriable() => {
                    last_error = Some(error);
                    continue;
                }
                Err(error) => return Err(error),
            };
            for topic in &response.topics {
                for p in &topic.partitions {
                    let tp = TopicPartition::new(topic.name.as_str(), p.partition_index);
                    match Error::kafka(p.error_code, format!("partition {tp}"), None) {
                        None => {
                            pending.remove(&tp);
                            if p.offset >= 0 {
                                found.insert(tp, p.offset);
                            }
                        }
                        Some(error) if error.is_retriable() => last_error = Some(error),
                        Some(error) => return Err(error),
                    }
                }
            }
        }
        if !pending.is_empty() {
            if attempt >= 10 {
                return Err(last_error.unwrap_or_else(|| {
                    Error::Protocol("no answer for some partitions' offsets".into())
                }));
            }
            tokio::time::sleep(retry_backoff.max(Duration::from_millis(50))).await;
        }
    }
    Ok(found)
}

/// The records of a fetch answer at or past `fetch_offset`, and the offset to fetch next.
#[derive(Debug, Default)]
pub(crate) struct Decoded {
    pub records: Vec<ConsumerRecord>,
    /// Past the last whole batch; `None` when the answer held no whole batch.
    pub next_offset: Option<i64>,
}

/// Decodes the batches of a fetch answer: CRCs checked (`check.crcs`), compressed batches
/// inflated through a bound, control batches and (for `read_committed`) aborted transactions
/// skipped, a trailing partial batch ignored.
pub(crate) fn decode_records(
    topic: &Arc<str>,
    partition: i32,
    bytes: &Bytes,
    fetch_offset: i64,
    mut aborted: Vec<(i64, i64)>,
    check_crcs: bool,
) -> std::result::Result<Decoded, String> {
    aborted.sort_by_key(|&(_, first_offset)| std::cmp::Reverse(first_offset));
    let mut aborting: BTreeSet<i64> = BTreeSet::new();
    let mut decoded = Decoded::default();
    for batch in BatchIter::new(bytes) {
        let Ok((_, header, raw)) = batch else {
            break; // a partial batch at the end of the answer
        };
        if header.magic != 2 {
            return Err(format!("record batch magic {} is not 2", header.magic));
        }
        if check_crcs && compute_crc(raw) != header.crc {
            return Err(format!(
                "record batch at offset {} fails its CRC check",
                header.base_offset
            ));
        }
        decoded.next_offset = Some(header.last_offset() + 1);
        while aborted
            .last()
            .is_some_and(|&(_, first)| first <= header.last_offset())
        {
            if let Some((producer_id, _)) = aborted.pop() {
                aborting.insert(producer_id);
            }
        }
        if header.is_control() {
            if is_abort_marker(&header, raw) {
                aborting.remove(&header.producer_id);
            }
            continue;
        }
        if header.is_transactional() && aborting.contains(&header.producer_id) {
            continue;
        }
        if header.last_offset() < fetch_offset {
            continue;
        }
        let leader_epoch =
            (header.partition_leader_epoch >= 0).then_some(header.partition_leader_epoch);
        let timestamp_type = if header.is_log_append_time() {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        };
        let (section, records) = if header.is_compressed() {
            let inflated = codec::decompress(
                header.compression().into(),
                &raw[crate::protocol::batch::BATCH_HEADER_BYTES..],
            )?;
            (Bytes::from(inflated), true)
        } else {
            (bytes.slice_ref(raw), false)
        };
        let iter = if records {
            RecordIter::decompressed(&header, &section)
        } else {
            RecordIter::new(&header, &section)
        };
        for record in iter {
            let record = record.map_err(|e| format!("offset {}: {e}", header.base_offset))?;
            let offset = record.offset(&header);
            if offset < fetch_offset {
                continue;
            }
            decoded.records.push(ConsumerRecord {
                topic: topic.clone(),
                partition,
                offset,
                timestamp: record.timestamp(&header),
                timestamp_type,
                key: record.key.map(|k| section.slice_ref(k)),
                value: record.value.map(|v| section.slice_ref(v)),
                headers: decode_headers(&section, record.headers, record.header_count)?,
                leader_epoch,
            });
        }
    }
    Ok(decoded)
}

/// An abort marker: a control record whose key is (version, type 0).
fn is_abort_marker(header: &BatchHeader, raw: &[u8]) -> bool {
    if header.is_compressed() {
        return false;
    }
    RecordIter::new(header, raw)
        .next()
        .and_then(|r| r.ok())
        .and_then(|r| r.key)
        .is_some_and(|key| key.len() >= 4 && i16::from_be_bytes([key[2], key[3]]) == 0)
}

fn decode_headers(
    section: &Bytes,
    mut bytes: &[u8],
    count: i32,
) -> std::result::Result<Vec<(String, Option<Bytes>)>, String> {
    let mut headers = Vec::with_capacity(count.clamp(0, 64) as usize);
    for _ in 0..count {
        let key_length = read_varint(&mut bytes).ok_or("truncated header key")?;
        let key_length = usize::try_from(key_length).map_err(|_| "null header key")?;
        if key_length > bytes.len() {
            return Err("header key exceeds the record".into());
        }
        let key = String::from_utf8_lossy(&bytes[..key_length]).into_owned();
        bytes = &bytes[key_length..];
        let value_length = read_varint(&mut bytes).ok_or("truncated header value")?;
        let value = if value_length < 0 {
            None
        } else {
            let length = value_length as usize;
            if length > bytes.len() {
                return Err("header value exceeds the record".into());
            }
            let value = section.slice_ref(&bytes[..length]);
            bytes = &bytes[length..];
            Some(value)
        };
        headers.push((key, value));
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::batch::BatchBuilder;

    fn batch(base: i64, values: &[&str], codec: i16) -> Vec<u8> {
        let mut builder = BatchBuilder::new(base, 1_000);
        for (i, v) in values.iter().enumerate() {
            builder.push(
                1_000 + i as i64,
                Some(b"k".as_slice()),
                Some(v.as_bytes()),
                &[(b"h".as_slice(), Some(b"x".as_slice()))],
            );
        }
        if codec == 0 {
            builder.build()
        } else {
            builder.build_compressed(codec).expect("compresses")
        }
    }

    #[test]
    fn records_decode_from_the_fetch_offset_with_headers_and_every_codec() {
        for codec in 0..=4 {
            let mut bytes = batch(10, &["a", "b", "c"], codec);
            bytes.extend(batch(13, &["d"], codec));
            // A partial batch at the end, as a fetch at its byte limit returns.
            let partial = batch(14, &["e"], codec);
            bytes.extend(&partial[..partial.len() / 2]);
            let bytes = Bytes::from(bytes);
            let topic: Arc<str> = Arc::from("t");
            let decoded = decode_records(&topic, 0, &bytes, 11, Vec::new(), true).expect("decodes");
            let offsets: Vec<i64> = decoded.records.iter().map(|r| r.offset).collect();
            assert_eq!(offsets, [11, 12, 13], "codec {codec}");
            assert_eq!(decoded.next_offset, Some(14));
            let first = &decoded.records[0];
            assert_eq!(first.value.as_deref(), Some(b"b".as_slice()));
            assert_eq!(first.key.as_deref(), Some(b"k".as_slice()));
            assert_eq!(first.timestamp, 1_001);
            assert_eq!(
                first.headers,
                [("h".to_string(), Some(Bytes::from_static(b"x")))]
            );
        }
    }

    /// A batch from `producer_id` with `attributes` set (0x10 transactional, 0x20 control),
    /// re-checksummed.
    fn with_attributes(mut batch: Vec<u8>, producer_id: i64, attributes: i16) -> Vec<u8> {
        batch[43..51].copy_from_slice(&producer_id.to_be_bytes());
        let current = i16::from_be_bytes([batch[21], batch[22]]);
        batch[21..23].copy_from_slice(&(current | attributes).to_be_bytes());
        let crc = compute_crc(&batch);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
        batch
    }

    #[test]
    fn read_committed_skips_aborted_transactions_and_control_batches() {
        // Offsets 0-1: producer 7, aborted; 2: its abort marker; 3-4: producer 8, committed;
        // 5: its commit marker; 6: not transactional.
        let control = |base: i64, producer_id: i64, kind: u8| {
            let mut builder = BatchBuilder::new(base, 1_000);
            builder.push(
                1_000,
                Some(&[0, 0, 0, kind][..]),
                Some(&[0, 0, 0, 0, 0, 0][..]),
                &[],
            );
            with_attributes(builder.build(), producer_id, 0x30)
        };
        let mut bytes = with_attributes(batch(0, &["a0", "a1"], 0), 7, 0x10);
        bytes.extend(control(2, 7, 0));
        bytes.extend(with_attributes(batch(3, &["c3", "c4"], 0), 8, 0x10));
        bytes.extend(control(5, 8, 1));
        bytes.extend(batch(6, &["p6"], 0));
        let bytes = Bytes::from(bytes);
        let topic: Arc<str> = Arc::from("t");
        let values = |decoded: &Decoded| -> Vec<String> {
            decoded
                .records
                .iter()
                .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into())
                .collect()
        };
        let committed = decode_records(&topic, 0, &bytes, 0, vec![(7, 0)], true).expect("decodes");
        assert_eq!(values(&committed), ["c3", "c4", "p6"]);
        assert_eq!(committed.next_offset, Some(7));
        // read_uncommitted: everything but the markers.
        let all = decode_records(&topic, 0, &bytes, 0, Vec::new(), true).expect("decodes");
        assert_eq!(values(&all), ["a0", "a1", "c3", "c4", "p6"]);
    }

    #[test]
    fn corrupt_batches_are_refused() {
        let mut bytes = batch(0, &["a"], 0);
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        let topic: Arc<str> = Arc::from("t");
        let error =
            decode_records(&topic, 0, &Bytes::from(bytes), 0, Vec::new(), true).expect_err("crc");
        assert!(error.contains("CRC"), "{error}");
    }

    #[test]
    fn settings_are_checked_naming_the_key() {
        let bad = ClientConfig::new("a:1").set("auto.offset.reset", "middle");
        let error = Settings::from_config(&bad).expect_err("refused");
        assert!(
            error
                .to_string()
                .starts_with("configuration auto.offset.reset")
        );
        let bad = ClientConfig::new("a:1").set("partition.assignment.strategy", "sticky");
        assert!(Settings::from_config(&bad).is_err());
        let ok = Settings::from_config(&ClientConfig::new("a:1").set("group.id", "g")).expect("ok");
        assert!(ok.enable_auto_commit);
        assert_eq!(ok.assignors, [Assignor::Range, Assignor::CooperativeSticky]);
        let ok = Settings::from_config(&ClientConfig::new("a:1")).expect("ok");
        assert!(!ok.enable_auto_commit, "no group, nothing to commit to");
    }
}
