//! DeleteTopics, by name or (v6+) by topic id, through the active controller. The answer
//! waits until the topic is gone from this node's image.

use std::time::Duration;

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse, TopicName};

use super::{RequestContext, kafka_uuid, our_uuid, str_bytes};
use crate::broker::Broker;
use crate::controller::service::ControllerRequest;
use crate::protocol::errors::KafkaError;
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (1, 6);

const DELETE_WAIT_MAX: Duration = Duration::from_secs(30);

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    let timeout = if request.timeout_ms > 0 {
        Duration::from_millis(request.timeout_ms as u64).min(DELETE_WAIT_MAX)
    } else {
        DELETE_WAIT_MAX
    };
    // (name, id) as the client named them.
    let targets: Vec<(Option<String>, Option<sluice_raft::records::Uuid>)> =
        if context.api_version >= 6 {
            request
                .topics
                .iter()
                .map(|t| match &t.name {
                    Some(name) => (Some(name.to_string()), None),
                    None => (None, Some(our_uuid(t.topic_id))),
                })
                .collect()
        } else {
            request
                .topic_names
                .iter()
                .map(|n| (Some(n.to_string()), None))
                .collect()
        };
    if targets.is_empty() {
        context.access.open_to_all();
    }
    let mut responses = Vec::with_capacity(targets.len());
    for (name, id) in targets {
        let image = broker.image();
        let topic = match (&name, id) {
            (Some(name), _) => image.topic_by_name(name).cloned(),
            (None, Some(id)) => image.topics.get(&id).cloned(),
            (None, None) => None,
        };
        let mut result = DeletableTopicResult::default()
            .with_name(name.clone().map(|n| TopicName(str_bytes(n))));
        if let Some(id) = id {
            result.topic_id = kafka_uuid(id);
        }
        let denied = KafkaError::TopicAuthorizationFailed.code();
        // By name, DELETE is asked before the topic is looked for (whether it exists is not
        // said); by id, a topic the principal may not describe is not named.
        if let Some(name) = &name {
            if !context.access.allows_topic(Operation::Delete, name) {
                responses.push(result.with_error_code(denied));
                continue;
            }
        } else if let Some(topic) = &topic {
            if !context
                .access
                .allows_topic(Operation::Describe, &topic.name)
            {
                responses.push(result.with_error_code(denied));
                continue;
            }
            if !context.access.allows_topic(Operation::Delete, &topic.name) {
                result.name = Some(TopicName(str_bytes(topic.name.clone())));
                responses.push(result.with_error_code(denied));
                continue;
            }
        } else {
            // An unknown id: nothing to authorize.
            context.access.open_to_all();
        }
        let Some(topic) = topic else {
            let error = if name.is_some() {
                KafkaError::UnknownTopicOrPartition
            } else {
                KafkaError::UnknownTopicId
            };
            responses.push(result.with_error_code(error.code()));
            continue;
        };
        result.name = Some(TopicName(str_bytes(topic.name.clone())));
        result.topic_id = kafka_uuid(topic.id);
        match broker
            .call_controller(ControllerRequest::DeleteTopic(topic.name.clone()), timeout)
            .await
        {
            Ok(_) => {
                broker
                    .wait_for_image(timeout, |image| !image.topics.contains_key(&topic.id))
                    .await;
                responses.push(result);
            }
            Err(error) => responses.push(
                result
                    .with_error_code(error.error.code())
                    .with_error_message(Some(str_bytes(error.message))),
            ),
        }
    }
    DeleteTopicsResponse::default().with_responses(responses)
}
