//! What the consumer reads and where it stands ([`SubscriptionState`], as Kafka's Java client
//! names it): the subscription, and for each assigned partition its position (found from a
//! committed offset, the reset policy or a seek), whether it is paused, and what was fetched
//! for it but not yet returned. Plain state, no requests: the fetcher fills it, the offsets
//! module finds positions for it, the group membership adds and removes partitions, and poll
//! drains it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

use super::types::{ConsumerRecord, OffsetReset, TopicPartition};
use crate::client::cluster::ClusterMetadata;
use crate::client::error::{Error, Result};
use crate::protocol::errors;

/// What the consumer reads: nothing yet, partitions by hand, or a group subscription.
#[derive(Debug, Clone)]
pub(crate) enum Subscription {
    None,
    Assigned,
    Topics(BTreeSet<String>),
    Pattern(regex::Regex),
}

/// Where a partition's next fetch starts when it has no position yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Start {
    /// Ask the group for its committed offset, then `auto.offset.reset`.
    Committed,
    /// The policy (`auto.offset.reset`), or after OFFSET_OUT_OF_RANGE.
    Reset(OffsetReset),
    /// The first offset whose timestamp is at least this (or the end).
    Timestamp(i64),
}

#[derive(Debug)]
pub(crate) struct PartitionState {
    /// The offset of the next record poll returns, once known.
    pub(super) position: Option<i64>,
    /// How to find the position while it is unknown.
    pub(super) start: Start,
    /// The offset the next fetch asks for (past what is buffered).
    pub(super) fetch_offset: i64,
    /// Bumped by every seek, so answers to fetches sent before are dropped.
    pub(super) epoch: u64,
    pub(super) paused: bool,
    pub(super) in_flight: bool,
    pub(super) buffered: VecDeque<ConsumerRecord>,
    pub(super) high_watermark: i64,
    pub(super) last_leader_epoch: Option<i32>,
    /// When a fetch last brought records (the fetcher's count of served partitions then; 0
    /// never): fetches name the partitions served longest ago first.
    pub(super) served_at: u64,
    /// The replica the leader told this consumer to read from (KIP-392) and until when
    /// (`metadata.max.age.ms`, as Kafka's consumer keeps it); fetches go to the leader
    /// without one, and after any error from it.
    pub(super) preferred_read_replica: Option<(i32, Instant)>,
}

impl PartitionState {
    fn new(start: Start) -> PartitionState {
        PartitionState {
            position: None,
            start,
            fetch_offset: 0,
            epoch: 0,
            paused: false,
            in_flight: false,
            buffered: VecDeque::new(),
            high_watermark: -1,
            last_leader_epoch: None,
            served_at: 0,
            preferred_read_replica: None,
        }
    }

    pub(super) fn seek(&mut self, offset: i64) {
        self.position = Some(offset);
        self.fetch_offset = offset;
        self.epoch += 1;
        self.buffered.clear();
    }

    pub(super) fn unknown(&mut self, start: Start) {
        self.position = None;
        self.start = start;
        self.epoch += 1;
        self.buffered.clear();
    }
}

/// The subscription and the assigned partitions' states.
#[derive(Debug)]
pub(crate) struct SubscriptionState {
    pub subscription: Subscription,
    pub partitions: BTreeMap<TopicPartition, PartitionState>,
    /// Rotates which partition poll drains first, so none starves.
    drain_from: usize,
}

impl SubscriptionState {
    pub fn new() -> SubscriptionState {
        SubscriptionState {
            subscription: Subscription::None,
            partitions: BTreeMap::new(),
            drain_from: 0,
        }
    }

    /// Partitions assigned now.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.partitions.keys().cloned().collect()
    }

    /// Adds partitions (with no position: the group's commits or the reset policy decide).
    pub fn add_partitions(&mut self, partitions: &[TopicPartition]) {
        for tp in partitions {
            self.partitions
                .entry(tp.clone())
                .or_insert_with(|| PartitionState::new(Start::Committed));
        }
    }

    /// Removes partitions and what is buffered for them.
    pub fn remove_partitions(&mut self, partitions: &[TopicPartition]) {
        for tp in partitions {
            self.partitions.remove(tp);
        }
    }

    /// The positions to commit: each partition whose position is known.
    pub fn positions(&self, only: Option<&[TopicPartition]>) -> BTreeMap<TopicPartition, i64> {
        self.partitions
            .iter()
            .filter(|(tp, _)| only.is_none_or(|only| only.contains(tp)))
            .filter_map(|(tp, p)| p.position.map(|offset| (tp.clone(), offset)))
            .collect()
    }

    /// The state of `tp`, which the application named: an error when it is not assigned.
    pub(super) fn assigned(&mut self, tp: &TopicPartition) -> Result<&mut PartitionState> {
        self.partitions.get_mut(tp).ok_or_else(|| Error::Config {
            key: "partition".into(),
            reason: format!("{tp} is not assigned to this consumer"),
        })
    }

    /// The topics the subscription names, given what metadata shows exists.
    pub fn subscribed_topics(&self, metadata: &ClusterMetadata) -> BTreeSet<String> {
        match &self.subscription {
            Subscription::Topics(topics) => topics.clone(),
            Subscription::Pattern(regex) => metadata
                .topics
                .values()
                .filter(|t| {
                    !t.is_internal && t.error_code == errors::NONE && regex.is_match(&t.name)
                })
                .map(|t| t.name.clone())
                .collect(),
            Subscription::None | Subscription::Assigned => BTreeSet::new(),
        }
    }

    /// Takes up to `max` buffered records, a partition at a time, starting from a different
    /// partition each call; each partition's position moves past what is taken.
    pub(super) fn drain(&mut self, max: usize) -> Vec<ConsumerRecord> {
        let mut out = Vec::new();
        let count = self.partitions.len();
        if count == 0 {
            return out;
        }
        let start = self.drain_from % count;
        self.drain_from = self.drain_from.wrapping_add(1);
        let keys: Vec<TopicPartition> = self
            .partitions
            .keys()
            .cycle()
            .skip(start)
            .take(count)
            .cloned()
            .collect();
        for tp in keys {
            let Some(p) = self.partitions.get_mut(&tp) else {
                continue;
            };
            if p.paused {
                continue;
            }
            while out.len() < max {
                let Some(record) = p.buffered.pop_front() else {
                    break;
                };
                p.position = Some(record.offset + 1);
                out.push(record);
            }
            if p.buffered.is_empty() && p.position.is_some() {
                // Past filtered records (control batches, aborted transactions) too.
                p.position = Some(p.fetch_offset);
            }
            if out.len() >= max {
                break;
            }
        }
        out
    }
}
