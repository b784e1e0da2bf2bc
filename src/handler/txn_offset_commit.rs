//! TxnOffsetCommit: a transactional producer commits a group's offsets inside its
//! transaction (`send_offsets_to_transaction`). They are written to `__consumer_offsets` in a
//! transactional batch of that producer and count for the group only once the transaction
//! coordinator's commit marker reaches that partition (dropped on abort). From v5 (clients of
//! transaction version 2) this coordinator adds the offsets partition to the transaction.
//!
//! Kafka's checks, in its order: WRITE on the transactional id, then READ on the group (each
//! refusal answers every partition), then READ on each topic (its partitions answer
//! TOPIC_AUTHORIZATION_FAILED before whether they exist is looked at).

use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};

use super::RequestContext;
use super::offset_commit::refused_topics;
use crate::broker::Broker;
use crate::coordinator::TxnProducer;
use crate::group::{CommittedOffset, OffsetCommit};
use crate::protocol::TopicPartition;
use crate::protocol::errors::{self, KafkaError};
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (0, 5);

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: TxnOffsetCommitRequest,
) -> TxnOffsetCommitResponse {
    let api_version = context.api_version;
    let group_id = request.group_id.to_string();
    if !context
        .access
        .allows_transactional_id(Operation::Write, &request.transactional_id)
    {
        return every_partition(request, KafkaError::TransactionalIdAuthorizationFailed);
    }
    if !context.access.allows_group(Operation::Read, &group_id) {
        return every_partition(request, KafkaError::GroupAuthorizationFailed);
    }
    let refused = refused_topics(request.topics.iter().map(|t| t.name.as_str()), |topic| {
        context.access.allows_topic(Operation::Read, topic)
    });
    let image = broker.image();
    let producer = TxnProducer {
        producer_id: request.producer_id.0,
        producer_epoch: request.producer_epoch,
    };
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
            } else if request.transactional_id.is_empty() || producer.producer_id < 0 {
                decided.push(Some(KafkaError::InvalidRequest));
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
    // Transaction version 2 (v5): the client did not add the offsets partition to its
    // transaction (no AddOffsetsToTxn); this coordinator does, before writing.
    let added = if api_version >= 5 && !commits.is_empty() {
        add_offsets_partition(broker, &image, &request, &group_id, producer).await
    } else {
        Ok(())
    };
    let outcome = if let Err(error) = added {
        Err(error)
    } else if commits.is_empty() {
        Ok(Vec::new())
    } else {
        let instance = request.group_instance_id.as_ref().map(|i| i.to_string());
        broker
            .groups
            .commit(
                Some(producer),
                &group_id,
                &request.member_id,
                instance.as_deref(),
                request.generation_id,
                commits,
            )
            .await
    };
    // Before v3 clients know INVALID_PRODUCER_EPOCH, not PRODUCER_FENCED (KIP-588).
    let compatible = |error: KafkaError| match error {
        KafkaError::ProducerFenced if api_version < 3 => KafkaError::InvalidProducerEpoch,
        other => other,
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
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(errors::code_of(&committed.map_err(compatible)))
                })
                .collect();
            TxnOffsetCommitResponseTopic::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}

/// Every partition of the request answered with `error` (Kafka's error answer).
fn every_partition(request: TxnOffsetCommitRequest, error: KafkaError) -> TxnOffsetCommitResponse {
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(error.code())
                })
                .collect();
            TxnOffsetCommitResponseTopic::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}

/// Adds the group's `__consumer_offsets` partition to the producer's transaction (KIP-890
/// part 2), as its partition leaders add the data partitions.
async fn add_offsets_partition(
    broker: &Broker,
    image: &sluice_raft::image::MetadataImage,
    request: &TxnOffsetCommitRequest,
    group_id: &str,
    producer: TxnProducer,
) -> Result<(), KafkaError> {
    let count = image
        .topic_by_name(crate::group::OFFSETS_TOPIC)
        .map(|t| t.partitions.len() as i32)
        .ok_or(KafkaError::CoordinatorNotAvailable)?;
    let partition = TopicPartition::new(
        crate::group::OFFSETS_TOPIC,
        crate::group::partition_for(group_id, count),
    );
    let answers = super::txn_partitions::ask_coordinator(
        broker,
        image,
        &request.transactional_id,
        crate::txn::state::ProducerIdAndEpoch {
            producer_id: producer.producer_id,
            producer_epoch: producer.producer_epoch,
        },
        &[partition],
        super::txn_partitions::Mode::Add,
    )
    .await;
    answers
        .into_iter()
        .next()
        .unwrap_or(Err(KafkaError::UnknownServerError))
}
