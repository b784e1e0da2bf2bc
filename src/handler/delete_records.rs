//! DeleteRecords: moves a partition's log start offset forward (up to the high watermark);
//! whole segments below it are deleted by retention.

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use super::{Broker, RequestContext, led_partition};
use crate::log::TopicPartition;
use crate::protocol::errors;

pub const VERSIONS: (i16, i16) = (0, 2);

/// `offset` -1: up to the high watermark.
const HIGH_WATERMARK: i64 = -1;

pub fn handle(
    broker: &Broker,
    _context: &RequestContext,
    request: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let image = broker.image();
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.name.to_string();
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let response = DeleteRecordsPartitionResult::default()
                        .with_partition_index(p.partition_index)
                        .with_low_watermark(-1);
                    let tp = TopicPartition::new(name.clone(), p.partition_index);
                    let (partition, _) =
                        match led_partition(broker, &image, &name, p.partition_index, -1) {
                            Ok(found) => found,
                            Err(code) => return response.with_error_code(code),
                        };
                    let log = &partition.log;
                    let high_watermark = log.high_watermark();
                    let target = match p.offset {
                        HIGH_WATERMARK => high_watermark,
                        offset if offset >= 0 && offset as u64 <= high_watermark => offset as u64,
                        _ => return response.with_error_code(errors::OFFSET_OUT_OF_RANGE),
                    };
                    let result = tokio::task::block_in_place(|| {
                        broker.replicas.advance_log_start_offset(&tp, target)
                    });
                    match result {
                        Ok(low_watermark) => response.with_low_watermark(low_watermark as i64),
                        Err(error) => response.with_error_code(error.kafka_error_code()),
                    }
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    broker.replicas.notify_data_changed();
    DeleteRecordsResponse::default().with_topics(topics)
}
