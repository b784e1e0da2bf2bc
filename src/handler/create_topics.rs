//! CreateTopics: each topic is decided by the active controller (through the quorum); the
//! answer waits until the topic has reached this node's image. `validate_only` runs the same
//! decision on this node's image without proposing it.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};

use super::{RequestContext, kafka_uuid, str_bytes, topic_config_entries};
use crate::broker::Broker;
use crate::controller::service::ControllerRequest;
use crate::controller::{Defaults, NewTopic};
use crate::protocol::errors::{ApiError, KafkaError};
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (2, 7);

/// How long creation may take when the client's `timeout_ms` is 0 or less... and at most.
const CREATE_WAIT_MAX: Duration = Duration::from_secs(30);

pub fn defaults(broker: &Broker) -> Defaults {
    Defaults {
        partitions: broker.config.num_partitions,
        replication_factor: broker.config.default_replication_factor,
        unclean_leader_election: broker.config.unclean_leader_election_enable,
    }
}

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: CreateTopicsRequest,
) -> CreateTopicsResponse {
    let timeout = if request.timeout_ms > 0 {
        Duration::from_millis(request.timeout_ms as u64).min(CREATE_WAIT_MAX)
    } else {
        CREATE_WAIT_MAX
    };
    let mut seen: HashMap<String, usize> = HashMap::new();
    for topic in &request.topics {
        *seen.entry(topic.name.to_string()).or_default() += 1;
    }
    // CREATE on the cluster covers every topic; otherwise each topic needs its own.
    let cluster_create = context.access.allows_cluster(Operation::Create);
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let name = topic.name.to_string();
        let result = CreatableTopicResult::default().with_name(topic.name.clone());
        if seen.get(&name).copied().unwrap_or(0) > 1 {
            results.push(
                result
                    .with_error_code(KafkaError::InvalidRequest.code())
                    .with_error_message(Some(str_bytes(format!(
                        "topic '{name}' appears more than once in the request"
                    )))),
            );
            continue;
        }
        if !cluster_create && !context.access.allows_topic(Operation::Create, &name) {
            results.push(
                result
                    .with_error_code(KafkaError::TopicAuthorizationFailed.code())
                    .with_error_message(Some(str_bytes("Authorization failed."))),
            );
            continue;
        }
        if name == crate::group::OFFSETS_TOPIC {
            // Kafka's answer: the coordinator creates it, with its own settings.
            results.push(
                result
                    .with_error_code(KafkaError::InvalidRequest.code())
                    .with_error_message(Some(str_bytes(format!(
                        "creation of internal topic {name} is prohibited"
                    )))),
            );
            continue;
        }
        let mut configs = BTreeMap::new();
        for config in &topic.configs {
            if let Some(value) = &config.value {
                configs.insert(config.name.to_string(), value.to_string());
            }
        }
        let new_topic = NewTopic {
            name: name.clone(),
            partitions: topic.num_partitions,
            replication_factor: topic.replication_factor,
            assignments: topic
                .assignments
                .iter()
                .map(|a| {
                    (
                        a.partition_index,
                        a.broker_ids.iter().map(|b| b.0).collect(),
                    )
                })
                .collect(),
            configs,
        };
        let outcome = if request.validate_only {
            let image = broker.image();
            crate::controller::create_topic(
                &image,
                &new_topic,
                sluice_raft::records::Uuid(0),
                &defaults(broker),
            )
            .map(|_| ())
            .map_err(ApiError::from)
        } else {
            match broker
                .call_controller(ControllerRequest::CreateTopic(new_topic), timeout)
                .await
            {
                Ok(_) => {
                    broker
                        .wait_for_image(timeout, |image| image.topic_by_name(&name).is_some())
                        .await;
                    Ok(())
                }
                Err(error) => Err(error),
            }
        };
        let result = match outcome {
            Err(error) => result
                .with_error_code(error.error.code())
                .with_error_message(Some(str_bytes(error.message))),
            Ok(()) => {
                let image = broker.image();
                let (partitions, replication_factor) = if request.validate_only {
                    let p = if topic.num_partitions > 0 {
                        topic.num_partitions
                    } else if !topic.assignments.is_empty() {
                        topic.assignments.len() as i32
                    } else {
                        broker.config.num_partitions
                    };
                    let rf = if topic.replication_factor > 0 {
                        topic.replication_factor
                    } else if let Some(a) = topic.assignments.first() {
                        a.broker_ids.len() as i16
                    } else {
                        broker.config.default_replication_factor
                    };
                    (p, rf)
                } else {
                    match image.topic_by_name(&name) {
                        Some(t) => (
                            t.partitions.len() as i32,
                            t.partitions
                                .values()
                                .next()
                                .map_or(0, |p| p.replicas.len() as i16),
                        ),
                        None => (-1, -1),
                    }
                };
                let mut result = result
                    .with_num_partitions(partitions)
                    .with_replication_factor(replication_factor);
                if let Some(t) = image.topic_by_name(&name) {
                    result.topic_id = kafka_uuid(t.id);
                }
                // The configs are shown only to a principal that may describe them.
                let configs_visible = context
                    .access
                    .allows_topic(Operation::DescribeConfigs, &name);
                if context.api_version >= 5 && !configs_visible {
                    result.topic_config_error_code = KafkaError::TopicAuthorizationFailed.code();
                } else if context.api_version >= 5 {
                    let entries = topic_config_entries(broker, &image, &name)
                        .into_iter()
                        .map(|e| {
                            CreatableTopicConfigs::default()
                                .with_name(str_bytes(e.name))
                                .with_value(e.value.map(str_bytes))
                                .with_read_only(false)
                                .with_is_sensitive(e.key.sensitive)
                                .with_config_source(e.source)
                        })
                        .collect();
                    result.configs = Some(entries);
                }
                result
            }
        };
        results.push(result);
    }
    CreateTopicsResponse::default().with_topics(results)
}
