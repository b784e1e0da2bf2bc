//! One file per Kafka API: each declares the versions it serves and translates a request into
//! calls on the replica manager, the metadata image or the controller. No storage logic here.
//!
//! `SUPPORTED_APIS` is the registry ApiVersions answers from; a request for an API or version
//! not in it is refused by the server before it is decoded.

mod api_versions;
mod create_partitions;
mod create_topics;
mod delete_records;
mod delete_topics;
mod describe_cluster;
mod describe_configs;
mod describe_quorum;
mod elect_leaders;
mod fetch;
mod find_coordinator;
mod incremental_alter_configs;
mod init_producer_id;
mod list_offsets;
mod metadata;
mod offset_for_leader_epoch;
mod partition_reassignments;
mod produce;

pub use describe_configs::topic_config_entries;
pub use fetch::FetchSessionCache;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use sluice_raft::Quorum;
use sluice_raft::image::MetadataImage;
use sluice_raft::records::BrokerId;

use crate::config::ServerConfig;
use crate::controller::service::{ControllerRequest, ControllerResponse, call_controller};
use crate::metrics::Metrics;
use crate::protocol::errors;
use crate::protocol::fetch_encode::FetchAnswer;
use crate::replica::{Partition, PartitionState, ReplicaManager};
use crate::txn::ProducerIdManager;

/// Every API served, with the versions (inclusive).
pub const SUPPORTED_APIS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, produce::VERSIONS.0, produce::VERSIONS.1),
    (ApiKey::Fetch, fetch::VERSIONS.0, fetch::VERSIONS.1),
    (
        ApiKey::ListOffsets,
        list_offsets::VERSIONS.0,
        list_offsets::VERSIONS.1,
    ),
    (ApiKey::Metadata, metadata::VERSIONS.0, metadata::VERSIONS.1),
    (
        ApiKey::ApiVersions,
        api_versions::VERSIONS.0,
        api_versions::VERSIONS.1,
    ),
    (
        ApiKey::CreateTopics,
        create_topics::VERSIONS.0,
        create_topics::VERSIONS.1,
    ),
    (
        ApiKey::DeleteTopics,
        delete_topics::VERSIONS.0,
        delete_topics::VERSIONS.1,
    ),
    (
        ApiKey::DeleteRecords,
        delete_records::VERSIONS.0,
        delete_records::VERSIONS.1,
    ),
    (
        ApiKey::InitProducerId,
        init_producer_id::VERSIONS.0,
        init_producer_id::VERSIONS.1,
    ),
    (
        ApiKey::OffsetForLeaderEpoch,
        offset_for_leader_epoch::VERSIONS.0,
        offset_for_leader_epoch::VERSIONS.1,
    ),
    (
        ApiKey::DescribeConfigs,
        describe_configs::VERSIONS.0,
        describe_configs::VERSIONS.1,
    ),
    (
        ApiKey::CreatePartitions,
        create_partitions::VERSIONS.0,
        create_partitions::VERSIONS.1,
    ),
    (
        ApiKey::IncrementalAlterConfigs,
        incremental_alter_configs::VERSIONS.0,
        incremental_alter_configs::VERSIONS.1,
    ),
    (
        ApiKey::DescribeCluster,
        describe_cluster::VERSIONS.0,
        describe_cluster::VERSIONS.1,
    ),
    (
        ApiKey::DescribeQuorum,
        describe_quorum::VERSIONS.0,
        describe_quorum::VERSIONS.1,
    ),
    (
        ApiKey::ElectLeaders,
        elect_leaders::VERSIONS.0,
        elect_leaders::VERSIONS.1,
    ),
    (
        ApiKey::AlterPartitionReassignments,
        partition_reassignments::ALTER_VERSIONS.0,
        partition_reassignments::ALTER_VERSIONS.1,
    ),
    (
        ApiKey::ListPartitionReassignments,
        partition_reassignments::LIST_VERSIONS.0,
        partition_reassignments::LIST_VERSIONS.1,
    ),
    (
        ApiKey::FindCoordinator,
        find_coordinator::VERSIONS.0,
        find_coordinator::VERSIONS.1,
    ),
];

/// How long a data request waits for the replicas to catch up with the metadata image.
const REPLICAS_APPLY_WAIT: Duration = Duration::from_secs(2);

pub fn supported_versions(api_key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED_APIS
        .iter()
        .find(|(key, _, _)| *key == api_key)
        .map(|(_, min, max)| (*min, *max))
}

/// What a handler knows of the request beyond its body.
#[derive(Debug, Clone)]
pub struct RequestContext {
    pub api_key: ApiKey,
    pub api_version: i16,
    pub client_id: Option<String>,
    /// The listener the request came in on: Metadata answers with that listener's endpoints.
    pub listener_name: String,
    pub peer: SocketAddr,
    pub received: Instant,
}

/// Everything handlers work with.
pub struct Broker {
    pub config: ServerConfig,
    pub broker_id: BrokerId,
    pub quorum: Arc<Quorum>,
    pub replicas: Arc<ReplicaManager>,
    pub metrics: Arc<Metrics>,
    pub producer_ids: ProducerIdManager,
    pub fetch_sessions: FetchSessionCache,
    /// This broker's registration epoch (-1 until registered) and fenced state, kept by the
    /// broker lifecycle.
    pub broker_epoch: Arc<AtomicI64>,
    pub fenced: Arc<AtomicBool>,
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

    /// A request to the active controller; the answer or (code, message).
    pub async fn call_controller(
        &self,
        request: ControllerRequest,
        timeout: Duration,
    ) -> Result<ControllerResponse, (i16, String)> {
        match call_controller(&self.quorum, &self.voters(), &request, timeout).await {
            Ok(ControllerResponse::Error { code, message }) => Err((code, message)),
            Ok(ControllerResponse::NotController { .. }) => Err((
                errors::NOT_CONTROLLER,
                "no active controller answered".into(),
            )),
            Ok(response) => Ok(response),
            Err(error) => Err((errors::REQUEST_TIMED_OUT, error.to_string())),
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

/// The partition this broker leads, with its state, or the error code a client gets: the
/// partition is unknown (UNKNOWN_TOPIC_OR_PARTITION), led elsewhere (NOT_LEADER_OR_FOLLOWER),
/// or the client's leader epoch is older (FENCED_LEADER_EPOCH) or newer (UNKNOWN_LEADER_EPOCH)
/// than ours. `current_leader_epoch` -1 skips the epoch check.
pub(crate) fn led_partition(
    broker: &Broker,
    image: &MetadataImage,
    topic: &str,
    partition: i32,
    current_leader_epoch: i32,
) -> Result<(Arc<Partition>, PartitionState), i16> {
    let tp = crate::log::TopicPartition::new(topic, partition);
    let Some(found) = broker.replicas.partition(&tp) else {
        let known = image
            .topic_by_name(topic)
            .is_some_and(|t| t.partitions.contains_key(&partition));
        return Err(if known {
            errors::NOT_LEADER_OR_FOLLOWER
        } else {
            errors::UNKNOWN_TOPIC_OR_PARTITION
        });
    };
    let state = found.state();
    if state.leader != broker.broker_id {
        return Err(errors::NOT_LEADER_OR_FOLLOWER);
    }
    if current_leader_epoch >= 0 && current_leader_epoch != state.leader_epoch {
        return Err(if current_leader_epoch < state.leader_epoch {
            errors::FENCED_LEADER_EPOCH
        } else {
            errors::UNKNOWN_LEADER_EPOCH
        });
    }
    Ok((found, state))
}

/// A registered broker's endpoint on the named listener (the one a request came in on).
pub(crate) fn listener_endpoint<'a>(
    broker: &'a sluice_raft::image::BrokerRegistration,
    listener: &str,
) -> Option<&'a sluice_raft::records::Endpoint> {
    broker
        .registration
        .endpoints
        .iter()
        .find(|e| e.name == listener)
}

pub(crate) fn str_bytes(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}

pub(crate) fn kafka_uuid(id: sluice_raft::records::Uuid) -> uuid::Uuid {
    uuid::Uuid::from_u128(id.0)
}

pub(crate) fn our_uuid(id: uuid::Uuid) -> sluice_raft::records::Uuid {
    sluice_raft::records::Uuid(id.as_u128())
}

/// What a handler answers: a message the codec encodes, or a Fetch response whose records are
/// sent from the segment files as they are.
pub enum Answer {
    Message(Box<ResponseKind>),
    Fetch(FetchAnswer),
    /// No response: close the connection (Produce with acks=0 that failed).
    Close,
}

/// Answers a decoded request; `None` when no response is due (Produce with acks=0).
pub async fn dispatch(
    broker: &Arc<Broker>,
    context: &RequestContext,
    request: RequestKind,
) -> Option<Answer> {
    let version = context.api_version;
    if matches!(
        request,
        RequestKind::Metadata(_)
            | RequestKind::Produce(_)
            | RequestKind::Fetch(_)
            | RequestKind::ListOffsets(_)
            | RequestKind::DeleteRecords(_)
            | RequestKind::OffsetForLeaderEpoch(_)
    ) {
        // Serve data requests, and Metadata that sends clients to leaders, on replicas at
        // least as new as the image this node has (after a restart: once caught up to its
        // registration, bounded).
        let index = broker.quorum.image().index;
        broker
            .replicas
            .wait_applied(index, REPLICAS_APPLY_WAIT)
            .await;
    }
    if let RequestKind::Fetch(r) = request {
        return Some(Answer::Fetch(fetch::handle(broker, context, r).await));
    }
    Some(Answer::Message(Box::new(match request {
        RequestKind::ApiVersions(r) => ResponseKind::ApiVersions(api_versions::handle(&r, version)),
        RequestKind::Metadata(r) => {
            ResponseKind::Metadata(metadata::handle(broker, context, r).await)
        }
        RequestKind::Produce(r) => {
            return produce::handle(broker, context, r).await.map(|r| match r {
                Ok(r) => Answer::Message(Box::new(ResponseKind::Produce(r))),
                Err(()) => Answer::Close,
            });
        }
        RequestKind::ListOffsets(r) => {
            ResponseKind::ListOffsets(list_offsets::handle(broker, context, r))
        }
        RequestKind::CreateTopics(r) => {
            ResponseKind::CreateTopics(create_topics::handle(broker, context, r).await)
        }
        RequestKind::DeleteTopics(r) => {
            ResponseKind::DeleteTopics(delete_topics::handle(broker, context, r).await)
        }
        RequestKind::CreatePartitions(r) => {
            ResponseKind::CreatePartitions(create_partitions::handle(broker, context, r).await)
        }
        RequestKind::DescribeConfigs(r) => {
            ResponseKind::DescribeConfigs(describe_configs::handle(broker, context, r))
        }
        RequestKind::IncrementalAlterConfigs(r) => ResponseKind::IncrementalAlterConfigs(
            incremental_alter_configs::handle(broker, context, r).await,
        ),
        RequestKind::DescribeCluster(r) => {
            ResponseKind::DescribeCluster(describe_cluster::handle(broker, context, r))
        }
        RequestKind::DeleteRecords(r) => {
            ResponseKind::DeleteRecords(delete_records::handle(broker, context, r))
        }
        RequestKind::OffsetForLeaderEpoch(r) => {
            ResponseKind::OffsetForLeaderEpoch(offset_for_leader_epoch::handle(broker, context, r))
        }
        RequestKind::DescribeQuorum(r) => {
            ResponseKind::DescribeQuorum(describe_quorum::handle(broker, context, r).await)
        }
        RequestKind::ElectLeaders(r) => {
            ResponseKind::ElectLeaders(elect_leaders::handle(broker, context, r).await)
        }
        RequestKind::AlterPartitionReassignments(r) => ResponseKind::AlterPartitionReassignments(
            partition_reassignments::alter(broker, context, r).await,
        ),
        RequestKind::ListPartitionReassignments(r) => ResponseKind::ListPartitionReassignments(
            partition_reassignments::list(broker, context, r),
        ),
        RequestKind::FindCoordinator(r) => {
            ResponseKind::FindCoordinator(find_coordinator::handle(context, r))
        }
        RequestKind::InitProducerId(r) => {
            ResponseKind::InitProducerId(init_producer_id::handle(broker, context, r).await)
        }
        // The server refuses APIs outside the registry before decoding them.
        other => {
            tracing::warn!(api = ?context.api_key, "no handler for a registered API");
            drop(other);
            return None;
        }
    })))
}
