//! ListOffsets: the earliest, latest or max-timestamp offset of a partition, or the first
//! offset at or after a timestamp.

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use super::RequestContext;
use crate::broker::Broker;
use crate::protocol::errors::KafkaError;
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (1, 10);

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
/// KIP-405: the earliest offset on local storage, which is all storage here.
const EARLIEST_LOCAL: i64 = -4;
/// KIP-1005: the highest offset in remote storage; nothing is tiered here.
const LATEST_TIERED: i64 = -5;
const READ_COMMITTED: i8 = 1;

pub fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: ListOffsetsRequest,
) -> ListOffsetsResponse {
    let image = broker.image();
    if request.topics.is_empty() {
        context.access.open_to_all();
    }
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.name.to_string();
            let allowed = context.access.allows_topic(Operation::Describe, &name);
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let response = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index);
                    if !allowed {
                        return response
                            .with_error_code(KafkaError::TopicAuthorizationFailed.code());
                    }
                    let (partition, state) = match broker.led_partition(
                        &image,
                        &name,
                        p.partition_index,
                        p.current_leader_epoch,
                    ) {
                        Ok(found) => found,
                        Err(error) => return response.with_error_code(error.code()),
                    };
                    // The leader epoch is in responses from v4 on.
                    let epoch = if context.api_version >= 4 {
                        state.leader_epoch
                    } else {
                        -1
                    };
                    let at = |offset: u64| {
                        ListOffsetsPartitionResponse::default()
                            .with_partition_index(p.partition_index)
                            .with_offset(offset as i64)
                            .with_leader_epoch(epoch)
                    };
                    // read_committed sees what is decided: below the last stable offset.
                    let visible_end = if request.isolation_level == READ_COMMITTED {
                        partition.last_stable_offset()
                    } else {
                        partition.high_watermark()
                    };
                    let found = match p.timestamp {
                        LATEST => Ok(Some(at(visible_end))),
                        EARLIEST | EARLIEST_LOCAL => Ok(Some(at(partition.log_start_offset()))),
                        LATEST_TIERED => {
                            Ok(Some(response.clone().with_offset(-1).with_leader_epoch(-1)))
                        }
                        MAX_TIMESTAMP => partition
                            .max_timestamp_offset()
                            .map(|found| found.map(|(offset, ts)| at(offset).with_timestamp(ts))),
                        timestamp if timestamp >= 0 => partition
                            .offset_for_timestamp(timestamp)
                            .map(|found| found.map(|(offset, ts)| at(offset).with_timestamp(ts))),
                        _ => {
                            return response.with_error_code(KafkaError::InvalidRequest.code());
                        }
                    };
                    // A record found by its timestamp must be visible too.
                    let by_time = p.timestamp >= 0 || p.timestamp == MAX_TIMESTAMP;
                    let found = found
                        .map(|found| found.filter(|f| !by_time || (f.offset as u64) < visible_end));
                    match found {
                        // Nothing at or after the timestamp: offset -1, timestamp -1.
                        Ok(None) => response,
                        Ok(Some(found)) => found,
                        Err(error) => response.with_error_code(error.kafka_error().code()),
                    }
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}
