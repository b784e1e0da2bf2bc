//! DeleteGroups: removes empty groups and their committed offsets (tombstones in
//! `__consumer_offsets`); a group with members gets NON_EMPTY_GROUP.

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use super::RequestContext;
use crate::broker::Broker;
use crate::protocol::errors::{self, KafkaError};

pub const VERSIONS: (i16, i16) = (0, 2);

pub async fn handle(
    broker: &Broker,
    _context: &RequestContext,
    request: DeleteGroupsRequest,
) -> DeleteGroupsResponse {
    let mut results = Vec::with_capacity(request.groups_names.len());
    for group_id in request.groups_names {
        let deleted = if group_id.is_empty() {
            Err(KafkaError::InvalidGroupId)
        } else {
            broker.groups.delete_group(&group_id).await
        };
        results.push(
            DeletableGroupResult::default()
                .with_group_id(group_id)
                .with_error_code(errors::code_of(&deleted)),
        );
    }
    DeleteGroupsResponse::default().with_results(results)
}
