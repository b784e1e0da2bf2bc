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
use crate::log::LogConfig;
use crate::protocol::errors;

pub const VERSIONS: (i16, i16) = (1, 4);

pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;

/// Kafka's `ConfigSource` values.
pub const SOURCE_DYNAMIC_TOPIC: i8 = 1;
pub const SOURCE_DYNAMIC_BROKER: i8 = 2;
pub const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;
pub const SOURCE_STATIC_BROKER: i8 = 4;
pub const SOURCE_DEFAULT: i8 = 5;

/// Topic configs: (topic key, the broker key that sets its default, Kafka's default).
pub const TOPIC_CONFIGS: &[(&str, &str, &str)] = &[
    ("cleanup.policy", "log.cleanup.policy", "delete"),
    ("compression.type", "compression.type", "producer"),
    (
        "delete.retention.ms",
        "log.cleaner.delete.retention.ms",
        "86400000",
    ),
    (
        "file.delete.delay.ms",
        "log.segment.delete.delay.ms",
        "60000",
    ),
    (
        "flush.messages",
        "log.flush.interval.messages",
        "9223372036854775807",
    ),
    ("flush.ms", "log.flush.interval.ms", "9223372036854775807"),
    ("flush.policy", "log.flush.policy", "interval"),
    ("index.interval.bytes", "log.index.interval.bytes", "4096"),
    (
        "max.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
        "9223372036854775807",
    ),
    ("max.message.bytes", "message.max.bytes", "1048588"),
    (
        "message.timestamp.type",
        "log.message.timestamp.type",
        "CreateTime",
    ),
    (
        "min.cleanable.dirty.ratio",
        "log.cleaner.min.cleanable.ratio",
        "0.5",
    ),
    (
        "min.compaction.lag.ms",
        "log.cleaner.min.compaction.lag.ms",
        "0",
    ),
    ("min.insync.replicas", "min.insync.replicas", "1"),
    ("retention.bytes", "log.retention.bytes", "-1"),
    ("retention.ms", "log.retention.ms", "604800000"),
    ("segment.bytes", "log.segment.bytes", "1073741824"),
    (
        "segment.index.bytes",
        "log.index.size.max.bytes",
        "10485760",
    ),
    ("segment.ms", "log.roll.ms", "604800000"),
    (
        "unclean.leader.election.enable",
        "unclean.leader.election.enable",
        "false",
    ),
];

/// One described config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    pub value: String,
    pub source: i8,
    /// The layers below the one in effect (DescribeConfigs synonyms).
    pub synonyms: Vec<(String, String, i8)>,
}

/// A broker key's value in one layer of broker properties. `log.retention.ms` and
/// `log.roll.ms` also come from their minutes/hours forms, as in Kafka.
fn broker_layer_value(properties: &BTreeMap<String, String>, broker_key: &str) -> Option<String> {
    let family: &[&str] = match broker_key {
        "log.retention.ms" => &[
            "log.retention.ms",
            "log.retention.minutes",
            "log.retention.hours",
        ],
        "log.roll.ms" => &["log.roll.ms", "log.roll.hours"],
        _ => return properties.get(broker_key).cloned(),
    };
    let present: BTreeMap<String, String> = family
        .iter()
        .filter_map(|k| properties.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect();
    if present.is_empty() {
        return None;
    }
    let config = LogConfig::from_broker_properties(&present).ok()?;
    Some(if broker_key == "log.retention.ms" {
        config.retention_ms.to_string()
    } else {
        config.segment_ms.to_string()
    })
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

/// Every config of a topic, resolved.
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
    TOPIC_CONFIGS
        .iter()
        .map(|(key, broker_key, default)| {
            let mut found: Vec<(String, String, i8)> = Vec::new();
            if let Some(value) = topic_configs.get(*key) {
                found.push(((*key).to_owned(), value.clone(), SOURCE_DYNAMIC_TOPIC));
            }
            for (properties, source) in &layers {
                if let Some(value) = broker_layer_value(properties, broker_key) {
                    found.push(((*broker_key).to_owned(), value, *source));
                }
            }
            found.push((
                (*broker_key).to_owned(),
                (*default).to_owned(),
                SOURCE_DEFAULT,
            ));
            let (_, value, source) = found[0].clone();
            ConfigEntry {
                name: (*key).to_owned(),
                value,
                source,
                synonyms: found,
            }
        })
        .collect()
}

/// Every config of a broker we know: the topic defaults it sets and its own keys.
fn broker_config_entries(broker: &Broker, image: &MetadataImage) -> Vec<ConfigEntry> {
    let layers = broker_layers(broker, image);
    let mut keys: BTreeMap<String, String> = TOPIC_CONFIGS
        .iter()
        .map(|(_, broker_key, default)| ((*broker_key).to_owned(), (*default).to_owned()))
        .collect();
    for (properties, _) in &layers {
        for key in properties.keys() {
            keys.entry(key.clone()).or_default();
        }
    }
    keys.into_iter()
        .map(|(key, default)| {
            let mut found: Vec<(String, String, i8)> = layers
                .iter()
                .filter_map(|(properties, source)| {
                    broker_layer_value(properties, &key).map(|v| (key.clone(), v, *source))
                })
                .collect();
            if !default.is_empty() {
                found.push((key.clone(), default, SOURCE_DEFAULT));
            }
            let (_, value, source) =
                found
                    .first()
                    .cloned()
                    .unwrap_or((key.clone(), String::new(), SOURCE_DEFAULT));
            ConfigEntry {
                name: key,
                value,
                source,
                synonyms: found,
            }
        })
        .collect()
}

pub fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let image = broker.image();
    let results = request
        .resources
        .into_iter()
        .map(|resource| {
            let name = resource.resource_name.to_string();
            let result = DescribeConfigsResult::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone());
            let entries = match resource.resource_type {
                RESOURCE_TOPIC => {
                    if image.topic_by_name(&name).is_none() {
                        return result
                            .with_error_code(errors::UNKNOWN_TOPIC_OR_PARTITION)
                            .with_error_message(Some(str_bytes(format!(
                                "unknown topic '{name}'"
                            ))));
                    }
                    topic_config_entries(broker, &image, &name)
                }
                RESOURCE_BROKER => {
                    if name != broker.broker_id.to_string() && !name.is_empty() {
                        return result
                            .with_error_code(errors::INVALID_REQUEST)
                            .with_error_message(Some(str_bytes(format!(
                                "broker {name} cannot be described by broker {}",
                                broker.broker_id
                            ))));
                    }
                    broker_config_entries(broker, &image)
                }
                other => {
                    return result
                        .with_error_code(errors::INVALID_REQUEST)
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
                        && !crate::controller::is_dynamic_broker_config(&e.name);
                    let mut entry = DescribeConfigsResourceResult::default()
                        .with_name(str_bytes(e.name))
                        .with_value(Some(str_bytes(e.value)))
                        .with_read_only(read_only)
                        .with_config_source(e.source);
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
