//! One KIP-848 consumer group (`group.protocol=consumer`): members heartbeat
//! (ConsumerGroupHeartbeat) with their subscriptions and the partitions they own; the
//! coordinator computes the group's target assignment itself (server-side `uniform` or
//! `range` assignor) and walks each member to its target on its own heartbeats, so no member
//! stops for another's rebalance.
//!
//! Epochs: the group epoch moves when membership, subscriptions or the subscribed topics'
//! partitions change; the target assignment is recomputed at once (the assignment epoch
//! equals the group epoch). A member's epoch reaches the assignment epoch once it has given
//! up the partitions its target no longer holds; it is then given those of its target that no
//! other member still owns.
//!
//! ```text
//! member at epoch E, target T at epoch A      next
//! owns partitions outside T                   keeps owned ∩ T, the rest pending revocation,
//!                                             epoch stays E (revoke by rebalance timeout)
//! revoked (heartbeat without them)            epoch A, plus the free partitions of T
//! epoch A, T partitions still owned by others gets them once they are released
//! heartbeat epoch < E (not a lost response)   FENCED_MEMBER_EPOCH: rejoin at epoch 0
//! epoch -1 (or -2, static)                    leaves; the group epoch moves
//! no heartbeat for the session timeout        removed; the group epoch moves
//! ```
//!
//! Membership is kept in memory: after the coordinator moves, members get UNKNOWN_MEMBER_ID
//! and rejoin (committed offsets are durable in `__consumer_offsets` like any group's).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use super::classic::Now;
use super::records::{
    ConsumerMemberValue, CurrentAssignmentValue, RecordKey, encode_epoch_value, encode_target_value,
};
use super::{CommittedOffset, GroupConfig};
use crate::protocol::errors;

/// A partition by topic id (the protocol's form) and index.
pub type Tp = (u128, i32);

/// The topics a group's members subscribe to, as the metadata image has them: name ->
/// (topic id, partition count).
pub type TopicsView = BTreeMap<String, (u128, i32)>;

pub const ASSIGNORS: &[&str] = &["uniform", "range"];

#[derive(Debug, Clone)]
pub struct Heartbeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    /// None: unchanged since the last heartbeat.
    pub subscribed_topic_names: Option<Vec<String>>,
    pub server_assignor: Option<String>,
    /// None: unchanged since the last heartbeat.
    pub owned: Option<Vec<Tp>>,
    pub client_id: String,
    pub client_host: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeartbeatResult {
    pub error: i16,
    pub message: Option<String>,
    pub member_id: String,
    pub member_epoch: i32,
    /// The member's assignment (what it may own now).
    pub assignment: Option<Vec<Tp>>,
}

impl HeartbeatResult {
    fn error(member_id: &str, error: i16, message: impl Into<String>) -> HeartbeatResult {
        HeartbeatResult {
            error,
            message: Some(message.into()),
            member_id: member_id.to_owned(),
            member_epoch: -1,
            assignment: None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ConsumerMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: BTreeSet<String>,
    pub server_assignor: Option<String>,
    rebalance_timeout: Duration,
    pub epoch: i32,
    previous_epoch: i32,
    /// What the member may own now.
    pub assigned: BTreeSet<Tp>,
    /// Given up, not yet confirmed by the member.
    pending_revocation: BTreeSet<Tp>,
    revocation_deadline: Option<Instant>,
    session_deadline: Instant,
    /// A static member that left with epoch -2: its place is kept until its session ends.
    left_static: bool,
}

#[derive(Debug)]
pub struct ConsumerGroup {
    pub group_id: String,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, ConsumerMember>,
    /// The target assignment at `assignment_epoch`.
    pub target: BTreeMap<String, BTreeSet<Tp>>,
    /// The subscribed topics as of the last target computation.
    topics: TopicsView,
    static_members: HashMap<String, String>,
    pub offsets: BTreeMap<(String, i32), CommittedOffset>,
    state_since_ms: i64,
    /// Records owed to `__consumer_offsets` (Kafka's KIP-848 records), in order.
    writes: Vec<(RecordKey, Option<Vec<u8>>)>,
}

/// A member as its records left it (`ConsumerGroup::restore`).
#[derive(Debug, Clone, Default)]
pub struct RestoredMember {
    pub member_id: String,
    pub metadata: ConsumerMemberValue,
    pub current: Option<CurrentAssignmentValue>,
    pub target: Option<Vec<Tp>>,
}

impl ConsumerGroup {
    pub fn new(group_id: &str, now: Now) -> ConsumerGroup {
        ConsumerGroup {
            group_id: group_id.to_owned(),
            group_epoch: 0,
            assignment_epoch: 0,
            members: BTreeMap::new(),
            target: BTreeMap::new(),
            topics: BTreeMap::new(),
            static_members: HashMap::new(),
            offsets: BTreeMap::new(),
            state_since_ms: now.wall_ms,
            writes: Vec::new(),
        }
    }

    /// The group as its records left it: members keep their epochs and partitions and get a
    /// full session from the load to heartbeat again, so a coordinator move costs them
    /// nothing. The subscribed topics are looked at again on the first heartbeat.
    pub fn restore(
        group_id: &str,
        group_epoch: i32,
        assignment_epoch: i32,
        restored: Vec<RestoredMember>,
        session_timeout: Duration,
        now: Now,
    ) -> ConsumerGroup {
        let mut group = ConsumerGroup::new(group_id, now);
        group.group_epoch = group_epoch;
        group.assignment_epoch = assignment_epoch;
        for r in restored {
            let current = r.current.unwrap_or_default();
            let member = ConsumerMember {
                member_id: r.member_id.clone(),
                instance_id: r.metadata.instance_id.clone(),
                rack_id: r.metadata.rack_id.clone(),
                client_id: r.metadata.client_id.clone(),
                client_host: r.metadata.client_host.clone(),
                subscribed: r.metadata.subscribed_topic_names.iter().cloned().collect(),
                server_assignor: r.metadata.server_assignor.clone(),
                rebalance_timeout: Duration::from_millis(
                    r.metadata.rebalance_timeout_ms.max(0) as u64
                ),
                epoch: current.member_epoch,
                previous_epoch: current.previous_member_epoch,
                assigned: current.assigned.iter().copied().collect(),
                pending_revocation: current.pending_revocation.iter().copied().collect(),
                revocation_deadline: None,
                session_deadline: now.instant + session_timeout,
                left_static: false,
            };
            if let Some(instance) = &member.instance_id {
                group
                    .static_members
                    .insert(instance.clone(), r.member_id.clone());
            }
            if let Some(target) = r.target {
                group
                    .target
                    .insert(r.member_id.clone(), target.into_iter().collect());
            }
            group.members.insert(r.member_id, member);
        }
        group
    }

    /// Records owed to `__consumer_offsets`, in the order they must be appended.
    pub fn take_writes(&mut self) -> Vec<(RecordKey, Option<Vec<u8>>)> {
        std::mem::take(&mut self.writes)
    }

    fn write_member(&mut self, member_id: &str) {
        let Some(m) = self.members.get(member_id) else {
            return;
        };
        let value = ConsumerMemberValue {
            instance_id: m.instance_id.clone(),
            rack_id: m.rack_id.clone(),
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            subscribed_topic_names: m.subscribed.iter().cloned().collect(),
            rebalance_timeout_ms: m.rebalance_timeout.as_millis() as i32,
            server_assignor: m.server_assignor.clone(),
        };
        self.writes.push((
            RecordKey::ConsumerMember {
                group: self.group_id.clone(),
                member: member_id.to_owned(),
            },
            Some(value.encode()),
        ));
    }

    fn write_current(&mut self, member_id: &str) {
        let Some(m) = self.members.get(member_id) else {
            return;
        };
        let value = CurrentAssignmentValue {
            member_epoch: m.epoch,
            previous_member_epoch: m.previous_epoch,
            state: if !m.pending_revocation.is_empty() {
                1
            } else if self.target.get(member_id).is_some_and(|t| t != &m.assigned) {
                2
            } else {
                0
            },
            assigned: m.assigned.iter().copied().collect(),
            pending_revocation: m.pending_revocation.iter().copied().collect(),
        };
        self.writes.push((
            RecordKey::CurrentAssignment {
                group: self.group_id.clone(),
                member: member_id.to_owned(),
            },
            Some(value.encode()),
        ));
    }

    fn write_target(&mut self, member_id: &str) {
        let partitions: Vec<Tp> = self
            .target
            .get(member_id)
            .map(|t| t.iter().copied().collect())
            .unwrap_or_default();
        self.writes.push((
            RecordKey::TargetMember {
                group: self.group_id.clone(),
                member: member_id.to_owned(),
            },
            Some(encode_target_value(&partitions)),
        ));
    }

    /// Tombstones for a member that left.
    fn write_member_gone(&mut self, member_id: &str) {
        for key in [
            RecordKey::ConsumerMember {
                group: self.group_id.clone(),
                member: member_id.to_owned(),
            },
            RecordKey::TargetMember {
                group: self.group_id.clone(),
                member: member_id.to_owned(),
            },
            RecordKey::CurrentAssignment {
                group: self.group_id.clone(),
                member: member_id.to_owned(),
            },
        ] {
            self.writes.push((key, None));
        }
    }

    /// Every topic name any member subscribes to (what `TopicsView` must cover).
    pub fn subscribed_topics(&self) -> BTreeSet<String> {
        self.members
            .values()
            .flat_map(|m| m.subscribed.iter().cloned())
            .collect()
    }

    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.group_epoch != self.assignment_epoch {
            "Assigning"
        } else if self.members.values().any(|m| {
            m.epoch != self.assignment_epoch
                || !m.pending_revocation.is_empty()
                || self.target.get(&m.member_id) != Some(&m.assigned)
        }) {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    pub fn state_since_ms(&self) -> i64 {
        self.state_since_ms
    }

    /// The assignor the members ask for (the first named), `uniform` by default.
    pub fn assignor(&self) -> &str {
        self.members
            .values()
            .find_map(|m| m.server_assignor.as_deref())
            .unwrap_or("uniform")
    }

    pub fn heartbeat(
        &mut self,
        request: Heartbeat,
        topics: &TopicsView,
        config: &GroupConfig,
        now: Now,
    ) -> HeartbeatResult {
        if let Some(assignor) = &request.server_assignor
            && !ASSIGNORS.contains(&assignor.as_str())
        {
            return HeartbeatResult::error(
                &request.member_id,
                errors::UNSUPPORTED_ASSIGNOR,
                format!(
                    "server assignor {assignor} is not one of {}",
                    ASSIGNORS.join(", ")
                ),
            );
        }
        match request.member_epoch {
            -1 | -2 => self.leave(&request, topics, now),
            0 => self.join(request, topics, config, now),
            epoch if epoch > 0 => self.member_heartbeat(request, topics, config, now),
            epoch => HeartbeatResult::error(
                &request.member_id,
                errors::INVALID_REQUEST,
                format!("member epoch {epoch} is not valid"),
            ),
        }
    }

    fn join(
        &mut self,
        request: Heartbeat,
        topics: &TopicsView,
        config: &GroupConfig,
        now: Now,
    ) -> HeartbeatResult {
        let Some(subscribed) = request.subscribed_topic_names.clone() else {
            return HeartbeatResult::error(
                &request.member_id,
                errors::INVALID_REQUEST,
                "a joining member must name its subscribed topics",
            );
        };
        if request.rebalance_timeout_ms < 0 || request.owned.is_none() {
            return HeartbeatResult::error(
                &request.member_id,
                errors::INVALID_REQUEST,
                "a joining member must give its rebalance timeout and owned partitions",
            );
        }
        let member_id = if request.member_id.is_empty() {
            format!(
                "{}",
                uuid::Uuid::from_u128(crate::protocol::random_u128()).simple()
            )
        } else {
            request.member_id.clone()
        };
        if let Some(instance) = &request.instance_id
            && let Some(holder) = self.static_members.get(instance).cloned()
            && holder != member_id
        {
            let released = self.members.get(&holder).is_some_and(|m| m.left_static);
            if !released {
                // KIP-345: the instance is still held by a live member.
                return HeartbeatResult::error(
                    &member_id,
                    errors::UNRELEASED_INSTANCE_ID,
                    format!("static member {instance} is still held by member {holder}"),
                );
            }
            // The instance's previous incarnation left with epoch -2: the new one takes over
            // its place, epoch and partitions, without a rebalance.
            if let Some(mut member) = self.members.remove(&holder) {
                let subscribed: BTreeSet<String> = subscribed.iter().cloned().collect();
                let unchanged = member.subscribed == subscribed;
                member.member_id = member_id.clone();
                member.left_static = false;
                member.client_id = request.client_id.clone();
                member.client_host = request.client_host.clone();
                member.subscribed = subscribed;
                member.session_deadline =
                    now.instant + Duration::from_millis(config.consumer_session_timeout_ms);
                if let Some(target) = self.target.remove(&holder) {
                    self.target.insert(member_id.clone(), target);
                }
                self.members.insert(member_id.clone(), member);
                self.static_members
                    .insert(instance.clone(), member_id.clone());
                self.write_member_gone(&holder);
                self.write_member(&member_id);
                self.write_target(&member_id);
                self.write_current(&member_id);
                tracing::info!(group = %self.group_id, member = %member_id, instance = %instance, "static member rejoined");
                if !unchanged {
                    self.bump_epoch(topics);
                }
                return self.reconcile(&member_id, None, now);
            }
        }
        if !self.members.contains_key(&member_id) && self.members.len() >= config.consumer_max_size
        {
            return HeartbeatResult::error(
                &member_id,
                errors::GROUP_MAX_SIZE_REACHED,
                format!("group {} has {} members", self.group_id, self.members.len()),
            );
        }
        // A member id joining again at epoch 0 starts over (it lost its partitions).
        self.remove_member(&member_id);
        let member = ConsumerMember {
            member_id: member_id.clone(),
            instance_id: request.instance_id.clone(),
            rack_id: request.rack_id.clone(),
            client_id: request.client_id.clone(),
            client_host: request.client_host.clone(),
            subscribed: subscribed.into_iter().collect(),
            server_assignor: request.server_assignor.clone(),
            rebalance_timeout: Duration::from_millis(request.rebalance_timeout_ms as u64),
            epoch: 0,
            previous_epoch: -1,
            assigned: BTreeSet::new(),
            pending_revocation: BTreeSet::new(),
            revocation_deadline: None,
            session_deadline: now.instant
                + Duration::from_millis(config.consumer_session_timeout_ms),
            left_static: false,
        };
        if let Some(instance) = &member.instance_id {
            self.static_members
                .insert(instance.clone(), member_id.clone());
        }
        if self.members.is_empty() {
            self.state_since_ms = now.wall_ms;
        }
        self.members.insert(member_id.clone(), member);
        self.write_member(&member_id);
        tracing::info!(group = %self.group_id, member = %member_id, client_id = %request.client_id, "consumer group member joined");
        self.bump_epoch(topics);
        self.reconcile(&member_id, None, now)
    }

    fn member_heartbeat(
        &mut self,
        request: Heartbeat,
        topics: &TopicsView,
        config: &GroupConfig,
        now: Now,
    ) -> HeartbeatResult {
        let member_id = request.member_id.clone();
        let Some(member) = self.members.get_mut(&member_id) else {
            return HeartbeatResult::error(
                &member_id,
                errors::UNKNOWN_MEMBER_ID,
                format!("member {member_id} is not in group {}", self.group_id),
            );
        };
        if request.member_epoch != member.epoch {
            // Kafka's rule: the previous epoch is accepted when the member owns no more than
            // it was given (the answer that moved its epoch, and perhaps added partitions,
            // was lost).
            let lost_response = request.member_epoch == member.previous_epoch
                && request
                    .owned
                    .as_ref()
                    .is_some_and(|owned| owned.iter().all(|tp| member.assigned.contains(tp)));
            if !lost_response {
                return HeartbeatResult::error(
                    &member_id,
                    errors::FENCED_MEMBER_EPOCH,
                    format!(
                        "member epoch {} is not the member's epoch {}: rejoin",
                        request.member_epoch, member.epoch
                    ),
                );
            }
        }
        member.session_deadline =
            now.instant + Duration::from_millis(config.consumer_session_timeout_ms);
        if request.rebalance_timeout_ms >= 0 {
            member.rebalance_timeout = Duration::from_millis(request.rebalance_timeout_ms as u64);
        }
        let mut changed = false;
        if let Some(subscribed) = request.subscribed_topic_names {
            let subscribed: BTreeSet<String> = subscribed.into_iter().collect();
            if subscribed != member.subscribed {
                member.subscribed = subscribed;
                changed = true;
            }
        }
        if request.server_assignor.is_some() && request.server_assignor != member.server_assignor {
            member.server_assignor = request.server_assignor.clone();
            changed = true;
        }
        if changed {
            self.write_member(&member_id);
        }
        if changed || self.topics_changed(topics) {
            self.bump_epoch(topics);
        }
        self.reconcile(&member_id, request.owned.as_deref(), now)
    }

    fn leave(&mut self, request: &Heartbeat, topics: &TopicsView, now: Now) -> HeartbeatResult {
        if request.member_epoch == -2
            && let Some(member) = self.members.get_mut(&request.member_id)
            && member.instance_id.is_some()
        {
            // A static member going away for a while (KIP-345): it keeps its place and
            // partitions for its session; the same instance takes them back on rejoining.
            member.left_static = true;
            return HeartbeatResult {
                error: errors::NONE,
                message: None,
                member_id: request.member_id.clone(),
                member_epoch: -2,
                assignment: None,
            };
        }
        let member_id = match &request.instance_id {
            Some(instance) if request.member_id.is_empty() => self
                .static_members
                .get(instance)
                .cloned()
                .unwrap_or_default(),
            _ => request.member_id.clone(),
        };
        if !self.members.contains_key(&member_id) {
            return HeartbeatResult::error(
                &member_id,
                errors::UNKNOWN_MEMBER_ID,
                format!("member {member_id} is not in group {}", self.group_id),
            );
        }
        self.remove_member(&member_id);
        tracing::info!(group = %self.group_id, member = %member_id, "consumer group member left");
        self.bump_epoch(topics);
        if self.members.is_empty() {
            self.state_since_ms = now.wall_ms;
        }
        HeartbeatResult {
            error: errors::NONE,
            message: None,
            member_id,
            member_epoch: request.member_epoch,
            assignment: None,
        }
    }

    fn remove_member(&mut self, member_id: &str) {
        let Some(member) = self.members.remove(member_id) else {
            return;
        };
        if let Some(instance) = &member.instance_id
            && self.static_members.get(instance).map(String::as_str) == Some(member_id)
        {
            self.static_members.remove(instance);
        }
        self.target.remove(member_id);
        self.write_member_gone(member_id);
    }

    fn topics_changed(&self, topics: &TopicsView) -> bool {
        let wanted = self.subscribed_topics();
        let current: TopicsView = topics
            .iter()
            .filter(|(name, _)| wanted.contains(*name))
            .map(|(n, v)| (n.clone(), *v))
            .collect();
        current != self.topics
    }

    /// Membership or subscriptions changed: a new group epoch and its target assignment.
    fn bump_epoch(&mut self, topics: &TopicsView) {
        self.group_epoch += 1;
        let wanted = self.subscribed_topics();
        self.topics = topics
            .iter()
            .filter(|(name, _)| wanted.contains(*name))
            .map(|(n, v)| (n.clone(), *v))
            .collect();
        let subscriptions: BTreeMap<String, BTreeSet<String>> = self
            .members
            .values()
            .map(|m| (m.member_id.clone(), m.subscribed.clone()))
            .collect();
        let target = match self.assignor() {
            "range" => assign_range(&subscriptions, &self.topics),
            _ => assign_uniform(&subscriptions, &self.topics, &self.target),
        };
        let changed: Vec<String> = target
            .iter()
            .filter(|(member, partitions)| self.target.get(*member) != Some(*partitions))
            .map(|(member, _)| member.clone())
            .collect();
        self.target = target;
        self.assignment_epoch = self.group_epoch;
        self.writes.push((
            RecordKey::ConsumerGroup {
                group: self.group_id.clone(),
            },
            Some(encode_epoch_value(self.group_epoch)),
        ));
        for member_id in changed {
            self.write_target(&member_id);
        }
        self.writes.push((
            RecordKey::TargetAssignment {
                group: self.group_id.clone(),
            },
            Some(encode_epoch_value(self.assignment_epoch)),
        ));
        tracing::debug!(group = %self.group_id, group_epoch = self.group_epoch, members = self.members.len(), "target assignment computed");
    }

    /// Moves a member toward its target; its answer.
    fn reconcile(&mut self, member_id: &str, owned: Option<&[Tp]>, now: Now) -> HeartbeatResult {
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        // Partitions others still hold (assigned or not yet confirmed as revoked).
        let held_by_others: BTreeSet<Tp> = self
            .members
            .values()
            .filter(|m| m.member_id != member_id)
            .flat_map(|m| {
                m.assigned
                    .iter()
                    .chain(m.pending_revocation.iter())
                    .copied()
            })
            .collect();
        let assignment_epoch = self.assignment_epoch;
        let Some(member) = self.members.get_mut(member_id) else {
            return HeartbeatResult::error(member_id, errors::UNKNOWN_MEMBER_ID, "member gone");
        };
        let before = (
            member.epoch,
            member.previous_epoch,
            member.assigned.clone(),
            member.pending_revocation.clone(),
        );
        if !member.pending_revocation.is_empty() {
            let released = owned.is_some_and(|owned| {
                !owned
                    .iter()
                    .any(|tp| member.pending_revocation.contains(tp))
            });
            if released {
                member.pending_revocation.clear();
                member.revocation_deadline = None;
            }
        }
        if member.pending_revocation.is_empty() {
            let to_revoke: BTreeSet<Tp> = member.assigned.difference(&target).copied().collect();
            if !to_revoke.is_empty() {
                for tp in &to_revoke {
                    member.assigned.remove(tp);
                }
                member.pending_revocation = to_revoke;
                member.revocation_deadline = Some(now.instant + member.rebalance_timeout);
            } else {
                if member.epoch != assignment_epoch {
                    member.previous_epoch = member.epoch;
                    member.epoch = assignment_epoch;
                }
                for tp in target
                    .difference(&member.assigned)
                    .copied()
                    .collect::<Vec<_>>()
                {
                    if !held_by_others.contains(&tp) {
                        member.assigned.insert(tp);
                    }
                }
            }
        }
        let result = HeartbeatResult {
            error: errors::NONE,
            message: None,
            member_id: member_id.to_owned(),
            member_epoch: member.epoch,
            assignment: Some(member.assigned.iter().copied().collect()),
        };
        let after = (
            member.epoch,
            member.previous_epoch,
            member.assigned.clone(),
            member.pending_revocation.clone(),
        );
        if before != after {
            self.write_current(member_id);
        }
        result
    }

    /// Sessions that ran out and revocations not confirmed within the rebalance timeout
    /// remove their members; `topics` is current metadata.
    pub fn tick(&mut self, topics: &TopicsView, now: Now) {
        let expired: Vec<(String, &'static str)> = self
            .members
            .values()
            .filter_map(|m| {
                if m.session_deadline <= now.instant {
                    Some((m.member_id.clone(), "session expired"))
                } else if m.revocation_deadline.is_some_and(|d| d <= now.instant) {
                    Some((
                        m.member_id.clone(),
                        "did not revoke within its rebalance timeout",
                    ))
                } else {
                    None
                }
            })
            .collect();
        if expired.is_empty() {
            return;
        }
        for (member_id, reason) in &expired {
            tracing::info!(group = %self.group_id, member = %member_id, reason, "consumer group member removed");
            self.remove_member(member_id);
        }
        self.bump_epoch(topics);
        if self.members.is_empty() {
            self.state_since_ms = now.wall_ms;
        }
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.members
            .values()
            .flat_map(|m| std::iter::once(m.session_deadline).chain(m.revocation_deadline))
            .min()
    }

    /// Whether an OffsetCommit (or a member-checked OffsetFetch) by this member at this
    /// epoch is accepted: a tool (no member, epoch -1) while the group is empty, a member at
    /// its current epoch.
    pub fn check_commit(&self, member_id: &str, member_epoch: i32) -> i16 {
        if member_epoch < 0 && member_id.is_empty() {
            return if self.members.is_empty() {
                errors::NONE
            } else {
                errors::UNKNOWN_MEMBER_ID
            };
        }
        match self.members.get(member_id) {
            None => errors::UNKNOWN_MEMBER_ID,
            Some(member) if member.epoch != member_epoch => errors::STALE_MEMBER_EPOCH,
            Some(_) => errors::NONE,
        }
    }
}

/// `uniform`: every partition of a subscribed topic to one of its subscribers, balanced
/// (counts differ by at most one among members with the same subscriptions), keeping each
/// partition where the previous target had it when that stays balanced (sticky).
pub fn assign_uniform(
    subscriptions: &BTreeMap<String, BTreeSet<String>>,
    topics: &TopicsView,
    previous: &BTreeMap<String, BTreeSet<Tp>>,
) -> BTreeMap<String, BTreeSet<Tp>> {
    let mut target: BTreeMap<String, BTreeSet<Tp>> = subscriptions
        .keys()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    if subscriptions.is_empty() {
        return target;
    }
    // Every partition with the members that may take it.
    let mut partitions: Vec<(Tp, Vec<&String>)> = Vec::new();
    for (topic, (id, count)) in topics {
        let subscribers: Vec<&String> = subscriptions
            .iter()
            .filter(|(_, s)| s.contains(topic))
            .map(|(m, _)| m)
            .collect();
        if subscribers.is_empty() {
            continue;
        }
        for partition in 0..*count {
            partitions.push(((*id, partition), subscribers.clone()));
        }
    }
    let total = partitions.len();
    let members = subscriptions.len();
    let floor = total / members;
    let mut extra = total % members;
    let previous_owner: HashMap<Tp, &String> = previous
        .iter()
        .flat_map(|(m, tps)| tps.iter().map(move |tp| (*tp, m)))
        .collect();
    let subscribers_of: HashMap<Tp, &Vec<&String>> =
        partitions.iter().map(|(tp, s)| (*tp, s)).collect();
    let mut unassigned = Vec::new();
    // Sticky pass: previous owners keep up to their share.
    let mut kept: Vec<(Tp, &String)> = Vec::new();
    for (tp, subscribers) in &partitions {
        match previous_owner.get(tp) {
            Some(owner) if subscribers.contains(owner) => kept.push((*tp, owner)),
            _ => unassigned.push((*tp, subscribers)),
        }
    }
    let mut overflow = Vec::new();
    for (tp, owner) in kept {
        let count = target.get(owner.as_str()).map_or(0, BTreeSet::len);
        if count < floor {
            target.entry(owner.clone()).or_default().insert(tp);
        } else {
            overflow.push((tp, owner));
        }
    }
    for (tp, owner) in overflow {
        let count = target.get(owner.as_str()).map_or(0, BTreeSet::len);
        if count == floor && extra > 0 {
            extra -= 1;
            target.entry(owner.clone()).or_default().insert(tp);
        } else {
            if let Some(subscribers) = subscribers_of.get(&tp) {
                unassigned.push((tp, subscribers));
            }
        }
    }
    // The rest to whichever subscriber has the fewest.
    unassigned.sort_by_key(|(tp, _)| *tp);
    for (tp, subscribers) in unassigned {
        let chosen = subscribers
            .iter()
            .min_by_key(|m| (target.get(m.as_str()).map_or(0, BTreeSet::len), *m))
            .expect("a partition listed has subscribers");
        target.entry((*chosen).clone()).or_default().insert(tp);
    }
    target
}

/// `range`: per topic, its subscribers (by member id) take consecutive ranges, the first ones
/// one more when the count does not divide (Kafka's range assignor, co-partitioning topics).
pub fn assign_range(
    subscriptions: &BTreeMap<String, BTreeSet<String>>,
    topics: &TopicsView,
) -> BTreeMap<String, BTreeSet<Tp>> {
    let mut target: BTreeMap<String, BTreeSet<Tp>> = subscriptions
        .keys()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    for (topic, (id, count)) in topics {
        let subscribers: Vec<&String> = subscriptions
            .iter()
            .filter(|(_, s)| s.contains(topic))
            .map(|(m, _)| m)
            .collect();
        if subscribers.is_empty() {
            continue;
        }
        let count = *count as usize;
        let (each, extra) = (count / subscribers.len(), count % subscribers.len());
        let mut next = 0;
        for (i, member) in subscribers.iter().enumerate() {
            let take = each + usize::from(i < extra);
            let entry = target.entry((*member).clone()).or_default();
            for partition in next..next + take {
                entry.insert((*id, partition as i32));
            }
            next += take;
        }
    }
    target
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> GroupConfig {
        crate::group::test_config()
    }

    fn topics() -> TopicsView {
        BTreeMap::from([("t".to_owned(), (7u128, 6))])
    }

    fn now(base: Instant, ms: u64) -> Now {
        Now {
            instant: base + Duration::from_millis(ms),
            wall_ms: ms as i64,
        }
    }

    fn heartbeat(member_id: &str, epoch: i32, owned: Option<Vec<Tp>>) -> Heartbeat {
        Heartbeat {
            member_id: member_id.into(),
            member_epoch: epoch,
            instance_id: None,
            rack_id: None,
            rebalance_timeout_ms: 30_000,
            subscribed_topic_names: (epoch == 0).then(|| vec!["t".to_owned()]),
            server_assignor: None,
            owned,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
        }
    }

    fn partitions(result: &HeartbeatResult) -> BTreeSet<i32> {
        result
            .assignment
            .iter()
            .flatten()
            .map(|(_, p)| *p)
            .collect()
    }

    #[test]
    fn a_second_member_gets_partitions_only_after_the_first_revokes_them() {
        let base = Instant::now();
        let mut group = ConsumerGroup::new("g", now(base, 0));
        let a = group.heartbeat(
            heartbeat("a", 0, Some(vec![])),
            &topics(),
            &config(),
            now(base, 0),
        );
        assert_eq!((a.error, a.member_epoch), (errors::NONE, 1));
        assert_eq!(partitions(&a), (0..6).collect());
        assert_eq!(group.state_name(), "Stable");

        let b = group.heartbeat(
            heartbeat("b", 0, Some(vec![])),
            &topics(),
            &config(),
            now(base, 10),
        );
        assert_eq!(b.member_epoch, 2);
        assert!(partitions(&b).is_empty(), "A still owns everything: {b:?}");
        assert_eq!(group.state_name(), "Reconciling");

        // A is told to keep three; it stays at epoch 1 until it confirms.
        let owned_a: Vec<Tp> = (0..6).map(|p| (7, p)).collect();
        let a = group.heartbeat(
            heartbeat("a", 1, Some(owned_a)),
            &topics(),
            &config(),
            now(base, 20),
        );
        assert_eq!(a.member_epoch, 1);
        let kept = partitions(&a);
        assert_eq!(kept.len(), 3);
        // Nothing is given to B while A has not confirmed.
        let b = group.heartbeat(heartbeat("b", 2, None), &topics(), &config(), now(base, 30));
        assert!(partitions(&b).is_empty());
        let owned_a: Vec<Tp> = kept.iter().map(|p| (7, *p)).collect();
        let a = group.heartbeat(
            heartbeat("a", 1, Some(owned_a)),
            &topics(),
            &config(),
            now(base, 40),
        );
        assert_eq!((a.member_epoch, partitions(&a)), (2, kept.clone()));
        let b = group.heartbeat(heartbeat("b", 2, None), &topics(), &config(), now(base, 50));
        let b_parts = partitions(&b);
        assert_eq!(b_parts.len(), 3);
        assert!(b_parts.is_disjoint(&kept));
        assert_eq!(group.state_name(), "Stable");
    }

    #[test]
    fn stale_epochs_are_fenced_and_commits_checked() {
        let base = Instant::now();
        let mut group = ConsumerGroup::new("g", now(base, 0));
        group.heartbeat(
            heartbeat("a", 0, Some(vec![])),
            &topics(),
            &config(),
            now(base, 0),
        );
        let stale = group.heartbeat(heartbeat("a", 7, None), &topics(), &config(), now(base, 1));
        assert_eq!(stale.error, errors::FENCED_MEMBER_EPOCH);
        let unknown = group.heartbeat(heartbeat("x", 1, None), &topics(), &config(), now(base, 1));
        assert_eq!(unknown.error, errors::UNKNOWN_MEMBER_ID);
        assert_eq!(group.check_commit("a", 1), errors::NONE);
        assert_eq!(group.check_commit("a", 0), errors::STALE_MEMBER_EPOCH);
        assert_eq!(group.check_commit("x", 1), errors::UNKNOWN_MEMBER_ID);
        assert_eq!(group.check_commit("", -1), errors::UNKNOWN_MEMBER_ID);
        let left = group.heartbeat(heartbeat("a", -1, None), &topics(), &config(), now(base, 2));
        assert_eq!((left.error, left.member_epoch), (errors::NONE, -1));
        assert_eq!(group.state_name(), "Empty");
        assert_eq!(group.check_commit("", -1), errors::NONE);
        let mut bad = heartbeat("b", 0, Some(vec![]));
        bad.server_assignor = Some("sticky".into());
        let refused = group.heartbeat(bad, &topics(), &config(), now(base, 3));
        assert_eq!(refused.error, errors::UNSUPPORTED_ASSIGNOR);
    }

    #[test]
    fn a_silent_member_is_removed_after_its_session() {
        let base = Instant::now();
        let mut group = ConsumerGroup::new("g", now(base, 0));
        group.heartbeat(
            heartbeat("a", 0, Some(vec![])),
            &topics(),
            &config(),
            now(base, 0),
        );
        group.heartbeat(
            heartbeat("b", 0, Some(vec![])),
            &topics(),
            &config(),
            now(base, 0),
        );
        group.tick(&topics(), now(base, 44_999));
        assert_eq!(group.members.len(), 2);
        // A heartbeats, B does not.
        group.heartbeat(
            heartbeat("a", 1, Some((0..6).map(|p| (7, p)).collect())),
            &topics(),
            &config(),
            now(base, 30_000),
        );
        group.tick(&topics(), now(base, 45_001));
        assert_eq!(group.members.keys().collect::<Vec<_>>(), vec!["a"]);
        assert_eq!(group.target["a"].len(), 6);
    }

    #[test]
    fn uniform_is_balanced_and_sticky_and_range_is_kafkas() {
        let topics = BTreeMap::from([("t".to_owned(), (1u128, 7)), ("u".to_owned(), (2u128, 2))]);
        let subscribe = |members: &[&str]| -> BTreeMap<String, BTreeSet<String>> {
            members
                .iter()
                .map(|m| {
                    (
                        (*m).to_owned(),
                        BTreeSet::from(["t".to_owned(), "u".to_owned()]),
                    )
                })
                .collect()
        };
        let two = assign_uniform(&subscribe(&["a", "b"]), &topics, &BTreeMap::new());
        let sizes: Vec<usize> = two.values().map(BTreeSet::len).collect();
        assert_eq!(sizes.iter().sum::<usize>(), 9);
        assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1);
        let three = assign_uniform(&subscribe(&["a", "b", "c"]), &topics, &two);
        assert_eq!(
            three.values().map(BTreeSet::len).collect::<Vec<_>>(),
            vec![3, 3, 3]
        );
        // Sticky: a and b keep what they can; c takes from both.
        assert!(three["a"].is_subset(&two["a"]));
        assert!(three["b"].is_subset(&two["b"]));
        let range = assign_range(&subscribe(&["a", "b"]), &topics);
        assert_eq!(
            range["a"],
            BTreeSet::from([(1, 0), (1, 1), (1, 2), (1, 3), (2, 0)])
        );
        assert_eq!(range["b"], BTreeSet::from([(1, 4), (1, 5), (1, 6), (2, 1)]));
    }

    #[test]
    fn a_static_member_that_left_with_epoch_minus_2_comes_back_to_its_partitions() {
        let base = Instant::now();
        let mut group = ConsumerGroup::new("g", now(base, 0));
        let mut join = heartbeat("a", 0, Some(vec![]));
        join.instance_id = Some("i1".into());
        let a = group.heartbeat(join.clone(), &topics(), &config(), now(base, 0));
        assert_eq!(partitions(&a).len(), 6);
        // A second incarnation while the first is alive: refused.
        let mut twin = join.clone();
        twin.member_id = "a2".into();
        let refused = group.heartbeat(twin.clone(), &topics(), &config(), now(base, 1));
        assert_eq!(refused.error, errors::UNRELEASED_INSTANCE_ID);
        // The first leaves for a restart (-2): the second takes its place, epoch unchanged.
        let mut leave = heartbeat("a", -2, None);
        leave.instance_id = Some("i1".into());
        let left = group.heartbeat(leave, &topics(), &config(), now(base, 2));
        assert_eq!((left.error, left.member_epoch), (errors::NONE, -2));
        let epoch = group.group_epoch;
        let back = group.heartbeat(twin, &topics(), &config(), now(base, 3));
        assert_eq!(
            (back.error, back.member_epoch),
            (errors::NONE, a.member_epoch)
        );
        assert_eq!(partitions(&back).len(), 6);
        assert_eq!(group.group_epoch, epoch, "no rebalance");
        assert_eq!(group.members.keys().collect::<Vec<_>>(), vec!["a2"]);
    }

    #[test]
    fn the_records_written_restore_the_group() {
        use crate::group::records::{decode_epoch_value, decode_target_value};
        let base = Instant::now();
        let mut group = ConsumerGroup::new("g", now(base, 0));
        group.heartbeat(
            heartbeat("a", 0, Some(vec![])),
            &topics(),
            &config(),
            now(base, 0),
        );
        group.heartbeat(
            heartbeat("b", 0, Some(vec![])),
            &topics(),
            &config(),
            now(base, 1),
        );
        let owned: Vec<Tp> = (0..6).map(|p| (7, p)).collect();
        let a = group.heartbeat(
            heartbeat("a", 1, Some(owned)),
            &topics(),
            &config(),
            now(base, 2),
        );
        let kept = a.assignment.clone().unwrap_or_default();
        group.heartbeat(
            heartbeat("a", 1, Some(kept)),
            &topics(),
            &config(),
            now(base, 3),
        );
        group.heartbeat(heartbeat("b", 2, None), &topics(), &config(), now(base, 4));
        // Replay the records as a loader does: the latest per key wins.
        let mut latest: BTreeMap<Vec<u8>, (RecordKey, Option<Vec<u8>>)> = BTreeMap::new();
        for (key, value) in group.take_writes() {
            latest.insert(key.encode(), (key, value));
        }
        let (mut epoch, mut assignment_epoch) = (0, 0);
        let mut members: BTreeMap<String, RestoredMember> = BTreeMap::new();
        for (key, value) in latest.into_values() {
            let Some(value) = value else { continue };
            match key {
                RecordKey::ConsumerGroup { .. } => epoch = decode_epoch_value(&value).unwrap(),
                RecordKey::TargetAssignment { .. } => {
                    assignment_epoch = decode_epoch_value(&value).unwrap()
                }
                RecordKey::ConsumerMember { member, .. } => {
                    let entry = members.entry(member.clone()).or_default();
                    entry.member_id = member;
                    entry.metadata = ConsumerMemberValue::decode(&value).unwrap();
                }
                RecordKey::TargetMember { member, .. } => {
                    members.entry(member).or_default().target =
                        Some(decode_target_value(&value).unwrap());
                }
                RecordKey::CurrentAssignment { member, .. } => {
                    members.entry(member).or_default().current =
                        Some(CurrentAssignmentValue::decode(&value).unwrap());
                }
                _ => {}
            }
        }
        let restored = ConsumerGroup::restore(
            "g",
            epoch,
            assignment_epoch,
            members.into_values().collect(),
            Duration::from_secs(45),
            now(base, 5),
        );
        assert_eq!(
            (restored.group_epoch, restored.assignment_epoch),
            (group.group_epoch, group.assignment_epoch)
        );
        assert_eq!(restored.target, group.target);
        for (id, m) in &group.members {
            let r = &restored.members[id];
            assert_eq!(
                (r.epoch, &r.assigned, &r.subscribed),
                (m.epoch, &m.assigned, &m.subscribed),
                "{id}"
            );
        }
        assert_eq!(restored.state_name(), "Stable");
    }
}
