//! DescribeConfigs for topics and brokers: every config with its value and where the value
//! comes from (the topic, a dynamic broker config, `server.properties`, or the default).

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use sluice_raft::image::MetadataImage;
use sluice_raft::records::ConfigResource;

use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::config::registry::{self, Key};
use crate::protocol::errors::KafkaError;
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (1, 4);

pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;

/// Kafka's `ConfigSource` values.
pub const SOURCE_DYNAMIC_TOPIC: i8 = 1;
pub const SOURCE_DYNAMIC_BROKER: i8 = 2;
pub const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;
pub const SOURCE_STATIC_BROKER: i8 = 4;
pub const SOURCE_DEFAULT: i8 = 5;

/// One described config.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigEntry {
    pub name: String,
    /// `None`: no value (a key without a default nobody set, or a sensitive one).
    pub value: Option<String>,
    pub source: i8,
    /// The layers below the one in effect (DescribeConfigs synonyms).
    pub synonyms: Vec<(String, String, i8)>,
    pub key: &'static Key,
}

/// The broker layers, most specific first: this broker's dynamic configs, the cluster-wide
/// dynamic defaults, `server.properties`.
fn broker_layers(broker: &Broker, image: &MetadataImage) -> Vec<(BTreeMap<String, String>, i8)> {
    let dynamic = |resource| image.configs.get(&resource).cloned().unwrap_or_default();
    vec![
        (
            dynamic(ConfigResource::Broker(Some(broker.broker_id))),
            SOURCE_DYNAMIC_BROKER,
        ),
        (
            dynamic(ConfigResource::Broker(None)),
            SOURCE_DYNAMIC_DEFAULT_BROKER,
        ),
        (broker.config.properties.clone(), SOURCE_STATIC_BROKER),
    ]
}

/// Where `broker_name` is set in the broker layers (unit synonyms resolved), then its default.
fn broker_synonyms(
    layers: &[(BTreeMap<String, String>, i8)],
    broker_name: &str,
    key: &Key,
) -> Vec<(String, String, i8)> {
    let mut found: Vec<(String, String, i8)> = layers
        .iter()
        .filter_map(|(properties, source)| {
            // A value that does not parse never passed start-up or AlterConfigs.
            let value = registry::broker_value(properties, broker_name).ok()??;
            Some((broker_name.to_owned(), value, *source))
        })
        .collect();
    if !key.default.is_empty() {
        found.push((
            broker_name.to_owned(),
            key.default.to_owned(),
            SOURCE_DEFAULT,
        ));
    }
    found
}

fn entry(name: &str, key: &'static Key, found: Vec<(String, String, i8)>) -> ConfigEntry {
    let (value, source) = match found.first() {
        Some((_, value, source)) => (Some(value.clone()), *source),
        None => (None, SOURCE_DEFAULT),
    };
    ConfigEntry {
        name: name.to_owned(),
        value: if key.sensitive { None } else { value },
        source,
        synonyms: found,
        key,
    }
}

/// Every config of a topic, resolved: the topic's own value, then the broker layers of the key
/// it falls back to, then the default.
pub fn topic_config_entries(
    broker: &Broker,
    image: &MetadataImage,
    topic: &str,
) -> Vec<ConfigEntry> {
    let topic_configs = image
        .configs
        .get(&ConfigResource::Topic(topic.to_owned()))
        .cloned()
        .unwrap_or_default();
    let layers = broker_layers(broker, image);
    registry::topic_keys()
        .map(|key| {
            let mut found = Vec::new();
            if let Some(value) = topic_configs.get(key.name) {
                found.push((key.name.to_owned(), value.clone(), SOURCE_DYNAMIC_TOPIC));
            }
            found.extend(broker_synonyms(&layers, key.broker_name(), key));
            entry(key.name, key, found)
        })
        .collect()
}

/// Every config of a broker: each broker key the registry declares (topic defaults included).
fn broker_config_entries(broker: &Broker, image: &MetadataImage) -> Vec<ConfigEntry> {
    let layers = broker_layers(broker, image);
    let mut entries: Vec<ConfigEntry> = registry::broker_keys()
        .map(|(name, key)| entry(name, key, broker_synonyms(&layers, name, key)))
        .collect();
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    entries
}

/// Kafka's check for a config resource: `operation` (DESCRIBE_CONFIGS or ALTER_CONFIGS) on the
/// topic, or on the cluster for a broker's configs. Other resource types are refused later,
/// as requests Sluice does not serve.
pub(super) fn authorize_configs(
    context: &RequestContext,
    resource_type: i8,
    name: &str,
    operation: Operation,
) -> Result<(), KafkaError> {
    match resource_type {
        RESOURCE_TOPIC if !context.access.allows_topic(operation, name) => {
            Err(KafkaError::TopicAuthorizationFailed)
        }
        RESOURCE_BROKER if !context.access.allows_cluster(operation) => {
            Err(KafkaError::ClusterAuthorizationFailed)
        }
        RESOURCE_TOPIC | RESOURCE_BROKER => Ok(()),
        _ => {
            context.access.open_to_all();
            Ok(())
        }
    }
}

pub fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let image = broker.image();
    if request.resources.is_empty() {
        context.access.open_to_all();
    }
    let results = request
        .resources
        .into_iter()
        .map(|resource| {
            let name = resource.resource_name.to_string();
            let result = DescribeConfigsResult::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone());
            if let Err(denied) = authorize_configs(
                context,
                resource.resource_type,
                &name,
                Operation::DescribeConfigs,
            ) {
                return result.with_error_code(denied.code());
            }
            let entries = match resource.resource_type {
                RESOURCE_TOPIC => {
                    if image.topic_by_name(&name).is_none() {
                        return result
                            .with_error_code(KafkaError::UnknownTopicOrPartition.code())
                            .with_error_message(Some(str_bytes(format!(
                                "unknown topic '{name}'"
                            ))));
                    }
                    topic_config_entries(broker, &image, &name)
                }
                RESOURCE_BROKER => {
                    if name != broker.broker_id.to_string() && !name.is_empty() {
                        return result
                            .with_error_code(KafkaError::InvalidRequest.code())
                            .with_error_message(Some(str_bytes(format!(
                                "broker {name} cannot be described by broker {}",
                                broker.broker_id
                            ))));
                    }
                    broker_config_entries(broker, &image)
                }
                other => {
                    return result
                        .with_error_code(KafkaError::InvalidRequest.code())
                        .with_error_message(Some(str_bytes(format!(
                            "resource type {other} is not supported"
                        ))));
                }
            };
            let wanted = resource
                .configuration_keys
                .as_ref()
                .map(|keys| keys.iter().map(|k| k.to_string()).collect::<Vec<_>>());
            let configs = entries
                .into_iter()
                .filter(|e| wanted.as_ref().is_none_or(|w| w.contains(&e.name)))
                .map(|e| {
                    let read_only = resource.resource_type == RESOURCE_BROKER
                        && !registry::is_dynamic_broker_key(&e.name);
                    let mut entry = DescribeConfigsResourceResult::default()
                        .with_name(str_bytes(e.name))
                        .with_value(e.value.map(str_bytes))
                        .with_read_only(read_only)
                        .with_is_sensitive(e.key.sensitive)
                        .with_config_source(e.source);
                    if context.api_version >= 3 {
                        entry.config_type = e.key.kind.kafka_type();
                        if request.include_documentation {
                            entry.documentation =
                                Some(str_bytes(format!("{} ({})", e.key.doc, e.key.summary())));
                        }
                    }
                    if request.include_synonyms && context.api_version >= 1 {
                        entry.synonyms = e
                            .synonyms
                            .into_iter()
                            .map(|(name, value, source)| {
                                DescribeConfigsSynonym::default()
                                    .with_name(str_bytes(name))
                                    .with_value(Some(str_bytes(value)))
                                    .with_source(source)
                            })
                            .collect();
                    }
                    entry
                })
                .collect();
            result.with_configs(configs)
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}
