//! [`Admin`]'s transaction operations, as Kafka's `AdminClient` has them (and
//! `kafka-transactions.sh` uses them): list the transactional ids every broker coordinates,
//! describe ids at their coordinators, describe a partition's producers at its leader, and
//! abort a hanging transaction by writing its abort marker at the partition's leader.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeTransactionsRequest, ListTransactionsRequest, ProducerId,
    TopicName, TransactionalId, WriteTxnMarkersRequest,
};
use kafka_protocol::protocol::StrBytes;

use super::admin::Admin;
use super::connection::Connection;
use super::consumer::TopicPartition;
use super::error::{Error, Result};
use super::transaction::{KEY_TYPE_TRANSACTION, find_coordinator};
use crate::protocol::errors;

/// Which transactions [`Admin::list_transactions`] lists (Kafka's `ListTransactionsOptions`);
/// the default lists all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListTransactionsFilters {
    /// Only these states (Kafka's names: `Ongoing`, `PrepareCommit`, `CompleteAbort`, ...).
    pub states: Vec<String>,
    /// Only these producer ids.
    pub producer_ids: Vec<i64>,
    /// Only transactions open longer than this many milliseconds (ListTransactions v1).
    pub duration_ms: Option<i64>,
    /// Only transactional ids matching this regular expression (ListTransactions v2).
    pub transactional_id_pattern: Option<String>,
}

/// A transactional id as ListTransactions names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionListing {
    /// The transactional id.
    pub transactional_id: String,
    /// The node id of its coordinator (the broker that listed it).
    pub coordinator_id: i32,
    /// Its producer id.
    pub producer_id: i64,
    /// Its state (Kafka's names).
    pub state: String,
}

/// A transactional id as its coordinator describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionDescription {
    /// The transactional id.
    pub transactional_id: String,
    /// The node id of its coordinator.
    pub coordinator_id: i32,
    /// Its state (`Empty`, `Ongoing`, `PrepareCommit`, `CompleteCommit`, ...).
    pub state: String,
    /// Its producer id.
    pub producer_id: i64,
    /// Its producer epoch.
    pub producer_epoch: i16,
    /// `transaction.timeout.ms` of its producer.
    pub transaction_timeout_ms: i32,
    /// When the open transaction started (milliseconds since the epoch); `None` when none is
    /// open.
    pub transaction_start_time_ms: Option<i64>,
    /// The partitions of the open transaction.
    pub topic_partitions: Vec<TopicPartition>,
}

/// One producer a partition leader knows (Kafka's `ProducerState`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerState {
    /// The producer id.
    pub producer_id: i64,
    /// Its latest epoch.
    pub producer_epoch: i32,
    /// The last sequence number it wrote (-1: none).
    pub last_sequence: i32,
    /// The timestamp of its last write.
    pub last_timestamp: i64,
    /// The coordinator epoch of its last transaction marker (`None`: no marker yet).
    pub coordinator_epoch: Option<i32>,
    /// The first offset of its open transaction (`None`: none open).
    pub current_transaction_start_offset: Option<i64>,
}

/// A transaction to abort at one partition (Kafka's `AbortTransactionSpec`): what
/// [`Admin::describe_producers`] says of the producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbortTransactionSpec {
    /// The partition holding the open transaction.
    pub topic_partition: TopicPartition,
    /// The producer whose transaction it is.
    pub producer_id: i64,
    /// Its producer epoch.
    pub producer_epoch: i16,
    /// The coordinator epoch of its last marker (-1 is sent as 0, as Kafka's tool does: no
    /// marker was written yet, and 0 is at most any epoch).
    pub coordinator_epoch: i32,
}

/// How long the coordinator of an id is looked for while `__transaction_state` is created
/// or loads.
const COORDINATOR_ATTEMPTS_MAX: u32 = 100;
const COORDINATOR_RETRY_BACKOFF: Duration = Duration::from_millis(200);

impl Admin {
    /// The transactional ids every broker coordinates, with their states, as `filters` say.
    pub async fn list_transactions(
        &self,
        filters: &ListTransactionsFilters,
    ) -> Result<Vec<TransactionListing>> {
        let request = ListTransactionsRequest::default()
            .with_state_filters(filters.states.iter().map(|s| str_bytes(s)).collect())
            .with_producer_id_filters(
                filters
                    .producer_ids
                    .iter()
                    .map(|&p| ProducerId(p))
                    .collect(),
            )
            .with_duration_filter(filters.duration_ms.unwrap_or(-1))
            .with_transactional_id_pattern(
                filters.transactional_id_pattern.as_deref().map(str_bytes),
            );
        let metadata = self.metadata(Some(&[])).await?;
        let mut listings = Vec::new();
        for broker in metadata.brokers.values() {
            let connection = self.cluster().connection_to(&broker.address()).await?;
            let response = connection.send(&request).await?;
            if let Some(error) = Error::kafka(
                response.error_code,
                format!("listing the transactions of broker {}", broker.node_id),
                None,
            ) {
                return Err(error);
            }
            if let Some(unknown) = response.unknown_state_filters.first() {
                return Err(Error::Config {
                    key: "transaction state filter".into(),
                    reason: format!(
                        "{:?} is not a transaction state (Empty, Ongoing, PrepareCommit, \
                         PrepareAbort, CompleteCommit, CompleteAbort, Dead, PrepareEpochFence)",
                        unknown.as_str()
                    ),
                });
            }
            listings.extend(
                response
                    .transaction_states
                    .iter()
                    .map(|t| TransactionListing {
                        transactional_id: t.transactional_id.to_string(),
                        coordinator_id: broker.node_id,
                        producer_id: t.producer_id.0,
                        state: t.transaction_state.to_string(),
                    }),
            );
        }
        listings.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        Ok(listings)
    }

    /// Describes each transactional id at its coordinator (TRANSACTIONAL_ID_NOT_FOUND for an
    /// id the cluster does not know).
    pub async fn describe_transactions(
        &self,
        transactional_ids: &[String],
    ) -> Result<Vec<TransactionDescription>> {
        let mut descriptions = Vec::with_capacity(transactional_ids.len());
        for transactional_id in transactional_ids {
            descriptions.push(self.describe_transaction(transactional_id).await?);
        }
        Ok(descriptions)
    }

    async fn describe_transaction(&self, transactional_id: &str) -> Result<TransactionDescription> {
        let request = DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![TransactionalId(str_bytes(transactional_id))]);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (coordinator_id, connection) =
                self.transaction_coordinator(transactional_id).await?;
            let response = connection.send(&request).await?;
            let state = response
                .transaction_states
                .iter()
                .find(|s| s.transactional_id.as_str() == transactional_id)
                .ok_or_else(|| {
                    Error::Protocol(format!(
                        "DescribeTransactions has no answer for {transactional_id}"
                    ))
                })?;
            let moved = matches!(
                state.error_code,
                errors::NOT_COORDINATOR
                    | errors::COORDINATOR_NOT_AVAILABLE
                    | errors::COORDINATOR_LOAD_IN_PROGRESS
            );
            if moved && attempt < COORDINATOR_ATTEMPTS_MAX {
                tokio::time::sleep(COORDINATOR_RETRY_BACKOFF).await;
                continue;
            }
            if let Some(error) = Error::kafka(
                state.error_code,
                format!("transactional id {transactional_id}"),
                None,
            ) {
                return Err(error);
            }
            return Ok(TransactionDescription {
                transactional_id: transactional_id.to_owned(),
                coordinator_id,
                state: state.transaction_state.to_string(),
                producer_id: state.producer_id.0,
                producer_epoch: state.producer_epoch,
                transaction_timeout_ms: state.transaction_timeout_ms,
                transaction_start_time_ms: (state.transaction_start_time_ms >= 0)
                    .then_some(state.transaction_start_time_ms),
                topic_partitions: state
                    .topics
                    .iter()
                    .flat_map(|t| {
                        t.partitions
                            .iter()
                            .map(|&p| TopicPartition::new(t.topic.as_str(), p))
                    })
                    .collect(),
            });
        }
    }

    /// The coordinator of `transactional_id` (node id and connection), retried while
    /// `__transaction_state` is created or loads.
    async fn transaction_coordinator(
        &self,
        transactional_id: &str,
    ) -> Result<(i32, Arc<Connection>)> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match find_coordinator(self.cluster(), KEY_TYPE_TRANSACTION, transactional_id).await {
                Ok((node_id, addr)) => {
                    let connection = self.cluster().connection_to(&addr).await?;
                    return Ok((node_id, connection));
                }
                Err(error)
                    if attempt < COORDINATOR_ATTEMPTS_MAX
                        && matches!(
                            error.code(),
                            Some(
                                errors::COORDINATOR_NOT_AVAILABLE
                                    | errors::COORDINATOR_LOAD_IN_PROGRESS
                            )
                        ) =>
                {
                    tokio::time::sleep(COORDINATOR_RETRY_BACKOFF).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// The producers each partition's leader knows: their epochs, last sequences and open
    /// transactions.
    pub async fn describe_producers(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, Vec<ProducerState>>> {
        self.describe_producers_on(partitions, None).await
    }

    /// [`Admin::describe_producers`] at broker `broker_id` rather than each leader
    /// (kafka-transactions.sh's `--broker-id`: a replica's view).
    pub async fn describe_producers_on(
        &self,
        partitions: &[TopicPartition],
        broker_id: Option<i32>,
    ) -> Result<BTreeMap<TopicPartition, Vec<ProducerState>>> {
        let by_broker = match broker_id {
            Some(broker) => BTreeMap::from([(broker, partitions.to_vec())]),
            None => self.by_leader(partitions).await?,
        };
        let mut described = BTreeMap::new();
        for (broker, partitions) in by_broker {
            let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for tp in &partitions {
                topics
                    .entry(tp.topic.as_str())
                    .or_default()
                    .push(tp.partition);
            }
            let request = DescribeProducersRequest::default().with_topics(
                topics
                    .into_iter()
                    .map(|(topic, indexes)| {
                        TopicRequest::default()
                            .with_name(topic_name(topic))
                            .with_partition_indexes(indexes)
                    })
                    .collect(),
            );
            let response = self.cluster().broker(broker).await?.send(&request).await?;
            for topic in &response.topics {
                for partition in &topic.partitions {
                    let tp = TopicPartition::new(topic.name.as_str(), partition.partition_index);
                    if let Some(error) = Error::kafka(
                        partition.error_code,
                        format!("partition {tp} on broker {broker}"),
                        partition.error_message.as_deref(),
                    ) {
                        return Err(error);
                    }
                    let producers = partition
                        .active_producers
                        .iter()
                        .map(|p| ProducerState {
                            producer_id: p.producer_id.0,
                            producer_epoch: p.producer_epoch,
                            last_sequence: p.last_sequence,
                            last_timestamp: p.last_timestamp,
                            coordinator_epoch: (p.coordinator_epoch >= 0)
                                .then_some(p.coordinator_epoch),
                            current_transaction_start_offset: (p.current_txn_start_offset >= 0)
                                .then_some(p.current_txn_start_offset),
                        })
                        .collect();
                    described.insert(tp, producers);
                }
            }
        }
        Ok(described)
    }

    /// Aborts a transaction at one partition (kafka-transactions.sh's `abort`, for a
    /// transaction left hanging there): WriteTxnMarkers with an abort marker to the
    /// partition's leader, as Kafka's admin client does (the coordinator is not involved).
    pub async fn abort_transaction(&self, spec: &AbortTransactionSpec) -> Result<()> {
        let tp = &spec.topic_partition;
        let leader = *self
            .by_leader(std::slice::from_ref(tp))
            .await?
            .keys()
            .next()
            .ok_or_else(|| Error::Protocol(format!("no leader found for {tp}")))?;
        let request = WriteTxnMarkersRequest::default().with_markers(vec![
            WritableTxnMarker::default()
                .with_producer_id(ProducerId(spec.producer_id))
                .with_producer_epoch(spec.producer_epoch)
                .with_transaction_result(false)
                .with_coordinator_epoch(spec.coordinator_epoch.max(0))
                .with_topics(vec![
                    WritableTxnMarkerTopic::default()
                        .with_name(topic_name(&tp.topic))
                        .with_partition_indexes(vec![tp.partition]),
                ]),
        ]);
        let response = self.cluster().broker(leader).await?.send(&request).await?;
        let mut answered = false;
        for marker in &response.markers {
            for topic in &marker.topics {
                for partition in &topic.partitions {
                    answered = true;
                    if let Some(error) = Error::kafka(
                        partition.error_code,
                        format!(
                            "aborting the transaction of producer {} at {}-{}",
                            spec.producer_id,
                            topic.name.as_str(),
                            partition.partition_index
                        ),
                        None,
                    ) {
                        return Err(error);
                    }
                }
            }
        }
        if !answered {
            return Err(Error::Protocol(format!(
                "WriteTxnMarkers has no answer for {tp}"
            )));
        }
        Ok(())
    }

    /// `partitions` by their leader's node id (UNKNOWN_TOPIC_OR_PARTITION or
    /// LEADER_NOT_AVAILABLE naming the first that has none).
    async fn by_leader(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<i32, Vec<TopicPartition>>> {
        let mut topics: Vec<String> = partitions.iter().map(|tp| tp.topic.clone()).collect();
        topics.sort();
        topics.dedup();
        let metadata = self.metadata(Some(&topics)).await?;
        let mut by_leader: BTreeMap<i32, Vec<TopicPartition>> = BTreeMap::new();
        for tp in partitions {
            let leader = match metadata.partition(&tp.topic, tp.partition) {
                Some(p) if p.leader >= 0 => p.leader,
                Some(_) => {
                    return Err(Error::from_code(
                        errors::LEADER_NOT_AVAILABLE,
                        format!("partition {tp}"),
                        None,
                    ));
                }
                None => {
                    return Err(Error::from_code(
                        errors::UNKNOWN_TOPIC_OR_PARTITION,
                        format!("partition {tp}"),
                        None,
                    ));
                }
            };
            by_leader.entry(leader).or_default().push(tp.clone());
        }
        Ok(by_leader)
    }
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn topic_name(s: &str) -> TopicName {
    TopicName(str_bytes(s))
}
