//! DeleteGroups: removes empty groups and their committed offsets (tombstones in
//! `__consumer_offsets`); a group with members gets NON_EMPTY_GROUP. Each group needs DELETE
//! on it (GROUP_AUTHORIZATION_FAILED otherwise); a group named twice is answered once, as
//! Kafka answers.

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use std::collections::BTreeSet;

use super::RequestContext;
use crate::broker::Broker;
use crate::protocol::errors::{self, KafkaError};
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (0, 2);

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: DeleteGroupsRequest,
) -> DeleteGroupsResponse {
    if request.groups_names.is_empty() {
        // No group: nothing to ask (Kafka asks per group).
        context.access.open_to_all();
    }
    let mut results = Vec::with_capacity(request.groups_names.len());
    let mut seen = BTreeSet::new();
    for group_id in request.groups_names {
        if !seen.insert(group_id.clone()) {
            continue;
        }
        let deleted = if !context.access.allows_group(Operation::Delete, &group_id) {
            Err(KafkaError::GroupAuthorizationFailed)
        } else if group_id.is_empty() {
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
