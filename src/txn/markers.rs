//! The marker sender: writes a prepared transaction's markers to the leaders of its
//! partitions (WriteTxnMarkers), retrying each partition until its leader acknowledges it,
//! wherever leadership moves meanwhile, then has the coordinator complete the transaction.
//!
//! One dispatcher holds every job and what is left of it; one sender task per destination
//! broker takes what is queued for that broker and sends it as one WriteTxnMarkers request
//! on its own connection (Kafka's `TransactionMarkerChannelManager` does the same per
//! broker). A partition that fails goes back to the dispatcher, which resolves its leader
//! again after a backoff. A partition whose topic is gone counts as written (Kafka's rule:
//! nothing is left to mark). Jobs of a coordinator partition this broker no longer leads are
//! dropped: the new coordinator loads the Prepare* record and sends them itself.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Weak};
use std::time::Duration;

use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{ProducerId, TopicName, WriteTxnMarkersRequest};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::mpsc;

use super::coordinator::TxnCoordinator;
use super::shard::MarkerJob;
use super::state::TxnResult;
use crate::client::Connection;
use crate::inter_broker::InterBrokerClient;
use crate::protocol::TopicPartition;
use crate::protocol::errors::KafkaError;

/// Markers sent in one request, at most.
const MARKERS_PER_REQUEST: usize = 500;
/// The first wait before a failed partition is tried again; doubled up to the maximum.
const RETRY_BACKOFF: Duration = Duration::from_millis(50);
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// How long one WriteTxnMarkers may take (the leader waits for its replicas up to 30 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(40);

/// A job as the dispatcher tracks it.
struct Tracked {
    job: MarkerJob,
    /// The coordinator partition's leader epoch: the markers' coordinator epoch.
    coordinator_epoch: i32,
    /// Partitions not yet acknowledged.
    remaining: BTreeSet<TopicPartition>,
    /// Failed partitions waiting to be tried again, with their next backoff.
    backoff: BTreeMap<TopicPartition, Duration>,
}

/// One partition's marker, as queued for a broker.
#[derive(Debug, Clone)]
struct Unit {
    job: u64,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
    partition: TopicPartition,
}

/// What came back for a unit.
struct Answer {
    unit: Unit,
    outcome: Result<(), KafkaError>,
}

enum Event {
    Job(MarkerJob),
    Answer(Answer),
    Retry(u64, TopicPartition),
}

/// Starts the dispatcher; jobs arrive on `jobs`.
pub fn start(
    coordinator: Weak<TxnCoordinator>,
    jobs: mpsc::UnboundedReceiver<MarkerJob>,
    inter_broker: InterBrokerClient,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(dispatch(coordinator, jobs, inter_broker))
}

async fn dispatch(
    coordinator: Weak<TxnCoordinator>,
    mut jobs: mpsc::UnboundedReceiver<MarkerJob>,
    inter_broker: InterBrokerClient,
) {
    let (events_tx, mut events) = mpsc::unbounded_channel::<Event>();
    let mut tracked: HashMap<u64, Tracked> = HashMap::new();
    let mut next_job = 0u64;
    let mut senders: HashMap<i32, mpsc::UnboundedSender<Unit>> = HashMap::new();
    loop {
        let event = tokio::select! {
            job = jobs.recv() => match job {
                Some(job) => Event::Job(job),
                None => return,
            },
            Some(event) = events.recv() => event,
        };
        let Some(coordinator) = coordinator.upgrade() else {
            return;
        };
        let mut to_send: Vec<(u64, TopicPartition)> = Vec::new();
        match event {
            Event::Job(job) => {
                let Some(coordinator_epoch) = coordinator.coordinator_epoch(&job.transactional_id)
                else {
                    continue;
                };
                // The same transaction already in flight (a reload sent it again).
                if tracked.values().any(|t| t.job == job) {
                    continue;
                }
                let id = next_job;
                next_job += 1;
                tracing::debug!(transactional_id = %job.transactional_id, producer_id = job.producer.producer_id, partitions = job.partitions.len(), result = ?job.result, "writing transaction markers");
                to_send.extend(job.partitions.iter().map(|p| (id, p.clone())));
                tracked.insert(
                    id,
                    Tracked {
                        remaining: job.partitions.clone(),
                        job,
                        coordinator_epoch,
                        backoff: BTreeMap::new(),
                    },
                );
            }
            Event::Answer(Answer { unit, outcome }) => {
                let Some(t) = tracked.get_mut(&unit.job) else {
                    continue;
                };
                match outcome {
                    Ok(()) => {
                        t.remaining.remove(&unit.partition);
                        t.backoff.remove(&unit.partition);
                    }
                    // The partition has seen a newer epoch of the producer: this transaction
                    // was superseded there, nothing is left to mark (the markers carry the
                    // newest epoch the coordinator gave).
                    Err(KafkaError::InvalidProducerEpoch) => {
                        tracing::warn!(transactional_id = %t.job.transactional_id, partition = %unit.partition, producer_epoch = unit.producer_epoch, "the partition holds a newer producer epoch than the marker; counted as written");
                        t.remaining.remove(&unit.partition);
                    }
                    // A newer coordinator wrote to the partition: it owns the transaction.
                    Err(KafkaError::TransactionCoordinatorFenced) => {
                        tracing::info!(transactional_id = %t.job.transactional_id, partition = %unit.partition, "a newer coordinator wrote markers; this one stops");
                        t.coordinator_epoch = -1;
                    }
                    Err(error) => {
                        let backoff = t
                            .backoff
                            .get(&unit.partition)
                            .copied()
                            .unwrap_or(RETRY_BACKOFF);
                        t.backoff
                            .insert(unit.partition.clone(), (backoff * 2).min(RETRY_BACKOFF_MAX));
                        tracing::debug!(transactional_id = %t.job.transactional_id, partition = %unit.partition, %error, backoff_ms = backoff.as_millis() as u64, "transaction marker not written yet; retrying");
                        let events = events_tx.clone();
                        let (job, partition) = (unit.job, unit.partition);
                        tokio::spawn(async move {
                            tokio::time::sleep(backoff).await;
                            let _ = events.send(Event::Retry(job, partition));
                        });
                    }
                }
            }
            Event::Retry(job, partition) => {
                if tracked
                    .get(&job)
                    .is_some_and(|t| t.remaining.contains(&partition))
                {
                    to_send.push((job, partition));
                }
            }
        }
        // Jobs whose coordinator moved are dropped; finished ones complete.
        let finished: Vec<u64> = tracked
            .iter()
            .filter(|(_, t)| {
                t.remaining.is_empty()
                    || coordinator.coordinator_epoch(&t.job.transactional_id)
                        != Some(t.coordinator_epoch)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in finished {
            let Some(t) = tracked.remove(&id) else {
                continue;
            };
            if t.remaining.is_empty() {
                let coordinator = Arc::clone(&coordinator);
                tokio::spawn(async move {
                    coordinator.complete(t.job, t.coordinator_epoch).await;
                });
            }
        }
        let image = coordinator.images().image();
        for (job, partition) in to_send {
            let Some(t) = tracked.get_mut(&job) else {
                continue;
            };
            let Some(topic) = image.topic_by_name(&partition.topic) else {
                // Deleted: nothing is left to mark.
                let _ = events_tx.send(Event::Answer(Answer {
                    unit: unit_of(job, t, partition),
                    outcome: Ok(()),
                }));
                continue;
            };
            let leader = topic
                .partitions
                .get(&partition.partition)
                .map_or(-1, |p| p.leader);
            if leader < 0 {
                let _ = events_tx.send(Event::Answer(Answer {
                    unit: unit_of(job, t, partition),
                    outcome: Err(KafkaError::LeaderNotAvailable),
                }));
                continue;
            }
            let sender = senders.entry(leader).or_insert_with(|| {
                let (tx, rx) = mpsc::unbounded_channel();
                tokio::spawn(send_to(
                    Arc::downgrade(&coordinator),
                    leader,
                    inter_broker.clone(),
                    rx,
                    events_tx.clone(),
                ));
                tx
            });
            let unit = unit_of(job, t, partition);
            if let Err(returned) = sender.send(unit) {
                // That broker's sender ended: a new one next time.
                senders.remove(&leader);
                let _ = events_tx.send(Event::Answer(Answer {
                    unit: returned.0,
                    outcome: Err(KafkaError::NetworkException),
                }));
            }
        }
    }
}

fn unit_of(job: u64, t: &Tracked, partition: TopicPartition) -> Unit {
    Unit {
        job,
        producer_id: t.job.producer.producer_id,
        producer_epoch: t.job.producer.producer_epoch,
        commit: t.job.result == TxnResult::Commit,
        coordinator_epoch: t.coordinator_epoch,
        partition,
    }
}

/// One broker's sender: whatever is queued goes out as one request; answers go back to the
/// dispatcher.
async fn send_to(
    coordinator: Weak<TxnCoordinator>,
    broker: i32,
    inter_broker: InterBrokerClient,
    mut units: mpsc::UnboundedReceiver<Unit>,
    events: mpsc::UnboundedSender<Event>,
) {
    let mut connection: Option<Connection> = None;
    while let Some(first) = units.recv().await {
        let mut batch = vec![first];
        while batch.len() < MARKERS_PER_REQUEST {
            match units.try_recv() {
                Ok(unit) => batch.push(unit),
                Err(_) => break,
            }
        }
        let outcome = match coordinator.upgrade() {
            Some(coordinator) => {
                send_batch(&coordinator, broker, &inter_broker, &mut connection, &batch).await
            }
            None => return,
        };
        match outcome {
            Ok(results) => {
                for (unit, outcome) in batch.into_iter().zip(results) {
                    let _ = events.send(Event::Answer(Answer { unit, outcome }));
                }
            }
            Err(error) => {
                connection = None;
                for unit in batch {
                    let _ = events.send(Event::Answer(Answer {
                        unit,
                        outcome: Err(error),
                    }));
                }
            }
        }
    }
}

/// One marker of a request: producer id, epoch, commit, coordinator epoch.
type MarkerKey = (i64, i16, bool, i32);

/// Sends `batch` to `broker`; each unit's outcome, in order.
async fn send_batch(
    coordinator: &TxnCoordinator,
    broker: i32,
    inter_broker: &InterBrokerClient,
    connection: &mut Option<Connection>,
    batch: &[Unit],
) -> Result<Vec<Result<(), KafkaError>>, KafkaError> {
    let conn = match connection {
        Some(conn) if !conn.is_closed() => conn,
        _ => {
            let addr = coordinator
                .broker_address(broker, inter_broker.listener_name())
                .ok_or(KafkaError::BrokerNotAvailable)?;
            let conn = inter_broker
                .connect(&addr, Duration::from_secs(10))
                .await
                .map_err(|error| {
                    tracing::debug!(broker, %error, "cannot reach a broker for transaction markers");
                    KafkaError::NetworkException
                })?;
            connection.insert(conn)
        }
    };
    // One marker per (producer, epoch, result, coordinator epoch), its partitions by topic.
    let mut markers: BTreeMap<MarkerKey, BTreeMap<String, Vec<i32>>> = BTreeMap::new();
    for unit in batch {
        markers
            .entry((
                unit.producer_id,
                unit.producer_epoch,
                unit.commit,
                unit.coordinator_epoch,
            ))
            .or_default()
            .entry(unit.partition.topic.clone())
            .or_default()
            .push(unit.partition.partition);
    }
    let request = WriteTxnMarkersRequest::default().with_markers(
        markers
            .iter()
            .map(
                |(&(producer_id, producer_epoch, commit, coordinator_epoch), topics)| {
                    WritableTxnMarker::default()
                        .with_producer_id(ProducerId(producer_id))
                        .with_producer_epoch(producer_epoch)
                        .with_transaction_result(commit)
                        .with_coordinator_epoch(coordinator_epoch)
                        .with_topics(
                            topics
                                .iter()
                                .map(|(topic, partitions)| {
                                    WritableTxnMarkerTopic::default()
                                        .with_name(TopicName(StrBytes::from_string(topic.clone())))
                                        .with_partition_indexes(partitions.clone())
                                })
                                .collect(),
                        )
                },
            )
            .collect(),
    );
    let response = tokio::time::timeout(REQUEST_TIMEOUT, conn.send(&request))
        .await
        .map_err(|_| KafkaError::RequestTimedOut)?
        .map_err(|error| {
            tracing::debug!(broker, %error, "WriteTxnMarkers failed");
            KafkaError::NetworkException
        })?;
    // Answers by (producer, topic, partition); a marker per producer in one request.
    let mut answers: HashMap<(i64, String, i32), i16> = HashMap::new();
    for marker in &response.markers {
        for topic in &marker.topics {
            for partition in &topic.partitions {
                answers.insert(
                    (
                        marker.producer_id.0,
                        topic.name.to_string(),
                        partition.partition_index,
                    ),
                    partition.error_code,
                );
            }
        }
    }
    Ok(batch
        .iter()
        .map(|unit| {
            match answers.get(&(
                unit.producer_id,
                unit.partition.topic.clone(),
                unit.partition.partition,
            )) {
                Some(code) => KafkaError::check(*code),
                None => Err(KafkaError::UnknownServerError),
            }
        })
        .collect())
}
