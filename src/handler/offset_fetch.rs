//! OffsetFetch: a group's committed offsets (one group before v8, several from v8; every
//! partition with an offset when no topics are named). A partition without one answers
//! offset -1.
//!
//! DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED for the group otherwise), then DESCRIBE
//! on each topic (Kafka's checks): a named topic the principal may not describe answers
//! TOPIC_AUTHORIZATION_FAILED in its partitions; when every offset is asked for, such topics
//! are left out, so their names do not leak.

use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{OffsetFetchRequest, OffsetFetchResponse, TopicName};

use std::collections::{BTreeMap, BTreeSet};

use super::offset_commit::refused_topics;
use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::group::CommittedOffset;
use crate::protocol::TopicPartition;
use crate::protocol::errors::{self, KafkaError};
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (1, 9);

/// A partition's answer: its index, committed offset or none, and its own error
/// (UNSTABLE_OFFSET_COMMIT while a transaction holds its offset, KIP-447).
type PartitionOffset = (i32, Option<CommittedOffset>, Result<(), KafkaError>);
/// A topic's partitions.
type TopicOffsets = (String, Vec<PartitionOffset>);
/// One group's answer, or its error.
type Fetched = Result<Vec<TopicOffsets>, KafkaError>;

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: OffsetFetchRequest,
) -> OffsetFetchResponse {
    if context.api_version >= 8 {
        if request.groups.is_empty() {
            // No group: nothing to ask (Kafka asks per group).
            context.access.open_to_all();
        }
        let mut groups = Vec::with_capacity(request.groups.len());
        for group in request.groups {
            groups.push({
                let wanted = group.topics.map(|topics| {
                    topics
                        .into_iter()
                        .map(|t| (t.name.to_string(), t.partition_indexes))
                        .collect()
                });
                let group_id = group.group_id.to_string();
                let fetched =
                    fetch(broker, context, &group_id, wanted, request.require_stable).await;
                let mut answer = OffsetFetchResponseGroup::default().with_group_id(group.group_id);
                match fetched {
                    Err(error) => answer.error_code = error.code(),
                    Ok(topics) => {
                        answer.topics = topics
                            .into_iter()
                            .map(|(name, partitions)| {
                                OffsetFetchResponseTopics::default()
                                    .with_name(TopicName(str_bytes(name)))
                                    .with_partitions(
                                        partitions
                                            .into_iter()
                                            .map(|(index, offset, error)| {
                                                let (o, epoch, metadata) = parts(offset);
                                                OffsetFetchResponsePartitions::default()
                                                    .with_partition_index(index)
                                                    .with_committed_offset(o)
                                                    .with_committed_leader_epoch(epoch)
                                                    .with_metadata(Some(str_bytes(metadata)))
                                                    .with_error_code(errors::code_of(&error))
                                            })
                                            .collect(),
                                    )
                            })
                            .collect();
                    }
                }
                answer
            });
        }
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let wanted = request.topics.map(|topics| {
        topics
            .into_iter()
            .map(|t| (t.name.to_string(), t.partition_indexes))
            .collect::<Vec<_>>()
    });
    let group_id = request.group_id.to_string();
    let mut response = OffsetFetchResponse::default();
    let require_stable = context.api_version >= 7 && request.require_stable;
    match fetch(broker, context, &group_id, wanted.clone(), require_stable).await {
        Ok(topics) => {
            response.topics = topics
                .into_iter()
                .map(|(name, partitions)| topic_v1(name, partitions, Ok(())))
                .collect();
        }
        Err(error) => {
            if context.api_version >= 2 {
                response.error_code = error.code();
            } else {
                // v1 has no top-level error: every partition carries it.
                response.topics = wanted
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(name, indexes)| {
                        let partitions = indexes.into_iter().map(|i| (i, None, Ok(()))).collect();
                        topic_v1(name, partitions, Err(error))
                    })
                    .collect();
            }
        }
    }
    response
}

fn topic_v1(
    name: String,
    partitions: Vec<PartitionOffset>,
    fetched: Result<(), KafkaError>,
) -> OffsetFetchResponseTopic {
    OffsetFetchResponseTopic::default()
        .with_name(TopicName(str_bytes(name)))
        .with_partitions(
            partitions
                .into_iter()
                .map(|(index, offset, error)| {
                    let (o, epoch, metadata) = parts(offset);
                    OffsetFetchResponsePartition::default()
                        .with_partition_index(index)
                        .with_committed_offset(o)
                        .with_committed_leader_epoch(epoch)
                        .with_metadata(Some(str_bytes(metadata)))
                        .with_error_code(errors::code_of(&fetched.and(error)))
                })
                .collect(),
        )
}

fn parts(offset: Option<CommittedOffset>) -> (i64, i32, String) {
    match offset {
        Some(o) => (o.offset, o.leader_epoch, o.metadata),
        None => (-1, -1, String::new()),
    }
}

async fn fetch(
    broker: &Broker,
    context: &RequestContext,
    group_id: &str,
    wanted: Option<Vec<(String, Vec<i32>)>>,
    require_stable: bool,
) -> Fetched {
    if !context.access.allows_group(Operation::Describe, group_id) {
        return Err(KafkaError::GroupAuthorizationFailed);
    }
    let describable = |topic: &str| context.access.allows_topic(Operation::Describe, topic);
    if group_id.is_empty() {
        return Err(KafkaError::InvalidGroupId);
    }
    match wanted {
        None => {
            let (offsets, unstable) = broker
                .groups
                .fetch_offsets(group_id, None, require_stable)
                .await?;
            let mut all: BTreeMap<TopicPartition, Option<CommittedOffset>> =
                offsets.into_iter().map(|(p, o)| (p, Some(o))).collect();
            for partition in &unstable {
                all.insert(partition.clone(), None);
            }
            // Offsets of topics the principal may not describe are left out.
            let refused = refused_topics(all.keys().map(|tp| tp.topic.as_str()), describable);
            all.retain(|tp, _| !refused.contains(&tp.topic));
            let mut topics: Vec<TopicOffsets> = Vec::new();
            for (tp, offset) in all {
                let answer = stability(&unstable, &tp, offset);
                let TopicPartition { topic, partition } = tp;
                match topics.last_mut() {
                    Some((name, partitions)) if *name == topic => {
                        partitions.push((partition, answer.0, answer.1))
                    }
                    _ => topics.push((topic, vec![(partition, answer.0, answer.1)])),
                }
            }
            Ok(topics)
        }
        Some(wanted) => {
            let refused = refused_topics(wanted.iter().map(|(t, _)| t.as_str()), describable);
            let keys: Vec<TopicPartition> = wanted
                .iter()
                .filter(|(t, _)| !refused.contains(t))
                .flat_map(|(t, ps)| ps.iter().map(move |p| TopicPartition::new(t.as_str(), *p)))
                .collect();
            let (mut offsets, unstable) = broker
                .groups
                .fetch_offsets(group_id, Some(&keys), require_stable)
                .await?;
            Ok(wanted
                .into_iter()
                .map(|(topic, indexes)| {
                    let denied = refused.contains(&topic);
                    let partitions = indexes
                        .into_iter()
                        .map(|i| {
                            if denied {
                                return (i, None, Err(KafkaError::TopicAuthorizationFailed));
                            }
                            let tp = TopicPartition::new(topic.as_str(), i);
                            let offset = offsets.remove(&tp);
                            let (offset, error) = stability(&unstable, &tp, offset);
                            (i, offset, error)
                        })
                        .collect();
                    (topic, partitions)
                })
                .collect())
        }
    }
}

/// An unstable partition answers UNSTABLE_OFFSET_COMMIT and no offset.
fn stability(
    unstable: &BTreeSet<TopicPartition>,
    partition: &TopicPartition,
    offset: Option<CommittedOffset>,
) -> (Option<CommittedOffset>, Result<(), KafkaError>) {
    if unstable.contains(partition) {
        (None, Err(KafkaError::UnstableOffsetCommit))
    } else {
        (offset, Ok(()))
    }
}
