//! The groups of one `__consumer_offsets` partition, as a coordinator runtime shard: every
//! request is an operation here, every durable change a record replayed by `replay` (the one
//! function loading also uses), every deadline a timer keyed by group.
//!
//! How a group changes kind: an empty classic group becomes a KIP-848 group on a member's first
//! heartbeat (its metadata record tombstoned, then the consumer group's records written); an
//! empty KIP-848 group becomes classic on a JoinGroup (its epoch records tombstoned). Replaying
//! a record of the other kind converts the group the same way, keeping its offsets, so a load
//! follows the kind whose records came last.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use super::classic::{
    ClassicGroup, GroupDescription, GroupState, JoinRequest, JoinResult, Leaving, Reply, SyncResult,
};
use super::consumer::{ConsumerGroup, Heartbeat, HeartbeatResult, TopicsView};
use super::lag::CommittedIndex;
use super::records::{GroupRecord, OffsetValue, RecordKey, RecordValue};
use super::state::Group;
use super::{CommittedOffset, GroupConfig};
use crate::coordinator::{Ctx, Now, Shard, TxnProducer};
use crate::protocol::TopicPartition;
use crate::protocol::errors::KafkaError;

/// The timer of the offsets retention check (group timers are `group:<id>`).
const RETENTION_TIMER: &str = "retention";

fn group_timer(group_id: &str) -> String {
    format!("group:{group_id}")
}

/// The subscribed topics as the metadata image has them now.
pub trait TopicsSource: Send + Sync + 'static {
    fn view(&self, names: &BTreeSet<String>) -> TopicsView;
}

/// One OffsetCommit partition.
#[derive(Debug, Clone)]
pub struct OffsetCommit {
    pub topic_partition: TopicPartition,
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

/// Kafka's mapping of a failed append or commit to what a group client is told.
pub fn map_append_error(error: KafkaError) -> KafkaError {
    match error {
        KafkaError::CoordinatorLoadInProgress | KafkaError::NotCoordinator => error,
        // A transactional offset commit's producer checks.
        KafkaError::InvalidProducerEpoch
        | KafkaError::ProducerFenced
        | KafkaError::InvalidTxnState
        | KafkaError::TransactionCoordinatorFenced => error,
        KafkaError::UnknownTopicOrPartition
        | KafkaError::NotEnoughReplicas
        | KafkaError::NotEnoughReplicasAfterAppend
        | KafkaError::RequestTimedOut => KafkaError::CoordinatorNotAvailable,
        KafkaError::NotLeaderOrFollower | KafkaError::KafkaStorageError => {
            KafkaError::NotCoordinator
        }
        KafkaError::MessageTooLarge
        | KafkaError::InvalidRecord
        | KafkaError::CorruptMessage
        | KafkaError::RecordListTooLarge => KafkaError::InvalidCommitOffsetSize,
        _ => KafkaError::UnknownServerError,
    }
}

pub struct GroupShard {
    config: Arc<GroupConfig>,
    topics: Arc<dyn TopicsSource>,
    groups: HashMap<String, Group>,
    /// Offsets committed in a transaction (TxnOffsetCommit), per producer, then group: they
    /// become the group's when the producer's commit marker is written, and are dropped on
    /// an abort (Kafka's pending transactional offsets).
    pending_txn: HashMap<i64, BTreeMap<String, BTreeMap<TopicPartition, CommittedOffset>>>,
    /// The committed offsets again, for lag on `/metrics` without this shard's lock.
    committed: Arc<CommittedIndex>,
}

impl GroupShard {
    pub fn new(
        config: Arc<GroupConfig>,
        topics: Arc<dyn TopicsSource>,
        committed: Arc<CommittedIndex>,
    ) -> GroupShard {
        GroupShard {
            config,
            topics,
            groups: HashMap::new(),
            pending_txn: HashMap::new(),
            committed,
        }
    }

    pub fn groups(&self) -> impl Iterator<Item = &Group> {
        self.groups.values()
    }

    pub fn group(&self, group_id: &str) -> Option<&Group> {
        self.groups.get(group_id)
    }

    fn initial_delay(&self) -> Duration {
        Duration::from_millis(self.config.initial_rebalance_delay_ms)
    }

    fn session_timeout(&self) -> Duration {
        Duration::from_millis(self.config.consumer_session_timeout_ms)
    }

    fn new_classic(&self, group_id: &str, now: Now) -> ClassicGroup {
        ClassicGroup::new(group_id, self.initial_delay(), now)
    }

    // ---- records ----

    /// The record holding `key`'s present value (a tombstone when it has none).
    fn current_record(&self, key: &RecordKey) -> GroupRecord {
        let Some(group) = self.groups.get(key.group()) else {
            return GroupRecord::tombstone(key.clone());
        };
        let value = match (key, group) {
            (
                RecordKey::Offset {
                    topic, partition, ..
                },
                group,
            ) => group
                .offsets()
                .get(&TopicPartition::new(topic.as_str(), *partition))
                .map(|o| RecordValue::Offset(offset_value(o))),
            (RecordKey::Group { .. }, Group::Classic(g)) => {
                g.stored.clone().map(RecordValue::Group)
            }
            (RecordKey::Group { .. }, Group::Consumer(_)) => None,
            (_, Group::Consumer(g)) => return g.current_record(key),
            (_, Group::Classic(_)) => None,
        };
        GroupRecord::new(key.clone(), value)
    }

    /// Writes `record`: replayed now, appended when the operation ends.
    fn apply(&mut self, ctx: &mut Ctx<GroupShard>, record: GroupRecord) {
        let undo = self.current_record(&record.key);
        self.replay(&record, ctx.now);
        ctx.written(record, undo);
    }

    /// The group as a classic one (converting an empty KIP-848 group), keeping its offsets.
    fn classic_entry(&mut self, group_id: &str, now: Now) -> &mut ClassicGroup {
        if !matches!(self.groups.get(group_id), Some(Group::Classic(_))) {
            let mut classic = self.new_classic(group_id, now);
            if let Some(previous) = self.groups.remove(group_id) {
                classic.offsets = offsets_of(previous);
            }
            self.groups
                .insert(group_id.to_owned(), Group::Classic(classic));
        }
        match self.groups.get_mut(group_id) {
            Some(Group::Classic(g)) => g,
            _ => unreachable!("inserted above"),
        }
    }

    /// The group as a KIP-848 one (converting a classic group), keeping its offsets.
    fn consumer_entry(&mut self, group_id: &str, now: Now) -> &mut ConsumerGroup {
        if !matches!(self.groups.get(group_id), Some(Group::Consumer(_))) {
            let mut consumer = ConsumerGroup::new(group_id, self.session_timeout(), now);
            if let Some(previous) = self.groups.remove(group_id) {
                consumer.offsets = offsets_of(previous);
            }
            self.groups
                .insert(group_id.to_owned(), Group::Consumer(consumer));
        }
        match self.groups.get_mut(group_id) {
            Some(Group::Consumer(g)) => g,
            _ => unreachable!("inserted above"),
        }
    }

    /// Drops a group nothing is left of.
    fn collect(&mut self, group_id: &str) {
        if self.groups.get(group_id).is_some_and(Group::is_vacant)
            && let Some(mut gone) = self.groups.remove(group_id)
        {
            gone.unload();
        }
    }

    /// After an operation on a group: its records and writes handed to the runtime, its
    /// timer moved, its invariants checked, and the group dropped if nothing is left of it.
    fn finish(&mut self, ctx: &mut Ctx<GroupShard>, group_id: &str) {
        ctx.touch(group_id);
        let Some(group) = self.groups.get_mut(group_id) else {
            ctx.schedule(group_timer(group_id), None);
            return;
        };
        match group {
            Group::Consumer(consumer) => {
                for (record, undo) in consumer.take_journal() {
                    ctx.written(record, undo);
                }
            }
            Group::Classic(classic) => {
                for write in classic.take_writes() {
                    let record = GroupRecord::new(
                        RecordKey::Group {
                            group: group_id.to_owned(),
                        },
                        Some(RecordValue::Group(write.value.clone())),
                    );
                    self.apply(ctx, record);
                    let group_id = group_id.to_owned();
                    ctx.after_commit(move |shard, ctx, outcome| {
                        let stored = outcome.map_err(map_append_error);
                        if let Some(Group::Classic(classic)) = shard.groups.get_mut(&group_id) {
                            classic.write_done(&write, stored, ctx.now);
                        }
                        shard.finish(ctx, &group_id);
                    });
                }
            }
        }
        let deadline = self.groups.get(group_id).and_then(Group::next_deadline);
        ctx.schedule(group_timer(group_id), deadline);
        debug_assert!(
            self.committed.matches(
                group_id,
                self.groups
                    .get(group_id)
                    .map(|g| g.offsets().iter().map(|(tp, c)| (tp, c.offset)))
            ),
            "the committed offsets' index of {group_id} differs from the group's"
        );
        self.collect(group_id);
    }

    // ---- the classic protocol ----

    pub fn join(
        &mut self,
        ctx: &mut Ctx<GroupShard>,
        group_id: &str,
        request: JoinRequest,
    ) -> Reply<JoinResult> {
        let member_id = request.member_id.clone();
        if !self.groups.contains_key(group_id) {
            if !member_id.is_empty() {
                return Reply::Now(JoinResult::error(&member_id, KafkaError::UnknownMemberId));
            }
            let group = self.new_classic(group_id, ctx.now);
            self.groups
                .insert(group_id.to_owned(), Group::Classic(group));
        }
        if let Some(Group::Consumer(consumer)) = self.groups.get(group_id) {
            if !consumer.members.is_empty() {
                // A KIP-848 consumer group with members: they heartbeat instead.
                return Reply::Now(JoinResult::error(
                    &member_id,
                    KafkaError::InconsistentGroupProtocol,
                ));
            }
            // An empty KIP-848 group gives way to a classic one, keeping its offsets.
            for key in [
                RecordKey::TargetAssignment {
                    group: group_id.to_owned(),
                },
                RecordKey::ConsumerGroup {
                    group: group_id.to_owned(),
                },
            ] {
                self.apply(ctx, GroupRecord::tombstone(key));
            }
        }
        let config = Arc::clone(&self.config);
        let reply = self
            .classic_entry(group_id, ctx.now)
            .join(request, &config, ctx.now);
        self.finish(ctx, group_id);
        reply
    }

    #[allow(clippy::too_many_arguments)]
    pub fn sync(
        &mut self,
        ctx: &mut Ctx<GroupShard>,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        assignments: Vec<(String, Vec<u8>)>,
    ) -> Reply<SyncResult> {
        let error = |error| Reply::Now(SyncResult::error(error));
        let reply = match self.groups.get_mut(group_id) {
            None => return error(KafkaError::UnknownMemberId),
            Some(Group::Consumer(_)) => return error(KafkaError::InconsistentGroupProtocol),
            Some(Group::Classic(classic)) => classic.sync(
                member_id,
                group_instance_id,
                generation_id,
                protocol_type,
                protocol_name,
                assignments,
                ctx.now,
            ),
        };
        self.finish(ctx, group_id);
        reply
    }

    pub fn heartbeat(
        &mut self,
        ctx: &mut Ctx<GroupShard>,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
    ) -> Result<(), KafkaError> {
        let outcome = match self.groups.get_mut(group_id) {
            None => return Err(KafkaError::UnknownMemberId),
            Some(Group::Consumer(_)) => return Err(KafkaError::InconsistentGroupProtocol),
            Some(Group::Classic(classic)) => {
                classic.heartbeat(member_id, group_instance_id, generation_id, ctx.now)
            }
        };
        self.finish(ctx, group_id);
        outcome
    }

    /// LeaveGroup: one outcome per member.
    pub fn leave(
        &mut self,
        ctx: &mut Ctx<GroupShard>,
        group_id: &str,
        leaving: &[Leaving],
    ) -> Vec<Result<(), KafkaError>> {
        let results = match self.groups.get_mut(group_id) {
            Some(Group::Classic(classic)) => classic.leave(leaving, ctx.now),
            Some(Group::Consumer(_)) | None => {
                return vec![Err(KafkaError::UnknownMemberId); leaving.len()];
            }
        };
        self.finish(ctx, group_id);
        results
    }

    // ---- KIP-848 consumer groups ----

    pub fn consumer_heartbeat(
        &mut self,
        ctx: &mut Ctx<GroupShard>,
        group_id: &str,
        request: Heartbeat,
    ) -> HeartbeatResult {
        if let Err(refused) = ConsumerGroup::check_request(&request) {
            return refused;
        }
        let joining = request.member_epoch == 0;
        match self.groups.get(group_id) {
            None | Some(Group::Classic(_)) if !joining => {
                // Only a join (epoch 0) creates or converts a group.
                return HeartbeatResult::error(
                    &request.member_id,
                    KafkaError::UnknownMemberId,
                    format!("group {group_id} has no member {}", request.member_id),
                );
            }
            Some(Group::Classic(classic)) if classic.state() != GroupState::Empty => {
                return HeartbeatResult::error(
                    &request.member_id,
                    KafkaError::GroupIdNotFound,
                    format!("group {group_id} is a classic group with members"),
                );
            }
            Some(Group::Classic(classic)) if classic.stored.is_some() => {
                // An empty classic group becomes a consumer group, keeping its offsets (one
                // that only stores offsets has no metadata record to remove).
                self.apply(
                    ctx,
                    GroupRecord::tombstone(RecordKey::Group {
                        group: group_id.to_owned(),
                    }),
                );
            }
            _ => {}
        }
        let mut names: BTreeSet<String> = match self.groups.get(group_id) {
            Some(Group::Consumer(consumer)) => consumer.subscribed_topics(),
            _ => BTreeSet::new(),
        };
        names.extend(request.subscribed_topic_names.iter().flatten().cloned());
        let topics = self.topics.view(&names);
        let config = Arc::clone(&self.config);
        let now = ctx.now;
        let consumer = self.consumer_entry(group_id, now);
        let result = consumer.heartbeat(request, &topics, &config, now);
        if consumer.members.is_empty() && consumer.group_epoch == 0 {
            // Refused before anything was written: no consumer group came to be.
            self.classic_entry(group_id, now);
        }
        self.finish(ctx, group_id);
        result
    }

    // ---- offsets ----

    /// OffsetCommit of the partitions `commits`: the group-wide error, or `Ok` for every
    /// partition (the runtime answers once they are stored).
    pub fn commit(
        &mut self,
        ctx: &mut Ctx<GroupShard>,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
        commits: &[OffsetCommit],
    ) -> Result<(), KafkaError> {
        let member = (member_id, group_instance_id, generation_id);
        self.commit_offsets(ctx, None, group_id, member, commits)
    }

    /// TxnOffsetCommit: offsets committed in `producer`'s transaction, stored pending until
    /// its marker. The group-wide error, or `Ok` for every partition (answered once stored).
    #[allow(clippy::too_many_arguments)]
    pub fn txn_commit(
        &mut self,
        ctx: &mut Ctx<GroupShard>,
        producer: TxnProducer,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
        commits: &[OffsetCommit],
    ) -> Result<(), KafkaError> {
        let member = (member_id, group_instance_id, generation_id);
        self.commit_offsets(ctx, Some(producer), group_id, member, commits)
    }

    /// Both commits: checked against the group alike; a transactional one goes to the
    /// producer's pending offsets (undone to what it held there), a plain one to the group.
    fn commit_offsets(
        &mut self,
        ctx: &mut Ctx<GroupShard>,
        producer: Option<TxnProducer>,
        group_id: &str,
        (member_id, group_instance_id, generation_id): (&str, Option<&str>, i32),
        commits: &[OffsetCommit],
    ) -> Result<(), KafkaError> {
        match self.groups.get(group_id) {
            Some(group) => group.check_commit(member_id, group_instance_id, generation_id)?,
            None if generation_id < 0 => {}
            None => return Err(KafkaError::IllegalGeneration),
        }
        if let Some(producer) = producer {
            ctx.transactional(producer);
        }
        for commit in commits {
            let record = GroupRecord::new(
                RecordKey::Offset {
                    group: group_id.to_owned(),
                    topic: commit.topic_partition.topic.clone(),
                    partition: commit.topic_partition.partition,
                },
                Some(RecordValue::Offset(OffsetValue {
                    offset: commit.offset.offset,
                    leader_epoch: commit.offset.leader_epoch,
                    metadata: commit.offset.metadata.clone(),
                    commit_timestamp_ms: ctx.now.wall_ms,
                })),
            );
            let Some(producer) = producer else {
                self.apply(ctx, record);
                continue;
            };
            let undo = GroupRecord::new(
                record.key.clone(),
                self.pending_txn
                    .get(&producer.producer_id)
                    .and_then(|groups| groups.get(group_id))
                    .and_then(|offsets| offsets.get(&commit.topic_partition))
                    .map(|o| RecordValue::Offset(offset_value(o))),
            );
            self.replay_transactional(producer.producer_id, &record, ctx.now);
            ctx.written(record, undo);
        }
        if producer.is_none() {
            if let Some(group) = self.groups.get_mut(group_id) {
                group.commit_seen(member_id, ctx.now);
            }
            self.finish(ctx, group_id);
        }
        Ok(())
    }

    /// Whether a transaction not yet ended holds an offset of `group_id` for `partition`
    /// (OffsetFetch with `require_stable` answers UNSTABLE_OFFSET_COMMIT, KIP-447).
    pub fn has_pending_offset(&self, group_id: &str, partition: &TopicPartition) -> bool {
        self.pending_txn.values().any(|groups| {
            groups
                .get(group_id)
                .is_some_and(|offsets| offsets.contains_key(partition))
        })
    }

    /// Every partition of `group_id` whose offset an unfinished transaction holds.
    pub fn pending_offsets(&self, group_id: &str) -> BTreeSet<TopicPartition> {
        self.pending_txn
            .values()
            .filter_map(|groups| groups.get(group_id))
            .flat_map(|offsets| offsets.keys().cloned())
            .collect()
    }

    /// The committed offsets of `group_id` for `wanted` (all when `None`).
    pub fn offsets(
        &self,
        group_id: &str,
        wanted: Option<&[TopicPartition]>,
    ) -> BTreeMap<TopicPartition, CommittedOffset> {
        let Some(group) = self.groups.get(group_id) else {
            return BTreeMap::new();
        };
        match wanted {
            None => group.offsets().clone(),
            Some(wanted) => wanted
                .iter()
                .filter_map(|key| group.offsets().get(key).map(|o| (key.clone(), o.clone())))
                .collect(),
        }
    }

    /// OffsetDelete: per partition deleted or GROUP_SUBSCRIBED_TO_TOPIC; the group's error.
    pub fn delete_offsets(
        &mut self,
        ctx: &mut Ctx<GroupShard>,
        group_id: &str,
        partitions: &[TopicPartition],
    ) -> Result<Vec<Result<(), KafkaError>>, KafkaError> {
        let Some(group) = self.groups.get(group_id) else {
            return Err(KafkaError::GroupIdNotFound);
        };
        let subscribed = group.subscribed_topics();
        let mut results = Vec::with_capacity(partitions.len());
        let mut deleted = Vec::new();
        for key in partitions {
            if subscribed.contains(&key.topic) {
                results.push(Err(KafkaError::GroupSubscribedToTopic));
            } else {
                results.push(Ok(()));
                if group.offsets().contains_key(key) {
                    deleted.push(key.clone());
                }
            }
        }
        for TopicPartition { topic, partition } in deleted {
            self.apply(
                ctx,
                GroupRecord::tombstone(RecordKey::Offset {
                    group: group_id.to_owned(),
                    topic,
                    partition,
                }),
            );
        }
        self.finish(ctx, group_id);
        Ok(results)
    }

    /// DeleteGroups of one group: deleted, or GROUP_ID_NOT_FOUND or NON_EMPTY_GROUP.
    pub fn delete_group(
        &mut self,
        ctx: &mut Ctx<GroupShard>,
        group_id: &str,
    ) -> Result<(), KafkaError> {
        let Some(group) = self.groups.get(group_id) else {
            return Err(KafkaError::GroupIdNotFound);
        };
        group.check_delete()?;
        let offsets: Vec<TopicPartition> = group.offsets().keys().cloned().collect();
        self.remove_group(ctx, group_id, offsets, true);
        self.finish(ctx, group_id);
        Ok(())
    }

    /// Tombstones for `offsets` and, with `group_gone`, for the group's own records.
    fn remove_group(
        &mut self,
        ctx: &mut Ctx<GroupShard>,
        group_id: &str,
        offsets: Vec<TopicPartition>,
        group_gone: bool,
    ) {
        let consumer = matches!(self.groups.get(group_id), Some(Group::Consumer(_)));
        let group = group_id.to_owned();
        let mut keys: Vec<RecordKey> = offsets
            .into_iter()
            .map(|TopicPartition { topic, partition }| RecordKey::Offset {
                group: group.clone(),
                topic,
                partition,
            })
            .collect();
        if group_gone {
            if consumer {
                keys.push(RecordKey::TargetAssignment {
                    group: group.clone(),
                });
                keys.push(RecordKey::ConsumerGroup {
                    group: group.clone(),
                });
            }
            keys.push(RecordKey::Group { group });
        }
        for key in keys {
            self.apply(ctx, GroupRecord::tombstone(key));
        }
    }

    /// `offsets.retention.minutes` (KIP-211): an empty group's offsets once it has been empty
    /// that long (a commits-only group's by each offset's commit time), and the group once
    /// nothing is left of it.
    fn expire_offsets(&mut self, ctx: &mut Ctx<GroupShard>) {
        let retention = Duration::from_millis(self.config.offsets_retention_ms);
        type Expiring = (String, Vec<TopicPartition>, bool);
        let expiring: Vec<Expiring> = self
            .groups
            .iter()
            .filter_map(|(id, group)| {
                let expired = group.expired_offsets(retention, ctx.now);
                let gone = group.gone_without(expired.len());
                (!expired.is_empty() || gone).then(|| (id.clone(), expired, gone))
            })
            .collect();
        for (group_id, expired, gone) in expiring {
            tracing::info!(group = %group_id, offsets = expired.len(), group_deleted = gone, "expired committed offsets");
            self.remove_group(ctx, &group_id, expired, gone);
            self.finish(ctx, &group_id);
        }
    }

    // ---- reads ----

    /// DescribeGroups: Dead with no members for a group this shard does not have (Kafka's).
    pub fn describe(&self, group_id: &str) -> Result<GroupDescription, KafkaError> {
        Ok(match self.groups.get(group_id) {
            Some(Group::Classic(classic)) => classic.describe(),
            // Kafka's answer for a KIP-848 group (ConsumerGroupDescribe describes it).
            Some(Group::Consumer(_)) => return Err(KafkaError::GroupIdNotFound),
            None => GroupDescription {
                state: GroupState::Dead,
                protocol_type: String::new(),
                protocol: String::new(),
                members: Vec::new(),
            },
        })
    }

    pub fn list(&self) -> Vec<ListedGroup> {
        self.groups
            .iter()
            .map(|(group_id, group)| ListedGroup {
                group_id: group_id.clone(),
                protocol_type: group.protocol_type().to_owned(),
                state: group.state_name(),
                group_type: group.group_type(),
            })
            .collect()
    }
}

fn offset_value(offset: &CommittedOffset) -> OffsetValue {
    OffsetValue {
        offset: offset.offset,
        leader_epoch: offset.leader_epoch,
        metadata: offset.metadata.clone(),
        commit_timestamp_ms: offset.commit_timestamp_ms,
    }
}

fn offsets_of(group: Group) -> BTreeMap<TopicPartition, CommittedOffset> {
    match group {
        Group::Classic(g) => g.offsets,
        Group::Consumer(g) => g.offsets,
    }
}

impl Shard for GroupShard {
    type Record = GroupRecord;

    fn replay(&mut self, record: &GroupRecord, now: Now) {
        let group_id = record.group();
        match (&record.key, &record.value) {
            (
                RecordKey::Offset {
                    topic, partition, ..
                },
                Some(RecordValue::Offset(v)),
            ) => {
                if !self.groups.contains_key(group_id) {
                    let group = self.new_classic(group_id, now);
                    self.groups
                        .insert(group_id.to_owned(), Group::Classic(group));
                }
                let partition = TopicPartition::new(topic.as_str(), *partition);
                self.committed.set(group_id, &partition, v.offset);
                if let Some(group) = self.groups.get_mut(group_id) {
                    group.offsets_mut().insert(
                        partition,
                        CommittedOffset {
                            offset: v.offset,
                            leader_epoch: v.leader_epoch,
                            metadata: v.metadata.clone(),
                            commit_timestamp_ms: v.commit_timestamp_ms,
                        },
                    );
                }
            }
            (
                RecordKey::Offset {
                    topic, partition, ..
                },
                None,
            ) => {
                let partition = TopicPartition::new(topic.as_str(), *partition);
                self.committed.remove(group_id, &partition);
                if let Some(group) = self.groups.get_mut(group_id) {
                    group.offsets_mut().remove(&partition);
                }
            }
            (RecordKey::Group { .. }, Some(RecordValue::Group(value))) => {
                self.classic_entry(group_id, now).stored = Some(value.clone());
            }
            (RecordKey::Group { .. }, None) => {
                if let Some(Group::Classic(classic)) = self.groups.get_mut(group_id) {
                    classic.stored = None;
                }
            }
            (RecordKey::ConsumerGroup { .. }, None) => {
                if matches!(self.groups.get(group_id), Some(Group::Consumer(_))) {
                    self.classic_entry(group_id, now);
                }
            }
            (
                RecordKey::ConsumerGroup { .. }
                | RecordKey::ConsumerMember { .. }
                | RecordKey::TargetAssignment { .. }
                | RecordKey::TargetMember { .. }
                | RecordKey::CurrentAssignment { .. },
                _,
            ) => {
                if record.value.is_none()
                    && !matches!(self.groups.get(group_id), Some(Group::Consumer(_)))
                {
                    // A tombstone for a consumer group that is not there.
                } else {
                    self.consumer_entry(group_id, now).replay(record, now);
                }
            }
            (key, _) => {
                tracing::warn!(?key, "a record whose value does not match its key");
            }
        }
        if record.value.is_none() {
            self.collect(group_id);
        }
    }

    fn replay_owned(&mut self, record: GroupRecord, now: Now) {
        // A load is mostly offset commits: their strings move into the group's map.
        match record {
            GroupRecord {
                key:
                    RecordKey::Offset {
                        group,
                        topic,
                        partition,
                    },
                value: Some(RecordValue::Offset(v)),
            } => {
                let partition = TopicPartition::new(topic, partition);
                self.committed.set(&group, &partition, v.offset);
                let offsets = match self.groups.get_mut(&group) {
                    Some(existing) => existing.offsets_mut(),
                    None => {
                        let created = Group::Classic(self.new_classic(&group, now));
                        self.groups.entry(group).or_insert(created).offsets_mut()
                    }
                };
                offsets.insert(
                    partition,
                    CommittedOffset {
                        offset: v.offset,
                        leader_epoch: v.leader_epoch,
                        metadata: v.metadata,
                        commit_timestamp_ms: v.commit_timestamp_ms,
                    },
                );
            }
            other => self.replay(&other, now),
        }
    }

    fn replay_transactional(&mut self, producer_id: i64, record: &GroupRecord, now: Now) {
        let RecordKey::Offset {
            group,
            topic,
            partition,
        } = &record.key
        else {
            // Only offsets are committed in transactions.
            self.replay(record, now);
            return;
        };
        let partition = TopicPartition::new(topic.as_str(), *partition);
        match &record.value {
            Some(RecordValue::Offset(v)) => {
                self.pending_txn
                    .entry(producer_id)
                    .or_default()
                    .entry(group.clone())
                    .or_default()
                    .insert(
                        partition,
                        CommittedOffset {
                            offset: v.offset,
                            leader_epoch: v.leader_epoch,
                            metadata: v.metadata.clone(),
                            commit_timestamp_ms: v.commit_timestamp_ms,
                        },
                    );
            }
            // An undo: the transaction did not hold that offset before.
            _ => {
                if let Some(groups) = self.pending_txn.get_mut(&producer_id) {
                    if let Some(offsets) = groups.get_mut(group) {
                        offsets.remove(&partition);
                        if offsets.is_empty() {
                            groups.remove(group);
                        }
                    }
                    if groups.is_empty() {
                        self.pending_txn.remove(&producer_id);
                    }
                }
            }
        }
    }

    fn replay_end_txn(&mut self, producer_id: i64, commit: bool, now: Now) -> Vec<String> {
        let Some(groups) = self.pending_txn.remove(&producer_id) else {
            return Vec::new();
        };
        let touched: Vec<String> = groups.keys().cloned().collect();
        if commit {
            for (group_id, offsets) in groups {
                if !self.groups.contains_key(&group_id) {
                    let group = self.new_classic(&group_id, now);
                    self.groups.insert(group_id.clone(), Group::Classic(group));
                }
                for (partition, committed) in &offsets {
                    self.committed.set(&group_id, partition, committed.offset);
                }
                if let Some(group) = self.groups.get_mut(&group_id) {
                    group.offsets_mut().extend(offsets);
                }
            }
        }
        touched
    }

    fn key_of(record: &GroupRecord) -> &str {
        record.group()
    }

    fn encode(record: &GroupRecord) -> (Vec<u8>, Option<Vec<u8>>) {
        record.encode()
    }

    fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Option<GroupRecord>, String> {
        GroupRecord::decode(key, value).map_err(|e| e.to_string())
    }

    fn loaded(&mut self, ctx: &mut Ctx<Self>) {
        for group in self.groups.values_mut() {
            match group {
                Group::Classic(classic) => classic.restore_stored(ctx.now),
                Group::Consumer(consumer) => consumer.finish_load(),
            }
        }
        let ids: Vec<String> = self.groups.keys().cloned().collect();
        for group_id in ids {
            self.finish(ctx, &group_id);
        }
        ctx.schedule(
            RETENTION_TIMER,
            Some(
                ctx.now.instant
                    + Duration::from_millis(self.config.offsets_retention_check_interval_ms),
            ),
        );
    }

    fn timer(&mut self, key: &str, ctx: &mut Ctx<Self>) {
        if key == RETENTION_TIMER {
            self.expire_offsets(ctx);
            ctx.schedule(
                RETENTION_TIMER,
                Some(
                    ctx.now.instant
                        + Duration::from_millis(self.config.offsets_retention_check_interval_ms),
                ),
            );
            return;
        }
        let Some(group_id) = key.strip_prefix("group:") else {
            return;
        };
        let topics = Arc::clone(&self.topics);
        if let Some(group) = self.groups.get_mut(group_id) {
            if group.next_deadline().is_some_and(|d| d <= ctx.now.instant) {
                group.tick(|g| topics.view(&g.subscribed_topics()), ctx.now);
            }
            self.finish(ctx, group_id);
        }
    }

    fn unload(&mut self) {
        for group in self.groups.values_mut() {
            group.unload();
        }
    }

    fn check(&self, key: &str) -> Result<(), String> {
        self.groups.get(key).map_or(Ok(()), Group::check)
    }

    fn rolled_back(&mut self, key: &str, ctx: &mut Ctx<Self>) {
        let deadline = self.groups.get(key).and_then(Group::next_deadline);
        ctx.schedule(group_timer(key), deadline);
    }
}
