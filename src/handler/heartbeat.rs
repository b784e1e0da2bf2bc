//! Heartbeat: keeps a classic group member's session alive; REBALANCE_IN_PROGRESS tells it to
//! rejoin.

use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse};

use super::RequestContext;
use crate::broker::Broker;
use crate::protocol::errors::{self, KafkaError};
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (0, 4);

pub fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: HeartbeatRequest,
) -> HeartbeatResponse {
    let group_id = request.group_id.to_string();
    let outcome = if !context.access.allows_group(Operation::Read, &group_id) {
        Err(KafkaError::GroupAuthorizationFailed)
    } else if group_id.is_empty() {
        Err(KafkaError::InvalidGroupId)
    } else {
        let instance = request.group_instance_id.map(|i| i.to_string());
        broker.groups.heartbeat(
            &group_id,
            &request.member_id,
            instance.as_deref(),
            request.generation_id,
        )
    };
    HeartbeatResponse::default().with_error_code(errors::code_of(&outcome))
}
