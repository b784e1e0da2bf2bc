//! OffsetForLeaderEpoch: where a leader epoch ends in this leader's log (KIP-101/279), for a
//! follower or consumer to find where its log diverged.

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use super::RequestContext;
use crate::broker::Broker;
use crate::protocol::errors::KafkaError;
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (2, 4);

pub fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let image = broker.image();
    // A follower (replica_id >= 0, v3+) needs CLUSTER_ACTION; its partitions are refused
    // with the cluster's error when it lacks it.
    let follower = request.replica_id.0 >= 0;
    let cluster_action = follower && context.access.allows_cluster(Operation::ClusterAction);
    if request.topics.is_empty() {
        context.access.open_to_all();
    }
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.topic.to_string();
            let allowed = if follower {
                cluster_action
            } else {
                context.access.allows_topic(Operation::Describe, &name)
            };
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let response = EpochEndOffset::default()
                        .with_partition(p.partition)
                        .with_leader_epoch(-1)
                        .with_end_offset(-1);
                    if !allowed {
                        let denial = if follower {
                            KafkaError::ClusterAuthorizationFailed
                        } else {
                            KafkaError::TopicAuthorizationFailed
                        };
                        return response.with_error_code(denial.code());
                    }
                    let (partition, _) = match broker.led_partition(
                        &image,
                        &name,
                        p.partition,
                        p.current_leader_epoch,
                    ) {
                        Ok(found) => found,
                        Err(error) => return response.with_error_code(error.code()),
                    };
                    match partition.end_offset_for_epoch(p.leader_epoch) {
                        Some((epoch, end_offset)) => response
                            .with_leader_epoch(epoch)
                            .with_end_offset(end_offset as i64),
                        None => response,
                    }
                })
                .collect();
            OffsetForLeaderTopicResult::default()
                .with_topic(topic.topic)
                .with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}
