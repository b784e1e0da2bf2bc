//! One classic consumer group (the JoinGroup/SyncGroup protocol): its members, generation and
//! state, with every transition made here. Nothing in this file waits or does I/O: requests
//! and the timer call in with the time, answers to waiting members go out through the
//! one-shot senders they left, and what must be made durable is queued (`take_writes`) for the
//! coordinator to append to `__consumer_offsets`.
//!
//! ```text
//! state                 event                                       next
//! Empty                 a member joins                              PreparingRebalance
//!                                                                   (initial delay)
//! PreparingRebalance    every member rejoined (after the initial    CompletingRebalance, or
//!                       delay when the group was empty) or the      Empty if none is left
//!                       rebalance timeout: members that did not
//!                       rejoin are removed
//! CompletingRebalance   the leader's SyncGroup is stored            Stable
//! CompletingRebalance   a member joins, leaves or expires           PreparingRebalance
//! Stable                the leader or a member with new protocols   PreparingRebalance
//!                       joins, a new member joins, one leaves or
//!                       its session expires
//! Stable                a static member rejoins with a new member   Stable (id replaced)
//!                       id and the same protocols
//! Empty                 offsets expired, or DeleteGroups            Dead (removed)
//! ```
//!
//! Fencing: a request names its member id (and static instance id) and generation; an unknown
//! member gets UNKNOWN_MEMBER_ID, a stale generation ILLEGAL_GENERATION, an instance id held by
//! another member id FENCED_INSTANCE_ID, and a heartbeat or SyncGroup during a rebalance
//! REBALANCE_IN_PROGRESS (the member rejoins).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::records::{GroupValue, MemberValue};
use super::{CommittedOffset, GroupConfig};
use crate::protocol::TopicPartition;
use crate::protocol::errors::KafkaError;

/// A new member's join that never completes (its client went away mid-rebalance) is dropped
/// after this long (Kafka's `NewMemberJoinTimeoutMs`).
const NEW_MEMBER_JOIN_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// Kafka's name, as DescribeGroups and ListGroups show it.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

pub use crate::coordinator::Now;

#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Vec<u8>)>,
    /// JoinGroup v4+: a new member first gets its id (MEMBER_ID_REQUIRED), then joins (KIP-394).
    pub require_known_member_id: bool,
    /// JoinGroup v9+: a rejoining static leader may be told to skip the assignment (KIP-814).
    pub supports_skip_assignment: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinedMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinResult {
    pub error: Result<(), KafkaError>,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// For the leader: every member and its metadata for the chosen protocol.
    pub members: Vec<JoinedMember>,
    pub skip_assignment: bool,
}

impl JoinResult {
    pub fn error(member_id: &str, error: KafkaError) -> JoinResult {
        JoinResult {
            error: Err(error),
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id: member_id.to_owned(),
            members: Vec::new(),
            skip_assignment: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncResult {
    pub error: Result<(), KafkaError>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Vec<u8>,
}

impl SyncResult {
    pub fn error(error: KafkaError) -> SyncResult {
        SyncResult {
            error: Err(error),
            protocol_type: None,
            protocol_name: None,
            assignment: Vec::new(),
        }
    }
}

/// An answer now, or later through the receiver.
#[derive(Debug)]
pub enum Reply<T> {
    Now(T),
    Later(oneshot::Receiver<T>),
}

#[derive(Debug)]
struct Member {
    member_id: String,
    group_instance_id: Option<String>,
    client_id: String,
    client_host: String,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    protocols: Vec<(String, Vec<u8>)>,
    assignment: Vec<u8>,
    awaiting_join: Option<oneshot::Sender<JoinResult>>,
    awaiting_sync: Option<oneshot::Sender<SyncResult>>,
    /// A static rejoin answered once the new member id is stored.
    awaiting_store: Option<oneshot::Sender<JoinResult>>,
    /// When the member is removed unless it heartbeats (or waits in a join or sync).
    session_deadline: Instant,
    /// Joined during the current rebalance and not yet answered.
    is_new: bool,
}

impl Member {
    fn metadata(&self, protocol: &str) -> Vec<u8> {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, metadata)| metadata.clone())
            .unwrap_or_default()
    }

    /// Whether the session deadline applies now: not while the member waits in a join, a
    /// sync or a store, except a new member's join, bounded by NEW_MEMBER_JOIN_TIMEOUT
    /// (Kafka's: its client may be gone before the rebalance completes).
    fn expirable(&self) -> bool {
        !self.keep_alive() || (self.is_new && self.awaiting_join.is_some())
    }

    /// Answers whatever the member waits for (a join, a sync, a store) with `error`.
    fn fail_waits(&mut self, error: KafkaError) {
        if let Some(join) = self.awaiting_join.take() {
            let _ = join.send(JoinResult::error(&self.member_id, error));
        }
        if let Some(sync) = self.awaiting_sync.take() {
            let _ = sync.send(SyncResult::error(error));
        }
        if let Some(join) = self.awaiting_store.take() {
            let _ = join.send(JoinResult::error(&self.member_id, error));
        }
    }

    fn keep_alive(&self) -> bool {
        self.awaiting_join.is_some()
            || self.awaiting_sync.is_some()
            || self.awaiting_store.is_some()
    }

    fn to_value(&self, protocol: Option<&str>) -> MemberValue {
        MemberValue {
            member_id: self.member_id.clone(),
            group_instance_id: self.group_instance_id.clone(),
            client_id: self.client_id.clone(),
            client_host: self.client_host.clone(),
            rebalance_timeout_ms: self.rebalance_timeout.as_millis() as i32,
            session_timeout_ms: self.session_timeout.as_millis() as i32,
            subscription: protocol.map(|p| self.metadata(p)).unwrap_or_default(),
            assignment: self.assignment.clone(),
        }
    }
}

/// The rebalance under way (PreparingRebalance).
#[derive(Debug, Clone, Copy)]
struct Rebalance {
    deadline: Instant,
    /// The group was empty: the join waits `group.initial.rebalance.delay.ms`, again while new
    /// members keep arriving, up to the rebalance timeout.
    initial: Option<InitialDelay>,
}

#[derive(Debug, Clone, Copy)]
struct InitialDelay {
    delay: Duration,
    remaining: Duration,
    member_added: bool,
}

/// A write of the group's metadata the coordinator owes: appended to `__consumer_offsets`,
/// then reported back through `write_done`.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupWrite {
    pub value: GroupValue,
    /// The leader's assignment for this generation: the group becomes Stable when it is
    /// stored.
    pub completes_sync: Option<i32>,
    /// A static member's JoinGroup answered once this is stored (the member id and answer).
    pub answers_join: Option<(String, JoinResult)>,
}

/// One member's identity in a LeaveGroup.
#[derive(Debug, Clone)]
pub struct Leaving {
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

#[derive(Debug)]
pub struct ClassicGroup {
    pub group_id: String,
    state: GroupState,
    state_since_ms: i64,
    protocol_type: Option<String>,
    protocol: Option<String>,
    generation: i32,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    /// Instance id -> member id (static members).
    static_members: HashMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, until they join or the deadline.
    pending_members: HashMap<String, Instant>,
    rebalance: Option<Rebalance>,
    /// `group.initial.rebalance.delay.ms`
    initial_delay: Duration,
    writes: Vec<GroupWrite>,
    /// Committed offsets by (topic, partition).
    pub offsets: BTreeMap<TopicPartition, CommittedOffset>,
    /// The group's last metadata record: what a load restores. Changed only by replaying
    /// that record (the rebalance under way, sessions and waiting members are in memory
    /// only, as in Kafka).
    pub stored: Option<GroupValue>,
    /// A transition the table does not allow happened (reported by `check`).
    broken: Option<String>,
}

impl ClassicGroup {
    pub fn new(group_id: &str, initial_delay: Duration, now: Now) -> ClassicGroup {
        ClassicGroup {
            group_id: group_id.to_owned(),
            state: GroupState::Empty,
            state_since_ms: now.wall_ms,
            protocol_type: None,
            protocol: None,
            generation: 0,
            leader: None,
            members: BTreeMap::new(),
            static_members: HashMap::new(),
            pending_members: HashMap::new(),
            rebalance: None,
            initial_delay,
            writes: Vec::new(),
            offsets: BTreeMap::new(),
            stored: None,
            broken: None,
        }
    }

    /// The group as its last metadata record left it. Members come back without sessions
    /// running: each gets a full session timeout from the load to heartbeat.
    pub fn restore(
        group_id: &str,
        value: GroupValue,
        initial_delay: Duration,
        now: Now,
    ) -> ClassicGroup {
        let mut group = ClassicGroup::new(group_id, initial_delay, now);
        group.stored = Some(value.clone());
        group.protocol_type = Some(value.protocol_type).filter(|t| !t.is_empty());
        group.protocol = value.protocol;
        group.generation = value.generation;
        group.leader = value.leader;
        group.state_since_ms = value.current_state_timestamp_ms;
        for stored in value.members {
            let session_timeout = Duration::from_millis(stored.session_timeout_ms.max(0) as u64);
            let member = Member {
                member_id: stored.member_id.clone(),
                group_instance_id: stored.group_instance_id.clone(),
                client_id: stored.client_id,
                client_host: stored.client_host,
                session_timeout,
                rebalance_timeout: Duration::from_millis(stored.rebalance_timeout_ms.max(0) as u64),
                protocols: group
                    .protocol
                    .clone()
                    .map(|p| vec![(p, stored.subscription)])
                    .unwrap_or_default(),
                assignment: stored.assignment,
                awaiting_join: None,
                awaiting_sync: None,
                awaiting_store: None,
                session_deadline: now.instant + session_timeout,
                is_new: false,
            };
            if let Some(instance) = &stored.group_instance_id {
                group
                    .static_members
                    .insert(instance.clone(), stored.member_id.clone());
            }
            group.members.insert(stored.member_id, member);
        }
        group.state = if group.members.is_empty() {
            GroupState::Empty
        } else {
            GroupState::Stable
        };
        group
    }

    pub fn state(&self) -> GroupState {
        self.state
    }

    pub fn generation(&self) -> i32 {
        self.generation
    }

    pub fn protocol_type(&self) -> Option<&str> {
        self.protocol_type.as_deref()
    }

    pub fn protocol(&self) -> Option<&str> {
        self.protocol.as_deref()
    }

    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    pub fn is_member(&self, member_id: &str) -> bool {
        self.members.contains_key(member_id)
    }

    /// Writes owed to `__consumer_offsets`, in the order they must be appended.
    pub fn take_writes(&mut self) -> Vec<GroupWrite> {
        std::mem::take(&mut self.writes)
    }

    /// The earliest time `tick` has something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        let sessions = self
            .members
            .values()
            .filter(|m| m.expirable())
            .map(|m| m.session_deadline);
        let pending = self.pending_members.values().copied();
        let rebalance = self.rebalance.map(|r| r.deadline);
        sessions.chain(pending).chain(rebalance).min()
    }

    fn transition(&mut self, to: GroupState, now: Now) {
        if !valid_transition(self.state, to) && self.broken.is_none() {
            self.broken = Some(format!("transition {:?} -> {to:?}", self.state));
        }
        if self.state != to {
            tracing::debug!(group = %self.group_id, from = self.state.name(), to = to.name(), generation = self.generation, "group state");
        }
        self.state = to;
        self.state_since_ms = now.wall_ms;
    }

    // ---- JoinGroup ----

    pub fn join(
        &mut self,
        request: JoinRequest,
        config: &GroupConfig,
        now: Now,
    ) -> Reply<JoinResult> {
        let member_id = request.member_id.clone();
        if self.state == GroupState::Dead {
            // Removed a moment ago (deleted, or moved to another coordinator): find it again.
            return Reply::Now(JoinResult::error(
                &member_id,
                KafkaError::CoordinatorNotAvailable,
            ));
        }
        if request.protocols.is_empty()
            || request.protocol_type.is_empty()
            || !self.supports(&request.protocol_type, &request.protocols)
        {
            return Reply::Now(JoinResult::error(
                &member_id,
                KafkaError::InconsistentGroupProtocol,
            ));
        }
        if member_id.is_empty() {
            self.join_unknown_member(request, config, now)
        } else {
            self.join_known_member(request, now)
        }
    }

    /// The member's protocol type matches the group's and it shares a protocol with every
    /// member (an empty group accepts any).
    fn supports(&self, protocol_type: &str, protocols: &[(String, Vec<u8>)]) -> bool {
        if self.members.is_empty() {
            return true;
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|(name, _)| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == name))
            })
    }

    fn join_unknown_member(
        &mut self,
        request: JoinRequest,
        config: &GroupConfig,
        now: Now,
    ) -> Reply<JoinResult> {
        let new_id = new_member_id(
            request
                .group_instance_id
                .as_deref()
                .unwrap_or(&request.client_id),
        );
        if let Some(instance) = request.group_instance_id.clone() {
            if let Some(old_id) = self.static_members.get(&instance).cloned() {
                return self.replace_static_member(&old_id, new_id, request, now);
            }
        } else if request.require_known_member_id {
            // KIP-394: the member joins again with this id; until it does, it holds a place.
            if self.is_full(config) {
                return Reply::Now(JoinResult::error("", KafkaError::GroupMaxSizeReached));
            }
            let timeout = Duration::from_millis(request.session_timeout_ms.max(0) as u64);
            self.pending_members
                .insert(new_id.clone(), now.instant + timeout);
            return Reply::Now(JoinResult::error(&new_id, KafkaError::MemberIdRequired));
        }
        if self.is_full(config) {
            return Reply::Now(JoinResult::error("", KafkaError::GroupMaxSizeReached));
        }
        self.add_member_and_rebalance(new_id, request, now)
    }

    fn is_full(&self, config: &GroupConfig) -> bool {
        self.members.len() + self.pending_members.len() >= config.max_size
    }

    fn join_known_member(&mut self, request: JoinRequest, now: Now) -> Reply<JoinResult> {
        let member_id = request.member_id.clone();
        if self.pending_members.remove(&member_id).is_some() {
            return self.add_member_and_rebalance(member_id, request, now);
        }
        if let Err(error) = self.check_member(&member_id, request.group_instance_id.as_deref()) {
            return Reply::Now(JoinResult::error(&member_id, error));
        }
        match self.state {
            GroupState::PreparingRebalance => {
                let (tx, rx) = oneshot::channel();
                self.update_member(&member_id, &request, Some(tx), now);
                self.try_complete_join(now);
                Reply::Later(rx)
            }
            GroupState::CompletingRebalance => {
                if self.same_protocols(&member_id, &request.protocols) {
                    // The join response was lost: send it again.
                    Reply::Now(self.join_result(&member_id))
                } else {
                    let (tx, rx) = oneshot::channel();
                    self.update_member(&member_id, &request, Some(tx), now);
                    self.prepare_rebalance(now, "a member joined with new protocols");
                    Reply::Later(rx)
                }
            }
            GroupState::Stable => {
                let leader = self.leader.as_deref() == Some(member_id.as_str());
                if leader || !self.same_protocols(&member_id, &request.protocols) {
                    let (tx, rx) = oneshot::channel();
                    self.update_member(&member_id, &request, Some(tx), now);
                    self.prepare_rebalance(
                        now,
                        if leader {
                            "the leader rejoined"
                        } else {
                            "a member joined with new protocols"
                        },
                    );
                    Reply::Later(rx)
                } else {
                    // A follower rejoining with what it had: nothing changes.
                    Reply::Now(JoinResult {
                        members: Vec::new(),
                        ..self.join_result(&member_id)
                    })
                }
            }
            GroupState::Empty | GroupState::Dead => {
                Reply::Now(JoinResult::error(&member_id, KafkaError::UnknownMemberId))
            }
        }
    }

    fn same_protocols(&self, member_id: &str, protocols: &[(String, Vec<u8>)]) -> bool {
        self.members
            .get(member_id)
            .is_some_and(|m| m.protocols == protocols)
    }

    fn add_member_and_rebalance(
        &mut self,
        member_id: String,
        request: JoinRequest,
        now: Now,
    ) -> Reply<JoinResult> {
        let (tx, rx) = oneshot::channel();
        let member = Member {
            member_id: member_id.clone(),
            group_instance_id: request.group_instance_id.clone(),
            client_id: request.client_id.clone(),
            client_host: request.client_host.clone(),
            session_timeout: Duration::from_millis(request.session_timeout_ms.max(0) as u64),
            rebalance_timeout: Duration::from_millis(request.rebalance_timeout_ms.max(0) as u64),
            protocols: request.protocols.clone(),
            assignment: Vec::new(),
            awaiting_join: Some(tx),
            awaiting_sync: None,
            awaiting_store: None,
            session_deadline: now.instant + NEW_MEMBER_JOIN_TIMEOUT,
            is_new: true,
        };
        if self.members.is_empty() {
            self.protocol_type = Some(request.protocol_type.clone());
        }
        if self.leader.is_none() {
            self.leader = Some(member_id.clone());
        }
        if let Some(instance) = &request.group_instance_id {
            self.static_members
                .insert(instance.clone(), member_id.clone());
        }
        self.members.insert(member_id, member);
        if let Some(Rebalance {
            initial: Some(initial),
            ..
        }) = &mut self.rebalance
        {
            initial.member_added = true;
        }
        self.maybe_prepare_rebalance(now, "a member joined");
        self.try_complete_join(now);
        Reply::Later(rx)
    }

    fn update_member(
        &mut self,
        member_id: &str,
        request: &JoinRequest,
        awaiting: Option<oneshot::Sender<JoinResult>>,
        now: Now,
    ) {
        if let Some(member) = self.members.get_mut(member_id) {
            member.protocols = request.protocols.clone();
            member.session_timeout =
                Duration::from_millis(request.session_timeout_ms.max(0) as u64);
            member.rebalance_timeout =
                Duration::from_millis(request.rebalance_timeout_ms.max(0) as u64);
            member.client_id = request.client_id.clone();
            member.client_host = request.client_host.clone();
            if let Some(previous) = member.awaiting_join.take() {
                // A second join from the same member replaces the first (its client retried).
                let _ = previous.send(JoinResult::error(member_id, KafkaError::UnknownMemberId));
            }
            member.awaiting_join = awaiting;
            if !member.is_new {
                member.session_deadline = now.instant + member.session_timeout;
            }
        }
    }

    /// A static member came back with no member id: it takes over its old id's place.
    fn replace_static_member(
        &mut self,
        old_id: &str,
        new_id: String,
        request: JoinRequest,
        now: Now,
    ) -> Reply<JoinResult> {
        let Some(mut member) = self.members.remove(old_id) else {
            return Reply::Now(JoinResult::error("", KafkaError::UnknownMemberId));
        };
        // The old incarnation's waits are fenced.
        member.fail_waits(KafkaError::FencedInstanceId);
        let old_leader = self.leader.clone();
        if self.leader.as_deref() == Some(old_id) {
            self.leader = Some(new_id.clone());
        }
        let protocols_unchanged = member.protocols == request.protocols;
        member.member_id = new_id.clone();
        if let Some(instance) = &request.group_instance_id {
            self.static_members.insert(instance.clone(), new_id.clone());
        }
        self.members.insert(new_id.clone(), member);
        let (tx, rx) = oneshot::channel();
        match self.state {
            GroupState::Stable if protocols_unchanged => {
                self.update_member(&new_id, &request, None, now);
                let was_leader = old_leader.as_deref() == Some(old_id);
                let result = if was_leader && request.supports_skip_assignment {
                    // KIP-814: the new incarnation leads, with the members, and keeps the
                    // current assignment instead of computing one.
                    JoinResult {
                        skip_assignment: true,
                        ..self.join_result(&new_id)
                    }
                } else {
                    // The old leader id: a replaced leader does not compute a needless
                    // assignment (that a Stable group would not hand out).
                    JoinResult {
                        members: Vec::new(),
                        leader: old_leader.unwrap_or_default(),
                        ..self.join_result(&new_id)
                    }
                };
                // Answered once stored, so a new coordinator knows the new id.
                if let Some(member) = self.members.get_mut(&new_id) {
                    member.awaiting_store = Some(tx);
                }
                self.writes.push(GroupWrite {
                    value: self.to_value(),
                    completes_sync: None,
                    answers_join: Some((new_id, result)),
                });
                return Reply::Later(rx);
            }
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.update_member(&new_id, &request, Some(tx), now);
                self.prepare_rebalance(now, "a static member rejoined");
            }
            GroupState::PreparingRebalance => {
                self.update_member(&new_id, &request, Some(tx), now);
                self.try_complete_join(now);
            }
            GroupState::Empty | GroupState::Dead => {
                return Reply::Now(JoinResult::error(&new_id, KafkaError::UnknownMemberId));
            }
        }
        Reply::Later(rx)
    }

    /// The member is known, and its instance id (when given) is the one it holds.
    fn check_member(&self, member_id: &str, instance: Option<&str>) -> Result<(), KafkaError> {
        if let Some(instance) = instance {
            match self.static_members.get(instance) {
                Some(holder) if holder == member_id => return Ok(()),
                Some(_) => return Err(KafkaError::FencedInstanceId),
                None => {}
            }
        }
        if self.members.contains_key(member_id) {
            Ok(())
        } else {
            Err(KafkaError::UnknownMemberId)
        }
    }

    fn maybe_prepare_rebalance(&mut self, now: Now, reason: &str) {
        if matches!(
            self.state,
            GroupState::Empty | GroupState::Stable | GroupState::CompletingRebalance
        ) {
            self.prepare_rebalance(now, reason);
        }
    }

    fn prepare_rebalance(&mut self, now: Now, reason: &str) {
        if self.state == GroupState::CompletingRebalance {
            // The assignment being handed out is void.
            for member in self.members.values_mut() {
                member.assignment.clear();
                if let Some(sync) = member.awaiting_sync.take() {
                    let _ = sync.send(SyncResult::error(KafkaError::RebalanceInProgress));
                }
            }
        }
        let timeout = self.rebalance_timeout();
        self.rebalance = Some(if self.state == GroupState::Empty {
            Rebalance {
                deadline: now.instant + self.initial_delay.min(timeout),
                initial: Some(InitialDelay {
                    delay: self.initial_delay,
                    remaining: timeout.saturating_sub(self.initial_delay),
                    member_added: false,
                }),
            }
        } else {
            Rebalance {
                deadline: now.instant + timeout,
                initial: None,
            }
        });
        tracing::info!(group = %self.group_id, generation = self.generation, members = self.members.len(), reason, "rebalance started");
        self.transition(GroupState::PreparingRebalance, now);
        // Every remaining member may already be waiting (or none is left).
        self.try_complete_join(now);
    }

    fn rebalance_timeout(&self) -> Duration {
        self.members
            .values()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or_default()
    }

    /// Completes the join phase once every member has rejoined (not during an initial delay).
    fn try_complete_join(&mut self, now: Now) {
        let Some(rebalance) = self.rebalance else {
            return;
        };
        if self.state != GroupState::PreparingRebalance {
            return;
        }
        let all_joined = self.pending_members.is_empty()
            && self.members.values().all(|m| m.awaiting_join.is_some());
        let due = rebalance.deadline <= now.instant;
        if rebalance.initial.is_some() {
            if due {
                self.initial_delay_expired(now);
            }
        } else if all_joined || due {
            self.complete_join(now);
        }
    }

    fn initial_delay_expired(&mut self, now: Now) {
        let Some(Rebalance {
            initial: Some(initial),
            ..
        }) = self.rebalance
        else {
            return;
        };
        if initial.member_added && !initial.remaining.is_zero() {
            let delay = initial.delay.min(initial.remaining);
            self.rebalance = Some(Rebalance {
                deadline: now.instant + delay,
                initial: Some(InitialDelay {
                    delay: initial.delay,
                    remaining: initial.remaining.saturating_sub(delay),
                    member_added: false,
                }),
            });
        } else {
            self.complete_join(now);
        }
    }

    fn complete_join(&mut self, now: Now) {
        // Dynamic members that did not rejoin are out; static ones keep their place (their
        // session decides).
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| m.awaiting_join.is_none() && m.group_instance_id.is_none())
            .map(|m| m.member_id.clone())
            .collect();
        for member_id in gone {
            self.remove_member_quietly(&member_id);
        }
        self.pending_members.clear();
        if !self.members.is_empty() && !self.members.values().any(|m| m.awaiting_join.is_some()) {
            // Only static members that have not rejoined: wait for them (or their sessions).
            self.rebalance = Some(Rebalance {
                deadline: now.instant + self.rebalance_timeout(),
                initial: None,
            });
            return;
        }
        if self.leader.as_ref().is_none_or(|l| {
            self.members
                .get(l)
                .is_none_or(|m| m.awaiting_join.is_none())
        }) {
            self.leader = self
                .members
                .values()
                .find(|m| m.awaiting_join.is_some())
                .map(|m| m.member_id.clone());
        }
        self.rebalance = None;
        self.generation += 1;
        if self.members.is_empty() {
            self.protocol = None;
            self.transition(GroupState::Empty, now);
            self.writes.push(GroupWrite {
                value: self.to_value(),
                completes_sync: None,
                answers_join: None,
            });
            tracing::info!(group = %self.group_id, generation = self.generation, "group is empty");
            return;
        }
        self.protocol = self.select_protocol();
        self.transition(GroupState::CompletingRebalance, now);
        tracing::info!(group = %self.group_id, generation = self.generation, members = self.members.len(), leader = self.leader.as_deref().unwrap_or("none"), protocol = self.protocol.as_deref().unwrap_or("none"), "rebalance: members joined");
        let member_ids: Vec<String> = self.members.keys().cloned().collect();
        for member_id in member_ids {
            let result = self.join_result(&member_id);
            if let Some(member) = self.members.get_mut(&member_id) {
                member.is_new = false;
                member.session_deadline = now.instant + member.session_timeout;
                if let Some(join) = member.awaiting_join.take() {
                    let _ = join.send(result);
                }
            }
        }
    }

    /// The protocol every member supports that most members prefer.
    fn select_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        let candidates: Vec<&str> = first
            .protocols
            .iter()
            .map(|(name, _)| name.as_str())
            .filter(|name| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == name))
            })
            .collect();
        let mut votes: Vec<(usize, &str)> = candidates.iter().map(|c| (0, *c)).collect();
        for member in self.members.values() {
            if let Some((name, _)) = member
                .protocols
                .iter()
                .find(|(n, _)| candidates.contains(&n.as_str()))
                && let Some(vote) = votes.iter_mut().find(|(_, c)| c == name)
            {
                vote.0 += 1;
            }
        }
        // Most votes; among equals, the first member's preference.
        let best = votes.iter().map(|(v, _)| *v).max()?;
        votes
            .into_iter()
            .find(|(v, _)| *v == best)
            .map(|(_, c)| c.to_owned())
    }

    fn join_result(&self, member_id: &str) -> JoinResult {
        let leader = self.leader.clone().unwrap_or_default();
        let members = if leader == member_id {
            let protocol = self.protocol.as_deref().unwrap_or_default();
            self.members
                .values()
                .map(|m| JoinedMember {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    metadata: m.metadata(protocol),
                })
                .collect()
        } else {
            Vec::new()
        };
        JoinResult {
            error: Ok(()),
            generation_id: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol.clone(),
            leader,
            member_id: member_id.to_owned(),
            members,
            skip_assignment: false,
        }
    }

    // ---- SyncGroup ----

    #[allow(clippy::too_many_arguments)]
    pub fn sync(
        &mut self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        assignments: Vec<(String, Vec<u8>)>,
        now: Now,
    ) -> Reply<SyncResult> {
        if self.state == GroupState::Dead {
            return Reply::Now(SyncResult::error(KafkaError::CoordinatorNotAvailable));
        }
        if let Err(error) = self.check_member(member_id, group_instance_id) {
            return Reply::Now(SyncResult::error(error));
        }
        if generation_id != self.generation {
            return Reply::Now(SyncResult::error(KafkaError::IllegalGeneration));
        }
        if protocol_type.is_some_and(|t| Some(t) != self.protocol_type.as_deref())
            || protocol_name.is_some_and(|p| Some(p) != self.protocol.as_deref())
        {
            return Reply::Now(SyncResult::error(KafkaError::InconsistentGroupProtocol));
        }
        match self.state {
            GroupState::Empty | GroupState::Dead => {
                Reply::Now(SyncResult::error(KafkaError::UnknownMemberId))
            }
            GroupState::PreparingRebalance => {
                Reply::Now(SyncResult::error(KafkaError::RebalanceInProgress))
            }
            GroupState::CompletingRebalance => {
                let (tx, rx) = oneshot::channel();
                if let Some(member) = self.members.get_mut(member_id) {
                    member.awaiting_sync = Some(tx);
                    member.session_deadline = now.instant + member.session_timeout;
                }
                if self.leader.as_deref() == Some(member_id) {
                    let mut assigned: HashMap<String, Vec<u8>> = assignments.into_iter().collect();
                    for member in self.members.values_mut() {
                        member.assignment = assigned.remove(&member.member_id).unwrap_or_default();
                    }
                    self.writes.push(GroupWrite {
                        value: self.to_value(),
                        completes_sync: Some(self.generation),
                        answers_join: None,
                    });
                }
                Reply::Later(rx)
            }
            GroupState::Stable => {
                let member = &self.members[member_id];
                Reply::Now(SyncResult {
                    error: Ok(()),
                    protocol_type: self.protocol_type.clone(),
                    protocol_name: self.protocol.clone(),
                    assignment: member.assignment.clone(),
                })
            }
        }
    }

    /// A write the coordinator appended is stored (`stored` is `Ok`) or failed.
    pub fn write_done(&mut self, write: &GroupWrite, stored: Result<(), KafkaError>, now: Now) {
        if let Some((member_id, result)) = &write.answers_join
            && let Some(member) = self.members.get_mut(member_id)
            && let Some(join) = member.awaiting_store.take()
        {
            let _ = join.send(match stored {
                Ok(()) => result.clone(),
                Err(error) => JoinResult::error(member_id, error),
            });
        }
        let Some(generation) = write.completes_sync else {
            return;
        };
        if self.state != GroupState::CompletingRebalance || self.generation != generation {
            return;
        }
        if let Err(error) = stored {
            // Kafka's answer: the members rejoin.
            for member in self.members.values_mut() {
                member.assignment.clear();
                if let Some(sync) = member.awaiting_sync.take() {
                    let _ = sync.send(SyncResult::error(error));
                }
            }
            self.prepare_rebalance(now, "storing the assignment failed");
            return;
        }
        self.transition(GroupState::Stable, now);
        tracing::info!(group = %self.group_id, generation, members = self.members.len(), "group stable");
        let (protocol_type, protocol) = (self.protocol_type.clone(), self.protocol.clone());
        for member in self.members.values_mut() {
            member.session_deadline = now.instant + member.session_timeout;
            if let Some(sync) = member.awaiting_sync.take() {
                let _ = sync.send(SyncResult {
                    error: Ok(()),
                    protocol_type: protocol_type.clone(),
                    protocol_name: protocol.clone(),
                    assignment: member.assignment.clone(),
                });
            }
        }
    }

    // ---- Heartbeat, LeaveGroup, sessions ----

    pub fn heartbeat(
        &mut self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
        now: Now,
    ) -> Result<(), KafkaError> {
        if self.state == GroupState::Dead {
            return Err(KafkaError::CoordinatorNotAvailable);
        }
        self.check_member(member_id, group_instance_id)?;
        if self.state == GroupState::Empty {
            return Err(KafkaError::UnknownMemberId);
        }
        if generation_id != self.generation {
            return Err(KafkaError::IllegalGeneration);
        }
        if let Some(member) = self.members.get_mut(member_id) {
            member.session_deadline = now.instant + member.session_timeout;
        }
        match self.state {
            GroupState::PreparingRebalance => Err(KafkaError::RebalanceInProgress),
            _ => Ok(()),
        }
    }

    /// LeaveGroup for each member: left, or its error (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID).
    pub fn leave(&mut self, leaving: &[Leaving], now: Now) -> Vec<Result<(), KafkaError>> {
        let mut results = Vec::with_capacity(leaving.len());
        for member in leaving {
            let member_id = match &member.group_instance_id {
                Some(instance) => match self.static_members.get(instance) {
                    Some(holder) if member.member_id.is_empty() || *holder == member.member_id => {
                        holder.clone()
                    }
                    Some(_) => {
                        results.push(Err(KafkaError::FencedInstanceId));
                        continue;
                    }
                    None => {
                        results.push(Err(KafkaError::UnknownMemberId));
                        continue;
                    }
                },
                None => member.member_id.clone(),
            };
            if self.pending_members.remove(&member_id).is_some() {
                // The join phase may have been waiting only for it.
                self.try_complete_join(now);
                results.push(Ok(()));
                continue;
            }
            if !self.members.contains_key(&member_id) {
                results.push(Err(KafkaError::UnknownMemberId));
                continue;
            }
            self.remove_member(&member_id, now, "a member left");
            results.push(Ok(()));
        }
        results
    }

    /// Removes a member and starts (or moves on) a rebalance.
    fn remove_member(&mut self, member_id: &str, now: Now, reason: &str) {
        self.remove_member_quietly(member_id);
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance(now, reason)
            }
            GroupState::PreparingRebalance => self.try_complete_join(now),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    fn remove_member_quietly(&mut self, member_id: &str) {
        let Some(mut member) = self.members.remove(member_id) else {
            return;
        };
        member.fail_waits(KafkaError::UnknownMemberId);
        if let Some(instance) = &member.group_instance_id
            && self.static_members.get(instance).map(String::as_str) == Some(member_id)
        {
            self.static_members.remove(instance);
        }
        if self.leader.as_deref() == Some(member_id) {
            self.leader = self.members.keys().next().cloned();
        }
    }

    /// Expired sessions, pending members and rebalance deadlines, as of `now`.
    pub fn tick(&mut self, now: Now) {
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| m.expirable() && m.session_deadline <= now.instant)
            .map(|m| m.member_id.clone())
            .collect();
        for member_id in expired {
            tracing::info!(group = %self.group_id, member = %member_id, "member session expired");
            self.remove_member(&member_id, now, "a member's session expired");
        }
        let before = self.pending_members.len();
        self.pending_members
            .retain(|_, deadline| *deadline > now.instant);
        if self.pending_members.len() != before {
            self.try_complete_join(now);
        }
        if self.rebalance.is_some_and(|r| r.deadline <= now.instant) {
            self.try_complete_join(now);
        }
    }

    // ---- offsets and admin ----

    /// Whether an OffsetCommit from this member and generation may commit, or its error.
    /// Generation -1 with no member id is a commit from outside the group (an admin tool or a
    /// consumer with manual assignment), allowed while the group has no members.
    pub fn check_commit(
        &self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
    ) -> Result<(), KafkaError> {
        if self.state == GroupState::Dead {
            return Err(KafkaError::CoordinatorNotAvailable);
        }
        // Kafka: any commit with a negative generation while the group has no members.
        if generation_id < 0 && self.members.is_empty() {
            return Ok(());
        }
        self.check_member(member_id, group_instance_id)?;
        if generation_id != self.generation {
            return Err(KafkaError::IllegalGeneration);
        }
        match self.state {
            GroupState::CompletingRebalance => Err(KafkaError::RebalanceInProgress),
            GroupState::Empty => Err(KafkaError::UnknownMemberId),
            _ => Ok(()),
        }
    }

    /// A member's commit is as good as a heartbeat.
    pub fn commit_seen(&mut self, member_id: &str, now: Now) {
        if let Some(member) = self.members.get_mut(member_id) {
            member.session_deadline = member
                .session_deadline
                .max(now.instant + member.session_timeout);
        }
    }

    /// Topics the members subscribe to (consumer protocol), for OffsetDelete.
    pub fn subscribed_topics(&self) -> Option<std::collections::BTreeSet<String>> {
        if self.protocol_type.as_deref() != Some("consumer") || self.members.is_empty() {
            return None;
        }
        let protocol = self.protocol.as_deref()?;
        let mut topics = std::collections::BTreeSet::new();
        for member in self.members.values() {
            topics.extend(subscription_topics(&member.metadata(protocol)));
        }
        Some(topics)
    }

    /// DeleteGroups: refused while members remain.
    pub fn check_delete(&self) -> Result<(), KafkaError> {
        match self.state {
            GroupState::Dead => Err(KafkaError::GroupIdNotFound),
            GroupState::Empty => Ok(()),
            _ => Err(KafkaError::NonEmptyGroup),
        }
    }

    pub fn mark_dead(&mut self, now: Now) {
        for member_id in self.members.keys().cloned().collect::<Vec<_>>() {
            self.remove_member_quietly(&member_id);
        }
        self.pending_members.clear();
        self.rebalance = None;
        self.offsets.clear();
        self.transition(GroupState::Dead, now);
    }

    /// The coordinator moved away: every waiting member is told to find it again.
    pub fn unload(&mut self) {
        for member in self.members.values_mut() {
            member.fail_waits(KafkaError::NotCoordinator);
        }
    }

    /// Offsets that expired as of `now` (`offsets.retention.minutes`): all of an empty
    /// group's, once it has been empty that long; a group with no protocol (commits only) by
    /// each offset's commit time.
    pub fn expired_offsets(&self, retention: Duration, now: Now) -> Vec<TopicPartition> {
        let retention_ms = retention.as_millis() as i64;
        if self.state != GroupState::Empty {
            return Vec::new();
        }
        let group_expired = now.wall_ms.saturating_sub(self.state_since_ms) >= retention_ms;
        self.offsets
            .iter()
            .filter(|(_, o)| {
                if self.protocol_type.is_some() {
                    group_expired
                } else {
                    now.wall_ms.saturating_sub(o.commit_timestamp_ms) >= retention_ms
                }
            })
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// The group's metadata record as of now.
    pub fn to_value(&self) -> GroupValue {
        GroupValue {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation,
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            current_state_timestamp_ms: self.state_since_ms,
            members: self
                .members
                .values()
                .map(|m| m.to_value(self.protocol.as_deref()))
                .collect(),
        }
    }

    /// DescribeGroups' view: protocol metadata and assignments only when Stable (Kafka's).
    pub fn describe(&self) -> GroupDescription {
        let stable = self.state == GroupState::Stable;
        GroupDescription {
            state: self.state,
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol: if stable {
                self.protocol.clone().unwrap_or_default()
            } else {
                String::new()
            },
            members: self
                .members
                .values()
                .map(|m| DescribedMember {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: if stable {
                        m.metadata(self.protocol.as_deref().unwrap_or_default())
                    } else {
                        Vec::new()
                    },
                    assignment: if stable {
                        m.assignment.clone()
                    } else {
                        Vec::new()
                    },
                })
                .collect(),
        }
    }

    /// Cheap checks of the group's structure (after every operation, release builds too).
    pub fn check(&self) -> Result<(), String> {
        if let Some(broken) = &self.broken {
            return Err(broken.clone());
        }
        for (instance, member_id) in &self.static_members {
            if self
                .members
                .get(member_id)
                .is_none_or(|m| m.group_instance_id.as_deref() != Some(instance))
            {
                return Err(format!(
                    "static member {instance} -> {member_id} is not a member"
                ));
            }
        }
        if let Some(leader) = &self.leader
            && !self.members.is_empty()
            && !self.members.contains_key(leader)
        {
            return Err(format!("leader {leader} is not a member"));
        }
        let ok = match self.state {
            GroupState::Empty | GroupState::Dead => self.members.is_empty(),
            GroupState::PreparingRebalance => self.rebalance.is_some(),
            GroupState::Stable | GroupState::CompletingRebalance => {
                !self.members.is_empty() && self.members.values().all(|m| m.awaiting_join.is_none())
            }
        };
        if !ok {
            return Err(format!(
                "{} with {} members",
                self.state.name(),
                self.members.len()
            ));
        }
        if self.state == GroupState::Stable
            && self.stored.as_ref().map(|v| v.generation) != Some(self.generation)
        {
            return Err(format!(
                "Stable at generation {} but stored {:?}",
                self.generation,
                self.stored.as_ref().map(|v| v.generation)
            ));
        }
        Ok(())
    }

    /// Whether nothing of the group would be loaded: no stored metadata, no offsets, no one
    /// in it (the shard drops such a group).
    pub fn is_vacant(&self) -> bool {
        self.state == GroupState::Empty
            && self.stored.is_none()
            && self.offsets.is_empty()
            && self.pending_members.is_empty()
    }

    /// After a load: the group as its stored metadata left it (members get a full session
    /// from now).
    pub fn restore_stored(&mut self, now: Now) {
        if self.state != GroupState::Empty || !self.members.is_empty() {
            return;
        }
        let Some(stored) = self.stored.clone() else {
            return;
        };
        let mut restored = ClassicGroup::restore(&self.group_id, stored, self.initial_delay, now);
        restored.offsets = std::mem::take(&mut self.offsets);
        *self = restored;
    }
}

/// Every transition the table in the module doc allows.
fn valid_transition(from: GroupState, to: GroupState) -> bool {
    use GroupState::*;
    matches!(
        (from, to),
        (Empty, PreparingRebalance)
            | (PreparingRebalance, PreparingRebalance)
            | (PreparingRebalance, CompletingRebalance)
            | (PreparingRebalance, Empty)
            | (CompletingRebalance, Stable)
            | (CompletingRebalance, PreparingRebalance)
            | (Stable, PreparingRebalance)
            | (_, Dead)
    )
}

#[derive(Debug, Clone)]
pub struct GroupDescription {
    pub state: GroupState,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<DescribedMember>,
}

#[derive(Debug, Clone)]
pub struct DescribedMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Vec<u8>,
    pub assignment: Vec<u8>,
}

/// The topics of a consumer protocol subscription (`ConsumerProtocolSubscription`, any
/// version: a version, then the topics as an array of strings). The bytes are the client's:
/// every count and length is checked against what is there, and what does not parse names
/// no topics.
fn subscription_topics(metadata: &[u8]) -> Vec<String> {
    fn take<'a>(input: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = input.split_at_checked(n)?;
        *input = rest;
        Some(head)
    }
    let parse = |mut input: &[u8]| -> Option<Vec<String>> {
        take(&mut input, 2)?;
        let count = i32::from_be_bytes(take(&mut input, 4)?.try_into().ok()?);
        // Each topic takes at least its two length bytes.
        if count < 0 || count as usize > input.len() / 2 {
            return None;
        }
        let mut topics = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let length = i16::from_be_bytes(take(&mut input, 2)?.try_into().ok()?);
            let name = take(&mut input, usize::try_from(length).ok()?)?;
            topics.push(String::from_utf8(name.to_vec()).ok()?);
        }
        Some(topics)
    };
    parse(metadata).unwrap_or_default()
}

/// `<prefix>-<uuid>`, as Kafka names members.
fn new_member_id(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        uuid::Uuid::from_u128(crate::protocol::random_u128())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> GroupConfig {
        crate::group::test_config()
    }

    /// Time that moves only when told.
    struct Clock {
        base: Instant,
        elapsed: Duration,
    }

    impl Clock {
        fn new() -> Clock {
            Clock {
                base: Instant::now(),
                elapsed: Duration::ZERO,
            }
        }
        fn now(&self) -> Now {
            Now {
                instant: self.base + self.elapsed,
                wall_ms: 1_700_000_000_000 + self.elapsed.as_millis() as i64,
            }
        }
        fn advance(&mut self, ms: u64) -> Now {
            self.elapsed += Duration::from_millis(ms);
            self.now()
        }
    }

    fn request(member_id: &str, instance: Option<&str>, protocols: &[&str]) -> JoinRequest {
        JoinRequest {
            member_id: member_id.into(),
            group_instance_id: instance.map(str::to_owned),
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            protocol_type: "consumer".into(),
            protocols: protocols
                .iter()
                .map(|p| ((*p).to_owned(), p.as_bytes().to_vec()))
                .collect(),
            require_known_member_id: true,
            supports_skip_assignment: false,
        }
    }

    /// What the shard does when a write is committed: the record replayed, then the group
    /// told.
    fn stored(group: &mut ClassicGroup, write: &GroupWrite, now: Now) {
        group.stored = Some(write.value.clone());
        group.write_done(write, Ok(()), now);
    }

    fn now_result<T: std::fmt::Debug>(reply: Reply<T>) -> T {
        match reply {
            Reply::Now(result) => result,
            Reply::Later(_) => panic!("expected an answer now"),
        }
    }

    fn later<T: std::fmt::Debug>(reply: Reply<T>) -> oneshot::Receiver<T> {
        match reply {
            Reply::Later(receiver) => receiver,
            Reply::Now(result) => panic!("expected to wait, got {result:?}"),
        }
    }

    fn answered<T>(receiver: &mut oneshot::Receiver<T>) -> Option<T> {
        receiver.try_recv().ok()
    }

    /// A member joins a group (KIP-394 round trip) and waits.
    fn join_new(
        group: &mut ClassicGroup,
        clock: &Clock,
    ) -> (String, oneshot::Receiver<JoinResult>) {
        let first = now_result(group.join(request("", None, &["range"]), &config(), clock.now()));
        assert_eq!(first.error, Err(KafkaError::MemberIdRequired));
        let id = first.member_id;
        let receiver = later(group.join(request(&id, None, &["range"]), &config(), clock.now()));
        group.check().unwrap();
        (id, receiver)
    }

    /// The leader syncs, the store succeeds, the group is Stable.
    fn sync_and_store(group: &mut ClassicGroup, leader: &str, members: &[&str], clock: &Clock) {
        let generation = group.generation();
        let assignments = members
            .iter()
            .map(|m| ((*m).to_owned(), m.as_bytes().to_vec()))
            .collect();
        let mut receiver = later(group.sync(
            leader,
            None,
            generation,
            None,
            None,
            assignments,
            clock.now(),
        ));
        let writes = group.take_writes();
        assert_eq!(writes.len(), 1);
        assert_eq!(writes[0].completes_sync, Some(generation));
        assert!(answered(&mut receiver).is_none(), "answered before stored");
        stored(group, &writes[0], clock.now());
        let result = answered(&mut receiver).expect("answered once stored");
        assert_eq!(
            (result.error, result.assignment),
            (Ok(()), leader.as_bytes().to_vec())
        );
        assert_eq!(group.state(), GroupState::Stable);
        group.check().unwrap();
    }

    #[test]
    fn two_members_rebalance_and_a_stale_generation_is_fenced() {
        let clock = Clock::new();
        let mut group = ClassicGroup::new("g", Duration::ZERO, clock.now());
        let (a, mut a_join) = join_new(&mut group, &clock);
        let joined = answered(&mut a_join).expect("a lone member joins at once");
        assert_eq!(
            (joined.generation_id, joined.leader.as_str()),
            (1, a.as_str())
        );
        assert_eq!(joined.members.len(), 1);
        sync_and_store(&mut group, &a, &[&a], &clock);
        assert_eq!(group.heartbeat(&a, None, 1, clock.now()), Ok(()));

        // B joins: A is told to rejoin through its heartbeat.
        let (b, mut b_join) = join_new(&mut group, &clock);
        assert_eq!(group.state(), GroupState::PreparingRebalance);
        assert!(answered(&mut b_join).is_none());
        assert_eq!(
            group.heartbeat(&a, None, 1, clock.now()),
            Err(KafkaError::RebalanceInProgress)
        );
        assert_eq!(
            group.check_commit(&a, None, 1),
            Ok(()),
            "commits allowed while preparing"
        );
        let mut a_join = later(group.join(request(&a, None, &["range"]), &config(), clock.now()));
        let a_result = answered(&mut a_join).expect("all members joined");
        let b_result = answered(&mut b_join).expect("all members joined");
        assert_eq!((a_result.generation_id, b_result.generation_id), (2, 2));
        assert_eq!(a_result.members.len(), 2, "the leader gets every member");
        assert!(b_result.members.is_empty());
        assert_eq!(group.state(), GroupState::CompletingRebalance);
        assert_eq!(
            group.check_commit(&b, None, 2),
            Err(KafkaError::RebalanceInProgress)
        );
        // B syncs before the leader: it waits for the assignment.
        let mut b_sync = later(group.sync(&b, None, 2, None, None, Vec::new(), clock.now()));
        sync_and_store(&mut group, &a, &[&a, &b], &clock);
        assert_eq!(
            answered(&mut b_sync).map(|r| r.assignment),
            Some(b.as_bytes().to_vec())
        );

        // The old generation is fenced everywhere.
        assert_eq!(
            group.check_commit(&a, None, 1),
            Err(KafkaError::IllegalGeneration)
        );
        assert_eq!(
            group.heartbeat(&b, None, 1, clock.now()),
            Err(KafkaError::IllegalGeneration)
        );
        assert_eq!(
            now_result(group.sync(&b, None, 1, None, None, Vec::new(), clock.now())).error,
            Err(KafkaError::IllegalGeneration)
        );
        assert_eq!(
            group.check_commit("nobody", None, 2),
            Err(KafkaError::UnknownMemberId)
        );
        assert_eq!(
            group.check_commit("", None, -1),
            Err(KafkaError::UnknownMemberId),
            "the group has members"
        );
        assert_eq!(group.check_commit(&b, None, 2), Ok(()));
    }

    #[test]
    fn a_member_that_leaves_or_expires_hands_its_partitions_on() {
        let mut clock = Clock::new();
        let mut group = ClassicGroup::new("g", Duration::ZERO, clock.now());
        let (a, mut a_join) = join_new(&mut group, &clock);
        answered(&mut a_join).unwrap();
        sync_and_store(&mut group, &a, &[&a], &clock);
        let (b, mut b_join) = join_new(&mut group, &clock);
        let mut a_join = later(group.join(request(&a, None, &["range"]), &config(), clock.now()));
        answered(&mut a_join).unwrap();
        answered(&mut b_join).unwrap();
        sync_and_store(&mut group, &a, &[&a, &b], &clock);

        // A leaves: B must rejoin, and alone it completes the rebalance as leader.
        assert_eq!(
            group.leave(
                &[Leaving {
                    member_id: a.clone(),
                    group_instance_id: None
                }],
                clock.now()
            ),
            vec![Ok(())]
        );
        assert_eq!(group.state(), GroupState::PreparingRebalance);
        let mut b_join = later(group.join(request(&b, None, &["range"]), &config(), clock.now()));
        let result = answered(&mut b_join).unwrap();
        assert_eq!(
            (result.generation_id, result.leader.as_str()),
            (3, b.as_str())
        );
        sync_and_store(&mut group, &b, &[&b], &clock);

        // B stops heartbeating: after its session the group is empty, and that is stored.
        let now = clock.advance(9_999);
        group.tick(now);
        assert_eq!(group.state(), GroupState::Stable);
        let now = clock.advance(2);
        assert_eq!(group.next_deadline().map(|d| d <= now.instant), Some(true));
        group.tick(now);
        assert_eq!(group.state(), GroupState::Empty);
        let writes = group.take_writes();
        assert_eq!(writes.len(), 1);
        assert!(writes[0].value.members.is_empty());
        group.check().unwrap();
        assert_eq!(
            group.heartbeat(&b, None, 3, now),
            Err(KafkaError::UnknownMemberId)
        );
        assert_eq!(
            group.check_commit("", None, -1),
            Ok(()),
            "an empty group takes tool commits"
        );
        assert_eq!(group.check_delete(), Ok(()));
    }

    #[test]
    fn a_member_that_does_not_rejoin_is_removed_at_the_rebalance_timeout() {
        let mut clock = Clock::new();
        let mut group = ClassicGroup::new("g", Duration::ZERO, clock.now());
        let (a, mut a_join) = join_new(&mut group, &clock);
        answered(&mut a_join).unwrap();
        sync_and_store(&mut group, &a, &[&a], &clock);
        let (b, mut b_join) = join_new(&mut group, &clock);
        // A keeps heartbeating but never rejoins.
        for _ in 0..5 {
            let now = clock.advance(5_000);
            assert_eq!(
                group.heartbeat(&a, None, 1, now),
                Err(KafkaError::RebalanceInProgress)
            );
            group.tick(now);
        }
        assert!(answered(&mut b_join).is_none());
        let now = clock.advance(5_001);
        group.tick(now);
        let result = answered(&mut b_join).expect("completed at the rebalance timeout");
        assert_eq!(
            (
                result.generation_id,
                result.leader.as_str(),
                result.members.len()
            ),
            (2, b.as_str(), 1)
        );
        assert!(!group.is_member(&a));
    }

    #[test]
    fn the_initial_delay_waits_for_more_members_then_completes() {
        let mut clock = Clock::new();
        let mut group = ClassicGroup::new("g", Duration::from_millis(3_000), clock.now());
        let (_a, mut a_join) = join_new(&mut group, &clock);
        let now = clock.advance(2_000);
        group.tick(now);
        assert!(answered(&mut a_join).is_none());
        let (_b, mut b_join) = join_new(&mut group, &clock);
        // A member arrived during the delay: it is extended once more.
        let now = clock.advance(1_000);
        group.tick(now);
        assert!(answered(&mut a_join).is_none());
        let now = clock.advance(3_000);
        group.tick(now);
        let a_result = answered(&mut a_join).expect("joined after the delay");
        let b_result = answered(&mut b_join).expect("joined after the delay");
        assert_eq!((a_result.generation_id, b_result.generation_id), (1, 1));
        assert_eq!(a_result.members.len() + b_result.members.len(), 2);
    }

    #[test]
    fn a_static_member_restarts_without_a_rebalance_and_its_old_id_is_fenced() {
        let clock = Clock::new();
        let mut group = ClassicGroup::new("g", Duration::ZERO, clock.now());
        let mut join =
            later(group.join(request("", Some("i1"), &["range"]), &config(), clock.now()));
        let first = answered(&mut join).expect("static members need no member id round trip");
        let old = first.member_id;
        assert!(old.starts_with("i1-"));
        sync_and_store(&mut group, &old, &[&old], &clock);

        let mut rejoin =
            later(group.join(request("", Some("i1"), &["range"]), &config(), clock.now()));
        let writes = group.take_writes();
        assert_eq!(writes.len(), 1, "the new id is stored");
        assert!(answered(&mut rejoin).is_none(), "answered before stored");
        stored(&mut group, &writes[0], clock.now());
        let rejoined = answered(&mut rejoin).expect("answered once stored");
        assert_eq!(rejoined.error, Ok(()));
        assert_eq!(group.state(), GroupState::Stable, "no rebalance");
        assert_eq!(rejoined.generation_id, 1);
        assert_ne!(rejoined.member_id, old);
        // The old leader id is returned so the replaced leader does not reassign.
        assert_eq!(rejoined.leader, old);
        let new = rejoined.member_id;
        let assignment =
            now_result(group.sync(&new, Some("i1"), 1, None, None, Vec::new(), clock.now()));
        assert_eq!(
            assignment.assignment,
            old.as_bytes().to_vec(),
            "keeps its assignment"
        );
        assert_eq!(
            group.heartbeat(&old, Some("i1"), 1, clock.now()),
            Err(KafkaError::FencedInstanceId)
        );
        assert_eq!(
            group.heartbeat(&old, None, 1, clock.now()),
            Err(KafkaError::UnknownMemberId)
        );
        assert_eq!(group.heartbeat(&new, Some("i1"), 1, clock.now()), Ok(()));
        group.check().unwrap();
    }

    #[test]
    fn inconsistent_protocols_and_full_groups_are_refused() {
        let clock = Clock::new();
        let mut group = ClassicGroup::new("g", Duration::ZERO, clock.now());
        let (a, mut a_join) = join_new(&mut group, &clock);
        answered(&mut a_join).unwrap();
        let mut other = request("", None, &["roundrobin"]);
        other.require_known_member_id = false;
        assert_eq!(
            now_result(group.join(other, &config(), clock.now())).error,
            Err(KafkaError::InconsistentGroupProtocol)
        );
        let mut empty = request("", None, &[]);
        empty.protocols.clear();
        assert_eq!(
            now_result(group.join(empty, &config(), clock.now())).error,
            Err(KafkaError::InconsistentGroupProtocol)
        );
        let small = GroupConfig {
            max_size: 1,
            ..config()
        };
        assert_eq!(
            now_result(group.join(request("", None, &["range"]), &small, clock.now())).error,
            Err(KafkaError::GroupMaxSizeReached)
        );
        assert_eq!(
            now_result(group.join(request("ghost", None, &["range"]), &config(), clock.now()))
                .error,
            Err(KafkaError::UnknownMemberId)
        );
        assert!(group.is_member(&a));
    }

    #[test]
    fn a_failed_assignment_store_sends_members_to_rejoin() {
        let clock = Clock::new();
        let mut group = ClassicGroup::new("g", Duration::ZERO, clock.now());
        let (a, mut a_join) = join_new(&mut group, &clock);
        answered(&mut a_join).unwrap();
        let mut sync = later(group.sync(
            &a,
            None,
            1,
            None,
            None,
            vec![(a.clone(), vec![1])],
            clock.now(),
        ));
        let writes = group.take_writes();
        group.write_done(&writes[0], Err(KafkaError::NotCoordinator), clock.now());
        assert_eq!(
            answered(&mut sync).map(|r| r.error),
            Some(Err(KafkaError::NotCoordinator))
        );
        assert_eq!(group.state(), GroupState::PreparingRebalance);
        group.check().unwrap();
    }

    #[test]
    fn a_stored_group_comes_back_stable_with_its_members() {
        let clock = Clock::new();
        let mut group = ClassicGroup::new("g", Duration::ZERO, clock.now());
        let mut join =
            later(group.join(request("", Some("i1"), &["range"]), &config(), clock.now()));
        let id = answered(&mut join).unwrap().member_id;
        sync_and_store(&mut group, &id, &[&id], &clock);
        let restored = ClassicGroup::restore("g", group.to_value(), Duration::ZERO, clock.now());
        assert_eq!(restored.state(), GroupState::Stable);
        assert_eq!(restored.generation(), 1);
        assert_eq!(restored.to_value(), group.to_value());
        restored.check().unwrap();
        let description = restored.describe();
        assert_eq!(description.members[0].assignment, id.as_bytes().to_vec());
    }

    #[test]
    fn offsets_expire_only_after_the_group_has_been_empty_for_the_retention() {
        let mut clock = Clock::new();
        let mut group = ClassicGroup::new("g", Duration::ZERO, clock.now());
        let offset = |ms| CommittedOffset {
            offset: 1,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: ms,
        };
        // A group that only stores offsets (no protocol): each offset by its commit time.
        group
            .offsets
            .insert(TopicPartition::new("t", 0), offset(clock.now().wall_ms));
        let retention = Duration::from_secs(60);
        assert!(
            group
                .expired_offsets(retention, clock.advance(59_999))
                .is_empty()
        );
        group
            .offsets
            .insert(TopicPartition::new("t", 1), offset(clock.now().wall_ms));
        assert_eq!(
            group.expired_offsets(retention, clock.advance(1)),
            vec![TopicPartition::new("t", 0)]
        );

        // A consumer group: nothing expires while it has members, everything once it has
        // been empty for the retention.
        let (a, mut join) = join_new(&mut group, &clock);
        answered(&mut join).unwrap();
        sync_and_store(&mut group, &a, &[&a], &clock);
        assert!(
            group
                .expired_offsets(retention, clock.advance(120_000))
                .is_empty()
        );
        group.leave(
            &[Leaving {
                member_id: a,
                group_instance_id: None,
            }],
            clock.now(),
        );
        assert_eq!(group.state(), GroupState::Empty);
        assert!(
            group
                .expired_offsets(retention, clock.advance(59_000))
                .is_empty()
        );
        assert_eq!(
            group.expired_offsets(retention, clock.advance(1_000)).len(),
            2
        );
    }

    #[test]
    fn a_new_member_whose_join_never_completes_is_dropped_after_five_minutes() {
        let mut clock = Clock::new();
        let mut group = ClassicGroup::new("g", Duration::ZERO, clock.now());
        let (a, mut a_join) = join_new(&mut group, &clock);
        answered(&mut a_join).unwrap();
        sync_and_store(&mut group, &a, &[&a], &clock);
        // B joins; A keeps heartbeating but never rejoins, with a long rebalance timeout.
        let mut slow = request("", None, &["range"]);
        slow.rebalance_timeout_ms = 3_600_000;
        slow.require_known_member_id = false;
        let mut b_join = later(group.join(slow, &config(), clock.now()));
        for _ in 0..30 {
            let now = clock.advance(10_000);
            assert_eq!(
                group.heartbeat(&a, None, 1, now),
                Err(KafkaError::RebalanceInProgress)
            );
            group.tick(now);
        }
        assert_eq!(
            answered(&mut b_join).map(|r| r.error),
            Some(Err(KafkaError::UnknownMemberId)),
            "the new member is dropped at 5 minutes"
        );
        assert_eq!(group.member_count(), 1);
        group.check().unwrap();
    }

    #[test]
    fn subscriptions_are_read_within_their_bytes() {
        // Version 1, two topics, then user data that is not read.
        let mut metadata = vec![0, 1, 0, 0, 0, 2, 0, 1, b'a', 0, 2, b'b', b'c'];
        metadata.extend_from_slice(&[0, 0, 0, 0]);
        assert_eq!(subscription_topics(&metadata), vec!["a", "bc"]);
        // A client's bytes that are no subscription: a count of 1.9 billion topics in eight
        // bytes names none (it once reserved 62 GB for them, which aborts a process without
        // the broker's lazy allocator).
        assert!(subscription_topics(b"metadata").is_empty());
        assert!(subscription_topics(&[0, 0, 0, 0, 0, 1, 0, 9, b'x']).is_empty());
        assert!(subscription_topics(&[0, 0, 255, 255, 255, 255]).is_empty());
        assert!(subscription_topics(&[]).is_empty());
    }
}
