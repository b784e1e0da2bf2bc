//! SyncGroup: the leader hands in the assignment, every member waits for its part (answered
//! once the assignment is stored in `__consumer_offsets`).

use kafka_protocol::messages::{SyncGroupRequest, SyncGroupResponse};

use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::protocol::errors;
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (0, 5);

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: SyncGroupRequest,
) -> SyncGroupResponse {
    let group_id = request.group_id.to_string();
    if !context.access.allows_group(Operation::Read, &group_id) {
        return SyncGroupResponse::default().with_error_code(errors::GROUP_AUTHORIZATION_FAILED);
    }
    if group_id.is_empty() {
        return SyncGroupResponse::default().with_error_code(errors::INVALID_GROUP_ID);
    }
    let instance = request.group_instance_id.map(|i| i.to_string());
    let protocol_type = request.protocol_type.map(|p| p.to_string());
    let protocol_name = request.protocol_name.map(|p| p.to_string());
    let assignments = request
        .assignments
        .into_iter()
        .map(|a| (a.member_id.to_string(), a.assignment.to_vec()))
        .collect();
    let result = broker
        .groups
        .sync(
            &group_id,
            &request.member_id,
            instance.as_deref(),
            request.generation_id,
            protocol_type.as_deref(),
            protocol_name.as_deref(),
            assignments,
        )
        .await;
    let mut response = SyncGroupResponse::default()
        .with_error_code(errors::code_of(&result.error))
        .with_assignment(result.assignment.into());
    if context.api_version >= 5 {
        response.protocol_type = result.protocol_type.map(str_bytes);
        response.protocol_name = result.protocol_name.map(str_bytes);
    }
    response
}
