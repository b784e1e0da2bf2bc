//! A group as the coordinator holds it: a classic group (JoinGroup/SyncGroup) or a KIP-848
//! consumer group (ConsumerGroupHeartbeat), each with its committed offsets. What both kinds
//! answer alike (offsets, commits' fencing, deletion, expiry, listing) is decided here.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::CommittedOffset;
use super::classic::{ClassicGroup, GroupState, Now};
use super::consumer::{ConsumerDurable, ConsumerGroup, TopicsView};
use super::records::GroupValue;
use crate::protocol::TopicPartition;
use crate::protocol::errors::KafkaError;

/// What a group's records say: equal for a live group and one replayed from its records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DurableGroup {
    Classic {
        stored: Option<GroupValue>,
        offsets: BTreeMap<TopicPartition, CommittedOffset>,
    },
    Consumer {
        state: ConsumerDurable,
        offsets: BTreeMap<TopicPartition, CommittedOffset>,
    },
}

// One per group in a map: boxing the larger kind would add an allocation per group and save
// a few hundred bytes per consumer group.
#[allow(clippy::large_enum_variant)]
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

    pub fn offsets(&self) -> &BTreeMap<TopicPartition, CommittedOffset> {
        match self {
            Group::Classic(g) => &g.offsets,
            Group::Consumer(g) => &g.offsets,
        }
    }

    pub fn offsets_mut(&mut self) -> &mut BTreeMap<TopicPartition, CommittedOffset> {
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

    pub fn is_empty(&self) -> bool {
        match self {
            Group::Classic(g) => g.state() == GroupState::Empty,
            Group::Consumer(g) => g.members.is_empty(),
        }
    }

    /// OffsetCommit's fencing: the error every partition gets, if any.
    pub fn check_commit(
        &self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_or_epoch: i32,
    ) -> Result<(), KafkaError> {
        match self {
            Group::Classic(g) => g.check_commit(member_id, group_instance_id, generation_or_epoch),
            Group::Consumer(g) => g.check_commit(member_id, generation_or_epoch),
        }
    }

    /// A commit by a member counts as its heartbeat (classic groups).
    pub fn commit_seen(&mut self, member_id: &str, now: Now) {
        if let Group::Classic(g) = self {
            g.commit_seen(member_id, now);
        }
    }

    /// Topics the members subscribe to (OffsetDelete refuses their partitions).
    pub fn subscribed_topics(&self) -> BTreeSet<String> {
        match self {
            Group::Classic(g) => g.subscribed_topics().unwrap_or_default(),
            Group::Consumer(g) => g.subscribed_topics(),
        }
    }

    /// DeleteGroups: refused with GROUP_ID_NOT_FOUND or NON_EMPTY_GROUP.
    pub fn check_delete(&self) -> Result<(), KafkaError> {
        match self {
            Group::Classic(g) => g.check_delete(),
            Group::Consumer(g) if g.members.is_empty() => Ok(()),
            Group::Consumer(_) => Err(KafkaError::NonEmptyGroup),
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

    /// Cheap structural checks (after every operation on the group).
    pub fn check(&self) -> Result<(), String> {
        match self {
            Group::Classic(g) => g.check(),
            Group::Consumer(g) => g.check(),
        }
    }

    /// Whether nothing of the group is left to load (the shard drops it).
    pub fn is_vacant(&self) -> bool {
        match self {
            Group::Classic(g) => g.is_vacant(),
            Group::Consumer(_) => false,
        }
    }

    /// What the records say (property tests compare live and replayed groups).
    pub fn durable(&self) -> DurableGroup {
        match self {
            Group::Classic(g) => DurableGroup::Classic {
                stored: g.stored.clone(),
                offsets: g.offsets.clone(),
            },
            Group::Consumer(g) => DurableGroup::Consumer {
                state: g.durable(),
                offsets: g.offsets.clone(),
            },
        }
    }

    /// Offsets past `retention` (KIP-211): all of an empty group's once it has been empty that
    /// long; a classic group without a protocol (commits only) by each offset's commit time.
    pub fn expired_offsets(&self, retention: Duration, now: Now) -> Vec<TopicPartition> {
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
