//! Configs: topic config validation and IncrementalAlterConfigs of topics and brokers.

use super::*;

/// Topic configs Kafka knows that the log does not interpret, with their value checks.
pub(super) type ValueCheck = fn(&str) -> bool;

pub(super) const OTHER_TOPIC_KEYS: &[(&str, ValueCheck)] = &[
    ("unclean.leader.election.enable", |v| {
        v == "true" || v == "false"
    }),
    ("min.insync.replicas", |v| {
        v.parse::<i32>().is_ok_and(|n| n >= 1)
    }),
    ("compression.type", |v| {
        ["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"].contains(&v)
    }),
    ("max.compaction.lag.ms", |v| {
        v.parse::<i64>().is_ok_and(|n| n >= 1)
    }),
    ("message.timestamp.before.max.ms", |v| {
        v.parse::<i64>().is_ok_and(|n| n >= 0)
    }),
    ("message.timestamp.after.max.ms", |v| {
        v.parse::<i64>().is_ok_and(|n| n >= 0)
    }),
    ("message.timestamp.difference.max.ms", |v| {
        v.parse::<i64>().is_ok_and(|n| n >= 0)
    }),
    ("preallocate", |v| v == "true" || v == "false"),
];

/// A topic config key and value must be ones Kafka accepts (INVALID_CONFIG otherwise).
pub fn validate_topic_config(name: &str, value: &str) -> Result<(), ControllerError> {
    if crate::log::LogConfig::TOPIC_KEYS.contains(&name) {
        let mut check = crate::log::LogConfig::default();
        return check
            .set(name, value)
            .map_err(|e| ControllerError::InvalidConfig(e.to_string()));
    }
    match OTHER_TOPIC_KEYS.iter().find(|(key, _)| *key == name) {
        Some((_, valid)) if valid(value) => Ok(()),
        Some(_) => Err(ControllerError::InvalidConfig(format!(
            "invalid value '{value}' for {name}"
        ))),
        None => Err(ControllerError::InvalidConfig(format!(
            "unknown topic config {name}"
        ))),
    }
}

/// Broker configs that can be changed while running, cluster-wide or per broker: the topic
/// defaults (applied to every topic without its own value) and `min.insync.replicas`.
pub fn is_dynamic_broker_config(name: &str) -> bool {
    crate::log::config::BROKER_TO_TOPIC_KEYS
        .iter()
        .any(|(broker_key, _)| *broker_key == name)
        || matches!(
            name,
            "log.retention.ms"
                | "log.retention.minutes"
                | "log.retention.hours"
                | "log.roll.ms"
                | "log.roll.hours"
                | "min.insync.replicas"
                | "unclean.leader.election.enable"
                | "compression.type"
        )
}

/// IncrementalAlterConfigs of one resource: `changes` sets (`Some`) or deletes (`None`) keys.
pub fn alter_configs(
    image: &MetadataImage,
    resource: &ConfigResource,
    changes: &[(String, Option<String>)],
) -> Result<Vec<MetadataRecord>, ControllerError> {
    match resource {
        ConfigResource::Topic(name) => {
            if image.topic_by_name(name).is_none() {
                return Err(ControllerError::UnknownTopicOrPartition(name.clone()));
            }
            for (key, value) in changes {
                match value {
                    Some(value) => validate_topic_config(key, value)?,
                    None => validate_topic_config_key(key)?,
                }
            }
        }
        ConfigResource::Broker(id) => {
            if let Some(id) = id {
                if !image.brokers.contains_key(id) {
                    return Err(ControllerError::InvalidConfig(format!(
                        "broker {id} is not registered"
                    )));
                }
            }
            for (key, value) in changes {
                if !is_dynamic_broker_config(key) {
                    return Err(ControllerError::InvalidConfig(format!(
                        "{key} cannot be changed dynamically"
                    )));
                }
                if let Some(value) = value {
                    let mut properties = BTreeMap::new();
                    properties.insert(key.clone(), value.clone());
                    crate::log::LogConfig::from_broker_properties(&properties)
                        .map_err(|e| ControllerError::InvalidConfig(e.to_string()))?;
                    if let Some((_, topic_key)) = crate::log::config::BROKER_TO_TOPIC_KEYS
                        .iter()
                        .find(|(broker_key, _)| broker_key == key)
                    {
                        validate_topic_config(topic_key, value)?;
                    } else if !matches!(
                        key.as_str(),
                        "log.retention.ms"
                            | "log.retention.minutes"
                            | "log.retention.hours"
                            | "log.roll.ms"
                            | "log.roll.hours"
                    ) {
                        validate_topic_config(key, value)?;
                    }
                }
            }
        }
    }
    let mut records: Vec<MetadataRecord> = changes
        .iter()
        .map(|(name, value)| MetadataRecord::Config {
            resource: resource.clone(),
            name: name.clone(),
            value: value.clone(),
        })
        .collect();
    // Enabling unclean election on a topic elects a leader for its offline partitions now
    // (KIP-704), from any live replica.
    let enables_unclean = changes.iter().any(|(name, value)| {
        name == "unclean.leader.election.enable" && value.as_deref() == Some("true")
    });
    if let (ConfigResource::Topic(name), true) = (resource, enables_unclean) {
        if let Some(topic) = image.topic_by_name(name) {
            for (partition, current) in &topic.partitions {
                if current.leader != NO_LEADER {
                    continue;
                }
                let election =
                    elect_leader(&current.replicas, &current.isr, |b| alive(image, b), true);
                let leader = match election {
                    Election::Clean(leader) => leader,
                    Election::Unclean(leader) => {
                        tracing::warn!(
                            topic = %name,
                            partition,
                            leader,
                            "UNCLEAN leader election: acknowledged records may be lost"
                        );
                        leader
                    }
                    Election::None => continue,
                };
                records.push(MetadataRecord::PartitionChange(PartitionChange {
                    topic_id: topic.id,
                    partition: *partition,
                    leader: Some(leader),
                    isr: (!current.isr.contains(&leader)).then(|| vec![leader]),
                    replicas: None,
                }));
            }
        }
    }
    Ok(records)
}

pub(super) fn validate_topic_config_key(name: &str) -> Result<(), ControllerError> {
    if crate::log::LogConfig::TOPIC_KEYS.contains(&name)
        || OTHER_TOPIC_KEYS.iter().any(|(key, _)| *key == name)
    {
        Ok(())
    } else {
        Err(ControllerError::InvalidConfig(format!(
            "unknown topic config {name}"
        )))
    }
}
