//! OffsetForLeaderEpoch: where a leader epoch ends in this leader's log (KIP-101/279), for a
//! follower or consumer to find where its log diverged.

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use super::RequestContext;
use crate::broker::Broker;

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
