//! A group as the coordinator holds it: a classic group (JoinGroup/SyncGroup) or a KIP-848
//! consumer group (ConsumerGroupHeartbeat), each with its committed offsets. What both kinds
//! answer alike (offsets, commits' fencing, deletion, expiry, listing) is decided here.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::CommittedOffset;
use super::classic::{ClassicGroup, GroupState, Now};
use super::consumer::{ConsumerGroup, TopicsView};
use crate::protocol::errors;

#[derive(Debug)]
pub enum Group {
    Classic(ClassicGroup),
    Consumer(ConsumerGroup),
}

impl Group {
    pub fn group_id(&self) -> &str {
        match self {
            Group::Classic(g) => &g.group_id,
            Group::Consumer(g) => &g.group_id,
        }
    }

    pub fn offsets(&self) -> &BTreeMap<(String, i32), CommittedOffset> {
        match self {
            Group::Classic(g) => &g.offsets,
            Group::Consumer(g) => &g.offsets,
        }
    }

    pub fn offsets_mut(&mut self) -> &mut BTreeMap<(String, i32), CommittedOffset> {
        match self {
            Group::Classic(g) => &mut g.offsets,
            Group::Consumer(g) => &mut g.offsets,
        }
    }

    /// Kafka's group type, as ListGroups shows it.
    pub fn group_type(&self) -> &'static str {
        match self {
            Group::Classic(_) => "classic",
            Group::Consumer(_) => "consumer",
        }
    }

    pub fn state_name(&self) -> &'static str {
        match self {
            Group::Classic(g) => g.state().name(),
            Group::Consumer(g) => g.state_name(),
        }
    }

    pub fn protocol_type(&self) -> &str {
        match self {
            Group::Classic(g) => g.protocol_type().unwrap_or_default(),
            Group::Consumer(_) => "consumer",
        }
    }

    pub fn is_dead(&self) -> bool {
        matches!(self, Group::Classic(g) if g.state() == GroupState::Dead)
    }

    fn is_empty(&self) -> bool {
        match self {
            Group::Classic(g) => g.state() == GroupState::Empty,
            Group::Consumer(g) => g.members.is_empty(),
        }
    }

    /// OffsetCommit's fencing: NONE, or the error every partition gets.
    pub fn check_commit(
        &self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_or_epoch: i32,
    ) -> i16 {
        match self {
            Group::Classic(g) => g.check_commit(member_id, group_instance_id, generation_or_epoch),
            Group::Consumer(g) => g.check_commit(member_id, generation_or_epoch),
        }
    }

    /// Stored offsets become visible.
    pub fn commit_done(
        &mut self,
        member_id: &str,
        offsets: Vec<((String, i32), CommittedOffset)>,
        now: Now,
    ) {
        match self {
            Group::Classic(g) => g.commit_done(member_id, offsets, now),
            Group::Consumer(g) => g.offsets.extend(offsets),
        }
    }

    /// Topics the members subscribe to (OffsetDelete refuses their partitions).
    pub fn subscribed_topics(&self) -> BTreeSet<String> {
        match self {
            Group::Classic(g) => g.subscribed_topics().unwrap_or_default(),
            Group::Consumer(g) => g.subscribed_topics(),
        }
    }

    /// DeleteGroups: NONE, GROUP_ID_NOT_FOUND or NON_EMPTY_GROUP.
    pub fn check_delete(&self) -> i16 {
        match self {
            Group::Classic(g) => g.check_delete(),
            Group::Consumer(g) if g.members.is_empty() => errors::NONE,
            Group::Consumer(_) => errors::NON_EMPTY_GROUP,
        }
    }

    pub fn mark_dead(&mut self, now: Now) {
        match self {
            Group::Classic(g) => g.mark_dead(now),
            Group::Consumer(g) => {
                // A consumer group has no Dead state of its own: it becomes a dead group.
                let mut dead = ClassicGroup::new(&g.group_id, Duration::ZERO, now);
                dead.mark_dead(now);
                *self = Group::Classic(dead);
            }
        }
    }

    pub fn unload(&mut self) {
        if let Group::Classic(g) = self {
            g.unload();
        }
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        match self {
            Group::Classic(g) => g.next_deadline(),
            Group::Consumer(g) => g.next_deadline(),
        }
    }

    pub fn tick(&mut self, topics: impl FnOnce(&ConsumerGroup) -> TopicsView, now: Now) {
        match self {
            Group::Classic(g) => g.tick(now),
            Group::Consumer(g) => {
                let view = topics(g);
                g.tick(&view, now)
            }
        }
    }

    pub fn check_invariants(&self) {
        if let Group::Classic(g) = self {
            g.check_invariants();
        }
    }

    /// Offsets past `retention` (KIP-211): all of an empty group's once it has been empty that
    /// long; a classic group without a protocol (commits only) by each offset's commit time.
    pub fn expired_offsets(&self, retention: Duration, now: Now) -> Vec<(String, i32)> {
        match self {
            Group::Classic(g) => g.expired_offsets(retention, now),
            Group::Consumer(g) => {
                let empty_for = now.wall_ms.saturating_sub(g.state_since_ms());
                if g.members.is_empty() && empty_for >= retention.as_millis() as i64 {
                    g.offsets.keys().cloned().collect()
                } else {
                    Vec::new()
                }
            }
        }
    }

    /// Whether the group is empty and nothing of it would be left without `expired`.
    pub fn gone_without(&self, expired: usize) -> bool {
        self.is_empty() && self.offsets().len() == expired
    }
}
