//! A consumer's group membership: the classic protocol (JoinGroup, SyncGroup with the leader
//! assigning, Heartbeat, LeaveGroup; eager or cooperative rebalances) and KIP-848's
//! (ConsumerGroupHeartbeat, the coordinator assigning, the member reconciling). The poll side
//! ([`ensure_active`]) joins and applies assignments, since it owns the positions to commit on
//! revocation; a background task heartbeats and flags what the poll side must do.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ConsumerGroupHeartbeatRequest, GroupId, HeartbeatRequest, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, SyncGroupRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::Notify;

use super::assignor::{self, Assignor, Subscription};
use super::cluster::ClusterMetadata;
use super::connection::Connection;
use super::consumer::offsets::{self, GroupMember, is_coordinator_error};
use super::consumer::positions::{Subscription as ConsumerSubscription, SubscriptionState};
use super::consumer::types::{Context, GroupProtocol, Settings, TopicPartition};
use super::error::{Error, Result};
use super::partitioner::Random;
use crate::protocol::errors;

#[derive(Debug, Default)]
struct Member {
    member_id: String,
    /// The classic generation, or the KIP-848 member epoch; -1 (classic) or 0 (KIP-848)
    /// while not a member.
    generation: i32,
    joined: bool,
    joining: bool,
    assignor: Option<Assignor>,
    /// The topics this member subscribed to when it last joined (or heartbeat).
    subscribed: BTreeSet<String>,
    /// Partition counts the leader assigned from, to notice new partitions.
    leader_counts: Option<BTreeMap<String, i32>>,
    missing_topics: bool,
    /// The group took the partitions away (fenced, timed out): the poll side drops them.
    lost: bool,
    /// KIP-848: the coordinator's latest assignment, by topic id.
    target: Option<BTreeSet<([u8; 16], i32)>>,
    /// KIP-848: what this member owns, reported on each heartbeat.
    owned: BTreeSet<([u8; 16], i32)>,
    heartbeat_interval: Option<Duration>,
    /// An error the application must see (fenced static member, unsupported protocol).
    fatal: Option<Error>,
}

/// What the poll side and the heartbeat task share.
pub(crate) struct GroupShared {
    pub group_id: String,
    protocol: GroupProtocol,
    member: Mutex<Member>,
    coordinator_connection: Mutex<Option<Arc<Connection>>>,
    needs_rejoin: AtomicBool,
    heartbeat_started: AtomicBool,
    closed: AtomicBool,
    last_poll: Mutex<Instant>,
    /// Wakes a waiting poll: a rebalance to join, an assignment to apply.
    pub rejoin_requested: Notify,
    /// Wakes the heartbeat task early (KIP-848: acknowledge an assignment now).
    heartbeat_now: Notify,
}

impl GroupShared {
    pub fn new(group_id: String, settings: &Settings) -> GroupShared {
        GroupShared {
            group_id,
            protocol: settings.group_protocol,
            member: Mutex::new(Member {
                generation: match settings.group_protocol {
                    GroupProtocol::Classic => -1,
                    GroupProtocol::Consumer => 0,
                },
                ..Member::default()
            }),
            coordinator_connection: Mutex::new(None),
            needs_rejoin: AtomicBool::new(true),
            heartbeat_started: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            last_poll: Mutex::new(Instant::now()),
            rejoin_requested: Notify::new(),
            heartbeat_now: Notify::new(),
        }
    }

    fn member(&self) -> MutexGuard<'_, Member> {
        self.member.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn member_id(&self) -> Option<String> {
        let member = self.member();
        (!member.member_id.is_empty()).then(|| member.member_id.clone())
    }

    pub fn request_rejoin(&self) {
        self.needs_rejoin.store(true, Ordering::Release);
        self.rejoin_requested.notify_waiters();
        if self.protocol == GroupProtocol::Consumer {
            // KIP-848 tells the coordinator of a new subscription on the next heartbeat.
            self.heartbeat_now.notify_one();
        }
    }

    pub fn polled(&self) {
        *self.last_poll.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    pub fn missing_topics(&self) -> bool {
        self.member().missing_topics
    }

    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.heartbeat_now.notify_one();
    }

    /// Metadata was refreshed: rebalance if the subscribed topics, or (for the classic leader)
    /// their partition counts, changed.
    pub fn metadata_changed(&self, subscribed: &BTreeSet<String>, metadata: &ClusterMetadata) {
        let mut member = self.member();
        member.missing_topics = subscribed.iter().any(|t| {
            metadata
                .topics
                .get(t)
                .is_none_or(|m| m.error_code != errors::NONE)
        });
        let counts_changed = member.leader_counts.as_ref().is_some_and(|counts| {
            counts.iter().any(|(topic, &count)| {
                metadata.topics.get(topic).is_some_and(|m| {
                    m.error_code == errors::NONE && m.partitions.len() as i32 != count
                })
            }) || subscribed.iter().any(|t| {
                !counts.contains_key(t)
                    && metadata
                        .topics
                        .get(t)
                        .is_some_and(|m| m.error_code == errors::NONE)
            })
        });
        if member.joined && (member.subscribed != *subscribed || counts_changed) {
            drop(member);
            tracing::info!(group = %self.group_id, "subscribed topics changed; rejoining");
            self.request_rejoin();
        }
    }
}

impl GroupMember for GroupShared {
    fn group_id(&self) -> &str {
        &self.group_id
    }

    fn commit_identity(&self) -> (String, i32) {
        let member = self.member();
        if member.joined {
            (member.member_id.clone(), member.generation)
        } else {
            (String::new(), -1)
        }
    }

    async fn coordinator(&self, ctx: &Context) -> Result<Arc<Connection>> {
        if let Some(connection) = self
            .coordinator_connection
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            if !connection.is_closed() {
                return Ok(connection.clone());
            }
        }
        let addr = ctx.cluster.find_coordinator(&self.group_id).await?;
        let connection = Arc::new(coordinator_connection(ctx, &addr).await?);
        *self
            .coordinator_connection
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(connection.clone());
        Ok(connection)
    }

    fn forget_coordinator(&self) {
        *self
            .coordinator_connection
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = None;
    }

    fn request_rejoin(&self) {
        GroupShared::request_rejoin(self);
    }
}

/// Connects to the coordinator at `addr` on a connection of its own (authenticated as the
/// cluster's connections are), so group requests never queue behind a fetch's long poll; its
/// timeout covers a rebalance.
async fn coordinator_connection(ctx: &Context, addr: &str) -> Result<Connection> {
    let config = &ctx.cluster.config;
    let request_timeout = config
        .request_timeout
        .max(ctx.settings.max_poll_interval + Duration::from_secs(5));
    Connection::open(addr, config, request_timeout).await
}

fn str_bytes(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

/// Makes sure the consumer is an active member with its assignment applied: joins or rejoins
/// (classic) or reconciles the coordinator's assignment (KIP-848). Called by every poll.
pub(crate) async fn ensure_active(
    ctx: &Arc<Context>,
    group: &Arc<GroupShared>,
    state: &mut SubscriptionState,
) -> Result<()> {
    if let Some(error) = group.member().fatal.clone() {
        return Err(error);
    }
    if !group.heartbeat_started.swap(true, Ordering::AcqRel) {
        tokio::spawn(heartbeat_loop(Arc::downgrade(ctx), group.clone()));
    }
    let lost = std::mem::take(&mut group.member().lost);
    if lost {
        let owned = state.assignment();
        if !owned.is_empty() {
            tracing::warn!(group = %group.group_id, partitions = owned.len(), "partitions lost: the group gave them to other members");
            if let Some(listener) = ctx.listener() {
                listener.on_partitions_lost(&owned);
            }
            state.partitions.clear();
        }
    }
    match group.protocol {
        GroupProtocol::Classic => ensure_classic(ctx, group, state).await,
        GroupProtocol::Consumer => reconcile(ctx, group, state).await,
    }
}

async fn ensure_classic(
    ctx: &Arc<Context>,
    group: &Arc<GroupShared>,
    state: &mut SubscriptionState,
) -> Result<()> {
    if !group.needs_rejoin.load(Ordering::Acquire) && group.member().joined {
        return Ok(());
    }
    let cooperative = group
        .member()
        .assignor
        .is_some_and(Assignor::is_cooperative);
    if !cooperative && !state.partitions.is_empty() {
        revoke(ctx, group, state, &state.assignment()).await;
    }
    let mut metadata = ctx.cluster.cached();
    if let ConsumerSubscription::Topics(topics) = &state.subscription {
        let topics: Vec<String> = topics.iter().cloned().collect();
        metadata = ctx.cluster.refresh(Some(&topics)).await.unwrap_or(metadata);
    } else if metadata.topics.is_empty() {
        metadata = ctx.cluster.refresh(None).await.unwrap_or(metadata);
    }
    let topics = state.subscribed_topics(&metadata);
    group.member().joining = true;
    let outcome = join_and_sync(ctx, group, state, &topics, &metadata).await;
    let (assigned, cooperative, generation, member_id) = {
        let mut member = group.member();
        member.joining = false;
        let assigned = outcome?;
        member.joined = true;
        member.subscribed = topics;
        (
            assigned,
            member.assignor.is_some_and(Assignor::is_cooperative),
            member.generation,
            member.member_id.clone(),
        )
    };
    let (revoked, added) = changes(&state.assignment(), &assigned);
    tracing::info!(
        group = %group.group_id, member_id, generation,
        assigned = assigned.len(), added = added.len(), revoked = revoked.len(),
        "joined the group"
    );
    if !revoked.is_empty() {
        revoke(ctx, group, state, &revoked).await;
        if cooperative {
            // Cooperative: what was revoked goes to its new owner in a follow-up rebalance.
            group.request_rejoin();
        }
    }
    state.add_partitions(&added);
    if let Some(listener) = ctx.listener() {
        if !added.is_empty() || !cooperative {
            listener.on_partitions_assigned(&added);
        }
    }
    Ok(())
}

/// What moving from `owned` to `assigned` revokes and adds.
fn changes(
    owned: &[TopicPartition],
    assigned: &[TopicPartition],
) -> (Vec<TopicPartition>, Vec<TopicPartition>) {
    let missing_from = |from: &[TopicPartition], other: &[TopicPartition]| {
        from.iter()
            .filter(|tp| !other.contains(tp))
            .cloned()
            .collect()
    };
    (missing_from(owned, assigned), missing_from(assigned, owned))
}

/// Commits what was read from `partitions` (with auto-commit), tells the listener, and drops
/// them.
async fn revoke(
    ctx: &Context,
    group: &GroupShared,
    state: &mut SubscriptionState,
    partitions: &[TopicPartition],
) {
    if ctx.settings.enable_auto_commit {
        let offsets = state.positions(Some(partitions));
        if !offsets.is_empty() {
            if let Err(error) = offsets::commit(ctx, group, offsets).await {
                tracing::warn!(%error, "commit before revoking partitions failed");
            }
        }
    }
    if let Some(listener) = ctx.listener() {
        listener.on_partitions_revoked(partitions);
    }
    state.remove_partitions(partitions);
}

/// JoinGroup then SyncGroup until both succeed; returns the partitions assigned.
async fn join_and_sync(
    ctx: &Arc<Context>,
    group: &Arc<GroupShared>,
    state: &SubscriptionState,
    topics: &BTreeSet<String>,
    metadata: &ClusterMetadata,
) -> Result<Vec<TopicPartition>> {
    let settings = &ctx.settings;
    let mut attempt: u32 = 0;
    loop {
        attempt += 1;
        if attempt > 1 {
            let backoff = settings.retry_backoff * attempt.min(10);
            tokio::time::sleep(backoff).await;
        }
        if group.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        group.needs_rejoin.store(false, Ordering::Release);
        let connection = match group.coordinator(ctx).await {
            Ok(connection) => connection,
            Err(error) => {
                retry_after(group, error, attempt)?;
                continue;
            }
        };
        let (member_id, generation, cooperative) = {
            let member = group.member();
            (
                member.member_id.clone(),
                member.generation,
                member.assignor.is_some_and(Assignor::is_cooperative),
            )
        };
        let subscription = Subscription {
            topics: topics.clone(),
            owned: if cooperative {
                state.assignment()
            } else {
                Vec::new()
            },
            generation,
        };
        let metadata_bytes = subscription.encode()?;
        let request = JoinGroupRequest::default()
            .with_group_id(GroupId(str_bytes(&group.group_id)))
            .with_session_timeout_ms(settings.session_timeout.as_millis() as i32)
            .with_rebalance_timeout_ms(settings.max_poll_interval.as_millis() as i32)
            .with_member_id(str_bytes(&member_id))
            .with_group_instance_id(settings.group_instance_id.as_deref().map(str_bytes))
            .with_protocol_type(StrBytes::from_static_str("consumer"))
            .with_protocols(
                settings
                    .assignors
                    .iter()
                    .map(|a| {
                        JoinGroupRequestProtocol::default()
                            .with_name(StrBytes::from_static_str(a.name()))
                            .with_metadata(metadata_bytes.clone())
                    })
                    .collect(),
            )
            .with_reason(None);
        let response = match connection.send(&request).await {
            Ok(response) if response.error_code == errors::NONE => response,
            Ok(response) if response.error_code == errors::MEMBER_ID_REQUIRED => {
                // KIP-394: join again at once with the id the coordinator gave.
                group.member().member_id = response.member_id.to_string();
                attempt = 0;
                continue;
            }
            Ok(response) => {
                retry_after(group, group_error(group, response.error_code), attempt)?;
                continue;
            }
            Err(error) => {
                retry_after(group, error, attempt)?;
                continue;
            }
        };
        let assignor = response
            .protocol_name
            .as_deref()
            .and_then(Assignor::parse)
            .ok_or_else(|| {
                Error::Protocol(format!(
                    "the group chose assignor {:?}, which this client did not offer",
                    response.protocol_name.as_deref()
                ))
            })?;
        {
            let mut member = group.member();
            member.member_id = response.member_id.to_string();
            member.generation = response.generation_id;
            member.assignor = Some(assignor);
            member.leader_counts = None;
        }
        let assignments = if response.leader == response.member_id {
            leader_assign(ctx, group, assignor, &response, metadata).await?
        } else {
            Vec::new()
        };
        let request = SyncGroupRequest::default()
            .with_group_id(GroupId(str_bytes(&group.group_id)))
            .with_generation_id(response.generation_id)
            .with_member_id(response.member_id.clone())
            .with_group_instance_id(settings.group_instance_id.as_deref().map(str_bytes))
            .with_protocol_type(Some(StrBytes::from_static_str("consumer")))
            .with_protocol_name(Some(StrBytes::from_static_str(assignor.name())))
            .with_assignments(assignments);
        match connection.send(&request).await {
            Ok(sync) if sync.error_code == errors::NONE => {
                return assignor::decode_assignment(&sync.assignment);
            }
            Ok(sync) => retry_after(group, group_error(group, sync.error_code), attempt)?,
            Err(error) => retry_after(group, error, attempt)?,
        }
    }
}

/// A group's error code as the SDK's error.
fn group_error(group: &GroupShared, code: i16) -> Error {
    Error::from_code(code, format!("group {}", group.group_id), None)
}

/// After a failed JoinGroup or SyncGroup: `Ok` to join again (the member's identity reset as
/// the error says; the coordinator found again after coordinator errors, for a while), the
/// error when it is for the application.
fn retry_after(group: &GroupShared, error: Error, attempt: u32) -> Result<()> {
    match error.code() {
        Some(errors::REBALANCE_IN_PROGRESS) => Ok(()),
        Some(errors::UNKNOWN_MEMBER_ID) => {
            let mut member = group.member();
            member.member_id.clear();
            member.generation = -1;
            Ok(())
        }
        Some(errors::ILLEGAL_GENERATION) => {
            group.member().generation = -1;
            Ok(())
        }
        _ if is_coordinator_error(&error) && attempt < 50 => {
            tracing::debug!(%error, group = %group.group_id, "group coordinator not reachable yet");
            group.forget_coordinator();
            Ok(())
        }
        _ => Err(error),
    }
}

/// The leader's part: every member's subscription, the partitions of their topics, the
/// assignor's answer, encoded per member.
async fn leader_assign(
    ctx: &Context,
    group: &GroupShared,
    assignor: Assignor,
    response: &JoinGroupResponse,
    metadata: &ClusterMetadata,
) -> Result<Vec<SyncGroupRequestAssignment>> {
    let mut members = BTreeMap::new();
    for member in &response.members {
        let subscription = Subscription::decode(&member.metadata)?;
        members.insert(member.member_id.to_string(), subscription);
    }
    let topics: BTreeSet<String> = members
        .values()
        .flat_map(|s| s.topics.iter().cloned())
        .collect();
    let wanted: Vec<String> = topics.iter().cloned().collect();
    let fresh;
    let metadata = if wanted.iter().all(|t| metadata.topics.contains_key(t)) {
        metadata
    } else {
        fresh = ctx.cluster.refresh(Some(&wanted)).await?;
        &*fresh
    };
    let counts: BTreeMap<String, i32> = topics
        .iter()
        .filter_map(|t| {
            let m = metadata.topics.get(t)?;
            (m.error_code == errors::NONE).then(|| (t.clone(), m.partitions.len() as i32))
        })
        .collect();
    let assignment = assignor.assign(&members, &counts);
    tracing::debug!(group = %group.group_id, members = members.len(), topics = counts.len(), "assigned partitions as the group leader");
    group.member().leader_counts = Some(counts);
    assignment
        .into_iter()
        .map(|(member_id, partitions)| {
            Ok(SyncGroupRequestAssignment::default()
                .with_member_id(StrBytes::from_string(member_id))
                .with_assignment(assignor::encode_assignment(&partitions)?))
        })
        .collect()
}

/// KIP-848: applies the coordinator's latest assignment (revoking first, committing what was
/// read), and tells the coordinator on the next heartbeat, which is sent at once.
async fn reconcile(
    ctx: &Arc<Context>,
    group: &Arc<GroupShared>,
    state: &mut SubscriptionState,
) -> Result<()> {
    // Keep the subscription the heartbeat sends up to date.
    if group.needs_rejoin.swap(false, Ordering::AcqRel) {
        let metadata = match &state.subscription {
            ConsumerSubscription::Pattern(_) => ctx
                .cluster
                .refresh(None)
                .await
                .unwrap_or_else(|_| ctx.cluster.cached()),
            _ => ctx.cluster.cached(),
        };
        group.member().subscribed = state.subscribed_topics(&metadata);
        group.heartbeat_now.notify_one();
    }
    let Some(target) = group.member().target.clone() else {
        return Ok(());
    };
    let mut metadata = ctx.cluster.cached();
    let by_id = |metadata: &ClusterMetadata, id: &[u8; 16]| {
        metadata
            .topics
            .values()
            .find(|t| &t.topic_id == id)
            .map(|t| t.name.clone())
    };
    if target.iter().any(|(id, _)| by_id(&metadata, id).is_none()) {
        metadata = ctx.cluster.refresh(None).await?;
    }
    let mut assigned = Vec::new();
    let mut known = BTreeSet::new();
    for (id, partition) in &target {
        if let Some(name) = by_id(&metadata, id) {
            assigned.push(TopicPartition::new(&name, *partition));
            known.insert((*id, *partition));
        }
    }
    let (revoked, added) = changes(&state.assignment(), &assigned);
    if revoked.is_empty() && added.is_empty() && group.member().owned == known {
        return Ok(());
    }
    if !revoked.is_empty() {
        revoke(ctx, group, state, &revoked).await;
    }
    state.add_partitions(&added);
    if !added.is_empty() {
        if let Some(listener) = ctx.listener() {
            listener.on_partitions_assigned(&added);
        }
    }
    let (member_id, epoch) = {
        let mut member = group.member();
        member.owned = known;
        member.joined = true;
        (member.member_id.clone(), member.generation)
    };
    tracing::info!(group = %group.group_id, member_id, epoch, assigned = assigned.len(), added = added.len(), revoked = revoked.len(), "reconciled the group's assignment");
    group.heartbeat_now.notify_one();
    Ok(())
}

/// Leaves the group: LeaveGroup (classic; static members stay, as in Java) or a heartbeat
/// with epoch -1 (-2 for a static member) for KIP-848.
pub(crate) async fn leave(ctx: &Context, group: &GroupShared) {
    let (member_id, epoch, joined) = {
        let member = group.member();
        (member.member_id.clone(), member.generation, member.joined)
    };
    let reset = || {
        let mut member = group.member();
        member.joined = false;
        member.generation = match group.protocol {
            GroupProtocol::Classic => -1,
            GroupProtocol::Consumer => 0,
        };
        member.owned.clear();
        member.target = None;
    };
    if member_id.is_empty() || (!joined && epoch <= 0) {
        reset();
        return;
    }
    let Ok(connection) = group.coordinator(ctx).await else {
        reset();
        return;
    };
    let static_member = ctx.settings.group_instance_id.is_some();
    let outcome = match group.protocol {
        GroupProtocol::Classic if static_member => Ok(()),
        GroupProtocol::Classic => {
            // Versions 0-2 name the member in one field, 3 and up in a list.
            let request =
                LeaveGroupRequest::default().with_group_id(GroupId(str_bytes(&group.group_id)));
            let request = match connection.version_for::<LeaveGroupRequest>(5) {
                Ok(version) if version >= 3 => request.with_members(vec![
                    MemberIdentity::default()
                        .with_member_id(str_bytes(&member_id))
                        .with_group_instance_id(None)
                        .with_reason(
                            (version >= 5)
                                .then(|| StrBytes::from_static_str("the consumer is closing")),
                        ),
                ]),
                _ => request.with_member_id(str_bytes(&member_id)),
            };
            connection.send(&request).await.map(|_| ())
        }
        GroupProtocol::Consumer => {
            let request = ConsumerGroupHeartbeatRequest::default()
                .with_group_id(GroupId(str_bytes(&group.group_id)))
                .with_member_id(str_bytes(&member_id))
                .with_member_epoch(if static_member { -2 } else { -1 })
                .with_instance_id(ctx.settings.group_instance_id.as_deref().map(str_bytes))
                .with_rack_id(None)
                .with_subscribed_topic_names(None)
                .with_subscribed_topic_regex(None)
                .with_server_assignor(None)
                .with_topic_partitions(None);
            connection.send(&request).await.map(|_| ())
        }
    };
    if let Err(error) = outcome {
        tracing::debug!(%error, group = %group.group_id, "leaving the group failed; the session timeout removes the member");
    }
    reset();
}

/// Heartbeats while the consumer lives; flags rebalances and lost partitions for the poll
/// side; leaves the group when poll is not called within `max.poll.interval.ms`.
async fn heartbeat_loop(ctx: Weak<Context>, group: Arc<GroupShared>) {
    let mut random = Random::new();
    loop {
        let interval = {
            let Some(ctx) = ctx.upgrade() else { return };
            group
                .member()
                .heartbeat_interval
                .unwrap_or(ctx.settings.heartbeat_interval)
        };
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = group.heartbeat_now.notified() => {}
        }
        if group.closed.load(Ordering::Acquire) {
            return;
        }
        let Some(ctx) = ctx.upgrade() else { return };
        let since_poll = group
            .last_poll
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed();
        if since_poll > ctx.settings.max_poll_interval && group.member().joined {
            tracing::warn!(
                group = %group.group_id,
                since_poll_ms = since_poll.as_millis() as u64,
                "poll was not called within max.poll.interval.ms; leaving the group so others take the partitions (raise max.poll.interval.ms or process less per poll)"
            );
            leave(&ctx, &group).await;
            group.member().lost = true;
            group.request_rejoin();
            continue;
        }
        let outcome = match group.protocol {
            GroupProtocol::Classic => classic_heartbeat(&ctx, &group).await,
            GroupProtocol::Consumer => consumer_heartbeat(&ctx, &group, &mut random).await,
        };
        if let Err(error) = outcome {
            if is_coordinator_error(&error) {
                tracing::debug!(%error, group = %group.group_id, "heartbeat failed; finding the coordinator again");
                group.forget_coordinator();
            } else {
                tracing::warn!(%error, group = %group.group_id, "heartbeat failed");
                group.member().fatal = Some(error);
                group.rejoin_requested.notify_waiters();
            }
            tokio::time::sleep(ctx.settings.retry_backoff).await;
        }
    }
}

/// A heartbeat within `request.timeout.ms` (the coordinator connection's own timeout covers
/// a whole rebalance, too long for a heartbeat).
async fn send_heartbeat<R: kafka_protocol::protocol::Request>(
    ctx: &Context,
    group: &GroupShared,
    connection: &Connection,
    request: &R,
) -> Result<R::Response> {
    let timeout = ctx.cluster.config.request_timeout;
    tokio::time::timeout(timeout, connection.send(request))
        .await
        .map_err(|_| Error::Timeout {
            what: format!("heartbeat to group {}", group.group_id),
            after: timeout,
        })?
}

async fn classic_heartbeat(ctx: &Context, group: &GroupShared) -> Result<()> {
    let (member_id, generation) = {
        let member = group.member();
        if !member.joined || member.joining || member.generation < 0 {
            return Ok(());
        }
        (member.member_id.clone(), member.generation)
    };
    let connection = group.coordinator(ctx).await?;
    let request = HeartbeatRequest::default()
        .with_group_id(GroupId(str_bytes(&group.group_id)))
        .with_generation_id(generation)
        .with_member_id(str_bytes(&member_id))
        .with_group_instance_id(ctx.settings.group_instance_id.as_deref().map(str_bytes));
    let response = send_heartbeat(ctx, group, &connection, &request).await?;
    match response.error_code {
        errors::NONE => Ok(()),
        errors::REBALANCE_IN_PROGRESS => {
            // Only for the generation it was sent in: an answer overtaken by a join is stale.
            let current = {
                let member = group.member();
                member.generation == generation && !member.joining
            };
            if current {
                tracing::info!(group = %group.group_id, generation, "the group is rebalancing; rejoining");
                group.request_rejoin();
            }
            Ok(())
        }
        errors::UNKNOWN_MEMBER_ID | errors::ILLEGAL_GENERATION => {
            tracing::warn!(group = %group.group_id, error = %errors::name(response.error_code), "the group no longer knows this member; rejoining");
            let mut member = group.member();
            if member.generation == generation {
                if response.error_code == errors::UNKNOWN_MEMBER_ID {
                    member.member_id.clear();
                }
                member.generation = -1;
                member.joined = false;
                member.lost = true;
            }
            drop(member);
            group.request_rejoin();
            Ok(())
        }
        code => Err(group_error(group, code)),
    }
}

async fn consumer_heartbeat(ctx: &Context, group: &GroupShared, random: &mut Random) -> Result<()> {
    let (member_id, epoch, subscribed, owned) = {
        let mut member = group.member();
        if member.member_id.is_empty() {
            // Version 1 has the member make up its id (a UUID's worth of randomness).
            member.member_id = (0..4)
                .map(|_| format!("{:08x}", random.below(i32::MAX) as u32))
                .collect();
        }
        let mut owned: BTreeMap<[u8; 16], Vec<i32>> = BTreeMap::new();
        for (id, partition) in &member.owned {
            owned.entry(*id).or_default().push(*partition);
        }
        (
            member.member_id.clone(),
            member.generation,
            member.subscribed.clone(),
            owned,
        )
    };
    let connection = group.coordinator(ctx).await?;
    let request = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(str_bytes(&group.group_id)))
        .with_member_id(str_bytes(&member_id))
        .with_member_epoch(epoch)
        .with_instance_id(ctx.settings.group_instance_id.as_deref().map(str_bytes))
        .with_rack_id(None)
        .with_rebalance_timeout_ms(ctx.settings.max_poll_interval.as_millis() as i32)
        .with_subscribed_topic_names(Some(
            subscribed.iter().map(|t| TopicName(str_bytes(t))).collect(),
        ))
        .with_subscribed_topic_regex(None)
        .with_server_assignor(None)
        .with_topic_partitions(Some(
            owned
                .into_iter()
                .map(|(id, partitions)| {
                    TopicPartitions::default()
                        .with_topic_id(uuid::Uuid::from_bytes(id))
                        .with_partitions(partitions)
                })
                .collect(),
        ));
    let response = send_heartbeat(ctx, group, &connection, &request).await?;
    match response.error_code {
        errors::NONE => {
            let mut member = group.member();
            if let Some(id) = &response.member_id {
                member.member_id = id.to_string();
            }
            member.generation = response.member_epoch;
            if response.heartbeat_interval_ms > 0 {
                member.heartbeat_interval =
                    Some(Duration::from_millis(response.heartbeat_interval_ms as u64));
            }
            if let Some(assignment) = &response.assignment {
                member.target = Some(
                    assignment
                        .topic_partitions
                        .iter()
                        .flat_map(|t| {
                            let id = *t.topic_id.as_bytes();
                            t.partitions.iter().map(move |&p| (id, p))
                        })
                        .collect(),
                );
                drop(member);
                group.rejoin_requested.notify_waiters();
            }
            Ok(())
        }
        errors::UNKNOWN_MEMBER_ID | errors::FENCED_MEMBER_EPOCH => {
            tracing::warn!(group = %group.group_id, error = %errors::name(response.error_code), "fenced by the group; rejoining with epoch 0");
            let mut member = group.member();
            member.generation = 0;
            member.joined = false;
            member.lost = true;
            member.owned.clear();
            member.target = None;
            if response.error_code == errors::UNKNOWN_MEMBER_ID {
                member.member_id.clear();
            }
            drop(member);
            group.rejoin_requested.notify_waiters();
            group.heartbeat_now.notify_one();
            Ok(())
        }
        code => Err(Error::from_code(
            code,
            format!("group {}", group.group_id),
            response.error_message.as_deref(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
    use kafka_protocol::messages::offset_commit_response::{
        OffsetCommitResponsePartition, OffsetCommitResponseTopic,
    };
    use kafka_protocol::messages::{
        ApiKey, HeartbeatResponse, JoinGroupResponse, LeaveGroupResponse, OffsetCommitRequest,
        OffsetCommitResponse, RequestKind, ResponseKind, SyncGroupResponse,
    };

    use super::*;
    use crate::client::cluster::Cluster;
    use crate::client::config::{ClientConfig, CommonConfig};
    use crate::client::consumer::types::RebalanceListener;
    use crate::client::fake_broker::{self, FakeBroker, Node, Received};

    /// What the listener was told, in order.
    #[derive(Default)]
    struct Recorded(Mutex<Vec<(&'static str, Vec<TopicPartition>)>>);

    impl Recorded {
        fn push(&self, event: &'static str, partitions: &[TopicPartition]) {
            let mut events = self.0.lock().unwrap_or_else(|p| p.into_inner());
            events.push((event, partitions.to_vec()));
        }

        fn events(&self) -> Vec<(&'static str, Vec<TopicPartition>)> {
            self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
        }
    }

    impl RebalanceListener for Recorded {
        fn on_partitions_assigned(&self, partitions: &[TopicPartition]) {
            self.push("assigned", partitions);
        }
        fn on_partitions_revoked(&self, partitions: &[TopicPartition]) {
            self.push("revoked", partitions);
        }
        fn on_partitions_lost(&self, partitions: &[TopicPartition]) {
            self.push("lost", partitions);
        }
    }

    fn both() -> Vec<TopicPartition> {
        vec![TopicPartition::new("t", 0), TopicPartition::new("t", 1)]
    }

    /// A member of group `g` subscribed to topic `t`, as a consumer's poll side holds it:
    /// heartbeats every `heartbeat_ms` once joined, backoffs of 10 ms, no auto-commit.
    fn member(
        bootstrap: &FakeBroker,
        heartbeat_ms: u32,
    ) -> (
        Arc<Context>,
        Arc<GroupShared>,
        SubscriptionState,
        Arc<Recorded>,
    ) {
        let config = ClientConfig::new(&bootstrap.addr())
            .set("group.id", "g")
            .set("session.timeout.ms", "60000")
            .set("heartbeat.interval.ms", heartbeat_ms.to_string())
            .set("retry.backoff.ms", "10")
            .set("enable.auto.commit", "false");
        let settings = Settings::from_config(&config).expect("settings");
        let group = Arc::new(GroupShared::new("g".into(), &settings));
        let common = CommonConfig::from_config(&config).expect("config");
        let ctx = Arc::new(Context::new(Cluster::new(common), settings));
        let listener = Arc::new(Recorded::default());
        ctx.set_listener(listener.clone());
        let mut state = SubscriptionState::new();
        state.subscription = ConsumerSubscription::Topics(BTreeSet::from(["t".to_owned()]));
        (ctx, group, state, listener)
    }

    /// How the fake brokers of a test answer. Every broker knows topic `t` (two partitions
    /// led by the first node); FindCoordinator names `coordinators[k]` for the k-th asked of
    /// any broker (the last one from then on).
    #[derive(Clone)]
    struct Script {
        nodes: Vec<Node>,
        coordinators: Vec<Node>,
        finds: Arc<AtomicUsize>,
    }

    impl Script {
        fn new(nodes: &[&FakeBroker], coordinators: &[&FakeBroker]) -> Script {
            Script {
                nodes: nodes.iter().map(|b| b.node()).collect(),
                coordinators: coordinators.iter().map(|b| b.node()).collect(),
                finds: Arc::new(AtomicUsize::new(0)),
            }
        }

        /// Serves `broker` as the coordinator of a group of one: JoinGroup makes the member
        /// its leader (a member that comes without an id is given `m-<n>`, n counting joins;
        /// the generation counts joins too) unless `join_error` says otherwise for the n-th;
        /// SyncGroup hands the member what it assigned itself; Heartbeat and OffsetCommit
        /// answer `heartbeat_error` and `commit_error` for the n-th.
        fn serve(
            &self,
            broker: &FakeBroker,
            join_error: fn(usize) -> i16,
            heartbeat_error: fn(usize) -> i16,
            commit_error: fn(usize) -> i16,
        ) {
            let script = self.clone();
            broker.serve(move |received: &Received| {
                let nth = received.nth;
                Some(match &received.request {
                    RequestKind::Metadata(_) => fake_broker::metadata(
                        &script.nodes,
                        &[("t", &[script.nodes[0].node_id; 2])],
                    ),
                    RequestKind::FindCoordinator(_) => {
                        let k = script.finds.fetch_add(1, Ordering::AcqRel);
                        let last = script.coordinators.len() - 1;
                        fake_broker::find_coordinator(script.coordinators[k.min(last)])
                    }
                    RequestKind::JoinGroup(request) => {
                        ResponseKind::JoinGroup(match join_error(nth) {
                            errors::NONE => {
                                let member_id = if request.member_id.is_empty() {
                                    StrBytes::from_string(format!("m-{}", nth + 1))
                                } else {
                                    request.member_id.clone()
                                };
                                JoinGroupResponse::default()
                                    .with_generation_id(nth as i32 + 1)
                                    .with_protocol_type(Some(StrBytes::from_static_str("consumer")))
                                    .with_protocol_name(Some(request.protocols[0].name.clone()))
                                    .with_leader(member_id.clone())
                                    .with_member_id(member_id.clone())
                                    .with_members(vec![
                                        JoinGroupResponseMember::default()
                                            .with_member_id(member_id)
                                            .with_metadata(request.protocols[0].metadata.clone()),
                                    ])
                            }
                            errors::MEMBER_ID_REQUIRED => JoinGroupResponse::default()
                                .with_error_code(errors::MEMBER_ID_REQUIRED)
                                .with_member_id(StrBytes::from_static_str("m-1")),
                            code => JoinGroupResponse::default().with_error_code(code),
                        })
                    }
                    RequestKind::SyncGroup(request) => ResponseKind::SyncGroup(
                        SyncGroupResponse::default().with_assignment(
                            request
                                .assignments
                                .iter()
                                .find(|a| a.member_id == request.member_id)
                                .map(|a| a.assignment.clone())
                                .unwrap_or_default(),
                        ),
                    ),
                    RequestKind::Heartbeat(_) => ResponseKind::Heartbeat(
                        HeartbeatResponse::default().with_error_code(heartbeat_error(nth)),
                    ),
                    RequestKind::OffsetCommit(request) => ResponseKind::OffsetCommit(
                        OffsetCommitResponse::default().with_topics(
                            request
                                .topics
                                .iter()
                                .map(|t| {
                                    OffsetCommitResponseTopic::default()
                                        .with_name(t.name.clone())
                                        .with_partitions(
                                            t.partitions
                                                .iter()
                                                .map(|p| {
                                                    OffsetCommitResponsePartition::default()
                                                        .with_partition_index(p.partition_index)
                                                        .with_error_code(commit_error(nth))
                                                })
                                                .collect(),
                                        )
                                })
                                .collect(),
                        ),
                    ),
                    RequestKind::LeaveGroup(_) => {
                        ResponseKind::LeaveGroup(LeaveGroupResponse::default())
                    }
                    _ => return None,
                })
            });
        }
    }

    fn none(_: usize) -> i16 {
        errors::NONE
    }

    #[tokio::test]
    async fn joining_as_the_leader_assigns_the_subscribed_partitions_through_sync_group() {
        let broker = FakeBroker::bind(1).await;
        // KIP-394: the first JoinGroup is answered with the member's id, to join with.
        let member_id_required = |nth| match nth {
            0 => errors::MEMBER_ID_REQUIRED,
            _ => errors::NONE,
        };
        Script::new(&[&broker], &[&broker]).serve(&broker, member_id_required, none, none);
        let (ctx, group, mut state, listener) = member(&broker, 30_000);

        ensure_active(&ctx, &group, &mut state)
            .await
            .expect("joined");

        assert_eq!(state.assignment(), both());
        assert_eq!(listener.events(), [("assigned", both())]);
        assert_eq!(group.commit_identity(), ("m-1".to_owned(), 2));
        let joins = broker.requests::<JoinGroupRequest>();
        let member_ids: Vec<&str> = joins.iter().map(|j| j.member_id.as_str()).collect();
        assert_eq!(member_ids, ["", "m-1"]);
        for join in &joins {
            assert_eq!(join.group_id.as_str(), "g");
            assert_eq!(join.protocol_type.as_str(), "consumer");
            let offered: Vec<&str> = join.protocols.iter().map(|p| p.name.as_str()).collect();
            assert_eq!(offered, ["range", "cooperative-sticky"]);
        }
        // As the leader the member assigned the partitions itself.
        let syncs = broker.requests::<SyncGroupRequest>();
        assert_eq!(syncs.len(), 1);
        assert_eq!(
            (syncs[0].member_id.as_str(), syncs[0].generation_id),
            ("m-1", 2)
        );
        assert_eq!(syncs[0].assignments.len(), 1);
        let assigned = assignor::decode_assignment(&syncs[0].assignments[0].assignment)
            .expect("an assignment");
        assert_eq!(assigned, both());
    }

    #[tokio::test]
    async fn a_rebalance_announced_by_a_heartbeat_rejoins_with_the_same_member_id() {
        let broker = FakeBroker::bind(1).await;
        let rebalancing = |nth| match nth {
            0 => errors::REBALANCE_IN_PROGRESS,
            _ => errors::NONE,
        };
        Script::new(&[&broker], &[&broker]).serve(&broker, none, rebalancing, none);
        let (ctx, group, mut state, listener) = member(&broker, 30_000);
        ensure_active(&ctx, &group, &mut state)
            .await
            .expect("joined");
        assert!(!group.needs_rejoin.load(Ordering::Acquire));

        classic_heartbeat(&ctx, &group).await.expect("answered");
        let heartbeats = broker.requests::<HeartbeatRequest>();
        assert_eq!(
            (
                heartbeats[0].member_id.as_str(),
                heartbeats[0].generation_id
            ),
            ("m-1", 1)
        );
        assert!(
            group.needs_rejoin.load(Ordering::Acquire),
            "the rebalance was not noticed"
        );

        ensure_active(&ctx, &group, &mut state)
            .await
            .expect("rejoined");
        let joins = broker.requests::<JoinGroupRequest>();
        let member_ids: Vec<&str> = joins.iter().map(|j| j.member_id.as_str()).collect();
        assert_eq!(member_ids, ["", "m-1"]);
        assert_eq!(group.commit_identity(), ("m-1".to_owned(), 2));
        assert_eq!(state.assignment(), both());
        // range is eager: everything is revoked before the rejoin, then assigned again.
        assert_eq!(
            listener.events(),
            [
                ("assigned", both()),
                ("revoked", both()),
                ("assigned", both())
            ]
        );
    }

    #[tokio::test]
    async fn an_unknown_member_id_on_heartbeat_loses_the_partitions_and_rejoins_without_an_id() {
        let broker = FakeBroker::bind(1).await;
        let unknown = |nth| match nth {
            0 => errors::UNKNOWN_MEMBER_ID,
            _ => errors::NONE,
        };
        Script::new(&[&broker], &[&broker]).serve(&broker, none, unknown, none);
        let (ctx, group, mut state, listener) = member(&broker, 30_000);
        ensure_active(&ctx, &group, &mut state)
            .await
            .expect("joined");

        classic_heartbeat(&ctx, &group).await.expect("answered");
        // No longer a member: a commit now would go as a consumer outside the group.
        assert_eq!(group.commit_identity(), (String::new(), -1));

        ensure_active(&ctx, &group, &mut state)
            .await
            .expect("rejoined");
        let joins = broker.requests::<JoinGroupRequest>();
        let member_ids: Vec<&str> = joins.iter().map(|j| j.member_id.as_str()).collect();
        assert_eq!(member_ids, ["", ""], "rejoined with the forgotten id");
        assert_eq!(group.commit_identity(), ("m-2".to_owned(), 2));
        assert_eq!(state.assignment(), both());
        // Lost, not revoked: the group had already given them away.
        assert_eq!(
            listener.events(),
            [("assigned", both()), ("lost", both()), ("assigned", both())]
        );
    }

    #[tokio::test]
    async fn a_coordinator_that_moved_is_found_again_for_joins_and_commits() {
        let (a, b) = (FakeBroker::bind(1).await, FakeBroker::bind(2).await);
        // A is found first and refuses the join; B is found next, and refuses the commit
        // after; A, found last, takes it.
        let script = Script::new(&[&a, &b], &[&a, &b, &a]);
        script.serve(&a, |_| errors::NOT_COORDINATOR, none, none);
        script.serve(&b, none, none, |_| errors::NOT_COORDINATOR);
        let (ctx, group, mut state, _) = member(&a, 30_000);

        ensure_active(&ctx, &group, &mut state)
            .await
            .expect("joined at the second coordinator");
        assert_eq!(
            (a.count(ApiKey::JoinGroup), b.count(ApiKey::JoinGroup)),
            (1, 1)
        );
        assert_eq!(b.count(ApiKey::SyncGroup), 1);
        assert_eq!(state.assignment(), both());

        let offsets = BTreeMap::from([(TopicPartition::new("t", 0), 5)]);
        offsets::commit(&ctx, group.as_ref(), offsets)
            .await
            .expect("committed at the third coordinator");
        assert_eq!(
            (a.count(ApiKey::OffsetCommit), b.count(ApiKey::OffsetCommit)),
            (1, 1)
        );
        let finds = a.count(ApiKey::FindCoordinator) + b.count(ApiKey::FindCoordinator);
        assert_eq!(finds, 3);
        let commit = &a.requests::<OffsetCommitRequest>()[0];
        assert_eq!(commit.group_id.as_str(), "g");
        assert_eq!(
            (
                commit.member_id.as_str(),
                commit.generation_id_or_member_epoch
            ),
            ("m-1", 1)
        );
        let partition = &commit.topics[0].partitions[0];
        assert_eq!(commit.topics[0].name.as_str(), "t");
        assert_eq!(
            (partition.partition_index, partition.committed_offset),
            (0, 5)
        );
    }

    #[tokio::test]
    async fn the_heartbeat_task_finds_a_moved_coordinator_again() {
        let (a, b) = (FakeBroker::bind(1).await, FakeBroker::bind(2).await);
        let script = Script::new(&[&a, &b], &[&a, &b]);
        script.serve(&a, none, |_| errors::NOT_COORDINATOR, none);
        script.serve(&b, none, none, none);
        // Heartbeats every 20 ms from the background task ensure_active starts.
        let (ctx, group, mut state, _) = member(&a, 20);
        ensure_active(&ctx, &group, &mut state)
            .await
            .expect("joined");

        b.wait_for(ApiKey::Heartbeat, 1).await;
        assert!(a.count(ApiKey::Heartbeat) >= 1);
        let heartbeat = &b.requests::<HeartbeatRequest>()[0];
        assert_eq!(
            (heartbeat.member_id.as_str(), heartbeat.generation_id),
            ("m-1", 1)
        );
        // A coordinator that moved is not a rebalance: the member stays as it is.
        assert!(!group.needs_rejoin.load(Ordering::Acquire));
        assert!(group.member().fatal.is_none());
        group.close();
    }
}
