//! # The controller's decisions
//!
//! The active controller is the quorum leader. Each decision here reads the current
//! `MetadataImage` and returns the records that carry it out, or the Kafka error a client gets;
//! nothing here touches the network or disk, so every rule is tested on plain images. The
//! records take effect only once the quorum commits them (nodes act on committed metadata).
//! `service` is the part that does touch the network: it receives requests on the quorum
//! listener, proposes the records and answers once they commit.
//!
//! By subject:
//! - `topics`: creation (validation, placement in `placement`), deletion, partitions added;
//! - `brokers`: registration, fencing (leaderships move to other ISR members) and unfencing;
//! - `elections`: leaders from the last committed ISR only, unless unclean election is enabled
//!   for the topic; ElectLeaders and the preferred-leader rebalance;
//! - `isr`: AlterPartition (ISR changes requested by a partition leader, checked against the
//!   partition and leader epochs);
//! - `reassignment`: AlterPartitionReassignments and their completion;
//! - `configs`: IncrementalAlterConfigs and topic config validation;
//! - `producer_ids`: producer id blocks;
//! - `security`: SCRAM credentials and ACLs;
//! - `client_quotas`: client quotas (AlterClientQuotas).

mod brokers;
pub mod client;
pub mod client_quotas;
mod configs;
mod elections;
mod isr;
pub mod placement;
mod producer_ids;
mod reassignment;
mod security;
pub mod service;
mod topics;

pub use brokers::*;
pub use configs::*;
pub use elections::*;
pub use isr::*;
pub use producer_ids::*;
pub use reassignment::*;
pub use security::*;
pub use topics::*;

use std::collections::BTreeMap;

use sluice_raft::MetadataImage;
use sluice_raft::image::PartitionRegistration;
use sluice_raft::records::{
    BrokerId, ConfigResource, MetadataRecord, NO_LEADER, PartitionChange, PartitionRecord,
    RegisterBroker, Uuid,
};

use crate::protocol::TopicPartition;
use crate::protocol::errors::{ApiError, KafkaError};
use crate::protocol::topic_partition::validate_topic_name;
use placement::Candidate;

/// Errors a client sees, each with its Kafka error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControllerError {
    #[error("topic '{0}' already exists")]
    TopicAlreadyExists(String),
    #[error("invalid topic: {0}")]
    InvalidTopic(String),
    #[error("invalid partitions: {0}")]
    InvalidPartitions(String),
    #[error("invalid replication factor: {0}")]
    InvalidReplicationFactor(String),
    #[error("invalid replica assignment: {0}")]
    InvalidReplicaAssignment(String),
    #[error("invalid config: {0}")]
    InvalidConfig(String),
    #[error("unknown topic or partition: {0}")]
    UnknownTopicOrPartition(String),
    #[error("broker {0} is not the leader of the partition")]
    NotLeaderOrFollower(BrokerId),
    #[error("stale leader epoch {got} (current {current})")]
    FencedLeaderEpoch { got: i32, current: i32 },
    #[error("stale partition epoch {got} (current {current})")]
    InvalidUpdateVersion { got: i32, current: i32 },
    #[error("replica {0} cannot join the ISR (unknown, fenced or not a replica)")]
    IneligibleReplica(BrokerId),
    #[error("stale broker epoch for broker {0}")]
    StaleBrokerEpoch(BrokerId),
}

impl ControllerError {
    pub fn kafka_error(&self) -> KafkaError {
        match self {
            ControllerError::TopicAlreadyExists(_) => KafkaError::TopicAlreadyExists,
            ControllerError::InvalidTopic(_) => KafkaError::InvalidTopicException,
            ControllerError::InvalidPartitions(_) => KafkaError::InvalidPartitions,
            ControllerError::InvalidReplicationFactor(_) => KafkaError::InvalidReplicationFactor,
            ControllerError::InvalidReplicaAssignment(_) => KafkaError::InvalidReplicaAssignment,
            ControllerError::InvalidConfig(_) => KafkaError::InvalidConfig,
            ControllerError::UnknownTopicOrPartition(_) => KafkaError::UnknownTopicOrPartition,
            ControllerError::NotLeaderOrFollower(_) => KafkaError::NotLeaderOrFollower,
            ControllerError::FencedLeaderEpoch { .. } => KafkaError::FencedLeaderEpoch,
            ControllerError::InvalidUpdateVersion { .. } => KafkaError::InvalidUpdateVersion,
            ControllerError::IneligibleReplica(_) => KafkaError::IneligibleReplica,
            ControllerError::StaleBrokerEpoch(_) => KafkaError::StaleBrokerEpoch,
        }
    }
}

/// The Kafka error with the message the client reads.
impl From<ControllerError> for ApiError {
    fn from(error: ControllerError) -> ApiError {
        ApiError::new(error.kafka_error(), error.to_string())
    }
}

/// A CreateTopics entry.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct NewTopic {
    pub name: String,
    /// -1: the broker default (`num.partitions`).
    pub partitions: i32,
    /// -1: the broker default (`default.replication.factor`).
    pub replication_factor: i16,
    /// Explicit replica lists by partition (then `partitions` and `replication_factor` are -1).
    pub assignments: BTreeMap<i32, Vec<BrokerId>>,
    pub configs: BTreeMap<String, String>,
}

/// Broker-wide defaults the controller applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Defaults {
    pub partitions: i32,
    pub replication_factor: i16,
    pub unclean_leader_election: bool,
}

fn candidates(image: &MetadataImage) -> Vec<Candidate> {
    image
        .unfenced_brokers()
        .map(|b| Candidate {
            id: b.registration.broker_id,
            rack: b.registration.rack.clone(),
        })
        .collect()
}

fn alive(image: &MetadataImage, broker: BrokerId) -> bool {
    image.brokers.get(&broker).is_some_and(|b| !b.fenced)
}

fn unclean_allowed(image: &MetadataImage, topic: &str, defaults: &Defaults) -> bool {
    image
        .configs
        .get(&ConfigResource::Topic(topic.to_owned()))
        .and_then(|c| c.get("unclean.leader.election.enable"))
        .map_or(defaults.unclean_leader_election, |v| v == "true")
}

#[cfg(test)]
mod tests;
