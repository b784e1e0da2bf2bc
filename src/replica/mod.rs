//! The replica manager: the partition replicas this broker holds, kept in step with the
//! committed metadata image (create logs, take or give up leadership, delete the logs of
//! deleted topics) once that image holds this process's registration, and the append and read
//! paths over them. Followers fetch from their leaders (`fetcher`); leaders keep the ISR
//! (`isr`); requests waiting for partitions to move sit in the purgatory (`purgatory`).
//!
//! Handlers never touch a log: they ask a `Partition` in Kafka's terms (high watermark, reads
//! bounded for consumers or followers, offsets by timestamp or epoch).

pub mod clock;
pub mod compression;
pub mod fetcher;
pub mod isr;
pub mod offline;
pub mod partition;
pub mod purgatory;
pub mod read_replica;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use sluice_raft::image::MetadataImage;
use sluice_raft::records::{BrokerId, ConfigResource, Uuid};
use tokio::sync::{broadcast, watch};

use crate::log::{LogConfig, LogManager};
use crate::metrics::{Exposition, Kind};
use crate::protocol::TopicPartition;
use crate::protocol::errors::KafkaError;
pub use partition::{
    AckState, AppendError, Appended, FollowerFetch, Partition, PartitionState, PendingAck,
    ReadBound,
};
pub use purgatory::Delayed;

/// Leadership changes queued for a subscriber that has not read them yet; one that falls
/// further behind is told it lagged and rescans the partitions.
const LEADERSHIP_EVENTS_QUEUED: usize = 4096;

/// This broker's role for a partition changed (a committed image said so).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeadershipChange {
    pub topic_partition: TopicPartition,
    pub leader_epoch: i32,
    pub role: Role,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// This broker became the leader at the event's epoch: a coordinator loads its state.
    Leader,
    /// Another broker (or none, -1) leads: a coordinator that led here unloads.
    Follower { leader: BrokerId },
    /// The replica left this broker (topic deleted, replica moved away).
    Removed,
}

/// Kafka's `partition.metadata` file: which topic id a partition directory belongs to, so a
/// topic deleted and re-created under the same name while a broker was down is not mistaken
/// for the old one.
const PARTITION_METADATA_FILE: &str = "partition.metadata";

pub struct ReplicaManager {
    broker_id: BrokerId,
    logs: Arc<LogManager>,
    partitions: RwLock<HashMap<TopicPartition, Arc<Partition>>>,
    /// Hosted partitions whose log could not be opened: offline here, answered with
    /// KAFKA_STORAGE_ERROR, said once.
    offline: RwLock<HashSet<TopicPartition>>,
    /// Leaders this broker's replica fetcher lost the connection to (closed or refused), and
    /// when: most likely dead, about to be fenced (see `leaders_lost`).
    lost_leaders: Mutex<HashMap<BrokerId, Instant>>,
    /// Broker properties from `server.properties` (log defaults and `min.insync.replicas`).
    static_properties: BTreeMap<String, String>,
    /// Became leader / resigned, per partition: fetchers and coordinators follow them.
    leadership: broadcast::Sender<LeadershipChange>,
    /// The index of the last metadata image applied to the replicas.
    applied_index: watch::Sender<u64>,
    /// ISR changes this broker got committed as a leader.
    pub isr_shrinks: AtomicU64,
    pub isr_expands: AtomicU64,
    /// The broker epoch this process registered with (-1 before registering).
    registered_epoch: Arc<AtomicI64>,
    /// Whether an image holding this process's registration was applied. Until then no image
    /// is: the local image may be older than the quorum's committed state (the metadata log
    /// replayed from disk after a restart), and serving from it could lead a partition at an
    /// epoch the controller has since given to another broker.
    caught_up: AtomicBool,
}

impl ReplicaManager {
    pub fn new(
        broker_id: BrokerId,
        logs: Arc<LogManager>,
        static_properties: BTreeMap<String, String>,
        registered_epoch: Arc<AtomicI64>,
    ) -> ReplicaManager {
        ReplicaManager {
            registered_epoch,
            caught_up: AtomicBool::new(false),
            broker_id,
            logs,
            partitions: RwLock::new(HashMap::new()),
            offline: RwLock::new(HashSet::new()),
            lost_leaders: Mutex::new(HashMap::new()),
            static_properties,
            leadership: broadcast::channel(LEADERSHIP_EVENTS_QUEUED).0,
            applied_index: watch::channel(0).0,
            isr_shrinks: AtomicU64::new(0),
            isr_expands: AtomicU64::new(0),
        }
    }

    pub fn broker_id(&self) -> BrokerId {
        self.broker_id
    }

    pub fn partition(&self, topic_partition: &TopicPartition) -> Option<Arc<Partition>> {
        self.partitions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(topic_partition)
            .cloned()
    }

    /// The replica fetcher's connection to `leader` ended or was refused.
    pub fn leader_lost(&self, leader: BrokerId) {
        self.lost_leaders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(leader, Instant::now());
    }

    /// The replica fetcher got an answer from `leader`.
    pub fn leader_reached(&self, leader: BrokerId) {
        let mut lost = self.lost_leaders.lock().unwrap_or_else(|p| p.into_inner());
        if !lost.is_empty() {
            lost.remove(&leader);
        }
    }

    /// Leaders whose connection the replica fetcher lost within `recent` and has not got
    /// back.
    pub fn leaders_lost(&self, recent: Duration) -> Vec<BrokerId> {
        let mut lost = self.lost_leaders.lock().unwrap_or_else(|p| p.into_inner());
        lost.retain(|_, at| at.elapsed() < recent);
        lost.keys().copied().collect()
    }

    /// Whether `tp` is hosted here but its log could not be opened.
    pub fn is_offline(&self, tp: &TopicPartition) -> bool {
        self.offline
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(tp)
    }

    /// Hosted partitions whose log is offline here: not opened at start, or taken offline by
    /// a storage error since.
    pub fn offline_partitions(&self) -> Vec<TopicPartition> {
        let mut offline: Vec<TopicPartition> = self
            .offline
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect();
        offline.extend(
            self.partitions
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .filter(|p| p.is_offline())
                .map(|p| p.topic_partition.clone()),
        );
        offline
    }

    /// The broker epoch this process registered with (-1 before registering).
    pub fn registered_epoch(&self) -> i64 {
        self.registered_epoch.load(Ordering::Relaxed)
    }

    pub fn partitions(&self) -> Vec<Arc<Partition>> {
        self.partitions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// This broker's log dirs with the logs of the partitions `wanted` selects: what
    /// DescribeLogDirs answers.
    pub fn describe_log_dirs(
        &self,
        wanted: impl Fn(&TopicPartition) -> bool,
    ) -> Vec<crate::log::manager::LogDirDescription> {
        self.logs.describe_dirs(wanted)
    }

    /// Every change of this broker's role for a partition from now on. A subscriber that
    /// lags gets `RecvError::Lagged` and should rescan `partitions()`.
    pub fn leadership_changes(&self) -> broadcast::Receiver<LeadershipChange> {
        self.leadership.subscribe()
    }

    fn announce(&self, topic_partition: &TopicPartition, state: &PartitionState) {
        let role = if state.leader == self.broker_id {
            Role::Leader
        } else {
            Role::Follower {
                leader: state.leader,
            }
        };
        // No subscriber is not an error.
        let _ = self.leadership.send(LeadershipChange {
            topic_partition: topic_partition.clone(),
            leader_epoch: state.leader_epoch,
            role,
        });
    }

    /// Broker properties as they stand: static ones overlaid with the dynamic cluster-wide
    /// and per-broker configs committed in the image.
    pub fn effective_broker_properties(&self, image: &MetadataImage) -> BTreeMap<String, String> {
        let mut properties = self.static_properties.clone();
        for resource in [
            ConfigResource::Broker(None),
            ConfigResource::Broker(Some(self.broker_id)),
        ] {
            if let Some(dynamic) = image.configs.get(&resource) {
                properties.extend(dynamic.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        properties
    }

    /// The log config of a topic: broker defaults, then the topic's own keys.
    pub fn topic_log_config(&self, image: &MetadataImage, topic: &str) -> LogConfig {
        self.topic_log_config_over(&self.broker_log_config(image), image, topic)
    }

    /// The topic defaults from the broker's properties as they stand.
    fn broker_log_config(&self, image: &MetadataImage) -> LogConfig {
        let properties = self.effective_broker_properties(image);
        LogConfig::from_broker_properties(&properties)
            .unwrap_or_else(|_| self.logs.config().default_log_config.clone())
    }

    /// A topic's log config over the broker's defaults (`base`).
    fn topic_log_config_over(
        &self,
        base: &LogConfig,
        image: &MetadataImage,
        topic: &str,
    ) -> LogConfig {
        let mut config = base.clone();
        if let Some(overrides) = image.configs.get(&ConfigResource::Topic(topic.to_owned())) {
            for (key, value) in overrides {
                if let Err(error) = config.set(key, value) {
                    tracing::warn!(topic, %error, "ignoring an invalid topic config");
                }
            }
        }
        config
    }

    /// `min.insync.replicas` of a topic.
    pub fn min_insync_replicas(&self, image: &MetadataImage, topic: &str) -> usize {
        image
            .configs
            .get(&ConfigResource::Topic(topic.to_owned()))
            .and_then(|c| c.get("min.insync.replicas"))
            .cloned()
            .or_else(|| {
                self.effective_broker_properties(image)
                    .get("min.insync.replicas")
                    .cloned()
            })
            .and_then(|v| v.parse().ok())
            .unwrap_or(1)
    }

    /// A topic's `compression.type` (topic value, else the broker's, else `producer`).
    pub fn compression_type(&self, image: &MetadataImage, topic: &str) -> String {
        image
            .configs
            .get(&ConfigResource::Topic(topic.to_owned()))
            .and_then(|c| c.get("compression.type"))
            .cloned()
            .or_else(|| {
                self.effective_broker_properties(image)
                    .get("compression.type")
                    .cloned()
            })
            .unwrap_or_else(|| "producer".to_owned())
    }

    /// Whether the replicas follow the committed metadata (an image holding this process's
    /// registration has been applied).
    pub fn is_caught_up(&self) -> bool {
        self.caught_up.load(Ordering::Acquire)
    }

    /// Whether `image` holds this process's own registration: it is then current up to a
    /// point after this process registered, so nothing committed before that is missing from
    /// it (Kafka's brokers likewise act on metadata only once caught up to the offset of
    /// their registration).
    fn holds_registration(&self, image: &MetadataImage) -> bool {
        let epoch = self.registered_epoch.load(Ordering::Acquire);
        epoch >= 0
            && image
                .brokers
                .get(&self.broker_id)
                .is_some_and(|b| b.registration.broker_epoch == epoch)
    }

    /// Brings the replicas in line with a committed image. Runs on every new image, from the
    /// first that holds this process's registration on: an earlier one may name this broker
    /// leader at an epoch it no longer has (the registration itself moved its leaderships).
    pub fn apply_image(&self, image: &MetadataImage) {
        let first = !self.is_caught_up();
        if first && !self.holds_registration(image) {
            tracing::debug!(
                index = image.index,
                "not applying a metadata image older than this broker's registration"
            );
            return;
        }
        let mut wanted: HashMap<TopicPartition, (String, PartitionState)> = HashMap::new();
        for topic in image.topics.values() {
            for (index, registration) in &topic.partitions {
                if !registration.replicas.contains(&self.broker_id) {
                    continue;
                }
                wanted.insert(
                    TopicPartition::new(topic.name.clone(), *index),
                    (
                        topic.name.clone(),
                        PartitionState {
                            topic_id: topic.id,
                            leader: registration.leader,
                            leader_epoch: registration.leader_epoch,
                            partition_epoch: registration.partition_epoch,
                            replicas: registration.replicas.clone(),
                            isr: registration.isr.clone(),
                        },
                    ),
                );
            }
        }
        let current: Vec<(TopicPartition, Arc<Partition>)> = self
            .partitions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(tp, p)| (tp.clone(), Arc::clone(p)))
            .collect();
        // An offline partition no longer hosted here: its log goes, as a hosted one's would.
        let dropped: Vec<TopicPartition> = {
            let mut offline = self.offline.write().unwrap_or_else(|p| p.into_inner());
            let dropped = offline
                .iter()
                .filter(|tp| !wanted.contains_key(*tp))
                .cloned()
                .collect();
            offline.retain(|tp| wanted.contains_key(tp));
            dropped
        };
        for tp in dropped {
            match self.logs.delete(&tp) {
                Ok(_) => tracing::info!(topic_partition = %tp, "offline replica deleted"),
                Err(error) => {
                    tracing::error!(topic_partition = %tp, %error, "deleting the offline replica's log failed")
                }
            }
        }
        // Gone from the image (topic deleted) or re-created under a new id: drop the replica.
        for (tp, partition) in &current {
            let keep = wanted
                .get(tp)
                .is_some_and(|(_, state)| state.topic_id == partition.state().topic_id);
            if !keep {
                self.remove(tp);
            }
        }
        if first {
            tracing::info!(
                index = image.index,
                "caught up with the metadata log: serving replicas"
            );
            self.sweep_stray_logs(&wanted);
            self.caught_up.store(true, Ordering::Release);
        }
        // Per image and topic, not per partition: thousands of partitions each rebuilt the
        // broker's properties on every image.
        let base = self.broker_log_config(image);
        let mut topic_configs: HashMap<String, LogConfig> = HashMap::new();
        for (tp, (topic, state)) in wanted {
            let config = topic_configs
                .entry(topic)
                .or_insert_with_key(|topic| self.topic_log_config_over(&base, image, topic))
                .clone();
            if let Some(partition) = self.partition(&tp) {
                partition.update_config(config);
                let before = partition.state();
                if before != state {
                    if before.leader == self.broker_id
                        && state.leader == self.broker_id
                        && before.leader_epoch == state.leader_epoch
                    {
                        let counter = match state.isr.len().cmp(&before.isr.len()) {
                            std::cmp::Ordering::Less => Some(&self.isr_shrinks),
                            std::cmp::Ordering::Greater => Some(&self.isr_expands),
                            std::cmp::Ordering::Equal => None,
                        };
                        if let Some(counter) = counter {
                            counter.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    let became_leader = state.leader == self.broker_id && !partition.is_leader();
                    let new_leadership =
                        before.leader != state.leader || before.leader_epoch != state.leader_epoch;
                    partition.set_state(state.clone());
                    if became_leader {
                        tracing::info!(topic_partition = %tp, leader_epoch = state.leader_epoch, "became leader");
                    }
                    if new_leadership {
                        self.announce(&tp, &state);
                    }
                }
                continue;
            }
            match self.open_partition(&tp, config, state.clone()) {
                Ok(partition) => {
                    self.partitions
                        .write()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(tp.clone(), partition);
                    self.offline
                        .write()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&tp);
                    self.announce(&tp, &state);
                }
                Err(error) => {
                    let first = self
                        .offline
                        .write()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(tp.clone());
                    // A log that failed at start was reported by the log manager already.
                    if first && !matches!(error, crate::log::LogError::OpenFailed { .. }) {
                        tracing::error!(topic_partition = %tp, %error, "cannot open the partition log: it is offline on this broker")
                    }
                }
            }
        }
        self.applied_index.send_replace(image.index);
    }

    /// Deletes the logs of partitions this broker does not host (`wanted`: the image's
    /// partitions with a replica here): their topic was deleted, or re-created under a new id,
    /// or the replica moved away, while this broker was down. Runs once, on the first image
    /// holding this process's registration: nothing it lacks can still be coming.
    fn sweep_stray_logs(&self, wanted: &HashMap<TopicPartition, (String, PartitionState)>) {
        for tp in self.logs.failed() {
            if wanted.contains_key(&tp) {
                continue;
            }
            match self.logs.delete(&tp) {
                Ok(_) => {
                    tracing::info!(topic_partition = %tp, "deleted a stray log that could not be opened: this broker no longer hosts the partition")
                }
                Err(error) => {
                    tracing::error!(topic_partition = %tp, %error, "deleting a stray log failed")
                }
            }
        }
        for log in self.logs.all() {
            let tp = log.topic_partition().clone();
            let hosted = wanted.get(&tp).is_some_and(|(_, state)| {
                read_topic_id(log.dir()).is_none_or(|id| id == state.topic_id)
            });
            if hosted {
                continue;
            }
            drop(log);
            match self.logs.delete(&tp) {
                Ok(_) => {
                    tracing::info!(topic_partition = %tp, "deleted a stray log: this broker no longer hosts the partition")
                }
                Err(error) => {
                    tracing::error!(topic_partition = %tp, %error, "deleting a stray log failed")
                }
            }
        }
    }

    /// The index of the last metadata image the replicas were brought in line with.
    pub fn applied_index(&self) -> u64 {
        *self.applied_index.borrow()
    }

    /// Waits (up to `timeout`) until the image at `index` has been applied to the replicas, so
    /// a request served right after a topic was created finds its partitions.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) {
        let mut applied = self.applied_index.subscribe();
        let _ = tokio::time::timeout(timeout, applied.wait_for(|a| *a >= index)).await;
    }

    fn open_partition(
        &self,
        tp: &TopicPartition,
        config: LogConfig,
        state: PartitionState,
    ) -> Result<Arc<Partition>, crate::log::LogError> {
        let existing_dir = self
            .logs
            .get(tp)
            .map(|log| log.dir().to_path_buf())
            .or_else(|| self.logs.failed_dir(tp));
        if let Some(dir) = existing_dir {
            if read_topic_id(&dir).is_some_and(|id| id != state.topic_id) {
                tracing::info!(topic_partition = %tp, "log belongs to an earlier topic of the same name: deleting it");
                self.logs.delete(tp)?;
            }
        }
        let log = self.logs.get_or_create(tp, config)?;
        if read_topic_id(log.dir()).is_none() {
            write_topic_id(log.dir(), state.topic_id);
        }
        let leader = state.leader == self.broker_id;
        let partition = Arc::new(Partition::open(
            tp.clone(),
            log,
            self.broker_id,
            state,
            Arc::new(clock::SystemClock),
        )?);
        partition.maybe_advance_high_watermark();
        tracing::info!(topic_partition = %tp, leader, log_end_offset = partition.log_end_offset(), "replica opened");
        Ok(partition)
    }

    fn remove(&self, tp: &TopicPartition) {
        let removed = self
            .partitions
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(tp);
        if let Some(partition) = removed {
            let _ = self.leadership.send(LeadershipChange {
                topic_partition: tp.clone(),
                leader_epoch: partition.state().leader_epoch,
                role: Role::Removed,
            });
            // Requests waiting on it answer now (the partition is gone).
            partition.log_moved();
            drop(partition);
            match self.logs.delete(tp) {
                Ok(_) => tracing::info!(topic_partition = %tp, "replica deleted"),
                Err(error) => {
                    tracing::error!(topic_partition = %tp, %error, "deleting the replica's log failed")
                }
            }
        }
    }

    /// Follows committed images until the sender is gone.
    pub async fn follow_images(self: Arc<Self>, mut images: watch::Receiver<Arc<MetadataImage>>) {
        loop {
            let image = Arc::clone(&images.borrow_and_update());
            let replicas = Arc::clone(&self);
            let applied = tokio::task::spawn_blocking(move || replicas.apply_image(&image)).await;
            if let Err(error) = applied {
                tracing::error!(%error, "applying a metadata image failed");
            }
            if self.is_caught_up() {
                if images.changed().await.is_err() {
                    return;
                }
            } else {
                // The registration may land in the image before the broker epoch is known
                // here: look again soon even without a new image.
                let changed =
                    tokio::time::timeout(Duration::from_millis(100), images.changed()).await;
                if let Ok(Err(_)) = changed {
                    return;
                }
            }
        }
    }

    /// DeleteRecords on a partition led here: moves its log start to `before` (-1: the high
    /// watermark), checkpointed; the new log start, or the Kafka error.
    pub fn delete_records(&self, partition: &Partition, before: i64) -> Result<u64, KafkaError> {
        let target = partition.delete_records_target(before)?;
        let moved = self
            .logs
            .advance_log_start_offset(&partition.topic_partition, target)
            .map_err(|error| error.kafka_error());
        partition.log_moved();
        moved
    }

    /// Truncates a follower's log (checkpointed) and rebuilds its producer state, as one step
    /// for anyone snapshotting producer state.
    pub fn truncate_to(
        &self,
        partition: &Partition,
        offset: u64,
    ) -> Result<u64, crate::log::LogError> {
        partition.truncate_with(|| self.logs.truncate_to(&partition.topic_partition, offset))
    }

    /// Empties a follower's log and restarts it at `offset` (the leader's log start).
    pub fn truncate_fully_and_start_at(
        &self,
        partition: &Partition,
        offset: u64,
    ) -> Result<(), crate::log::LogError> {
        partition.truncate_with(|| {
            self.logs
                .truncate_fully_and_start_at(&partition.topic_partition, offset)
        })
    }

    /// Prometheus text: what operators watch about replication.
    pub fn collect_metrics(&self, out: &mut Exposition) {
        let partitions = self.partitions();
        let mut leaders = 0;
        let mut under_replicated = 0;
        let mut under_min_isr = 0;
        let mut follower_lag_max = 0u64;
        for partition in &partitions {
            let state = partition.state();
            if state.leader != self.broker_id {
                continue;
            }
            leaders += 1;
            if state.isr.len() < state.replicas.len() {
                under_replicated += 1;
            }
            if state.isr.len() < 2 && state.replicas.len() > 1 {
                under_min_isr += 1;
            }
            let log_end = partition.log_end_offset();
            for follower in partition.followers().values() {
                let lag = log_end.saturating_sub(follower.log_end_offset.unwrap_or(0));
                follower_lag_max = follower_lag_max.max(lag);
            }
        }
        let mut gauge = |name: &str, kind: Kind, help: &str, value: u64| {
            out.single(name, kind, help, value);
        };
        gauge(
            "sluice_replica_leader_partitions",
            Kind::Gauge,
            "Partitions this broker leads.",
            leaders,
        );
        gauge(
            "sluice_under_replicated_partitions",
            Kind::Gauge,
            "Partitions led here whose ISR is smaller than their replica set.",
            under_replicated,
        );
        gauge(
            "sluice_single_replica_isr_partitions",
            Kind::Gauge,
            "Replicated partitions led here with the leader alone in the ISR.",
            under_min_isr,
        );
        gauge(
            "sluice_follower_lag_max_records",
            Kind::Gauge,
            "Largest lag, in offsets, of a follower behind this broker's leader logs.",
            follower_lag_max,
        );
        gauge(
            "sluice_offline_partitions",
            Kind::Gauge,
            "Partitions hosted here whose log could not be opened (see the ERROR naming each).",
            self.offline.read().unwrap_or_else(|p| p.into_inner()).len() as u64,
        );
        let (segment_files_open, segment_files_opened, segment_files_closed) =
            crate::log::handles::SEGMENT_FILES.stats();
        gauge(
            "sluice_segment_files_open",
            Kind::Gauge,
            "Segment files with an open descriptor (a bounded set; see segment_files_max at start).",
            segment_files_open as u64,
        );
        gauge(
            "sluice_segment_files_opened_total",
            Kind::Counter,
            "Segment file opens, first and again after being closed to stay under the bound.",
            segment_files_opened,
        );
        gauge(
            "sluice_segment_files_closed_total",
            Kind::Counter,
            "Segment files closed to stay under the bound of open descriptors.",
            segment_files_closed,
        );
        gauge(
            "sluice_index_mappings_open",
            Kind::Gauge,
            "Sealed index files mapped (a bounded set; see index_mappings_max at start).",
            crate::log::handles::INDEX_MAPS.stats().0 as u64,
        );
        gauge(
            "sluice_isr_shrinks_total",
            Kind::Counter,
            "ISR shrinks committed for partitions led here.",
            self.isr_shrinks.load(Ordering::Relaxed),
        );
        gauge(
            "sluice_isr_expands_total",
            Kind::Counter,
            "ISR expansions committed for partitions led here.",
            self.isr_expands.load(Ordering::Relaxed),
        );
    }

    /// Per-topic and per-partition gauges of the replicas hosted here (`metrics.partition.enable`):
    /// log start and end, high watermark, size, and, where this broker leads, whether the
    /// partition is under-replicated.
    pub fn collect_partition_metrics(&self, out: &mut Exposition) {
        let mut partitions = self.partitions();
        partitions.sort_by(|a, b| a.topic_partition.cmp(&b.topic_partition));
        let rows: Vec<(&str, String, &Partition)> = partitions
            .iter()
            .map(|p| {
                let tp = &p.topic_partition;
                (tp.topic.as_str(), tp.partition.to_string(), p.as_ref())
            })
            .collect();
        type Gauge = fn(&Partition) -> u64;
        let gauges: [(&str, &str, Gauge); 4] = [
            (
                "sluice_partition_log_start_offset",
                "The first offset of each partition replica hosted here.",
                |p| p.log_start_offset(),
            ),
            (
                "sluice_partition_log_end_offset",
                "The offset after the last record of each partition replica hosted here.",
                |p| p.log_end_offset(),
            ),
            (
                "sluice_partition_high_watermark",
                "The high watermark of each partition replica hosted here (what consumers read up to).",
                |p| p.high_watermark(),
            ),
            (
                "sluice_partition_size_bytes",
                "Bytes on disk of each partition replica hosted here.",
                |p| p.size_bytes(),
            ),
        ];
        for (name, help, value) in gauges {
            let mut family = out.family(name, Kind::Gauge, help);
            for (topic, partition, replica) in &rows {
                family.sample(
                    &[("topic", topic), ("partition", partition)],
                    value(replica),
                );
            }
        }
        let mut family = out.family(
            "sluice_partition_under_replicated",
            Kind::Gauge,
            "1 for a partition led here whose ISR is smaller than its replica set, else 0.",
        );
        for (topic, partition, replica) in &rows {
            let state = replica.state();
            if state.leader == self.broker_id {
                let under = u8::from(state.isr.len() < state.replicas.len());
                family.sample(&[("topic", topic), ("partition", partition)], under);
            }
        }
        #[derive(Default)]
        struct TopicTotals {
            partitions: u64,
            size_bytes: u64,
            messages_in: u64,
            bytes_in: u64,
            bytes_out: u64,
        }
        let mut sizes: BTreeMap<&str, TopicTotals> = BTreeMap::new();
        for (topic, _, replica) in &rows {
            let entry = sizes.entry(topic).or_default();
            let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
            entry.partitions += 1;
            entry.size_bytes += replica.size_bytes();
            entry.messages_in += load(&replica.traffic.messages_in);
            entry.bytes_in += load(&replica.traffic.bytes_in);
            entry.bytes_out += load(&replica.traffic.bytes_out);
        }
        type Total = fn(&TopicTotals) -> u64;
        let counters: [(&str, &str, Total); 3] = [
            (
                "sluice_topic_messages_in_total",
                "Records producers appended to each topic's partitions led here (since each \
                 replica was opened here: a partition that moves away takes its count along).",
                |t| t.messages_in,
            ),
            (
                "sluice_topic_bytes_in_total",
                "Record batch bytes producers appended to each topic's partitions led here.",
                |t| t.bytes_in,
            ),
            (
                "sluice_topic_bytes_out_total",
                "Record batch bytes consumers fetched from each topic's partitions here \
                 (followers' fetches not counted).",
                |t| t.bytes_out,
            ),
        ];
        for (name, help, value) in counters {
            let mut family = out.family(name, Kind::Counter, help);
            for (topic, totals) in &sizes {
                family.sample(&[("topic", topic)], value(totals));
            }
        }
        let mut family = out.family(
            "sluice_topic_partitions_hosted",
            Kind::Gauge,
            "Partition replicas of each topic hosted here.",
        );
        for (topic, totals) in &sizes {
            family.sample(&[("topic", topic)], totals.partitions);
        }
        let mut family = out.family(
            "sluice_topic_size_bytes",
            Kind::Gauge,
            "Bytes on disk of each topic's replicas hosted here.",
        );
        for (topic, totals) in &sizes {
            family.sample(&[("topic", topic)], totals.size_bytes);
        }
    }

    /// Snapshots producer state of every partition (at shutdown, before the logs close).
    pub fn snapshot_producer_state(&self) {
        for partition in self.partitions() {
            if let Err(error) = partition.snapshot_producer_state() {
                tracing::warn!(topic_partition = %partition.topic_partition, %error, "producer snapshot failed");
            }
        }
    }
}

fn read_topic_id(dir: &Path) -> Option<Uuid> {
    let text = std::fs::read_to_string(dir.join(PARTITION_METADATA_FILE)).ok()?;
    let id = text
        .lines()
        .find_map(|l| l.strip_prefix("topic_id: "))?
        .trim();
    u128::from_str_radix(id, 16).ok().map(Uuid)
}

fn write_topic_id(dir: &Path, id: Uuid) {
    let text = format!("version: 0\ntopic_id: {id}\n");
    if let Err(error) = std::fs::write(dir.join(PARTITION_METADATA_FILE), text) {
        tracing::warn!(dir = %dir.display(), %error, "cannot write partition.metadata");
    }
}
