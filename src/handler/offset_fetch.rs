//! OffsetFetch: a group's committed offsets (one group before v8, several from v8; every
//! partition with an offset when no topics are named). A partition without one answers
//! offset -1.

use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{OffsetFetchRequest, OffsetFetchResponse, TopicName};

use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::group::CommittedOffset;
use crate::protocol::TopicPartition;
use crate::protocol::errors::{self, KafkaError};

pub const VERSIONS: (i16, i16) = (1, 9);

/// A topic's partitions: (index, committed offset or none).
type TopicOffsets = (String, Vec<(i32, Option<CommittedOffset>)>);
/// One group's answer, or its error.
type Fetched = Result<Vec<TopicOffsets>, KafkaError>;

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: OffsetFetchRequest,
) -> OffsetFetchResponse {
    if context.api_version >= 8 {
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
                let fetched = fetch(broker, &group_id, wanted).await;
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
                                            .map(|(index, offset)| {
                                                let (o, epoch, metadata) = parts(offset);
                                                OffsetFetchResponsePartitions::default()
                                                    .with_partition_index(index)
                                                    .with_committed_offset(o)
                                                    .with_committed_leader_epoch(epoch)
                                                    .with_metadata(Some(str_bytes(metadata)))
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
    match fetch(broker, &group_id, wanted.clone()).await {
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
                        let partitions = indexes.into_iter().map(|i| (i, None)).collect();
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
    partitions: Vec<(i32, Option<CommittedOffset>)>,
    fetched: Result<(), KafkaError>,
) -> OffsetFetchResponseTopic {
    OffsetFetchResponseTopic::default()
        .with_name(TopicName(str_bytes(name)))
        .with_partitions(
            partitions
                .into_iter()
                .map(|(index, offset)| {
                    let (o, epoch, metadata) = parts(offset);
                    OffsetFetchResponsePartition::default()
                        .with_partition_index(index)
                        .with_committed_offset(o)
                        .with_committed_leader_epoch(epoch)
                        .with_metadata(Some(str_bytes(metadata)))
                        .with_error_code(errors::code_of(&fetched))
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
    group_id: &str,
    wanted: Option<Vec<(String, Vec<i32>)>>,
) -> Fetched {
    if group_id.is_empty() {
        return Err(KafkaError::InvalidGroupId);
    }
    match wanted {
        None => {
            let offsets = broker.groups.fetch_offsets(group_id, None).await?;
            let mut topics: Vec<TopicOffsets> = Vec::new();
            for (TopicPartition { topic, partition }, offset) in offsets {
                match topics.last_mut() {
                    Some((name, partitions)) if *name == topic => {
                        partitions.push((partition, Some(offset)))
                    }
                    _ => topics.push((topic, vec![(partition, Some(offset))])),
                }
            }
            Ok(topics)
        }
        Some(wanted) => {
            let keys: Vec<TopicPartition> = wanted
                .iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| TopicPartition::new(t.as_str(), *p)))
                .collect();
            let mut offsets = broker.groups.fetch_offsets(group_id, Some(&keys)).await?;
            Ok(wanted
                .into_iter()
                .map(|(topic, indexes)| {
                    let partitions = indexes
                        .into_iter()
                        .map(|i| (i, offsets.remove(&TopicPartition::new(topic.as_str(), i))))
                        .collect();
                    (topic, partitions)
                })
                .collect())
        }
    }
}
