//! Configs: topic config validation and IncrementalAlterConfigs of topics and brokers.

use super::*;
use crate::config::registry;

/// A topic config key and value must be ones Kafka accepts (INVALID_CONFIG otherwise), as the
/// config registry declares them.
pub fn validate_topic_config(name: &str, value: &str) -> Result<(), ControllerError> {
    registry::validate_topic(name, value)
        .map(|_| ())
        .map_err(|e| ControllerError::InvalidConfig(e.to_string()))
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
                if !registry::is_dynamic_broker_key(key) {
                    return Err(ControllerError::InvalidConfig(format!(
                        "{key} cannot be changed dynamically"
                    )));
                }
                if let Some(value) = value {
                    registry::validate_broker(key, value)
                        .map_err(|e| ControllerError::InvalidConfig(e.to_string()))?;
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
    match registry::topic_key(name) {
        Some(_) => Ok(()),
        None => Err(ControllerError::InvalidConfig(format!(
            "unknown topic config {name}"
        ))),
    }
}
