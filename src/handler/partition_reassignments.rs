//! AlterPartitionReassignments and ListPartitionReassignments (KIP-455): moving partition
//! replicas between brokers, decided by the active controller. A move adds the target replicas
//! at once; the controller drops the others when every target replica is in the ISR.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, TopicName,
};

use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::controller::service::{ControllerRequest, ControllerResponse};
use crate::protocol::TopicPartition;
use crate::protocol::errors::{ApiError, KafkaError};
use crate::security::acl::Operation;

pub const ALTER_VERSIONS: (i16, i16) = (0, 1);
pub const LIST_VERSIONS: (i16, i16) = (0, 0);

const REASSIGN_WAIT_MAX: Duration = Duration::from_secs(30);

pub async fn alter(
    broker: &Broker,
    context: &RequestContext,
    request: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    if !context.access.allows_cluster(Operation::Alter) {
        return AlterPartitionReassignmentsResponse::default()
            .with_error_code(KafkaError::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str_bytes("Cluster authorization failed.")));
    }
    let image = broker.image();
    let allow_factor_change = context.api_version < 1 || request.allow_replication_factor_change;
    let mut refused: BTreeMap<TopicPartition, Result<(), ApiError>> = BTreeMap::new();
    let mut moves = Vec::new();
    for topic in &request.topics {
        let name = topic.name.to_string();
        for p in &topic.partitions {
            let target: Option<Vec<i32>> =
                p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect());
            if let (Some(target), false) = (&target, allow_factor_change) {
                let current = image
                    .topic_by_name(&name)
                    .and_then(|t| t.partitions.get(&p.partition_index))
                    .map_or(0, |r| r.replicas.len());
                if target.len() != current {
                    refused.insert(
                        TopicPartition::new(name.as_str(), p.partition_index),
                        Err(ApiError::new(
                            KafkaError::InvalidReplicationFactor,
                            "the move changes the replication factor",
                        )),
                    );
                    continue;
                }
            }
            moves.push((name.clone(), p.partition_index, target));
        }
    }
    let timeout = if request.timeout_ms > 0 {
        Duration::from_millis(request.timeout_ms as u64).min(REASSIGN_WAIT_MAX)
    } else {
        REASSIGN_WAIT_MAX
    };
    let mut results: BTreeMap<TopicPartition, Result<(), ApiError>> = refused;
    if !moves.is_empty() {
        match broker
            .call_controller(ControllerRequest::Reassign(moves.clone()), timeout)
            .await
        {
            Ok(ControllerResponse::Reassignments(outcomes)) => {
                for (topic, partition, code, message) in outcomes {
                    let outcome =
                        KafkaError::check(code).map_err(|error| ApiError::new(error, message));
                    results.insert(TopicPartition::new(topic, partition), outcome);
                }
            }
            // A controller of an earlier version: codes without messages.
            Ok(ControllerResponse::Elections(outcomes)) => {
                for (topic, partition, code) in outcomes {
                    let outcome = KafkaError::check(code).map_err(|error| {
                        let message = match error {
                            KafkaError::NoReassignmentInProgress => "no reassignment in progress",
                            _ => "reassignment refused",
                        };
                        ApiError::new(error, message)
                    });
                    results.insert(TopicPartition::new(topic, partition), outcome);
                }
            }
            Ok(_) | Err(_) => {
                return AlterPartitionReassignmentsResponse::default()
                    .with_error_code(KafkaError::RequestTimedOut.code())
                    .with_error_message(Some(str_bytes("the controller did not answer")));
            }
        }
    }
    let mut topics: BTreeMap<String, Vec<ReassignablePartitionResponse>> = BTreeMap::new();
    for (TopicPartition { topic, partition }, outcome) in results {
        let mut response = ReassignablePartitionResponse::default().with_partition_index(partition);
        if let Err(refusal) = outcome {
            response.error_code = refusal.error.code();
            response.error_message = Some(str_bytes(refusal.message));
        }
        topics.entry(topic).or_default().push(response);
    }
    AlterPartitionReassignmentsResponse::default().with_responses(
        topics
            .into_iter()
            .map(|(name, partitions)| {
                ReassignableTopicResponse::default()
                    .with_name(TopicName(str_bytes(name)))
                    .with_partitions(partitions)
            })
            .collect(),
    )
}

pub fn list(
    broker: &Broker,
    context: &RequestContext,
    request: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    if !context.access.allows_cluster(Operation::Describe) {
        return ListPartitionReassignmentsResponse::default()
            .with_error_code(KafkaError::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str_bytes("Cluster authorization failed.")));
    }
    let image = broker.image();
    let wanted: Option<Vec<TopicPartition>> = request.topics.as_ref().map(|topics| {
        topics
            .iter()
            .flat_map(|t| {
                t.partition_indexes
                    .iter()
                    .map(|p| TopicPartition::new(t.name.to_string(), *p))
            })
            .collect()
    });
    let mut topics: BTreeMap<String, Vec<OngoingPartitionReassignment>> = BTreeMap::new();
    for ((topic_id, partition), reassignment) in &image.reassignments {
        let Some(topic) = image.topics.get(topic_id) else {
            continue;
        };
        if wanted.as_ref().is_some_and(|w| {
            !w.iter()
                .any(|tp| tp.topic == topic.name && tp.partition == *partition)
        }) {
            continue;
        }
        let Some(current) = topic.partitions.get(partition) else {
            continue;
        };
        let ids = |list: Vec<i32>| list.into_iter().map(BrokerId).collect::<Vec<_>>();
        let adding: Vec<i32> = reassignment
            .target
            .iter()
            .copied()
            .filter(|b| !reassignment.original.contains(b))
            .collect();
        let removing: Vec<i32> = current
            .replicas
            .iter()
            .copied()
            .filter(|b| !reassignment.target.contains(b))
            .collect();
        topics.entry(topic.name.clone()).or_default().push(
            OngoingPartitionReassignment::default()
                .with_partition_index(*partition)
                .with_replicas(ids(current.replicas.clone()))
                .with_adding_replicas(ids(adding))
                .with_removing_replicas(ids(removing)),
        );
    }
    ListPartitionReassignmentsResponse::default().with_topics(
        topics
            .into_iter()
            .map(|(name, partitions)| {
                OngoingTopicReassignment::default()
                    .with_name(TopicName(str_bytes(name)))
                    .with_partitions(partitions)
            })
            .collect(),
    )
}
