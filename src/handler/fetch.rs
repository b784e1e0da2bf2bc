//! Fetch: reads whole batches from partition logs, up to the high watermark for consumers,
//! with long polling (`max_wait_ms` / `min_bytes`), the response-wide `max_bytes` and the
//! per-partition limit, and incremental fetch sessions (KIP-227).
//!
//! Sizes follow Kafka's `ReplicaManager.readFromLocalLog` (KIP-74), for consumers and
//! followers alike: partitions are read in request (or session) order, each within
//! min(`partition_max_bytes`, what is left of `max_bytes`); until one partition has returned
//! records, a partition's first batch is returned even when it exceeds that limit
//! (`minOneMessage`), so a client always progresses; after that a batch that does not fit is
//! left for a later fetch. So the records of a response never exceed `max_bytes` except by
//! the one batch that leads it: librdkafka drops the connection on a response larger than its
//! `receive.message.max.bytes`, sized from its `fetch.max.bytes`.

use std::cell::Cell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset, LeaderIdAndEpoch, NodeEndpoint, PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, ProducerId};
use sluice_raft::image::MetadataImage;
use uuid::Uuid as KafkaUuid;

use super::{RequestContext, our_uuid};
use crate::broker::Broker;
use crate::broker::client_quotas::{QuotaClient, QuotaType};
use crate::broker::{Reported, Wanted};
use crate::file_slice::FileSlice;
use crate::log::LogError;
use crate::protocol::TopicPartition;
use crate::protocol::errors::{self, KafkaError};
use crate::protocol::fetch_encode::{FetchAnswer, FetchPartitionAnswer, FetchTopicAnswer};
use crate::replica::read_replica::{self, ReplicaSelector, ReplicaView};
use crate::replica::{Delayed, FollowerFetch, Partition, PartitionState, ReadBound};
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (4, 17);

/// KIP-227 session epochs.
const INITIAL_EPOCH: i32 = 0;
const FINAL_EPOCH: i32 = -1;
const READ_COMMITTED: i8 = 1;

/// How the request relates to a session.
enum Mode {
    Sessionless,
    New,
    Incremental(i32),
}

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: FetchRequest,
) -> FetchAnswer {
    let version = context.api_version;
    let image = broker.image();
    let mut requested = Vec::new();
    for topic in &request.topics {
        let name = if version >= 13 {
            image
                .topics
                .get(&our_uuid(topic.topic_id))
                .map(|t| t.name.clone())
        } else {
            Some(topic.topic.to_string())
        };
        for p in &topic.partitions {
            requested.push(Wanted {
                topic: name.clone().unwrap_or_default(),
                topic_id: topic.topic_id,
                partition: p.partition,
                fetch_offset: p.fetch_offset,
                partition_max_bytes: p.partition_max_bytes,
                current_leader_epoch: p.current_leader_epoch,
                last_fetched_epoch: p.last_fetched_epoch,
            });
        }
    }
    let forgotten: Vec<(String, KafkaUuid, i32)> = request
        .forgotten_topics_data
        .iter()
        .flat_map(|t| {
            let name = if version >= 13 {
                image
                    .topics
                    .get(&our_uuid(t.topic_id))
                    .map(|i| i.name.clone())
                    .unwrap_or_default()
            } else {
                t.topic.to_string()
            };
            t.partitions
                .iter()
                .map(move |p| (name.clone(), t.topic_id, *p))
        })
        .collect();

    // Session bookkeeping (KIP-227).
    let sessions = &broker.fetch_sessions;
    let (mode, wanted) = match (request.session_id, request.session_epoch) {
        (0, INITIAL_EPOCH) => (Mode::New, unreported(&requested)),
        (0, _) => (Mode::Sessionless, unreported(&requested)),
        (id, FINAL_EPOCH) => {
            sessions.close(id);
            (Mode::Sessionless, unreported(&requested))
        }
        (id, epoch) => {
            match sessions.update(
                id,
                epoch,
                &forgotten,
                &requested,
                version >= 13,
                Instant::now(),
            ) {
                Ok(partitions) => (Mode::Incremental(id), partitions),
                Err(error) => {
                    // A session error carries no data: nothing to authorize.
                    context.access.open_to_all();
                    return FetchAnswer {
                        error_code: error.code(),
                        ..FetchAnswer::default()
                    };
                }
            }
        }
    };
    // A follower's fetch names it (v15+ in replica_state); consumers send -1.
    let replica_id = request.replica_id.0.max(request.replica_state.replica_id.0);
    let session_id = match mode {
        Mode::New => sessions.create(&requested, Instant::now()),
        Mode::Incremental(id) => id,
        Mode::Sessionless => 0,
    };

    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(request.max_wait_ms.max(0) as u64);
    let min_bytes = request.min_bytes.max(0) as usize;
    // Kafka reads `max_bytes` as given from Fetch v3 on (we serve v4+): 0 still brings one
    // batch, by the min-one-message rule. A consumer under a consumer_byte_rate quota reads
    // at most what the quota allows in a window (Kafka's `getMaxValueInQuotaWindow`).
    let client = QuotaClient::new(&context.principal, context.client_id.as_deref());
    let quota_bytes = (replica_id < 0)
        .then(|| {
            broker
                .client_quotas
                .max_value_in_window(&image.client_quotas, QuotaType::Fetch, client)
        })
        .flatten();
    let max_bytes = match quota_bytes {
        Some(allowed) => (request.max_bytes.max(0) as usize).min(allowed as usize),
        None => request.max_bytes.max(0) as usize,
    };
    let denied = unreadable_topics(context, &wanted, replica_id);
    // KIP-392: a consumer fetching with v11+ may be sent to a follower, and read from one.
    let client_rack = (version >= 11 && replica_id < 0).then(|| request.rack_id.as_str());
    let params = ReadParams {
        image: &image,
        isolation_level: request.isolation_level,
        replica_id,
        client_rack,
        follower_read_bytes: Cell::new(0),
        consumer_reads: Default::default(),
    };
    // Into the purgatory only when the first read falls short: woken by the named partitions
    // only. Registered before the next read, so no change in between goes unseen.
    let mut delayed: Option<Delayed> = None;
    loop {
        let (results, bytes, answer_now) = read_all(broker, &params, &wanted, max_bytes, &denied);
        let done = bytes >= min_bytes || answer_now || tokio::time::Instant::now() >= deadline;
        if done {
            if replica_id < 0 {
                let throttle = broker.client_quotas.record(
                    &image.client_quotas,
                    QuotaType::Fetch,
                    client,
                    bytes as f64,
                );
                if !throttle.is_zero() {
                    // Kafka's throttled fetch: nothing returned nor counted, the wait said.
                    broker.client_quotas.unrecord(
                        &image.client_quotas,
                        QuotaType::Fetch,
                        client,
                        bytes as f64,
                    );
                    return throttled(broker, &mode, session_id, throttle);
                }
            }
            broker
                .metrics
                .bytes_out
                .fetch_add(bytes as u64, Ordering::Relaxed);
            for (partition, bytes) in params.consumer_reads.take() {
                partition
                    .traffic
                    .bytes_out
                    .fetch_add(bytes, Ordering::Relaxed);
            }
            broker
                .metrics
                .follower_read_bytes
                .fetch_add(params.follower_read_bytes.get() as u64, Ordering::Relaxed);
            return respond(
                broker,
                &context.listener_name,
                version,
                session_id,
                &mode,
                results,
            );
        }
        match &delayed {
            // At the deadline the next round answers with what is there.
            Some(delayed) => {
                delayed.woken().await;
            }
            None => delayed = Some(watch(broker, &wanted, deadline)),
        }
    }
}

/// A fetch over its client's consumer_byte_rate quota: no partitions, the time to wait
/// (Kafka's `getThrottledResponse`). An incremental session keeps what it last reported, so
/// the next fetch brings what this one left; a session this fetch would have created is not
/// kept (the client starts one again).
fn throttled(broker: &Broker, mode: &Mode, session_id: i32, throttle: Duration) -> FetchAnswer {
    let session_id = match mode {
        Mode::New => {
            broker.fetch_sessions.close(session_id);
            0
        }
        Mode::Incremental(id) => {
            // The client takes the next epoch from any answer without an error.
            broker.fetch_sessions.answered(
                *id,
                true,
                std::iter::empty(),
                std::iter::empty(),
                Instant::now(),
            );
            *id
        }
        Mode::Sessionless => 0,
    };
    FetchAnswer {
        throttle_time_ms: i32::try_from(throttle.as_millis()).unwrap_or(i32::MAX),
        error_code: errors::NONE,
        session_id,
        ..FetchAnswer::default()
    }
}

/// The topics of `wanted` the request may not read: for a consumer, those without READ; for
/// a follower (`replica_id` >= 0), every topic unless it has CLUSTER_ACTION on the cluster
/// (Kafka's checks). Asked once per topic.
fn unreadable_topics(
    context: &RequestContext,
    wanted: &[(Wanted, Option<Reported>)],
    replica_id: i32,
) -> HashSet<String> {
    let topics: HashSet<&str> = wanted
        .iter()
        .map(|(w, _)| w.topic.as_str())
        .filter(|topic| !topic.is_empty())
        .collect();
    if replica_id >= 0 {
        if context.access.allows_cluster(Operation::ClusterAction) {
            return HashSet::new();
        }
        if !FOLLOWER_DENIAL_SAID.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                principal = %context.principal,
                replica_id,
                "a follower's fetch was denied: its principal needs CLUSTER_ACTION on the cluster \
                 (an ACL, or super.users) for replication to go on"
            );
        }
        return topics.into_iter().map(str::to_owned).collect();
    }
    if topics.is_empty() {
        // Nothing to read (or only unknown topic ids): nothing to ask.
        context.access.open_to_all();
    }
    topics
        .into_iter()
        .filter(|topic| !context.access.allows_topic(Operation::Read, topic))
        .map(str::to_owned)
        .collect()
}

/// Whether a follower's denied fetch was logged (once per process: it repeats every fetch).
static FOLLOWER_DENIAL_SAID: AtomicBool = AtomicBool::new(false);

/// A fetch waiting on the partitions it names (those hosted here).
fn watch(
    broker: &Broker,
    wanted: &[(Wanted, Option<Reported>)],
    deadline: tokio::time::Instant,
) -> Delayed {
    let watched: Vec<_> = wanted
        .iter()
        .filter_map(|(w, _)| {
            broker
                .replicas
                .partition(&TopicPartition::new(w.topic.clone(), w.partition))
        })
        .collect();
    Delayed::new(deadline, watched.iter().map(|p| p.watchers()))
}

/// Partitions never reported to the client (a new session's, or a fetch without one).
fn unreported(requested: &[Wanted]) -> Vec<(Wanted, Option<Reported>)> {
    requested.iter().map(|w| (w.clone(), None)).collect()
}

/// A partition's answer: its fields, its records (a slice of a segment, sent as is), and
/// what changed since the session last reported it.
type PartitionResult = (Wanted, PartitionData, Option<FileSlice>, Option<Reported>);

/// What every partition of one fetch is read with.
struct ReadParams<'a> {
    image: &'a MetadataImage,
    isolation_level: i8,
    /// The follower fetching, or -1 for a consumer.
    replica_id: i32,
    /// A consumer's rack when it fetches with v11+ (Kafka's client metadata): it may then be
    /// sent to a replica in its rack and may read from a follower (KIP-392).
    client_rack: Option<&'a str>,
    /// Record bytes the last `read_all` read as a follower for consumers.
    follower_read_bytes: Cell<usize>,
    /// The partitions the last `read_all` read records of for a consumer, and how many
    /// bytes: counted in their traffic once the answer goes (not for a throttled one).
    consumer_reads: std::cell::RefCell<Vec<(std::sync::Arc<Partition>, u64)>>,
}

/// Reads every wanted partition within the byte budgets. Returns the results (with what
/// changed since last reported, for sessions), the record bytes, and whether the answer
/// should go at once, whatever `min_bytes` says: a partition failed, sends the consumer to
/// another replica, or tells a follower its log diverged (Kafka's `fetchMessages`).
fn read_all(
    broker: &Broker,
    params: &ReadParams<'_>,
    wanted: &[(Wanted, Option<Reported>)],
    max_bytes: usize,
    denied: &HashSet<String>,
) -> (Vec<PartitionResult>, usize, bool) {
    params.follower_read_bytes.set(0);
    params.consumer_reads.borrow_mut().clear();
    let mut results = Vec::with_capacity(wanted.len());
    let mut total = 0usize;
    let mut answer_now = false;
    for (w, reported) in wanted {
        let data = PartitionData::default().with_partition_index(w.partition);
        // Kafka's `minOneMessage`: granted until a partition has returned records.
        let min_one_message = total == 0;
        let (data, slice, now) = if denied.contains(&w.topic) {
            let denial = KafkaError::TopicAuthorizationFailed.code();
            (data.with_error_code(denial), None, None)
        } else {
            read_partition(
                broker,
                params,
                w,
                data,
                max_bytes.saturating_sub(total),
                min_one_message,
            )
        };
        if KafkaError::check(data.error_code).is_err()
            || data.preferred_read_replica.0 >= 0
            || data.diverging_epoch.epoch >= 0
        {
            answer_now = true;
        }
        total += slice.as_ref().map_or(0, |s| s.len as usize);
        // `Some` when the client should hear of this partition in an incremental response.
        let changed = match (&now, reported) {
            (_, None) => Some(now.clone().unwrap_or_default()),
            (Some(now), Some(before)) if now != before => Some(now.clone()),
            (None, Some(_)) => Some(Reported::default()),
            _ => None,
        };
        results.push((w.clone(), data, slice, changed));
    }
    // Past `max_bytes` only by the first batch of the one partition that returned records.
    debug_assert!(
        total <= max_bytes
            || results
                .iter()
                .filter(|(_, _, slice, _)| slice.as_ref().is_some_and(|s| s.len > 0))
                .count()
                == 1,
        "a fetch read {total} bytes over its max_bytes {max_bytes} from several partitions"
    );
    (results, total, answer_now)
}

fn read_partition(
    broker: &Broker,
    params: &ReadParams<'_>,
    w: &Wanted,
    data: PartitionData,
    budget: usize,
    min_one_message: bool,
) -> (PartitionData, Option<FileSlice>, Option<Reported>) {
    let (image, replica_id) = (params.image, params.replica_id);
    let follower = replica_id >= 0;
    if w.topic.is_empty() {
        return (
            data.with_error_code(KafkaError::UnknownTopicId.code()),
            None,
            None,
        );
    }
    // A consumer with client metadata may read from a follower; others from the leader only
    // (Kafka's `FetchParams.fetchOnlyFromLeader`).
    let found = if params.client_rack.is_some() {
        broker.hosted_partition(image, &w.topic, w.partition, w.current_leader_epoch)
    } else {
        broker.led_partition(image, &w.topic, w.partition, w.current_leader_epoch)
    };
    let (partition, state) = match found {
        Ok(found) => found,
        Err(error) => return (data.with_error_code(error.code()), None, None),
    };
    let leader = state.leader == broker.broker_id;
    if follower {
        let fetched =
            match partition.follower_fetch(replica_id, w.fetch_offset, w.last_fetched_epoch) {
                Ok(fetched) => fetched,
                Err(error) => return (data.with_error_code(error.code()), None, None),
            };
        if let FollowerFetch::Diverging { epoch, end_offset } = fetched {
            let high_watermark = partition.high_watermark() as i64;
            let reported = Reported {
                high_watermark,
                last_stable_offset: high_watermark,
                log_start_offset: partition.log_start_offset() as i64,
            };
            let data = data
                .with_high_watermark(reported.high_watermark)
                .with_last_stable_offset(reported.last_stable_offset)
                .with_log_start_offset(reported.log_start_offset)
                .with_diverging_epoch(
                    EpochEndOffset::default()
                        .with_epoch(epoch)
                        .with_end_offset(end_offset),
                );
            return (data, None, Some(reported));
        }
    }
    // The LSO first: it is at most the high watermark read after it.
    let last_stable_offset = partition.last_stable_offset() as i64;
    let high_watermark = partition.high_watermark() as i64;
    let log_start_offset = partition.log_start_offset() as i64;
    let read_committed = params.isolation_level == READ_COMMITTED && !follower;
    let data = data
        .with_high_watermark(high_watermark)
        .with_last_stable_offset(last_stable_offset)
        .with_log_start_offset(log_start_offset)
        .with_aborted_transactions(read_committed.then(Vec::new));
    let reported = Some(Reported {
        high_watermark,
        last_stable_offset,
        log_start_offset,
    });
    if w.fetch_offset < 0 {
        return (
            data.with_error_code(KafkaError::OffsetOutOfRange.code()),
            None,
            reported,
        );
    }
    if leader && let Some(rack) = params.client_rack {
        if let Some(replica) = preferred_read_replica(broker, image, &partition, &state, rack, w) {
            // Kafka answers the redirect alone: no records, the offsets as they stand.
            broker
                .metrics
                .preferred_read_replica_answers
                .fetch_add(1, Ordering::Relaxed);
            return (
                data.with_preferred_read_replica(BrokerId(replica)),
                None,
                reported,
            );
        }
    }
    if !leader && w.fetch_offset as u64 > partition.log_end_offset() {
        // A follower behind the offset: a client that names its leader epoch (KIP-320) asks
        // the leader on OFFSET_OUT_OF_RANGE; one that does not may be here on stale metadata,
        // and gets nothing until it retries (Kafka's KAFKA-14278 rule).
        let error = if w.current_leader_epoch >= 0 {
            KafkaError::OffsetOutOfRange.code()
        } else {
            errors::NONE
        };
        return (data.with_error_code(error), None, reported);
    }
    let limit = (w.partition_max_bytes.max(0) as usize).min(budget);
    if limit == 0 && !min_one_message {
        return (data, None, reported);
    }
    let read = if read_committed {
        // Below the last stable offset, with the aborted transactions the records overlap.
        match partition.read_committed(
            w.fetch_offset as u64,
            limit as u64,
            last_stable_offset as u64,
            min_one_message,
        ) {
            Ok((slice, aborted)) => {
                let aborted = aborted
                    .iter()
                    .map(|a| {
                        AbortedTransaction::default()
                            .with_producer_id(ProducerId(a.producer_id))
                            .with_first_offset(a.first_offset as i64)
                    })
                    .collect();
                (
                    data.with_aborted_transactions(Some(aborted)),
                    slice,
                    reported,
                )
            }
            Err(error) => (data.with_error_code(read_error(&error)), None, reported),
        }
    } else {
        // Consumers read committed data only: below the high watermark.
        let bound = if follower {
            ReadBound::LogEnd
        } else {
            ReadBound::HighWatermark(high_watermark as u64)
        };
        match partition.read_with(w.fetch_offset as u64, limit as u64, bound, min_one_message) {
            Ok(slice) => (data, slice, reported),
            Err(error) => (data.with_error_code(read_error(&error)), None, reported),
        }
    };
    if !leader && let Some(slice) = &read.1 {
        let bytes = params.follower_read_bytes.get() + slice.len as usize;
        params.follower_read_bytes.set(bytes);
    }
    if !follower && let Some(slice) = read.1.as_ref().filter(|s| s.len > 0) {
        params
            .consumer_reads
            .borrow_mut()
            .push((std::sync::Arc::clone(&partition), slice.len));
    }
    read
}

/// KIP-392, as the leader: the in-sync follower a consumer in `client_rack` should read this
/// partition from (`replica.selector.class`), or `None` to read here. Followers that have not
/// fetched past the consumer's offset are left out, as Kafka leaves them (their log start is
/// not known here, the leader's stands for it: a follower that deleted the offset anyway
/// answers OFFSET_OUT_OF_RANGE, and the consumer comes back to the leader).
fn preferred_read_replica(
    broker: &Broker,
    image: &MetadataImage,
    partition: &Partition,
    state: &PartitionState,
    client_rack: &str,
    w: &Wanted,
) -> Option<sluice_raft::records::BrokerId> {
    let selector = broker.config.replica_selector;
    if selector != ReplicaSelector::RackAware || client_rack.is_empty() {
        return None;
    }
    // An offset below the log start is the leader's to refuse (OFFSET_OUT_OF_RANGE, so the
    // consumer resets): sent to a follower, it would be refused there, sent back here and
    // redirected again, forever.
    if (w.fetch_offset as u64) < partition.log_start_offset() {
        return None;
    }
    let rack = |id: &sluice_raft::records::BrokerId| {
        image
            .brokers
            .get(id)
            .and_then(|b| b.registration.rack.as_deref())
    };
    let now = Instant::now();
    let followers = partition.followers();
    let candidates: Vec<ReplicaView<'_>> = state
        .isr
        .iter()
        .filter(|id| **id != state.leader)
        // Kafka offers every ISR member; a broker the controller has fenced (stopped
        // heartbeating) is left out before the ISR catches up with it.
        .filter(|id| image.brokers.get(id).is_some_and(|b| !b.fenced))
        .filter_map(|id| {
            let follower = followers.get(id)?;
            let log_end_offset = follower.log_end_offset?;
            (log_end_offset >= w.fetch_offset as u64).then(|| ReplicaView {
                broker_id: *id,
                rack: rack(id),
                log_end_offset,
                since_caught_up: now.saturating_duration_since(follower.last_caught_up),
            })
        })
        .collect();
    let leader = ReplicaView {
        broker_id: state.leader,
        rack: rack(&state.leader),
        log_end_offset: partition.log_end_offset(),
        since_caught_up: Duration::ZERO,
    };
    read_replica::preferred_read_replica(selector, client_rack, &leader, &candidates)
}

fn read_error(error: &LogError) -> i16 {
    match error {
        LogError::OffsetOutOfRange { .. } => KafkaError::OffsetOutOfRange.code(),
        other => other.kafka_error().code(),
    }
}

fn respond(
    broker: &Broker,
    listener: &str,
    version: i16,
    session_id: i32,
    mode: &Mode,
    results: Vec<PartitionResult>,
) -> FetchAnswer {
    let incremental = matches!(mode, Mode::Incremental(_));
    if session_id != 0 {
        broker.fetch_sessions.answered(
            session_id,
            incremental,
            results
                .iter()
                .filter_map(|(w, _, _, changed)| changed.as_ref().map(|c| (w, c))),
            results
                .iter()
                .filter(|(_, _, slice, _)| slice.as_ref().is_some_and(|s| s.len > 0))
                .map(|(w, _, _, _)| w),
            Instant::now(),
        );
    }
    let mut topics: Vec<FetchTopicAnswer> = Vec::new();
    let mut hints = (version >= 16).then(|| super::LeaderHints::new(broker, listener));
    for (w, mut data, slice, changed) in results {
        if let Some(hints) = &mut hints {
            if let Some((leader, epoch)) = hints.hint(&w.topic, w.partition, data.error_code) {
                data.current_leader = LeaderIdAndEpoch::default()
                    .with_leader_id(BrokerId(leader))
                    .with_leader_epoch(epoch);
            }
        }
        let has_records = slice.as_ref().is_some_and(|s| s.len > 0);
        if incremental
            && changed.is_none()
            && !has_records
            && data.preferred_read_replica.0 < 0
            && KafkaError::check(data.error_code).is_ok()
        {
            continue;
        }
        let same_topic = topics.last().is_some_and(|t| {
            if version >= 13 {
                t.topic_id == w.topic_id
            } else {
                t.name == w.topic
            }
        });
        if !same_topic {
            topics.push(FetchTopicAnswer {
                name: w.topic.clone(),
                topic_id: w.topic_id,
                partitions: Vec::new(),
            });
        }
        if let Some(topic) = topics.last_mut() {
            topic.partitions.push(FetchPartitionAnswer {
                data,
                records: slice,
            });
        }
    }
    FetchAnswer {
        throttle_time_ms: 0,
        error_code: errors::NONE,
        session_id,
        topics,
        node_endpoints: hints
            .map(|hints| {
                hints
                    .endpoints()
                    .map(|(id, host, port, rack)| {
                        NodeEndpoint::default()
                            .with_node_id(BrokerId(id))
                            .with_host(super::str_bytes(host))
                            .with_port(port)
                            .with_rack(rack.map(super::str_bytes))
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}
