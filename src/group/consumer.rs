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
//! Heartbeat intervals: the coordinator cannot call a member; a member learns what changed
//! only from the answer to its own heartbeat. A member whose assignment is changing (epoch
//! behind the assignment epoch, partitions pending revocation, or partitions of its target it
//! does not have yet, as a newcomer waiting for others to release them) is answered with
//! `RECONCILING_HEARTBEAT_INTERVAL_MS`, so it sees a released partition within that. A stable
//! member heartbeats once per `group.consumer.heartbeat.interval.ms` (the period), so a
//! stable group costs what it did: it is answered with the time to its next phase point (a
//! period, for a heartbeat on time). A stable member that must give up partitions for a
//! newcomer learns so only at its next regular heartbeat, so: when balance leaves a choice
//! of which members give up or take partitions, the `uniform` assignor prefers those whose
//! next heartbeat is due soonest (`ConsumerMember::heartbeat_due`); and members that finish
//! a rebalance together, which would then heartbeat in step, get phases spread over the
//! period (`place_phase`: one shorter interval per reconciliation), so some member's
//! heartbeat is always near.
//!
//! What the group's records hold (its epochs, each member's metadata, target and current
//! assignment) changes only through `replay` of Kafka's KIP-848 records: an operation writes a
//! record with `apply`, which replays it at once and keeps the record that undoes it, for the
//! coordinator runtime to append (or roll back). Loading replays the same records, so a
//! coordinator move costs members nothing. Sessions, revocation deadlines, when each member's
//! next heartbeat is due and a static member's temporary leave are in memory only.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use super::records::{
    ConsumerMemberValue, CurrentAssignmentValue, GroupRecord, RecordKey, RecordValue,
};
use super::{CommittedOffset, GroupConfig};
use crate::coordinator::Now;
use crate::protocol::errors::KafkaError;
use crate::protocol::{TopicIdPartition, TopicPartition};

/// The topics a group's members subscribe to, as the metadata image has them: name ->
/// (topic id, partition count).
pub type TopicsView = BTreeMap<String, (u128, i32)>;

pub const ASSIGNORS: &[&str] = &["uniform", "range"];

/// The heartbeat interval a member is answered with while its assignment is changing (never
/// more than the configured one). What it buys: a member waiting for partitions another
/// member is releasing gets them this long after the release at most (on average half), and
/// a member answering a revocation late is asked again soon. What it costs: five heartbeats a
/// second per reconciling member, for as long as its reconciliation takes (bounded by the
/// slowest revoking member's next regular heartbeat plus its revocation), and nothing for
/// stable members. A constant rather than a fraction of the configured interval: how fast a
/// rebalance completes should not depend on how rarely stable members are asked to
/// heartbeat, and a loopback or LAN round trip is far below it.
pub const RECONCILING_HEARTBEAT_INTERVAL_MS: u64 = 200;

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
    pub owned: Option<Vec<TopicIdPartition>>,
    pub client_id: String,
    pub client_host: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatResult {
    pub error: Result<(), KafkaError>,
    pub message: Option<String>,
    pub member_id: String,
    pub member_epoch: i32,
    /// The member's assignment (what it may own now).
    pub assignment: Option<Vec<TopicIdPartition>>,
    /// When to heartbeat next (short while its assignment changes); None: the configured
    /// interval (errors, leaves).
    pub heartbeat_interval_ms: Option<i32>,
}

impl HeartbeatResult {
    pub fn error(
        member_id: &str,
        error: KafkaError,
        message: impl Into<String>,
    ) -> HeartbeatResult {
        HeartbeatResult {
            error: Err(error),
            message: Some(message.into()),
            member_id: member_id.to_owned(),
            member_epoch: -1,
            assignment: None,
            heartbeat_interval_ms: None,
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
    pub assigned: BTreeSet<TopicIdPartition>,
    /// Given up, not yet confirmed by the member.
    pending_revocation: BTreeSet<TopicIdPartition>,
    // In memory only, not in the records:
    revocation_deadline: Option<Instant>,
    session_deadline: Instant,
    /// When its next heartbeat is expected: the last answer's time plus the interval it gave
    /// (now, while its heartbeat is being answered; now, too, after a load).
    heartbeat_due: Instant,
    /// A stable member's heartbeat phase: its heartbeats are due at this instant plus whole
    /// configured intervals. Placed when it becomes stable (`place_phase`), kept while it
    /// stays stable (an early heartbeat, as a client's acknowledgement, does not move it),
    /// None while it reconciles.
    heartbeat_phase: Option<Instant>,
    /// A static member that left with epoch -2: its place is kept until its session ends.
    left_static: bool,
}

impl ConsumerMember {
    /// Its ConsumerGroupMemberMetadata record's value.
    fn metadata_value(&self) -> ConsumerMemberValue {
        ConsumerMemberValue {
            instance_id: self.instance_id.clone(),
            rack_id: self.rack_id.clone(),
            client_id: self.client_id.clone(),
            client_host: self.client_host.clone(),
            subscribed_topic_names: self.subscribed.iter().cloned().collect(),
            rebalance_timeout_ms: self.rebalance_timeout.as_millis() as i32,
            server_assignor: self.server_assignor.clone(),
        }
    }

    /// Its ConsumerGroupCurrentMemberAssignment record's value (`target`: its target).
    fn current_value(&self, target: Option<&BTreeSet<TopicIdPartition>>) -> CurrentAssignmentValue {
        CurrentAssignmentValue {
            member_epoch: self.epoch,
            previous_member_epoch: self.previous_epoch,
            state: if !self.pending_revocation.is_empty() {
                1
            } else if target.is_some_and(|t| t != &self.assigned) {
                2
            } else {
                0
            },
            assigned: self.assigned.iter().copied().collect(),
            pending_revocation: self.pending_revocation.iter().copied().collect(),
        }
    }
}

/// What the group's records say, for comparing a live group with one replayed from its
/// records (what must agree).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerDurable {
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub target: BTreeMap<String, BTreeSet<TopicIdPartition>>,
    pub members: BTreeMap<String, (ConsumerMemberValue, CurrentAssignmentValue)>,
}

#[derive(Debug)]
pub struct ConsumerGroup {
    pub group_id: String,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, ConsumerMember>,
    /// The target assignment at `assignment_epoch`.
    pub target: BTreeMap<String, BTreeSet<TopicIdPartition>>,
    /// The subscribed topics as of the last target computation (in memory only: a loaded
    /// group looks at its topics again on the first heartbeat).
    topics: TopicsView,
    static_members: HashMap<String, String>,
    pub offsets: BTreeMap<TopicPartition, CommittedOffset>,
    state_since_ms: i64,
    /// `group.consumer.session.timeout.ms`: a member's session from its join or a load.
    session_timeout: Duration,
    /// Current assignments replayed before their member's metadata (a compacted log keeps
    /// each key's latest record, not the order keys were first written).
    orphan_current: HashMap<String, CurrentAssignmentValue>,
    /// Records written by the operation under way, each with the record that undoes it.
    journal: Vec<(GroupRecord, GroupRecord)>,
    /// What memory alone held of members removed by the operation under way (deadlines, a
    /// static leave): a rolled-back removal gives it back. Cleared when the next operation
    /// starts (rollbacks happen before that).
    departed: HashMap<String, Departed>,
    /// Successful heartbeats answered since this group was created or loaded (in memory only,
    /// for the metrics).
    pub heartbeats_answered: HeartbeatsAnswered,
}

/// Heartbeats answered, by the interval they were given.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatsAnswered {
    /// With `RECONCILING_HEARTBEAT_INTERVAL_MS`: the member's assignment was changing.
    pub reconciling: u64,
    /// Keeping the member's phase (a period apart): the member was stable.
    pub stable: u64,
}

/// A removed member's in-memory state.
#[derive(Debug, Clone, Copy)]
struct Departed {
    session_deadline: Instant,
    revocation_deadline: Option<Instant>,
    left_static: bool,
}

impl ConsumerGroup {
    pub fn new(group_id: &str, session_timeout: Duration, now: Now) -> ConsumerGroup {
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
            session_timeout,
            orphan_current: HashMap::new(),
            journal: Vec::new(),
            departed: HashMap::new(),
            heartbeats_answered: HeartbeatsAnswered::default(),
        }
    }

    /// The records written since the last call, each with its undo, in order.
    pub fn take_journal(&mut self) -> Vec<(GroupRecord, GroupRecord)> {
        std::mem::take(&mut self.journal)
    }

    fn key_consumer_group(&self) -> RecordKey {
        RecordKey::ConsumerGroup {
            group: self.group_id.clone(),
        }
    }

    fn key_target_assignment(&self) -> RecordKey {
        RecordKey::TargetAssignment {
            group: self.group_id.clone(),
        }
    }

    fn key_member(&self, member_id: &str) -> RecordKey {
        RecordKey::ConsumerMember {
            group: self.group_id.clone(),
            member: member_id.to_owned(),
        }
    }

    fn key_target(&self, member_id: &str) -> RecordKey {
        RecordKey::TargetMember {
            group: self.group_id.clone(),
            member: member_id.to_owned(),
        }
    }

    fn key_current(&self, member_id: &str) -> RecordKey {
        RecordKey::CurrentAssignment {
            group: self.group_id.clone(),
            member: member_id.to_owned(),
        }
    }

    /// The record holding `key`'s present value (a tombstone when it has none): replayed, it
    /// puts the key back as it is now.
    pub fn current_record(&self, key: &RecordKey) -> GroupRecord {
        let value = match key {
            // Epoch 0 is a group no record has made yet (one just converted from classic).
            RecordKey::ConsumerGroup { .. } => {
                (self.group_epoch > 0).then_some(RecordValue::Epoch(self.group_epoch))
            }
            RecordKey::TargetAssignment { .. } => {
                (self.assignment_epoch > 0).then_some(RecordValue::Epoch(self.assignment_epoch))
            }
            RecordKey::ConsumerMember { member, .. } => self
                .members
                .get(member)
                .map(|m| RecordValue::ConsumerMember(m.metadata_value())),
            RecordKey::TargetMember { member, .. } => self
                .target
                .get(member)
                .map(|t| RecordValue::TargetMember(t.iter().copied().collect())),
            RecordKey::CurrentAssignment { member, .. } => match self.members.get(member) {
                Some(m) => Some(RecordValue::CurrentAssignment(
                    m.current_value(self.target.get(member)),
                )),
                None => self
                    .orphan_current
                    .get(member)
                    .cloned()
                    .map(RecordValue::CurrentAssignment),
            },
            RecordKey::Offset { .. } | RecordKey::Group { .. } => None,
        };
        GroupRecord::new(key.clone(), value)
    }

    /// The one way the group's durable state changes: replayed now, appended when the
    /// operation ends (and undone if that append fails).
    fn apply(&mut self, key: RecordKey, value: Option<RecordValue>, now: Now) {
        let record = GroupRecord::new(key, value);
        let undo = self.current_record(&record.key);
        self.replay(&record, now);
        self.journal.push((record, undo));
    }

    /// Applies one of the group's KIP-848 records (a load, a live write, an undo). The group
    /// epoch's tombstone (the group deleted or turned classic) is the shard's to apply.
    pub fn replay(&mut self, record: &GroupRecord, now: Now) {
        match (&record.key, &record.value) {
            (RecordKey::ConsumerGroup { .. }, Some(RecordValue::Epoch(epoch))) => {
                self.group_epoch = *epoch;
            }
            (RecordKey::TargetAssignment { .. }, Some(RecordValue::Epoch(epoch))) => {
                self.assignment_epoch = *epoch;
            }
            (RecordKey::TargetAssignment { .. }, None) => self.assignment_epoch = 0,
            (RecordKey::ConsumerMember { member, .. }, Some(RecordValue::ConsumerMember(v))) => {
                self.replay_member(member, v, now)
            }
            (RecordKey::ConsumerMember { member, .. }, None) => {
                if let Some(removed) = self.members.remove(member) {
                    self.departed.insert(
                        member.clone(),
                        Departed {
                            session_deadline: removed.session_deadline,
                            revocation_deadline: removed.revocation_deadline,
                            left_static: removed.left_static,
                        },
                    );
                    if let Some(instance) = &removed.instance_id
                        && self.static_members.get(instance) == Some(member)
                    {
                        self.static_members.remove(instance);
                    }
                }
                if self.members.is_empty() {
                    self.state_since_ms = now.wall_ms;
                }
            }
            (RecordKey::TargetMember { member, .. }, Some(RecordValue::TargetMember(tps))) => {
                self.target
                    .insert(member.clone(), tps.iter().copied().collect());
            }
            (RecordKey::TargetMember { member, .. }, None) => {
                self.target.remove(member);
            }
            (
                RecordKey::CurrentAssignment { member, .. },
                Some(RecordValue::CurrentAssignment(v)),
            ) => match self.members.get_mut(member) {
                Some(m) => set_current(m, v, now),
                None => {
                    self.orphan_current.insert(member.clone(), v.clone());
                }
            },
            (RecordKey::CurrentAssignment { member, .. }, None) => {
                self.orphan_current.remove(member);
                if let Some(m) = self.members.get_mut(member) {
                    set_current(m, &CurrentAssignmentValue::default(), now);
                    m.previous_epoch = -1;
                }
            }
            (key, value) => {
                tracing::warn!(group = %self.group_id, ?key, has_value = value.is_some(), "a record this group does not replay");
            }
        }
    }

    fn replay_member(&mut self, member_id: &str, v: &ConsumerMemberValue, now: Now) {
        if let Some(m) = self.members.get_mut(member_id) {
            if m.instance_id != v.instance_id
                && let Some(old) = &m.instance_id
                && self.static_members.get(old).map(String::as_str) == Some(member_id)
            {
                self.static_members.remove(old);
            }
            m.instance_id = v.instance_id.clone();
            m.rack_id = v.rack_id.clone();
            m.client_id = v.client_id.clone();
            m.client_host = v.client_host.clone();
            m.subscribed = v.subscribed_topic_names.iter().cloned().collect();
            m.rebalance_timeout = Duration::from_millis(v.rebalance_timeout_ms.max(0) as u64);
            m.server_assignor = v.server_assignor.clone();
        } else {
            if self.members.is_empty() {
                self.state_since_ms = now.wall_ms;
            }
            let mut member = ConsumerMember {
                member_id: member_id.to_owned(),
                instance_id: v.instance_id.clone(),
                rack_id: v.rack_id.clone(),
                client_id: v.client_id.clone(),
                client_host: v.client_host.clone(),
                subscribed: v.subscribed_topic_names.iter().cloned().collect(),
                server_assignor: v.server_assignor.clone(),
                rebalance_timeout: Duration::from_millis(v.rebalance_timeout_ms.max(0) as u64),
                epoch: 0,
                previous_epoch: -1,
                assigned: BTreeSet::new(),
                pending_revocation: BTreeSet::new(),
                revocation_deadline: None,
                // A new member, or one a load restores: a full session to heartbeat.
                session_deadline: now.instant + self.session_timeout,
                heartbeat_due: now.instant,
                heartbeat_phase: None,
                left_static: false,
            };
            if let Some(departed) = self.departed.remove(member_id) {
                // A removal rolled back: the member as it was.
                member.session_deadline = departed.session_deadline;
                member.revocation_deadline = departed.revocation_deadline;
                member.left_static = departed.left_static;
            }
            if let Some(current) = self.orphan_current.remove(member_id) {
                set_current(&mut member, &current, now);
            }
            self.members.insert(member_id.to_owned(), member);
        }
        if let Some(instance) = &v.instance_id {
            self.static_members
                .insert(instance.clone(), member_id.to_owned());
        }
    }

    /// After a load: what was replayed for no member is dropped.
    pub fn finish_load(&mut self) {
        self.orphan_current.clear();
        let members = &self.members;
        self.target.retain(|member, _| members.contains_key(member));
    }

    /// What the records say (see `ConsumerDurable`).
    pub fn durable(&self) -> ConsumerDurable {
        ConsumerDurable {
            group_epoch: self.group_epoch,
            assignment_epoch: self.assignment_epoch,
            target: self.target.clone(),
            members: self
                .members
                .iter()
                .map(|(id, m)| {
                    (
                        id.clone(),
                        (m.metadata_value(), m.current_value(self.target.get(id))),
                    )
                })
                .collect(),
        }
    }

    /// Cheap checks of the group's structure (after every operation, release builds too).
    pub fn check(&self) -> Result<(), String> {
        for (instance, member_id) in &self.static_members {
            if self
                .members
                .get(member_id)
                .is_none_or(|m| m.instance_id.as_deref() != Some(instance))
            {
                return Err(format!(
                    "static member {instance} -> {member_id} is not a member"
                ));
            }
        }
        if self.assignment_epoch > self.group_epoch {
            return Err(format!(
                "assignment epoch {} is ahead of group epoch {}",
                self.assignment_epoch, self.group_epoch
            ));
        }
        for (id, m) in &self.members {
            if m.epoch > self.assignment_epoch {
                return Err(format!(
                    "member {id} at epoch {} is ahead of assignment epoch {}",
                    m.epoch, self.assignment_epoch
                ));
            }
            if let Some(tp) = m.assigned.intersection(&m.pending_revocation).next() {
                return Err(format!("member {id} both owns and revokes {tp}"));
            }
        }
        if let Some(member) = self.target.keys().find(|m| !self.members.contains_key(*m)) {
            return Err(format!("target assignment for non-member {member}"));
        }
        Ok(())
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
        } else if self.members.values().any(|m| self.reconciling(m)) {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    /// Whether `member`'s assignment is still changing: its epoch behind the assignment
    /// epoch, partitions it must confirm revoked, or partitions of its target it does not
    /// have yet.
    fn reconciling(&self, member: &ConsumerMember) -> bool {
        let no_target = BTreeSet::new();
        member.epoch != self.assignment_epoch
            || !member.pending_revocation.is_empty()
            || self.target.get(&member.member_id).unwrap_or(&no_target) != &member.assigned
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

    /// What any heartbeat is refused for before the group is looked at.
    pub fn check_request(request: &Heartbeat) -> Result<(), HeartbeatResult> {
        if let Some(assignor) = &request.server_assignor
            && !ASSIGNORS.contains(&assignor.as_str())
        {
            return Err(HeartbeatResult::error(
                &request.member_id,
                KafkaError::UnsupportedAssignor,
                format!(
                    "server assignor {assignor} is not one of {}",
                    ASSIGNORS.join(", ")
                ),
            ));
        }
        match request.member_epoch {
            0 if request.subscribed_topic_names.is_none() => Err(HeartbeatResult::error(
                &request.member_id,
                KafkaError::InvalidRequest,
                "a joining member must name its subscribed topics",
            )),
            0 if request.rebalance_timeout_ms < 0 || request.owned.is_none() => {
                Err(HeartbeatResult::error(
                    &request.member_id,
                    KafkaError::InvalidRequest,
                    "a joining member must give its rebalance timeout and owned partitions",
                ))
            }
            epoch if epoch < -2 => Err(HeartbeatResult::error(
                &request.member_id,
                KafkaError::InvalidRequest,
                format!("member epoch {epoch} is not valid"),
            )),
            _ => Ok(()),
        }
    }

    pub fn heartbeat(
        &mut self,
        request: Heartbeat,
        topics: &TopicsView,
        config: &GroupConfig,
        now: Now,
    ) -> HeartbeatResult {
        self.departed.clear();
        if let Err(refused) = ConsumerGroup::check_request(&request) {
            return refused;
        }
        let short = Duration::from_millis(
            RECONCILING_HEARTBEAT_INTERVAL_MS.min(config.consumer_heartbeat_interval_ms.max(1)),
        );
        // Heard from before it was asked to come back (a client acknowledging an assignment).
        let mut early = false;
        if let Some(member) = self.members.get_mut(&request.member_id) {
            early = now.instant + short < member.heartbeat_due;
            // Heard from now: whatever a new target asks of it, it learns at once.
            member.heartbeat_due = now.instant;
        }
        let mut result = match request.member_epoch {
            -1 | -2 => return self.leave(&request, topics, now),
            0 => self.join(request, topics, config, now),
            _ => self.member_heartbeat(request, topics, now),
        };
        if result.error.is_ok() {
            result.heartbeat_interval_ms =
                self.answer_interval(&result.member_id, config, early, now);
        }
        result
    }

    /// The interval `member_id` is told to heartbeat at next (see the module doc), noted as
    /// when its next heartbeat is due; `early`: it heartbeat before it was due.
    fn answer_interval(
        &mut self,
        member_id: &str,
        config: &GroupConfig,
        early: bool,
        now: Now,
    ) -> Option<i32> {
        let member = self.members.get(member_id)?;
        let period = Duration::from_millis(config.consumer_heartbeat_interval_ms.max(1));
        let short = Duration::from_millis(RECONCILING_HEARTBEAT_INTERVAL_MS).min(period);
        let (interval, phase) = if self.reconciling(member) {
            self.heartbeats_answered.reconciling += 1;
            (short, None)
        } else {
            self.heartbeats_answered.stable += 1;
            let phase = member
                .heartbeat_phase
                .unwrap_or_else(|| self.place_phase(member_id, period, now.instant));
            // The next time the phase comes round. A heartbeat on time (or late) is answered
            // with about a period; one sent early by the client (an acknowledgement) keeps
            // the phase too, however near; one a little ahead of its phase (a client's timer)
            // moves the phase to a period from now rather than coming back at once.
            let ahead = time_to_phase(phase, period, now.instant);
            if early || ahead >= short {
                (if ahead.is_zero() { period } else { ahead }, Some(phase))
            } else {
                (period, Some(now.instant + period))
            }
        };
        let member = self.members.get_mut(member_id)?;
        member.heartbeat_due = now.instant + interval;
        member.heartbeat_phase = phase;
        Some(i32::try_from(interval.as_millis()).unwrap_or(i32::MAX))
    }

    /// The phase of a member that has just become stable: between twice the short interval
    /// and a period from now, as far as possible from the phases of the group's other stable
    /// members. The members a rebalance moved finish it together and would otherwise
    /// heartbeat in step from then on; spread over the period, some member's next heartbeat
    /// is always near, and the assignor, preferring members due soonest, takes partitions for
    /// a newcomer from it. It costs one interval shorter than the period per reconciliation
    /// (never below twice the short one), at most one heartbeat more.
    fn place_phase(&self, member_id: &str, period: Duration, now: Instant) -> Instant {
        let period_ms = period.as_millis().max(1) as u64;
        let mut others: Vec<u64> = self
            .members
            .values()
            .filter(|m| m.member_id != member_id)
            .filter_map(|m| m.heartbeat_phase)
            .map(|phase| time_to_phase(phase, period, now).as_millis() as u64 % period_ms)
            .collect();
        if others.is_empty() {
            return now + period;
        }
        others.sort_unstable();
        // Distance on the circle of one period to the nearest other phase.
        let distance = |at: u64| {
            let next = others.partition_point(|&o| o < at);
            let after = others
                .get(next)
                .map_or(period_ms - at + others[0], |&o| o - at);
            let before = match next {
                0 => at + period_ms - others[others.len() - 1],
                i => at - others[i - 1],
            };
            after.min(before)
        };
        const CANDIDATES: u64 = 64;
        let earliest_ms = (2 * RECONCILING_HEARTBEAT_INTERVAL_MS).min(period_ms);
        let best_ms = (0..=CANDIDATES)
            .map(|k| earliest_ms + (period_ms - earliest_ms) * k / CANDIDATES)
            .max_by_key(|&at| (distance(at % period_ms), at))
            .unwrap_or(period_ms);
        now + Duration::from_millis(best_ms)
    }

    fn join(
        &mut self,
        request: Heartbeat,
        topics: &TopicsView,
        config: &GroupConfig,
        now: Now,
    ) -> HeartbeatResult {
        let subscribed: BTreeSet<String> = request
            .subscribed_topic_names
            .iter()
            .flatten()
            .cloned()
            .collect();
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
            let Some(previous) = self.members.get(&holder) else {
                return HeartbeatResult::error(
                    &member_id,
                    KafkaError::UnknownServerError,
                    format!("static member {instance} maps to no member"),
                );
            };
            if !previous.left_static {
                // KIP-345: the instance is still held by a live member.
                return HeartbeatResult::error(
                    &member_id,
                    KafkaError::UnreleasedInstanceId,
                    format!("static member {instance} is still held by member {holder}"),
                );
            }
            // The instance's previous incarnation left with epoch -2: the new one takes over
            // its place, epoch and partitions, without a rebalance.
            let unchanged = previous.subscribed == subscribed;
            let mut metadata = previous.metadata_value();
            metadata.client_id = request.client_id.clone();
            metadata.client_host = request.client_host.clone();
            metadata.subscribed_topic_names = subscribed.iter().cloned().collect();
            let current = previous.current_value(self.target.get(&holder));
            let target: Vec<TopicIdPartition> = self
                .target
                .get(&holder)
                .map(|t| t.iter().copied().collect())
                .unwrap_or_default();
            self.remove_member(&holder, now);
            self.apply(
                self.key_member(&member_id),
                Some(RecordValue::ConsumerMember(metadata)),
                now,
            );
            self.apply(
                self.key_target(&member_id),
                Some(RecordValue::TargetMember(target)),
                now,
            );
            self.apply(
                self.key_current(&member_id),
                Some(RecordValue::CurrentAssignment(current)),
                now,
            );
            tracing::info!(group = %self.group_id, member = %member_id, instance = %instance, "static member rejoined");
            if !unchanged {
                self.bump_epoch(topics, now);
            }
            return self.reconcile(&member_id, None, now);
        }
        if !self.members.contains_key(&member_id) && self.members.len() >= config.consumer_max_size
        {
            return HeartbeatResult::error(
                &member_id,
                KafkaError::GroupMaxSizeReached,
                format!("group {} has {} members", self.group_id, self.members.len()),
            );
        }
        // A member id joining again at epoch 0 starts over (it lost its partitions, and its
        // session and a static leave are behind it: what a rollback would give back is not).
        self.remove_member(&member_id, now);
        self.departed.remove(&member_id);
        let metadata = ConsumerMemberValue {
            instance_id: request.instance_id.clone(),
            rack_id: request.rack_id.clone(),
            client_id: request.client_id.clone(),
            client_host: request.client_host.clone(),
            subscribed_topic_names: subscribed.into_iter().collect(),
            rebalance_timeout_ms: request.rebalance_timeout_ms,
            server_assignor: request.server_assignor.clone(),
        };
        self.apply(
            self.key_member(&member_id),
            Some(RecordValue::ConsumerMember(metadata)),
            now,
        );
        tracing::info!(group = %self.group_id, member = %member_id, client_id = %request.client_id, "consumer group member joined");
        self.bump_epoch(topics, now);
        self.reconcile(&member_id, None, now)
    }

    fn member_heartbeat(
        &mut self,
        request: Heartbeat,
        topics: &TopicsView,
        now: Now,
    ) -> HeartbeatResult {
        let member_id = request.member_id.clone();
        let Some(member) = self.members.get_mut(&member_id) else {
            return HeartbeatResult::error(
                &member_id,
                KafkaError::UnknownMemberId,
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
                    KafkaError::FencedMemberEpoch,
                    format!(
                        "member epoch {} is not the member's epoch {}: rejoin",
                        request.member_epoch, member.epoch
                    ),
                );
            }
        }
        member.session_deadline = now.instant + self.session_timeout;
        let before = member.metadata_value();
        let mut metadata = before.clone();
        if request.rebalance_timeout_ms >= 0 {
            metadata.rebalance_timeout_ms = request.rebalance_timeout_ms;
        }
        let mut rebalance = false;
        if let Some(subscribed) = request.subscribed_topic_names {
            let subscribed: BTreeSet<String> = subscribed.into_iter().collect();
            if subscribed != member.subscribed {
                metadata.subscribed_topic_names = subscribed.into_iter().collect();
                rebalance = true;
            }
        }
        if request.server_assignor.is_some() && request.server_assignor != member.server_assignor {
            metadata.server_assignor = request.server_assignor.clone();
            rebalance = true;
        }
        if metadata != before {
            self.apply(
                self.key_member(&member_id),
                Some(RecordValue::ConsumerMember(metadata)),
                now,
            );
        }
        if rebalance || self.topics_changed(topics) {
            self.bump_epoch(topics, now);
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
                error: Ok(()),
                message: None,
                member_id: request.member_id.clone(),
                member_epoch: -2,
                assignment: None,
                heartbeat_interval_ms: None,
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
                KafkaError::UnknownMemberId,
                format!("member {member_id} is not in group {}", self.group_id),
            );
        }
        self.remove_member(&member_id, now);
        tracing::info!(group = %self.group_id, member = %member_id, "consumer group member left");
        self.bump_epoch(topics, now);
        HeartbeatResult {
            error: Ok(()),
            message: None,
            member_id,
            member_epoch: request.member_epoch,
            assignment: None,
            heartbeat_interval_ms: None,
        }
    }

    /// Tombstones for a member's three records, its metadata last (Kafka's order): each undo
    /// record is taken while the member still holds what it undoes.
    fn remove_member(&mut self, member_id: &str, now: Now) {
        if !self.members.contains_key(member_id) {
            return;
        }
        self.apply(self.key_current(member_id), None, now);
        self.apply(self.key_target(member_id), None, now);
        self.apply(self.key_member(member_id), None, now);
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
    fn bump_epoch(&mut self, topics: &TopicsView, now: Now) {
        let group_epoch = self.group_epoch + 1;
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
        let heartbeat_due: BTreeMap<String, Instant> = self
            .members
            .values()
            .map(|m| (m.member_id.clone(), m.heartbeat_due))
            .collect();
        let target = match self.assignor() {
            "range" => assign_range(&subscriptions, &self.topics),
            _ => assign_uniform(&subscriptions, &self.topics, &self.target, &heartbeat_due),
        };
        let changed: Vec<(String, Vec<TopicIdPartition>)> = target
            .iter()
            .filter(|(member, partitions)| self.target.get(*member) != Some(*partitions))
            .map(|(member, partitions)| (member.clone(), partitions.iter().copied().collect()))
            .collect();
        let dropped: Vec<String> = self
            .target
            .keys()
            .filter(|member| !target.contains_key(*member))
            .cloned()
            .collect();
        self.apply(
            self.key_consumer_group(),
            Some(RecordValue::Epoch(group_epoch)),
            now,
        );
        for (member_id, partitions) in changed {
            self.apply(
                self.key_target(&member_id),
                Some(RecordValue::TargetMember(partitions)),
                now,
            );
        }
        for member_id in dropped {
            self.apply(self.key_target(&member_id), None, now);
        }
        self.apply(
            self.key_target_assignment(),
            Some(RecordValue::Epoch(group_epoch)),
            now,
        );
        tracing::debug!(group = %self.group_id, group_epoch, members = self.members.len(), "target assignment computed");
    }

    /// Moves a member toward its target; its answer.
    fn reconcile(
        &mut self,
        member_id: &str,
        owned: Option<&[TopicIdPartition]>,
        now: Now,
    ) -> HeartbeatResult {
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        // Partitions others still hold (assigned or not yet confirmed as revoked).
        let held_by_others: BTreeSet<TopicIdPartition> = self
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
        let Some(member) = self.members.get(member_id) else {
            return HeartbeatResult::error(member_id, KafkaError::UnknownMemberId, "member gone");
        };
        let before = member.current_value(Some(&target));
        let (mut epoch, mut previous_epoch) = (member.epoch, member.previous_epoch);
        let mut assigned = member.assigned.clone();
        let mut pending_revocation = member.pending_revocation.clone();
        if !pending_revocation.is_empty() {
            let released =
                owned.is_some_and(|owned| !owned.iter().any(|tp| pending_revocation.contains(tp)));
            if released {
                pending_revocation.clear();
            }
        }
        if pending_revocation.is_empty() {
            let to_revoke: BTreeSet<TopicIdPartition> =
                assigned.difference(&target).copied().collect();
            if !to_revoke.is_empty() {
                for tp in &to_revoke {
                    assigned.remove(tp);
                }
                pending_revocation = to_revoke;
            } else {
                if epoch != assignment_epoch {
                    previous_epoch = epoch;
                    epoch = assignment_epoch;
                }
                for tp in target.difference(&assigned).copied().collect::<Vec<_>>() {
                    if !held_by_others.contains(&tp) {
                        assigned.insert(tp);
                    }
                }
            }
        }
        let result = HeartbeatResult {
            error: Ok(()),
            message: None,
            member_id: member_id.to_owned(),
            member_epoch: epoch,
            assignment: Some(assigned.iter().copied().collect()),
            heartbeat_interval_ms: None,
        };
        let after = CurrentAssignmentValue {
            member_epoch: epoch,
            previous_member_epoch: previous_epoch,
            state: if !pending_revocation.is_empty() {
                1
            } else if target != assigned {
                2
            } else {
                0
            },
            assigned: assigned.into_iter().collect(),
            pending_revocation: pending_revocation.into_iter().collect(),
        };
        if before != after {
            self.apply(
                self.key_current(member_id),
                Some(RecordValue::CurrentAssignment(after)),
                now,
            );
        }
        result
    }

    /// Sessions that ran out and revocations not confirmed within the rebalance timeout
    /// remove their members; `topics` is current metadata.
    pub fn tick(&mut self, topics: &TopicsView, now: Now) {
        self.departed.clear();
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
            self.remove_member(member_id, now);
        }
        self.bump_epoch(topics, now);
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
    pub fn check_commit(&self, member_id: &str, member_epoch: i32) -> Result<(), KafkaError> {
        if member_epoch < 0 && member_id.is_empty() {
            return if self.members.is_empty() {
                Ok(())
            } else {
                Err(KafkaError::UnknownMemberId)
            };
        }
        match self.members.get(member_id) {
            None => Err(KafkaError::UnknownMemberId),
            Some(member) if member.epoch != member_epoch => Err(KafkaError::StaleMemberEpoch),
            Some(_) => Ok(()),
        }
    }
}

/// How long from `now` until `phase` plus a whole number of periods, in [0, period).
fn time_to_phase(phase: Instant, period: Duration, now: Instant) -> Duration {
    let period_ms = period.as_millis().max(1);
    let ms = if phase >= now {
        (phase - now).as_millis() % period_ms
    } else {
        (period_ms - (now - phase).as_millis() % period_ms) % period_ms
    };
    Duration::from_millis(ms as u64)
}

/// A member's epochs and partitions as a current assignment record has them; a revocation
/// starts its rebalance timeout (in memory only) when it begins.
fn set_current(member: &mut ConsumerMember, v: &CurrentAssignmentValue, now: Now) {
    member.epoch = v.member_epoch;
    member.previous_epoch = v.previous_member_epoch;
    member.assigned = v.assigned.iter().copied().collect();
    let pending: BTreeSet<TopicIdPartition> = v.pending_revocation.iter().copied().collect();
    if pending.is_empty() {
        member.revocation_deadline = None;
    } else if member.revocation_deadline.is_none() {
        member.revocation_deadline = Some(now.instant + member.rebalance_timeout);
    }
    member.pending_revocation = pending;
}

/// `uniform`: every partition of a subscribed topic to one of its subscribers, balanced
/// (counts differ by at most one among members with the same subscriptions), keeping each
/// partition where the previous target had it when that stays balanced (sticky).
///
/// Where balance leaves a choice, it goes by `heartbeat_due` (when each member's next
/// heartbeat is expected; a member missing from it is taken as due last): a member learns of
/// a new target only from its own heartbeat, so the partitions one member more than the
/// share may keep stay with members due latest (members due sooner give up theirs, and a
/// newcomer waits for them less), and partitions nobody keeps go to the members with the
/// fewest, the soonest due first among equals (they start reading them sooner).
pub fn assign_uniform(
    subscriptions: &BTreeMap<String, BTreeSet<String>>,
    topics: &TopicsView,
    previous: &BTreeMap<String, BTreeSet<TopicIdPartition>>,
    heartbeat_due: &BTreeMap<String, Instant>,
) -> BTreeMap<String, BTreeSet<TopicIdPartition>> {
    let mut target: BTreeMap<String, BTreeSet<TopicIdPartition>> = subscriptions
        .keys()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    if subscriptions.is_empty() {
        return target;
    }
    // Members by when their next heartbeat is due, soonest first (then by id).
    let mut by_due: Vec<&String> = subscriptions.keys().collect();
    by_due.sort_by_key(|m| (heartbeat_due.get(*m).is_none(), heartbeat_due.get(*m), *m));
    let due_rank: HashMap<&String, usize> =
        by_due.iter().enumerate().map(|(i, m)| (*m, i)).collect();
    // Every partition with the members that may take it.
    let mut partitions: Vec<(TopicIdPartition, Vec<&String>)> = Vec::new();
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
            partitions.push((TopicIdPartition::new(*id, partition), subscribers.clone()));
        }
    }
    let total = partitions.len();
    let members = subscriptions.len();
    let floor = total / members;
    let mut extra = total % members;
    let previous_owner: HashMap<TopicIdPartition, &String> = previous
        .iter()
        .flat_map(|(m, tps)| tps.iter().map(move |tp| (*tp, m)))
        .collect();
    let subscribers_of: HashMap<TopicIdPartition, &Vec<&String>> =
        partitions.iter().map(|(tp, s)| (*tp, s)).collect();
    let mut unassigned = Vec::new();
    // Sticky pass: previous owners keep up to their share.
    let mut kept: Vec<(TopicIdPartition, &String)> = Vec::new();
    for (tp, subscribers) in &partitions {
        match previous_owner.get(tp) {
            Some(owner) if subscribers.contains(owner) => kept.push((*tp, owner)),
            _ => unassigned.push((*tp, subscribers)),
        }
    }
    let mut overflow: BTreeMap<&String, Vec<TopicIdPartition>> = BTreeMap::new();
    for (tp, owner) in kept {
        let count = target.get(owner.as_str()).map_or(0, BTreeSet::len);
        if count < floor {
            target.entry(owner.clone()).or_default().insert(tp);
        } else {
            overflow.entry(owner).or_default().push(tp);
        }
    }
    // One partition over the share each, while there are such extras: first to owners for
    // whom it is all they hold over (they then give up nothing), due latest first.
    let mut owners: Vec<&String> = overflow.keys().copied().collect();
    owners.sort_by_key(|owner| {
        let rank = due_rank.get(owner).copied().unwrap_or(usize::MAX);
        (
            overflow.get(owner).map_or(0, Vec::len) > 1,
            std::cmp::Reverse(rank),
        )
    });
    for owner in owners {
        let Some(tps) = overflow.remove(owner) else {
            continue;
        };
        let mut tps = tps.into_iter();
        if extra > 0 && target.get(owner.as_str()).map_or(0, BTreeSet::len) == floor {
            if let Some(tp) = tps.next() {
                extra -= 1;
                target.entry(owner.clone()).or_default().insert(tp);
            }
        }
        for tp in tps {
            if let Some(subscribers) = subscribers_of.get(&tp) {
                unassigned.push((tp, subscribers));
            }
        }
    }
    // The rest to whichever subscriber has the fewest, the soonest due among equals.
    unassigned.sort_by_key(|(tp, _)| *tp);
    for (tp, subscribers) in unassigned {
        let chosen = subscribers
            .iter()
            .min_by_key(|m| {
                (
                    target.get(m.as_str()).map_or(0, BTreeSet::len),
                    due_rank.get(*m).copied().unwrap_or(usize::MAX),
                )
            })
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
) -> BTreeMap<String, BTreeSet<TopicIdPartition>> {
    let mut target: BTreeMap<String, BTreeSet<TopicIdPartition>> = subscriptions
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
                entry.insert(TopicIdPartition::new(*id, partition as i32));
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

    fn heartbeat(member_id: &str, epoch: i32, owned: Option<Vec<TopicIdPartition>>) -> Heartbeat {
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
            .map(|tp| tp.partition)
            .collect()
    }

    #[test]
    fn a_second_member_gets_partitions_only_after_the_first_revokes_them() {
        let base = Instant::now();
        let mut group = ConsumerGroup::new("g", Duration::from_secs(45), now(base, 0));
        let a = group.heartbeat(
            heartbeat("a", 0, Some(vec![])),
            &topics(),
            &config(),
            now(base, 0),
        );
        assert_eq!((a.error, a.member_epoch), (Ok(()), 1));
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
        let owned_a: Vec<TopicIdPartition> = (0..6).map(|p| TopicIdPartition::new(7, p)).collect();
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
        let owned_a: Vec<TopicIdPartition> =
            kept.iter().map(|p| TopicIdPartition::new(7, *p)).collect();
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
        let mut group = ConsumerGroup::new("g", Duration::from_secs(45), now(base, 0));
        group.heartbeat(
            heartbeat("a", 0, Some(vec![])),
            &topics(),
            &config(),
            now(base, 0),
        );
        let stale = group.heartbeat(heartbeat("a", 7, None), &topics(), &config(), now(base, 1));
        assert_eq!(stale.error, Err(KafkaError::FencedMemberEpoch));
        let unknown = group.heartbeat(heartbeat("x", 1, None), &topics(), &config(), now(base, 1));
        assert_eq!(unknown.error, Err(KafkaError::UnknownMemberId));
        assert_eq!(group.check_commit("a", 1), Ok(()));
        assert_eq!(
            group.check_commit("a", 0),
            Err(KafkaError::StaleMemberEpoch)
        );
        assert_eq!(group.check_commit("x", 1), Err(KafkaError::UnknownMemberId));
        assert_eq!(group.check_commit("", -1), Err(KafkaError::UnknownMemberId));
        let left = group.heartbeat(heartbeat("a", -1, None), &topics(), &config(), now(base, 2));
        assert_eq!((left.error, left.member_epoch), (Ok(()), -1));
        assert_eq!(group.state_name(), "Empty");
        assert_eq!(group.check_commit("", -1), Ok(()));
        let mut bad = heartbeat("b", 0, Some(vec![]));
        bad.server_assignor = Some("sticky".into());
        let refused = group.heartbeat(bad, &topics(), &config(), now(base, 3));
        assert_eq!(refused.error, Err(KafkaError::UnsupportedAssignor));
    }

    #[test]
    fn a_silent_member_is_removed_after_its_session() {
        let base = Instant::now();
        let mut group = ConsumerGroup::new("g", Duration::from_secs(45), now(base, 0));
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
            heartbeat(
                "a",
                1,
                Some((0..6).map(|p| TopicIdPartition::new(7, p)).collect()),
            ),
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
        let two = assign_uniform(
            &subscribe(&["a", "b"]),
            &topics,
            &BTreeMap::new(),
            &BTreeMap::new(),
        );
        let sizes: Vec<usize> = two.values().map(BTreeSet::len).collect();
        assert_eq!(sizes.iter().sum::<usize>(), 9);
        assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1);
        let three = assign_uniform(
            &subscribe(&["a", "b", "c"]),
            &topics,
            &two,
            &BTreeMap::new(),
        );
        assert_eq!(
            three.values().map(BTreeSet::len).collect::<Vec<_>>(),
            vec![3, 3, 3]
        );
        // Sticky: a and b keep what they can; c takes from both.
        assert!(three["a"].is_subset(&two["a"]));
        assert!(three["b"].is_subset(&two["b"]));
        let range = assign_range(&subscribe(&["a", "b"]), &topics);
        let tp = TopicIdPartition::new;
        assert_eq!(
            range["a"],
            BTreeSet::from([tp(1, 0), tp(1, 1), tp(1, 2), tp(1, 3), tp(2, 0)])
        );
        assert_eq!(
            range["b"],
            BTreeSet::from([tp(1, 4), tp(1, 5), tp(1, 6), tp(2, 1)])
        );
    }

    #[test]
    fn a_static_member_that_left_with_epoch_minus_2_comes_back_to_its_partitions() {
        let base = Instant::now();
        let mut group = ConsumerGroup::new("g", Duration::from_secs(45), now(base, 0));
        let mut join = heartbeat("a", 0, Some(vec![]));
        join.instance_id = Some("i1".into());
        let a = group.heartbeat(join.clone(), &topics(), &config(), now(base, 0));
        assert_eq!(partitions(&a).len(), 6);
        // A second incarnation while the first is alive: refused.
        let mut twin = join.clone();
        twin.member_id = "a2".into();
        let refused = group.heartbeat(twin.clone(), &topics(), &config(), now(base, 1));
        assert_eq!(refused.error, Err(KafkaError::UnreleasedInstanceId));
        // The first leaves for a restart (-2): the second takes its place, epoch unchanged.
        let mut leave = heartbeat("a", -2, None);
        leave.instance_id = Some("i1".into());
        let left = group.heartbeat(leave, &topics(), &config(), now(base, 2));
        assert_eq!((left.error, left.member_epoch), (Ok(()), -2));
        let epoch = group.group_epoch;
        let back = group.heartbeat(twin, &topics(), &config(), now(base, 3));
        assert_eq!((back.error, back.member_epoch), (Ok(()), a.member_epoch));
        assert_eq!(partitions(&back).len(), 6);
        assert_eq!(group.group_epoch, epoch, "no rebalance");
        assert_eq!(group.members.keys().collect::<Vec<_>>(), vec!["a2"]);
    }

    #[test]
    fn a_member_rejoining_at_epoch_0_starts_over_with_a_fresh_session() {
        let base = Instant::now();
        let mut group = ConsumerGroup::new("g", Duration::from_secs(45), now(base, 0));
        let mut join = heartbeat("a", 0, Some(vec![]));
        join.instance_id = Some("i1".into());
        group.heartbeat(join.clone(), &topics(), &config(), now(base, 0));
        // It leaves for a restart (-2), then comes back under the same member id at epoch 0.
        let mut leave = heartbeat("a", -2, None);
        leave.instance_id = Some("i1".into());
        group.heartbeat(leave, &topics(), &config(), now(base, 1));
        let back = group.heartbeat(join, &topics(), &config(), now(base, 40_000));
        assert_eq!(back.error, Ok(()));
        // Back and alive: a second incarnation is refused, not let in as if it had left.
        let mut twin = heartbeat("a2", 0, Some(vec![]));
        twin.instance_id = Some("i1".into());
        let refused = group.heartbeat(twin, &topics(), &config(), now(base, 40_001));
        assert_eq!(refused.error, Err(KafkaError::UnreleasedInstanceId));
        // And its session runs from the rejoin, not from before.
        group.tick(&topics(), now(base, 50_000));
        assert!(
            group.members.contains_key("a"),
            "expired on its old session"
        );
    }

    #[test]
    fn the_records_written_restore_the_group() {
        let base = Instant::now();
        let mut group = ConsumerGroup::new("g", Duration::from_secs(45), now(base, 0));
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
        let owned: Vec<TopicIdPartition> = (0..6).map(|p| TopicIdPartition::new(7, p)).collect();
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
        // Replay the records written, through their encoding, into an empty group: the
        // state the records describe is the live group's.
        let mut restored = ConsumerGroup::new("g", Duration::from_secs(45), now(base, 5));
        for (record, _) in group.take_journal() {
            let (key, value) = record.encode();
            let decoded = GroupRecord::decode(&key, value.as_deref())
                .unwrap()
                .expect("a record of this coordinator");
            assert_eq!(decoded, record);
            restored.replay(&decoded, now(base, 5));
        }
        restored.finish_load();
        assert_eq!(restored.durable(), group.durable());
        restored.check().unwrap();
        assert_eq!(restored.state_name(), "Stable");
    }

    /// Heartbeats every member (owning what it was last given) until the group is stable;
    /// each member's last answer by member id.
    fn settle(
        group: &mut ConsumerGroup,
        base: Instant,
        at_ms: &mut u64,
    ) -> BTreeMap<String, HeartbeatResult> {
        let mut last: BTreeMap<String, HeartbeatResult> = BTreeMap::new();
        for _ in 0..10 {
            let ids: Vec<(String, i32, Vec<TopicIdPartition>)> = group
                .members
                .values()
                .map(|m| {
                    (
                        m.member_id.clone(),
                        m.epoch,
                        m.assigned.iter().copied().collect(),
                    )
                })
                .collect();
            for (id, epoch, owned) in ids {
                *at_ms += 1;
                let answer = group.heartbeat(
                    heartbeat(&id, epoch, Some(owned)),
                    &topics(),
                    &config(),
                    now(base, *at_ms),
                );
                assert_eq!(answer.error, Ok(()), "{answer:?}");
                last.insert(id, answer);
            }
            if group.state_name() == "Stable" {
                return last;
            }
        }
        panic!("the group did not settle: {}", group.state_name());
    }

    #[test]
    fn the_interval_is_short_while_reconciling_and_one_period_apart_when_stable() {
        let base = Instant::now();
        let short = Some(RECONCILING_HEARTBEAT_INTERVAL_MS as i32);
        let period = config().consumer_heartbeat_interval_ms as i32;
        let mut group = ConsumerGroup::new("g", Duration::from_secs(45), now(base, 0));
        let hb = |group: &mut ConsumerGroup, id: &str, epoch, owned: Vec<i32>, ms| {
            let owned = owned.iter().map(|p| TopicIdPartition::new(7, *p)).collect();
            let answer = group.heartbeat(
                heartbeat(id, epoch, Some(owned)),
                &topics(),
                &config(),
                now(base, ms),
            );
            assert_eq!(answer.error, Ok(()), "{answer:?}");
            answer
        };
        let a = hb(&mut group, "a", 0, vec![], 0);
        assert_eq!(
            (partitions(&a).len(), a.heartbeat_interval_ms),
            (6, Some(period))
        );

        // B joins: its target is held by A, so it is asked back soon until it has it.
        let b = hb(&mut group, "b", 0, vec![], 10);
        assert!(partitions(&b).is_empty());
        assert_eq!(
            b.heartbeat_interval_ms, short,
            "a newcomer waiting for partitions"
        );
        // A learns at its regular heartbeat that it must give three up; asked back soon too.
        let a = hb(&mut group, "a", 1, (0..6).collect(), 5_000);
        assert_eq!((partitions(&a).len(), a.heartbeat_interval_ms), (3, short));
        let b = hb(&mut group, "b", 2, vec![], 5_010);
        assert_eq!((partitions(&b).len(), b.heartbeat_interval_ms), (0, short));
        // A confirms: stable again, a period (it is the only stable member).
        let kept: Vec<i32> = partitions(&a).into_iter().collect();
        let a = hb(&mut group, "a", 1, kept.clone(), 5_020);
        assert_eq!((a.member_epoch, a.heartbeat_interval_ms), (2, Some(period)));
        // B's next (short) heartbeat gets what A released; B is stable with it, and its
        // heartbeats are placed about half a period from A's (not in step with them).
        let b = hb(&mut group, "b", 2, vec![], 5_210);
        assert_eq!(partitions(&b).len(), 3);
        let placed = b.heartbeat_interval_ms.expect("an interval");
        let apart = (5_020 + period - (5_210 + placed)).rem_euclid(period);
        assert!(
            (period * 48 / 100..=period * 52 / 100).contains(&apart),
            "B's first interval {placed}: {apart} ms from A's heartbeats"
        );
        assert_eq!(group.state_name(), "Stable");
        // B's acknowledgement, just after, keeps that phase.
        let got_b: Vec<i32> = partitions(&b).into_iter().collect();
        let b = hb(&mut group, "b", 2, got_b.clone(), 5_220);
        assert_eq!(b.heartbeat_interval_ms, Some(placed - 10));
        assert_eq!(
            group.heartbeats_answered,
            HeartbeatsAnswered {
                reconciling: 3,
                stable: 4
            }
        );

        // From then on each heartbeats once per period: answered heartbeating on time (1 ms
        // late, a round trip), a member is due exactly one period after the last.
        let mut due = BTreeMap::from([("a", 5_020 + period as u64), ("b", 5_210 + placed as u64)]);
        for _ in 0..4 {
            let (id, at) = due
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(i, a)| (*i, *a))
                .unwrap();
            let owned = if id == "a" {
                kept.clone()
            } else {
                got_b.clone()
            };
            let answer = hb(&mut group, id, 2, owned, at + 1);
            assert_eq!(
                answer.heartbeat_interval_ms,
                Some(period - 1),
                "{id} at {at}"
            );
            due.insert(id, at + period as u64);
        }
        assert_eq!(group.heartbeats_answered.reconciling, 3);
        // Errors and leaves leave the interval to the configured one.
        let fenced = group.heartbeat(
            heartbeat("a", 9, None),
            &topics(),
            &config(),
            now(base, 40_000),
        );
        assert_eq!(
            (fenced.error, fenced.heartbeat_interval_ms),
            (Err(KafkaError::FencedMemberEpoch), None)
        );

        // The short interval is never longer than the configured one.
        let mut fast = config();
        fast.consumer_heartbeat_interval_ms = 50;
        let c = group.heartbeat(
            heartbeat("c", 0, Some(vec![])),
            &topics(),
            &fast,
            now(base, 40_001),
        );
        assert_eq!(c.heartbeat_interval_ms, Some(50));
    }

    #[test]
    fn members_stable_together_heartbeat_apart_and_a_newcomer_takes_from_the_soonest_due() {
        let base = Instant::now();
        let period = Duration::from_millis(config().consumer_heartbeat_interval_ms);
        let mut group = ConsumerGroup::new("g", Duration::from_secs(45), now(base, 0));
        let mut at_ms = 0;
        for id in ["a", "b", "c"] {
            group.heartbeat(
                heartbeat(id, 0, Some(vec![])),
                &topics(),
                &config(),
                now(base, at_ms),
            );
            settle(&mut group, base, &mut at_ms);
        }
        let before: BTreeMap<String, BTreeSet<TopicIdPartition>> = group
            .members
            .values()
            .map(|m| (m.member_id.clone(), m.assigned.clone()))
            .collect();
        assert!(before.values().all(|owned| owned.len() == 2), "{before:?}");
        // Settled within a few milliseconds of each other, their heartbeats are spread over
        // the period: at least an eighth of it apart.
        let at = base + Duration::from_millis(at_ms);
        let phases: Vec<Duration> = group
            .members
            .values()
            .map(|m| time_to_phase(m.heartbeat_phase.expect("stable"), period, at))
            .collect();
        for (i, x) in phases.iter().enumerate() {
            for y in &phases[i + 1..] {
                let apart = x.abs_diff(*y).min(period - x.abs_diff(*y));
                assert!(apart >= period / 8, "phases {phases:?}");
            }
        }
        // D joins: six partitions over four members leave two members with two and one with
        // one; the one giving a partition up is the first of them to heartbeat next.
        let soonest = group
            .members
            .values()
            .min_by_key(|m| m.heartbeat_due)
            .map(|m| m.member_id.clone())
            .expect("members");
        group.heartbeat(
            heartbeat("d", 0, Some(vec![])),
            &topics(),
            &config(),
            now(base, at_ms + 1),
        );
        for (member, target) in &group.target {
            let expected = if *member == soonest || member == "d" {
                1
            } else {
                2
            };
            assert_eq!(target.len(), expected, "{member}: {:?}", group.target);
        }
        assert!(
            group.target["d"].is_subset(&before[&soonest]),
            "D takes what {soonest} gives up"
        );
    }

    #[test]
    fn uniform_gives_a_departed_members_partitions_to_the_soonest_due_among_equals() {
        let topics = BTreeMap::from([("t".to_owned(), (1u128, 5))]);
        let tp = |p| TopicIdPartition::new(1, p);
        let subscriptions: BTreeMap<String, BTreeSet<String>> = ["a", "b", "c"]
            .iter()
            .map(|m| ((*m).to_owned(), BTreeSet::from(["t".to_owned()])))
            .collect();
        // D (partition 4) left; A keeps its two (one over the share of one, of which there
        // are two), and partition 4 goes to B or C, whichever hears first.
        let previous = BTreeMap::from([
            ("a".to_owned(), BTreeSet::from([tp(0), tp(1)])),
            ("b".to_owned(), BTreeSet::from([tp(2)])),
            ("c".to_owned(), BTreeSet::from([tp(3)])),
            ("d".to_owned(), BTreeSet::from([tp(4)])),
        ]);
        let base = Instant::now();
        for (soonest, later) in [("b", "c"), ("c", "b")] {
            let due = BTreeMap::from([
                ("a".to_owned(), base),
                (soonest.to_owned(), base + Duration::from_secs(1)),
                (later.to_owned(), base + Duration::from_secs(2)),
            ]);
            let target = assign_uniform(&subscriptions, &topics, &previous, &due);
            assert_eq!(target["a"], BTreeSet::from([tp(0), tp(1)]));
            assert!(target[soonest].contains(&tp(4)), "{target:?}");
            assert_eq!(target[later].len(), 1);
        }
    }
}
