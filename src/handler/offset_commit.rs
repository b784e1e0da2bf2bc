//! OffsetCommit: a group's consumers (or a tool, with generation -1) store offsets in
//! `__consumer_offsets`, answered once the in-sync replicas hold them.

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};

use super::RequestContext;
use crate::broker::Broker;
use crate::group::{CommittedOffset, OffsetCommit};
use crate::protocol::TopicPartition;
use crate::protocol::errors::{self, KafkaError};

pub const VERSIONS: (i16, i16) = (2, 9);

pub async fn handle(
    broker: &Broker,
    _context: &RequestContext,
    request: OffsetCommitRequest,
) -> OffsetCommitResponse {
    let group_id = request.group_id.to_string();
    let image = broker.image();
    // Per partition: Some(error) decided here, or None for the coordinator to decide.
    let mut decided = Vec::new();
    let mut commits = Vec::new();
    for topic in &request.topics {
        let known = image.topic_by_name(&topic.name);
        for partition in &topic.partitions {
            let exists =
                known.is_some_and(|t| t.partitions.contains_key(&partition.partition_index));
            if group_id.is_empty() {
                decided.push(Some(KafkaError::InvalidGroupId));
            } else if !exists {
                decided.push(Some(KafkaError::UnknownTopicOrPartition));
            } else {
                decided.push(None);
                commits.push(OffsetCommit {
                    topic_partition: TopicPartition::new(
                        topic.name.to_string(),
                        partition.partition_index,
                    ),
                    offset: CommittedOffset {
                        offset: partition.committed_offset,
                        leader_epoch: partition.committed_leader_epoch,
                        metadata: partition
                            .committed_metadata
                            .as_ref()
                            .map(|m| m.to_string())
                            .unwrap_or_default(),
                        commit_timestamp_ms: -1,
                    },
                });
            }
        }
    }
    let outcome = if commits.is_empty() {
        Ok(Vec::new())
    } else {
        let instance = request.group_instance_id.as_ref().map(|i| i.to_string());
        broker
            .groups
            .commit(
                None,
                &group_id,
                &request.member_id,
                instance.as_deref(),
                request.generation_id_or_member_epoch,
                commits,
            )
            .await
    };
    let mut from_coordinator = match &outcome {
        Ok(results) => results.clone().into_iter(),
        Err(_) => Vec::new().into_iter(),
    };
    let mut decided = decided.into_iter();
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let committed = match decided.next().flatten() {
                        Some(error) => Err(error),
                        None => match &outcome {
                            Ok(_) => from_coordinator
                                .next()
                                .unwrap_or(Err(KafkaError::UnknownServerError)),
                            Err(error) => Err(*error),
                        },
                    };
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(errors::code_of(&committed))
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}
