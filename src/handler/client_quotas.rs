//! DescribeClientQuotas (from this node's metadata image, filtered as Kafka's
//! `ClientQuotasImage.describe` filters) and AlterClientQuotas (decided and committed by the
//! active controller, KIP-546; the answer waits until this node applied the changes, so the
//! client's next request here is throttled by them). DESCRIBE_CONFIGS and ALTER_CONFIGS on the
//! cluster, as Kafka asks.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse, alter_client_quotas_response,
};
use sluice_raft::image::MetadataImage;
use sluice_raft::records::{ClientQuotaEntity, QuotaEntityName, QuotaValue};

use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::controller::client_quotas::{
    ENTITY_CLIENT_ID, ENTITY_IP, ENTITY_USER, QuotaAlteration, quota_entity,
};
use crate::controller::service::{ControllerRequest, ControllerResponse};
use crate::protocol::errors::{self, ApiError, KafkaError};
use crate::security::acl::Operation;

pub const DESCRIBE_VERSIONS: (i16, i16) = (0, 1);
pub const ALTER_VERSIONS: (i16, i16) = (0, 1);

const ALTER_WAIT: Duration = Duration::from_secs(30);

/// A quota key and the value to set, or `None` to remove it.
type QuotaOp = (String, Option<f64>);

const CLUSTER_DENIED: &str = "Cluster authorization failed.";

/// DescribeClientQuotas' match types.
const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_SPECIFIED: i8 = 2;

pub fn describe(
    broker: &Broker,
    context: &RequestContext,
    request: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    if !context.access.allows_cluster(Operation::DescribeConfigs) {
        return DescribeClientQuotasResponse::default()
            .with_error_code(KafkaError::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str_bytes(CLUSTER_DENIED)))
            .with_entries(None);
    }
    let components: Vec<(String, i8, Option<String>)> = request
        .components
        .iter()
        .map(|c| {
            (
                c.entity_type.to_string(),
                c.match_type,
                c._match.as_ref().map(|m| m.to_string()),
            )
        })
        .collect();
    match describe_quotas(&broker.image(), &components, request.strict) {
        Ok(entries) => DescribeClientQuotasResponse::default()
            .with_error_message(None)
            .with_entries(Some(entries)),
        Err(error) => DescribeClientQuotasResponse::default()
            .with_error_code(error.error.code())
            .with_error_message(Some(str_bytes(error.message)))
            .with_entries(None),
    }
}

/// What a filter component asks of an entity's part of its type.
#[derive(Debug, PartialEq)]
enum Wanted {
    /// This name, or the default (`QuotaEntityName::Default`).
    Exactly(QuotaEntityName),
    /// Any name, or the default.
    Any,
}

/// The entities a filter matches, with their quotas. Each component names an entity type
/// once; `strict` keeps only entities with no other part. No component and not strict:
/// every entity.
fn describe_quotas(
    image: &MetadataImage,
    components: &[(String, i8, Option<String>)],
    strict: bool,
) -> Result<Vec<EntryData>, ApiError> {
    let invalid = |message: String| ApiError::new(KafkaError::InvalidRequest, message);
    let mut filter: BTreeMap<&str, Wanted> = BTreeMap::new();
    for (entity_type, match_type, name) in components {
        if entity_type.is_empty() {
            return Err(invalid("Invalid empty entity type.".into()));
        }
        if filter.contains_key(entity_type.as_str()) {
            return Err(invalid(format!(
                "Entity type {entity_type} cannot appear more than once in the filter."
            )));
        }
        if ![ENTITY_USER, ENTITY_CLIENT_ID, ENTITY_IP].contains(&entity_type.as_str()) {
            return Err(ApiError::new(
                KafkaError::UnsupportedVersion,
                format!("Unsupported entity type {entity_type}"),
            ));
        }
        let wanted = match (*match_type, name) {
            (MATCH_EXACT, Some(name)) => Wanted::Exactly(QuotaEntityName::Named(name.clone())),
            (MATCH_EXACT, None) => {
                return Err(invalid(
                    "Request specified MATCH_TYPE_EXACT, but set match string to null.".into(),
                ));
            }
            (MATCH_DEFAULT, None) => Wanted::Exactly(QuotaEntityName::Default),
            (MATCH_DEFAULT, Some(_)) => {
                return Err(invalid(
                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                        .into(),
                ));
            }
            (MATCH_SPECIFIED, None) => Wanted::Any,
            (MATCH_SPECIFIED, Some(_)) => {
                return Err(invalid(
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                        .into(),
                ));
            }
            (other, _) => return Err(invalid(format!("Unknown match type {other}"))),
        };
        filter.insert(entity_type, wanted);
    }
    if filter.contains_key(ENTITY_IP)
        && (filter.contains_key(ENTITY_USER) || filter.contains_key(ENTITY_CLIENT_ID))
    {
        return Err(invalid(
            "Invalid entity filter component combination. IP filter component should not be \
             used with user or clientId filter component."
                .into(),
        ));
    }
    if filter.is_empty() && strict {
        return Ok(Vec::new());
    }
    let matches = |entity: &ClientQuotaEntity| {
        let parts: BTreeMap<&str, &QuotaEntityName> = entity.parts().collect();
        let each = filter.iter().all(|(entity_type, wanted)| {
            parts.get(entity_type).is_some_and(|name| match wanted {
                Wanted::Exactly(want) => *name == want,
                Wanted::Any => true,
            })
        });
        each && (!strict || parts.len() == filter.len())
    };
    Ok(image
        .client_quotas
        .iter()
        .filter(|(entity, _)| matches(entity))
        .map(|(entity, quotas)| describe_entry(entity, quotas))
        .collect())
}

fn describe_entry(entity: &ClientQuotaEntity, quotas: &BTreeMap<String, QuotaValue>) -> EntryData {
    EntryData::default()
        .with_entity(
            entity
                .parts()
                .map(|(entity_type, name)| {
                    EntityData::default()
                        .with_entity_type(str_bytes(entity_type))
                        .with_entity_name(name.as_option().map(str_bytes))
                })
                .collect(),
        )
        .with_values(
            quotas
                .iter()
                .map(|(key, value)| {
                    ValueData::default()
                        .with_key(str_bytes(key.as_str()))
                        .with_value(value.0)
                })
                .collect(),
        )
}

pub async fn alter(
    broker: &Broker,
    context: &RequestContext,
    request: AlterClientQuotasRequest,
) -> AlterClientQuotasResponse {
    let alterations: Vec<QuotaAlteration> = request
        .entries
        .iter()
        .map(|entry| QuotaAlteration {
            entity: entry
                .entity
                .iter()
                .map(|e| {
                    (
                        e.entity_type.to_string(),
                        e.entity_name.as_ref().map(|n| n.to_string()),
                    )
                })
                .collect(),
            ops: entry
                .ops
                .iter()
                .map(|op| (op.key.to_string(), (!op.remove).then_some(op.value)))
                .collect(),
        })
        .collect();
    let answer = |results: Vec<(i16, String)>| {
        AlterClientQuotasResponse::default().with_entries(
            request
                .entries
                .iter()
                .zip(results)
                .map(|(entry, (code, message))| {
                    alter_client_quotas_response::EntryData::default()
                        .with_error_code(code)
                        .with_error_message((code != errors::NONE).then(|| str_bytes(message)))
                        .with_entity(
                            entry
                                .entity
                                .iter()
                                .map(|e| {
                                    alter_client_quotas_response::EntityData::default()
                                        .with_entity_type(e.entity_type.clone())
                                        .with_entity_name(e.entity_name.clone())
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
    };
    let count = alterations.len();
    if !context.access.allows_cluster(Operation::AlterConfigs) {
        let denied = KafkaError::ClusterAuthorizationFailed.code();
        return answer(vec![(denied, CLUSTER_DENIED.to_owned()); count]);
    }
    let call = ControllerRequest::AlterClientQuotas {
        alterations: alterations.clone(),
        validate_only: request.validate_only,
    };
    let results = match broker.call_controller(call, ALTER_WAIT).await {
        Ok(ControllerResponse::ClientQuotasAltered(results)) if results.len() == count => results,
        Ok(other) => {
            let message = format!("the controller answered {}", other.summary());
            vec![(KafkaError::UnknownServerError.code(), message); count]
        }
        Err(error) => vec![(error.error.code(), error.message); count],
    };
    if !request.validate_only {
        // What this node must have applied before it answers: each entry that succeeded.
        let changed: Vec<(ClientQuotaEntity, &[QuotaOp])> = alterations
            .iter()
            .zip(&results)
            .filter(|(_, (code, _))| *code == errors::NONE)
            .filter_map(|(alteration, _)| {
                quota_entity(&alteration.entity)
                    .ok()
                    .map(|entity| (entity, alteration.ops.as_slice()))
            })
            .collect();
        if !changed.is_empty() {
            broker
                .wait_for_image(ALTER_WAIT, |image| {
                    changed.iter().all(|(entity, ops)| {
                        let held = image.client_quotas.get(entity);
                        ops.iter().all(|(key, value)| {
                            held.and_then(|quotas| quotas.get(key)).map(|v| v.0) == *value
                        })
                    })
                })
                .await;
        }
    }
    answer(results)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_raft::image::MetadataDelta;
    use sluice_raft::records::MetadataRecord;

    fn named(name: &str) -> Option<QuotaEntityName> {
        Some(QuotaEntityName::Named(name.into()))
    }

    fn image() -> MetadataImage {
        let entities = [
            ClientQuotaEntity {
                user: named("alice"),
                ..Default::default()
            },
            ClientQuotaEntity {
                user: named("alice"),
                client_id: named("app"),
                ..Default::default()
            },
            ClientQuotaEntity {
                user: Some(QuotaEntityName::Default),
                ..Default::default()
            },
            ClientQuotaEntity {
                client_id: Some(QuotaEntityName::Default),
                ..Default::default()
            },
        ];
        let mut delta = MetadataDelta::new(&MetadataImage::default());
        for (i, entity) in entities.into_iter().enumerate() {
            delta
                .replay(&MetadataRecord::ClientQuota {
                    entity,
                    key: "producer_byte_rate".into(),
                    value: Some(QuotaValue(1000.0 * (i + 1) as f64)),
                })
                .expect("replay");
        }
        delta.apply(1)
    }

    /// Each entry as "type=name|<default>,..." with its producer_byte_rate.
    fn shown(entries: &[EntryData]) -> Vec<String> {
        entries
            .iter()
            .map(|e| {
                let entity: Vec<String> = e
                    .entity
                    .iter()
                    .map(|p| {
                        format!(
                            "{}={}",
                            p.entity_type,
                            p.entity_name.as_deref().unwrap_or("<default>")
                        )
                    })
                    .collect();
                format!("{} {}", entity.join(","), e.values[0].value)
            })
            .collect()
    }

    fn component(
        entity_type: &str,
        match_type: i8,
        name: Option<&str>,
    ) -> (String, i8, Option<String>) {
        (entity_type.into(), match_type, name.map(str::to_owned))
    }

    #[test]
    fn filters_match_as_kafkas_client_quotas_image() {
        let image = image();
        let all = describe_quotas(&image, &[], false).expect("all");
        assert_eq!(all.len(), 4);
        assert!(describe_quotas(&image, &[], true).expect("none").is_empty());

        // alice, and (not strict) alice's client too.
        let alice = [component("user", MATCH_EXACT, Some("alice"))];
        assert_eq!(
            shown(&describe_quotas(&image, &alice, true).expect("strict")),
            ["user=alice 1000"]
        );
        assert_eq!(
            shown(&describe_quotas(&image, &alice, false).expect("loose")),
            ["user=alice 1000", "user=alice,client-id=app 2000"]
        );
        // The default user; every user entity (named or default), strictly.
        assert_eq!(
            shown(
                &describe_quotas(&image, &[component("user", MATCH_DEFAULT, None)], true)
                    .expect("default")
            ),
            ["user=<default> 3000"]
        );
        assert_eq!(
            shown(
                &describe_quotas(&image, &[component("user", MATCH_SPECIFIED, None)], true)
                    .expect("users")
            ),
            ["user=<default> 3000", "user=alice 1000"]
        );
        assert_eq!(
            shown(
                &describe_quotas(
                    &image,
                    &[component("client-id", MATCH_SPECIFIED, None)],
                    false
                )
                .expect("clients")
            ),
            ["client-id=<default> 4000", "user=alice,client-id=app 2000"]
        );
    }

    #[test]
    fn bad_filters_get_kafkas_errors() {
        let image = image();
        let error = |components: &[(String, i8, Option<String>)]| {
            describe_quotas(&image, components, false).expect_err("refused")
        };
        assert_eq!(
            error(&[component("group", MATCH_SPECIFIED, None)]).error,
            KafkaError::UnsupportedVersion
        );
        for bad in [
            vec![component("", MATCH_SPECIFIED, None)],
            vec![
                component("user", MATCH_SPECIFIED, None),
                component("user", MATCH_DEFAULT, None),
            ],
            vec![component("user", MATCH_EXACT, None)],
            vec![component("user", MATCH_DEFAULT, Some("alice"))],
            vec![component("user", 7, None)],
            vec![
                component("ip", MATCH_SPECIFIED, None),
                component("user", MATCH_SPECIFIED, None),
            ],
        ] {
            assert_eq!(error(&bad).error, KafkaError::InvalidRequest, "{bad:?}");
        }
    }
}
