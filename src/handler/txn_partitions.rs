//! KIP-890 on the partition leader's side. Part 1: before a transactional batch opens its
//! producer's transaction in a partition, the leader asks the transaction coordinator whether
//! the partition is in that transaction (AddPartitionsToTxn `verify_only`; locally when this
//! broker is the coordinator), holding a guard a marker clears meanwhile. A late write of a
//! transaction that already ended is then refused (INVALID_TXN_STATE) instead of opening a
//! transaction nobody will ever end, which would hold the last stable offset back forever.
//! Part 2 (transaction version 2): a client that sends Produce v12 does not add partitions
//! itself; the leader adds them (AddPartitionsToTxn v5 without `verify_only`), and the group
//! coordinator adds the offsets partition for TxnOffsetCommit v5 the same way.

use std::collections::HashMap;

use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::produce_request::TopicProduceData;
use kafka_protocol::messages::{AddPartitionsToTxnRequest, ProducerId, TopicName, TransactionalId};
use sluice_raft::image::MetadataImage;

use super::str_bytes;
use crate::broker::Broker;
use crate::coordinator::host::partition_for;
use crate::log::batch::BatchHeader;
use crate::protocol::TopicPartition;
use crate::protocol::errors::KafkaError;
use crate::txn::coordinator::TRANSACTION_STATE_TOPIC;
use crate::txn::state::ProducerIdAndEpoch;

/// Per partition whose transactional write needed it: the guard to append under, or why
/// not. A partition absent from the map appends with no guard: its producer had a
/// transaction open there, and if a marker closed it meanwhile the write is refused.
pub(super) async fn transactional_writes(
    broker: &Broker,
    image: &MetadataImage,
    transactional_id: &str,
    topics: &[TopicProduceData],
    produce_version: i16,
) -> HashMap<TopicPartition, Result<u64, KafkaError>> {
    // Produce v12 is sent by clients of transaction version 2, which leave adding to us.
    let mode = if produce_version >= 12 {
        Mode::Add
    } else {
        Mode::Verify
    };
    let mut producer: Option<ProducerIdAndEpoch> = None;
    let mut pending: Vec<(TopicPartition, u64)> = Vec::new();
    for topic in topics {
        for data in &topic.partition_data {
            let Some(header) = data.records.as_deref().and_then(BatchHeader::parse) else {
                continue;
            };
            if !header.is_transactional() || header.producer_id < 0 {
                continue;
            }
            let tp = TopicPartition::new(topic.name.to_string(), data.index);
            let Some(partition) = broker.replicas.partition(&tp) else {
                continue;
            };
            if !partition.needs_verification(header.producer_id) {
                continue;
            }
            producer = Some(ProducerIdAndEpoch {
                producer_id: header.producer_id,
                producer_epoch: header.producer_epoch,
            });
            pending.push((tp, partition.start_verification(header.producer_id)));
        }
    }
    let Some(producer) = producer else {
        return HashMap::new();
    };
    let partitions: Vec<TopicPartition> = pending.iter().map(|(tp, _)| tp.clone()).collect();
    let answers =
        ask_coordinator(broker, image, transactional_id, producer, &partitions, mode).await;
    pending
        .into_iter()
        .zip(answers)
        .map(|((tp, guard), answer)| (tp, answer.map(|()| guard)))
        .collect()
}

/// What the leader asks of the coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Whether the partitions are in the transaction (transaction version 1).
    Verify,
    /// Add them (transaction version 2).
    Add,
}

/// The coordinator's answer per partition, as a producer is told it: a partition outside
/// the transaction is INVALID_TXN_STATE; a coordinator that cannot answer now is
/// NOT_ENOUGH_REPLICAS, which every client retries (Kafka's mapping for old clients).
pub(super) async fn ask_coordinator(
    broker: &Broker,
    image: &MetadataImage,
    transactional_id: &str,
    producer: ProducerIdAndEpoch,
    partitions: &[TopicPartition],
    mode: Mode,
) -> Vec<Result<(), KafkaError>> {
    let retriable = |error: KafkaError| match error {
        KafkaError::NotCoordinator
        | KafkaError::CoordinatorNotAvailable
        | KafkaError::CoordinatorLoadInProgress
        | KafkaError::ConcurrentTransactions
        | KafkaError::NetworkException
        | KafkaError::BrokerNotAvailable
        | KafkaError::RequestTimedOut
        | KafkaError::UnknownServerError => KafkaError::NotEnoughReplicas,
        KafkaError::TransactionAbortable => KafkaError::InvalidTxnState,
        other => other,
    };
    let coordinator = image.topic_by_name(TRANSACTION_STATE_TOPIC).and_then(|t| {
        let index = partition_for(transactional_id, t.partitions.len() as i32);
        t.partitions.get(&index).map(|p| p.leader)
    });
    let outcome: Result<Vec<Result<(), KafkaError>>, KafkaError> = match coordinator {
        None | Some(-1) => Err(KafkaError::CoordinatorNotAvailable),
        Some(leader) if leader == broker.broker_id && mode == Mode::Add => broker
            .transactions
            .add_partitions_v2(transactional_id, producer, partitions)
            .await
            .map(|()| vec![Ok(()); partitions.len()]),
        Some(leader) if leader == broker.broker_id => broker
            .transactions
            .verify_partitions(transactional_id, producer, partitions)
            .map(|included| {
                included
                    .into_iter()
                    .map(|i| {
                        if i {
                            Ok(())
                        } else {
                            Err(KafkaError::InvalidTxnState)
                        }
                    })
                    .collect()
            }),
        Some(leader) => {
            remote(
                broker,
                image,
                leader,
                transactional_id,
                producer,
                partitions,
                mode,
            )
            .await
        }
    };
    match outcome {
        Ok(answers) => answers.into_iter().map(|a| a.map_err(retriable)).collect(),
        Err(error) => {
            tracing::debug!(transactional_id, %error, "transactional write not verified");
            vec![Err(retriable(error)); partitions.len()]
        }
    }
}

async fn remote(
    broker: &Broker,
    image: &MetadataImage,
    coordinator: i32,
    transactional_id: &str,
    producer: ProducerIdAndEpoch,
    partitions: &[TopicPartition],
    mode: Mode,
) -> Result<Vec<Result<(), KafkaError>>, KafkaError> {
    let connection = broker.peers.connection(image, coordinator).await?;
    let mut topics: Vec<AddPartitionsToTxnTopic> = Vec::new();
    for tp in partitions {
        match topics.iter_mut().find(|t| t.name.as_str() == tp.topic) {
            Some(topic) => topic.partitions.push(tp.partition),
            None => topics.push(
                AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(str_bytes(tp.topic.clone())))
                    .with_partitions(vec![tp.partition]),
            ),
        }
    }
    let request = AddPartitionsToTxnRequest::default().with_transactions(vec![
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(str_bytes(transactional_id)))
            .with_producer_id(ProducerId(producer.producer_id))
            .with_producer_epoch(producer.producer_epoch)
            .with_verify_only(mode == Mode::Verify)
            .with_topics(topics),
    ]);
    let response = match connection.send(&request).await {
        Ok(response) => response,
        Err(error) => {
            broker.peers.forget(coordinator);
            tracing::debug!(coordinator, %error, "AddPartitionsToTxn to the coordinator failed");
            return Err(KafkaError::NetworkException);
        }
    };
    KafkaError::check(response.error_code)?;
    let mut answers: HashMap<(String, i32), i16> = HashMap::new();
    for transaction in &response.results_by_transaction {
        for topic in &transaction.topic_results {
            for p in &topic.results_by_partition {
                answers.insert(
                    (topic.name.to_string(), p.partition_index),
                    p.partition_error_code,
                );
            }
        }
    }
    Ok(partitions
        .iter()
        .map(|tp| match answers.get(&(tp.topic.clone(), tp.partition)) {
            Some(code) => KafkaError::check(*code),
            None => Err(KafkaError::UnknownServerError),
        })
        .collect())
}
