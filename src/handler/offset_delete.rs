//! OffsetDelete: removes a group's committed offsets for partitions of topics its members do
//! not subscribe to (those get GROUP_SUBSCRIBED_TO_TOPIC). Kafka's checks: DELETE on the
//! group (a top-level GROUP_AUTHORIZATION_FAILED), then READ on each topic (its partitions
//! answer TOPIC_AUTHORIZATION_FAILED before whether they exist is looked at).

use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};

use super::RequestContext;
use super::offset_commit::refused_topics;
use crate::broker::Broker;
use crate::protocol::TopicPartition;
use crate::protocol::errors::{self, KafkaError};
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (0, 0);

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: OffsetDeleteRequest,
) -> OffsetDeleteResponse {
    let group_id = request.group_id.to_string();
    if !context.access.allows_group(Operation::Delete, &group_id) {
        return OffsetDeleteResponse::default().with_error_code(errors::GROUP_AUTHORIZATION_FAILED);
    }
    let refused = refused_topics(request.topics.iter().map(|t| t.name.as_str()), |topic| {
        context.access.allows_topic(Operation::Read, topic)
    });
    if group_id.is_empty() {
        return OffsetDeleteResponse::default().with_error_code(errors::INVALID_GROUP_ID);
    }
    let image = broker.image();
    let mut keys = Vec::new();
    // Per partition: the error decided here, or None for the coordinator to decide.
    let mut decided = Vec::new();
    for topic in &request.topics {
        let known = image.topic_by_name(&topic.name);
        let denied = refused.contains(topic.name.as_str());
        for partition in &topic.partitions {
            let exists =
                known.is_some_and(|t| t.partitions.contains_key(&partition.partition_index));
            decided.push(if denied {
                Some(KafkaError::TopicAuthorizationFailed)
            } else if !exists {
                Some(KafkaError::UnknownTopicOrPartition)
            } else {
                None
            });
            if !denied && exists {
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
    let mut decided = decided.into_iter();
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let deleted = match decided.next() {
                        Some(Some(error)) => Err(error),
                        Some(None) => results
                            .next()
                            .unwrap_or(Err(KafkaError::UnknownServerError)),
                        None => Err(KafkaError::UnknownServerError),
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
