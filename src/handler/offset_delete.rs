//! OffsetDelete: removes a group's committed offsets for partitions of topics its members do
//! not subscribe to (those get GROUP_SUBSCRIBED_TO_TOPIC).

use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};

use super::RequestContext;
use crate::broker::Broker;
use crate::protocol::TopicPartition;
use crate::protocol::errors::{self, KafkaError};

pub const VERSIONS: (i16, i16) = (0, 0);

pub async fn handle(
    broker: &Broker,
    _context: &RequestContext,
    request: OffsetDeleteRequest,
) -> OffsetDeleteResponse {
    let group_id = request.group_id.to_string();
    if group_id.is_empty() {
        return OffsetDeleteResponse::default().with_error_code(errors::INVALID_GROUP_ID);
    }
    let image = broker.image();
    let mut keys = Vec::new();
    let mut unknown = Vec::new();
    for topic in &request.topics {
        let known = image.topic_by_name(&topic.name);
        for partition in &topic.partitions {
            let exists =
                known.is_some_and(|t| t.partitions.contains_key(&partition.partition_index));
            unknown.push(!exists);
            if exists {
                keys.push(TopicPartition::new(
                    topic.name.to_string(),
                    partition.partition_index,
                ));
            }
        }
    }
    let results = match broker.groups.delete_offsets(&group_id, &keys).await {
        Ok(results) => results,
        Err(error) => return OffsetDeleteResponse::default().with_error_code(error.code()),
    };
    let mut results = results.into_iter();
    let mut unknown = unknown.into_iter();
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let deleted = if unknown.next().unwrap_or(true) {
                        Err(KafkaError::UnknownTopicOrPartition)
                    } else {
                        results
                            .next()
                            .unwrap_or(Err(KafkaError::UnknownServerError))
                    };
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(errors::code_of(&deleted))
                })
                .collect();
            OffsetDeleteResponseTopic::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    OffsetDeleteResponse::default().with_topics(topics)
}
