//! Hosting a coordinator on a broker: what the group and transaction coordinators share
//! around their runtime. A `Host` follows the leadership of its internal topic's partitions
//! (loading a shard on "became leader at epoch E", dropping it on resignation), finds the
//! shard of a key (`hash(key) % partitions`, Java's `Utils.abs(key.hashCode())`, so Kafka's
//! tools agree), and creates the internal topic on first use (a FindCoordinator), as Kafka
//! does.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;

use super::writer::ReplicaWriter;
use super::{Runtime, Shard, ShardHandle};
use crate::controller::NewTopic;
use crate::controller::client::{ControllerClient, ImageWatch};
use crate::controller::service::ControllerRequest;
use crate::protocol::TopicPartition;
use crate::protocol::errors::{ApiError, KafkaError};
use crate::replica::{LeadershipChange, ReplicaManager, Role};

/// How long creating the internal topic may take.
const CREATE_WAIT: Duration = Duration::from_secs(10);

/// Java's `String.hashCode` over UTF-16 code units, as Kafka computes a key's partition.
pub fn java_string_hash(text: &str) -> i32 {
    text.encode_utf16().fold(0i32, |hash, unit| {
        hash.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// The partition of an internal topic that holds `key` (Kafka's `Utils.abs(hash) % n`).
pub fn partition_for(key: &str, partitions: i32) -> i32 {
    let hash = java_string_hash(key);
    let positive = if hash == i32::MIN { 0 } else { hash.abs() };
    positive % partitions.max(1)
}

/// The internal topic a coordinator lives in, as it is created.
#[derive(Debug, Clone)]
pub struct InternalTopic {
    pub name: &'static str,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
    /// The broker key an operator lowers when the topic cannot be created for want of
    /// brokers (`offsets.topic.replication.factor`).
    pub replication_factor_key: &'static str,
}

/// What the host logs of a loaded shard: its count of `noun` (groups, transactional ids).
pub type ShardSize<S> = fn(&S) -> usize;

pub struct Host<S: Shard> {
    pub runtime: Runtime<S>,
    topic: InternalTopic,
    replicas: Arc<ReplicaManager>,
    images: ImageWatch,
    controller: ControllerClient,
    empty: Arc<dyn Fn() -> S + Send + Sync>,
    size: ShardSize<S>,
    noun: &'static str,
    /// One creation of the topic at a time.
    creating: tokio::sync::Mutex<()>,
}

impl<S: Shard> Host<S> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        runtime: Runtime<S>,
        topic: InternalTopic,
        replicas: Arc<ReplicaManager>,
        images: ImageWatch,
        controller: ControllerClient,
        empty: Arc<dyn Fn() -> S + Send + Sync>,
        size: ShardSize<S>,
        noun: &'static str,
    ) -> Host<S> {
        Host {
            runtime,
            topic,
            replicas,
            images,
            controller,
            empty,
            size,
            noun,
            creating: tokio::sync::Mutex::new(()),
        }
    }

    pub fn images(&self) -> &ImageWatch {
        &self.images
    }

    /// Follows leadership of the topic's partitions until the replica manager stops.
    pub fn start(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let events = self.replicas.leadership_changes();
        tokio::spawn(Arc::clone(self).follow_leadership(events))
    }

    async fn follow_leadership(self: Arc<Self>, mut events: broadcast::Receiver<LeadershipChange>) {
        // Partitions led before this subscription began.
        self.rescan();
        loop {
            match events.recv().await {
                Ok(change) if change.topic_partition.topic == self.topic.name => {
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
        let mut led = BTreeMap::new();
        for partition in self.replicas.partitions() {
            if partition.topic_partition.topic == self.topic.name && partition.is_leader() {
                led.insert(
                    partition.topic_partition.partition,
                    partition.state().leader_epoch,
                );
            }
        }
        for shard in self.runtime.shards() {
            if led.get(&shard.index) != Some(&shard.leader_epoch) {
                self.unload(shard.index);
            }
        }
        for (index, epoch) in led {
            if self.runtime.shard(index).is_none() {
                self.load(index, epoch);
            }
        }
    }

    /// Became leader of partition `index` at `leader_epoch`: replay it, then serve it.
    fn load(self: &Arc<Self>, index: i32, leader_epoch: i32) {
        let tp = TopicPartition::new(self.topic.name, index);
        let Some(partition) = self.replicas.partition(&tp) else {
            return;
        };
        let writer = Arc::new(ReplicaWriter::new(
            partition,
            Arc::clone(&self.replicas),
            self.images.clone(),
        ));
        let Some(shard) =
            self.runtime
                .start_shard(index, leader_epoch, writer, Arc::clone(&self.empty))
        else {
            // Already loaded (or loading) at this epoch: the startup scan and the event.
            return;
        };
        let (coordinator, noun, size) = (self.runtime.name(), self.noun, self.size);
        tokio::task::spawn_blocking(move || match shard.load() {
            Ok(loaded) => {
                let count = shard.inspect(size);
                let elapsed_ms = loaded.elapsed.as_millis() as u64;
                if loaded.records > 0 {
                    tracing::info!(
                        coordinator,
                        partition = index,
                        leader_epoch,
                        count,
                        what = noun,
                        records = loaded.records,
                        elapsed_ms,
                        "loaded coordinator partition"
                    );
                } else {
                    tracing::debug!(
                        coordinator,
                        partition = index,
                        leader_epoch,
                        "loaded empty coordinator partition"
                    );
                }
            }
            Err(message) if shard.is_unloaded() => {
                tracing::debug!(coordinator, partition = index, leader_epoch, %message, "unloaded while loading");
            }
            Err(message) => {
                // The partition stays unloaded (COORDINATOR_LOAD_IN_PROGRESS) until the next
                // leadership change: its data could not be read.
                tracing::error!(coordinator, partition = index, leader_epoch, %message, "loading a coordinator partition failed");
            }
        });
    }

    fn unload(&self, index: i32) {
        if let Some(shard) = self.runtime.shard(index) {
            let count = shard.inspect(self.size);
            if self.runtime.stop_shard(index) {
                tracing::info!(
                    coordinator = self.runtime.name(),
                    partition = index,
                    count,
                    what = self.noun,
                    "unloaded coordinator partition"
                );
            }
        }
    }

    /// The topic's partition count, when it exists.
    pub fn partition_count(&self) -> Option<i32> {
        self.images
            .image()
            .topic_by_name(self.topic.name)
            .map(|t| t.partitions.len() as i32)
    }

    /// The partition holding `key`, when the topic exists.
    pub fn partition_of(&self, key: &str) -> Option<i32> {
        self.partition_count()
            .map(|count| partition_for(key, count))
    }

    /// The shard coordinating `key`, or NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS /
    /// COORDINATOR_NOT_AVAILABLE.
    pub fn shard_of(&self, key: &str) -> Result<Arc<ShardHandle<S>>, KafkaError> {
        let Some(index) = self.partition_of(key) else {
            return Err(KafkaError::CoordinatorNotAvailable);
        };
        let Some(shard) = self.runtime.shard(index) else {
            // Led here by the image, but the replica layer has not said so yet: loading is
            // about to start.
            let led_here = self
                .images
                .image()
                .topic_by_name(self.topic.name)
                .and_then(|t| t.partitions.get(&index))
                .is_some_and(|p| p.leader == self.replicas.broker_id());
            return Err(if led_here {
                KafkaError::CoordinatorLoadInProgress
            } else {
                KafkaError::NotCoordinator
            });
        };
        Ok(shard)
    }

    /// Creates the topic when it does not exist (the first FindCoordinator for a key does, as
    /// in Kafka); its partition count, or COORDINATOR_NOT_AVAILABLE and why.
    pub async fn ensure_topic(&self) -> Result<i32, ApiError> {
        if let Some(count) = self.partition_count() {
            return Ok(count);
        }
        let _creating = self.creating.lock().await;
        if let Some(count) = self.partition_count() {
            return Ok(count);
        }
        let name = self.topic.name;
        let topic = NewTopic {
            name: name.to_owned(),
            partitions: self.topic.partitions,
            replication_factor: self.topic.replication_factor,
            configs: self.topic.configs.clone(),
            ..Default::default()
        };
        match self
            .controller
            .call(ControllerRequest::CreateTopic(topic), CREATE_WAIT)
            .await
        {
            Ok(_) => tracing::info!(
                partitions = self.topic.partitions,
                replication_factor = self.topic.replication_factor,
                "created {name}"
            ),
            Err(ApiError {
                error: KafkaError::TopicAlreadyExists,
                ..
            }) => {}
            Err(ApiError { error, message }) => {
                let message = match error {
                    KafkaError::InvalidReplicationFactor => format!(
                        "cannot create {name}: {message}; lower {} or start more brokers",
                        self.topic.replication_factor_key
                    ),
                    other => format!("cannot create {name}: {other}: {message}"),
                };
                tracing::warn!(coordinator = self.runtime.name(), %message, "coordinator unavailable");
                return Err(ApiError::new(KafkaError::CoordinatorNotAvailable, message));
            }
        }
        self.images
            .wait_for(CREATE_WAIT, |image| image.topic_by_name(name).is_some())
            .await;
        self.partition_count().ok_or_else(|| {
            ApiError::new(
                KafkaError::CoordinatorNotAvailable,
                format!("{name} is being created"),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_match_kafkas() {
        // Values from Java: "".hashCode() == 0, "group".hashCode() == 98629247, and
        // "polygenelubricants" hashes to Integer.MIN_VALUE (Utils.abs maps it to 0).
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("group"), 98_629_247);
        assert_eq!(partition_for("group", 50), 98_629_247 % 50);
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        assert_eq!(partition_for("polygenelubricants", 50), 0);
        // Characters outside the BMP count as two UTF-16 units, as in Java.
        assert_eq!(java_string_hash("😀"), 0xd83d * 31 + 0xde00);
    }
}
