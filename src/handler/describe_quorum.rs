//! DescribeQuorum (KIP-595/853): the metadata quorum as its leader sees it, forwarded to the
//! active controller, as Kafka's brokers do (`kafka-metadata-quorum --bootstrap-server`).

use std::time::Duration;

use kafka_protocol::messages::describe_quorum_response::{
    Listener, Node, PartitionData, ReplicaState, TopicData,
};
use kafka_protocol::messages::{BrokerId, DescribeQuorumRequest, DescribeQuorumResponse};

use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::controller::service::{ControllerRequest, ControllerResponse};
use crate::protocol::errors::KafkaError;
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (0, 2);

/// The metadata log's name in Kafka.
pub const METADATA_TOPIC: &str = "__cluster_metadata";

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: DescribeQuorumRequest,
) -> DescribeQuorumResponse {
    if !context.access.allows_cluster(Operation::Describe) {
        return DescribeQuorumResponse::default()
            .with_error_code(KafkaError::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str_bytes("Cluster authorization failed.")));
    }
    let wanted = request.topics.iter().any(|t| {
        t.topic_name.0.as_str() == METADATA_TOPIC
            && t.partitions.iter().any(|p| p.partition_index == 0)
    });
    if !wanted {
        return DescribeQuorumResponse::default()
            .with_error_code(KafkaError::InvalidRequest.code())
            .with_error_message(Some(str_bytes("only __cluster_metadata-0 has a quorum")));
    }
    let description = match broker
        .call_controller(ControllerRequest::DescribeQuorum, Duration::from_secs(10))
        .await
    {
        Ok(ControllerResponse::Quorum(description)) => description,
        Ok(other) => {
            return DescribeQuorumResponse::default()
                .with_error_code(KafkaError::UnknownServerError.code())
                .with_error_message(Some(str_bytes(format!("unexpected answer {other:?}"))));
        }
        Err(error) => {
            return DescribeQuorumResponse::default()
                .with_error_code(error.error.code())
                .with_error_message(Some(str_bytes(error.message)));
        }
    };
    let state = |m: &crate::controller::service::MemberDescription| {
        ReplicaState::default()
            .with_replica_id(BrokerId(m.node_id as i32))
            .with_log_end_offset(m.matched_index.map_or(-1, |i| i as i64))
    };
    let partition = PartitionData::default()
        .with_partition_index(0)
        .with_leader_id(BrokerId(description.leader as i32))
        .with_leader_epoch(description.term as i32)
        .with_high_watermark(description.commit_index as i64)
        .with_current_voters(
            description
                .members
                .iter()
                .filter(|m| m.voter)
                .map(state)
                .collect(),
        )
        .with_observers(
            description
                .members
                .iter()
                .filter(|m| !m.voter)
                .map(state)
                .collect(),
        );
    let mut response = DescribeQuorumResponse::default().with_topics(vec![
        TopicData::default()
            .with_topic_name(kafka_protocol::messages::TopicName(str_bytes(
                METADATA_TOPIC,
            )))
            .with_partitions(vec![partition]),
    ]);
    if context.api_version >= 2 {
        response.nodes = description
            .members
            .iter()
            .filter(|m| m.voter)
            .filter_map(|m| {
                let (host, port) = m.addr.rsplit_once(':')?;
                Some(
                    Node::default()
                        .with_node_id(BrokerId(m.node_id as i32))
                        .with_listeners(vec![
                            Listener::default()
                                .with_name(str_bytes(
                                    broker.config.controller_listener_name.clone(),
                                ))
                                .with_host(str_bytes(host))
                                .with_port(port.parse().ok()?),
                        ]),
                )
            })
            .collect();
    }
    response
}
