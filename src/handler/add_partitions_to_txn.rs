//! AddPartitionsToTxn: a transactional producer adds partitions to its transaction before
//! writing to them (v0-3). From v4, brokers send several transactions at once, and with
//! `verify_only` a partition leader asks whether a partition is in a producer's transaction
//! before appending its transactional batch (KIP-890); nothing is added then. v5 without it
//! is a leader adding partitions for a client of transaction version 2.

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, TransactionalId,
};

use super::RequestContext;
use crate::broker::Broker;
use crate::protocol::TopicPartition;
use crate::protocol::errors::KafkaError;
use crate::txn::state::{ProducerIdAndEpoch, TxnApi, error_for_version};

pub const VERSIONS: (i16, i16) = (0, 5);

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    let api_version = context.api_version;
    if api_version <= 3 {
        let results = add(
            broker,
            api_version,
            &request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id.0,
            request.v3_and_below_producer_epoch,
            false,
            &request.v3_and_below_topics,
        )
        .await;
        return AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results);
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

/// One transaction's partitions: every partition gets an answer.
async fn add(
    broker: &Broker,
    api_version: i16,
    transactional_id: &TransactionalId,
    producer_id: i64,
    producer_epoch: i16,
    verify_only: bool,
    topics: &[AddPartitionsToTxnTopic],
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
    // Unknown partitions fail alone; the others are then not attempted (Kafka's answer).
    let unknown: Vec<bool> = partitions
        .iter()
        .map(|tp| {
            image
                .topic_by_name(&tp.topic)
                .is_none_or(|t| !t.partitions.contains_key(&tp.partition))
        })
        .collect();
    let producer = ProducerIdAndEpoch {
        producer_id,
        producer_epoch,
    };
    let outcomes: Vec<Result<(), KafkaError>> = if transactional_id.is_empty() {
        vec![Err(KafkaError::InvalidRequest); partitions.len()]
    } else if unknown.iter().any(|u| *u) {
        unknown
            .iter()
            .map(|u| {
                Err(if *u {
                    KafkaError::UnknownTopicOrPartition
                } else {
                    KafkaError::OperationNotAttempted
                })
            })
            .collect()
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
