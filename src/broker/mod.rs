//! The broker's shared context: what every request is served with (the metadata image and
//! waits for it, the controller, the replica manager, producer ids, fetch sessions, metrics).
//! Handlers (`handler/`), coordinators (`txn/`, groups) and the node import it from here,
//! never from each other.
//!
//! Coordinators that own internal partitions (`__consumer_offsets`, `__transaction_state`)
//! follow `replicas.leadership_changes()`: became leader at epoch E (load), follower or
//! removed (unload).

pub mod authorizer;
mod fetch_sessions;
pub mod readiness;

pub use fetch_sessions::FetchSessionCache;
pub(crate) use fetch_sessions::{Reported, Wanted};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use sluice_raft::Quorum;
use sluice_raft::image::MetadataImage;
use sluice_raft::records::BrokerId;

use crate::config::ServerConfig;
use crate::controller::service::{ControllerRequest, ControllerResponse, call_controller};
use crate::metrics::Metrics;
use crate::protocol::errors::{ApiError, KafkaError};
use crate::replica::{Partition, PartitionState, ReplicaManager};
use crate::txn::ProducerIdManager;

/// Everything a request is served with: handlers, coordinators and the node share it.
pub struct Broker {
    pub config: ServerConfig,
    pub broker_id: BrokerId,
    pub quorum: Arc<Quorum>,
    pub replicas: Arc<ReplicaManager>,
    pub metrics: Arc<Metrics>,
    pub producer_ids: ProducerIdManager,
    pub fetch_sessions: FetchSessionCache,
    /// The group coordinator (`__consumer_offsets` partitions this broker leads).
    pub groups: Arc<crate::group::GroupCoordinator>,
    /// This broker's registration epoch (-1 until registered) and fenced state, kept by the
    /// broker lifecycle.
    pub broker_epoch: Arc<AtomicI64>,
    pub fenced: Arc<AtomicBool>,
    /// Registered, unfenced and caught up: requests wait for it after a start.
    pub readiness: Arc<readiness::Readiness>,
}

impl Broker {
    pub fn image(&self) -> Arc<MetadataImage> {
        self.quorum.image()
    }

    fn voters(&self) -> Vec<String> {
        self.config
            .voters
            .iter()
            .map(|v| format!("{}:{}", v.host, v.port))
            .collect()
    }

    /// A request to the active controller; the answer or the error with its message.
    pub async fn call_controller(
        &self,
        request: ControllerRequest,
        timeout: Duration,
    ) -> Result<ControllerResponse, ApiError> {
        match call_controller(&self.quorum, &self.voters(), &request, timeout).await {
            Ok(ControllerResponse::Error { code, message }) => {
                Err(ControllerResponse::decode_error(code, message))
            }
            Ok(ControllerResponse::NotController { .. }) => Err(ApiError::new(
                KafkaError::NotController,
                "no active controller answered",
            )),
            Ok(response) => Ok(response),
            Err(error) => Err(ApiError::new(
                KafkaError::RequestTimedOut,
                error.to_string(),
            )),
        }
    }

    /// Waits until the local image satisfies `until` (a committed change has reached this
    /// node), for at most `timeout`.
    pub async fn wait_for_image(
        &self,
        timeout: Duration,
        mut until: impl FnMut(&MetadataImage) -> bool,
    ) -> bool {
        let mut images = self.quorum.images();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if until(&images.borrow_and_update()) {
                return true;
            }
            match tokio::time::timeout_at(deadline, images.changed()).await {
                Ok(Ok(())) => {}
                _ => return until(&self.quorum.image()),
            }
        }
    }

    pub fn current_broker_epoch(&self) -> i64 {
        self.broker_epoch.load(Ordering::Relaxed)
    }

    /// The node id of the active controller, -1 when unknown.
    pub fn controller_id(&self) -> i32 {
        self.quorum
            .metrics()
            .current_leader
            .map_or(-1, |l| l as i32)
    }
}

impl Broker {
    /// The error for a partition this broker has no replica open for: its log could not be
    /// opened (KAFKA_STORAGE_ERROR), it is hosted elsewhere (NOT_LEADER_OR_FOLLOWER), or it
    /// does not exist (UNKNOWN_TOPIC_OR_PARTITION).
    pub fn unserved_partition_error(
        &self,
        image: &MetadataImage,
        tp: &crate::protocol::TopicPartition,
    ) -> KafkaError {
        if self.replicas.is_offline(tp) {
            return KafkaError::KafkaStorageError;
        }
        let known = image
            .topic_by_name(&tp.topic)
            .is_some_and(|t| t.partitions.contains_key(&tp.partition));
        if known {
            KafkaError::NotLeaderOrFollower
        } else {
            KafkaError::UnknownTopicOrPartition
        }
    }

    /// The partition this broker leads, with its state, or the error a client gets: the
    /// partition is unknown (UNKNOWN_TOPIC_OR_PARTITION), led elsewhere (NOT_LEADER_OR_FOLLOWER),
    /// or the client's leader epoch is older (FENCED_LEADER_EPOCH) or newer (UNKNOWN_LEADER_EPOCH)
    /// than ours. `current_leader_epoch` -1 skips the epoch check.
    pub fn led_partition(
        &self,
        image: &MetadataImage,
        topic: &str,
        partition: i32,
        current_leader_epoch: i32,
    ) -> Result<(Arc<Partition>, PartitionState), KafkaError> {
        let broker = self;
        let tp = crate::protocol::TopicPartition::new(topic, partition);
        let Some(found) = broker.replicas.partition(&tp) else {
            return Err(broker.unserved_partition_error(image, &tp));
        };
        let state = found.state();
        if state.leader != broker.broker_id {
            return Err(KafkaError::NotLeaderOrFollower);
        }
        if current_leader_epoch >= 0 && current_leader_epoch != state.leader_epoch {
            return Err(if current_leader_epoch < state.leader_epoch {
                KafkaError::FencedLeaderEpoch
            } else {
                KafkaError::UnknownLeaderEpoch
            });
        }
        Ok((found, state))
    }
}
