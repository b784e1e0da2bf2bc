//! ElectLeaders (KIP-460): preferred or unclean elections on request, decided by the active
//! controller (`kafka-leader-election.sh`, AdminClient `elect_leaders`).

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};

use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::controller::service::{ControllerRequest, ControllerResponse};
use crate::protocol::TopicPartition;
use crate::protocol::errors::KafkaError;
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (0, 2);

const ELECTION_WAIT_MAX: Duration = Duration::from_secs(30);

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: ElectLeadersRequest,
) -> ElectLeadersResponse {
    // v0 has no election type: preferred.
    let election_type = if context.api_version >= 1 {
        request.election_type
    } else {
        0
    };
    let partitions = request.topic_partitions.as_ref().map(|topics| {
        topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| TopicPartition::new(t.topic.to_string(), *p))
            })
            .collect::<Vec<_>>()
    });
    if !context.access.allows_cluster(Operation::Alter) {
        // Kafka answers every partition named, and the request, CLUSTER_AUTHORIZATION_FAILED.
        let denied = KafkaError::ClusterAuthorizationFailed.code();
        let mut response = answer(
            partitions
                .unwrap_or_default()
                .into_iter()
                .map(|tp| (tp.topic, tp.partition, denied))
                .collect(),
        );
        if context.api_version >= 1 {
            response.error_code = denied;
        }
        return response;
    }
    let timeout = if request.timeout_ms > 0 {
        Duration::from_millis(request.timeout_ms as u64).min(ELECTION_WAIT_MAX)
    } else {
        ELECTION_WAIT_MAX
    };
    let call = ControllerRequest::ElectLeaders {
        election_type,
        partitions,
    };
    let results = match broker.call_controller(call, timeout).await {
        Ok(ControllerResponse::Elections(results)) => results,
        Ok(_) => Vec::new(),
        Err(error) => {
            let mut response = ElectLeadersResponse::default();
            if context.api_version >= 1 {
                response.error_code = error.error.code();
            }
            tracing::warn!(code = error.error.code(), message = %error.message, "ElectLeaders failed");
            return response;
        }
    };
    answer(results)
}

/// The response of per-partition results (topic, partition, error code).
fn answer(results: Vec<(String, i32, i16)>) -> ElectLeadersResponse {
    let mut by_topic: BTreeMap<String, Vec<PartitionResult>> = BTreeMap::new();
    for (topic, partition, code) in results {
        let mut result = PartitionResult::default()
            .with_partition_id(partition)
            .with_error_code(code);
        if let Err(error) = KafkaError::check(code) {
            result.error_message = Some(str_bytes(match error {
                KafkaError::ElectionNotNeeded => "the preferred replica already leads",
                KafkaError::PreferredLeaderNotAvailable => {
                    "the preferred replica is not alive and in the ISR"
                }
                KafkaError::EligibleLeadersNotAvailable => "no live replica to elect",
                KafkaError::ClusterAuthorizationFailed => "Cluster authorization failed.",
                _ => "election failed",
            }));
        }
        by_topic.entry(topic).or_default().push(result);
    }
    ElectLeadersResponse::default().with_replica_election_results(
        by_topic
            .into_iter()
            .map(|(topic, partition_result)| {
                ReplicaElectionResult::default()
                    .with_topic(TopicName(str_bytes(topic)))
                    .with_partition_result(partition_result)
            })
            .collect(),
    )
}
