//! Follower fetchers: one task per source broker, each fetching every partition this broker
//! follows from that leader in one Kafka Fetch request with `replica_id` set, and appending the
//! returned batches unchanged. Before fetching for a partition whose leader changed, it asks the
//! leader where its log ends for our latest leader epoch (OffsetForLeaderEpoch, KIP-101/279) and
//! truncates to where the two logs diverge.
//!
//! A supervisor keeps one fetcher per leader that has partitions to give us; a fetcher ends when
//! it has none left (the image moved them).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId as KafkaBrokerId, FetchRequest, FetchResponse, OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use sluice_raft::Quorum;
use sluice_raft::records::BrokerId;

use super::{Partition, ReplicaManager};
use crate::client::Connection;
use crate::inter_broker::InterBrokerClient;
use crate::protocol::TopicPartition;
use crate::protocol::errors::KafkaError;

#[derive(Debug, Clone)]
pub struct FetcherSettings {
    /// How followers connect to their leaders (the inter-broker listener, as its clients).
    pub inter_broker: InterBrokerClient,
    /// `replica.fetch.max.bytes`: per partition.
    pub fetch_max_bytes: i32,
    /// `replica.fetch.response.max.bytes`
    pub response_max_bytes: i32,
    /// `replica.fetch.wait.max.ms`
    pub wait_max_ms: i32,
    /// `replica.fetch.backoff.ms`: after an error.
    pub backoff_ms: u64,
}

/// The fetcher tasks of the supervisor, aborted with it: a detached fetcher outlived the node
/// at shutdown and, entering `block_in_place` while the runtime was shutting down, panicked
/// after "node stopped" (1 of 5 SIGTERMs under load).
#[derive(Default)]
struct Fetchers(HashMap<BrokerId, tokio::task::JoinHandle<()>>);

impl Drop for Fetchers {
    fn drop(&mut self) {
        for task in self.0.values() {
            task.abort();
        }
    }
}

/// Runs the fetchers of this broker until the task is dropped (aborting them).
pub async fn run(replicas: Arc<ReplicaManager>, quorum: Arc<Quorum>, settings: FetcherSettings) {
    let settings = Arc::new(settings);
    let mut fetchers = Fetchers::default();
    let mut changes = replicas.leadership_changes();
    loop {
        let fetchers = &mut fetchers.0;
        fetchers.retain(|_, task| !task.is_finished());
        let me = replicas.broker_id();
        let mut leaders: Vec<BrokerId> = replicas
            .partitions()
            .iter()
            .map(|p| p.leader())
            .filter(|leader| *leader != me && *leader >= 0)
            .collect();
        leaders.sort_unstable();
        leaders.dedup();
        for leader in leaders {
            fetchers.entry(leader).or_insert_with(|| {
                tracing::info!(leader, "starting a replica fetcher");
                tokio::spawn(fetch_from(
                    leader,
                    Arc::clone(&replicas),
                    Arc::clone(&quorum),
                    Arc::clone(&settings),
                ))
            });
        }
        // Re-check on leadership changes (a lag too: it rescans anyway), at least every second.
        // The scan is linear in the partitions, so changes arriving together (a topic of
        // thousands of partitions created, a broker fenced) make one scan, not one each.
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(1), changes.recv()).await {
            use tokio::sync::broadcast::error::TryRecvError;
            while !matches!(
                changes.try_recv(),
                Err(TryRecvError::Empty | TryRecvError::Closed)
            ) {}
        }
    }
}

/// The partitions this broker follows from `leader`, as the image says now.
fn followed_from(replicas: &ReplicaManager, leader: BrokerId) -> Vec<Arc<Partition>> {
    replicas
        .partitions()
        .into_iter()
        // A replica whose log failed copies nothing: it would only fail again, and it is
        // reported to the controller instead (`offline`).
        .filter(|p| p.leader() == leader && !p.is_offline())
        .collect()
}

fn leader_address(quorum: &Quorum, leader: BrokerId, listener: &str) -> Option<String> {
    let image = quorum.image();
    let broker = image.brokers.get(&leader)?;
    let endpoint = broker
        .registration
        .endpoints
        .iter()
        .find(|e| e.name == listener)?;
    Some(format!("{}:{}", endpoint.host, endpoint.port))
}

fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

async fn fetch_from(
    leader: BrokerId,
    replicas: Arc<ReplicaManager>,
    quorum: Arc<Quorum>,
    settings: Arc<FetcherSettings>,
) {
    let backoff = Duration::from_millis(settings.backoff_ms.max(10));
    let mut connection: Option<Connection> = None;
    // KIP-74: the leader gives `replica.fetch.response.max.bytes` to partitions in request
    // order, and only the first to return records may exceed the limits; as Kafka's fetcher
    // does, partitions that were just served go to the back (when each last grew).
    let mut served_at: HashMap<TopicPartition, u64> = HashMap::new();
    let mut served_count = 0u64;
    loop {
        let mut partitions = followed_from(&replicas, leader);
        if served_at.len() > partitions.len() {
            // Some are followed no more: keep only those still followed.
            served_at = partitions
                .iter()
                .filter_map(|p| {
                    let tp = &p.topic_partition;
                    served_at.get(tp).map(|at| (tp.clone(), *at))
                })
                .collect();
        }
        partitions.sort_by_key(|p| served_at.get(&p.topic_partition).copied().unwrap_or(0));
        if partitions.is_empty() {
            tracing::info!(leader, "replica fetcher stopped: nothing left to follow");
            return;
        }
        let conn = match connection.as_mut() {
            Some(conn) => conn,
            None => {
                let listener = settings.inter_broker.listener_name();
                let Some(addr) = leader_address(&quorum, leader, listener) else {
                    tokio::time::sleep(backoff).await;
                    continue;
                };
                match settings
                    .inter_broker
                    .connect(&addr, Duration::from_secs(30))
                    .await
                {
                    Ok(conn) => connection.insert(conn),
                    Err(error) => {
                        replicas.leader_lost(leader);
                        tracing::debug!(leader, %error, "replica fetcher cannot connect");
                        tokio::time::sleep(backoff).await;
                        continue;
                    }
                }
            }
        };
        let truncating: Vec<&Arc<Partition>> =
            partitions.iter().filter(|p| p.needs_truncation()).collect();
        if !truncating.is_empty() {
            if let Err(error) = truncate_diverged(conn, &replicas, leader, &truncating).await {
                tracing::warn!(leader, %error, "OffsetForLeaderEpoch failed");
                connection = None;
                tokio::time::sleep(backoff).await;
            }
            continue;
        }
        tracing::trace!(leader, partitions = partitions.len(), "replica fetch");
        let log_ends: Vec<u64> = partitions.iter().map(|p| p.log_end_offset()).collect();
        let fetched = fetch_once(conn, &replicas, leader, &partitions, &settings).await;
        for (partition, before) in partitions.iter().zip(log_ends) {
            if partition.log_end_offset() > before {
                served_count += 1;
                served_at.insert(partition.topic_partition.clone(), served_count);
            }
        }
        match fetched {
            Ok(progress) => {
                replicas.leader_reached(leader);
                if !progress {
                    // Errors only (a leadership moving): wait for the image to catch up.
                    tokio::time::sleep(backoff).await;
                }
            }
            Err(error) => {
                // A closed connection (not a slow answer: a paused leader is no news) most
                // likely means the leader's process is gone.
                if matches!(error, crate::client::Error::Disconnected { .. }) {
                    replicas.leader_lost(leader);
                }
                tracing::debug!(leader, %error, "replica fetch failed");
                connection = None;
                tokio::time::sleep(backoff).await;
            }
        }
    }
}

/// One Fetch for every followed partition; appends what came. Returns whether any partition
/// answered without an error.
async fn fetch_once(
    conn: &mut Connection,
    replicas: &ReplicaManager,
    leader: BrokerId,
    partitions: &[Arc<Partition>],
    settings: &FetcherSettings,
) -> Result<bool, crate::client::Error> {
    // Topics in the order of their first partition: the order `partitions` asks for.
    let mut topics: Vec<(&str, Vec<FetchPartition>)> = Vec::new();
    let mut topic_at: HashMap<&str, usize> = HashMap::new();
    let mut by_key: HashMap<TopicPartition, (&Arc<Partition>, i32)> = HashMap::new();
    for partition in partitions {
        let tp = &partition.topic_partition;
        let state = partition.state();
        if state.leader != leader {
            continue;
        }
        let at = *topic_at.entry(tp.topic.as_str()).or_insert_with(|| {
            topics.push((tp.topic.as_str(), Vec::new()));
            topics.len() - 1
        });
        topics[at].1.push(
            FetchPartition::default()
                .with_partition(tp.partition)
                .with_current_leader_epoch(state.leader_epoch)
                .with_fetch_offset(partition.log_end_offset() as i64)
                .with_last_fetched_epoch(partition.latest_epoch().unwrap_or(-1))
                .with_log_start_offset(partition.log_start_offset() as i64)
                .with_partition_max_bytes(settings.fetch_max_bytes),
        );
        by_key.insert(tp.clone(), (partition, state.leader_epoch));
    }
    if by_key.is_empty() {
        return Ok(false);
    }
    let request = FetchRequest::default()
        .with_replica_id(KafkaBrokerId(replicas.broker_id()))
        .with_max_wait_ms(settings.wait_max_ms)
        .with_min_bytes(1)
        .with_max_bytes(settings.response_max_bytes)
        .with_isolation_level(0)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(
            topics
                .into_iter()
                .map(|(topic, partitions)| {
                    FetchTopic::default()
                        .with_topic(topic_name(topic))
                        .with_partitions(partitions)
                })
                .collect(),
        );
    let response: FetchResponse = conn.call(ApiKey::Fetch, 12, &request).await?;
    tracing::trace!(?response, "replica fetch response");
    let mut progress = false;
    for topic in response.responses {
        for data in topic.partitions {
            let key = TopicPartition::new(topic.topic.to_string(), data.partition_index);
            let Some((partition, leader_epoch)) = by_key.get(&key) else {
                continue;
            };
            // Applied only if nothing changed since the request: see `while_following`.
            let outcome = tokio::task::block_in_place(|| {
                partition.while_following(leader, *leader_epoch, || {
                    apply_fetched(replicas, partition, data)
                })
            });
            match outcome {
                Some(answered) => progress |= answered,
                None => {
                    tracing::debug!(topic_partition = %partition.topic_partition, leader, leader_epoch, "dropping a fetch answer from before a leadership change")
                }
            }
        }
    }
    Ok(progress)
}

/// Applies one partition's fetch answer: appends its records, takes the leader's high
/// watermark, or starts a truncation. Runs while the partition still follows the leader the
/// request went to, at the same epoch. Returns whether the partition answered without an
/// error. The partition wakes its own waiting requests (the purgatory).
fn apply_fetched(
    replicas: &ReplicaManager,
    partition: &Arc<Partition>,
    data: kafka_protocol::messages::fetch_response::PartitionData,
) -> bool {
    match KafkaError::check(data.error_code) {
        Ok(()) if data.diverging_epoch.epoch >= 0 => {
            // KIP-320: our log holds records the leader's does not; find where they part.
            tracing::info!(topic_partition = %partition.topic_partition, epoch = data.diverging_epoch.epoch, end_offset = data.diverging_epoch.end_offset, "the leader reports a diverging epoch");
            partition.request_truncation();
        }
        Ok(()) => {
            let records = data.records.unwrap_or_default();
            if let Err(error) = partition.append_as_follower(&records) {
                tracing::error!(topic_partition = %partition.topic_partition, %error, "follower append failed");
                partition.request_truncation();
                return true;
            }
            partition.follow_high_watermark(data.high_watermark);
            return true;
        }
        Err(KafkaError::OffsetOutOfRange) => {
            let leader_start = data.log_start_offset.max(0) as u64;
            if partition.log_end_offset() < leader_start {
                // Behind the leader's log start: start over from there.
                if let Err(error) = replicas.truncate_fully_and_start_at(partition, leader_start) {
                    tracing::error!(topic_partition = %partition.topic_partition, %error, "resetting the follower log failed");
                }
            } else {
                partition.request_truncation();
            }
        }
        Err(error) => {
            tracing::debug!(topic_partition = %partition.topic_partition, code = error.code(), "replica fetch error");
        }
    }
    false
}

/// KIP-101/279: for each partition, the leader's end offset for our latest epoch; truncate to
/// the point where the logs diverge.
async fn truncate_diverged(
    conn: &mut Connection,
    replicas: &ReplicaManager,
    leader: BrokerId,
    partitions: &[&Arc<Partition>],
) -> Result<(), crate::client::Error> {
    let mut asking: BTreeMap<&str, Vec<OffsetForLeaderPartition>> = BTreeMap::new();
    let mut asked: HashMap<(&str, i32), (&Arc<Partition>, i32)> = HashMap::new();
    for partition in partitions {
        let tp = &partition.topic_partition;
        let state = partition.state();
        if state.leader != leader {
            continue;
        }
        let Some(latest) = partition.latest_epoch() else {
            // No epochs: nothing of a former leader's to take back.
            partition.while_following(leader, state.leader_epoch, || partition.truncation_done());
            continue;
        };
        asked.insert(
            (tp.topic.as_str(), tp.partition),
            (partition, state.leader_epoch),
        );
        asking.entry(tp.topic.as_str()).or_default().push(
            OffsetForLeaderPartition::default()
                .with_partition(tp.partition)
                .with_current_leader_epoch(state.leader_epoch)
                .with_leader_epoch(latest),
        );
    }
    if asking.is_empty() {
        return Ok(());
    }
    let request = OffsetForLeaderEpochRequest::default()
        .with_replica_id(KafkaBrokerId(replicas.broker_id()))
        .with_topics(
            asking
                .into_iter()
                .map(|(topic, partitions)| {
                    OffsetForLeaderTopic::default()
                        .with_topic(topic_name(topic))
                        .with_partitions(partitions)
                })
                .collect(),
        );
    let response: OffsetForLeaderEpochResponse =
        conn.call(ApiKey::OffsetForLeaderEpoch, 4, &request).await?;
    for topic in response.topics {
        for answer in topic.partitions {
            let Some((partition, leader_epoch)) = asked
                .get(&(topic.topic.as_str(), answer.partition))
                .copied()
            else {
                continue;
            };
            if let Err(error) = KafkaError::check(answer.error_code) {
                tracing::debug!(topic_partition = %partition.topic_partition, code = error.code(), "OffsetForLeaderEpoch error");
                continue;
            }
            // A leadership change since the question makes the answer moot (and truncating
            // after becoming leader would throw away acknowledged records).
            let applied = tokio::task::block_in_place(|| {
                partition.while_following(leader, leader_epoch, || {
                    truncate_to_divergence(replicas, partition, &answer)
                })
            });
            if applied.is_none() {
                tracing::debug!(topic_partition = %partition.topic_partition, leader, leader_epoch, "dropping an OffsetForLeaderEpoch answer from before a leadership change");
            }
        }
    }
    Ok(())
}

/// KIP-101/279: where a follower's log must end, from the leader's answer (epoch, end offset)
/// for our latest epoch and our own end of that epoch (`ours`: the largest epoch at most it in
/// our log, with its end). An undefined answer (the leader knows no epoch this old) keeps only
/// what was committed; otherwise the smaller of the leader's end and ours for that epoch,
/// never past our log end.
fn truncation_target(
    log_end: u64,
    high_watermark: u64,
    (leader_epoch, leader_end): (i32, i64),
    ours: Option<(i32, u64)>,
) -> u64 {
    if leader_epoch < 0 || leader_end < 0 {
        return high_watermark.min(log_end);
    }
    let our_end = ours
        .filter(|(epoch, _)| *epoch == leader_epoch)
        .map_or(log_end, |(_, end)| end);
    (leader_end as u64).min(our_end).min(log_end)
}

/// Truncates a follower's log to where it parts from the leader's (the leader's answer for our
/// latest epoch), then marks the partition ready to fetch.
fn truncate_to_divergence(
    replicas: &ReplicaManager,
    partition: &Arc<Partition>,
    answer: &kafka_protocol::messages::offset_for_leader_epoch_response::EpochEndOffset,
) {
    let log_end = partition.log_end_offset();
    let ours = (answer.leader_epoch >= 0)
        .then(|| partition.end_offset_for_epoch(answer.leader_epoch))
        .flatten();
    let target = truncation_target(
        log_end,
        partition.high_watermark(),
        (answer.leader_epoch, answer.end_offset),
        ours,
    );
    if target < log_end {
        let tp = partition.topic_partition.clone();
        tracing::info!(topic_partition = %tp, from = log_end, to = target, leader_epoch = answer.leader_epoch, "truncating a diverged follower log");
        if let Err(error) = replicas.truncate_to(partition, target) {
            tracing::error!(topic_partition = %tp, %error, "follower truncation failed");
            return;
        }
    }
    partition.truncation_done();
}

#[cfg(test)]
mod tests {
    use super::truncation_target;

    #[test]
    fn truncation_keeps_what_both_logs_share() {
        // Our log ends at 100 (HW 60); our latest epoch is 5.
        // The leader's epoch 5 ends at 80: records 80.. are a deposed leader's.
        assert_eq!(truncation_target(100, 60, (5, 80), Some((5, 100))), 80);
        // Same end: nothing to take back.
        assert_eq!(truncation_target(100, 60, (5, 100), Some((5, 100))), 100);
        // The leader holds more of epoch 5 than we do: keep ours.
        assert_eq!(truncation_target(100, 60, (5, 150), Some((5, 100))), 100);
        // The leader answers an older epoch (it never had our epoch 5): our end of that epoch
        // bounds the cut too (KIP-279).
        assert_eq!(truncation_target(100, 60, (3, 90), Some((3, 70))), 70);
        assert_eq!(truncation_target(100, 60, (3, 50), Some((3, 70))), 50);
        // We never had the epoch the leader answered: its end, bounded by our log.
        assert_eq!(truncation_target(100, 60, (4, 90), Some((3, 70))), 90);
        // Undefined answer: keep only what was committed.
        assert_eq!(truncation_target(100, 60, (-1, -1), Some((5, 100))), 60);
        // Never past our own log end.
        assert_eq!(truncation_target(40, 60, (-1, -1), None), 40);
    }
}
