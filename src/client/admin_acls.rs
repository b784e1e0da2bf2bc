//! [`Admin`]'s ACL operations, as Kafka's `AdminClient` has them (and `kafka-acls.sh` uses
//! them): create ACL bindings (CreateAcls), describe those a filter selects (DescribeAcls) and
//! delete them (DeleteAcls). The bindings and filters are `security::acl`'s, the types the
//! broker decides with, so what the SDK sends is what the authorizer reads.
//!
//! Every request goes to any broker (Kafka sends them to the least loaded node); a broker
//! forwards CreateAcls and DeleteAcls to the controller, where ACLs are metadata records.
//! Nothing is validated here beyond what the wire can carry: the broker answers each binding
//! or filter it refuses with INVALID_REQUEST and Kafka's message (`acl::validate_binding`,
//! `AclBindingFilter::validate`), so the SDK says exactly what Kafka's would.

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::admin::Admin;
use super::error::{Error, Result};
use crate::security::acl::{
    AccessControlEntry, AclBinding, AclBindingFilter, Operation, PatternType, Permission,
    ResourcePattern, ResourceType,
};

impl Admin {
    /// Creates ACLs. The answer has one entry per binding, in order: `Ok` when created (or
    /// already there), else the broker's error naming the binding (INVALID_REQUEST with
    /// Kafka's reason, CLUSTER_AUTHORIZATION_FAILED, SECURITY_DISABLED when the cluster has
    /// no authorizer). Fails as a whole only when the request is not answered.
    pub async fn create_acls(&self, bindings: &[AclBinding]) -> Result<Vec<Result<()>>> {
        if bindings.is_empty() {
            return Ok(Vec::new());
        }
        let request = create_request(bindings);
        let response = self.cluster().any().await?.send(&request).await?;
        creation_results(bindings, &response)
    }

    /// The ACLs `filter` selects (Kafka's ANY and MATCH semantics, decided by the broker),
    /// sorted by resource pattern, then entry.
    pub async fn describe_acls(&self, filter: &AclBindingFilter) -> Result<Vec<AclBinding>> {
        let request = describe_request(filter);
        let response = self.cluster().any().await?.send(&request).await?;
        described_bindings(&response)
    }

    /// Deletes the ACLs each filter selects. The answer has one entry per filter, in order:
    /// the bindings it deleted (none is not an error), or the error of the filter or of one
    /// of its bindings. Fails as a whole only when the request is not answered.
    pub async fn delete_acls(
        &self,
        filters: &[AclBindingFilter],
    ) -> Result<Vec<Result<Vec<AclBinding>>>> {
        if filters.is_empty() {
            return Ok(Vec::new());
        }
        let request = delete_request(filters);
        let response = self.cluster().any().await?.send(&request).await?;
        deletion_results(filters, &response)
    }
}

fn create_request(bindings: &[AclBinding]) -> CreateAclsRequest {
    CreateAclsRequest::default().with_creations(
        bindings
            .iter()
            .map(|binding| {
                let (pattern, entry) = (&binding.pattern, &binding.entry);
                AclCreation::default()
                    .with_resource_type(pattern.resource_type.code())
                    .with_resource_name(str_bytes(&pattern.name))
                    .with_resource_pattern_type(pattern.pattern_type.code())
                    .with_principal(str_bytes(&entry.principal))
                    .with_host(str_bytes(&entry.host))
                    .with_operation(entry.operation.code())
                    .with_permission_type(entry.permission.code())
            })
            .collect(),
    )
}

/// Each binding's outcome; the broker answers every creation, in order.
fn creation_results(
    bindings: &[AclBinding],
    response: &CreateAclsResponse,
) -> Result<Vec<Result<()>>> {
    if response.results.len() != bindings.len() {
        return Err(Error::Protocol(format!(
            "CreateAcls answered {} of {} creations",
            response.results.len(),
            bindings.len()
        )));
    }
    Ok(bindings
        .iter()
        .zip(&response.results)
        .map(|(binding, result)| {
            match Error::kafka(
                result.error_code,
                format!("ACL {binding}"),
                result.error_message.as_deref(),
            ) {
                Some(error) => Err(error),
                None => Ok(()),
            }
        })
        .collect())
}

fn describe_request(filter: &AclBindingFilter) -> DescribeAclsRequest {
    let (pattern, entry) = (&filter.pattern, &filter.entry);
    // Every field is set: the codec's defaults are not Kafka's "any" (empty strings, LITERAL).
    DescribeAclsRequest::default()
        .with_resource_type_filter(pattern.resource_type.code())
        .with_resource_name_filter(pattern.name.as_deref().map(str_bytes))
        .with_pattern_type_filter(pattern.pattern_type.code())
        .with_principal_filter(entry.principal.as_deref().map(str_bytes))
        .with_host_filter(entry.host.as_deref().map(str_bytes))
        .with_operation(entry.operation.code())
        .with_permission_type(entry.permission.code())
}

fn described_bindings(response: &DescribeAclsResponse) -> Result<Vec<AclBinding>> {
    if let Some(error) = Error::kafka(
        response.error_code,
        "describing ACLs",
        response.error_message.as_deref(),
    ) {
        return Err(error);
    }
    let mut bindings: Vec<AclBinding> = response
        .resources
        .iter()
        .flat_map(|resource| {
            let pattern = pattern_of(
                resource.resource_type,
                &resource.resource_name,
                resource.pattern_type,
            );
            resource.acls.iter().map(move |acl| AclBinding {
                pattern: pattern.clone(),
                entry: entry_of(
                    &acl.principal,
                    &acl.host,
                    acl.operation,
                    acl.permission_type,
                ),
            })
        })
        .collect();
    sort_bindings(&mut bindings);
    Ok(bindings)
}

fn delete_request(filters: &[AclBindingFilter]) -> DeleteAclsRequest {
    DeleteAclsRequest::default().with_filters(
        filters
            .iter()
            .map(|filter| {
                let (pattern, entry) = (&filter.pattern, &filter.entry);
                DeleteAclsFilter::default()
                    .with_resource_type_filter(pattern.resource_type.code())
                    .with_resource_name_filter(pattern.name.as_deref().map(str_bytes))
                    .with_pattern_type_filter(pattern.pattern_type.code())
                    .with_principal_filter(entry.principal.as_deref().map(str_bytes))
                    .with_host_filter(entry.host.as_deref().map(str_bytes))
                    .with_operation(entry.operation.code())
                    .with_permission_type(entry.permission.code())
            })
            .collect(),
    )
}

/// Each filter's outcome; the broker answers every filter, in order. A binding the broker
/// could not delete fails its filter's entry (the others it deleted are gone all the same).
fn deletion_results(
    filters: &[AclBindingFilter],
    response: &DeleteAclsResponse,
) -> Result<Vec<Result<Vec<AclBinding>>>> {
    if response.filter_results.len() != filters.len() {
        return Err(Error::Protocol(format!(
            "DeleteAcls answered {} of {} filters",
            response.filter_results.len(),
            filters.len()
        )));
    }
    Ok(filters
        .iter()
        .zip(&response.filter_results)
        .map(|(filter, result)| {
            if let Some(error) = Error::kafka(
                result.error_code,
                format!("deleting the ACLs matching {}", filter_text(filter)),
                result.error_message.as_deref(),
            ) {
                return Err(error);
            }
            let mut deleted = Vec::with_capacity(result.matching_acls.len());
            for acl in &result.matching_acls {
                let binding = AclBinding {
                    pattern: pattern_of(acl.resource_type, &acl.resource_name, acl.pattern_type),
                    entry: entry_of(
                        &acl.principal,
                        &acl.host,
                        acl.operation,
                        acl.permission_type,
                    ),
                };
                if let Some(error) = Error::kafka(
                    acl.error_code,
                    format!("deleting ACL {binding}"),
                    acl.error_message.as_deref(),
                ) {
                    return Err(error);
                }
                deleted.push(binding);
            }
            sort_bindings(&mut deleted);
            Ok(deleted)
        })
        .collect())
}

/// A pattern as the broker sent it; a code this client does not know reads as UNKNOWN, as
/// Kafka's `AdminClient` reads it.
fn pattern_of(resource_type: i8, name: &StrBytes, pattern_type: i8) -> ResourcePattern {
    ResourcePattern {
        resource_type: ResourceType::from_code(resource_type).unwrap_or(ResourceType::Unknown),
        name: name.to_string(),
        pattern_type: PatternType::from_code(pattern_type).unwrap_or(PatternType::Unknown),
    }
}

/// An entry as the broker sent it (unknown codes as UNKNOWN).
fn entry_of(
    principal: &StrBytes,
    host: &StrBytes,
    operation: i8,
    permission: i8,
) -> AccessControlEntry {
    AccessControlEntry {
        principal: principal.to_string(),
        host: host.to_string(),
        operation: Operation::from_code(operation).unwrap_or(Operation::Unknown),
        permission: Permission::from_code(permission).unwrap_or(Permission::Unknown),
    }
}

/// By resource type, name and pattern type, then principal, host, operation and permission:
/// the order `sluice acls list` prints, stable whatever order the broker keeps.
fn sort_bindings(bindings: &mut [AclBinding]) {
    bindings.sort_by(|a, b| {
        let key = |binding: &AclBinding| {
            let (pattern, entry) = (&binding.pattern, &binding.entry);
            (
                pattern.resource_type,
                pattern.name.clone(),
                pattern.pattern_type,
                entry.principal.clone(),
                entry.host.clone(),
                entry.operation,
                entry.permission,
            )
        };
        key(a).cmp(&key(b))
    });
}

/// A filter as Kafka's `AclBindingFilter.toString` prints it (`null` for "any name").
fn filter_text(filter: &AclBindingFilter) -> String {
    let (pattern, entry) = (&filter.pattern, &filter.entry);
    let or_null = |value: &Option<String>| value.clone().unwrap_or_else(|| "null".to_owned());
    format!(
        "(patternFilter=ResourcePatternFilter(resourceType={}, name={}, patternType={}), \
         entryFilter=(principal={}, host={}, operation={}, permissionType={}))",
        pattern.resource_type,
        or_null(&pattern.name),
        pattern.pattern_type,
        or_null(&entry.principal),
        or_null(&entry.host),
        entry.operation,
        entry.permission
    )
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::messages::create_acls_response::AclCreationResult;
    use kafka_protocol::messages::delete_acls_response::{
        DeleteAclsFilterResult, DeleteAclsMatchingAcl,
    };
    use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
    use kafka_protocol::protocol::{Decodable, Encodable};

    use super::*;
    use crate::protocol::errors;
    use crate::security::acl::{AccessControlEntryFilter, ResourcePatternFilter};

    fn alice_reads(topic: &str) -> AclBinding {
        AclBinding {
            pattern: ResourcePattern::literal(ResourceType::Topic, topic),
            entry: AccessControlEntry::allow("User:alice", "*", Operation::Read),
        }
    }

    /// The request as a broker decodes it, at every version both sides speak.
    fn round_trip<R: Encodable + Decodable>(request: &R, version: i16) -> R {
        let mut out = BytesMut::new();
        request.encode(&mut out, version).unwrap();
        R::decode(&mut out.freeze(), version).unwrap()
    }

    #[test]
    fn create_carries_kafkas_codes_for_every_field() {
        let bindings = [
            alice_reads("orders"),
            AclBinding {
                pattern: ResourcePattern::prefixed(ResourceType::Group, "app-"),
                entry: AccessControlEntry::deny("User:bob", "10.0.0.1", Operation::Describe),
            },
        ];
        let request = create_request(&bindings);
        for version in 1..=3 {
            let decoded = round_trip(&request, version);
            let [first, second] = decoded.creations.as_slice() else {
                panic!("two creations");
            };
            assert_eq!(
                (first.resource_type, first.resource_name.as_str()),
                (2, "orders")
            );
            assert_eq!(first.resource_pattern_type, 3);
            assert_eq!(
                (first.principal.as_str(), first.host.as_str()),
                ("User:alice", "*")
            );
            assert_eq!((first.operation, first.permission_type), (3, 3));
            assert_eq!((second.resource_type, second.resource_pattern_type), (3, 4));
            assert_eq!((second.operation, second.permission_type), (8, 2));
            assert_eq!(second.host.as_str(), "10.0.0.1");
        }
    }

    #[test]
    fn creation_results_name_the_refused_binding() {
        let bindings = [alice_reads("a"), alice_reads("b")];
        let response = CreateAclsResponse::default().with_results(vec![
            AclCreationResult::default(),
            AclCreationResult::default()
                .with_error_code(errors::INVALID_REQUEST)
                .with_error_message(Some(str_bytes("Invalid empty resource name"))),
        ]);
        let results = creation_results(&bindings, &response).unwrap();
        assert!(results[0].is_ok());
        let error = results[1].as_ref().unwrap_err();
        assert_eq!(error.code(), Some(errors::INVALID_REQUEST));
        let text = error.to_string();
        assert!(
            text.starts_with(
                "INVALID_REQUEST: ACL (pattern=ResourcePattern(resourceType=TOPIC, name=b"
            ) && text.ends_with("Invalid empty resource name"),
            "{text}"
        );
        let short = CreateAclsResponse::default().with_results(vec![AclCreationResult::default()]);
        assert!(matches!(
            creation_results(&bindings, &short),
            Err(Error::Protocol(_))
        ));
    }

    #[test]
    fn an_any_filter_is_sent_as_nulls_and_any_codes() {
        let decoded = round_trip(&describe_request(&AclBindingFilter::ANY), 3);
        assert_eq!(decoded.resource_type_filter, 1);
        assert_eq!(decoded.resource_name_filter, None);
        assert_eq!(decoded.pattern_type_filter, 1);
        assert_eq!(decoded.principal_filter, None);
        assert_eq!(decoded.host_filter, None);
        assert_eq!((decoded.operation, decoded.permission_type), (1, 1));

        let filter = AclBindingFilter {
            pattern: ResourcePatternFilter {
                resource_type: ResourceType::Topic,
                name: Some("orders".into()),
                pattern_type: PatternType::Match,
            },
            entry: AccessControlEntryFilter {
                principal: Some("User:alice".into()),
                host: Some("*".into()),
                operation: Operation::Write,
                permission: Permission::Allow,
            },
        };
        for version in 1..=3 {
            let decoded = round_trip(&describe_request(&filter), version);
            assert_eq!(decoded.resource_type_filter, 2);
            assert_eq!(decoded.resource_name_filter.as_deref(), Some("orders"));
            assert_eq!(decoded.pattern_type_filter, 2);
            assert_eq!(decoded.principal_filter.as_deref(), Some("User:alice"));
            assert_eq!(decoded.host_filter.as_deref(), Some("*"));
            assert_eq!((decoded.operation, decoded.permission_type), (4, 3));
            let deleted = round_trip(&delete_request(std::slice::from_ref(&filter)), version);
            let [sent] = deleted.filters.as_slice() else {
                panic!("one filter");
            };
            assert_eq!(
                (sent.resource_type_filter, sent.pattern_type_filter),
                (2, 2)
            );
            assert_eq!(sent.resource_name_filter.as_deref(), Some("orders"));
            assert_eq!(sent.principal_filter.as_deref(), Some("User:alice"));
            assert_eq!((sent.operation, sent.permission_type), (4, 3));
        }
    }

    fn description(principal: &str, operation: i8) -> AclDescription {
        AclDescription::default()
            .with_principal(str_bytes(principal))
            .with_host(str_bytes("*"))
            .with_operation(operation)
            .with_permission_type(3)
    }

    #[test]
    fn described_bindings_are_typed_and_sorted() {
        let response = DescribeAclsResponse::default().with_resources(vec![
            DescribeAclsResource::default()
                .with_resource_type(2)
                .with_resource_name(str_bytes("orders"))
                .with_pattern_type(3)
                .with_acls(vec![
                    description("User:bob", 4),
                    description("User:alice", 3),
                ]),
            DescribeAclsResource::default()
                .with_resource_type(2)
                .with_resource_name(str_bytes("audit"))
                .with_pattern_type(4)
                .with_acls(vec![description("User:carol", 99)]),
        ]);
        let bindings = described_bindings(&response).unwrap();
        let shown: Vec<String> = bindings.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "(pattern=ResourcePattern(resourceType=TOPIC, name=audit, patternType=PREFIXED), \
                 entry=(principal=User:carol, host=*, operation=UNKNOWN, permissionType=ALLOW))",
                "(pattern=ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL), \
                 entry=(principal=User:alice, host=*, operation=READ, permissionType=ALLOW))",
                "(pattern=ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL), \
                 entry=(principal=User:bob, host=*, operation=WRITE, permissionType=ALLOW))",
            ]
        );
        let refused = DescribeAclsResponse::default()
            .with_error_code(errors::CLUSTER_AUTHORIZATION_FAILED)
            .with_error_message(Some(str_bytes("no")));
        let error = described_bindings(&refused).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("CLUSTER_AUTHORIZATION_FAILED: describing ACLs: no"),
            "{error}"
        );
    }

    fn matching(principal: &str, error_code: i16) -> DeleteAclsMatchingAcl {
        DeleteAclsMatchingAcl::default()
            .with_error_code(error_code)
            .with_resource_type(2)
            .with_resource_name(str_bytes("orders"))
            .with_pattern_type(3)
            .with_principal(str_bytes(principal))
            .with_host(str_bytes("*"))
            .with_operation(3)
            .with_permission_type(3)
    }

    #[test]
    fn deletion_results_give_each_filter_its_deleted_bindings_or_error() {
        let filters = [
            alice_reads("orders").to_filter(),
            AclBindingFilter::ANY,
            AclBindingFilter::ANY,
            AclBindingFilter::ANY,
        ];
        let response = DeleteAclsResponse::default().with_filter_results(vec![
            DeleteAclsFilterResult::default().with_matching_acls(vec![matching("User:alice", 0)]),
            DeleteAclsFilterResult::default(),
            DeleteAclsFilterResult::default()
                .with_error_code(errors::INVALID_REQUEST)
                .with_error_message(Some(str_bytes("Unknown patternFilter."))),
            DeleteAclsFilterResult::default().with_matching_acls(vec![
                matching("User:alice", 0),
                matching("User:bob", errors::UNKNOWN_SERVER_ERROR),
            ]),
        ]);
        let results = deletion_results(&filters, &response).unwrap();
        assert_eq!(results[0].as_ref().unwrap(), &[alice_reads("orders")]);
        assert!(results[1].as_ref().unwrap().is_empty());
        let error = results[2].as_ref().unwrap_err().to_string();
        assert!(
            error.starts_with("INVALID_REQUEST: deleting the ACLs matching (patternFilter=")
                && error.ends_with("Unknown patternFilter."),
            "{error}"
        );
        assert!(error.contains("name=null"), "{error}");
        let error = results[3].as_ref().unwrap_err().to_string();
        assert!(error.contains("User:bob"), "{error}");
        let short = DeleteAclsResponse::default();
        assert!(matches!(
            deletion_results(&filters, &short),
            Err(Error::Protocol(_))
        ));
    }
}
