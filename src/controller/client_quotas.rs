//! Client quotas (AlterClientQuotas), decided as Kafka's `ClientQuotaControlManager` decides
//! them: an entity is a user, a client id or both (KIP-55), each named or the default
//! (KIP-257); its keys are checked against the ones that apply to it, and only changes become
//! records. Every broker enforces what the quorum holds (`broker::client_quotas`).
//!
//! Sluice refuses what it does not enforce, with INVALID_REQUEST and a message saying so:
//! `controller_mutation_rate` (KIP-599) and IP entities (`connection_creation_rate`, KIP-612;
//! `max.connections.per.ip` and `max.connection.creation.rate` are the broker's keys for
//! that). A quota that no client would feel must not be accepted as if it were.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};
use sluice_raft::records::{ClientQuotaEntity, QuotaEntityName, QuotaValue};

use super::*;
use crate::protocol::errors::{self, ApiError, KafkaError};

/// The entity types of Kafka's `ClientQuotaEntity`.
pub const ENTITY_USER: &str = "user";
pub const ENTITY_CLIENT_ID: &str = "client-id";
pub const ENTITY_IP: &str = "ip";

/// The quota keys Kafka defines (`QuotaConfigs`), and whether Sluice enforces each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuotaKey {
    /// Bytes a second a user or client may produce (Kafka's LONG).
    ProducerByteRate,
    /// Bytes a second a user or client may fetch (Kafka's LONG).
    ConsumerByteRate,
    /// The percentage of one request-handling thread's time a user or client may use.
    RequestPercentage,
    /// Partitions a second a user or client may create or delete (KIP-599): not enforced.
    ControllerMutationRate,
    /// Connections a second an IP address may open (KIP-612): not enforced.
    ConnectionCreationRate,
}

impl QuotaKey {
    pub const ALL: [QuotaKey; 5] = [
        QuotaKey::ProducerByteRate,
        QuotaKey::ConsumerByteRate,
        QuotaKey::RequestPercentage,
        QuotaKey::ControllerMutationRate,
        QuotaKey::ConnectionCreationRate,
    ];

    /// Kafka's key.
    pub fn name(self) -> &'static str {
        match self {
            QuotaKey::ProducerByteRate => "producer_byte_rate",
            QuotaKey::ConsumerByteRate => "consumer_byte_rate",
            QuotaKey::RequestPercentage => "request_percentage",
            QuotaKey::ControllerMutationRate => "controller_mutation_rate",
            QuotaKey::ConnectionCreationRate => "connection_creation_rate",
        }
    }

    pub fn from_name(name: &str) -> Option<QuotaKey> {
        QuotaKey::ALL.into_iter().find(|key| key.name() == name)
    }

    /// Kafka's type is LONG (the value must be whole), else DOUBLE.
    fn is_long(self) -> bool {
        matches!(
            self,
            QuotaKey::ProducerByteRate | QuotaKey::ConsumerByteRate
        )
    }

    /// Why Sluice refuses to store this key, when it does not enforce it.
    fn unenforced(self) -> Option<&'static str> {
        match self {
            QuotaKey::ControllerMutationRate => Some(
                "controller_mutation_rate is not enforced by Sluice: KIP-599's throttling of \
                 topic and partition creation and deletion is not implemented, so the quota is \
                 refused rather than stored without effect",
            ),
            _ => None,
        }
    }
}

/// An AlterClientQuotas entry as the request carries it: the entity as (type, name) pairs
/// (a null name is the default), and per key a value to set or `None` to remove it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaAlteration {
    pub entity: Vec<(String, Option<String>)>,
    pub ops: Vec<(String, Option<f64>)>,
}

/// One AlterClientQuotas result per entry, in order: Kafka's error code and message.
pub type QuotaAlterationResult = (i16, String);

/// AlterClientQuotas: a result per entry and the records of the entries that succeed (only
/// values that change). An entry with any invalid part changes nothing; an entity named
/// twice in one request is refused both times.
pub fn alter_client_quotas(
    image: &MetadataImage,
    alterations: &[QuotaAlteration],
) -> (Vec<QuotaAlterationResult>, Vec<MetadataRecord>) {
    let entities: Vec<Result<ClientQuotaEntity, ApiError>> = alterations
        .iter()
        .map(|alteration| quota_entity(&alteration.entity))
        .collect();
    let mut seen = HashSet::new();
    let duplicates: HashSet<&ClientQuotaEntity> = entities
        .iter()
        .filter_map(|entity| entity.as_ref().ok())
        .filter(|entity| !seen.insert(*entity))
        .collect();
    let mut results = Vec::with_capacity(alterations.len());
    let mut records = Vec::new();
    for (alteration, entity) in alterations.iter().zip(&entities) {
        let decided = entity.clone().and_then(|entity| {
            if duplicates.contains(&entity) {
                return Err(ApiError::new(
                    KafkaError::InvalidRequest,
                    format!("Ignoring duplicate entity {entity}"),
                ));
            }
            alter_entity(image, &entity, &alteration.ops)
        });
        match decided {
            Ok(mut decided) => {
                records.append(&mut decided);
                results.push((errors::NONE, String::new()));
            }
            Err(error) => results.push((error.error.code(), error.message)),
        }
    }
    (results, records)
}

/// The entity of a request's (type, name) pairs, as Kafka's `validateEntity` and
/// `configKeysForEntityType` check it.
pub fn quota_entity(parts: &[(String, Option<String>)]) -> Result<ClientQuotaEntity, ApiError> {
    let invalid = |message: String| ApiError::new(KafkaError::InvalidRequest, message);
    if parts.is_empty() {
        return Err(invalid("Invalid empty client quota entity".into()));
    }
    let mut entity = ClientQuotaEntity::default();
    for (entity_type, name) in parts {
        let slot = match entity_type.as_str() {
            ENTITY_USER => &mut entity.user,
            ENTITY_CLIENT_ID => &mut entity.client_id,
            ENTITY_IP => &mut entity.ip,
            other => {
                return Err(invalid(format!(
                    "Unhandled client quota entity type: {other}"
                )));
            }
        };
        if slot.is_some() {
            return Err(invalid(format!(
                "Invalid empty client quota entity, duplicate entity entry {entity_type}"
            )));
        }
        if name.as_deref() == Some("") {
            return Err(invalid(format!("Empty {entity_type} not supported")));
        }
        *slot = Some(QuotaEntityName::from_option(name.as_deref()));
    }
    if entity.ip.is_some() {
        if entity.user.is_some() || entity.client_id.is_some() {
            return Err(invalid("Invalid empty client quota entity".into()));
        }
        return Err(invalid(
            "ip entities are not supported by Sluice: connection_creation_rate per IP \
             (KIP-612) is not enforced; max.connections.per.ip, \
             max.connections.per.ip.overrides and max.connection.creation.rate are the \
             broker's connection quotas"
                .into(),
        ));
    }
    Ok(entity)
}

/// The records that bring `entity`'s quotas to `ops`, or why none may.
fn alter_entity(
    image: &MetadataImage,
    entity: &ClientQuotaEntity,
    ops: &[(String, Option<f64>)],
) -> Result<Vec<MetadataRecord>, ApiError> {
    let invalid = |message: String| ApiError::new(KafkaError::InvalidRequest, message);
    let mut wanted: BTreeMap<&str, Option<f64>> = BTreeMap::new();
    for (key, value) in ops {
        if wanted.insert(key, *value).is_some() {
            return Err(invalid(format!(
                "Duplicate quota key {key} not updating quota for this entity {entity}"
            )));
        }
    }
    let current = image.client_quotas.get(entity);
    let mut records = Vec::new();
    for (key, value) in wanted {
        let held = current.and_then(|quotas| quotas.get(key));
        let Some(value) = value else {
            // A removal of what is not there is no change (Kafka does not check the key).
            if held.is_some() {
                records.push(MetadataRecord::ClientQuota {
                    entity: entity.clone(),
                    key: key.to_owned(),
                    value: None,
                });
            }
            continue;
        };
        check_quota_value(key, value)?;
        if held != Some(&QuotaValue(value)) {
            records.push(MetadataRecord::ClientQuota {
                entity: entity.clone(),
                key: key.to_owned(),
                value: Some(QuotaValue(value)),
            });
        }
    }
    Ok(records)
}

/// A key a user or client-id entity may hold, with a value Kafka accepts for it and Sluice
/// enforces.
fn check_quota_value(key: &str, value: f64) -> Result<(), ApiError> {
    let invalid = |message: String| ApiError::new(KafkaError::InvalidRequest, message);
    let quota = QuotaKey::from_name(key)
        .filter(|k| *k != QuotaKey::ConnectionCreationRate)
        .ok_or_else(|| invalid(format!("Invalid configuration key {key}")))?;
    if let Some(reason) = quota.unenforced() {
        return Err(invalid(reason.to_owned()));
    }
    if !value.is_finite() || value <= 0.0 {
        return Err(invalid(format!("Quota {key} must be greater than 0")));
    }
    if quota.is_long() {
        // Kafka's check: whole within 1e-6.
        let epsilon = 1e-6;
        let whole = (value + epsilon).trunc();
        if (whole - value).abs() > epsilon {
            return Err(invalid(format!("Configuration {key} must be a Long value")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_raft::image::MetadataDelta;

    fn apply(image: &MetadataImage, records: &[MetadataRecord]) -> MetadataImage {
        let mut delta = MetadataDelta::new(image);
        for record in records {
            delta.replay(record).expect("replay");
        }
        delta.apply(image.index + 1)
    }

    fn entry(entity: &[(&str, Option<&str>)], ops: &[(&str, Option<f64>)]) -> QuotaAlteration {
        QuotaAlteration {
            entity: entity
                .iter()
                .map(|(t, n)| ((*t).to_owned(), n.map(str::to_owned)))
                .collect(),
            ops: ops.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
        }
    }

    fn outcome(results: &[QuotaAlterationResult]) -> Vec<(i16, &str)> {
        results.iter().map(|(c, m)| (*c, m.as_str())).collect()
    }

    #[test]
    fn quotas_are_set_changed_only_when_different_and_removed() {
        let image = MetadataImage::default();
        let alice = entry(
            &[("user", Some("alice"))],
            &[
                ("producer_byte_rate", Some(1024.0)),
                ("request_percentage", Some(12.5)),
            ],
        );
        let defaults = entry(
            &[("user", None), ("client-id", None)],
            &[("consumer_byte_rate", Some(2048.0))],
        );
        let (results, records) = alter_client_quotas(&image, &[alice.clone(), defaults]);
        assert_eq!(outcome(&results), [(0, ""), (0, "")]);
        assert_eq!(records.len(), 3);
        let image = apply(&image, &records);
        let key = ClientQuotaEntity {
            user: Some(QuotaEntityName::Named("alice".into())),
            ..Default::default()
        };
        assert_eq!(
            image.client_quotas[&key]["request_percentage"],
            QuotaValue(12.5)
        );

        // The same values again: nothing to commit. A removal of a key not held: nothing.
        let (results, records) = alter_client_quotas(&image, &[alice]);
        assert_eq!(outcome(&results), [(0, "")]);
        assert!(records.is_empty());
        let (_, records) = alter_client_quotas(
            &image,
            &[entry(
                &[("user", Some("alice"))],
                &[("producer_byte_rate", None), ("consumer_byte_rate", None)],
            )],
        );
        assert_eq!(records.len(), 1);
        let image = apply(&image, &records);
        assert_eq!(image.client_quotas[&key].len(), 1);
    }

    #[test]
    fn bad_entities_keys_and_values_get_kafkas_invalid_request() {
        let image = MetadataImage::default();
        let invalid = KafkaError::InvalidRequest.code();
        let cases = [
            (
                entry(&[], &[("producer_byte_rate", Some(1.0))]),
                "Invalid empty client quota entity",
            ),
            (
                entry(
                    &[("group", Some("g"))],
                    &[("producer_byte_rate", Some(1.0))],
                ),
                "Unhandled client quota entity type: group",
            ),
            (
                entry(&[("user", Some("a")), ("user", Some("b"))], &[]),
                "duplicate entity entry user",
            ),
            (
                entry(&[("user", Some(""))], &[("producer_byte_rate", Some(1.0))]),
                "Empty user not supported",
            ),
            (
                entry(
                    &[("ip", Some("10.0.0.1"))],
                    &[("connection_creation_rate", Some(5.0))],
                ),
                "ip entities are not supported by Sluice",
            ),
            (
                entry(&[("user", Some("a"))], &[("no_such_rate", Some(1.0))]),
                "Invalid configuration key no_such_rate",
            ),
            (
                entry(
                    &[("user", Some("a"))],
                    &[("connection_creation_rate", Some(1.0))],
                ),
                "Invalid configuration key connection_creation_rate",
            ),
            (
                entry(
                    &[("user", Some("a"))],
                    &[("producer_byte_rate", Some(-5.0))],
                ),
                "Quota producer_byte_rate must be greater than 0",
            ),
            (
                entry(
                    &[("client-id", None)],
                    &[("request_percentage", Some(f64::NAN))],
                ),
                "Quota request_percentage must be greater than 0",
            ),
            (
                entry(
                    &[("user", Some("a"))],
                    &[("consumer_byte_rate", Some(10.5))],
                ),
                "Configuration consumer_byte_rate must be a Long value",
            ),
            (
                entry(
                    &[("user", Some("a"))],
                    &[("controller_mutation_rate", Some(10.0))],
                ),
                "controller_mutation_rate is not enforced by Sluice",
            ),
            (
                entry(
                    &[("user", Some("a"))],
                    &[
                        ("producer_byte_rate", Some(1.0)),
                        ("producer_byte_rate", None),
                    ],
                ),
                "Duplicate quota key producer_byte_rate",
            ),
        ];
        for (alteration, message) in cases {
            let (results, records) = alter_client_quotas(&image, std::slice::from_ref(&alteration));
            assert_eq!(results[0].0, invalid, "{alteration:?}");
            assert!(
                results[0].1.contains(message),
                "{alteration:?}: {:?} lacks {message:?}",
                results[0].1
            );
            assert!(records.is_empty(), "{alteration:?}");
        }

        // One bad key fails its entry only; an entity named twice fails both times.
        let good = entry(
            &[("client-id", Some("c"))],
            &[("producer_byte_rate", Some(10.0))],
        );
        let bad = entry(&[("user", Some("a"))], &[("producer_byte_rate", Some(0.0))]);
        let (results, records) = alter_client_quotas(&image, &[good.clone(), bad]);
        assert_eq!((results[0].0, results[1].0), (0, invalid));
        assert_eq!(records.len(), 1);
        let (results, records) = alter_client_quotas(&image, &[good.clone(), good]);
        assert_eq!((results[0].0, results[1].0), (invalid, invalid));
        assert!(records.is_empty());
    }
}
