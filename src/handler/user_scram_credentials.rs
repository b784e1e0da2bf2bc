//! DescribeUserScramCredentials (from this node's metadata image) and
//! AlterUserScramCredentials (decided and committed by the active controller; the answer waits
//! until this node applied the changes, so a client that logs in next, here, finds them).

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use sluice_raft::image::MetadataImage;
use sluice_raft::records::ScramMechanism;

use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::controller::service::{ControllerRequest, ControllerResponse};
use crate::controller::{ScramDeletion, ScramUpsertion};
use crate::protocol::errors::{self, KafkaError};
use crate::security::acl::Operation;

pub const DESCRIBE_VERSIONS: (i16, i16) = (0, 0);
pub const ALTER_VERSIONS: (i16, i16) = (0, 0);

const ALTER_WAIT: Duration = Duration::from_secs(30);

pub fn describe(
    broker: &Broker,
    context: &RequestContext,
    request: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    if !context.access.allows_cluster(Operation::Describe) {
        return DescribeUserScramCredentialsResponse::default()
            .with_error_code(KafkaError::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str_bytes("Cluster authorization failed.")));
    }
    let image = broker.image();
    let named: Vec<String> = request
        .users
        .unwrap_or_default()
        .into_iter()
        .map(|user| user.name.to_string())
        .collect();
    DescribeUserScramCredentialsResponse::default().with_results(describe_users(&image, &named))
}

/// Every user with a credential when `named` is empty (Kafka reads an empty list as a null
/// one), else each user named: its mechanisms and iterations, RESOURCE_NOT_FOUND when it has
/// none, DUPLICATE_RESOURCE when named twice.
fn describe_users(
    image: &MetadataImage,
    named: &[String],
) -> Vec<DescribeUserScramCredentialsResult> {
    // User -> named more than once.
    let mut users: BTreeMap<&str, bool> = BTreeMap::new();
    if named.is_empty() {
        for user in image.scram_credentials.keys() {
            users.insert(user, false);
        }
    } else {
        for user in named {
            users
                .entry(user)
                .and_modify(|twice| *twice = true)
                .or_insert(false);
        }
    }
    users
        .into_iter()
        .map(|(user, twice)| {
            let result = DescribeUserScramCredentialsResult::default().with_user(str_bytes(user));
            if twice {
                return result
                    .with_error_code(KafkaError::DuplicateResource.code())
                    .with_error_message(Some(str_bytes(format!(
                        "Cannot describe SCRAM credentials for the same user twice in a single request: {user}"
                    ))));
            }
            match image.scram_credentials.get(user) {
                Some(mechanisms) => result.with_credential_infos(
                    mechanisms
                        .iter()
                        .map(|(mechanism, credential)| {
                            CredentialInfo::default()
                                .with_mechanism(mechanism.code())
                                .with_iterations(credential.iterations as i32)
                        })
                        .collect(),
                ),
                None => result
                    .with_error_code(KafkaError::ResourceNotFound.code())
                    .with_error_message(Some(str_bytes(format!(
                        "Attempt to describe a user credential that does not exist: {user}"
                    )))),
            }
        })
        .collect()
}

pub async fn alter(
    broker: &Broker,
    context: &RequestContext,
    request: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let deletions: Vec<ScramDeletion> = request
        .deletions
        .iter()
        .map(|deletion| ScramDeletion {
            user: deletion.name.to_string(),
            mechanism: deletion.mechanism,
        })
        .collect();
    let upsertions: Vec<ScramUpsertion> = request
        .upsertions
        .iter()
        .map(|upsertion| ScramUpsertion {
            user: upsertion.name.to_string(),
            mechanism: upsertion.mechanism,
            iterations: upsertion.iterations,
            salt: upsertion.salt.to_vec(),
            salted_password: upsertion.salted_password.to_vec(),
        })
        .collect();
    let every_user_fails = |code: i16, message: &str| {
        let mut seen = std::collections::HashSet::new();
        let users: Vec<&str> = deletions
            .iter()
            .map(|d| d.user.as_str())
            .chain(upsertions.iter().map(|u| u.user.as_str()))
            .filter(|user| seen.insert(*user))
            .collect();
        AlterUserScramCredentialsResponse::default().with_results(
            users
                .into_iter()
                .map(|user| {
                    AlterUserScramCredentialsResult::default()
                        .with_user(str_bytes(user))
                        .with_error_code(code)
                        .with_error_message(Some(str_bytes(message)))
                })
                .collect(),
        )
    };
    if !context.access.allows_cluster(Operation::Alter) {
        return every_user_fails(
            KafkaError::ClusterAuthorizationFailed.code(),
            "Cluster authorization failed.",
        );
    }
    let request = ControllerRequest::AlterScramCredentials {
        deletions: deletions.clone(),
        upsertions: upsertions.clone(),
    };
    let results = match broker.call_controller(request, ALTER_WAIT).await {
        Ok(ControllerResponse::Named(results)) => results,
        Ok(other) => {
            return every_user_fails(
                KafkaError::UnknownServerError.code(),
                &format!("the controller answered {}", other.summary()),
            );
        }
        Err(error) => return every_user_fails(error.error.code(), &error.message),
    };
    // What this node must have applied before it answers: each change that succeeded.
    let succeeded = |user: &str| {
        results
            .iter()
            .any(|(name, code, _)| name == user && *code == errors::NONE)
    };
    let applied = |image: &MetadataImage| {
        let has = |user: &str, mechanism: i8| {
            ScramMechanism::from_code(mechanism).and_then(|m| {
                image
                    .scram_credentials
                    .get(user)
                    .and_then(|mechanisms| mechanisms.get(&m))
            })
        };
        deletions
            .iter()
            .filter(|d| succeeded(&d.user))
            .all(|d| has(&d.user, d.mechanism).is_none())
            && upsertions
                .iter()
                .filter(|u| succeeded(&u.user))
                .all(|u| has(&u.user, u.mechanism).is_some_and(|c| c.salt == u.salt))
    };
    broker.wait_for_image(ALTER_WAIT, applied).await;
    AlterUserScramCredentialsResponse::default().with_results(
        results
            .into_iter()
            .map(|(user, code, message)| {
                AlterUserScramCredentialsResult::default()
                    .with_user(str_bytes(user))
                    .with_error_code(code)
                    .with_error_message((code != errors::NONE).then(|| str_bytes(message)))
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_raft::image::MetadataDelta;
    use sluice_raft::records::{MetadataRecord, ScramCredentialRecord};

    #[test]
    fn describe_lists_every_user_or_the_ones_named_with_kafkas_errors() {
        let mut delta = MetadataDelta::new(&MetadataImage::default());
        for (user, mechanism, iterations) in [
            ("alice", ScramMechanism::ScramSha256, 4096),
            ("alice", ScramMechanism::ScramSha512, 8192),
            ("bob", ScramMechanism::ScramSha512, 4096),
        ] {
            delta
                .replay(&MetadataRecord::UserScramCredential {
                    user: user.into(),
                    mechanism,
                    credential: Some(ScramCredentialRecord {
                        salt: vec![1],
                        stored_key: vec![2],
                        server_key: vec![3],
                        iterations,
                    }),
                })
                .expect("replay");
        }
        let image = delta.apply(1);
        let all = describe_users(&image, &[]);
        let users: Vec<&str> = all.iter().map(|r| r.user.as_str()).collect();
        assert_eq!(users, ["alice", "bob"]);
        let alice: Vec<(i8, i32)> = all[0]
            .credential_infos
            .iter()
            .map(|c| (c.mechanism, c.iterations))
            .collect();
        assert_eq!(alice, [(1, 4096), (2, 8192)]);

        let named = describe_users(
            &image,
            &["bob".into(), "carol".into(), "alice".into(), "alice".into()],
        );
        let codes: Vec<(&str, i16)> = named
            .iter()
            .map(|r| (r.user.as_str(), r.error_code))
            .collect();
        assert_eq!(
            codes,
            [
                ("alice", KafkaError::DuplicateResource.code()),
                ("bob", errors::NONE),
                ("carol", KafkaError::ResourceNotFound.code()),
            ]
        );
        assert!(named[0].credential_infos.is_empty());
    }
}
