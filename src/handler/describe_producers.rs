//! DescribeProducers: the producers a partition leader knows (Kafka's
//! `kafka-transactions.sh describe-producers`): each one's epoch, last sequence and timestamp,
//! the coordinator epoch of its last marker and where its open transaction starts (-1: none).
//! Kafka's check: READ on each topic (TOPIC_AUTHORIZATION_FAILED in its partitions), before
//! whether it exists is looked at.

use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};

use super::offset_commit::refused_topics;
use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::protocol::errors::KafkaError;
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (0, 0);

pub fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: DescribeProducersRequest,
) -> DescribeProducersResponse {
    if request.topics.is_empty() {
        // No topic: nothing to ask (Kafka asks per topic).
        context.access.open_to_all();
    }
    let refused = refused_topics(request.topics.iter().map(|t| t.name.as_str()), |topic| {
        context.access.allows_topic(Operation::Read, topic)
    });
    let image = broker.image();
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let partitions = topic
                .partition_indexes
                .iter()
                .map(|&index| {
                    let response = PartitionResponse::default().with_partition_index(index);
                    if refused.contains(topic.name.as_str()) {
                        let error = KafkaError::TopicAuthorizationFailed;
                        return response
                            .with_error_code(error.code())
                            .with_error_message(Some(str_bytes("Topic authorization failed.")));
                    }
                    match broker.led_partition(&image, &topic.name, index, -1) {
                        Err(error) => {
                            response
                                .with_error_code(error.code())
                                .with_error_message(Some(str_bytes(format!(
                                    "{}-{index}: {error}",
                                    topic.name.as_str()
                                ))))
                        }
                        Ok((partition, _)) => response.with_active_producers(
                            partition
                                .producer_states()
                                .into_iter()
                                .map(|(producer_id, entry)| {
                                    ProducerState::default()
                                        .with_producer_id(ProducerId(producer_id))
                                        .with_producer_epoch(i32::from(entry.epoch))
                                        .with_last_sequence(
                                            entry.batches.back().map_or(-1, |b| b.last_sequence),
                                        )
                                        .with_last_timestamp(entry.last_timestamp)
                                        .with_coordinator_epoch(entry.coordinator_epoch)
                                        .with_current_txn_start_offset(
                                            entry.current_txn_first_offset.unwrap_or(-1),
                                        )
                                })
                                .collect(),
                        ),
                    }
                })
                .collect();
            TopicResponse::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}
