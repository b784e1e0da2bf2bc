//! OffsetCommit: a group's consumers (or a tool, with generation -1) store offsets in
//! `__consumer_offsets`, answered once the in-sync replicas hold them. READ on the group, then
//! READ on each topic (Kafka's checks, in its order); a refused topic's partitions answer
//! TOPIC_AUTHORIZATION_FAILED before whether they exist is looked at.

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};

use std::collections::BTreeSet;

use super::RequestContext;
use crate::broker::Broker;
use crate::group::{CommittedOffset, OffsetCommit};
use crate::protocol::TopicPartition;
use crate::protocol::errors::{self, KafkaError};
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (2, 9);

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: OffsetCommitRequest,
) -> OffsetCommitResponse {
    let group_id = request.group_id.to_string();
    if !context.access.allows_group(Operation::Read, &group_id) {
        return every_partition(request, KafkaError::GroupAuthorizationFailed);
    }
    let refused = refused_topics(request.topics.iter().map(|t| t.name.as_str()), |topic| {
        context.access.allows_topic(Operation::Read, topic)
    });
    let image = broker.image();
    // Per partition: Some(error) decided here, or None for the coordinator to decide.
    let mut decided = Vec::new();
    let mut commits = Vec::new();
    for topic in &request.topics {
        let known = image.topic_by_name(&topic.name);
        for partition in &topic.partitions {
            let exists =
                known.is_some_and(|t| t.partitions.contains_key(&partition.partition_index));
            if refused.contains(topic.name.as_str()) {
                decided.push(Some(KafkaError::TopicAuthorizationFailed));
            } else if group_id.is_empty() {
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

/// Every partition of the request answered with `error` (Kafka's error answer).
fn every_partition(request: OffsetCommitRequest, error: KafkaError) -> OffsetCommitResponse {
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(error.code())
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

/// The distinct topics among `names` that `allowed` refuses, asking it once per distinct
/// name however many times a batch names it (Kafka's `filterByAuthorized`). Shared by the
/// handlers that check topics of a batch (offsets, transactions, producers).
pub(super) fn refused_topics<'a>(
    names: impl IntoIterator<Item = &'a str>,
    mut allowed: impl FnMut(&str) -> bool,
) -> BTreeSet<String> {
    let distinct: BTreeSet<&str> = names.into_iter().collect();
    distinct
        .into_iter()
        .filter(|name| !allowed(name))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_distinct_topic_is_asked_once_and_only_the_refused_come_back() {
        let mut asked = Vec::new();
        let refused = refused_topics(["orders", "audit", "orders", "audit", "clicks"], |topic| {
            asked.push(topic.to_owned());
            topic != "audit"
        });
        asked.sort();
        assert_eq!(asked, ["audit", "clicks", "orders"]);
        assert_eq!(refused, BTreeSet::from(["audit".to_owned()]));
    }

    #[test]
    fn no_topics_ask_nothing() {
        let refused = refused_topics(std::iter::empty(), |_| panic!("asked about no topic"));
        assert!(refused.is_empty());
    }
}
