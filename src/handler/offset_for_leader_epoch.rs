//! OffsetForLeaderEpoch: where a leader epoch ends in this leader's log (KIP-101/279), for a
//! follower or consumer to find where its log diverged.

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use super::{Broker, RequestContext};
use crate::log::TopicPartition;
use crate::protocol::errors;

pub const VERSIONS: (i16, i16) = (2, 4);

pub fn handle(
    broker: &Broker,
    _context: &RequestContext,
    request: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let image = broker.image();
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.topic.to_string();
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let response = EpochEndOffset::default()
                        .with_partition(p.partition)
                        .with_leader_epoch(-1)
                        .with_end_offset(-1);
                    let tp = TopicPartition::new(name.clone(), p.partition);
                    let Some(partition) = broker.replicas.partition(&tp) else {
                        let known = image
                            .topic_by_name(&name)
                            .is_some_and(|t| t.partitions.contains_key(&p.partition));
                        return response.with_error_code(if known {
                            errors::NOT_LEADER_OR_FOLLOWER
                        } else {
                            errors::UNKNOWN_TOPIC_OR_PARTITION
                        });
                    };
                    let state = partition.state();
                    if state.leader != broker.broker_id {
                        return response.with_error_code(errors::NOT_LEADER_OR_FOLLOWER);
                    }
                    if p.current_leader_epoch >= 0 && p.current_leader_epoch != state.leader_epoch {
                        return response.with_error_code(
                            if p.current_leader_epoch < state.leader_epoch {
                                errors::FENCED_LEADER_EPOCH
                            } else {
                                errors::UNKNOWN_LEADER_EPOCH
                            },
                        );
                    }
                    match partition.log.end_offset_for_epoch(p.leader_epoch) {
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
