//! Security metadata: SCRAM credentials (AlterUserScramCredentials) and ACLs (CreateAcls,
//! DeleteAcls), decided as Kafka's `ScramControlManager` and `AclControlManager` decide them.
//! Every broker enforces what the quorum holds, so a credential or an ACL takes effect on all
//! of them once committed.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use sluice_raft::records::{AclRecord, ScramCredentialRecord, ScramMechanism};

use super::*;
use crate::protocol::errors::{self, ApiError, KafkaError};
use crate::security::acl::{
    AccessControlEntry, AccessControlEntryFilter, AclBinding, AclBindingFilter, Operation,
    PatternType, Permission, ResourcePattern, ResourcePatternFilter, ResourceType,
    validate_binding,
};
use crate::security::sasl::{
    Mechanism, SCRAM_ITERATIONS_MAX, SCRAM_ITERATIONS_MIN, ScramCredential,
};

/// A credential to set: what AlterUserScramCredentials carries (the client salted the
/// password; the broker never sees it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramUpsertion {
    pub user: String,
    /// Kafka's mechanism code (1: SCRAM-SHA-256, 2: SCRAM-SHA-512).
    pub mechanism: i8,
    pub iterations: i32,
    pub salt: Vec<u8>,
    pub salted_password: Vec<u8>,
}

/// A credential to remove.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramDeletion {
    pub user: String,
    pub mechanism: i8,
}

/// One result of a request naming things (a user): the name, Kafka's error code and message.
pub type NamedResult = (String, i16, String);

/// AlterUserScramCredentials: one result per user named (in the order first named), and the
/// records of those that succeed. A user named twice in one request is refused both times, as
/// Kafka refuses it.
pub fn alter_scram_credentials(
    image: &MetadataImage,
    deletions: &[ScramDeletion],
    upsertions: &[ScramUpsertion],
) -> (Vec<NamedResult>, Vec<MetadataRecord>) {
    let mut seen = HashSet::new();
    let mut duplicates = HashSet::new();
    let users = deletions
        .iter()
        .map(|d| d.user.as_str())
        .chain(upsertions.iter().map(|u| u.user.as_str()));
    for user in users {
        if !seen.insert(user) {
            duplicates.insert(user);
        }
    }
    let mut results: Vec<NamedResult> = Vec::new();
    let mut answered = HashSet::new();
    let mut records = Vec::new();
    let mut answer = |user: &str, outcome: Result<MetadataRecord, ApiError>| {
        if !answered.insert(user.to_owned()) {
            return;
        }
        let (code, message) = match outcome {
            Ok(record) => {
                records.push(record);
                (errors::NONE, String::new())
            }
            Err(error) => (error.error.code(), error.message),
        };
        results.push((user.to_owned(), code, message));
    };
    let duplicate = || {
        ApiError::new(
            KafkaError::DuplicateResource,
            "A user credential cannot be altered twice in the same request",
        )
    };
    for deletion in deletions {
        let outcome = if duplicates.contains(deletion.user.as_str()) {
            Err(duplicate())
        } else {
            delete_credential(image, deletion)
        };
        answer(&deletion.user, outcome);
    }
    for upsertion in upsertions {
        let outcome = if duplicates.contains(upsertion.user.as_str()) {
            Err(duplicate())
        } else {
            upsert_credential(upsertion)
        };
        answer(&upsertion.user, outcome);
    }
    (results, records)
}

fn scram_mechanism(code: i8) -> Result<ScramMechanism, ApiError> {
    ScramMechanism::from_code(code).ok_or_else(|| {
        ApiError::new(
            KafkaError::UnsupportedSaslMechanism,
            "Unknown SCRAM mechanism",
        )
    })
}

/// The SASL mechanism of a stored credential's.
pub fn sasl_mechanism(mechanism: ScramMechanism) -> Mechanism {
    match mechanism {
        ScramMechanism::ScramSha256 => Mechanism::ScramSha256,
        ScramMechanism::ScramSha512 => Mechanism::ScramSha512,
    }
}

fn delete_credential(
    image: &MetadataImage,
    deletion: &ScramDeletion,
) -> Result<MetadataRecord, ApiError> {
    if deletion.user.is_empty() {
        return Err(ApiError::new(
            KafkaError::UnacceptableCredential,
            "Username must not be empty",
        ));
    }
    let mechanism = scram_mechanism(deletion.mechanism)?;
    let exists = image
        .scram_credentials
        .get(&deletion.user)
        .is_some_and(|mechanisms| mechanisms.contains_key(&mechanism));
    if !exists {
        return Err(ApiError::new(
            KafkaError::ResourceNotFound,
            "Attempt to delete a user credential that does not exist",
        ));
    }
    Ok(MetadataRecord::UserScramCredential {
        user: deletion.user.clone(),
        mechanism,
        credential: None,
    })
}

fn upsert_credential(upsertion: &ScramUpsertion) -> Result<MetadataRecord, ApiError> {
    let unacceptable = |message: String| ApiError::new(KafkaError::UnacceptableCredential, message);
    if upsertion.user.is_empty() {
        return Err(unacceptable("Username must not be empty".into()));
    }
    let mechanism = scram_mechanism(upsertion.mechanism)?;
    if upsertion.iterations < SCRAM_ITERATIONS_MIN as i32 {
        return Err(unacceptable("Too few iterations".into()));
    }
    if upsertion.iterations > SCRAM_ITERATIONS_MAX as i32 {
        return Err(unacceptable("Too many iterations".into()));
    }
    let credential = ScramCredential::from_salted_password(
        sasl_mechanism(mechanism),
        &upsertion.salted_password,
        &upsertion.salt,
        upsertion.iterations as u32,
    )
    .map_err(|error| unacceptable(error.to_string()))?;
    Ok(MetadataRecord::UserScramCredential {
        user: upsertion.user.clone(),
        mechanism,
        credential: Some(ScramCredentialRecord {
            salt: credential.salt,
            stored_key: credential.stored_key,
            server_key: credential.server_key,
            iterations: credential.iterations,
        }),
    })
}

/// An ACL as the quorum stores it.
pub fn acl_record(binding: &AclBinding) -> AclRecord {
    AclRecord {
        resource_type: binding.pattern.resource_type.code(),
        resource_name: binding.pattern.name.clone(),
        pattern_type: binding.pattern.pattern_type.code(),
        principal: binding.entry.principal.clone(),
        host: binding.entry.host.clone(),
        operation: binding.entry.operation.code(),
        permission_type: binding.entry.permission.code(),
    }
}

/// A stored ACL (or one a request carries) as the authorizer reads it; codes it does not know
/// read as UNKNOWN (which validation refuses), as Kafka reads them.
pub fn acl_binding(record: &AclRecord) -> AclBinding {
    AclBinding {
        pattern: ResourcePattern {
            resource_type: ResourceType::from_code(record.resource_type)
                .unwrap_or(ResourceType::Unknown),
            name: record.resource_name.clone(),
            pattern_type: PatternType::from_code(record.pattern_type)
                .unwrap_or(PatternType::Unknown),
        },
        entry: AccessControlEntry {
            principal: record.principal.clone(),
            host: record.host.clone(),
            operation: Operation::from_code(record.operation).unwrap_or(Operation::Unknown),
            permission: Permission::from_code(record.permission_type)
                .unwrap_or(Permission::Unknown),
        },
    }
}

/// A DeleteAcls filter as a request carries it, in Kafka's codes (`None`: any).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclFilterRecord {
    pub resource_type: i8,
    pub resource_name: Option<String>,
    pub pattern_type: i8,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: i8,
    pub permission_type: i8,
}

impl AclFilterRecord {
    pub fn filter(&self) -> AclBindingFilter {
        AclBindingFilter {
            pattern: ResourcePatternFilter {
                resource_type: ResourceType::from_code(self.resource_type)
                    .unwrap_or(ResourceType::Unknown),
                name: self.resource_name.clone(),
                pattern_type: PatternType::from_code(self.pattern_type)
                    .unwrap_or(PatternType::Unknown),
            },
            entry: AccessControlEntryFilter {
                principal: self.principal.clone(),
                host: self.host.clone(),
                operation: Operation::from_code(self.operation).unwrap_or(Operation::Unknown),
                permission: Permission::from_code(self.permission_type)
                    .unwrap_or(Permission::Unknown),
            },
        }
    }
}

/// One CreateAcls result: Kafka's error code and message.
pub type AclCreation = (i16, String);

/// CreateAcls: a result per ACL, and the records of the new ones. An ACL the quorum already
/// holds (or that the request names twice) is created once and answers success, as in Kafka.
pub fn create_acls(
    image: &MetadataImage,
    acls: &[AclRecord],
    mut new_id: impl FnMut() -> Uuid,
) -> (Vec<AclCreation>, Vec<MetadataRecord>) {
    let mut existing: HashSet<&AclRecord> = image.acls.values().collect();
    let mut results = Vec::with_capacity(acls.len());
    let mut records = Vec::new();
    for acl in acls {
        if let Err(error) = validate_binding(&acl_binding(acl)) {
            results.push((KafkaError::InvalidRequest.code(), error.to_string()));
            continue;
        }
        if existing.insert(acl) {
            let mut id = new_id();
            while image.acls.contains_key(&id) {
                id = new_id();
            }
            records.push(MetadataRecord::Acl {
                id,
                acl: Some(acl.clone()),
            });
        }
        results.push((errors::NONE, String::new()));
    }
    (results, records)
}

/// One DeleteAcls result: Kafka's error code and message, and the ACLs the filter removed.
pub type AclDeletion = (i16, String, Vec<AclRecord>);

/// DeleteAcls: per filter, the ACLs it removes (an ACL two filters match is removed, and
/// reported, by the first), and the removal records.
pub fn delete_acls(
    image: &MetadataImage,
    filters: &[AclFilterRecord],
) -> (Vec<AclDeletion>, Vec<MetadataRecord>) {
    let mut removed = HashSet::new();
    let mut results = Vec::with_capacity(filters.len());
    let mut records = Vec::new();
    for filter in filters {
        let filter = filter.filter();
        if let Err(error) = filter.validate() {
            results.push((
                KafkaError::InvalidRequest.code(),
                error.to_string(),
                Vec::new(),
            ));
            continue;
        }
        let mut matched = Vec::new();
        for (id, acl) in image.acls.iter() {
            if filter.matches(&acl_binding(acl)) && removed.insert(*id) {
                records.push(MetadataRecord::Acl { id: *id, acl: None });
                matched.push(acl.clone());
            }
        }
        results.push((errors::NONE, String::new(), matched));
    }
    (results, records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::sasl::salted_password;
    use sluice_raft::image::MetadataDelta;

    fn upsertion(user: &str, mechanism: i8, iterations: i32) -> ScramUpsertion {
        let salt = vec![9; 32];
        let mechanism_of = if mechanism == 1 {
            Mechanism::ScramSha256
        } else {
            Mechanism::ScramSha512
        };
        let salted = salted_password(
            mechanism_of,
            b"secret",
            &salt,
            iterations.clamp(4096, 16384) as u32,
        )
        .expect("salted");
        ScramUpsertion {
            user: user.into(),
            mechanism,
            iterations,
            salt,
            salted_password: salted,
        }
    }

    fn apply(image: &MetadataImage, records: &[MetadataRecord]) -> MetadataImage {
        let mut delta = MetadataDelta::new(image);
        for record in records {
            delta.replay(record).expect("replay");
        }
        delta.apply(image.index + 1)
    }

    fn codes(results: &[NamedResult]) -> Vec<(&str, i16)> {
        results.iter().map(|(u, c, _)| (u.as_str(), *c)).collect()
    }

    #[test]
    fn scram_credentials_are_set_checked_and_removed_as_kafka_does() {
        let image = MetadataImage::default();
        let (results, records) = alter_scram_credentials(
            &image,
            &[],
            &[
                upsertion("alice", 2, 8192),
                upsertion("bob", 1, 4096),
                upsertion("", 2, 4096),
                upsertion("carol", 3, 4096),
                upsertion("dave", 2, 1000),
                upsertion("erin", 2, 20000),
            ],
        );
        assert_eq!(
            codes(&results),
            [
                ("alice", 0),
                ("bob", 0),
                ("", KafkaError::UnacceptableCredential.code()),
                ("carol", KafkaError::UnsupportedSaslMechanism.code()),
                ("dave", KafkaError::UnacceptableCredential.code()),
                ("erin", KafkaError::UnacceptableCredential.code()),
            ]
        );
        assert_eq!(results[4].2, "Too few iterations");
        assert_eq!(results[5].2, "Too many iterations");
        let image = apply(&image, &records);
        let alice = &image.scram_credentials["alice"][&ScramMechanism::ScramSha512];
        let expected = ScramCredential::derive(Mechanism::ScramSha512, b"secret", &[9; 32], 8192)
            .expect("derive");
        assert_eq!(alice.stored_key, expected.stored_key);
        assert_eq!(alice.server_key, expected.server_key);
        assert_eq!(alice.iterations, 8192);

        // A user named twice is refused, once in the results; deleting what is not there is
        // RESOURCE_NOT_FOUND.
        let (results, records) = alter_scram_credentials(
            &image,
            &[
                ScramDeletion {
                    user: "alice".into(),
                    mechanism: 2,
                },
                ScramDeletion {
                    user: "bob".into(),
                    mechanism: 2,
                },
                ScramDeletion {
                    user: "frank".into(),
                    mechanism: 1,
                },
            ],
            &[upsertion("alice", 1, 4096)],
        );
        assert_eq!(
            codes(&results),
            [
                ("alice", KafkaError::DuplicateResource.code()),
                ("bob", KafkaError::ResourceNotFound.code()),
                ("frank", KafkaError::ResourceNotFound.code()),
            ]
        );
        assert!(records.is_empty());
        let (results, records) = alter_scram_credentials(
            &image,
            &[ScramDeletion {
                user: "bob".into(),
                mechanism: 1,
            }],
            &[],
        );
        assert_eq!(codes(&results), [("bob", 0)]);
        let image = apply(&image, &records);
        assert!(!image.scram_credentials.contains_key("bob"));
    }

    fn acl(
        name: &str,
        pattern_type: PatternType,
        principal: &str,
        operation: Operation,
    ) -> AclRecord {
        acl_record(&AclBinding {
            pattern: ResourcePattern {
                resource_type: ResourceType::Topic,
                name: name.into(),
                pattern_type,
            },
            entry: AccessControlEntry::allow(principal, "*", operation),
        })
    }

    #[test]
    fn acls_are_created_once_validated_and_deleted_by_filter() {
        let image = MetadataImage::default();
        let mut next_id = 0u128;
        let mut ids = || {
            next_id += 1;
            Uuid(next_id)
        };
        let read = acl(
            "orders",
            PatternType::Literal,
            "User:alice",
            Operation::Read,
        );
        let write = acl("ord", PatternType::Prefixed, "User:bob", Operation::Write);
        let mut no_colon = read.clone();
        no_colon.principal = "alice".into();
        let mut any_pattern = read.clone();
        any_pattern.pattern_type = PatternType::Any.code();
        let mut unknown_operation = read.clone();
        unknown_operation.operation = 77;
        let (results, records) = create_acls(
            &image,
            &[
                read.clone(),
                write.clone(),
                read.clone(),
                no_colon,
                any_pattern,
                unknown_operation,
            ],
            &mut ids,
        );
        let codes: Vec<i16> = results.iter().map(|(code, _)| *code).collect();
        let invalid = KafkaError::InvalidRequest.code();
        assert_eq!(codes, [0, 0, 0, invalid, invalid, invalid]);
        assert_eq!(results[4].1, "Invalid patternType ANY");
        assert_eq!(records.len(), 2, "the ACL named twice is created once");
        let image = apply(&image, &records);
        let (_, again) = create_acls(&image, std::slice::from_ref(&read), &mut ids);
        assert!(again.is_empty(), "an existing ACL is not created again");

        // A MATCH filter for topic `orders` finds both; a second filter finding the same
        // reports nothing more.
        let matching = AclFilterRecord {
            resource_type: ResourceType::Topic.code(),
            resource_name: Some("orders".into()),
            pattern_type: PatternType::Match.code(),
            principal: None,
            host: None,
            operation: Operation::Any.code(),
            permission_type: Permission::Any.code(),
        };
        let mut unknown = matching.clone();
        unknown.operation = Operation::Unknown.code();
        let (results, records) =
            delete_acls(&image, &[matching.clone(), matching.clone(), unknown]);
        assert_eq!(results[0].2.len(), 2);
        assert!(results[1].2.is_empty());
        assert_eq!(results[2].0, invalid);
        assert_eq!(results[2].1, "Unknown entryFilter.");
        let image = apply(&image, &records);
        assert!(image.acls.is_empty());
    }
}
