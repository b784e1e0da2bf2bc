//! ListGroups: the groups this broker coordinates, filtered by state (v4+) and type (v5+).
//! A principal with DESCRIBE on the cluster sees them all; any other only the groups it may
//! describe (Kafka's rule: the others are left out, not refused).

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};

use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::protocol::errors;
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (0, 5);

pub fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: ListGroupsRequest,
) -> ListGroupsResponse {
    let sees_all = context.access.allows_cluster(Operation::Describe);
    let (groups, outcome) = broker.groups.list();
    let states: Vec<String> = request
        .states_filter
        .iter()
        .map(|s| s.to_lowercase())
        .collect();
    let types: Vec<String> = request
        .types_filter
        .iter()
        .map(|t| t.to_lowercase())
        .collect();
    let listed = groups
        .into_iter()
        .filter(|g| states.is_empty() || states.contains(&g.state.to_lowercase()))
        .filter(|g| types.is_empty() || types.iter().any(|t| t == g.group_type))
        .filter(|g| {
            sees_all
                || context
                    .access
                    .allows_group(Operation::Describe, &g.group_id)
        })
        .map(|g| {
            ListedGroup::default()
                .with_group_id(GroupId(str_bytes(g.group_id)))
                .with_protocol_type(str_bytes(g.protocol_type))
                .with_group_state(str_bytes(g.state))
                .with_group_type(str_bytes(g.group_type))
        })
        .collect();
    ListGroupsResponse::default()
        .with_error_code(errors::code_of(&outcome))
        .with_groups(listed)
}
