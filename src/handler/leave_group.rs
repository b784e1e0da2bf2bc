//! LeaveGroup: members leave a classic group (one before v3, a batch with instance ids from
//! v3); the group rebalances.

use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse};

use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::group::classic::Leaving;
use crate::protocol::errors;
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (0, 5);

pub fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: LeaveGroupRequest,
) -> LeaveGroupResponse {
    let group_id = request.group_id.to_string();
    if !context.access.allows_group(Operation::Read, &group_id) {
        // A top-level error and no members, in every version (Kafka's error answer).
        return LeaveGroupResponse::default().with_error_code(errors::GROUP_AUTHORIZATION_FAILED);
    }
    let leaving: Vec<Leaving> = if context.api_version >= 3 {
        request
            .members
            .iter()
            .map(|m| Leaving {
                member_id: m.member_id.to_string(),
                group_instance_id: m.group_instance_id.as_ref().map(|i| i.to_string()),
            })
            .collect()
    } else {
        vec![Leaving {
            member_id: request.member_id.to_string(),
            group_instance_id: None,
        }]
    };
    if group_id.is_empty() {
        return LeaveGroupResponse::default().with_error_code(errors::INVALID_GROUP_ID);
    }
    match broker.groups.leave(&group_id, &leaving) {
        Err(error) => LeaveGroupResponse::default().with_error_code(error.code()),
        Ok(results) if context.api_version >= 3 => LeaveGroupResponse::default().with_members(
            leaving
                .into_iter()
                .zip(results)
                .map(|(member, left)| {
                    MemberResponse::default()
                        .with_member_id(str_bytes(member.member_id))
                        .with_group_instance_id(member.group_instance_id.map(str_bytes))
                        .with_error_code(errors::code_of(&left))
                })
                .collect(),
        ),
        Ok(results) => LeaveGroupResponse::default()
            .with_error_code(errors::code_of(&results.first().copied().unwrap_or(Ok(())))),
    }
}
