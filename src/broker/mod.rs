//! The broker's shared context: what every request is served with (the metadata image and
//! waits for it, the controller, the replica manager, producer ids, fetch sessions, client
//! quotas, metrics).
//! Handlers (`handler/`) and the node import it from here. Coordinators (`txn/`, `group/`)
//! do not: they get a `ControllerClient` and an `ImageWatch` (`controller::client`), so
//! imports go one way, broker -> coordinators.
//!
//! Coordinators that own internal partitions (`__consumer_offsets`, `__transaction_state`)
//! follow `replicas.leadership_changes()`: became leader at epoch E (load), follower or
//! removed (unload).

pub mod authorizer;
pub mod client_quotas;
mod fetch_sessions;
pub mod peers;
pub mod readiness;
pub mod stall;

pub use fetch_sessions::FetchSessionCache;
pub(crate) use fetch_sessions::{Reported, Wanted};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use sluice_raft::Quorum;
use sluice_raft::image::MetadataImage;
use sluice_raft::records::BrokerId;

use crate::config::ServerConfig;
use crate::controller::client::{ControllerClient, ImageWatch};
use crate::controller::service::{ControllerRequest, ControllerResponse};
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
    pub producer_ids: Arc<ProducerIdManager>,
    pub fetch_sessions: FetchSessionCache,
    /// The group coordinator (`__consumer_offsets` partitions this broker leads).
    pub groups: Arc<crate::group::GroupCoordinator>,
    /// The transaction coordinator (`__transaction_state` partitions this broker leads).
    pub transactions: Arc<crate::txn::coordinator::TxnCoordinator>,
    /// Connections to the other brokers (KIP-890 verification).
    pub peers: peers::Peers,
    /// Calls to the active controller, and the metadata image: what coordinators get.
    pub controller: ControllerClient,
    pub images: ImageWatch,
    /// This broker's registration epoch (-1 until registered) and fenced state, kept by the
    /// broker lifecycle.
    pub broker_epoch: Arc<AtomicI64>,
    pub fenced: Arc<AtomicBool>,
    /// Whether this broker may lead after a stall (see `stall.rs`).
    pub stall: Arc<stall::StallGuard>,
    /// Registered, unfenced and caught up: requests wait for it after a start.
    pub readiness: Arc<readiness::Readiness>,
    /// What each request may do (`authorizer.class.name`, the quorum's ACLs).
    pub authorizer: authorizer::Authorizer,
    /// The rates of clients that client quotas apply to.
    pub client_quotas: client_quotas::ClientQuotaManager,
}

impl Broker {
    pub fn image(&self) -> Arc<MetadataImage> {
        self.quorum.image()
    }

    /// A request to the active controller; the answer or the error with its message.
    pub async fn call_controller(
        &self,
        request: ControllerRequest,
        timeout: Duration,
    ) -> Result<ControllerResponse, ApiError> {
        self.controller.call(request, timeout).await
    }

    /// Waits until the local image satisfies `until` (a committed change has reached this
    /// node), for at most `timeout`.
    pub async fn wait_for_image(
        &self,
        timeout: Duration,
        until: impl FnMut(&MetadataImage) -> bool,
    ) -> bool {
        self.images.wait_for(timeout, until).await
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
        let (found, state) = self.local_partition(image, topic, partition)?;
        // After a stall the image may name this broker leader of what the controller has
        // moved away meanwhile.
        if state.leader != self.broker_id || !self.stall.leads() {
            return Err(KafkaError::NotLeaderOrFollower);
        }
        check_leader_epoch(current_leader_epoch, &state)?;
        Ok((found, state))
    }

    /// A partition this broker hosts, as leader or follower, with its state: what a consumer
    /// may read from when it fetches from followers (KIP-392). The errors are
    /// [`Broker::led_partition`]'s, the leader epoch checked against the one this replica knows.
    pub fn hosted_partition(
        &self,
        image: &MetadataImage,
        topic: &str,
        partition: i32,
        current_leader_epoch: i32,
    ) -> Result<(Arc<Partition>, PartitionState), KafkaError> {
        let (found, state) = self.local_partition(image, topic, partition)?;
        check_leader_epoch(current_leader_epoch, &state)?;
        Ok((found, state))
    }

    /// The replica open here, with its state, or why there is none.
    fn local_partition(
        &self,
        image: &MetadataImage,
        topic: &str,
        partition: i32,
    ) -> Result<(Arc<Partition>, PartitionState), KafkaError> {
        let tp = crate::protocol::TopicPartition::new(topic, partition);
        let Some(found) = self.replicas.partition(&tp) else {
            return Err(self.unserved_partition_error(image, &tp));
        };
        let state = found.state();
        Ok((found, state))
    }
}

/// A client's `current_leader_epoch` against this replica's: older is FENCED_LEADER_EPOCH,
/// newer UNKNOWN_LEADER_EPOCH; -1 skips the check.
fn check_leader_epoch(current_leader_epoch: i32, state: &PartitionState) -> Result<(), KafkaError> {
    if current_leader_epoch >= 0 && current_leader_epoch != state.leader_epoch {
        return Err(if current_leader_epoch < state.leader_epoch {
            KafkaError::FencedLeaderEpoch
        } else {
            KafkaError::UnknownLeaderEpoch
        });
    }
    Ok(())
}
