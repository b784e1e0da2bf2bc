//! ConsumerGroupDescribe (KIP-848): a consumer group's epochs, assignor and members, each
//! with its current and target assignment.
//!
//! Kafka's checks: DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED), then DESCRIBE on every
//! topic a described member's current or target assignment names; a group naming one the
//! principal may not describe answers TOPIC_AUTHORIZATION_FAILED and no members, so the
//! topic's name does not leak.

use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, TopicName,
};

use super::offset_commit::refused_topics;
use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::protocol::TopicIdPartition;
use crate::protocol::errors::KafkaError;
use crate::security::acl::{Operation, ResourceType};

/// Kafka's message for a group whose assignments name a topic the principal may not describe.
const TOPIC_REFUSED_MESSAGE: &str =
    "The group has described topic(s) that the client is not authorized to describe.";

pub const VERSIONS: (i16, i16) = (0, 1);

pub fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
    let image = broker.image();
    let assignment = |partitions: &mut dyn Iterator<Item = &TopicIdPartition>| -> Assignment {
        let mut topics: Vec<TopicPartitions> = Vec::new();
        for tp in partitions {
            let uuid = uuid::Uuid::from_u128(tp.topic_id);
            match topics.last_mut() {
                Some(last) if last.topic_id == uuid => last.partitions.push(tp.partition),
                _ => {
                    let name = image
                        .topics
                        .get(&sluice_raft::records::Uuid(tp.topic_id))
                        .map(|t| t.name.clone())
                        .unwrap_or_default();
                    topics.push(
                        TopicPartitions::default()
                            .with_topic_id(uuid)
                            .with_topic_name(TopicName(str_bytes(name)))
                            .with_partitions(vec![tp.partition]),
                    );
                }
            }
        }
        Assignment::default().with_topic_partitions(topics)
    };
    if request.group_ids.is_empty() {
        // No group: nothing to ask (Kafka asks per group).
        context.access.open_to_all();
    }
    let groups: Vec<DescribedGroup> = request
        .group_ids
        .into_iter()
        .map(|group_id| {
            let described = DescribedGroup::default().with_group_id(group_id.clone());
            if !context.access.allows_group(Operation::Describe, &group_id) {
                return described.with_error_code(KafkaError::GroupAuthorizationFailed.code());
            }
            let result = broker.groups.describe_consumer_group(&group_id, |group| {
                let members = group
                    .members
                    .values()
                    .map(|m| {
                        let empty = Default::default();
                        let target = group.target.get(&m.member_id).unwrap_or(&empty);
                        Member::default()
                            .with_member_id(str_bytes(m.member_id.clone()))
                            .with_instance_id(m.instance_id.clone().map(str_bytes))
                            .with_rack_id(m.rack_id.clone().map(str_bytes))
                            .with_member_epoch(m.epoch)
                            .with_client_id(str_bytes(m.client_id.clone()))
                            .with_client_host(str_bytes(m.client_host.clone()))
                            .with_subscribed_topic_names(
                                m.subscribed
                                    .iter()
                                    .map(|t| TopicName(str_bytes(t.clone())))
                                    .collect(),
                            )
                            .with_assignment(assignment(&mut m.assigned.iter()))
                            .with_target_assignment(assignment(&mut target.iter()))
                            .with_member_type(1)
                    })
                    .collect();
                (
                    group.state_name(),
                    group.group_epoch,
                    group.assignment_epoch,
                    group.assignor().to_owned(),
                    members,
                )
            });
            match result {
                Ok((state, group_epoch, assignment_epoch, assignor, members)) => described
                    .with_authorized_operations(if request.include_authorized_operations {
                        context
                            .access
                            .authorized_operations(ResourceType::Group, &group_id)
                    } else {
                        i32::MIN
                    })
                    .with_group_state(str_bytes(state))
                    .with_group_epoch(group_epoch)
                    .with_assignment_epoch(assignment_epoch)
                    .with_assignor_name(str_bytes(assignor))
                    .with_members(members),
                Err(error) => {
                    let message = match error {
                        KafkaError::GroupIdNotFound => {
                            format!("group {} is not a consumer group", group_id.as_str())
                        }
                        other => other.to_string(),
                    };
                    described
                        .with_error_code(error.code())
                        .with_error_message(Some(str_bytes(message)))
                }
            }
        })
        .collect();
    let refused = refused_topics(
        groups
            .iter()
            .flat_map(assigned_topics)
            .filter(|topic| !topic.is_empty()),
        |topic| context.access.allows_topic(Operation::Describe, topic),
    );
    let groups = groups
        .into_iter()
        .map(|group| {
            if assigned_topics(&group).any(|topic| refused.contains(topic)) {
                DescribedGroup::default()
                    .with_group_id(group.group_id)
                    .with_error_code(KafkaError::TopicAuthorizationFailed.code())
                    .with_error_message(Some(str_bytes(TOPIC_REFUSED_MESSAGE)))
            } else {
                group
            }
        })
        .collect();
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}

/// The topic names a described group's members' current and target assignments name.
fn assigned_topics(group: &DescribedGroup) -> impl Iterator<Item = &str> {
    group.members.iter().flat_map(|member| {
        [&member.assignment, &member.target_assignment]
            .into_iter()
            .flat_map(|assignment| assignment.topic_partitions.iter())
            .map(|topic| topic.topic_name.as_str())
    })
}
