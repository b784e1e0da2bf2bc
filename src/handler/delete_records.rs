//! DeleteRecords: moves a partition's log start offset forward (up to the high watermark);
//! whole segments below it are deleted by retention.

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use super::RequestContext;
use crate::broker::Broker;
use crate::protocol::errors::KafkaError;
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (0, 2);

pub fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let image = broker.image();
    if request.topics.is_empty() {
        context.access.open_to_all();
    }
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.name.to_string();
            let allowed = context.access.allows_topic(Operation::Delete, &name);
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let response = DeleteRecordsPartitionResult::default()
                        .with_partition_index(p.partition_index)
                        .with_low_watermark(-1);
                    if !allowed {
                        return response
                            .with_error_code(KafkaError::TopicAuthorizationFailed.code());
                    }
                    let (partition, _) =
                        match broker.led_partition(&image, &name, p.partition_index, -1) {
                            Ok(found) => found,
                            Err(error) => return response.with_error_code(error.code()),
                        };
                    let result = tokio::task::block_in_place(|| {
                        broker.replicas.delete_records(&partition, p.offset)
                    });
                    match result {
                        Ok(low_watermark) => response.with_low_watermark(low_watermark as i64),
                        Err(error) => response.with_error_code(error.code()),
                    }
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    DeleteRecordsResponse::default().with_topics(topics)
}
