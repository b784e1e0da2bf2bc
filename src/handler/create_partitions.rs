//! CreatePartitions: grows a topic through the active controller (`validate_only` decides on
//! this node's image without proposing).

use std::time::Duration;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};

use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::controller::service::ControllerRequest;
use crate::protocol::errors::{ApiError, KafkaError};
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (0, 3);

const CREATE_WAIT_MAX: Duration = Duration::from_secs(30);

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let timeout = if request.timeout_ms > 0 {
        Duration::from_millis(request.timeout_ms as u64).min(CREATE_WAIT_MAX)
    } else {
        CREATE_WAIT_MAX
    };
    if request.topics.is_empty() {
        context.access.open_to_all();
    }
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let name = topic.name.to_string();
        let result = CreatePartitionsTopicResult::default().with_name(topic.name.clone());
        if !context.access.allows_topic(Operation::Alter, &name) {
            results.push(
                result
                    .with_error_code(KafkaError::TopicAuthorizationFailed.code())
                    .with_error_message(Some(str_bytes("Authorization failed."))),
            );
            continue;
        }
        let assignments: Vec<Vec<i32>> = topic
            .assignments
            .iter()
            .flatten()
            .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
            .collect();
        let outcome = if request.validate_only {
            crate::controller::create_partitions(&broker.image(), &name, topic.count, &assignments)
                .map(|_| ())
                .map_err(ApiError::from)
        } else {
            let request = ControllerRequest::CreatePartitions {
                topic: name.clone(),
                total: topic.count,
                assignments,
            };
            match broker.call_controller(request, timeout).await {
                Ok(_) => {
                    let count = topic.count;
                    broker
                        .wait_for_image(timeout, |image| {
                            image
                                .topic_by_name(&name)
                                .is_some_and(|t| t.partitions.len() as i32 >= count)
                        })
                        .await;
                    Ok(())
                }
                Err(error) => Err(error),
            }
        };
        results.push(match outcome {
            Ok(()) => result,
            Err(error) => result
                .with_error_code(error.error.code())
                .with_error_message(Some(str_bytes(error.message))),
        });
    }
    CreatePartitionsResponse::default().with_results(results)
}
