//! The consumer's offset requests: commits (OffsetCommit) and committed offsets (OffsetFetch)
//! at the group coordinator, as the member (generation or KIP-848 epoch) or, outside a group,
//! with generation -1; ListOffsets at the partitions' leaders; and from these, the positions
//! of partitions that have none (the group's committed offset, else `auto.offset.reset`, or
//! the offset a seek by time asked for).
//!
//! The group membership above is reached only through [`GroupMember`], which `group.rs`
//! implements, so membership commits what it revokes without the two importing each other.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    BrokerId, GroupId, ListOffsetsRequest, OffsetCommitRequest, OffsetFetchRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::positions::{Start, SubscriptionState};
use super::types::{Context, IsolationLevel, OffsetReset, TopicPartition};
use crate::client::cluster::Cluster;
use crate::client::connection::Connection;
use crate::client::error::{Error, Result};
use crate::protocol::errors;

/// The group member offsets are committed as, and its coordinator.
pub(crate) trait GroupMember: Sync {
    /// The group's id.
    fn group_id(&self) -> &str;

    /// (member id, generation or KIP-848 epoch) for OffsetCommit: the member's while it is
    /// one, else ("", -1) as a consumer outside the group commits.
    fn commit_identity(&self) -> (String, i32);

    /// The coordinator's connection, found (FindCoordinator) and opened when needed.
    fn coordinator(&self, ctx: &Context) -> impl Future<Output = Result<Arc<Connection>>> + Send;

    /// The coordinator failed or moved: find it again on the next request.
    fn forget_coordinator(&self);

    /// The group no longer takes this member's generation: rejoin on the next poll.
    fn request_rejoin(&self);
}

/// Whether `error` means the coordinator moved or cannot be reached (find it again and
/// retry), rather than an answer about the request.
pub(crate) fn is_coordinator_error(error: &Error) -> bool {
    match error {
        Error::Kafka { code, .. } => matches!(
            *code,
            errors::NOT_COORDINATOR
                | errors::COORDINATOR_NOT_AVAILABLE
                | errors::COORDINATOR_LOAD_IN_PROGRESS
        ),
        Error::Connect { .. }
        | Error::Disconnected { .. }
        | Error::Timeout { .. }
        | Error::NoBrokerReachable { .. } => true,
        _ => false,
    }
}

/// Commits `offsets` to the group coordinator, as the member when in the group.
pub(crate) async fn commit<G: GroupMember>(
    ctx: &Context,
    group: &G,
    offsets: BTreeMap<TopicPartition, i64>,
) -> Result<()> {
    if offsets.is_empty() {
        return Ok(());
    }
    let mut topics: BTreeMap<String, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for (tp, offset) in &offsets {
        topics.entry(tp.topic.clone()).or_default().push(
            OffsetCommitRequestPartition::default()
                .with_partition_index(tp.partition)
                .with_committed_offset(*offset)
                .with_committed_leader_epoch(-1)
                .with_committed_metadata(Some(StrBytes::from_static_str(""))),
        );
    }
    let topics: Vec<OffsetCommitRequestTopic> = topics
        .into_iter()
        .map(|(name, partitions)| {
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_string(name)))
                .with_partitions(partitions)
        })
        .collect();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let (member_id, generation) = group.commit_identity();
        let request = OffsetCommitRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.group_id().to_owned())))
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(StrBytes::from_string(member_id))
            .with_group_instance_id(
                ctx.settings
                    .group_instance_id
                    .clone()
                    .map(StrBytes::from_string),
            )
            .with_retention_time_ms(-1)
            .with_topics(topics.clone());
        let outcome = async {
            let coordinator = group.coordinator(ctx).await?;
            let response = coordinator.send(&request).await?;
            for topic in &response.topics {
                for partition in &topic.partitions {
                    if let Some(error) = Error::kafka(
                        partition.error_code,
                        format!(
                            "commit of {}-{} for group {}",
                            topic.name.as_str(),
                            partition.partition_index,
                            group.group_id()
                        ),
                        None,
                    ) {
                        return Err(error);
                    }
                }
            }
            Ok(())
        }
        .await;
        match outcome {
            Ok(()) => return Ok(()),
            Err(error) if attempt < 5 && is_coordinator_error(&error) => {
                group.forget_coordinator();
                tokio::time::sleep(ctx.settings.retry_backoff).await;
            }
            // KIP-848: a heartbeat moved the member to a newer epoch meanwhile.
            Err(error) if attempt < 5 && error.code() == Some(errors::STALE_MEMBER_EPOCH) => {
                tokio::time::sleep(ctx.settings.retry_backoff).await;
            }
            Err(error) => {
                if matches!(
                    error.code(),
                    Some(
                        errors::UNKNOWN_MEMBER_ID
                            | errors::ILLEGAL_GENERATION
                            | errors::REBALANCE_IN_PROGRESS
                            | errors::STALE_MEMBER_EPOCH
                            | errors::FENCED_MEMBER_EPOCH
                    )
                ) {
                    group.request_rejoin();
                }
                return Err(error);
            }
        }
    }
}

/// The group's committed offsets (and their leader epochs) for `partitions`.
pub(crate) async fn committed<G: GroupMember>(
    ctx: &Context,
    group: &G,
    partitions: &[TopicPartition],
) -> Result<BTreeMap<TopicPartition, (i64, Option<i32>)>> {
    let mut topics: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        topics
            .entry(tp.topic.clone())
            .or_default()
            .push(tp.partition);
    }
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.group_id().to_owned())))
        .with_topics(Some(
            topics
                .into_iter()
                .map(|(name, partition_indexes)| {
                    OffsetFetchRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_string(name)))
                        .with_partition_indexes(partition_indexes)
                })
                .collect(),
        ))
        .with_require_stable(true);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let outcome = async {
            let coordinator = group.coordinator(ctx).await?;
            // Versions 8 and up batch groups in other fields; 7 carries all this needs.
            let response = coordinator.send_at_most(&request, 7).await?;
            if let Some(error) = Error::kafka(
                response.error_code,
                format!("group {}", group.group_id()),
                None,
            ) {
                return Err(error);
            }
            let mut found = BTreeMap::new();
            for topic in &response.topics {
                for p in &topic.partitions {
                    let tp = TopicPartition::new(topic.name.as_str(), p.partition_index);
                    if let Some(error) = Error::kafka(p.error_code, format!("partition {tp}"), None)
                    {
                        return Err(error);
                    }
                    if p.committed_offset >= 0 {
                        let epoch =
                            (p.committed_leader_epoch >= 0).then_some(p.committed_leader_epoch);
                        found.insert(tp, (p.committed_offset, epoch));
                    }
                }
            }
            Ok(found)
        }
        .await;
        match outcome {
            Err(error)
                if attempt < 10
                    && (is_coordinator_error(&error)
                        || error.code() == Some(errors::UNSTABLE_OFFSET_COMMIT)) =>
            {
                group.forget_coordinator();
                tokio::time::sleep(ctx.settings.retry_backoff).await;
            }
            other => return other,
        }
    }
}

/// ListOffsets for each partition at its timestamp (-2 earliest, -1 latest), asked of each
/// partition's leader; partitions with no such offset are absent.
pub(crate) async fn list_offsets(
    cluster: &Cluster,
    asked: &BTreeMap<TopicPartition, i64>,
    isolation_level: IsolationLevel,
    retry_backoff: Duration,
) -> Result<BTreeMap<TopicPartition, i64>> {
    let mut found = BTreeMap::new();
    let mut pending: BTreeMap<TopicPartition, i64> = asked.clone();
    let mut attempt = 0;
    while !pending.is_empty() {
        attempt += 1;
        let topics: Vec<String> = pending
            .keys()
            .map(|tp| tp.topic.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let metadata = cluster.refresh(Some(&topics)).await?;
        let mut by_leader: BTreeMap<i32, BTreeMap<String, Vec<ListOffsetsPartition>>> =
            BTreeMap::new();
        for (tp, &timestamp) in &pending {
            let Some(topic) = metadata.topics.get(&tp.topic) else {
                continue;
            };
            if let Some(error) = Error::kafka(topic.error_code, format!("topic {}", tp.topic), None)
            {
                if !error.is_retriable() || attempt >= 10 {
                    return Err(error);
                }
                continue;
            }
            let Some(partition) = metadata.partition(&tp.topic, tp.partition) else {
                return Err(Error::from_code(
                    errors::UNKNOWN_TOPIC_OR_PARTITION,
                    format!("partition {tp}"),
                    None,
                ));
            };
            by_leader
                .entry(partition.leader)
                .or_default()
                .entry(tp.topic.clone())
                .or_default()
                .push(
                    ListOffsetsPartition::default()
                        .with_partition_index(tp.partition)
                        .with_current_leader_epoch(partition.leader_epoch)
                        .with_timestamp(timestamp),
                );
        }
        let mut last_error = None;
        for (leader, topics) in by_leader {
            let request = ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_isolation_level(match isolation_level {
                    IsolationLevel::ReadUncommitted => 0,
                    IsolationLevel::ReadCommitted => 1,
                })
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(name, partitions)| {
                            ListOffsetsTopic::default()
                                .with_name(TopicName(StrBytes::from_string(name)))
                                .with_partitions(partitions)
                        })
                        .collect(),
                );
            let response = match async {
                if leader < 0 {
                    return Err(Error::from_code(
                        errors::LEADER_NOT_AVAILABLE,
                        "list offsets",
                        None,
                    ));
                }
                cluster.broker(leader).await?.send(&request).await
            }
            .await
            {
                Ok(response) => response,
                Err(error) if error.is_retriable() => {
                    last_error = Some(error);
                    continue;
                }
                Err(error) => return Err(error),
            };
            for topic in &response.topics {
                for p in &topic.partitions {
                    let tp = TopicPartition::new(topic.name.as_str(), p.partition_index);
                    match Error::kafka(p.error_code, format!("partition {tp}"), None) {
                        None => {
                            pending.remove(&tp);
                            if p.offset >= 0 {
                                found.insert(tp, p.offset);
                            }
                        }
                        Some(error) if error.is_retriable() => last_error = Some(error),
                        Some(error) => return Err(error),
                    }
                }
            }
        }
        if !pending.is_empty() {
            if attempt >= 10 {
                return Err(last_error.unwrap_or_else(|| {
                    Error::Protocol("no answer for some partitions' offsets".into())
                }));
            }
            tokio::time::sleep(retry_backoff.max(Duration::from_millis(50))).await;
        }
    }
    Ok(found)
}

/// [`list_offsets`] with the consumer's isolation level and backoff.
pub(super) async fn list_offsets_with(
    ctx: &Context,
    asked: &BTreeMap<TopicPartition, i64>,
) -> Result<BTreeMap<TopicPartition, i64>> {
    list_offsets(
        &ctx.cluster,
        asked,
        ctx.settings.isolation_level,
        ctx.settings.retry_backoff,
    )
    .await
}

/// Finds the position of every partition that has none: the group's committed offset (when
/// there is a group), else `auto.offset.reset`; or the offset a seek asked for.
pub(super) async fn update_positions<G: GroupMember>(
    ctx: &Context,
    group: Option<&G>,
    positions: &mut SubscriptionState,
) -> Result<()> {
    let unknown: Vec<(TopicPartition, Start)> = positions
        .partitions
        .iter()
        .filter(|(_, p)| p.position.is_none())
        .map(|(tp, p)| (tp.clone(), p.start))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let mut to_list: BTreeMap<TopicPartition, i64> = BTreeMap::new();
    let need_committed: Vec<TopicPartition> = unknown
        .iter()
        .filter(|(_, start)| *start == Start::Committed)
        .map(|(tp, _)| tp.clone())
        .collect();
    let mut committed_offsets = BTreeMap::new();
    if let Some(group) = group {
        if !need_committed.is_empty() {
            committed_offsets = committed(ctx, group, &need_committed).await?;
        }
    }
    for (tp, start) in &unknown {
        let reset = |policy: OffsetReset| -> Result<i64> {
            match policy {
                OffsetReset::Earliest => Ok(-2),
                OffsetReset::Latest => Ok(-1),
                OffsetReset::None => Err(Error::NoOffset {
                    partition: tp.to_string(),
                }),
            }
        };
        match start {
            Start::Committed => match committed_offsets.get(tp) {
                Some(&(offset, leader_epoch)) => {
                    if let Some(p) = positions.partitions.get_mut(tp) {
                        p.seek(offset);
                        p.last_leader_epoch = leader_epoch;
                    }
                }
                None => {
                    to_list.insert(tp.clone(), reset(ctx.settings.auto_offset_reset)?);
                }
            },
            Start::Reset(policy) => {
                to_list.insert(tp.clone(), reset(*policy)?);
            }
            Start::Timestamp(timestamp) => {
                to_list.insert(tp.clone(), *timestamp);
            }
        }
    }
    if to_list.is_empty() {
        return Ok(());
    }
    let found = list_offsets_with(ctx, &to_list).await?;
    for (tp, asked) in to_list {
        let Some(p) = positions.partitions.get_mut(&tp) else {
            continue;
        };
        match found.get(&tp) {
            Some(&offset) => p.seek(offset),
            // No record at or after the timestamp: the end, as Kafka's tools do.
            None if asked >= 0 => p.start = Start::Reset(OffsetReset::Latest),
            None => {}
        }
    }
    Ok(())
}
