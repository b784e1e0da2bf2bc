//! [`Admin`]'s client quota operations, as Kafka's `AdminClient` has them (KIP-546) and
//! `kafka-configs.sh --entity-type users|clients` uses them: describe the quotas of the
//! entities a filter matches (DescribeClientQuotas), and set or remove quotas
//! (AlterClientQuotas).
//!
//! An entity is a user, a client id, or a user's client id (Kafka's `ClientQuotaEntity`), each
//! named or the default (`None`: every user, or client id, without a quota of its own). The
//! keys are Kafka's: `producer_byte_rate`, `consumer_byte_rate` (bytes a second),
//! `request_percentage` (percent of one request thread). Both requests go to any broker; a
//! broker forwards alterations to the controller, where quotas are metadata records.

use std::collections::BTreeMap;
use std::fmt;

use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::admin::Admin;
use super::error::{Error, Result};

/// Kafka's entity type of a user (its principal's name).
pub const QUOTA_ENTITY_USER: &str = "user";
/// Kafka's entity type of a client id.
pub const QUOTA_ENTITY_CLIENT_ID: &str = "client-id";
/// Kafka's entity type of an IP address (connection creation rate).
pub const QUOTA_ENTITY_IP: &str = "ip";

/// Whom quotas apply to (Kafka's `ClientQuotaEntity`): entity type to name, `None` for the
/// default of that type.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ClientQuotaEntity(pub BTreeMap<String, Option<String>>);

impl ClientQuotaEntity {
    /// A user (`None`: the default user).
    pub fn user(name: Option<&str>) -> Self {
        ClientQuotaEntity::default().with(QUOTA_ENTITY_USER, name)
    }

    /// A client id (`None`: the default client id).
    pub fn client_id(name: Option<&str>) -> Self {
        ClientQuotaEntity::default().with(QUOTA_ENTITY_CLIENT_ID, name)
    }

    /// This entity with one more part: `user(Some("alice")).with("client-id", Some("app"))`.
    pub fn with(mut self, entity_type: &str, name: Option<&str>) -> Self {
        self.0
            .insert(entity_type.to_owned(), name.map(str::to_owned));
        self
    }
}

/// As `kafka-configs.sh` names an entity: "user-principal 'alice', client-id 'app'", "the
/// default user-principal".
impl fmt::Display for ClientQuotaEntity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Users before client ids, as Kafka's tool prints them.
        let order = |t: &str| match t {
            QUOTA_ENTITY_USER => 0,
            QUOTA_ENTITY_CLIENT_ID => 1,
            _ => 2,
        };
        let mut parts: Vec<(&String, &Option<String>)> = self.0.iter().collect();
        parts.sort_by_key(|(t, _)| order(t));
        let words: Vec<String> = parts
            .into_iter()
            .map(|(entity_type, name)| {
                let kind = match entity_type.as_str() {
                    QUOTA_ENTITY_USER => "user-principal",
                    other => other,
                };
                match name {
                    Some(name) => format!("{kind} '{name}'"),
                    None => format!("the default {kind}"),
                }
            })
            .collect();
        f.write_str(&words.join(", "))
    }
}

/// What a filter component matches of its entity type (Kafka's match types).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuotaFilterMatch {
    /// This name.
    Exact(String),
    /// The default.
    Default,
    /// Any name, or the default.
    Any,
}

/// A part of a [`ClientQuotaFilter`] (Kafka's `ClientQuotaFilterComponent`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientQuotaFilterComponent {
    /// `user`, `client-id` or `ip`.
    pub entity_type: String,
    /// What it matches.
    pub matching: QuotaFilterMatch,
}

impl ClientQuotaFilterComponent {
    /// `entity_type` named `name` (`None`: its default).
    pub fn of_entity(entity_type: &str, name: Option<&str>) -> Self {
        ClientQuotaFilterComponent {
            entity_type: entity_type.to_owned(),
            matching: match name {
                Some(name) => QuotaFilterMatch::Exact(name.to_owned()),
                None => QuotaFilterMatch::Default,
            },
        }
    }

    /// Any entity of `entity_type`.
    pub fn of_entity_type(entity_type: &str) -> Self {
        ClientQuotaFilterComponent {
            entity_type: entity_type.to_owned(),
            matching: QuotaFilterMatch::Any,
        }
    }
}

/// Which entities to describe (Kafka's `ClientQuotaFilter`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientQuotaFilter {
    /// Each entity type at most once.
    pub components: Vec<ClientQuotaFilterComponent>,
    /// Only entities with no part beyond the components.
    pub strict: bool,
}

impl ClientQuotaFilter {
    /// Entities that match every component, and may have other parts.
    pub fn contains(components: Vec<ClientQuotaFilterComponent>) -> Self {
        ClientQuotaFilter {
            components,
            strict: false,
        }
    }

    /// Entities made of exactly the components.
    pub fn contains_only(components: Vec<ClientQuotaFilterComponent>) -> Self {
        ClientQuotaFilter {
            components,
            strict: true,
        }
    }

    /// Every entity with quotas.
    pub fn all() -> Self {
        ClientQuotaFilter::default()
    }
}

/// Changes to one entity's quotas (Kafka's `ClientQuotaAlteration`): per key, a value to
/// set, or `None` to remove it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientQuotaAlteration {
    /// Whose quotas.
    pub entity: ClientQuotaEntity,
    /// `(key, Some(value))` sets, `(key, None)` removes.
    pub ops: Vec<(String, Option<f64>)>,
}

/// An entity and its quotas, by key.
pub type ClientQuotaDescription = (ClientQuotaEntity, BTreeMap<String, f64>);

impl Admin {
    /// The quotas of the entities `filter` matches, sorted by entity. A filter the broker
    /// refuses (an entity type named twice, an unknown one) fails the call with its error.
    pub async fn describe_client_quotas(
        &self,
        filter: &ClientQuotaFilter,
    ) -> Result<Vec<ClientQuotaDescription>> {
        let request = describe_request(filter);
        let response = self.cluster().any().await?.send(&request).await?;
        quota_descriptions(&response)
    }

    /// Sets and removes quotas, in one request: an outcome per alteration, in order (`Ok`
    /// when applied, or would be with `validate_only`). An invalid key or value fails its
    /// entity only (INVALID_REQUEST naming it). Fails as a whole only when the request cannot
    /// be sent.
    pub async fn alter_client_quotas(
        &self,
        alterations: &[ClientQuotaAlteration],
        validate_only: bool,
    ) -> Result<Vec<(ClientQuotaEntity, Result<()>)>> {
        let request = alter_request(alterations, validate_only);
        let response = self.cluster().any().await?.send(&request).await?;
        Ok(alteration_results(alterations, &response))
    }
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn describe_request(filter: &ClientQuotaFilter) -> DescribeClientQuotasRequest {
    DescribeClientQuotasRequest::default()
        .with_strict(filter.strict)
        .with_components(
            filter
                .components
                .iter()
                .map(|c| {
                    let (match_type, name) = match &c.matching {
                        QuotaFilterMatch::Exact(name) => (0, Some(str_bytes(name))),
                        QuotaFilterMatch::Default => (1, None),
                        QuotaFilterMatch::Any => (2, None),
                    };
                    ComponentData::default()
                        .with_entity_type(str_bytes(&c.entity_type))
                        .with_match_type(match_type)
                        .with_match(name)
                })
                .collect(),
        )
}

fn quota_descriptions(
    response: &DescribeClientQuotasResponse,
) -> Result<Vec<ClientQuotaDescription>> {
    if let Some(error) = Error::kafka(
        response.error_code,
        "describing client quotas",
        response.error_message.as_deref(),
    ) {
        return Err(error);
    }
    let mut described: Vec<ClientQuotaDescription> = response
        .entries
        .iter()
        .flatten()
        .map(|entry| {
            let entity = ClientQuotaEntity(
                entry
                    .entity
                    .iter()
                    .map(|e| {
                        (
                            e.entity_type.to_string(),
                            e.entity_name.as_ref().map(|n| n.to_string()),
                        )
                    })
                    .collect(),
            );
            let values = entry
                .values
                .iter()
                .map(|v| (v.key.to_string(), v.value))
                .collect();
            (entity, values)
        })
        .collect();
    described.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(described)
}

fn alter_request(
    alterations: &[ClientQuotaAlteration],
    validate_only: bool,
) -> AlterClientQuotasRequest {
    AlterClientQuotasRequest::default()
        .with_validate_only(validate_only)
        .with_entries(
            alterations
                .iter()
                .map(|alteration| {
                    EntryData::default()
                        .with_entity(
                            alteration
                                .entity
                                .0
                                .iter()
                                .map(|(entity_type, name)| {
                                    EntityData::default()
                                        .with_entity_type(str_bytes(entity_type))
                                        .with_entity_name(name.as_deref().map(str_bytes))
                                })
                                .collect(),
                        )
                        .with_ops(
                            alteration
                                .ops
                                .iter()
                                .map(|(key, value)| {
                                    OpData::default()
                                        .with_key(str_bytes(key))
                                        .with_value(value.unwrap_or(0.0))
                                        .with_remove(value.is_none())
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

/// Each alteration's outcome: the broker's answer for its entity (answers come in request
/// order; one missing is a protocol error of that entity).
fn alteration_results(
    alterations: &[ClientQuotaAlteration],
    response: &AlterClientQuotasResponse,
) -> Vec<(ClientQuotaEntity, Result<()>)> {
    alterations
        .iter()
        .enumerate()
        .map(|(at, alteration)| {
            let entity = alteration.entity.clone();
            let outcome = match response.entries.get(at) {
                Some(entry) => match Error::kafka(
                    entry.error_code,
                    format!("client quotas of {entity}"),
                    entry.error_message.as_deref(),
                ) {
                    Some(error) => Err(error),
                    None => Ok(()),
                },
                None => Err(Error::Protocol(format!(
                    "AlterClientQuotas has no answer for {entity}"
                ))),
            };
            (entity, outcome)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::alter_client_quotas_response;
    use kafka_protocol::messages::describe_client_quotas_response::{
        EntityData as DescribedEntity, EntryData as DescribedEntry, ValueData,
    };

    #[test]
    fn requests_carry_kafkas_match_types_nulls_and_removals() {
        let filter = ClientQuotaFilter::contains_only(vec![
            ClientQuotaFilterComponent::of_entity(QUOTA_ENTITY_USER, Some("alice")),
            ClientQuotaFilterComponent::of_entity(QUOTA_ENTITY_CLIENT_ID, None),
            ClientQuotaFilterComponent::of_entity_type(QUOTA_ENTITY_IP),
        ]);
        let request = describe_request(&filter);
        assert!(request.strict);
        let components: Vec<(&str, i8, Option<&str>)> = request
            .components
            .iter()
            .map(|c| (c.entity_type.as_str(), c.match_type, c._match.as_deref()))
            .collect();
        assert_eq!(
            components,
            [
                ("user", 0, Some("alice")),
                ("client-id", 1, None),
                ("ip", 2, None)
            ]
        );

        let alteration = ClientQuotaAlteration {
            entity: ClientQuotaEntity::user(Some("alice")).with(QUOTA_ENTITY_CLIENT_ID, None),
            ops: vec![
                ("producer_byte_rate".into(), Some(1024.0)),
                ("consumer_byte_rate".into(), None),
            ],
        };
        let request = alter_request(std::slice::from_ref(&alteration), true);
        assert!(request.validate_only);
        let entry = &request.entries[0];
        let entity: Vec<(&str, Option<&str>)> = entry
            .entity
            .iter()
            .map(|e| (e.entity_type.as_str(), e.entity_name.as_deref()))
            .collect();
        assert_eq!(entity, [("client-id", None), ("user", Some("alice"))]);
        let ops: Vec<(&str, f64, bool)> = entry
            .ops
            .iter()
            .map(|o| (o.key.as_str(), o.value, o.remove))
            .collect();
        assert_eq!(
            ops,
            [
                ("producer_byte_rate", 1024.0, false),
                ("consumer_byte_rate", 0.0, true)
            ]
        );
        assert_eq!(
            alteration.entity.to_string(),
            "user-principal 'alice', the default client-id"
        );
    }

    #[test]
    fn answers_become_descriptions_and_outcomes_with_kafkas_errors() {
        let response = DescribeClientQuotasResponse::default().with_entries(Some(vec![
            DescribedEntry::default()
                .with_entity(vec![
                    DescribedEntity::default()
                        .with_entity_type(str_bytes("user"))
                        .with_entity_name(None),
                ])
                .with_values(vec![
                    ValueData::default()
                        .with_key(str_bytes("request_percentage"))
                        .with_value(25.0),
                ]),
        ]));
        let described = quota_descriptions(&response).expect("described");
        assert_eq!(described[0].0, ClientQuotaEntity::user(None));
        assert_eq!(described[0].1["request_percentage"], 25.0);
        let refused = DescribeClientQuotasResponse::default()
            .with_error_code(35)
            .with_error_message(Some(str_bytes("Unsupported entity type group")));
        let error = quota_descriptions(&refused).expect_err("refused");
        assert_eq!(error.code(), Some(35));
        assert!(error.to_string().contains("UNSUPPORTED_VERSION"), "{error}");

        let alterations = [
            ClientQuotaAlteration {
                entity: ClientQuotaEntity::user(Some("a")),
                ops: vec![("producer_byte_rate".into(), Some(1.0))],
            },
            ClientQuotaAlteration {
                entity: ClientQuotaEntity::client_id(Some("c")),
                ops: vec![("nope".into(), Some(1.0))],
            },
        ];
        let response = AlterClientQuotasResponse::default().with_entries(vec![
            alter_client_quotas_response::EntryData::default(),
            alter_client_quotas_response::EntryData::default()
                .with_error_code(42)
                .with_error_message(Some(str_bytes("Invalid configuration key nope"))),
        ]);
        let outcomes = alteration_results(&alterations, &response);
        assert!(outcomes[0].1.is_ok());
        let error = outcomes[1].1.as_ref().expect_err("refused");
        let text = error.to_string();
        assert!(
            text.contains("INVALID_REQUEST") && text.contains("Invalid configuration key nope"),
            "{text}"
        );
    }
}
