//! The coordinator's machinery around the group state machines: which `__consumer_offsets`
//! partitions this broker coordinates (loaded, or loading), the groups in each, appends of
//! their records with `acks=all` semantics, and the timer that expires sessions, rebalances
//! and offsets.
//!
//! A group's lock (a plain mutex) is held while its state changes and while its records are
//! appended to the log, so records land in the order the state changed; it is never held
//! while waiting for the in-sync replicas or for a rebalance.
//!
//! Lock order: the partition map, then a group, then its partition's group map (removing a
//! deleted group). A partition's group map is never held while a group is locked: readers
//! copy the handles out first.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use sluice_raft::Quorum;
use tokio::sync::{Notify, broadcast};

use super::classic::{ClassicGroup, GroupWrite, JoinRequest, JoinResult, Now, Reply, SyncResult};
use super::consumer::{ConsumerGroup, Heartbeat, HeartbeatResult, RestoredMember, TopicsView};
use super::records::{GroupValue, OffsetValue, RecordKey};
use super::state::Group;
use super::{CommittedOffset, GroupConfig, OFFSETS_TOPIC, partition_for};
use crate::broker::Broker;
use crate::controller::NewTopic;
use crate::controller::service::ControllerRequest;
use crate::log::batch::{BatchBuilder, BatchIter, RecordIter};
use crate::protocol::TopicPartition;
use crate::protocol::codec;
use crate::protocol::errors;
use crate::replica::{
    AckState, Delayed, LeadershipChange, Partition, PendingAck, ReadBound, ReplicaManager, Role,
};

/// How much of the offsets partition one read during a load takes.
const LOAD_READ_BYTES: u64 = 4 * 1024 * 1024;
/// The timer looks again at least this often (new deadlines also wake it).
const TIMER_IDLE: Duration = Duration::from_secs(1);
/// How long a FindCoordinator waits for `__consumer_offsets` to be created.
const CREATE_WAIT: Duration = Duration::from_secs(10);

type SharedGroup = Arc<GroupCell>;

/// A group and what orders its offset records.
struct GroupCell {
    state: Mutex<Group>,
    /// Held by a commit, an OffsetDelete or a DeleteGroups from its append until its records
    /// are acknowledged (or fail): offset records of a group are stored and applied one
    /// request after another, so memory never holds an older value than the log and a delete
    /// sees every offset a commit before it wrote.
    offset_writes: tokio::sync::Mutex<()>,
    /// Offsets whose commit was appended but not acknowledged (timed out, leadership moved):
    /// they may be in the log, so deleting the group writes tombstones for them too.
    uncertain: Mutex<std::collections::BTreeSet<(String, i32)>>,
}

impl GroupCell {
    fn new(group: Group) -> SharedGroup {
        Arc::new(GroupCell {
            state: Mutex::new(group),
            offset_writes: tokio::sync::Mutex::new(()),
            uncertain: Mutex::new(std::collections::BTreeSet::new()),
        })
    }

    fn uncertain(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<(String, i32)>> {
        self.uncertain.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One `__consumer_offsets` partition this broker leads.
struct OffsetsPartition {
    index: i32,
    leader_epoch: i32,
    partition: Arc<Partition>,
    loaded: AtomicBool,
    groups: Mutex<HashMap<String, SharedGroup>>,
}

/// Why `__consumer_offsets` is not there to coordinate with.
#[derive(Debug, Clone)]
pub struct OffsetsTopicError {
    pub code: i16,
    pub message: String,
}

/// One partition of an OffsetCommit.
#[derive(Debug, Clone)]
pub struct OffsetCommit {
    pub topic: String,
    pub partition: i32,
    pub offset: CommittedOffset,
}

/// A group as ListGroups shows it.
#[derive(Debug, Clone)]
pub struct ListedGroup {
    pub group_id: String,
    pub protocol_type: String,
    pub state: &'static str,
    pub group_type: &'static str,
}

/// An OffsetCommit's answer: one error per partition, in request order.
pub type CommitOutcome = Vec<i16>;

pub struct GroupCoordinator {
    config: GroupConfig,
    replicas: Arc<ReplicaManager>,
    quorum: Arc<Quorum>,
    partitions: RwLock<HashMap<i32, Arc<OffsetsPartition>>>,
    /// Wakes the timer: a deadline may have come closer.
    timer: Notify,
    /// One creation of `__consumer_offsets` at a time.
    creating: tokio::sync::Mutex<()>,
    /// Offset commits stored (partitions), and refused or failed commit requests.
    commits: AtomicU64,
    commits_failed: AtomicU64,
}

fn now() -> Now {
    let wall_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    Now {
        instant: Instant::now(),
        wall_ms,
    }
}

fn lock(group: &SharedGroup) -> std::sync::MutexGuard<'_, Group> {
    group.state.lock().unwrap_or_else(|p| p.into_inner())
}

impl GroupCoordinator {
    pub fn new(
        config: GroupConfig,
        replicas: Arc<ReplicaManager>,
        quorum: Arc<Quorum>,
    ) -> Arc<GroupCoordinator> {
        Arc::new(GroupCoordinator {
            config,
            replicas,
            quorum,
            partitions: RwLock::new(HashMap::new()),
            timer: Notify::new(),
            creating: tokio::sync::Mutex::new(()),
            commits: AtomicU64::new(0),
            commits_failed: AtomicU64::new(0),
        })
    }

    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    /// Follows leadership of `__consumer_offsets` partitions and runs the timer, until the
    /// runtime stops.
    pub fn start(self: &Arc<Self>) -> Vec<tokio::task::JoinHandle<()>> {
        let events = self.replicas.leadership_changes();
        vec![
            tokio::spawn(Arc::clone(self).follow_leadership(events)),
            tokio::spawn(Arc::clone(self).run_timer()),
        ]
    }

    async fn follow_leadership(self: Arc<Self>, mut events: broadcast::Receiver<LeadershipChange>) {
        // Partitions led before this subscription began.
        self.rescan();
        loop {
            match events.recv().await {
                Ok(change) if change.topic_partition.topic == OFFSETS_TOPIC => {
                    let index = change.topic_partition.partition;
                    match change.role {
                        Role::Leader => self.load(index, change.leader_epoch),
                        Role::Follower { .. } | Role::Removed => self.unload(index),
                    }
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => self.rescan(),
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    /// Loads what this broker leads and is not loaded, unloads what it no longer leads.
    fn rescan(self: &Arc<Self>) {
        let mut led = HashMap::new();
        for partition in self.replicas.partitions() {
            if partition.topic_partition.topic == OFFSETS_TOPIC && partition.is_leader() {
                led.insert(
                    partition.topic_partition.partition,
                    partition.state().leader_epoch,
                );
            }
        }
        let current: Vec<(i32, i32)> = self
            .read_partitions()
            .values()
            .map(|p| (p.index, p.leader_epoch))
            .collect();
        for (index, epoch) in current {
            if led.get(&index) != Some(&epoch) {
                self.unload(index);
            }
        }
        for (index, epoch) in led {
            if !self.read_partitions().contains_key(&index) {
                self.load(index, epoch);
            }
        }
    }

    fn read_partitions(
        &self,
    ) -> std::sync::RwLockReadGuard<'_, HashMap<i32, Arc<OffsetsPartition>>> {
        self.partitions.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_partitions(
        &self,
    ) -> std::sync::RwLockWriteGuard<'_, HashMap<i32, Arc<OffsetsPartition>>> {
        self.partitions.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Became leader of partition `index` at `leader_epoch`: replay it, then serve it.
    fn load(self: &Arc<Self>, index: i32, leader_epoch: i32) {
        if self
            .read_partitions()
            .get(&index)
            .is_some_and(|e| e.leader_epoch == leader_epoch)
        {
            // Already loaded (or loading) at this epoch: the startup scan and the event.
            return;
        }
        let tp = TopicPartition::new(OFFSETS_TOPIC, index);
        let Some(partition) = self.replicas.partition(&tp) else {
            return;
        };
        let entry = Arc::new(OffsetsPartition {
            index,
            leader_epoch,
            partition,
            loaded: AtomicBool::new(false),
            groups: Mutex::new(HashMap::new()),
        });
        if let Some(previous) = self.write_partitions().insert(index, Arc::clone(&entry)) {
            unload_groups(&previous);
        }
        let coordinator = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            match coordinator.replay(&entry) {
                Ok((groups, records)) => {
                    let count = groups.len();
                    *entry.groups.lock().unwrap_or_else(|p| p.into_inner()) = groups;
                    entry.loaded.store(true, Ordering::Release);
                    coordinator.timer.notify_one();
                    let elapsed_ms = started.elapsed().as_millis() as u64;
                    if records > 0 {
                        tracing::info!(
                            partition = index,
                            leader_epoch,
                            groups = count,
                            records,
                            elapsed_ms,
                            "loaded group coordinator partition"
                        );
                    } else {
                        tracing::debug!(
                            partition = index,
                            leader_epoch,
                            "loaded empty group coordinator partition"
                        );
                    }
                }
                Err(message) => {
                    // The partition stays unloaded (COORDINATOR_LOAD_IN_PROGRESS) until the
                    // next leadership change: its data could not be read.
                    tracing::error!(partition = index, leader_epoch, %message, "loading group coordinator partition failed");
                }
            }
        });
    }

    fn unload(&self, index: i32) {
        if let Some(previous) = self.write_partitions().remove(&index) {
            let groups = unload_groups(&previous);
            tracing::info!(
                partition = index,
                groups,
                "unloaded group coordinator partition"
            );
        }
    }

    /// Reads the partition from its start to its log end: the latest record per key wins.
    fn replay(
        &self,
        entry: &OffsetsPartition,
    ) -> Result<(HashMap<String, SharedGroup>, u64), String> {
        #[derive(Default)]
        struct Loaded {
            value: Option<GroupValue>,
            offsets: BTreeMap<(String, i32), CommittedOffset>,
            /// KIP-848: the group epoch, assignment epoch and members' records.
            consumer_epoch: Option<i32>,
            assignment_epoch: i32,
            members: BTreeMap<String, RestoredMember>,
            /// Which kind's record came last (the record count when seen).
            classic_at: u64,
            consumer_at: u64,
        }
        let mut loaded: HashMap<String, Loaded> = HashMap::new();
        let partition = &entry.partition;
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
                    continue;
                }
                let section;
                let iter = if header.is_compressed() {
                    match codec::decompress(
                        i16::from(header.compression()),
                        &batch[crate::log::batch::BATCH_HEADER_BYTES.min(batch.len())..],
                    ) {
                        Ok(decompressed) => section = decompressed,
                        Err(error) => {
                            tracing::warn!(partition = entry.index, base_offset = header.base_offset, %error, "skipping a batch that does not decompress");
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
                            tracing::warn!(
                                partition = entry.index,
                                base_offset = header.base_offset,
                                error,
                                "skipping the rest of a malformed batch"
                            );
                            break;
                        }
                    };
                    records += 1;
                    let Some(key) = record.key else { continue };
                    let key = match RecordKey::decode(key) {
                        Ok(Some(key)) => key,
                        Ok(None) => continue,
                        Err(error) => {
                            tracing::warn!(partition = entry.index, %error, "skipping a record");
                            continue;
                        }
                    };
                    let group = loaded.entry(key.group().to_owned()).or_default();
                    match (key, record.value) {
                        (
                            RecordKey::Offset {
                                topic, partition, ..
                            },
                            Some(value),
                        ) => match OffsetValue::decode(value) {
                            Ok(value) => {
                                group.offsets.insert(
                                    (topic, partition),
                                    CommittedOffset {
                                        offset: value.offset,
                                        leader_epoch: value.leader_epoch,
                                        metadata: value.metadata,
                                        commit_timestamp_ms: value.commit_timestamp_ms,
                                    },
                                );
                            }
                            Err(error) => {
                                tracing::warn!(partition = entry.index, %error, "skipping an offset record")
                            }
                        },
                        (
                            RecordKey::Offset {
                                topic, partition, ..
                            },
                            None,
                        ) => {
                            group.offsets.remove(&(topic, partition));
                        }
                        (RecordKey::Group { .. }, Some(value)) => match GroupValue::decode(value) {
                            Ok(value) => {
                                group.value = Some(value);
                                group.classic_at = records;
                            }
                            Err(error) => {
                                tracing::warn!(partition = entry.index, %error, "skipping a group record")
                            }
                        },
                        (RecordKey::Group { .. }, None) => group.value = None,
                        (key, value) => {
                            if let Err(error) = load_consumer_record(
                                ConsumerFields {
                                    epoch: &mut group.consumer_epoch,
                                    assignment_epoch: &mut group.assignment_epoch,
                                    members: &mut group.members,
                                    at: &mut group.consumer_at,
                                },
                                key,
                                value,
                                records,
                            ) {
                                tracing::warn!(partition = entry.index, %error, "skipping a consumer group record")
                            }
                        }
                    }
                }
            }
            if offset <= before {
                break;
            }
        }
        let now = now();
        let delay = Duration::from_millis(self.config.initial_rebalance_delay_ms);
        let session = Duration::from_millis(self.config.consumer_session_timeout_ms);
        let groups = loaded
            .into_iter()
            .filter(|(_, l)| {
                l.value.is_some() || l.consumer_epoch.is_some() || !l.offsets.is_empty()
            })
            .map(|(group_id, l)| {
                // The kind whose record came last (a group changes kind only when empty).
                if let Some(epoch) = l.consumer_epoch
                    && l.consumer_at > l.classic_at
                {
                    let members = l
                        .members
                        .into_values()
                        .filter(|m| !m.member_id.is_empty())
                        .collect();
                    let mut group = ConsumerGroup::restore(
                        &group_id,
                        epoch,
                        l.assignment_epoch,
                        members,
                        session,
                        now,
                    );
                    group.offsets = l.offsets;
                    return (group_id, GroupCell::new(Group::Consumer(group)));
                }
                let mut group = match l.value {
                    Some(value) => ClassicGroup::restore(&group_id, value, delay, now),
                    None => ClassicGroup::new(&group_id, delay, now),
                };
                group.offsets = l.offsets;
                (group_id, GroupCell::new(Group::Classic(group)))
            })
            .collect();
        Ok((groups, records))
    }

    // ---- finding a group ----

    fn offsets_partition_count(&self) -> Option<i32> {
        self.quorum
            .image()
            .topic_by_name(OFFSETS_TOPIC)
            .map(|t| t.partitions.len() as i32)
    }

    /// The loaded partition coordinating `group_id`, or NOT_COORDINATOR /
    /// COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE.
    fn partition_of(&self, group_id: &str) -> Result<Arc<OffsetsPartition>, i16> {
        if group_id.len() > i16::MAX as usize {
            // Not storable in Kafka's record formats.
            return Err(errors::INVALID_GROUP_ID);
        }
        let Some(count) = self.offsets_partition_count() else {
            return Err(errors::COORDINATOR_NOT_AVAILABLE);
        };
        let index = partition_for(group_id, count);
        let partitions = self.read_partitions();
        let Some(entry) = partitions.get(&index) else {
            // Led here by the image, but the replica layer has not said so yet: loading is
            // about to start.
            let led_here = self
                .quorum
                .image()
                .topic_by_name(OFFSETS_TOPIC)
                .and_then(|t| t.partitions.get(&index))
                .is_some_and(|p| p.leader == self.replicas.broker_id());
            return Err(if led_here {
                errors::COORDINATOR_LOAD_IN_PROGRESS
            } else {
                errors::NOT_COORDINATOR
            });
        };
        if !entry.loaded.load(Ordering::Acquire) {
            return Err(errors::COORDINATOR_LOAD_IN_PROGRESS);
        }
        Ok(Arc::clone(entry))
    }

    fn find_group(&self, entry: &OffsetsPartition, group_id: &str) -> Option<SharedGroup> {
        entry
            .groups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(group_id)
            .cloned()
    }

    fn find_or_create_group(&self, entry: &OffsetsPartition, group_id: &str) -> SharedGroup {
        let mut groups = entry.groups.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(groups.entry(group_id.to_owned()).or_insert_with(|| {
            GroupCell::new(Group::Classic(ClassicGroup::new(
                group_id,
                Duration::from_millis(self.config.initial_rebalance_delay_ms),
                now(),
            )))
        }))
    }

    /// Creates `__consumer_offsets` when it does not exist (the first FindCoordinator for a
    /// group does, as in Kafka); its partition count.
    pub async fn ensure_offsets_topic(&self, broker: &Broker) -> Result<i32, OffsetsTopicError> {
        if let Some(count) = self.offsets_partition_count() {
            return Ok(count);
        }
        let _creating = self.creating.lock().await;
        if let Some(count) = self.offsets_partition_count() {
            return Ok(count);
        }
        let topic = NewTopic {
            name: OFFSETS_TOPIC.to_owned(),
            partitions: self.config.offsets_topic_num_partitions,
            replication_factor: self.config.offsets_topic_replication_factor,
            configs: BTreeMap::from([
                ("cleanup.policy".to_owned(), "compact".to_owned()),
                ("compression.type".to_owned(), "producer".to_owned()),
                (
                    "segment.bytes".to_owned(),
                    self.config.offsets_topic_segment_bytes.to_string(),
                ),
            ]),
            ..Default::default()
        };
        match broker
            .call_controller(ControllerRequest::CreateTopic(topic), CREATE_WAIT)
            .await
            .map_err(|error| (error.error.code(), error.message))
        {
            Ok(_) => tracing::info!(
                partitions = self.config.offsets_topic_num_partitions,
                replication_factor = self.config.offsets_topic_replication_factor,
                "created {OFFSETS_TOPIC}"
            ),
            Err((code, _)) if code == errors::TOPIC_ALREADY_EXISTS => {}
            Err((code, message)) => {
                let message = if code == errors::INVALID_REPLICATION_FACTOR {
                    format!(
                        "cannot create {OFFSETS_TOPIC}: {message}; lower \
                         offsets.topic.replication.factor or start more brokers"
                    )
                } else {
                    format!(
                        "cannot create {OFFSETS_TOPIC}: {}: {message}",
                        errors::name(code)
                    )
                };
                tracing::warn!(%message, "group coordinator unavailable");
                return Err(OffsetsTopicError {
                    code: errors::COORDINATOR_NOT_AVAILABLE,
                    message,
                });
            }
        }
        broker
            .wait_for_image(CREATE_WAIT, |image| {
                image.topic_by_name(OFFSETS_TOPIC).is_some()
            })
            .await;
        self.offsets_partition_count()
            .ok_or_else(|| OffsetsTopicError {
                code: errors::COORDINATOR_NOT_AVAILABLE,
                message: format!("{OFFSETS_TOPIC} is being created"),
            })
    }

    // ---- writes ----

    /// Appends records for the partition's groups as leader at the epoch it was loaded
    /// under. Returns what to wait for, or the error the client gets.
    fn append(
        &self,
        entry: &OffsetsPartition,
        records: &[(RecordKey, Option<Vec<u8>>)],
        now: Now,
    ) -> Result<PendingAck, i16> {
        let state = entry.partition.state();
        if state.leader != self.replicas.broker_id() || state.leader_epoch != entry.leader_epoch {
            return Err(errors::NOT_COORDINATOR);
        }
        let mut batch = BatchBuilder::new(0, now.wall_ms);
        for (key, value) in records {
            batch.push(now.wall_ms, Some(&key.encode()), value.as_deref(), &[]);
        }
        let mut bytes = batch.build();
        let image = self.quorum.image();
        let min_insync = self.replicas.min_insync_replicas(&image, OFFSETS_TOPIC);
        match tokio::task::block_in_place(|| {
            entry
                .partition
                .append_as_leader_at_epoch(&mut bytes, entry.leader_epoch, min_insync)
        }) {
            Ok(appended) => Ok(appended.pending),
            Err(error) => {
                tracing::debug!(partition = entry.index, code = error.error.code(), message = %error.message, "coordinator append refused");
                Err(map_append_error(error.error.code()))
            }
        }
    }

    /// Waits until the in-sync replicas hold the records (`offsets.commit.timeout.ms`).
    async fn acknowledged(&self, entry: &OffsetsPartition, pending: PendingAck) -> i16 {
        let image = self.quorum.image();
        let min_insync = self.replicas.min_insync_replicas(&image, OFFSETS_TOPIC);
        let deadline = tokio::time::Instant::now()
            + Duration::from_millis(self.config.offsets_commit_timeout_ms);
        let delayed = Delayed::new(deadline, [entry.partition.watchers()]);
        let mut state = AckState::Waiting;
        delayed
            .until(|| {
                state = entry.partition.ack_state(&pending, min_insync);
                matches!(state, AckState::Acknowledged | AckState::NotLeader)
            })
            .await;
        match state {
            AckState::Acknowledged => errors::NONE,
            AckState::NotLeader => errors::NOT_COORDINATOR,
            AckState::Waiting | AckState::UnderMinIsr => errors::COORDINATOR_NOT_AVAILABLE,
        }
    }

    /// Appends what the group owes (under its lock, so in order) and reports each write back
    /// once the replicas hold it.
    fn flush_writes(
        self: &Arc<Self>,
        entry: &Arc<OffsetsPartition>,
        group: &SharedGroup,
        state: &mut Group,
        now: Now,
    ) {
        let state = match state {
            Group::Classic(state) => state,
            Group::Consumer(consumer) => {
                // Sessions that ended: stored without waiting (the next check sees the rest).
                let writes = consumer.take_writes();
                if !writes.is_empty()
                    && let Err(error) = self.append(entry, &writes, now)
                {
                    tracing::debug!(group = %consumer.group_id, code = error, "consumer group records not appended");
                }
                return;
            }
        };
        for write in state.take_writes() {
            let record = (
                RecordKey::Group {
                    group: state.group_id.clone(),
                },
                Some(write.value.encode()),
            );
            match self.append(entry, &[record], now) {
                Ok(pending) => {
                    let (coordinator, entry, group) =
                        (Arc::clone(self), Arc::clone(entry), Arc::clone(group));
                    tokio::spawn(async move {
                        let error = coordinator.acknowledged(&entry, pending).await;
                        coordinator.write_done(&entry, &group, &write, error);
                    });
                }
                Err(error) => state.write_done(&write, error, now),
            }
        }
    }

    fn write_done(
        self: &Arc<Self>,
        entry: &Arc<OffsetsPartition>,
        group: &SharedGroup,
        write: &GroupWrite,
        error: i16,
    ) {
        let now = now();
        let mut state = lock(group);
        if let Group::Classic(classic) = &mut *state {
            classic.write_done(write, error, now);
        }
        self.flush_writes(entry, group, &mut state, now);
        state.check_invariants();
        drop(state);
        self.timer.notify_one();
    }

    // ---- the classic protocol ----

    pub async fn join(self: &Arc<Self>, group_id: &str, request: JoinRequest) -> JoinResult {
        let member_id = request.member_id.clone();
        let entry = match self.partition_of(group_id) {
            Ok(entry) => entry,
            Err(code) => return JoinResult::error(&member_id, code),
        };
        let session = request.session_timeout_ms.max(0) as u64;
        if session < self.config.min_session_timeout_ms
            || session > self.config.max_session_timeout_ms
        {
            return JoinResult::error(&member_id, errors::INVALID_SESSION_TIMEOUT);
        }
        let group = if member_id.is_empty() {
            self.find_or_create_group(&entry, group_id)
        } else {
            match self.find_group(&entry, group_id) {
                Some(group) => group,
                None => return JoinResult::error(&member_id, errors::UNKNOWN_MEMBER_ID),
            }
        };
        let reply = {
            let now = now();
            let mut state = lock(&group);
            if !entry.loaded.load(Ordering::Acquire) {
                // Unloaded while this request waited for the group: no timer visits it now.
                return JoinResult::error(&member_id, errors::NOT_COORDINATOR);
            }
            if let Group::Consumer(consumer) = &mut *state
                && consumer.members.is_empty()
            {
                // An empty KIP-848 group gives way to a classic one, keeping its offsets.
                let mut classic = ClassicGroup::new(
                    group_id,
                    Duration::from_millis(self.config.initial_rebalance_delay_ms),
                    now,
                );
                classic.offsets = std::mem::take(&mut consumer.offsets);
                *state = Group::Classic(classic);
            }
            let Group::Classic(classic) = &mut *state else {
                // A KIP-848 consumer group with members: they heartbeat instead.
                return JoinResult::error(&member_id, errors::INCONSISTENT_GROUP_PROTOCOL);
            };
            let reply = classic.join(request, &self.config, now);
            self.flush_writes(&entry, &group, &mut state, now);
            state.check_invariants();
            reply
        };
        self.timer.notify_one();
        match reply {
            Reply::Now(result) => result,
            Reply::Later(receiver) => receiver
                .await
                .unwrap_or_else(|_| JoinResult::error(&member_id, errors::NOT_COORDINATOR)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub async fn sync(
        self: &Arc<Self>,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        assignments: Vec<(String, Vec<u8>)>,
    ) -> SyncResult {
        let error = |code| SyncResult {
            error: code,
            ..Default::default()
        };
        let entry = match self.partition_of(group_id) {
            Ok(entry) => entry,
            Err(code) => return error(code),
        };
        let Some(group) = self.find_group(&entry, group_id) else {
            return error(errors::UNKNOWN_MEMBER_ID);
        };
        let reply = {
            let now = now();
            let mut state = lock(&group);
            if !entry.loaded.load(Ordering::Acquire) {
                return error(errors::NOT_COORDINATOR);
            }
            let Group::Classic(classic) = &mut *state else {
                return error(errors::INCONSISTENT_GROUP_PROTOCOL);
            };
            let reply = classic.sync(
                member_id,
                group_instance_id,
                generation_id,
                protocol_type,
                protocol_name,
                assignments,
                now,
            );
            self.flush_writes(&entry, &group, &mut state, now);
            state.check_invariants();
            reply
        };
        self.timer.notify_one();
        match reply {
            Reply::Now(result) => result,
            Reply::Later(receiver) => receiver
                .await
                .unwrap_or_else(|_| error(errors::NOT_COORDINATOR)),
        }
    }

    pub fn heartbeat(
        self: &Arc<Self>,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
    ) -> i16 {
        let entry = match self.partition_of(group_id) {
            Ok(entry) => entry,
            Err(code) => return code,
        };
        let Some(group) = self.find_group(&entry, group_id) else {
            return errors::UNKNOWN_MEMBER_ID;
        };
        let mut state = lock(&group);
        let code = match &mut *state {
            Group::Classic(classic) => {
                classic.heartbeat(member_id, group_instance_id, generation_id, now())
            }
            Group::Consumer(_) => errors::INCONSISTENT_GROUP_PROTOCOL,
        };
        tracing::trace!(
            group = group_id,
            member = member_id,
            generation_id,
            code,
            "heartbeat"
        );
        code
    }

    /// LeaveGroup: the group's error, or one error per member.
    pub fn leave(
        self: &Arc<Self>,
        group_id: &str,
        leaving: &[super::classic::Leaving],
    ) -> Result<Vec<i16>, i16> {
        let entry = self.partition_of(group_id)?;
        let Some(group) = self.find_group(&entry, group_id) else {
            return Ok(vec![errors::UNKNOWN_MEMBER_ID; leaving.len()]);
        };
        let now = now();
        let mut state = lock(&group);
        let results = match &mut *state {
            Group::Classic(classic) => classic.leave(leaving, now),
            Group::Consumer(_) => vec![errors::UNKNOWN_MEMBER_ID; leaving.len()],
        };
        self.flush_writes(&entry, &group, &mut state, now);
        state.check_invariants();
        drop(state);
        self.timer.notify_one();
        Ok(results)
    }

    // ---- KIP-848 consumer groups ----

    /// The subscribed topics as the metadata image has them now.
    fn topics_view(&self, names: &std::collections::BTreeSet<String>) -> TopicsView {
        let image = self.quorum.image();
        names
            .iter()
            .filter_map(|name| {
                image
                    .topic_by_name(name)
                    .map(|t| (name.clone(), (t.id.0, t.partitions.len() as i32)))
            })
            .collect()
    }

    /// ConsumerGroupHeartbeat.
    pub async fn consumer_heartbeat(
        self: &Arc<Self>,
        group_id: &str,
        request: Heartbeat,
    ) -> HeartbeatResult {
        let error = |code: i16, message: String| HeartbeatResult {
            error: code,
            message: Some(message),
            member_id: request.member_id.clone(),
            member_epoch: -1,
            assignment: None,
        };
        if !self.config.consumer_protocol_enabled {
            return error(
                errors::UNSUPPORTED_VERSION,
                "the consumer group protocol is disabled (group.coordinator.rebalance.protocols)"
                    .into(),
            );
        }
        let entry = match self.partition_of(group_id) {
            Ok(entry) => entry,
            Err(code) => return error(code, format!("group {group_id}: {}", errors::name(code))),
        };
        let joining = request.member_epoch == 0;
        let group = if joining {
            let mut groups = entry.groups.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(groups.entry(group_id.to_owned()).or_insert_with(|| {
                GroupCell::new(Group::Consumer(ConsumerGroup::new(group_id, now())))
            }))
        } else {
            // Only a join (epoch 0) creates or converts a group.
            match self.find_group(&entry, group_id) {
                Some(group) => group,
                None => {
                    return error(
                        errors::UNKNOWN_MEMBER_ID,
                        format!("group {group_id} has no member {}", request.member_id),
                    );
                }
            }
        };
        let now = now();
        // The group's lock is released (the block ends) before waiting for the replicas.
        let (mut result, pending) = {
            let mut state = lock(&group);
            if !entry.loaded.load(Ordering::Acquire) {
                // Unloaded while this request waited for the group.
                return error(errors::NOT_COORDINATOR, format!("group {group_id} moved"));
            }
            let mut converted_from_classic = false;
            if let Group::Classic(classic) = &mut *state {
                if classic.state() != super::classic::GroupState::Empty {
                    return error(
                        errors::GROUP_ID_NOT_FOUND,
                        format!("group {group_id} is a classic group with members"),
                    );
                }
                if !joining {
                    // No consumer group (any more): the member rejoins at epoch 0.
                    return error(
                        errors::UNKNOWN_MEMBER_ID,
                        format!("group {group_id} has no member {}", request.member_id),
                    );
                }
                // An empty classic group (or one that only stores offsets) becomes a consumer
                // group, keeping its offsets (back again if this join is refused).
                let mut converted = ConsumerGroup::new(group_id, now);
                converted.offsets = std::mem::take(&mut classic.offsets);
                *state = Group::Consumer(converted);
                converted_from_classic = true;
            }
            let Group::Consumer(consumer) = &mut *state else {
                return error(errors::UNKNOWN_SERVER_ERROR, "group kind changed".into());
            };
            let mut names = consumer.subscribed_topics();
            names.extend(request.subscribed_topic_names.iter().flatten().cloned());
            let topics = self.topics_view(&names);
            let result = consumer.heartbeat(request, &topics, &self.config, now);
            // Kafka's records of the change, answered once the in-sync replicas hold them.
            let writes = consumer.take_writes();
            if result.error != errors::NONE && converted_from_classic && consumer.members.is_empty()
            {
                let mut classic = ClassicGroup::new(
                    group_id,
                    Duration::from_millis(self.config.initial_rebalance_delay_ms),
                    now,
                );
                classic.offsets = std::mem::take(&mut consumer.offsets);
                *state = Group::Classic(classic);
            }
            let pending = if writes.is_empty() {
                None
            } else {
                Some(self.append(&entry, &writes, now))
            };
            (result, pending)
        };
        let stored = match pending {
            None => errors::NONE,
            Some(Ok(pending)) => self.acknowledged(&entry, pending).await,
            Some(Err(error)) => error,
        };
        if stored != errors::NONE && result.error == errors::NONE {
            result = HeartbeatResult {
                error: stored,
                message: Some(format!(
                    "the group's change was not stored: {}",
                    errors::name(stored)
                )),
                member_id: result.member_id,
                member_epoch: -1,
                assignment: None,
            };
        }
        self.timer.notify_one();
        result
    }

    /// ConsumerGroupDescribe of one group: GROUP_ID_NOT_FOUND for none or a classic group.
    pub fn describe_consumer_group<T>(
        &self,
        group_id: &str,
        describe: impl FnOnce(&ConsumerGroup) -> T,
    ) -> Result<T, i16> {
        let entry = self.partition_of(group_id)?;
        let group = self
            .find_group(&entry, group_id)
            .ok_or(errors::GROUP_ID_NOT_FOUND)?;
        let state = lock(&group);
        match &*state {
            Group::Consumer(consumer) => Ok(describe(consumer)),
            Group::Classic(_) => Err(errors::GROUP_ID_NOT_FOUND),
        }
    }

    // ---- offsets ----

    /// OffsetCommit: the group-wide error, or one error per partition.
    pub async fn commit(
        self: &Arc<Self>,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
        commits: Vec<OffsetCommit>,
    ) -> Result<CommitOutcome, i16> {
        let entry = self.partition_of(group_id)?;
        let group = match self.find_group(&entry, group_id) {
            Some(group) => group,
            None if generation_id < 0 => self.find_or_create_group(&entry, group_id),
            None => return Err(errors::ILLEGAL_GENERATION),
        };
        let mut results = vec![errors::NONE; commits.len()];
        let mut accepted = Vec::with_capacity(commits.len());
        for (i, commit) in commits.iter().enumerate() {
            if commit.offset.metadata.len() > self.config.offset_metadata_max_bytes {
                results[i] = errors::OFFSET_METADATA_TOO_LARGE;
            } else {
                accepted.push(i);
            }
        }
        if accepted.is_empty() {
            return Ok(results);
        }
        // One offset write of the group at a time, from append to acknowledgement.
        let _serial = group.offset_writes.lock().await;
        let now = now();
        let pending = {
            let state = lock(&group);
            if state.is_dead() {
                return Err(errors::COORDINATOR_NOT_AVAILABLE);
            }
            let error = state.check_commit(member_id, group_instance_id, generation_id);
            if error != errors::NONE {
                return Err(error);
            }
            let records: Vec<(RecordKey, Option<Vec<u8>>)> = accepted
                .iter()
                .map(|&i| {
                    let commit = &commits[i];
                    (
                        RecordKey::Offset {
                            group: group_id.to_owned(),
                            topic: commit.topic.clone(),
                            partition: commit.partition,
                        },
                        Some(
                            OffsetValue {
                                offset: commit.offset.offset,
                                leader_epoch: commit.offset.leader_epoch,
                                metadata: commit.offset.metadata.clone(),
                                commit_timestamp_ms: now.wall_ms,
                            }
                            .encode(),
                        ),
                    )
                })
                .collect();
            self.append(&entry, &records, now)
        };
        let appended = pending.is_ok();
        let error = match pending {
            Ok(pending) => self.acknowledged(&entry, pending).await,
            Err(error) => error,
        };
        if appended && error != errors::NONE {
            // In the log perhaps, committed perhaps: a delete must cover them.
            group.uncertain().extend(
                accepted
                    .iter()
                    .map(|&i| (commits[i].topic.clone(), commits[i].partition)),
            );
        }
        if error == errors::NONE {
            let mut state = lock(&group);
            let stored = accepted
                .iter()
                .map(|&i| {
                    let commit = &commits[i];
                    (
                        (commit.topic.clone(), commit.partition),
                        CommittedOffset {
                            commit_timestamp_ms: now.wall_ms,
                            ..commit.offset.clone()
                        },
                    )
                })
                .collect();
            state.commit_done(member_id, stored, now);
        }
        if error == errors::NONE {
            self.commits
                .fetch_add(accepted.len() as u64, Ordering::Relaxed);
        } else {
            self.commits_failed.fetch_add(1, Ordering::Relaxed);
        }
        for i in accepted {
            results[i] = error;
        }
        Ok(results)
    }

    /// OffsetFetch: the committed offsets of `group_id` for `wanted` (every partition with
    /// one when `None`); a partition without one is absent.
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        wanted: Option<&[(String, i32)]>,
    ) -> Result<BTreeMap<(String, i32), CommittedOffset>, i16> {
        let entry = self.partition_of(group_id)?;
        let Some(group) = self.find_group(&entry, group_id) else {
            return Ok(BTreeMap::new());
        };
        let state = lock(&group);
        Ok(match wanted {
            None => state.offsets().clone(),
            Some(wanted) => wanted
                .iter()
                .filter_map(|key| state.offsets().get(key).map(|o| (key.clone(), o.clone())))
                .collect(),
        })
    }

    /// OffsetDelete: per partition NONE or GROUP_SUBSCRIBED_TO_TOPIC; the group's error.
    pub async fn delete_offsets(
        self: &Arc<Self>,
        group_id: &str,
        partitions: &[(String, i32)],
    ) -> Result<Vec<i16>, i16> {
        let entry = self.partition_of(group_id)?;
        let Some(group) = self.find_group(&entry, group_id) else {
            return Err(errors::GROUP_ID_NOT_FOUND);
        };
        let _serial = group.offset_writes.lock().await;
        let now = now();
        let (results, pending) = {
            let mut state = lock(&group);
            if state.is_dead() {
                return Err(errors::GROUP_ID_NOT_FOUND);
            }
            let subscribed = state.subscribed_topics();
            let mut results = Vec::with_capacity(partitions.len());
            let mut deleted = Vec::new();
            for key in partitions {
                if subscribed.contains(&key.0) {
                    results.push(errors::GROUP_SUBSCRIBED_TO_TOPIC);
                } else {
                    results.push(errors::NONE);
                    if state.offsets().contains_key(key) || group.uncertain().contains(key) {
                        deleted.push(key.clone());
                    }
                }
            }
            if deleted.is_empty() {
                return Ok(results);
            }
            let records: Vec<(RecordKey, Option<Vec<u8>>)> = deleted
                .iter()
                .map(|(topic, partition)| {
                    (
                        RecordKey::Offset {
                            group: group_id.to_owned(),
                            topic: topic.clone(),
                            partition: *partition,
                        },
                        None,
                    )
                })
                .collect();
            let pending = self.append(&entry, &records, now);
            if pending.is_ok() {
                let mut uncertain = group.uncertain();
                for key in &deleted {
                    state.offsets_mut().remove(key);
                    uncertain.remove(key);
                }
            }
            (results, pending)
        };
        let error = match pending {
            Ok(pending) => self.acknowledged(&entry, pending).await,
            Err(error) => error,
        };
        if error != errors::NONE {
            return Err(error);
        }
        Ok(results)
    }

    // ---- admin ----

    /// DescribeGroups for one group: Dead with no members when this coordinator has none of
    /// that name (Kafka's answer).
    pub fn describe(&self, group_id: &str) -> Result<super::classic::GroupDescription, i16> {
        let entry = self.partition_of(group_id)?;
        let group = self.find_group(&entry, group_id);
        let state = group.as_ref().map(lock);
        Ok(match state.as_deref() {
            Some(Group::Classic(classic)) => classic.describe(),
            // Kafka's answer for a KIP-848 group (ConsumerGroupDescribe describes it).
            Some(Group::Consumer(_)) => return Err(errors::GROUP_ID_NOT_FOUND),
            None => super::classic::GroupDescription {
                state: super::classic::GroupState::Dead,
                protocol_type: String::new(),
                protocol: String::new(),
                members: Vec::new(),
            },
        })
    }

    /// Every group this broker coordinates; the error is COORDINATOR_LOAD_IN_PROGRESS while a
    /// partition is loading.
    pub fn list(&self) -> (Vec<ListedGroup>, i16) {
        let mut groups = Vec::new();
        let mut error = errors::NONE;
        for entry in self.read_partitions().values() {
            if !entry.loaded.load(Ordering::Acquire) {
                error = errors::COORDINATOR_LOAD_IN_PROGRESS;
                continue;
            }
            // The partition's group map is released before any group is locked: a group's
            // lock is taken before the map's elsewhere (deleting a group).
            let shared: Vec<(String, SharedGroup)> = entry
                .groups
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .map(|(id, group)| (id.clone(), Arc::clone(group)))
                .collect();
            for (group_id, group) in shared {
                let state = lock(&group);
                if !state.is_dead() {
                    groups.push(ListedGroup {
                        group_id,
                        protocol_type: state.protocol_type().to_owned(),
                        state: state.state_name(),
                        group_type: state.group_type(),
                    });
                }
            }
        }
        (groups, error)
    }

    /// DeleteGroups for one group: NONE, GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP or a coordinator
    /// error.
    pub async fn delete_group(self: &Arc<Self>, group_id: &str) -> i16 {
        let entry = match self.partition_of(group_id) {
            Ok(entry) => entry,
            Err(code) => return code,
        };
        let Some(group) = self.find_group(&entry, group_id) else {
            return errors::GROUP_ID_NOT_FOUND;
        };
        let _serial = group.offset_writes.lock().await;
        let now = now();
        let pending = {
            let mut state = lock(&group);
            let error = state.check_delete();
            if error != errors::NONE {
                return error;
            }
            let records = tombstones(&state, &group.uncertain());
            let pending = self.append(&entry, &records, now);
            if pending.is_ok() {
                state.mark_dead(now);
                entry
                    .groups
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(group_id);
            }
            pending
        };
        match pending {
            Ok(pending) => self.acknowledged(&entry, pending).await,
            Err(error) => error,
        }
    }

    // ---- metrics ----

    /// Prometheus text: coordinator partitions, groups by type and state, members and
    /// commits; per group, its members and, per topic, the consumer lag summed and at its
    /// largest. Lag is computed for the partitions this broker holds a replica of (all of
    /// them when every broker holds every partition); `sluice groups describe` asks the
    /// leaders for the rest.
    pub fn render_metrics(&self, out: &mut String) {
        let entries: Vec<Arc<OffsetsPartition>> =
            self.read_partitions().values().cloned().collect();
        let loading = entries
            .iter()
            .filter(|e| !e.loaded.load(Ordering::Acquire))
            .count();
        let mut by_state: BTreeMap<(&'static str, &'static str), u64> = BTreeMap::new();
        let mut members_by_group: Vec<(String, usize)> = Vec::new();
        let mut lag: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
        for entry in entries.iter().filter(|e| e.loaded.load(Ordering::Acquire)) {
            let groups: Vec<SharedGroup> = entry
                .groups
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .cloned()
                .collect();
            for group in groups {
                let state = lock(&group);
                if state.is_dead() {
                    continue;
                }
                *by_state
                    .entry((state.group_type(), state.state_name()))
                    .or_default() += 1;
                let members = match &*state {
                    Group::Classic(g) => g.member_count(),
                    Group::Consumer(g) => g.members.len(),
                };
                members_by_group.push((state.group_id().to_owned(), members));
                for ((topic, partition), committed) in state.offsets() {
                    let tp = TopicPartition::new(topic.as_str(), *partition);
                    let Some(replica) = self.replicas.partition(&tp) else {
                        continue;
                    };
                    let behind = replica
                        .high_watermark()
                        .saturating_sub(committed.offset.max(0) as u64);
                    let slot = lag
                        .entry((state.group_id().to_owned(), topic.clone()))
                        .or_default();
                    slot.0 += behind;
                    slot.1 = slot.1.max(behind);
                }
            }
        }
        fn header(out: &mut String, name: &str, kind: &str, help: &str) {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        }
        header(
            out,
            "sluice_group_coordinator_partitions",
            "gauge",
            "__consumer_offsets partitions this broker coordinates, by load state.",
        );
        let _ = writeln!(
            out,
            "sluice_group_coordinator_partitions{{state=\"loaded\"}} {}\n\
             sluice_group_coordinator_partitions{{state=\"loading\"}} {loading}",
            entries.len() - loading
        );
        header(
            out,
            "sluice_groups",
            "gauge",
            "Groups coordinated here, by type and state.",
        );
        for ((kind, state), count) in &by_state {
            let _ = writeln!(
                out,
                "sluice_groups{{type=\"{kind}\",state=\"{state}\"}} {count}"
            );
        }
        header(
            out,
            "sluice_group_members",
            "gauge",
            "Members of each group coordinated here.",
        );
        for (group, members) in &members_by_group {
            let _ = writeln!(
                out,
                "sluice_group_members{{group=\"{}\"}} {members}",
                escape_label(group)
            );
        }
        header(
            out,
            "sluice_consumer_group_lag_sum",
            "gauge",
            "Records between each group's committed offsets and the high watermark, per topic.",
        );
        for ((group, topic), (sum, _)) in &lag {
            let _ = writeln!(
                out,
                "sluice_consumer_group_lag_sum{{group=\"{}\",topic=\"{}\"}} {sum}",
                escape_label(group),
                escape_label(topic)
            );
        }
        header(
            out,
            "sluice_consumer_group_lag_max",
            "gauge",
            "The largest lag of one partition, per group and topic.",
        );
        for ((group, topic), (_, max)) in &lag {
            let _ = writeln!(
                out,
                "sluice_consumer_group_lag_max{{group=\"{}\",topic=\"{}\"}} {max}",
                escape_label(group),
                escape_label(topic)
            );
        }
        header(
            out,
            "sluice_offset_commits_total",
            "counter",
            "Partition offsets committed through this coordinator.",
        );
        let _ = writeln!(
            out,
            "sluice_offset_commits_total {}",
            self.commits.load(Ordering::Relaxed)
        );
        header(
            out,
            "sluice_offset_commit_failures_total",
            "counter",
            "OffsetCommit requests refused or not stored (fencing, timeouts, moved coordinator).",
        );
        let _ = writeln!(
            out,
            "sluice_offset_commit_failures_total {}",
            self.commits_failed.load(Ordering::Relaxed)
        );
    }

    // ---- the timer ----

    async fn run_timer(self: Arc<Self>) {
        let mut next_expiry_check =
            Instant::now() + Duration::from_millis(self.config.offsets_retention_check_interval_ms);
        loop {
            let now = now();
            let mut next = now.instant + TIMER_IDLE;
            let entries: Vec<Arc<OffsetsPartition>> = self
                .read_partitions()
                .values()
                .filter(|e| e.loaded.load(Ordering::Acquire))
                .cloned()
                .collect();
            let expire = now.instant >= next_expiry_check;
            for entry in &entries {
                let groups: Vec<SharedGroup> = entry
                    .groups
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .values()
                    .cloned()
                    .collect();
                for group in groups {
                    let mut state = lock(&group);
                    if state.next_deadline().is_some_and(|d| d <= now.instant) {
                        state.tick(|g| self.topics_view(&g.subscribed_topics()), now);
                        self.flush_writes(entry, &group, &mut state, now);
                        state.check_invariants();
                    }
                    // Not while an offset write of the group is in flight: the next check.
                    if expire && let Ok(_serial) = group.offset_writes.try_lock() {
                        self.expire_offsets(entry, &group, &mut state, now);
                    }
                    if let Some(deadline) = state.next_deadline() {
                        next = next.min(deadline);
                    }
                }
            }
            if expire {
                next_expiry_check = now.instant
                    + Duration::from_millis(self.config.offsets_retention_check_interval_ms);
            }
            let sleep = tokio::time::sleep_until(tokio::time::Instant::from_std(next));
            tokio::select! {
                _ = sleep => {}
                _ = self.timer.notified() => {}
            }
        }
    }

    /// Deletes (with tombstones) an empty group's offsets past `offsets.retention.minutes`,
    /// and the group once nothing is left of it. Not waited for: a tombstone that did not
    /// make it is written again at the next check.
    fn expire_offsets(
        &self,
        entry: &OffsetsPartition,
        group: &GroupCell,
        state: &mut Group,
        now: Now,
    ) {
        let expired =
            state.expired_offsets(Duration::from_millis(self.config.offsets_retention_ms), now);
        let group_gone = state.gone_without(expired.len());
        let uncertain: Vec<(String, i32)> = if group_gone {
            group.uncertain().iter().cloned().collect()
        } else {
            Vec::new()
        };
        if expired.is_empty() && !group_gone {
            return;
        }
        let group_id = state.group_id().to_owned();
        let mut records: Vec<(RecordKey, Option<Vec<u8>>)> = expired
            .iter()
            .chain(uncertain.iter())
            .map(|(topic, partition)| {
                (
                    RecordKey::Offset {
                        group: group_id.clone(),
                        topic: topic.clone(),
                        partition: *partition,
                    },
                    None,
                )
            })
            .collect();
        if group_gone {
            if matches!(state, Group::Consumer(_)) {
                records.push((
                    RecordKey::ConsumerGroup {
                        group: group_id.clone(),
                    },
                    None,
                ));
                records.push((
                    RecordKey::TargetAssignment {
                        group: group_id.clone(),
                    },
                    None,
                ));
            }
            records.push((
                RecordKey::Group {
                    group: group_id.clone(),
                },
                None,
            ));
        }
        if self.append(entry, &records, now).is_ok() {
            tracing::info!(group = %group_id, offsets = expired.len(), group_deleted = group_gone, "expired committed offsets");
            for key in &expired {
                state.offsets_mut().remove(key);
            }
            if group_gone {
                group.uncertain().clear();
                state.mark_dead(now);
                entry
                    .groups
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&group_id);
            }
        }
    }
}

/// What `load_consumer_record` fills in for one group while replaying.
struct ConsumerFields<'a> {
    epoch: &'a mut Option<i32>,
    assignment_epoch: &'a mut i32,
    members: &'a mut BTreeMap<String, RestoredMember>,
    at: &'a mut u64,
}

/// Applies one KIP-848 record (or its tombstone) to the group being replayed.
fn load_consumer_record(
    fields: ConsumerFields<'_>,
    key: RecordKey,
    value: Option<&[u8]>,
    position: u64,
) -> Result<(), super::records::RecordError> {
    use super::records::{
        ConsumerMemberValue, CurrentAssignmentValue, decode_epoch_value, decode_target_value,
    };
    match (key, value) {
        (RecordKey::ConsumerGroup { .. }, Some(value)) => {
            *fields.epoch = Some(decode_epoch_value(value)?);
            *fields.at = position;
        }
        (RecordKey::ConsumerGroup { .. }, None) => {
            *fields.epoch = None;
            fields.members.clear();
        }
        (RecordKey::TargetAssignment { .. }, Some(value)) => {
            *fields.assignment_epoch = decode_epoch_value(value)?;
        }
        (RecordKey::ConsumerMember { member, .. }, Some(value)) => {
            let entry = fields.members.entry(member.clone()).or_default();
            entry.member_id = member;
            entry.metadata = ConsumerMemberValue::decode(value)?;
        }
        (RecordKey::ConsumerMember { member, .. }, None) => {
            fields.members.remove(&member);
        }
        (RecordKey::TargetMember { member, .. }, value) => {
            let target = value.map(decode_target_value).transpose()?;
            if let Some(entry) = fields.members.get_mut(&member) {
                entry.target = target;
            } else if let Some(target) = target {
                fields.members.entry(member).or_default().target = Some(target);
            }
        }
        (RecordKey::CurrentAssignment { member, .. }, value) => {
            let current = value.map(CurrentAssignmentValue::decode).transpose()?;
            if let Some(entry) = fields.members.get_mut(&member) {
                entry.current = current;
            } else if let Some(current) = current {
                fields.members.entry(member).or_default().current = Some(current);
            }
        }
        _ => {}
    }
    Ok(())
}

/// Tombstones for everything a group stored.
fn tombstones(
    state: &Group,
    uncertain: &std::collections::BTreeSet<(String, i32)>,
) -> Vec<(RecordKey, Option<Vec<u8>>)> {
    let group = state.group_id().to_owned();
    let keys: std::collections::BTreeSet<&(String, i32)> =
        state.offsets().keys().chain(uncertain.iter()).collect();
    let mut records: Vec<(RecordKey, Option<Vec<u8>>)> = keys
        .into_iter()
        .map(|(topic, partition)| {
            (
                RecordKey::Offset {
                    group: group.clone(),
                    topic: topic.clone(),
                    partition: *partition,
                },
                None,
            )
        })
        .collect();
    if matches!(state, Group::Consumer(_)) {
        records.push((
            RecordKey::ConsumerGroup {
                group: group.clone(),
            },
            None,
        ));
        records.push((
            RecordKey::TargetAssignment {
                group: group.clone(),
            },
            None,
        ));
    }
    records.push((RecordKey::Group { group }, None));
    records
}

/// A Prometheus label value: backslash, quote and newline escaped.
fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Drops a partition's groups; the number dropped.
fn unload_groups(entry: &OffsetsPartition) -> usize {
    entry.loaded.store(false, Ordering::Release);
    let groups = std::mem::take(&mut *entry.groups.lock().unwrap_or_else(|p| p.into_inner()));
    for group in groups.values() {
        lock(group).unload();
    }
    groups.len()
}

/// Kafka's mapping of an append error to what a group client is told.
fn map_append_error(code: i16) -> i16 {
    match code {
        errors::UNKNOWN_TOPIC_OR_PARTITION
        | errors::NOT_ENOUGH_REPLICAS
        | errors::NOT_ENOUGH_REPLICAS_AFTER_APPEND
        | errors::REQUEST_TIMED_OUT => errors::COORDINATOR_NOT_AVAILABLE,
        errors::NOT_LEADER_OR_FOLLOWER | errors::KAFKA_STORAGE_ERROR => errors::NOT_COORDINATOR,
        errors::MESSAGE_TOO_LARGE | errors::INVALID_RECORD | errors::CORRUPT_MESSAGE => {
            errors::INVALID_COMMIT_OFFSET_SIZE
        }
        _ => errors::UNKNOWN_SERVER_ERROR,
    }
}
