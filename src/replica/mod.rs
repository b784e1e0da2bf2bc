//! The replica manager: the partition replicas this broker holds, kept in step with the
//! committed metadata image (create logs, take or give up leadership, delete the logs of
//! deleted topics) once that image holds this process's registration, and the append and read
//! paths over them. Followers fetch from their leaders (`fetcher`); leaders keep the ISR
//! (`isr`).

pub mod compression;
pub mod fetcher;
pub mod isr;
pub mod partition;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use sluice_raft::image::MetadataImage;
use sluice_raft::records::{BrokerId, ConfigResource, Uuid};
use tokio::sync::watch;

use crate::log::{LogConfig, LogManager, TopicPartition};
pub use partition::{AckState, AppendError, Appended, Partition, PartitionState, PendingAck};

/// Kafka's `partition.metadata` file: which topic id a partition directory belongs to, so a
/// topic deleted and re-created under the same name while a broker was down is not mistaken
/// for the old one.
const PARTITION_METADATA_FILE: &str = "partition.metadata";

pub struct ReplicaManager {
    broker_id: BrokerId,
    logs: Arc<LogManager>,
    partitions: RwLock<HashMap<TopicPartition, Arc<Partition>>>,
    /// Broker properties from `server.properties` (log defaults and `min.insync.replicas`).
    static_properties: BTreeMap<String, String>,
    /// Bumped whenever a log end or high watermark moves: long-polling fetches wait on it.
    data_version: watch::Sender<u64>,
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
            static_properties,
            data_version: watch::channel(0).0,
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

    pub fn partitions(&self) -> Vec<Arc<Partition>> {
        self.partitions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// A receiver that sees every change of data (appends, high watermarks).
    pub fn data_changes(&self) -> watch::Receiver<u64> {
        self.data_version.subscribe()
    }

    pub fn notify_data_changed(&self) {
        self.data_version.send_modify(|v| *v = v.wrapping_add(1));
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
        let properties = self.effective_broker_properties(image);
        let mut config = LogConfig::from_broker_properties(&properties)
            .unwrap_or_else(|_| self.logs.config().default_log_config.clone());
        if let Some(overrides) = image.configs.get(&ConfigResource::Topic(topic.to_owned())) {
            for (key, value) in overrides {
                if LogConfig::TOPIC_KEYS.contains(&key.as_str()) {
                    if let Err(error) = config.set(key, value) {
                        tracing::warn!(topic, %error, "ignoring an invalid topic config");
                    }
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
        let mut changed = false;
        for (tp, (topic, state)) in wanted {
            let config = self.topic_log_config(image, &topic);
            if let Some(partition) = self.partition(&tp) {
                if *partition.log.config() != config {
                    partition.log.update_config(config);
                }
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
                    partition.set_state(state.clone());
                    if became_leader {
                        tracing::info!(topic_partition = %tp, leader_epoch = state.leader_epoch, "became leader");
                    }
                    changed = true;
                }
                continue;
            }
            match self.open_partition(&tp, config, state) {
                Ok(partition) => {
                    self.partitions
                        .write()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(tp, partition);
                    changed = true;
                }
                Err(error) => {
                    tracing::error!(topic_partition = %tp, %error, "cannot open the partition log")
                }
            }
        }
        if changed {
            self.notify_data_changed();
        }
        self.applied_index.send_replace(image.index);
    }

    /// Deletes the logs of partitions this broker does not host (`wanted`: the image's
    /// partitions with a replica here): their topic was deleted, or re-created under a new id,
    /// or the replica moved away, while this broker was down. Runs once, on the first image
    /// holding this process's registration: nothing it lacks can still be coming.
    fn sweep_stray_logs(&self, wanted: &HashMap<TopicPartition, (String, PartitionState)>) {
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
        if let Some(existing) = self.logs.get(tp) {
            if read_topic_id(existing.dir()).is_some_and(|id| id != state.topic_id) {
                tracing::info!(topic_partition = %tp, "log belongs to an earlier topic of the same name: deleting it");
                self.logs.delete(tp)?;
            }
        }
        let log = self.logs.get_or_create(tp, config)?;
        if read_topic_id(log.dir()).is_none() {
            write_topic_id(log.dir(), state.topic_id);
        }
        let leader = state.leader == self.broker_id;
        let partition = Arc::new(Partition::open(tp.clone(), log, self.broker_id, state)?);
        partition.maybe_advance_high_watermark();
        tracing::info!(topic_partition = %tp, leader, log_end_offset = partition.log.log_end_offset(), "replica opened");
        Ok(partition)
    }

    fn remove(&self, tp: &TopicPartition) {
        let removed = self
            .partitions
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(tp);
        if removed.is_some() {
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

    /// Waits until `until` holds or `timeout` passes; re-checked on every data change.
    pub async fn wait_for_data(&self, timeout: Duration, mut until: impl FnMut() -> bool) -> bool {
        let mut changes = self.data_changes();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if until() {
                return true;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                _ => return until(),
            }
        }
    }

    /// DeleteRecords: moves the log start offset (checkpointed); the new log start.
    pub fn advance_log_start_offset(
        &self,
        tp: &TopicPartition,
        offset: u64,
    ) -> Result<u64, crate::log::LogError> {
        self.logs.advance_log_start_offset(tp, offset)
    }

    /// Truncates a follower's log (checkpointed) and rebuilds its producer state.
    pub fn truncate_to(
        &self,
        tp: &TopicPartition,
        offset: u64,
    ) -> Result<u64, crate::log::LogError> {
        let end = self.logs.truncate_to(tp, offset)?;
        if let Some(partition) = self.partition(tp) {
            partition.reload_producer_state()?;
        }
        self.notify_data_changed();
        Ok(end)
    }

    /// Empties a follower's log and restarts it at `offset` (the leader's log start).
    pub fn truncate_fully_and_start_at(
        &self,
        tp: &TopicPartition,
        offset: u64,
    ) -> Result<(), crate::log::LogError> {
        self.logs.truncate_fully_and_start_at(tp, offset)?;
        if let Some(partition) = self.partition(tp) {
            partition.reload_producer_state()?;
        }
        self.notify_data_changed();
        Ok(())
    }

    /// Prometheus text: what operators watch about replication.
    pub fn render_metrics(&self, out: &mut String) {
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
            let log_end = partition.log.log_end_offset();
            for follower in partition.followers().values() {
                let lag = log_end.saturating_sub(follower.log_end_offset.unwrap_or(0));
                follower_lag_max = follower_lag_max.max(lag);
            }
        }
        let mut gauge = |name: &str, kind: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        gauge(
            "sluice_replica_leader_partitions",
            "gauge",
            "Partitions this broker leads.",
            leaders,
        );
        gauge(
            "sluice_under_replicated_partitions",
            "gauge",
            "Partitions led here whose ISR is smaller than their replica set.",
            under_replicated,
        );
        gauge(
            "sluice_single_replica_isr_partitions",
            "gauge",
            "Replicated partitions led here with the leader alone in the ISR.",
            under_min_isr,
        );
        gauge(
            "sluice_follower_lag_max_records",
            "gauge",
            "Largest lag, in offsets, of a follower behind this broker's leader logs.",
            follower_lag_max,
        );
        gauge(
            "sluice_isr_shrinks_total",
            "counter",
            "ISR shrinks committed for partitions led here.",
            self.isr_shrinks.load(Ordering::Relaxed),
        );
        gauge(
            "sluice_isr_expands_total",
            "counter",
            "ISR expansions committed for partitions led here.",
            self.isr_expands.load(Ordering::Relaxed),
        );
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
