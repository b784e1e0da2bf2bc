//! FindCoordinator: this broker runs no group or transaction coordinator yet, so every key is
//! answered COORDINATOR_NOT_AVAILABLE (retriable; clients wait). The API is served because
//! clients derive features from it (librdkafka enables LZ4 only when a broker lists it).

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};

use super::{RequestContext, str_bytes};
use crate::protocol::errors;

pub const VERSIONS: (i16, i16) = (0, 6);

const NOT_YET: &str = "consumer groups and transactions are not served by this broker yet";

pub fn handle(
    context: &RequestContext,
    request: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    if context.api_version >= 4 {
        let coordinators = request
            .coordinator_keys
            .into_iter()
            .map(|key| {
                Coordinator::default()
                    .with_key(key)
                    .with_node_id(BrokerId(-1))
                    .with_port(-1)
                    .with_error_code(errors::COORDINATOR_NOT_AVAILABLE)
                    .with_error_message(Some(str_bytes(NOT_YET)))
            })
            .collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let mut response = FindCoordinatorResponse::default()
        .with_error_code(errors::COORDINATOR_NOT_AVAILABLE)
        .with_node_id(BrokerId(-1))
        .with_port(-1);
    if context.api_version >= 1 {
        response.error_message = Some(str_bytes(NOT_YET));
    }
    response
}
