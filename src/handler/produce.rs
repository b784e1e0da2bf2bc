//! Produce: appends each partition's batches on its leader (this broker), then answers per
//! partition. `acks=0` gets no response; `acks=all` waits until the high watermark passes the
//! batches (or `timeout_ms`), answering NOT_LEADER_OR_FOLLOWER if this broker stops leading
//! the partition or the batches leave its log first (`Partition::ack_state`). The waits sit in
//! the purgatory together, under the request's one deadline: a request for N partitions
//! answers within `timeout_ms`, REQUEST_TIMED_OUT on those still waiting.

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse,
    TopicProduceResponse,
};
use kafka_protocol::messages::{BrokerId, ProduceRequest, ProduceResponse};

use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::protocol::TopicPartition;
use crate::protocol::errors::KafkaError;
use crate::replica::{AckState, Delayed, PendingAck, compression};
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (3, 12);

/// An `acks=all` partition response waiting for the high watermark.
struct Wait {
    partition: std::sync::Arc<crate::replica::Partition>,
    pending: PendingAck,
    /// Where its response sits in the topic's partition responses.
    index: usize,
    min_insync: usize,
    state: AckState,
}

impl Wait {
    /// Acknowledged, or led elsewhere: nothing more to wait for.
    fn settled(&self) -> bool {
        matches!(self.state, AckState::Acknowledged | AckState::NotLeader)
    }
}

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: ProduceRequest,
) -> Option<Result<ProduceResponse, ()>> {
    let acks = request.acks;
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(request.timeout_ms.max(0) as u64);
    let image = broker.image();
    let mut request = request;
    // Refused before anything is verified or appended (Kafka's order): a transactional id the
    // principal may not write to refuses every partition, a topic it may not write to its own.
    let mut responses = Vec::with_capacity(request.topic_data.len());
    let transactional_id = request
        .transactional_id
        .as_deref()
        .filter(|id| !id.is_empty());
    let writable_id = transactional_id
        .is_none_or(|id| context.access.allows_transactional_id(Operation::Write, id));
    if request.topic_data.is_empty() {
        context.access.open_to_all();
    }
    let (allowed, denied): (Vec<_>, Vec<_>) = std::mem::take(&mut request.topic_data)
        .into_iter()
        .partition(|topic| {
            writable_id
                && context
                    .access
                    .allows_topic(Operation::Write, topic.name.as_str())
        });
    request.topic_data = allowed;
    let denial = if writable_id {
        KafkaError::TopicAuthorizationFailed
    } else {
        KafkaError::TransactionalIdAuthorizationFailed
    };
    for topic in denied {
        let partitions = topic
            .partition_data
            .iter()
            .map(|data| {
                PartitionProduceResponse::default()
                    .with_index(data.index)
                    .with_error_code(denial.code())
            })
            .collect();
        responses.push((topic.name.to_string(), partitions, Vec::new()));
    }
    // KIP-890: transactional writes that open their transaction in a partition are checked
    // with the transaction coordinator first (clients of transaction version 2, Produce v12,
    // need the leader to add the partition, whatever the setting).
    let verifying = broker.config.transactions.partition_verification || context.api_version >= 12;
    let verified = match request.transactional_id.as_deref() {
        Some(id) if !id.is_empty() && verifying => Some(
            super::txn_partitions::transactional_writes(
                broker,
                &image,
                id,
                &request.topic_data,
                context.api_version,
            )
            .await,
        ),
        _ => None,
    };
    let mut waits = Vec::new();
    for topic in request.topic_data {
        let name = topic.name.to_string();
        let min_insync = broker.replicas.min_insync_replicas(&image, &name);
        let codec = compression::target_codec(&broker.replicas.compression_type(&image, &name));
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        for data in topic.partition_data {
            let response = PartitionProduceResponse::default().with_index(data.index);
            let tp = TopicPartition::new(name.clone(), data.index);
            if !matches!(acks, -1..=1) {
                partitions.push(response.with_error_code(KafkaError::InvalidRequiredAcks.code()));
                continue;
            }
            if name == crate::group::OFFSETS_TOPIC
                || name == crate::txn::coordinator::TRANSACTION_STATE_TOPIC
            {
                // Only the group coordinator writes it (Kafka's InvalidTopicException).
                partitions.push(
                    response
                        .with_error_code(KafkaError::InvalidTopicException.code())
                        .with_error_message(Some(str_bytes(format!(
                            "cannot append to internal topic {name}"
                        )))),
                );
                continue;
            }
            let Some(partition) = broker.replicas.partition(&tp) else {
                partitions.push(
                    response.with_error_code(broker.unserved_partition_error(&image, &tp).code()),
                );
                continue;
            };
            let Some(records) = data.records else {
                partitions.push(
                    response
                        .with_error_code(KafkaError::CorruptMessage.code())
                        .with_error_message(Some(str_bytes("no records"))),
                );
                continue;
            };
            // The records are appended from the request's buffer as they are: the log writes
            // the leader's offsets and epoch over them as it writes them (no copy).
            let mut records = records;
            if let Some(codec) = codec {
                match tokio::task::block_in_place(|| compression::recompress(&records, codec)) {
                    Ok(Some(rewritten)) => records = Bytes::from(rewritten),
                    Ok(None) => {}
                    Err(error) => {
                        partitions.push(
                            response
                                .with_error_code(error.kafka_error().code())
                                .with_error_message(Some(str_bytes(error.to_string()))),
                        );
                        continue;
                    }
                }
            }
            let append = || match &verified {
                Some(verified) => match verified.get(&tp) {
                    Some(Err(error)) => Err(crate::replica::AppendError {
                        error: *error,
                        message: format!(
                            "the transaction coordinator could not confirm {tp} is in the \
                             transaction: {error}"
                        ),
                        record_errors: Vec::new(),
                    }),
                    Some(Ok(guard)) => {
                        partition.append_verified(&records, acks, min_insync, Some(*guard))
                    }
                    None => partition.append_verified(&records, acks, min_insync, None),
                },
                None => partition.append_as_leader(&records, acks, min_insync),
            };
            // An append that cannot wait for an fsync (Kafka's default flush settings) runs
            // on the network thread: handing the thread's worker to another thread for it
            // (`block_in_place`) cost a context switch per Produce, about a quarter of the
            // broker's CPU per record at 100k records/s (`benches/produce_cpu.py`). A disk that hangs such a write hangs this thread, which the
            // controller's liveness probe then finds, fencing the broker as a hung disk
            // should be. Appends that may fsync hand the worker over.
            let appended = if partition.appends_may_sync() {
                tokio::task::block_in_place(append)
            } else {
                append()
            };
            match appended {
                Ok(appended) => {
                    if !appended.duplicate {
                        broker
                            .metrics
                            .bytes_in
                            .fetch_add(appended.info.bytes, Ordering::Relaxed);
                        broker
                            .metrics
                            .messages_in
                            .fetch_add(appended.info.record_count, Ordering::Relaxed);
                        let traffic = &partition.traffic;
                        traffic
                            .bytes_in
                            .fetch_add(appended.info.bytes, Ordering::Relaxed);
                        traffic
                            .messages_in
                            .fetch_add(appended.info.record_count, Ordering::Relaxed);
                    }
                    if acks == -1 {
                        waits.push(Wait {
                            partition,
                            pending: appended.pending,
                            index: partitions.len(),
                            min_insync,
                            state: AckState::Waiting,
                        });
                    }
                    partitions.push(
                        response
                            .with_base_offset(appended.info.first_offset as i64)
                            .with_log_append_time_ms(appended.info.log_append_time_ms.unwrap_or(-1))
                            .with_log_start_offset(appended.info.log_start_offset as i64),
                    );
                }
                Err(error) => {
                    tracing::debug!(topic_partition = %tp, code = error.error.code(), message = %error.message, "produce refused");
                    let mut response = response
                        .with_error_code(error.error.code())
                        .with_error_message(Some(str_bytes(error.message)));
                    if context.api_version >= 8 {
                        // The client fails these records with the error and the rest of the
                        // batch as not at fault (librdkafka: INVALID_DIFFERENT_RECORD).
                        response.record_errors = error
                            .record_errors
                            .into_iter()
                            .map(|(index, message)| {
                                BatchIndexAndErrorMessage::default()
                                    .with_batch_index(index)
                                    .with_batch_index_error_message(Some(str_bytes(message)))
                            })
                            .collect();
                    }
                    partitions.push(response);
                }
            }
        }
        responses.push((name, partitions, waits.split_off(0)));
    }
    if acks == 0 {
        // No response goes back; as Kafka does, an error closes the connection so the
        // producer notices and refreshes its metadata.
        let failed = responses
            .iter()
            .flat_map(|(_, partitions, _)| partitions.iter())
            .any(|p| KafkaError::check(p.error_code).is_err());
        return if failed { Some(Err(())) } else { None };
    }
    // Every acks=all partition waits in the purgatory at once, until the request's deadline.
    if responses.iter().any(|(_, _, waits)| !waits.is_empty()) {
        let delayed = Delayed::new(
            deadline,
            responses
                .iter()
                .flat_map(|(_, _, waits)| waits.iter().map(|w| w.partition.watchers())),
        );
        delayed
            .until(|| {
                let mut complete = true;
                for wait in responses
                    .iter_mut()
                    .flat_map(|(_, _, waits)| waits.iter_mut())
                {
                    if !wait.settled() {
                        wait.state = wait.partition.ack_state(&wait.pending, wait.min_insync);
                        complete &= wait.settled();
                    }
                }
                complete
            })
            .await;
    }
    let mut topics = Vec::with_capacity(responses.len());
    for (name, mut partitions, waits) in responses {
        for wait in waits {
            let state = wait.state;
            let response = &mut partitions[wait.index];
            let failed = match state {
                AckState::Acknowledged => None,
                AckState::NotLeader => {
                    response.base_offset = -1;
                    Some((
                        KafkaError::NotLeaderOrFollower,
                        "leadership moved before the in-sync replicas acknowledged the batch",
                    ))
                }
                AckState::Waiting => Some((
                    KafkaError::RequestTimedOut,
                    "the in-sync replicas did not acknowledge within timeout_ms",
                )),
                // Written and committed, but the ISR stayed below the minimum.
                AckState::UnderMinIsr => Some((
                    KafkaError::NotEnoughReplicasAfterAppend,
                    "the ISR stayed below min.insync.replicas after the append",
                )),
            };
            if let Some((error, message)) = failed {
                response.error_code = error.code();
                response.error_message = Some(str_bytes(message));
            }
        }
        topics.push(
            TopicProduceResponse::default()
                .with_name(kafka_protocol::messages::TopicName(str_bytes(name)))
                .with_partition_responses(partitions),
        );
    }
    let mut response = ProduceResponse::default().with_responses(topics);
    if context.api_version >= 10 {
        add_leader_hints(broker, context, &mut response);
    }
    Some(Ok(response))
}

/// KIP-951: a partition this broker does not lead (NOT_LEADER_OR_FOLLOWER,
/// FENCED_LEADER_EPOCH) is answered with its current leader and that leader's endpoint, so
/// the client sends its retry there without asking for metadata first.
fn add_leader_hints(broker: &Broker, context: &RequestContext, response: &mut ProduceResponse) {
    let mut hints = super::LeaderHints::new(broker, &context.listener_name);
    for topic in &mut response.responses {
        for partition in &mut topic.partition_responses {
            let hint = hints.hint(topic.name.as_str(), partition.index, partition.error_code);
            if let Some((leader, epoch)) = hint {
                partition.current_leader = LeaderIdAndEpoch::default()
                    .with_leader_id(BrokerId(leader))
                    .with_leader_epoch(epoch);
            }
        }
    }
    response.node_endpoints = hints
        .endpoints()
        .map(|(id, host, port, rack)| {
            NodeEndpoint::default()
                .with_node_id(BrokerId(id))
                .with_host(str_bytes(host))
                .with_port(port)
                .with_rack(rack.map(str_bytes))
        })
        .collect();
}
