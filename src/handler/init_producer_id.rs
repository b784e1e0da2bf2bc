//! InitProducerId. Without a transactional id (an idempotent producer): a fresh producer id
//! (epoch 0) from this broker's block, which the controller hands out in blocks through the
//! metadata log. With one: the transaction coordinator's answer (the id's producer id with
//! its epoch bumped, fencing older instances; an open transaction is aborted first and the
//! client told CONCURRENT_TRANSACTIONS, to retry).
//!
//! Kafka's checks, before anything: WRITE on the transactional id
//! (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); without one, IDEMPOTENT_WRITE on the cluster or,
//! since KIP-679, WRITE on any topic (CLUSTER_AUTHORIZATION_FAILED).

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use super::RequestContext;
use crate::broker::Broker;
use crate::protocol::errors::KafkaError;
use crate::security::acl::{Operation, ResourceType};
use crate::txn::state::{ProducerIdAndEpoch, TxnApi, error_for_version};

pub const VERSIONS: (i16, i16) = (0, 5);

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: InitProducerIdRequest,
) -> InitProducerIdResponse {
    let response = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let refusal = match request.transactional_id.as_deref() {
        Some(id) if !context.access.allows_transactional_id(Operation::Write, id) => {
            Some(KafkaError::TransactionalIdAuthorizationFailed)
        }
        Some(_) => None,
        None if !context.access.allows_cluster(Operation::IdempotentWrite)
            && !context
                .access
                .allows_any(Operation::Write, ResourceType::Topic) =>
        {
            Some(KafkaError::ClusterAuthorizationFailed)
        }
        None => None,
    };
    if let Some(error) = refusal {
        return response.with_error_code(error.code());
    }
    let Some(transactional_id) = request.transactional_id.as_ref() else {
        return match broker.producer_ids.next(&broker.controller).await {
            Ok(producer_id) => response
                .with_producer_id(ProducerId(producer_id))
                .with_producer_epoch(0),
            Err(error) => response.with_error_code(error.code()),
        };
    };
    // KIP-360 (v3+): the producer id and epoch the client has, to bump after a fatal error.
    let expected = (request.producer_id.0 >= 0).then_some(ProducerIdAndEpoch {
        producer_id: request.producer_id.0,
        producer_epoch: request.producer_epoch,
    });
    let outcome = if transactional_id.is_empty() {
        Err(KafkaError::InvalidRequest)
    } else {
        broker
            .transactions
            .init_producer_id(transactional_id, request.transaction_timeout_ms, expected)
            .await
    };
    match outcome {
        Ok(producer) => response
            .with_producer_id(ProducerId(producer.producer_id))
            .with_producer_epoch(producer.producer_epoch),
        Err(error) => {
            let error = error_for_version(error, TxnApi::InitProducerId, context.api_version);
            tracing::debug!(transactional_id = %transactional_id.as_str(), %error, "InitProducerId refused");
            response.with_error_code(error.code())
        }
    }
}
