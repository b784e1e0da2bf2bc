//! JoinGroup: a member joins (or rejoins) a classic group and waits, bounded by the rebalance
//! timeout, until the rebalance's join phase completes. The group's state machine is
//! `group::classic`.

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse};

use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::group::classic::JoinRequest;
use crate::protocol::errors;
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (0, 9);

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: JoinGroupRequest,
) -> JoinGroupResponse {
    let group_id = request.group_id.to_string();
    let member_id = request.member_id.to_string();
    if !context.access.allows_group(Operation::Read, &group_id) {
        // Kafka's error answer: no member id, no protocol (null from v7, empty before).
        return JoinGroupResponse::default()
            .with_error_code(errors::GROUP_AUTHORIZATION_FAILED)
            .with_generation_id(-1)
            .with_protocol_name((context.api_version < 7).then(|| str_bytes("")));
    }
    if group_id.is_empty() {
        return JoinGroupResponse::default()
            .with_error_code(errors::INVALID_GROUP_ID)
            .with_generation_id(-1)
            .with_member_id(str_bytes(member_id));
    }
    let join = JoinRequest {
        member_id,
        group_instance_id: request.group_instance_id.map(|i| i.to_string()),
        client_id: context.client_id.clone().unwrap_or_default(),
        client_host: super::client_host(context),
        session_timeout_ms: request.session_timeout_ms,
        rebalance_timeout_ms: if context.api_version >= 1 {
            request.rebalance_timeout_ms
        } else {
            request.session_timeout_ms
        },
        protocol_type: request.protocol_type.to_string(),
        protocols: request
            .protocols
            .into_iter()
            .map(|p| (p.name.to_string(), p.metadata.to_vec()))
            .collect(),
        require_known_member_id: context.api_version >= 4,
        supports_skip_assignment: context.api_version >= 9,
    };
    let result = broker.groups.join(&group_id, join).await;
    let mut response = JoinGroupResponse::default()
        .with_error_code(errors::code_of(&result.error))
        .with_generation_id(result.generation_id)
        .with_protocol_name(result.protocol_name.map(str_bytes))
        .with_leader(str_bytes(result.leader))
        .with_member_id(str_bytes(result.member_id))
        .with_members(
            result
                .members
                .into_iter()
                .map(|m| {
                    JoinGroupResponseMember::default()
                        .with_member_id(str_bytes(m.member_id))
                        .with_group_instance_id(m.group_instance_id.map(str_bytes))
                        .with_metadata(m.metadata.into())
                })
                .collect(),
        );
    if context.api_version >= 7 {
        response.protocol_type = result.protocol_type.map(str_bytes);
    }
    if context.api_version >= 9 {
        response.skip_assignment = result.skip_assignment;
    }
    if context.api_version < 7 && response.protocol_name.is_none() {
        // Not nullable before v7.
        response.protocol_name = Some(str_bytes(""));
    }
    response
}
