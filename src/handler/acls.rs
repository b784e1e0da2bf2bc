//! CreateAcls, DescribeAcls and DeleteAcls: ACLs are metadata records, decided and committed
//! by the active controller (so every broker enforces the same set); DescribeAcls reads this
//! node's image. Creations and deletions answer once this node applied them, so the client's
//! next request here is decided by them. Without an authorizer the three answer
//! SECURITY_DISABLED, as Kafka's brokers do.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use sluice_raft::records::AclRecord;

use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::controller::service::{ControllerRequest, ControllerResponse};
use crate::controller::{AclFilterRecord, acl_binding};
use crate::protocol::errors::{self, ApiError, KafkaError};
use crate::security::acl::Operation;

/// Kafka 4 serves these from v1 (KIP-896): v0 cannot carry PREFIXED ACLs.
pub const CREATE_VERSIONS: (i16, i16) = (1, 3);
pub const DESCRIBE_VERSIONS: (i16, i16) = (1, 3);
pub const DELETE_VERSIONS: (i16, i16) = (1, 3);

const ACL_WAIT: Duration = Duration::from_secs(30);

const NO_AUTHORIZER: &str = "No Authorizer is configured.";
const CLUSTER_DENIED: &str = "Cluster authorization failed.";

/// The refusal every entry of a request gets before anything is decided: no authorizer, or
/// no `operation` on the cluster.
fn refusal(context: &RequestContext, operation: Operation) -> Option<ApiError> {
    if !context.access.allows_cluster(operation) {
        return Some(ApiError::new(
            KafkaError::ClusterAuthorizationFailed,
            CLUSTER_DENIED,
        ));
    }
    if !context.access.is_enforced() {
        return Some(ApiError::new(KafkaError::SecurityDisabled, NO_AUTHORIZER));
    }
    None
}

pub async fn create(
    broker: &Broker,
    context: &RequestContext,
    request: CreateAclsRequest,
) -> CreateAclsResponse {
    let result = |code: i16, message: Option<String>| {
        AclCreationResult::default()
            .with_error_code(code)
            .with_error_message(message.map(str_bytes))
    };
    if let Some(refused) = refusal(context, Operation::Alter) {
        return CreateAclsResponse::default().with_results(
            request
                .creations
                .iter()
                .map(|_| result(refused.error.code(), Some(refused.message.clone())))
                .collect(),
        );
    }
    let records: Vec<AclRecord> = request
        .creations
        .iter()
        .map(|c| AclRecord {
            resource_type: c.resource_type,
            resource_name: c.resource_name.to_string(),
            pattern_type: c.resource_pattern_type,
            principal: c.principal.to_string(),
            host: c.host.to_string(),
            operation: c.operation,
            permission_type: c.permission_type,
        })
        .collect();
    let count = records.len();
    let outcomes = match broker
        .call_controller(ControllerRequest::CreateAcls(records.clone()), ACL_WAIT)
        .await
    {
        Ok(ControllerResponse::AclsCreated(outcomes)) if outcomes.len() == count => outcomes,
        Ok(other) => {
            let message = format!("the controller answered {}", other.summary());
            vec![(KafkaError::UnknownServerError.code(), message); count]
        }
        Err(error) => vec![(error.error.code(), error.message); count],
    };
    let created: Vec<&AclRecord> = records
        .iter()
        .zip(&outcomes)
        .filter(|(_, (code, _))| *code == errors::NONE)
        .map(|(record, _)| record)
        .collect();
    if !created.is_empty() {
        broker
            .wait_for_image(ACL_WAIT, |image| {
                created
                    .iter()
                    .all(|record| image.acls.values().any(|acl| acl == *record))
            })
            .await;
    }
    CreateAclsResponse::default().with_results(
        outcomes
            .into_iter()
            .map(|(code, message)| result(code, (code != errors::NONE).then_some(message)))
            .collect(),
    )
}

pub fn describe(
    broker: &Broker,
    context: &RequestContext,
    request: DescribeAclsRequest,
) -> DescribeAclsResponse {
    if let Some(refused) = refusal(context, Operation::Describe) {
        return DescribeAclsResponse::default()
            .with_error_code(refused.error.code())
            .with_error_message(Some(str_bytes(refused.message)));
    }
    let filter = AclFilterRecord {
        resource_type: request.resource_type_filter,
        resource_name: request.resource_name_filter.map(|n| n.to_string()),
        pattern_type: request.pattern_type_filter,
        principal: request.principal_filter.map(|p| p.to_string()),
        host: request.host_filter.map(|h| h.to_string()),
        operation: request.operation,
        permission_type: request.permission_type,
    }
    .filter();
    if let Err(error) = filter.validate() {
        return DescribeAclsResponse::default()
            .with_error_code(KafkaError::InvalidRequest.code())
            .with_error_message(Some(str_bytes(error.to_string())));
    }
    let image = broker.image();
    // The matching ACLs by resource pattern, as Kafka groups them.
    let mut resources: BTreeMap<(i8, String, i8), Vec<AclDescription>> = BTreeMap::new();
    for record in image.acls.values() {
        if !filter.matches(&acl_binding(record)) {
            continue;
        }
        resources
            .entry((
                record.resource_type,
                record.resource_name.clone(),
                record.pattern_type,
            ))
            .or_default()
            .push(
                AclDescription::default()
                    .with_principal(str_bytes(record.principal.clone()))
                    .with_host(str_bytes(record.host.clone()))
                    .with_operation(record.operation)
                    .with_permission_type(record.permission_type),
            );
    }
    DescribeAclsResponse::default().with_resources(
        resources
            .into_iter()
            .map(|((resource_type, name, pattern_type), acls)| {
                DescribeAclsResource::default()
                    .with_resource_type(resource_type)
                    .with_resource_name(str_bytes(name))
                    .with_pattern_type(pattern_type)
                    .with_acls(acls)
            })
            .collect(),
    )
}

pub async fn delete(
    broker: &Broker,
    context: &RequestContext,
    request: DeleteAclsRequest,
) -> DeleteAclsResponse {
    let failed = |code: i16, message: &str| {
        DeleteAclsFilterResult::default()
            .with_error_code(code)
            .with_error_message(Some(str_bytes(message)))
    };
    if let Some(refused) = refusal(context, Operation::Alter) {
        return DeleteAclsResponse::default().with_filter_results(
            request
                .filters
                .iter()
                .map(|_| failed(refused.error.code(), &refused.message))
                .collect(),
        );
    }
    let filters: Vec<AclFilterRecord> = request
        .filters
        .iter()
        .map(|f| AclFilterRecord {
            resource_type: f.resource_type_filter,
            resource_name: f.resource_name_filter.as_ref().map(|n| n.to_string()),
            pattern_type: f.pattern_type_filter,
            principal: f.principal_filter.as_ref().map(|p| p.to_string()),
            host: f.host_filter.as_ref().map(|h| h.to_string()),
            operation: f.operation,
            permission_type: f.permission_type,
        })
        .collect();
    let count = filters.len();
    let outcomes = match broker
        .call_controller(ControllerRequest::DeleteAcls(filters), ACL_WAIT)
        .await
    {
        Ok(ControllerResponse::AclsDeleted(outcomes)) if outcomes.len() == count => outcomes,
        Ok(other) => {
            let message = format!("the controller answered {}", other.summary());
            vec![(KafkaError::UnknownServerError.code(), message, Vec::new()); count]
        }
        Err(error) => vec![(error.error.code(), error.message, Vec::new()); count],
    };
    let removed: Vec<&AclRecord> = outcomes
        .iter()
        .flat_map(|(_, _, removed)| removed.iter())
        .collect();
    if !removed.is_empty() {
        broker
            .wait_for_image(ACL_WAIT, |image| {
                removed
                    .iter()
                    .all(|record| !image.acls.values().any(|acl| acl == *record))
            })
            .await;
    }
    DeleteAclsResponse::default().with_filter_results(
        outcomes
            .into_iter()
            .map(|(code, message, removed)| {
                if code != errors::NONE {
                    return failed(code, &message);
                }
                DeleteAclsFilterResult::default().with_matching_acls(
                    removed
                        .into_iter()
                        .map(|acl| {
                            DeleteAclsMatchingAcl::default()
                                .with_resource_type(acl.resource_type)
                                .with_resource_name(str_bytes(acl.resource_name))
                                .with_pattern_type(acl.pattern_type)
                                .with_principal(str_bytes(acl.principal))
                                .with_host(str_bytes(acl.host))
                                .with_operation(acl.operation)
                                .with_permission_type(acl.permission_type)
                        })
                        .collect(),
                )
            })
            .collect(),
    )
}
