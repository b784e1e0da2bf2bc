//! The consumer: partitions assigned by hand ([`Consumer::assign`]) or by a consumer group
//! ([`Consumer::subscribe`], with the classic protocol or KIP-848), records fetched from each
//! partition's leader with one fetch in flight per broker, positions that start from the
//! group's committed offsets or `auto.offset.reset`, commits, seeks, pause and resume.
//!
//! As in Kafka's clients, [`Consumer::poll`] drives everything: it joins the group when needed,
//! finds starting positions, sends fetches and returns what has arrived. A background task
//! heartbeats to the group coordinator; a consumer that stops polling for longer than
//! `max.poll.interval.ms` leaves the group so its partitions go to others.
//!
//! # Layout
//!
//! This file is the facade: [`Consumer`]'s methods and the poll loop. Beneath it, each file
//! imports only the ones listed after it:
//!
//! - `../group.rs`: group membership (join and sync, heartbeats, KIP-848 reconciliation,
//!   leaving); commits what it revokes through `offsets.rs`.
//! - `fetcher.rs`: Fetch requests, one per leader broker at a time, and their answers
//!   decoded into each partition's buffer.
//! - `offsets.rs`: OffsetCommit and OffsetFetch at the coordinator, ListOffsets at the
//!   leaders, and positions for partitions that have none. Reaches the group only through
//!   `GroupMember`, a trait it defines and `group.rs` implements.
//! - `positions.rs`: the subscription and each partition's position, pause flag and buffered
//!   records; plain state.
//! - `types.rs`: the public types (records, settings' enums, the rebalance listener), the
//!   settings, and the `Context` (cluster, settings, listener) the others share.

mod fetcher;
pub(crate) mod offsets;
pub(crate) mod positions;
pub(crate) mod types;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use self::fetcher::Fetcher;
use self::positions::{Start, Subscription, SubscriptionState};
use self::types::{Context, KNOWN_KEYS, Settings};
use super::cluster::Cluster;
use super::config::{ClientConfig, CommonConfig};
use super::error::{Error, Result};
use super::group::{self, GroupShared};

pub use self::types::{
    ConsumerGroupMetadata, ConsumerRecord, GroupProtocol, IsolationLevel, OffsetReset,
    RebalanceListener, TimestampType, TopicPartition,
};

/// What poll works on, under one lock.
struct State {
    subscriptions: SubscriptionState,
    fetcher: Fetcher,
    last_auto_commit: Instant,
    last_metadata_check: Instant,
}

struct Inner {
    ctx: Arc<Context>,
    state: tokio::sync::Mutex<State>,
    group: Option<Arc<GroupShared>>,
    closed: AtomicBool,
    /// Wakes a waiting poll ([`Consumer::wakeup`], a rebalance).
    wake: Notify,
}

impl Inner {
    /// Commits `offsets` to the group (`group.id` must be set).
    async fn commit(&self, offsets: BTreeMap<TopicPartition, i64>) -> Result<()> {
        let Some(group) = &self.group else {
            return Err(Error::Config {
                key: "group.id".into(),
                reason: "is required to commit offsets".into(),
            });
        };
        offsets::commit(&self.ctx, group.as_ref(), offsets).await
    }

    /// The group's committed offsets (and their leader epochs) for `partitions`.
    async fn committed(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, (i64, Option<i32>)>> {
        let Some(group) = &self.group else {
            return Err(Error::Config {
                key: "group.id".into(),
                reason: "is required to read committed offsets".into(),
            });
        };
        offsets::committed(&self.ctx, group.as_ref(), partitions).await
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
        let ctx = Arc::new(Context::new(Cluster::new(common), settings));
        let now = Instant::now();
        Ok(Consumer {
            inner: Arc::new(Inner {
                state: tokio::sync::Mutex::new(State {
                    subscriptions: SubscriptionState::new(),
                    fetcher: Fetcher::new(ctx.cluster.clone()),
                    last_auto_commit: now,
                    last_metadata_check: now,
                }),
                ctx,
                group,
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
        self.inner.ctx.set_listener(listener);
    }

    fn set_subscription(&self, subscription: Subscription) -> Result<()> {
        let Some(group) = &self.inner.group else {
            return Err(Error::Config {
                key: "group.id".into(),
                reason: "is required to subscribe; set it, or assign partitions instead".into(),
            });
        };
        let mut state = self.try_state()?;
        state.subscriptions.subscription = subscription;
        state.fetcher.metadata_stale = true;
        group.request_rejoin();
        Ok(())
    }

    /// Reads exactly `partitions`, without a group (commits still go to `group.id` if set).
    /// Replaces any subscription; positions start from the committed offsets if there is a
    /// group, else from `auto.offset.reset`, unless [`Consumer::seek`] sets them.
    pub async fn assign(&self, partitions: &[TopicPartition]) -> Result<()> {
        let mut state = self.state().await?;
        if !matches!(
            state.subscriptions.subscription,
            Subscription::Assigned | Subscription::None
        ) {
            self.leave_group(&mut state).await;
        }
        let subscriptions = &mut state.subscriptions;
        subscriptions.subscription = Subscription::Assigned;
        let wanted: BTreeSet<&TopicPartition> = partitions.iter().collect();
        subscriptions.partitions.retain(|tp, _| wanted.contains(tp));
        subscriptions.add_partitions(partitions);
        Ok(())
    }

    /// Stops reading: leaves the group and drops the assignment.
    pub async fn unsubscribe(&self) -> Result<()> {
        let mut state = self.state().await?;
        self.leave_group(&mut state).await;
        state.subscriptions.subscription = Subscription::None;
        state.subscriptions.partitions.clear();
        Ok(())
    }

    /// The partitions assigned now.
    pub async fn assignment(&self) -> Vec<TopicPartition> {
        self.inner.state.lock().await.subscriptions.assignment()
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
            // Registered before the group is looked at: a heartbeat's news (a rebalance to
            // join, an assignment to apply) that arrives while this round runs wakes the wait
            // below at once, instead of waiting for a fetch answer or the round's timeout.
            let rejoin = self
                .inner
                .group
                .as_ref()
                .map(|group| group.rejoin_requested.notified());
            tokio::pin!(rejoin);
            if let Some(notified) = rejoin.as_mut().as_pin_mut() {
                notified.enable();
            }
            if let Some(group) = &self.inner.group {
                if !matches!(
                    state.subscriptions.subscription,
                    Subscription::Assigned | Subscription::None
                ) {
                    self.check_metadata(&mut state).await;
                    group::ensure_active(&self.inner.ctx, group, &mut state.subscriptions).await?;
                }
            }
            self.maybe_auto_commit(&mut state);
            let ctx = &self.inner.ctx;
            let State {
                subscriptions,
                fetcher,
                ..
            } = &mut *state;
            offsets::update_positions(ctx, self.inner.group.as_deref(), subscriptions).await?;
            let records = subscriptions.drain(ctx.settings.max_poll_records);
            fetcher.send_fetches(subscriptions, &ctx.settings).await;
            if !records.is_empty() {
                return Ok(records);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            let rejoin = async {
                match rejoin.as_mut().as_pin_mut() {
                    Some(notified) => notified.await,
                    None => std::future::pending().await,
                }
            };
            let wait = deadline
                .saturating_duration_since(now)
                .min(Duration::from_secs(1));
            tokio::select! {
                done = state.fetcher.answer() => {
                    if let Some(done) = done {
                        let State { subscriptions, fetcher, .. } = &mut *state;
                        fetcher
                            .complete_fetch(subscriptions, &self.inner.ctx.settings, done)
                            .await?;
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
        state
            .subscriptions
            .partitions
            .get(partition)
            .and_then(|p| p.position)
    }

    /// Records between the position and the high watermark the last fetch reported.
    pub async fn lag(&self, partition: &TopicPartition) -> Option<i64> {
        let state = self.inner.state.lock().await;
        let p = state.subscriptions.partitions.get(partition)?;
        let position = p.position?;
        (p.high_watermark >= 0).then(|| (p.high_watermark - position).max(0))
    }

    /// Reads `partition` from `offset` next.
    pub async fn seek(&self, partition: &TopicPartition, offset: i64) -> Result<()> {
        let mut state = self.state().await?;
        let p = state.subscriptions.assigned(partition)?;
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
            state.subscriptions.assigned(tp)?.unknown(start);
        }
        Ok(())
    }

    /// Stops fetching `partitions` (they stay assigned; what is buffered is kept).
    pub async fn pause(&self, partitions: &[TopicPartition]) -> Result<()> {
        let mut state = self.state().await?;
        for tp in partitions {
            state.subscriptions.assigned(tp)?.paused = true;
        }
        Ok(())
    }

    /// Fetches `partitions` again.
    pub async fn resume(&self, partitions: &[TopicPartition]) -> Result<()> {
        let mut state = self.state().await?;
        for tp in partitions {
            state.subscriptions.assigned(tp)?.paused = false;
        }
        Ok(())
    }

    /// The partitions paused now.
    pub async fn paused(&self) -> Vec<TopicPartition> {
        let state = self.inner.state.lock().await;
        state
            .subscriptions
            .partitions
            .iter()
            .filter(|(_, p)| p.paused)
            .map(|(tp, _)| tp.clone())
            .collect()
    }

    /// Commits the positions of every assigned partition and waits for the answer.
    pub async fn commit_sync(&self) -> Result<()> {
        let offsets = self.state().await?.subscriptions.positions(None);
        self.commit_offsets(offsets).await
    }

    /// Commits `offsets` (the next offset to read, per partition) and waits for the answer.
    pub async fn commit_offsets(&self, offsets: BTreeMap<TopicPartition, i64>) -> Result<()> {
        self.inner.commit(offsets).await
    }

    /// Commits the positions of every assigned partition without waiting; the returned task
    /// tells the outcome when awaited.
    pub async fn commit_async(&self) -> Result<tokio::task::JoinHandle<Result<()>>> {
        let offsets = self.state().await?.subscriptions.positions(None);
        let inner = self.inner.clone();
        Ok(tokio::spawn(async move { inner.commit(offsets).await }))
    }

    /// The group's committed offsets for `partitions` (absent: none committed).
    pub async fn committed(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        Ok(self
            .inner
            .committed(partitions)
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
        offsets::list_offsets_with(&self.inner.ctx, timestamps).await
    }

    /// The first offset of each partition still in the log.
    pub async fn beginning_offsets(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        let asked = partitions.iter().map(|tp| (tp.clone(), -2)).collect();
        offsets::list_offsets_with(&self.inner.ctx, &asked).await
    }

    /// The end of each partition (the high watermark, or the last stable offset for
    /// `read_committed`).
    pub async fn end_offsets(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        let asked = partitions.iter().map(|tp| (tp.clone(), -1)).collect();
        offsets::list_offsets_with(&self.inner.ctx, &asked).await
    }

    /// The partition count of `topic` (UNKNOWN_TOPIC_OR_PARTITION when it does not exist).
    pub async fn partitions_for(&self, topic: &str) -> Result<Vec<TopicPartition>> {
        let metadata = self
            .inner
            .ctx
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

    /// The group, generation and member this consumer is now, for a transactional producer's
    /// `send_offsets_to_transaction` (Kafka's `groupMetadata()`); `None` without `group.id`.
    pub fn group_metadata(&self) -> Option<ConsumerGroupMetadata> {
        let group = self.inner.group.as_ref()?;
        let (member_id, generation_id) = offsets::GroupMember::commit_identity(group.as_ref());
        Some(ConsumerGroupMetadata {
            group_id: group.group_id.clone(),
            generation_id,
            member_id,
            group_instance_id: self.inner.ctx.settings.group_instance_id.clone(),
        })
    }

    /// Commits (with `enable.auto.commit`; a failure is logged, as in Java), leaves the group
    /// and closes the connections.
    pub async fn close(&self) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut state = self.inner.state.lock().await;
        if self.inner.ctx.settings.enable_auto_commit && self.inner.group.is_some() {
            let offsets = state.subscriptions.positions(None);
            // As Java's close: a failed commit is reported, not raised; the group's next
            // member starts from the last commit that succeeded.
            if let Err(error) = self.inner.commit(offsets).await {
                tracing::warn!(%error, "committing positions on close failed");
            }
        }
        self.leave_group(&mut state).await;
        self.inner.closed.store(true, Ordering::Release);
        self.inner.wake.notify_waiters();
        if let Some(group) = &self.inner.group {
            group.close();
        }
        self.inner.ctx.cluster.close();
        Ok(())
    }

    async fn leave_group(&self, state: &mut State) {
        if let Some(group) = &self.inner.group {
            let subscriptions = &mut state.subscriptions;
            let owned = subscriptions.assignment();
            if !owned.is_empty() && !matches!(subscriptions.subscription, Subscription::Assigned) {
                if let Some(listener) = self.inner.ctx.listener() {
                    listener.on_partitions_revoked(&owned);
                }
                subscriptions.partitions.clear();
            }
            group::leave(&self.inner.ctx, group).await;
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
        let due = state.last_metadata_check.elapsed() >= self.inner.ctx.settings.metadata_max_age
            || (group.missing_topics()
                && state.last_metadata_check.elapsed() >= Duration::from_secs(1));
        if !state.fetcher.metadata_stale && !due {
            return;
        }
        state.last_metadata_check = Instant::now();
        state.fetcher.metadata_stale = false;
        let topics: Option<Vec<String>> = match &state.subscriptions.subscription {
            Subscription::Topics(topics) => Some(topics.iter().cloned().collect()),
            _ => None,
        };
        match self.inner.ctx.cluster.refresh(topics.as_deref()).await {
            Ok(metadata) => {
                group.metadata_changed(&state.subscriptions.subscribed_topics(&metadata), &metadata)
            }
            Err(error) => tracing::debug!(%error, "metadata refresh failed"),
        }
    }

    fn maybe_auto_commit(&self, state: &mut State) {
        let settings = &self.inner.ctx.settings;
        if !settings.enable_auto_commit || self.inner.group.is_none() {
            return;
        }
        if state.last_auto_commit.elapsed() < settings.auto_commit_interval {
            return;
        }
        state.last_auto_commit = Instant::now();
        let offsets = state.subscriptions.positions(None);
        if offsets.is_empty() {
            return;
        }
        let inner = self.inner.clone();
        tokio::spawn(async move {
            if let Err(error) = inner.commit(offsets).await {
                tracing::warn!(%error, "auto-commit failed; the next one retries");
            }
        });
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
