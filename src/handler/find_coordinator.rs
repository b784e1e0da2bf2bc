//! FindCoordinator: the broker that coordinates a group is the leader of the group's
//! `__consumer_offsets` partition, a transactional id's the leader of its
//! `__transaction_state` partition (each topic created on the first request, as Kafka does).

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};

use super::{RequestContext, listener_endpoint, str_bytes};
use crate::broker::Broker;
use crate::group::{OFFSETS_TOPIC, partition_for};
use crate::protocol::errors::{ApiError, KafkaError};
use crate::security::acl::Operation;
use crate::txn::coordinator::TRANSACTION_STATE_TOPIC;

pub const VERSIONS: (i16, i16) = (0, 6);

const GROUP: i8 = 0;
const TRANSACTION: i8 = 1;

/// A coordinator's node, or the error and its message.
type Found = Result<(i32, String, i32), ApiError>;

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    let keys = if context.api_version >= 4 {
        request.coordinator_keys
    } else {
        vec![request.key]
    };
    if keys.is_empty() {
        // A batch of no keys: nothing to ask (Kafka asks per key).
        context.access.open_to_all();
    }
    let mut found = Vec::with_capacity(keys.len());
    for key in &keys {
        found.push(find(broker, context, request.key_type, key).await);
    }
    if context.api_version >= 4 {
        let coordinators = keys
            .into_iter()
            .zip(found)
            .map(|(key, found)| {
                let coordinator = Coordinator::default().with_key(key);
                match found {
                    Ok((node_id, host, port)) => coordinator
                        .with_node_id(BrokerId(node_id))
                        .with_host(str_bytes(host))
                        .with_port(port),
                    Err(ApiError { error, message }) => coordinator
                        .with_node_id(BrokerId(-1))
                        .with_port(-1)
                        .with_error_code(error.code())
                        .with_error_message(Some(str_bytes(message))),
                }
            })
            .collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let mut response = FindCoordinatorResponse::default();
    match found.into_iter().next() {
        Some(Ok((node_id, host, port))) => {
            response = response
                .with_node_id(BrokerId(node_id))
                .with_host(str_bytes(host))
                .with_port(port);
        }
        Some(Err(ApiError { error, message })) => {
            response = response
                .with_error_code(error.code())
                .with_node_id(BrokerId(-1))
                .with_port(-1);
            if context.api_version >= 1 {
                response.error_message = Some(str_bytes(message));
            }
        }
        None => {}
    }
    response
}

/// A key's coordinator. Asked first (Kafka's order): DESCRIBE on the group or transactional id
/// the key names, so a principal learns nothing of a coordinator it may not describe.
async fn find(broker: &Broker, context: &RequestContext, key_type: i8, key: &str) -> Found {
    let (topic, count) = match key_type {
        GROUP => {
            if !context.access.allows_group(Operation::Describe, key) {
                return Err(ApiError::new(
                    KafkaError::GroupAuthorizationFailed,
                    "Group authorization failed.",
                ));
            }
            (OFFSETS_TOPIC, broker.groups.ensure_offsets_topic().await?)
        }
        TRANSACTION => {
            if !context
                .access
                .allows_transactional_id(Operation::Describe, key)
            {
                return Err(ApiError::new(
                    KafkaError::TransactionalIdAuthorizationFailed,
                    "Transactional Id authorization failed.",
                ));
            }
            if key.is_empty() {
                return Err(ApiError::new(
                    KafkaError::InvalidRequest,
                    "an empty transactional id has no coordinator",
                ));
            }
            (
                TRANSACTION_STATE_TOPIC,
                broker.transactions.ensure_topic().await?,
            )
        }
        other => {
            // Kafka refuses an unknown key type before any question.
            context.access.open_to_all();
            return Err(ApiError::new(
                KafkaError::InvalidRequest,
                format!("unknown coordinator key type {other}"),
            ));
        }
    };
    let image = broker.image();
    let index = partition_for(key, count);
    let leader = image
        .topic_by_name(topic)
        .and_then(|t| t.partitions.get(&index))
        .map_or(-1, |p| p.leader);
    let endpoint = image
        .brokers
        .get(&leader)
        .filter(|b| !b.fenced)
        .and_then(|b| listener_endpoint(b, &context.listener_name));
    match endpoint {
        Some(endpoint) => Ok((leader, endpoint.host.clone(), i32::from(endpoint.port))),
        None => Err(ApiError::new(
            KafkaError::CoordinatorNotAvailable,
            format!("{topic} partition {index} has no leader right now"),
        )),
    }
}
