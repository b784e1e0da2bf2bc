//! [`Admin`]'s SCRAM credential operations, as Kafka's `AdminClient` has them (and
//! `kafka-configs.sh --entity-type users` uses them): describe which mechanisms each user has a
//! credential for (DescribeUserScramCredentials), and create, replace or delete credentials
//! (AlterUserScramCredentials).
//!
//! # The password never leaves the client
//! An upsert carries the salt and SCRAM's salted password (`Hi(password, salt, iterations)`),
//! which this client computes, as Kafka's `AdminClient` does; the broker derives the stored and
//! server keys from them. The salt is 32 random bytes from the operating system, fresh for
//! every upsert, so two credentials never share one.
//!
//! Both requests go to any broker (Kafka sends them to the least loaded node); a broker
//! forwards AlterUserScramCredentials to the controller, where credentials are metadata
//! records.

use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::admin::Admin;
use super::error::{Error, Result};
use crate::security::sasl::{Mechanism, SaslError, random_bytes, salted_password};

/// PBKDF2 iterations of a credential when none are given (`kafka-configs.sh`'s default, the
/// least Kafka accepts).
pub const DEFAULT_SCRAM_ITERATIONS: u32 = 4096;

/// The length of the salt this client draws for each upsert.
pub const SCRAM_SALT_BYTES: usize = 32;

/// One credential of a user: its mechanism and PBKDF2 iterations (Kafka's
/// `ScramCredentialInfo`). The salt and keys are never described.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScramCredentialInfo {
    /// SCRAM-SHA-256 or SCRAM-SHA-512.
    pub mechanism: Mechanism,
    /// The PBKDF2 iterations the credential was derived with.
    pub iterations: u32,
}

/// A user's SCRAM credentials (Kafka's `UserScramCredentialsDescription`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserScramCredentialsDescription {
    /// The user name (the principal is `User:<name>`).
    pub user: String,
    /// One per mechanism the user has a credential for, in mechanism order.
    pub credentials: Vec<ScramCredentialInfo>,
}

/// A change to one user's credential (Kafka's `UserScramCredentialUpsertion` and
/// `UserScramCredentialDeletion`).
#[derive(Clone, PartialEq, Eq)]
pub enum UserScramCredentialAlteration {
    /// Creates the user's credential for `mechanism`, or replaces it. The password is salted
    /// here and never sent.
    Upsert {
        /// The user name.
        user: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512.
        mechanism: Mechanism,
        /// PBKDF2 iterations: 4096 ([`DEFAULT_SCRAM_ITERATIONS`]) to 16384.
        iterations: u32,
        /// The password (UTF-8 for SCRAM clients to be able to log in).
        password: Vec<u8>,
    },
    /// Deletes the user's credential for `mechanism`.
    Delete {
        /// The user name.
        user: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512.
        mechanism: Mechanism,
    },
}

impl UserScramCredentialAlteration {
    /// An upsert with [`DEFAULT_SCRAM_ITERATIONS`].
    pub fn upsert(
        user: impl Into<String>,
        mechanism: Mechanism,
        password: impl Into<Vec<u8>>,
    ) -> Self {
        UserScramCredentialAlteration::Upsert {
            user: user.into(),
            mechanism,
            iterations: DEFAULT_SCRAM_ITERATIONS,
            password: password.into(),
        }
    }

    /// A deletion.
    pub fn delete(user: impl Into<String>, mechanism: Mechanism) -> Self {
        UserScramCredentialAlteration::Delete {
            user: user.into(),
            mechanism,
        }
    }

    /// The user it changes.
    pub fn user(&self) -> &str {
        match self {
            UserScramCredentialAlteration::Upsert { user, .. }
            | UserScramCredentialAlteration::Delete { user, .. } => user,
        }
    }

    /// The mechanism it changes.
    pub fn mechanism(&self) -> Mechanism {
        match self {
            UserScramCredentialAlteration::Upsert { mechanism, .. }
            | UserScramCredentialAlteration::Delete { mechanism, .. } => *mechanism,
        }
    }
}

/// The password is never printed (an alteration may end up in a log line).
impl fmt::Debug for UserScramCredentialAlteration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UserScramCredentialAlteration::Upsert {
                user,
                mechanism,
                iterations,
                ..
            } => f
                .debug_struct("Upsert")
                .field("user", user)
                .field("mechanism", mechanism)
                .field("iterations", iterations)
                .field("password", &"<hidden>")
                .finish(),
            UserScramCredentialAlteration::Delete { user, mechanism } => f
                .debug_struct("Delete")
                .field("user", user)
                .field("mechanism", mechanism)
                .finish(),
        }
    }
}

/// Kafka's wire code of a SCRAM mechanism (`ScramMechanism.type()`); `None` for PLAIN and
/// OAUTHBEARER, which have no stored credential.
pub(crate) fn scram_mechanism_code(mechanism: Mechanism) -> Option<i8> {
    match mechanism {
        Mechanism::ScramSha256 => Some(1),
        Mechanism::ScramSha512 => Some(2),
        Mechanism::Plain | Mechanism::OAuthBearer => None,
    }
}

/// The SCRAM mechanism of a wire code; `None` for 0 (Kafka's UNKNOWN) and codes Kafka does not
/// define.
pub(crate) fn scram_mechanism_of_code(code: i8) -> Option<Mechanism> {
    match code {
        1 => Some(Mechanism::ScramSha256),
        2 => Some(Mechanism::ScramSha512),
        _ => None,
    }
}

impl Admin {
    /// The SCRAM credentials of `users` (every user that has one for `None` or an empty list),
    /// sorted by user name. A named user without any credential fails the call with
    /// RESOURCE_NOT_FOUND naming the user, as Kafka's broker answers.
    pub async fn describe_user_scram_credentials(
        &self,
        users: Option<&[String]>,
    ) -> Result<Vec<UserScramCredentialsDescription>> {
        let request = describe_request(users);
        let response = self.cluster().any().await?.send(&request).await?;
        descriptions(&response)
    }

    /// Creates, replaces and deletes SCRAM credentials, in one request. The answer has one
    /// entry per user named (in the order first named): `Ok` when the user's alteration was
    /// applied, else the error. A user with an alteration this client cannot make (PLAIN,
    /// iterations outside 4096..=16384, a password over 1024 bytes) is not sent at all; the
    /// other users' alterations still are. Fails as a whole only when the request cannot be
    /// sent.
    ///
    /// Kafka's controller takes one alteration per user in a request: a user named twice,
    /// even for two mechanisms, is refused with DUPLICATE_RESOURCE ("A user credential cannot
    /// be altered twice in the same request"). Give a user's second mechanism its own call.
    pub async fn alter_user_scram_credentials(
        &self,
        alterations: &[UserScramCredentialAlteration],
    ) -> Result<Vec<(String, Result<()>)>> {
        let prepared = prepare_alterations(alterations, &mut || random_bytes(SCRAM_SALT_BYTES));
        let response =
            if prepared.request.upsertions.is_empty() && prepared.request.deletions.is_empty() {
                // Every user was refused here: nothing to send.
                AlterUserScramCredentialsResponse::default()
            } else {
                self.cluster().any().await?.send(&prepared.request).await?
            };
        Ok(alteration_results(prepared, &response))
    }
}

/// DescribeUserScramCredentials for `users`, each named once (Kafka's broker refuses a name
/// given twice with DUPLICATE_RESOURCE). Null asks for every user.
fn describe_request(users: Option<&[String]>) -> DescribeUserScramCredentialsRequest {
    let names = users.filter(|users| !users.is_empty()).map(|users| {
        let mut users: Vec<&String> = users.iter().collect();
        users.sort();
        users.dedup();
        users
            .into_iter()
            .map(|user| UserName::default().with_name(str_bytes(user)))
            .collect()
    });
    DescribeUserScramCredentialsRequest::default().with_users(names)
}

/// The descriptions of a DescribeUserScramCredentials answer, sorted by user; its first error
/// (the request's, then a user's) fails them all.
fn descriptions(
    response: &DescribeUserScramCredentialsResponse,
) -> Result<Vec<UserScramCredentialsDescription>> {
    if let Some(error) = Error::kafka(
        response.error_code,
        "describing SCRAM credentials",
        response.error_message.as_deref(),
    ) {
        return Err(error);
    }
    let mut described = Vec::with_capacity(response.results.len());
    for result in &response.results {
        let user = result.user.to_string();
        if let Some(error) = Error::kafka(
            result.error_code,
            format!("user {user}"),
            result.error_message.as_deref(),
        ) {
            return Err(error);
        }
        let mut credentials = Vec::with_capacity(result.credential_infos.len());
        for info in &result.credential_infos {
            let Some(mechanism) = scram_mechanism_of_code(info.mechanism) else {
                // A mechanism a newer broker knows and this client does not: it cannot be
                // used or deleted from here, so it is left out rather than failing the rest.
                tracing::warn!(
                    user = %user,
                    mechanism_code = info.mechanism,
                    "SCRAM credential of an unknown mechanism left out"
                );
                continue;
            };
            let iterations = u32::try_from(info.iterations).map_err(|_| {
                Error::Protocol(format!(
                    "DescribeUserScramCredentials gives user {user} a {mechanism} credential of {} iterations",
                    info.iterations
                ))
            })?;
            credentials.push(ScramCredentialInfo {
                mechanism,
                iterations,
            });
        }
        credentials.sort_by_key(|c| c.mechanism);
        described.push(UserScramCredentialsDescription { user, credentials });
    }
    described.sort_by(|a, b| a.user.cmp(&b.user));
    Ok(described)
}

/// An AlterUserScramCredentials request with what this client refused before sending.
#[derive(Debug)]
struct PreparedAlterations {
    request: AlterUserScramCredentialsRequest,
    /// Every user named, in the order first named.
    users: Vec<String>,
    /// Users left out of the request, with why.
    refused: BTreeMap<String, Error>,
}

/// The request for `alterations`: deletions by mechanism code, upserts with a salt from
/// `salt` and the salted password computed from it. A user any of whose alterations cannot
/// be made is left out entirely (Kafka's `AdminClient` does the same).
fn prepare_alterations(
    alterations: &[UserScramCredentialAlteration],
    salt: &mut dyn FnMut() -> Result<Vec<u8>, SaslError>,
) -> PreparedAlterations {
    let mut users: Vec<String> = Vec::new();
    let mut refused: BTreeMap<String, Error> = BTreeMap::new();
    let mut deletions: Vec<(String, ScramCredentialDeletion)> = Vec::new();
    let mut upsertions: Vec<(String, ScramCredentialUpsertion)> = Vec::new();
    for alteration in alterations {
        let user = alteration.user();
        if !users.iter().any(|u| u == user) {
            users.push(user.to_owned());
        }
        if refused.contains_key(user) {
            continue;
        }
        let refuse = |reason: String| Error::Config {
            key: format!("SCRAM credential of user {user}"),
            reason,
        };
        let Some(code) = scram_mechanism_code(alteration.mechanism()) else {
            refused.insert(
                user.to_owned(),
                refuse(format!(
                    "{} has no stored credential; use SCRAM-SHA-256 or SCRAM-SHA-512",
                    alteration.mechanism()
                )),
            );
            continue;
        };
        match alteration {
            UserScramCredentialAlteration::Delete { .. } => deletions.push((
                user.to_owned(),
                ScramCredentialDeletion::default()
                    .with_name(str_bytes(user))
                    .with_mechanism(code),
            )),
            UserScramCredentialAlteration::Upsert {
                mechanism,
                iterations,
                password,
                ..
            } => {
                let salted = salt().and_then(|salt| {
                    let salted = salted_password(*mechanism, password, &salt, *iterations)?;
                    Ok((salt, salted))
                });
                match (salted, i32::try_from(*iterations)) {
                    (Ok((salt, salted)), Ok(iterations)) => upsertions.push((
                        user.to_owned(),
                        ScramCredentialUpsertion::default()
                            .with_name(str_bytes(user))
                            .with_mechanism(code)
                            .with_iterations(iterations)
                            .with_salt(Bytes::from(salt))
                            .with_salted_password(Bytes::from(salted)),
                    )),
                    (Err(error), _) => {
                        refused.insert(user.to_owned(), refuse(error.to_string()));
                    }
                    (Ok(_), Err(_)) => {
                        refused.insert(
                            user.to_owned(),
                            refuse(format!("{iterations} iterations is out of range")),
                        );
                    }
                }
            }
        }
    }
    let request = AlterUserScramCredentialsRequest::default()
        .with_deletions(
            deletions
                .into_iter()
                .filter(|(user, _)| !refused.contains_key(user))
                .map(|(_, deletion)| deletion)
                .collect(),
        )
        .with_upsertions(
            upsertions
                .into_iter()
                .filter(|(user, _)| !refused.contains_key(user))
                .map(|(_, upsertion)| upsertion)
                .collect(),
        );
    PreparedAlterations {
        request,
        users,
        refused,
    }
}

/// Each user's outcome: refused here, or the broker's answer for it (a user the broker did
/// not answer for is a protocol error of that user).
fn alteration_results(
    prepared: PreparedAlterations,
    response: &AlterUserScramCredentialsResponse,
) -> Vec<(String, Result<()>)> {
    let PreparedAlterations {
        users, mut refused, ..
    } = prepared;
    users
        .into_iter()
        .map(|user| {
            if let Some(error) = refused.remove(&user) {
                return (user, Err(error));
            }
            let outcome = match response.results.iter().find(|r| r.user.as_str() == user) {
                Some(result) => match Error::kafka(
                    result.error_code,
                    format!("user {user}"),
                    result.error_message.as_deref(),
                ) {
                    Some(error) => Err(error),
                    None => Ok(()),
                },
                None => Err(Error::Protocol(format!(
                    "AlterUserScramCredentials has no answer for user {user}"
                ))),
            };
            (user, outcome)
        })
        .collect()
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
    use kafka_protocol::messages::describe_user_scram_credentials_response::{
        CredentialInfo, DescribeUserScramCredentialsResult,
    };
    use kafka_protocol::protocol::Encodable;

    use super::*;
    use crate::protocol::errors;

    /// Kafka's RESOURCE_NOT_FOUND and UNACCEPTABLE_CREDENTIAL.
    const RESOURCE_NOT_FOUND: i16 = 91;
    const UNACCEPTABLE_CREDENTIAL: i16 = 93;

    fn fixed_salt() -> Result<Vec<u8>, SaslError> {
        Ok(vec![7; SCRAM_SALT_BYTES])
    }

    fn encoded(request: &AlterUserScramCredentialsRequest) -> Vec<u8> {
        let mut out = bytes::BytesMut::new();
        request.encode(&mut out, 0).unwrap();
        out.to_vec()
    }

    #[test]
    fn mechanism_codes_are_kafkas() {
        assert_eq!(scram_mechanism_code(Mechanism::ScramSha256), Some(1));
        assert_eq!(scram_mechanism_code(Mechanism::ScramSha512), Some(2));
        assert_eq!(scram_mechanism_code(Mechanism::Plain), None);
        assert_eq!(scram_mechanism_code(Mechanism::OAuthBearer), None);
        for mechanism in [Mechanism::ScramSha256, Mechanism::ScramSha512] {
            let code = scram_mechanism_code(mechanism).unwrap();
            assert_eq!(scram_mechanism_of_code(code), Some(mechanism));
        }
        assert_eq!(scram_mechanism_of_code(0), None);
        assert_eq!(scram_mechanism_of_code(3), None);
    }

    #[test]
    fn an_upsert_sends_the_salted_password_and_never_the_password() {
        let password = b"alice-secret-password".to_vec();
        let alterations = [UserScramCredentialAlteration::Upsert {
            user: "alice".into(),
            mechanism: Mechanism::ScramSha256,
            iterations: 8192,
            password: password.clone(),
        }];
        let prepared = prepare_alterations(&alterations, &mut fixed_salt);
        assert!(prepared.refused.is_empty());
        assert!(prepared.request.deletions.is_empty());
        let [upsertion] = prepared.request.upsertions.as_slice() else {
            panic!("one upsertion: {:?}", prepared.request.upsertions);
        };
        assert_eq!(upsertion.name.as_str(), "alice");
        assert_eq!(upsertion.mechanism, 1);
        assert_eq!(upsertion.iterations, 8192);
        assert_eq!(upsertion.salt.as_ref(), &[7; SCRAM_SALT_BYTES][..]);
        let expected = salted_password(
            Mechanism::ScramSha256,
            &password,
            &[7; SCRAM_SALT_BYTES],
            8192,
        )
        .unwrap();
        assert_eq!(upsertion.salted_password.as_ref(), expected.as_slice());
        let wire = encoded(&prepared.request);
        assert!(
            !wire
                .windows(password.len())
                .any(|w| w == password.as_slice()),
            "the password is on the wire"
        );
    }

    #[test]
    fn every_upsert_draws_its_own_random_salt() {
        let alterations = [
            UserScramCredentialAlteration::upsert("alice", Mechanism::ScramSha256, "pw"),
            UserScramCredentialAlteration::upsert("bob", Mechanism::ScramSha512, "pw"),
        ];
        let prepared = prepare_alterations(&alterations, &mut || random_bytes(SCRAM_SALT_BYTES));
        let upsertions = &prepared.request.upsertions;
        assert_eq!(upsertions.len(), 2);
        assert_eq!(upsertions[0].salt.len(), SCRAM_SALT_BYTES);
        assert_ne!(upsertions[0].salt, upsertions[1].salt);
        assert_eq!(upsertions[1].mechanism, 2);
        assert_eq!(upsertions[1].iterations, DEFAULT_SCRAM_ITERATIONS as i32);
        let expected = salted_password(
            Mechanism::ScramSha512,
            b"pw",
            &upsertions[1].salt,
            DEFAULT_SCRAM_ITERATIONS,
        )
        .unwrap();
        assert_eq!(upsertions[1].salted_password.as_ref(), expected.as_slice());
    }

    #[test]
    fn a_user_with_an_impossible_alteration_is_not_sent_at_all() {
        let alterations = [
            UserScramCredentialAlteration::delete("bob", Mechanism::ScramSha256),
            UserScramCredentialAlteration::Upsert {
                user: "bob".into(),
                mechanism: Mechanism::ScramSha512,
                iterations: 100,
                password: b"pw".to_vec(),
            },
            UserScramCredentialAlteration::delete("carol", Mechanism::Plain),
            UserScramCredentialAlteration::delete("dave", Mechanism::ScramSha512),
        ];
        let prepared = prepare_alterations(&alterations, &mut fixed_salt);
        assert_eq!(prepared.users, ["bob", "carol", "dave"]);
        assert!(prepared.request.upsertions.is_empty());
        let deleted: Vec<(&str, i8)> = prepared
            .request
            .deletions
            .iter()
            .map(|d| (d.name.as_str(), d.mechanism))
            .collect();
        assert_eq!(deleted, [("dave", 2)]);
        let bob = prepared.refused["bob"].to_string();
        assert!(
            bob.contains("user bob") && bob.contains("100 iterations"),
            "{bob}"
        );
        let carol = prepared.refused["carol"].to_string();
        assert!(carol.contains("PLAIN"), "{carol}");
    }

    #[test]
    fn a_failing_random_source_refuses_the_upsert() {
        let alterations = [UserScramCredentialAlteration::upsert(
            "alice",
            Mechanism::ScramSha256,
            "pw",
        )];
        let prepared = prepare_alterations(&alterations, &mut || {
            Err(SaslError::Random {
                what: "no entropy".into(),
            })
        });
        assert!(prepared.request.upsertions.is_empty());
        assert!(prepared.refused["alice"].to_string().contains("no entropy"));
    }

    #[test]
    fn alteration_results_follow_the_order_users_were_named() {
        let alterations = [
            UserScramCredentialAlteration::delete("zed", Mechanism::ScramSha256),
            UserScramCredentialAlteration::delete("amy", Mechanism::Plain),
            UserScramCredentialAlteration::upsert("bob", Mechanism::ScramSha256, "pw"),
            UserScramCredentialAlteration::delete("zed", Mechanism::ScramSha512),
            UserScramCredentialAlteration::delete("unanswered", Mechanism::ScramSha512),
        ];
        let prepared = prepare_alterations(&alterations, &mut fixed_salt);
        let response = AlterUserScramCredentialsResponse::default().with_results(vec![
            AlterUserScramCredentialsResult::default()
                .with_user(str_bytes("bob"))
                .with_error_code(UNACCEPTABLE_CREDENTIAL)
                .with_error_message(Some(str_bytes("Too few iterations"))),
            AlterUserScramCredentialsResult::default().with_user(str_bytes("zed")),
        ]);
        let results = alteration_results(prepared, &response);
        let users: Vec<&str> = results.iter().map(|(u, _)| u.as_str()).collect();
        assert_eq!(users, ["zed", "amy", "bob", "unanswered"]);
        assert!(results[0].1.is_ok());
        assert!(matches!(results[1].1, Err(Error::Config { .. })));
        let bob = results[2].1.as_ref().unwrap_err();
        assert_eq!(bob.code(), Some(UNACCEPTABLE_CREDENTIAL));
        assert!(
            bob.to_string().contains("user bob: Too few iterations"),
            "{bob}"
        );
        assert!(matches!(results[3].1, Err(Error::Protocol(_))));
    }

    #[test]
    fn describe_asks_for_every_user_with_null_and_names_each_once() {
        assert_eq!(describe_request(None).users, None);
        assert_eq!(describe_request(Some(&[])).users, None);
        let named = describe_request(Some(&["bob".into(), "alice".into(), "bob".into()]));
        let names: Vec<&str> = named
            .users
            .iter()
            .flatten()
            .map(|u| u.name.as_str())
            .collect();
        assert_eq!(names, ["alice", "bob"]);
    }

    fn described(user: &str, infos: &[(i8, i32)]) -> DescribeUserScramCredentialsResult {
        DescribeUserScramCredentialsResult::default()
            .with_user(str_bytes(user))
            .with_credential_infos(
                infos
                    .iter()
                    .map(|&(mechanism, iterations)| {
                        CredentialInfo::default()
                            .with_mechanism(mechanism)
                            .with_iterations(iterations)
                    })
                    .collect(),
            )
    }

    #[test]
    fn descriptions_are_sorted_and_typed() {
        let response = DescribeUserScramCredentialsResponse::default().with_results(vec![
            described("bob", &[(2, 4096)]),
            described("alice", &[(2, 8192), (1, 4096), (9, 4096)]),
        ]);
        let descriptions_got = descriptions(&response).unwrap();
        assert_eq!(
            descriptions_got,
            [
                UserScramCredentialsDescription {
                    user: "alice".into(),
                    credentials: vec![
                        ScramCredentialInfo {
                            mechanism: Mechanism::ScramSha256,
                            iterations: 4096
                        },
                        ScramCredentialInfo {
                            mechanism: Mechanism::ScramSha512,
                            iterations: 8192
                        },
                    ],
                },
                UserScramCredentialsDescription {
                    user: "bob".into(),
                    credentials: vec![ScramCredentialInfo {
                        mechanism: Mechanism::ScramSha512,
                        iterations: 4096
                    }],
                },
            ]
        );
        let negative = DescribeUserScramCredentialsResponse::default()
            .with_results(vec![described("x", &[(1, -1)])]);
        assert!(matches!(descriptions(&negative), Err(Error::Protocol(_))));
    }

    #[test]
    fn a_user_without_credentials_fails_the_description_naming_the_user() {
        let response = DescribeUserScramCredentialsResponse::default().with_results(vec![
            described("alice", &[(1, 4096)]),
            described("nobody", &[])
                .with_error_code(RESOURCE_NOT_FOUND)
                .with_error_message(Some(str_bytes(
                    "Attempt to describe a user credential that does not exist: nobody",
                ))),
        ]);
        let error = descriptions(&response).unwrap_err();
        assert_eq!(error.code(), Some(RESOURCE_NOT_FOUND));
        assert!(error.to_string().contains("user nobody"), "{error}");
        let refused = DescribeUserScramCredentialsResponse::default()
            .with_error_code(errors::CLUSTER_AUTHORIZATION_FAILED);
        let error = descriptions(&refused).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("CLUSTER_AUTHORIZATION_FAILED"),
            "{error}"
        );
    }

    #[test]
    fn debug_hides_the_password() {
        let upsert =
            UserScramCredentialAlteration::upsert("alice", Mechanism::ScramSha256, "hunter2");
        let text = format!("{upsert:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(
            text.contains("alice") && text.contains("<hidden>"),
            "{text}"
        );
    }
}
