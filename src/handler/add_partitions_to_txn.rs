//! AddPartitionsToTxn: a transactional producer adds partitions to its transaction before
//! writing to them (v0-3). From v4, brokers send several transactions at once, and with
//! `verify_only` a partition leader asks whether a partition is in a producer's transaction
//! before appending its transactional batch (KIP-890); nothing is added then. v5 without it
//! is a leader adding partitions for a client of transaction version 2.
//!
//! Kafka's checks. v0-3 (clients): WRITE on the transactional id (every partition
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then WRITE on each topic; an internal topic is never
//! writable here (clients add offsets through AddOffsetsToTxn). A refused topic's partitions
//! answer TOPIC_AUTHORIZATION_FAILED, and the others OPERATION_NOT_ATTEMPTED. v4+ (brokers):
//! CLUSTER_ACTION on the cluster, else a top-level CLUSTER_AUTHORIZATION_FAILED.

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, TransactionalId,
};

use std::collections::BTreeSet;

use super::RequestContext;
use super::offset_commit::refused_topics;
use crate::broker::Broker;
use crate::group::OFFSETS_TOPIC;
use crate::protocol::TopicPartition;
use crate::protocol::errors::KafkaError;
use crate::security::acl::Operation;
use crate::txn::coordinator::TRANSACTION_STATE_TOPIC;
use crate::txn::state::{ProducerIdAndEpoch, TxnApi, error_for_version};

pub const VERSIONS: (i16, i16) = (0, 5);

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    let api_version = context.api_version;
    if api_version <= 3 {
        let transactional_id = &request.v3_and_below_transactional_id;
        let topics = &request.v3_and_below_topics;
        if !context
            .access
            .allows_transactional_id(Operation::Write, transactional_id)
        {
            let partitions = topics.iter().map(|t| t.partitions.len()).sum();
            let refused = vec![Err(KafkaError::TransactionalIdAuthorizationFailed); partitions];
            return AddPartitionsToTxnResponse::default()
                .with_results_by_topic_v3_and_below(answer(api_version, topics, refused));
        }
        let mut refused = refused_topics(
            topics
                .iter()
                .map(|t| t.name.as_str())
                .filter(|name| !is_internal(name)),
            |topic| context.access.allows_topic(Operation::Write, topic),
        );
        refused.extend(
            topics
                .iter()
                .filter(|t| is_internal(&t.name))
                .map(|t| t.name.to_string()),
        );
        let results = add(
            broker,
            api_version,
            transactional_id,
            request.v3_and_below_producer_id.0,
            request.v3_and_below_producer_epoch,
            false,
            topics,
            &refused,
        )
        .await;
        return AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results);
    }
    // Only brokers send v4+ (KIP-890): a partition leader verifying or adding partitions.
    if !context.access.allows_cluster(Operation::ClusterAction) {
        return AddPartitionsToTxnResponse::default()
            .with_error_code(KafkaError::ClusterAuthorizationFailed.code());
    }
    let mut transactions = Vec::with_capacity(request.transactions.len());
    for transaction in &request.transactions {
        let results = add(
            broker,
            api_version,
            &transaction.transactional_id,
            transaction.producer_id.0,
            transaction.producer_epoch,
            transaction.verify_only,
            &transaction.topics,
            &BTreeSet::new(),
        )
        .await;
        transactions.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(transaction.transactional_id.clone())
                .with_topic_results(results),
        );
    }
    AddPartitionsToTxnResponse::default().with_results_by_transaction(transactions)
}

/// Kafka's internal topics (`Topic.isInternal`): written by their coordinators only.
fn is_internal(topic: &str) -> bool {
    topic == OFFSETS_TOPIC || topic == TRANSACTION_STATE_TOPIC
}

/// One transaction's partitions: every partition gets an answer. `refused`: the topics the
/// principal may not write to.
#[allow(clippy::too_many_arguments)]
async fn add(
    broker: &Broker,
    api_version: i16,
    transactional_id: &TransactionalId,
    producer_id: i64,
    producer_epoch: i16,
    verify_only: bool,
    topics: &[AddPartitionsToTxnTopic],
    refused: &BTreeSet<String>,
) -> Vec<AddPartitionsToTxnTopicResult> {
    let image = broker.image();
    let partitions: Vec<TopicPartition> = topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| TopicPartition::new(t.name.to_string(), *p))
        })
        .collect();
    // Refused, then unknown partitions fail alone; the others are then not attempted.
    let checks: Vec<Option<KafkaError>> = partitions
        .iter()
        .map(|tp| {
            if refused.contains(&tp.topic) {
                Some(KafkaError::TopicAuthorizationFailed)
            } else if image
                .topic_by_name(&tp.topic)
                .is_none_or(|t| !t.partitions.contains_key(&tp.partition))
            {
                Some(KafkaError::UnknownTopicOrPartition)
            } else {
                None
            }
        })
        .collect();
    let producer = ProducerIdAndEpoch {
        producer_id,
        producer_epoch,
    };
    let outcomes: Vec<Result<(), KafkaError>> = if let Some(failed) = failed_checks(&checks) {
        failed
    } else if transactional_id.is_empty() {
        vec![Err(KafkaError::InvalidRequest); partitions.len()]
    } else if verify_only {
        match broker
            .transactions
            .verify_partitions(transactional_id, producer, &partitions)
        {
            Ok(included) => included
                .into_iter()
                .map(|i| {
                    if i {
                        Ok(())
                    } else {
                        Err(KafkaError::TransactionAbortable)
                    }
                })
                .collect(),
            Err(error) => vec![Err(error); partitions.len()],
        }
    } else {
        // v5 from a partition leader adds for a client of transaction version 2.
        let added = if api_version >= 5 {
            broker
                .transactions
                .add_partitions_v2(transactional_id, producer, &partitions)
                .await
        } else {
            broker
                .transactions
                .add_partitions(transactional_id, producer, &partitions)
                .await
        };
        if let Err(error) = added {
            tracing::debug!(transactional_id = %transactional_id.as_str(), %error, "AddPartitionsToTxn refused");
        }
        vec![added; partitions.len()]
    };
    answer(api_version, topics, outcomes)
}

/// Kafka's answer when partitions of a transaction fail a check (`checks`: each partition's
/// failure, if any): each failing partition its error, every other OPERATION_NOT_ATTEMPTED,
/// as none was added. `None` when every partition passed.
fn failed_checks(checks: &[Option<KafkaError>]) -> Option<Vec<Result<(), KafkaError>>> {
    if checks.iter().all(Option::is_none) {
        return None;
    }
    Some(
        checks
            .iter()
            .map(|check| Err(check.unwrap_or(KafkaError::OperationNotAttempted)))
            .collect(),
    )
}

/// The per-topic answer of a transaction's partitions, given one outcome per partition in
/// request order.
fn answer(
    api_version: i16,
    topics: &[AddPartitionsToTxnTopic],
    outcomes: Vec<Result<(), KafkaError>>,
) -> Vec<AddPartitionsToTxnTopicResult> {
    let mut outcomes = outcomes.into_iter();
    topics
        .iter()
        .map(|topic| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(topic.name.clone())
                .with_results_by_partition(
                    topic
                        .partitions
                        .iter()
                        .map(|p| {
                            let outcome = outcomes.next().unwrap_or(Ok(()));
                            let code = match outcome {
                                Ok(()) => 0,
                                Err(error) => error_for_version(
                                    error,
                                    TxnApi::AddPartitionsToTxn,
                                    api_version,
                                )
                                .code(),
                            };
                            AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(*p)
                                .with_partition_error_code(code)
                        })
                        .collect(),
                )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_check_fails_the_transaction_and_the_rest_are_not_attempted() {
        let checks = [
            None,
            Some(KafkaError::TopicAuthorizationFailed),
            Some(KafkaError::UnknownTopicOrPartition),
            None,
        ];
        assert_eq!(
            failed_checks(&checks),
            Some(vec![
                Err(KafkaError::OperationNotAttempted),
                Err(KafkaError::TopicAuthorizationFailed),
                Err(KafkaError::UnknownTopicOrPartition),
                Err(KafkaError::OperationNotAttempted),
            ])
        );
    }

    #[test]
    fn partitions_that_all_pass_go_on_to_the_coordinator() {
        assert_eq!(failed_checks(&[None, None]), None);
        assert_eq!(failed_checks(&[]), None);
    }

    #[test]
    fn only_the_coordinators_topics_are_internal() {
        assert!(is_internal("__consumer_offsets"));
        assert!(is_internal("__transaction_state"));
        assert!(!is_internal("orders"));
        assert!(!is_internal("__consumer_offsets2"));
    }
}
