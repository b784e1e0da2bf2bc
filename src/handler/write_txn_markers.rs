//! WriteTxnMarkers: the transaction coordinator has the leaders of a transaction's partitions
//! write its commit or abort marker. A partition of `__consumer_offsets` writes it through the
//! group coordinator (which applies or drops the producer's transactional offsets); any other
//! through its replica. Each is answered once the in-sync replicas hold it (`acks=all`, as
//! Kafka writes markers), or with why not: the coordinator retries until every partition
//! answers NONE.
//!
//! Only brokers send it: Kafka's check is ALTER on the cluster, or else CLUSTER_ACTION; a
//! principal with neither gets CLUSTER_AUTHORIZATION_FAILED for every partition.

use std::time::Duration;

use kafka_protocol::messages::write_txn_markers_request::WritableTxnMarker;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};

use super::RequestContext;
use crate::broker::Broker;
use crate::coordinator::TxnProducer;
use crate::group::OFFSETS_TOPIC;
use crate::protocol::batch::TxnMarker;
use crate::protocol::errors::{self, KafkaError};
use crate::replica::{AckState, Delayed};
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (1, 1);

/// How long a marker waits for the in-sync replicas (Kafka: `request.timeout.ms`).
const MARKER_ACK_TIMEOUT: Duration = Duration::from_secs(30);

/// A marker appended to a replica, waiting for the in-sync replicas.
struct Wait {
    partition: std::sync::Arc<crate::replica::Partition>,
    pending: crate::replica::PendingAck,
    min_insync: usize,
    state: AckState,
}

/// A partition's outcome while the request is worked on.
enum Outcome {
    Done(Result<(), KafkaError>),
    /// Appended: index into the waits.
    Waiting(usize),
    /// A `__consumer_offsets` partition, written through the group coordinator last.
    Offsets,
}

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    if !context.access.allows_cluster(Operation::Alter)
        && !context.access.allows_cluster(Operation::ClusterAction)
    {
        return every_partition(request, KafkaError::ClusterAuthorizationFailed);
    }
    let deadline = tokio::time::Instant::now() + MARKER_ACK_TIMEOUT;
    let image = broker.image();
    // Every marker appended first, then all wait for their replicas at once.
    let mut waits: Vec<Wait> = Vec::new();
    let mut outcomes: Vec<Outcome> = Vec::new();
    for marker in &request.markers {
        let (producer, txn_marker) = parts(marker);
        for topic in &marker.topics {
            for &index in &topic.partition_indexes {
                let outcome = match broker.led_partition(&image, &topic.name, index, -1) {
                    Err(error) => Outcome::Done(Err(error)),
                    Ok(_) if topic.name.as_str() == OFFSETS_TOPIC => Outcome::Offsets,
                    Ok((partition, _)) => {
                        let min_insync = broker.replicas.min_insync_replicas(&image, &topic.name);
                        let appended = tokio::task::block_in_place(|| {
                            partition.append_txn_marker(
                                producer.producer_id,
                                producer.producer_epoch,
                                txn_marker,
                                min_insync,
                                None,
                            )
                        });
                        match appended {
                            Ok(appended) => {
                                waits.push(Wait {
                                    partition,
                                    pending: appended.pending,
                                    min_insync,
                                    state: AckState::Waiting,
                                });
                                Outcome::Waiting(waits.len() - 1)
                            }
                            Err(refused) => {
                                tracing::debug!(topic = %topic.name.as_str(), partition = index, producer_id = producer.producer_id, error = %refused.error, message = %refused.message, "transaction marker refused");
                                Outcome::Done(Err(refused.error))
                            }
                        }
                    }
                };
                outcomes.push(outcome);
            }
        }
    }
    if !waits.is_empty() {
        let delayed = Delayed::new(deadline, waits.iter().map(|w| w.partition.watchers()));
        delayed
            .until(|| {
                let mut complete = true;
                for wait in &mut waits {
                    if !matches!(wait.state, AckState::Acknowledged | AckState::NotLeader) {
                        wait.state = wait.partition.ack_state(&wait.pending, wait.min_insync);
                    }
                    complete &= matches!(wait.state, AckState::Acknowledged | AckState::NotLeader);
                }
                complete
            })
            .await;
    }
    let mut outcomes = outcomes.into_iter();
    let mut markers = Vec::with_capacity(request.markers.len());
    for marker in request.markers {
        let (producer, txn_marker) = parts(&marker);
        let mut topics = Vec::with_capacity(marker.topics.len());
        for topic in marker.topics {
            let mut partitions = Vec::with_capacity(topic.partition_indexes.len());
            for index in topic.partition_indexes {
                let written = match outcomes.next() {
                    Some(Outcome::Done(done)) => done,
                    Some(Outcome::Waiting(wait)) => match waits[wait].state {
                        AckState::Acknowledged => Ok(()),
                        AckState::NotLeader => Err(KafkaError::NotLeaderOrFollower),
                        AckState::UnderMinIsr => Err(KafkaError::NotEnoughReplicasAfterAppend),
                        AckState::Waiting => Err(KafkaError::RequestTimedOut),
                    },
                    Some(Outcome::Offsets) => {
                        broker
                            .groups
                            .write_txn_marker(index, producer, txn_marker)
                            .await
                    }
                    None => Err(KafkaError::UnknownServerError),
                };
                partitions.push(
                    WritableTxnMarkerPartitionResult::default()
                        .with_partition_index(index)
                        .with_error_code(errors::code_of(&written)),
                );
            }
            topics.push(
                WritableTxnMarkerTopicResult::default()
                    .with_name(topic.name)
                    .with_partitions(partitions),
            );
        }
        markers.push(
            WritableTxnMarkerResult::default()
                .with_producer_id(marker.producer_id)
                .with_topics(topics),
        );
    }
    WriteTxnMarkersResponse::default().with_markers(markers)
}

/// Every partition of every marker answered with `error` (Kafka's error answer).
fn every_partition(request: WriteTxnMarkersRequest, error: KafkaError) -> WriteTxnMarkersResponse {
    let markers = request
        .markers
        .into_iter()
        .map(|marker| {
            let topics = marker
                .topics
                .into_iter()
                .map(|topic| {
                    let partitions = topic
                        .partition_indexes
                        .iter()
                        .map(|&index| {
                            WritableTxnMarkerPartitionResult::default()
                                .with_partition_index(index)
                                .with_error_code(error.code())
                        })
                        .collect();
                    WritableTxnMarkerTopicResult::default()
                        .with_name(topic.name)
                        .with_partitions(partitions)
                })
                .collect();
            WritableTxnMarkerResult::default()
                .with_producer_id(marker.producer_id)
                .with_topics(topics)
        })
        .collect();
    WriteTxnMarkersResponse::default().with_markers(markers)
}

fn parts(marker: &WritableTxnMarker) -> (TxnProducer, TxnMarker) {
    (
        TxnProducer {
            producer_id: marker.producer_id.0,
            producer_epoch: marker.producer_epoch,
        },
        TxnMarker {
            commit: marker.transaction_result,
            coordinator_epoch: marker.coordinator_epoch,
        },
    )
}
