//! Metadata: brokers, controller and topic partitions, served from the committed image.
//! Unknown topics are created when the client allows it and `auto.create.topics.enable` is
//! on (through the controller; the answer waits until the topic reaches this node's image).

use std::collections::HashMap;
use std::time::Duration;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use sluice_raft::image::{MetadataImage, TopicImage};
use sluice_raft::records::NO_LEADER;

use super::{RequestContext, kafka_uuid, listener_endpoint, our_uuid, str_bytes};
use crate::broker::Broker;
use crate::controller::NewTopic;
use crate::controller::service::ControllerRequest;
use crate::protocol::errors::{self, KafkaError};
use crate::protocol::topic_partition::validate_topic_name;
use crate::security::acl::{CLUSTER_NAME, Operation, ResourceType};

pub const VERSIONS: (i16, i16) = (0, 13);

/// How long a Metadata request waits for a topic it auto-created to be committed.
const AUTO_CREATE_WAIT: Duration = Duration::from_secs(5);
/// How recent a lost leader connection must be to hold an answer back, and how long at most.
const LOST_LEADER_RECENT: Duration = Duration::from_secs(2);
const LOST_LEADER_WAIT: Duration = Duration::from_millis(300);

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: MetadataRequest,
) -> MetadataResponse {
    let mut image = broker.image();
    // The brokers are every client's to know; topics need DESCRIBE (below).
    context.access.open_to_all();
    let describable = |name: &str| context.access.allows_topic(Operation::Describe, name);
    // Auto-creates the controller refused, by topic: answered with its error at once. A
    // principal that may describe a missing topic but not create it is refused here.
    let mut refused: HashMap<String, KafkaError> = HashMap::new();
    // Versions 0-3 have no allow_auto_topic_creation field: those clients always allow it.
    let allow_auto_create = (context.api_version < 4 || request.allow_auto_topic_creation)
        && broker.config.auto_create_topics_enable;
    if allow_auto_create {
        if let Some(requested) = &request.topics {
            let mut missing: Vec<String> = requested
                .iter()
                .filter_map(|t| t.name.as_ref().map(|n| n.to_string()))
                .filter(|n| image.topic_by_name(n).is_none() && validate_topic_name(n).is_ok())
                .filter(|n| describable(n))
                .collect();
            if !missing.is_empty() && !context.access.allows_cluster(Operation::Create) {
                missing.retain(|name| {
                    let allowed = context.access.allows_topic(Operation::Create, name);
                    if !allowed {
                        refused.insert(name.clone(), KafkaError::TopicAuthorizationFailed);
                    }
                    allowed
                });
            }
            if !missing.is_empty() {
                refused.extend(auto_create(broker, &missing).await);
                image = broker.image();
            }
        }
    }
    let lost = broker.replicas.leaders_lost(LOST_LEADER_RECENT);
    if !lost.is_empty() {
        wait_for_fencing(broker, &lost).await;
        image = broker.image();
    }
    let mut response = MetadataResponse::default()
        .with_cluster_id(Some(str_bytes(broker.config.cluster_id.clone())))
        // KRaft brokers answer with a live broker as "controller": clients send admin requests
        // there, and any broker forwards them to the active controller. We name the broker
        // that answers, the one broker the client has just shown it can reach: a broker killed
        // a moment ago still counts as alive until its session expires, and librdkafka keeps
        // sending admin requests to a dead "controller" without refreshing metadata.
        .with_controller_id(BrokerId(broker.broker_id));
    response.brokers = image
        .unfenced_brokers()
        .filter_map(|b| {
            let endpoint = listener_endpoint(b, &context.listener_name)?;
            Some(
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(b.registration.broker_id))
                    .with_host(str_bytes(endpoint.host.clone()))
                    .with_port(i32::from(endpoint.port))
                    .with_rack(b.registration.rack.clone().map(str_bytes)),
            )
        })
        .collect();
    response.topics = match &request.topics {
        // Every topic: those the principal may describe, silently.
        None => image
            .topics
            .values()
            .filter(|t| describable(&t.name))
            .map(|t| describe_topic(&image, t))
            .collect(),
        Some(requested) => requested
            .iter()
            .map(|wanted| {
                let found = match &wanted.name {
                    Some(name) => image.topic_by_name(name),
                    None => image.topics.get(&our_uuid(wanted.topic_id)),
                };
                let denied = match (&wanted.name, found) {
                    (Some(name), _) => !describable(name),
                    (None, Some(topic)) => !describable(&topic.name),
                    (None, None) => false,
                };
                if denied {
                    // Whether the topic exists is not said; a topic asked for by id is not
                    // named.
                    return MetadataResponseTopic::default()
                        .with_error_code(KafkaError::TopicAuthorizationFailed.code())
                        .with_name(wanted.name.clone())
                        .with_topic_id(wanted.topic_id);
                }
                match found {
                    Some(topic) => describe_topic(&image, topic),
                    None => {
                        let name = wanted.name.as_ref().map(|n| n.to_string());
                        let error = match &name {
                            Some(n) if validate_topic_name(n).is_err() => {
                                KafkaError::InvalidTopicException
                            }
                            Some(n) if refused.contains_key(n) => refused[n],
                            Some(_) if allow_auto_create => KafkaError::LeaderNotAvailable,
                            Some(_) => KafkaError::UnknownTopicOrPartition,
                            None => KafkaError::UnknownTopicId,
                        };
                        MetadataResponseTopic::default()
                            .with_error_code(error.code())
                            .with_name(wanted.name.clone())
                            .with_topic_id(wanted.topic_id)
                    }
                }
            })
            .collect(),
    };
    // Metadata v8-v10 carry the cluster's operations; v8 on the topics'.
    if request.include_cluster_authorized_operations && context.api_version <= 10 {
        response.cluster_authorized_operations =
            if context.access.allows_cluster(Operation::Describe) {
                context
                    .access
                    .authorized_operations(ResourceType::Cluster, CLUSTER_NAME)
            } else {
                0
            };
    }
    if request.include_topic_authorized_operations {
        for topic in response
            .topics
            .iter_mut()
            .filter(|t| KafkaError::check(t.error_code).is_ok())
        {
            if let Some(name) = &topic.name {
                topic.topic_authorized_operations = context
                    .access
                    .authorized_operations(ResourceType::Topic, name.as_str());
            }
        }
    }
    response
}

/// A client asks for metadata when it loses a broker, and gets an answer in well under a
/// millisecond: before the controller fenced a broker that died at the same moment (a few
/// milliseconds later), so the answer still names the dead broker as leader, and librdkafka
/// asks again only a second later. When this broker's replica fetcher has just lost its
/// connection to a broker the image still counts as alive, the answer waits (at most
/// `LOST_LEADER_WAIT`) for that broker to be fenced, and then names the new leaders.
async fn wait_for_fencing(broker: &Broker, lost: &[i32]) {
    let alive = |image: &MetadataImage, id: &i32| image.brokers.get(id).is_some_and(|b| !b.fenced);
    broker
        .wait_for_image(LOST_LEADER_WAIT, |image| {
            !lost.iter().any(|id| alive(image, id))
        })
        .await;
}

/// Asks the controller to create each of `names` with the broker's defaults, and waits (at
/// most `AUTO_CREATE_WAIT`) for those it accepted to reach this broker's image. Returns the
/// refused ones with their error (e.g. INVALID_PARTITIONS past `max.broker.partitions`), so
/// the client learns why at once instead of retrying LEADER_NOT_AVAILABLE.
async fn auto_create(broker: &Broker, names: &[String]) -> HashMap<String, KafkaError> {
    let mut refused = HashMap::new();
    for name in names {
        let topic = NewTopic {
            name: name.clone(),
            partitions: -1,
            replication_factor: -1,
            ..Default::default()
        };
        match broker
            .call_controller(ControllerRequest::CreateTopic(topic), AUTO_CREATE_WAIT)
            .await
        {
            Ok(_) => tracing::info!(topic = %name, "auto-created topic"),
            Err(refusal) if refusal.error == KafkaError::TopicAlreadyExists => {
                tracing::debug!(topic = %name, message = %refusal.message, "auto-create raced another")
            }
            Err(refusal) => {
                tracing::warn!(topic = %name, error = %refusal.error, message = %refusal.message, "auto-create refused");
                refused.insert(name.clone(), refusal.error);
            }
        }
    }
    broker
        .wait_for_image(AUTO_CREATE_WAIT, |image| {
            names
                .iter()
                .all(|n| refused.contains_key(n) || image.topic_by_name(n).is_some())
        })
        .await;
    refused
}

fn describe_topic(image: &MetadataImage, topic: &TopicImage) -> MetadataResponseTopic {
    let partitions = topic
        .partitions
        .iter()
        .map(|(index, p)| {
            let offline = p
                .replicas
                .iter()
                .filter(|r| image.brokers.get(r).is_none_or(|b| b.fenced))
                .map(|r| BrokerId(*r))
                .collect();
            let led = if p.leader == NO_LEADER {
                Err(KafkaError::LeaderNotAvailable)
            } else {
                Ok(())
            };
            MetadataResponsePartition::default()
                .with_error_code(errors::code_of(&led))
                .with_partition_index(*index)
                .with_leader_id(BrokerId(p.leader))
                .with_leader_epoch(p.leader_epoch)
                .with_replica_nodes(p.replicas.iter().map(|r| BrokerId(*r)).collect())
                .with_isr_nodes(p.isr.iter().map(|r| BrokerId(*r)).collect())
                .with_offline_replicas(offline)
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(str_bytes(topic.name.clone()))))
        .with_topic_id(kafka_uuid(topic.id))
        // As Kafka: the group coordinator's topic is internal (tools hide it by default).
        .with_is_internal(topic.name == crate::group::OFFSETS_TOPIC)
        .with_partitions(partitions)
}
