//! TxnOffsetCommit: a transactional producer commits a group's offsets inside its
//! transaction (`send_offsets_to_transaction`). They are written to `__consumer_offsets` in a
//! transactional batch of that producer and count for the group only once the transaction
//! coordinator's commit marker reaches that partition (dropped on abort).

use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};

use crate::broker::Broker;
use crate::coordinator::TxnProducer;
use crate::group::{CommittedOffset, OffsetCommit};
use crate::protocol::TopicPartition;
use crate::protocol::errors::{self, KafkaError};

pub const VERSIONS: (i16, i16) = (0, 4);

pub async fn handle(
    broker: &Broker,
    api_version: i16,
    request: TxnOffsetCommitRequest,
) -> TxnOffsetCommitResponse {
    let group_id = request.group_id.to_string();
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
            if group_id.is_empty() {
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
    let outcome = if commits.is_empty() {
        Ok(Vec::new())
    } else {
        let instance = request.group_instance_id.as_ref().map(|i| i.to_string());
        broker
            .groups
            .txn_commit(
                producer,
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
