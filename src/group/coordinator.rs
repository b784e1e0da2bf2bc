//! The group coordinator's entry points: which `__consumer_offsets` partitions this broker
//! coordinates (one coordinator runtime shard each, loaded when this broker becomes their
//! leader, dropped when it stops), the creation of the topic, and metrics. What a request does
//! to its group is an operation of `GroupShard`; this file finds the shard, runs the operation
//! and turns the runtime's answer into the client's.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::classic::{GroupDescription, JoinRequest, JoinResult, Leaving, Reply, SyncResult};
use super::consumer::{ConsumerGroup, Heartbeat, HeartbeatResult, HeartbeatsAnswered, TopicsView};
use super::lag::CommittedIndexes;
use super::shard::{GroupShard, TopicsSource, map_append_error};
pub use super::shard::{ListedGroup, OffsetCommit};
use super::state::Group;
use super::{CommittedOffset, GroupConfig, OFFSETS_TOPIC};
use crate::controller::client::{ControllerClient, ImageWatch};
use crate::coordinator::host::{Host, InternalTopic};
use crate::coordinator::{Runtime, RuntimeConfig, ShardHandle, SystemClock, TxnProducer};
use crate::metrics::{Exposition, Kind};
use crate::protocol::TopicPartition;
use crate::protocol::batch::TxnMarker;
use crate::protocol::errors::{self, ApiError, KafkaError};
use crate::replica::ReplicaManager;

/// An OffsetCommit's answer: one outcome per partition, in request order.
pub type CommitOutcome = Vec<Result<(), KafkaError>>;

/// The topics of the metadata image.
struct ImageTopics {
    images: ImageWatch,
}

impl TopicsSource for ImageTopics {
    fn view(&self, names: &BTreeSet<String>) -> TopicsView {
        let image = self.images.image();
        names
            .iter()
            .filter_map(|name| {
                image
                    .topic_by_name(name)
                    .map(|t| (name.clone(), (t.id.0, t.partitions.len() as i32)))
            })
            .collect()
    }
}

type Handle = Arc<ShardHandle<GroupShard>>;

pub struct GroupCoordinator {
    config: Arc<GroupConfig>,
    replicas: Arc<ReplicaManager>,
    host: Arc<Host<GroupShard>>,
    /// Every loaded shard's committed offsets, for lag on `/metrics`.
    committed: Arc<CommittedIndexes>,
    /// Offset commits stored (partitions), and refused or failed commit requests.
    commits: AtomicU64,
    commits_failed: AtomicU64,
}

impl GroupCoordinator {
    pub fn new(
        config: GroupConfig,
        replicas: Arc<ReplicaManager>,
        images: ImageWatch,
        controller: ControllerClient,
    ) -> Arc<GroupCoordinator> {
        let runtime = Runtime::new(
            RuntimeConfig {
                name: "group coordinator",
                commit_timeout: Duration::from_millis(config.offsets_commit_timeout_ms),
                timer_retry: Duration::from_secs(1),
                run_timers: true,
            },
            Arc::new(SystemClock),
        );
        let config = Arc::new(config);
        let topics: Arc<dyn TopicsSource> = Arc::new(ImageTopics {
            images: images.clone(),
        });
        let topic = InternalTopic {
            name: OFFSETS_TOPIC,
            partitions: config.offsets_topic_num_partitions,
            replication_factor: config.offsets_topic_replication_factor,
            configs: BTreeMap::from([
                ("cleanup.policy".to_owned(), "compact".to_owned()),
                ("compression.type".to_owned(), "producer".to_owned()),
                (
                    "segment.bytes".to_owned(),
                    config.offsets_topic_segment_bytes.to_string(),
                ),
            ]),
            replication_factor_key: "offsets.topic.replication.factor",
        };
        let committed = Arc::new(CommittedIndexes::default());
        let empty = {
            let (config, topics) = (Arc::clone(&config), Arc::clone(&topics));
            let committed = Arc::clone(&committed);
            Arc::new(move || {
                GroupShard::new(
                    Arc::clone(&config),
                    Arc::clone(&topics),
                    committed.new_shard(),
                )
            })
        };
        let host = Arc::new(Host::new(
            runtime,
            topic,
            Arc::clone(&replicas),
            images,
            controller,
            empty,
            |shard: &GroupShard| shard.groups().count(),
            "groups",
        ));
        Arc::new(GroupCoordinator {
            config,
            replicas,
            host,
            committed,
            commits: AtomicU64::new(0),
            commits_failed: AtomicU64::new(0),
        })
    }

    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    /// Follows leadership of `__consumer_offsets` partitions until the runtime stops.
    pub fn start(self: &Arc<Self>) -> Vec<tokio::task::JoinHandle<()>> {
        vec![self.host.start()]
    }

    // ---- finding a group ----

    /// The shard coordinating `group_id`, or NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS /
    /// COORDINATOR_NOT_AVAILABLE.
    fn shard_of(&self, group_id: &str) -> Result<Handle, KafkaError> {
        if group_id.len() > i16::MAX as usize {
            // Not storable in Kafka's record formats.
            return Err(KafkaError::InvalidGroupId);
        }
        self.host.shard_of(group_id)
    }

    /// Creates `__consumer_offsets` when it does not exist (the first FindCoordinator for a
    /// group does, as in Kafka); its partition count, or COORDINATOR_NOT_AVAILABLE and why.
    pub async fn ensure_offsets_topic(&self) -> Result<i32, ApiError> {
        self.host.ensure_topic().await
    }

    // ---- the classic protocol ----

    pub async fn join(self: &Arc<Self>, group_id: &str, request: JoinRequest) -> JoinResult {
        let member_id = request.member_id.clone();
        let shard = match self.shard_of(group_id) {
            Ok(shard) => shard,
            Err(error) => return JoinResult::error(&member_id, error),
        };
        let session = request.session_timeout_ms.max(0) as u64;
        if session < self.config.min_session_timeout_ms
            || session > self.config.max_session_timeout_ms
        {
            return JoinResult::error(&member_id, KafkaError::InvalidSessionTimeout);
        }
        let reply = shard.write(|s, ctx| s.join(ctx, group_id, request)).await;
        match reply {
            Err(error) => JoinResult::error(&member_id, map_append_error(error)),
            Ok(Reply::Now(result)) => result,
            Ok(Reply::Later(receiver)) => receiver
                .await
                .unwrap_or_else(|_| JoinResult::error(&member_id, KafkaError::NotCoordinator)),
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
        let shard = match self.shard_of(group_id) {
            Ok(shard) => shard,
            Err(error) => return SyncResult::error(error),
        };
        // The leader's assignment is answered once stored, through its continuation: the
        // request itself waits only for what the operation appended.
        let reply = shard.write_detached(|s, ctx| {
            s.sync(
                ctx,
                group_id,
                member_id,
                group_instance_id,
                generation_id,
                protocol_type,
                protocol_name,
                assignments,
            )
        });
        match reply {
            Err(e) => SyncResult::error(map_append_error(e)),
            Ok(Reply::Now(result)) => result,
            Ok(Reply::Later(receiver)) => receiver
                .await
                .unwrap_or_else(|_| SyncResult::error(KafkaError::NotCoordinator)),
        }
    }

    pub fn heartbeat(
        self: &Arc<Self>,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
    ) -> Result<(), KafkaError> {
        let shard = self.shard_of(group_id)?;
        let outcome = shard
            .write_detached(|s, ctx| {
                s.heartbeat(ctx, group_id, member_id, group_instance_id, generation_id)
            })
            .unwrap_or_else(|e| Err(map_append_error(e)));
        tracing::trace!(
            group = group_id,
            member = member_id,
            generation_id,
            code = errors::code_of(&outcome),
            "heartbeat"
        );
        outcome
    }

    /// LeaveGroup: the group's error, or one outcome per member.
    pub fn leave(
        self: &Arc<Self>,
        group_id: &str,
        leaving: &[Leaving],
    ) -> Result<Vec<Result<(), KafkaError>>, KafkaError> {
        let shard = self.shard_of(group_id)?;
        shard
            .write_detached(|s, ctx| s.leave(ctx, group_id, leaving))
            .map_err(map_append_error)
    }

    // ---- KIP-848 consumer groups ----

    /// ConsumerGroupHeartbeat.
    pub async fn consumer_heartbeat(
        self: &Arc<Self>,
        group_id: &str,
        request: Heartbeat,
    ) -> HeartbeatResult {
        let member_id = request.member_id.clone();
        if !self.config.consumer_protocol_enabled {
            return HeartbeatResult::error(
                &member_id,
                KafkaError::UnsupportedVersion,
                "the consumer group protocol is disabled (group.coordinator.rebalance.protocols)",
            );
        }
        let shard = match self.shard_of(group_id) {
            Ok(shard) => shard,
            Err(error) => {
                return HeartbeatResult::error(
                    &member_id,
                    error,
                    format!("group {group_id}: {error}"),
                );
            }
        };
        match shard
            .write(|s, ctx| s.consumer_heartbeat(ctx, group_id, request))
            .await
        {
            Ok(result) => result,
            Err(stored) => {
                let error = map_append_error(stored);
                HeartbeatResult::error(
                    &member_id,
                    error,
                    format!("the group's change was not stored: {error}"),
                )
            }
        }
    }

    /// ConsumerGroupDescribe of one group: GROUP_ID_NOT_FOUND for none or a classic group.
    pub fn describe_consumer_group<T>(
        &self,
        group_id: &str,
        describe: impl FnOnce(&ConsumerGroup) -> T,
    ) -> Result<T, KafkaError> {
        let shard = self.shard_of(group_id)?;
        shard.read(|s| match s.group(group_id) {
            Some(Group::Consumer(consumer)) => Ok(describe(consumer)),
            _ => Err(KafkaError::GroupIdNotFound),
        })?
    }

    // ---- offsets ----

    /// OffsetCommit: the group-wide error, or one outcome per partition. With a producer,
    /// TxnOffsetCommit: the offsets are part of its transaction, visible once its commit
    /// marker is written.
    pub async fn commit(
        self: &Arc<Self>,
        producer: Option<TxnProducer>,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
        commits: Vec<OffsetCommit>,
    ) -> Result<CommitOutcome, KafkaError> {
        let shard = self.shard_of(group_id)?;
        let (mut results, accepted, stored) = self.screen_metadata(commits);
        if accepted.is_empty() {
            return Ok(results);
        }
        let outcome = shard
            .write(|s, ctx| match producer {
                None => s.commit(
                    ctx,
                    group_id,
                    member_id,
                    group_instance_id,
                    generation_id,
                    &stored,
                ),
                Some(producer) => s.txn_commit(
                    ctx,
                    producer,
                    group_id,
                    member_id,
                    group_instance_id,
                    generation_id,
                    &stored,
                ),
            })
            .await;
        let stored = match outcome {
            Ok(Err(group_error)) => {
                self.commits_failed.fetch_add(1, Ordering::Relaxed);
                return Err(group_error);
            }
            Ok(Ok(())) => Ok(()),
            Err(e) => Err(map_append_error(e)),
        };
        if stored.is_ok() {
            self.commits
                .fetch_add(accepted.len() as u64, Ordering::Relaxed);
        } else {
            self.commits_failed.fetch_add(1, Ordering::Relaxed);
        }
        for i in accepted {
            results[i] = stored;
        }
        Ok(results)
    }

    /// OffsetFetch: the committed offsets of `group_id` for `wanted` (every partition with
    /// one when `None`); a partition without one is absent. Waits for the group's writes so
    /// far to be committed: a commit is visible only once stored.
    /// With `require_stable` (KIP-447), also the partitions whose offset an unfinished
    /// transaction holds: those answer UNSTABLE_OFFSET_COMMIT.
    pub async fn fetch_offsets(
        &self,
        group_id: &str,
        wanted: Option<&[TopicPartition]>,
        require_stable: bool,
    ) -> Result<
        (
            BTreeMap<TopicPartition, CommittedOffset>,
            BTreeSet<TopicPartition>,
        ),
        KafkaError,
    > {
        let shard = self.shard_of(group_id)?;
        shard
            .read_committed(group_id, |s| {
                let offsets = s.offsets(group_id, wanted);
                let unstable = match (require_stable, wanted) {
                    (false, _) => BTreeSet::new(),
                    (true, Some(wanted)) => wanted
                        .iter()
                        .filter(|p| s.has_pending_offset(group_id, p))
                        .cloned()
                        .collect(),
                    (true, None) => s.pending_offsets(group_id),
                };
                (offsets, unstable)
            })
            .await
    }

    /// Commits whose metadata is too large answer OFFSET_METADATA_TOO_LARGE alone: the
    /// answers so far, the indexes of the others, and the others.
    fn screen_metadata(
        &self,
        commits: Vec<OffsetCommit>,
    ) -> (Vec<Result<(), KafkaError>>, Vec<usize>, Vec<OffsetCommit>) {
        let mut results = vec![Ok(()); commits.len()];
        let mut accepted = Vec::with_capacity(commits.len());
        let mut stored = Vec::with_capacity(commits.len());
        for (i, commit) in commits.into_iter().enumerate() {
            if commit.offset.metadata.len() > self.config.offset_metadata_max_bytes {
                results[i] = Err(KafkaError::OffsetMetadataTooLarge);
            } else {
                accepted.push(i);
                stored.push(commit);
            }
        }
        (results, accepted, stored)
    }

    /// WriteTxnMarkers for partition `index` of `__consumer_offsets`: the marker is written
    /// through the shard, which applies (commit) or drops (abort) the producer's
    /// transactional offsets; answered once committed.
    pub async fn write_txn_marker(
        &self,
        index: i32,
        producer: TxnProducer,
        marker: TxnMarker,
    ) -> Result<(), KafkaError> {
        let Some(shard) = self.host.runtime.shard(index) else {
            return Err(KafkaError::NotLeaderOrFollower);
        };
        shard
            .write_marker(producer, marker)
            .await
            .map_err(|e| match e {
                // The partition's answers, as for any marker.
                KafkaError::NotCoordinator => KafkaError::NotLeaderOrFollower,
                other => other,
            })
    }

    /// OffsetDelete: per partition deleted or GROUP_SUBSCRIBED_TO_TOPIC; the group's error.
    pub async fn delete_offsets(
        self: &Arc<Self>,
        group_id: &str,
        partitions: &[TopicPartition],
    ) -> Result<Vec<Result<(), KafkaError>>, KafkaError> {
        let shard = self.shard_of(group_id)?;
        shard
            .write(|s, ctx| s.delete_offsets(ctx, group_id, partitions))
            .await
            .map_err(map_append_error)?
    }

    // ---- admin ----

    /// DescribeGroups for one group: Dead with no members when this coordinator has none of
    /// that name (Kafka's answer).
    pub fn describe(&self, group_id: &str) -> Result<GroupDescription, KafkaError> {
        let shard = self.shard_of(group_id)?;
        shard.read(|s| s.describe(group_id))?
    }

    /// Every group this broker coordinates, with COORDINATOR_LOAD_IN_PROGRESS while a
    /// partition is loading.
    pub fn list(&self) -> (Vec<ListedGroup>, Result<(), KafkaError>) {
        let mut groups = Vec::new();
        let mut outcome = Ok(());
        for shard in self.host.runtime.shards() {
            match shard.read(GroupShard::list) {
                Ok(listed) => groups.extend(listed),
                Err(error @ KafkaError::CoordinatorLoadInProgress) => outcome = Err(error),
                Err(_) => {}
            }
        }
        (groups, outcome)
    }

    /// DeleteGroups for one group: deleted, or GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP or a
    /// coordinator error.
    pub async fn delete_group(self: &Arc<Self>, group_id: &str) -> Result<(), KafkaError> {
        let shard = self.shard_of(group_id)?;
        shard
            .write(|s, ctx| s.delete_group(ctx, group_id))
            .await
            .map_err(map_append_error)?
    }

    // ---- metrics ----

    /// Prometheus text: coordinator partitions, groups by type and state, members and
    /// commits; per group, its members and, per topic, the consumer lag summed and at its
    /// largest. Lag is computed for the partitions this broker holds a replica of (all of
    /// them when every broker holds every partition); `sluice groups describe` asks the
    /// leaders for the rest.
    pub fn collect_metrics(&self, out: &mut Exposition) {
        let shards = self.host.runtime.shards();
        let loading = shards.iter().filter(|s| !s.is_loaded()).count();
        let mut by_state: BTreeMap<(&'static str, &'static str), u64> = BTreeMap::new();
        let mut members_by_group: Vec<(String, usize)> = Vec::new();
        let mut heartbeats: Vec<(String, HeartbeatsAnswered)> = Vec::new();
        let mut lag: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
        for shard in shards.iter().filter(|s| s.is_loaded()) {
            let _ = shard.read(|shard| {
                for group in shard.groups() {
                    *by_state
                        .entry((group.group_type(), group.state_name()))
                        .or_default() += 1;
                    let members = match group {
                        Group::Classic(g) => g.member_count(),
                        Group::Consumer(g) => g.members.len(),
                    };
                    members_by_group.push((group.group_id().to_owned(), members));
                    if let Group::Consumer(g) = group {
                        heartbeats.push((g.group_id.clone(), g.heartbeats_answered));
                    }
                }
            });
        }
        // Lag from the committed offsets' index, without any shard's lock; each partition's
        // high watermark looked up once per scrape.
        let mut high_watermarks: HashMap<TopicPartition, Option<u64>> = HashMap::new();
        self.committed.for_each(&mut |group_id, tp, committed| {
            let high_watermark = match high_watermarks.get(tp) {
                Some(known) => *known,
                None => {
                    let found = self.replicas.partition(tp).map(|r| r.high_watermark());
                    high_watermarks.insert(tp.clone(), found);
                    found
                }
            };
            let Some(high_watermark) = high_watermark else {
                return;
            };
            let behind = high_watermark.saturating_sub(committed.max(0) as u64);
            let slot = lag
                .entry((group_id.to_owned(), tp.topic.clone()))
                .or_default();
            slot.0 += behind;
            slot.1 = slot.1.max(behind);
        });
        out.family(
            "sluice_group_coordinator_partitions",
            Kind::Gauge,
            "__consumer_offsets partitions this broker coordinates, by load state.",
        )
        .sample(&[("state", "loaded")], shards.len() - loading)
        .sample(&[("state", "loading")], loading);
        let mut family = out.family(
            "sluice_groups",
            Kind::Gauge,
            "Groups coordinated here, by type and state.",
        );
        for ((kind, state), count) in &by_state {
            family.sample(&[("type", kind), ("state", state)], *count);
        }
        let mut family = out.family(
            "sluice_group_members",
            Kind::Gauge,
            "Members of each group coordinated here.",
        );
        for (group, members) in &members_by_group {
            family.sample(&[("group", group)], *members);
        }
        let mut family = out.family(
            "sluice_consumer_group_heartbeats_total",
            Kind::Counter,
            "KIP-848 heartbeats answered per group since it was loaded here, by the interval \
             given: reconciling (the member's assignment was changing: a short interval) or \
             stable (group.consumer.heartbeat.interval.ms).",
        );
        for (group, answered) in &heartbeats {
            family
                .sample(
                    &[("group", group), ("interval", "reconciling")],
                    answered.reconciling,
                )
                .sample(&[("group", group), ("interval", "stable")], answered.stable);
        }
        let mut family = out.family(
            "sluice_consumer_group_lag_sum",
            Kind::Gauge,
            "Records between each group's committed offsets and the high watermark, per topic.",
        );
        for ((group, topic), (sum, _)) in &lag {
            family.sample(&[("group", group), ("topic", topic)], *sum);
        }
        let mut family = out.family(
            "sluice_consumer_group_lag_max",
            Kind::Gauge,
            "The largest lag of one partition, per group and topic.",
        );
        for ((group, topic), (_, max)) in &lag {
            family.sample(&[("group", group), ("topic", topic)], *max);
        }
        out.single(
            "sluice_offset_commits_total",
            Kind::Counter,
            "Partition offsets committed through this coordinator.",
            self.commits.load(Ordering::Relaxed),
        );
        out.single(
            "sluice_offset_commit_failures_total",
            Kind::Counter,
            "OffsetCommit requests refused or not stored (fencing, timeouts, moved coordinator).",
            self.commits_failed.load(Ordering::Relaxed),
        );
    }
}
