//! ConsumerGroupHeartbeat (KIP-848): a member of a consumer group joins, heartbeats its
//! subscription and owned partitions, or leaves; the answer carries its epoch and assignment
//! (the server-side assignor's target, reached step by step) and when to heartbeat next (short
//! while its assignment is changing, `group.consumer.heartbeat.interval.ms` once stable). The
//! state machine is `group::consumer`.
//!
//! Kafka's checks, first: READ on the group (GROUP_AUTHORIZATION_FAILED), then DESCRIBE on
//! every subscribed topic name (TOPIC_AUTHORIZATION_FAILED, with no message, as Kafka answers,
//! so the answer does not say which one).

use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse};

use super::offset_commit::refused_topics;
use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::group::consumer::Heartbeat;
use crate::protocol::TopicIdPartition;
use crate::protocol::errors;
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (0, 1);

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    let group_id = request.group_id.to_string();
    let interval_ms = broker.groups.config().consumer_heartbeat_interval_ms as i32;
    if !context.access.allows_group(Operation::Read, &group_id) {
        return ConsumerGroupHeartbeatResponse::default()
            .with_error_code(errors::GROUP_AUTHORIZATION_FAILED);
    }
    if let Some(names) = &request.subscribed_topic_names {
        let refused = refused_topics(names.iter().map(|n| n.as_str()), |topic| {
            context.access.allows_topic(Operation::Describe, topic)
        });
        if !refused.is_empty() {
            return ConsumerGroupHeartbeatResponse::default()
                .with_error_code(errors::TOPIC_AUTHORIZATION_FAILED);
        }
    }
    if group_id.is_empty() {
        return ConsumerGroupHeartbeatResponse::default()
            .with_error_code(errors::INVALID_GROUP_ID)
            .with_error_message(Some(str_bytes("the group id is empty")))
            .with_member_epoch(-1)
            .with_heartbeat_interval_ms(interval_ms);
    }
    if request.subscribed_topic_regex.is_some() && request.subscribed_topic_names.is_none() {
        return ConsumerGroupHeartbeatResponse::default()
            .with_error_code(errors::INVALID_REGULAR_EXPRESSION)
            .with_error_message(Some(str_bytes(
                "regular expression subscriptions are not served yet: subscribe by topic names",
            )))
            .with_member_epoch(-1)
            .with_heartbeat_interval_ms(interval_ms);
    }
    let heartbeat = Heartbeat {
        member_id: request.member_id.to_string(),
        member_epoch: request.member_epoch,
        instance_id: request.instance_id.map(|i| i.to_string()),
        rack_id: request.rack_id.map(|r| r.to_string()),
        rebalance_timeout_ms: request.rebalance_timeout_ms,
        subscribed_topic_names: request
            .subscribed_topic_names
            .map(|names| names.into_iter().map(|n| n.to_string()).collect()),
        server_assignor: request.server_assignor.map(|a| a.to_string()),
        owned: request.topic_partitions.map(|owned| {
            owned
                .into_iter()
                .flat_map(|t| {
                    let id = t.topic_id.as_u128();
                    t.partitions
                        .into_iter()
                        .map(move |p| TopicIdPartition::new(id, p))
                })
                .collect()
        }),
        client_id: context.client_id.clone().unwrap_or_default(),
        client_host: super::client_host(context),
    };
    let result = broker.groups.consumer_heartbeat(&group_id, heartbeat).await;
    let mut response = ConsumerGroupHeartbeatResponse::default()
        .with_error_code(errors::code_of(&result.error))
        .with_error_message(result.message.map(str_bytes))
        .with_member_id(Some(str_bytes(result.member_id)))
        .with_member_epoch(result.member_epoch)
        .with_heartbeat_interval_ms(result.heartbeat_interval_ms.unwrap_or(interval_ms));
    if result.error.is_ok() {
        response.assignment = result
            .assignment
            .map(|partitions| Assignment::default().with_topic_partitions(by_topic(&partitions)));
    }
    response
}

/// Partitions grouped by topic id, in order.
fn by_topic(partitions: &[TopicIdPartition]) -> Vec<TopicPartitions> {
    let mut topics: Vec<TopicPartitions> = Vec::new();
    for tp in partitions {
        let id = uuid::Uuid::from_u128(tp.topic_id);
        match topics.last_mut() {
            Some(last) if last.topic_id == id => last.partitions.push(tp.partition),
            _ => topics.push(
                TopicPartitions::default()
                    .with_topic_id(id)
                    .with_partitions(vec![tp.partition]),
            ),
        }
    }
    topics
}
