//! DescribeGroups: each group's state, protocol and members (their metadata and assignment
//! while Stable). A group this coordinator does not have is Dead with no members (Kafka).
//! Each group needs DESCRIBE on it; a refused one answers GROUP_AUTHORIZATION_FAILED and
//! nothing else, so whether it exists does not leak.

use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse};

use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::protocol::errors;
use crate::security::acl::{Operation, ResourceType};

pub const VERSIONS: (i16, i16) = (0, 5);

pub fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: DescribeGroupsRequest,
) -> DescribeGroupsResponse {
    if request.groups.is_empty() {
        // No group: nothing to ask (Kafka asks per group).
        context.access.open_to_all();
    }
    let groups = request
        .groups
        .into_iter()
        .map(|group_id| {
            // Errors carry no authorized operations (Kafka's INT32 MIN, "omitted").
            let described = DescribedGroup::default().with_group_id(group_id.clone());
            if !context.access.allows_group(Operation::Describe, &group_id) {
                return described.with_error_code(errors::GROUP_AUTHORIZATION_FAILED);
            }
            if group_id.is_empty() {
                return described.with_error_code(errors::INVALID_GROUP_ID);
            }
            match broker.groups.describe(&group_id) {
                Err(error) => described.with_error_code(error.code()),
                Ok(description) => described
                    .with_authorized_operations(
                        if context.api_version >= 3 && request.include_authorized_operations {
                            context
                                .access
                                .authorized_operations(ResourceType::Group, &group_id)
                        } else {
                            i32::MIN
                        },
                    )
                    .with_group_state(str_bytes(description.state.name()))
                    .with_protocol_type(str_bytes(description.protocol_type))
                    .with_protocol_data(str_bytes(description.protocol))
                    .with_members(
                        description
                            .members
                            .into_iter()
                            .map(|m| {
                                DescribedGroupMember::default()
                                    .with_member_id(str_bytes(m.member_id))
                                    .with_group_instance_id(m.group_instance_id.map(str_bytes))
                                    .with_client_id(str_bytes(m.client_id))
                                    .with_client_host(str_bytes(m.client_host))
                                    .with_member_metadata(m.metadata.into())
                                    .with_member_assignment(m.assignment.into())
                            })
                            .collect(),
                    ),
            }
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}
