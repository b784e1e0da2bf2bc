//! The classic consumer protocol's partition assignors (`partition.assignment.strategy`), run by
//! the group leader: `range`, `roundrobin` and `cooperative-sticky`, with the results Java's
//! assignors give for the same members and topics; and the subscription and assignment
//! encodings (`ConsumerProtocolSubscription`, `ConsumerProtocolAssignment`) members exchange
//! through JoinGroup and SyncGroup.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::TopicName;
use kafka_protocol::messages::consumer_protocol_assignment::{
    ConsumerProtocolAssignment, TopicPartition as AssignedTopic,
};
use kafka_protocol::messages::consumer_protocol_subscription::{
    ConsumerProtocolSubscription, TopicPartition as OwnedTopic,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::error::{Error, Result};
use crate::protocol::TopicPartition;

/// An assignor's protocol name, as JoinGroup carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignor {
    /// Each topic's partitions in contiguous ranges over its members (Java's `RangeAssignor`).
    Range,
    /// All partitions dealt round-robin over the members (`RoundRobinAssignor`).
    RoundRobin,
    /// Balanced, keeping what members own, revoking only what moves (`CooperativeStickyAssignor`).
    CooperativeSticky,
}

impl Assignor {
    /// The protocol name: `range`, `roundrobin`, `cooperative-sticky`.
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Range => "range",
            Assignor::RoundRobin => "roundrobin",
            Assignor::CooperativeSticky => "cooperative-sticky",
        }
    }

    /// Parses a name or Java's class name (`org.apache.kafka.clients.consumer.RangeAssignor`).
    pub fn parse(text: &str) -> Option<Assignor> {
        let name = text.trim().rsplit('.').next().unwrap_or("");
        Some(match name {
            "range" | "RangeAssignor" => Assignor::Range,
            "roundrobin" | "RoundRobinAssignor" => Assignor::RoundRobin,
            "cooperative-sticky" | "CooperativeStickyAssignor" => Assignor::CooperativeSticky,
            _ => return None,
        })
    }

    /// Whether members keep their partitions through a rebalance (the cooperative protocol).
    pub fn is_cooperative(self) -> bool {
        self == Assignor::CooperativeSticky
    }

    /// Assigns `partitions` (every partition of the topics any member subscribes to) to
    /// `members`, by member id.
    pub fn assign(
        self,
        members: &BTreeMap<String, Subscription>,
        partitions: &BTreeMap<String, i32>,
    ) -> BTreeMap<String, Vec<TopicPartition>> {
        let mut assignment: BTreeMap<String, Vec<TopicPartition>> = members
            .keys()
            .map(|member| (member.clone(), Vec::new()))
            .collect();
        match self {
            Assignor::Range => range(members, partitions, &mut assignment),
            Assignor::RoundRobin => round_robin(members, partitions, &mut assignment),
            Assignor::CooperativeSticky => cooperative_sticky(members, partitions, &mut assignment),
        }
        for partitions in assignment.values_mut() {
            partitions.sort();
        }
        assignment
    }
}

/// What a member told the group in JoinGroup.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subscription {
    /// The topics it subscribes to.
    pub topics: BTreeSet<String>,
    /// The partitions it owns now (cooperative protocol).
    pub owned: Vec<TopicPartition>,
    /// The generation in which it owned them (-1 unknown).
    pub generation: i32,
}

impl Subscription {
    /// The `ConsumerProtocolSubscription` bytes (version 2: owned partitions and generation).
    pub fn encode(&self) -> Result<Bytes> {
        let message = ConsumerProtocolSubscription::default()
            .with_topics(self.topics.iter().map(|t| str_bytes(t)).collect())
            .with_owned_partitions(
                group_by_topic(&self.owned)
                    .into_iter()
                    .map(|(topic, partitions)| {
                        OwnedTopic::default()
                            .with_topic(TopicName(str_bytes(&topic)))
                            .with_partitions(partitions)
                    })
                    .collect(),
            )
            .with_generation_id(self.generation);
        encode_versioned(&message, 2)
    }

    /// Decodes a member's subscription; versions newer than this client's are read as the
    /// newest it knows, as Kafka's fields are only ever appended.
    pub fn decode(bytes: &[u8]) -> Result<Subscription> {
        let (version, mut body) = split_version(bytes)?;
        let message = ConsumerProtocolSubscription::decode(&mut body, version.clamp(0, 3))
            .map_err(|e| Error::Protocol(format!("member subscription: {e}")))?;
        Ok(Subscription {
            topics: message.topics.iter().map(|t| t.to_string()).collect(),
            owned: message
                .owned_partitions
                .iter()
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .map(|&p| TopicPartition::new(t.topic.as_str(), p))
                })
                .collect(),
            generation: if version >= 2 {
                message.generation_id
            } else {
                -1
            },
        })
    }
}

/// The `ConsumerProtocolAssignment` bytes (version 1) for `partitions`.
pub fn encode_assignment(partitions: &[TopicPartition]) -> Result<Bytes> {
    let message = ConsumerProtocolAssignment::default().with_assigned_partitions(
        group_by_topic(partitions)
            .into_iter()
            .map(|(topic, partitions)| {
                AssignedTopic::default()
                    .with_topic(TopicName(str_bytes(&topic)))
                    .with_partitions(partitions)
            })
            .collect(),
    );
    encode_versioned(&message, 1)
}

/// The partitions of an assignment SyncGroup returned (empty bytes: none).
pub fn decode_assignment(bytes: &[u8]) -> Result<Vec<TopicPartition>> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let (version, mut body) = split_version(bytes)?;
    let message = ConsumerProtocolAssignment::decode(&mut body, version.clamp(0, 3))
        .map_err(|e| Error::Protocol(format!("member assignment: {e}")))?;
    let mut partitions: Vec<TopicPartition> = message
        .assigned_partitions
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|&p| TopicPartition::new(t.topic.as_str(), p))
        })
        .collect();
    partitions.sort();
    partitions.dedup();
    Ok(partitions)
}

fn str_bytes(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

fn group_by_topic(partitions: &[TopicPartition]) -> BTreeMap<String, Vec<i32>> {
    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        by_topic
            .entry(tp.topic.clone())
            .or_default()
            .push(tp.partition);
    }
    by_topic
}

fn encode_versioned<M: Encodable>(message: &M, version: i16) -> Result<Bytes> {
    let mut out = BytesMut::new();
    out.put_i16(version);
    message
        .encode(&mut out, version)
        .map_err(|e| Error::Protocol(format!("encoding the consumer protocol: {e}")))?;
    Ok(out.freeze())
}

fn split_version(bytes: &[u8]) -> Result<(i16, Bytes)> {
    if bytes.len() < 2 {
        return Err(Error::Protocol(
            "consumer protocol bytes shorter than their version".into(),
        ));
    }
    let version = i16::from_be_bytes([bytes[0], bytes[1]]);
    if version < 0 {
        return Err(Error::Protocol(format!(
            "consumer protocol version {version}"
        )));
    }
    Ok((version, Bytes::copy_from_slice(&bytes[2..])))
}

/// Members subscribed to `topic`, in member id order.
fn subscribers<'a>(members: &'a BTreeMap<String, Subscription>, topic: &str) -> Vec<&'a String> {
    members
        .iter()
        .filter(|(_, s)| s.topics.contains(topic))
        .map(|(member, _)| member)
        .collect()
}

fn range(
    members: &BTreeMap<String, Subscription>,
    partitions: &BTreeMap<String, i32>,
    assignment: &mut BTreeMap<String, Vec<TopicPartition>>,
) {
    for (topic, &count) in partitions {
        let subscribed = subscribers(members, topic);
        if subscribed.is_empty() || count <= 0 {
            continue;
        }
        let n = subscribed.len() as i32;
        let (each, extra) = (count / n, count % n);
        for (i, member) in subscribed.into_iter().enumerate() {
            let i = i as i32;
            let start = each * i + i.min(extra);
            let length = each + i32::from(i < extra);
            if let Some(assigned) = assignment.get_mut(member) {
                assigned.extend((start..start + length).map(|p| TopicPartition::new(topic, p)));
            }
        }
    }
}

fn round_robin(
    members: &BTreeMap<String, Subscription>,
    partitions: &BTreeMap<String, i32>,
    assignment: &mut BTreeMap<String, Vec<TopicPartition>>,
) {
    let ring: Vec<&String> = members.keys().collect();
    if ring.is_empty() {
        return;
    }
    let mut next = 0;
    for (topic, &count) in partitions {
        for partition in 0..count.max(0) {
            // The next member in the ring that subscribes to the topic.
            for _ in 0..ring.len() {
                let member = ring[next % ring.len()];
                next += 1;
                if members[member].topics.contains(topic) {
                    if let Some(assigned) = assignment.get_mut(member) {
                        assigned.push(TopicPartition::new(topic, partition));
                    }
                    break;
                }
            }
        }
    }
}

/// Balanced and sticky: each member keeps the partitions it owns while they stay valid and
/// the balance allows; the rest go to the least loaded eligible member; then partitions move
/// from the most to the least loaded until counts differ by at most one (where subscriptions
/// allow). A partition that changes owner is left out of this round's assignment: its old
/// owner revokes it first, rejoins, and the next round gives it to the new one (KIP-429).
fn cooperative_sticky(
    members: &BTreeMap<String, Subscription>,
    partitions: &BTreeMap<String, i32>,
    assignment: &mut BTreeMap<String, Vec<TopicPartition>>,
) {
    let all: BTreeSet<TopicPartition> = partitions
        .iter()
        .flat_map(|(topic, &count)| (0..count.max(0)).map(move |p| TopicPartition::new(topic, p)))
        .collect();
    // Previous owners; a partition two members claim goes to the higher generation.
    let mut previous: BTreeMap<TopicPartition, (&String, i32)> = BTreeMap::new();
    for (member, subscription) in members {
        for tp in &subscription.owned {
            if !all.contains(tp) || !subscription.topics.contains(&tp.topic) {
                continue;
            }
            match previous.get(tp) {
                Some((_, generation)) if *generation >= subscription.generation => {}
                _ => {
                    previous.insert(tp.clone(), (member, subscription.generation));
                }
            }
        }
    }
    let eligible = |tp: &TopicPartition| subscribers(members, &tp.topic);
    let mut owner: BTreeMap<TopicPartition, &String> = BTreeMap::new();
    let mut load: BTreeMap<&String, usize> = members.keys().map(|m| (m, 0)).collect();
    // Keep owned partitions, but no member above the most any member should hold.
    let ceiling = all.len().div_ceil(members.len().max(1));
    for (tp, (member, _)) in &previous {
        let count = load.entry(member).or_default();
        if *count < ceiling {
            *count += 1;
            owner.insert(tp.clone(), member);
        }
    }
    for tp in &all {
        if owner.contains_key(tp) {
            continue;
        }
        let least = eligible(tp).into_iter().min_by_key(|m| (load[m], *m));
        if let Some(member) = least {
            *load.entry(member).or_default() += 1;
            owner.insert(tp.clone(), member);
        }
    }
    // Even out: move a partition from the most loaded member to a less loaded eligible one.
    loop {
        let mut moved = false;
        let mut by_load: Vec<&String> = members.keys().collect();
        by_load.sort_by_key(|m| std::cmp::Reverse((load[m], *m)));
        'most: for from in by_load {
            let candidates: Vec<TopicPartition> = owner
                .iter()
                .filter(|(_, m)| **m == from)
                .map(|(tp, _)| tp.clone())
                .collect();
            for tp in candidates {
                let target = eligible(&tp)
                    .into_iter()
                    .filter(|m| load[m] + 1 < load[from])
                    .min_by_key(|m| (load[m], *m));
                if let Some(to) = target {
                    *load.entry(from).or_default() -= 1;
                    *load.entry(to).or_default() += 1;
                    owner.insert(tp, to);
                    moved = true;
                    break 'most;
                }
            }
        }
        if !moved {
            break;
        }
    }
    for (tp, member) in owner {
        let moving = previous
            .get(&tp)
            .is_some_and(|(old, _)| *old != member && members.contains_key(*old));
        if !moving {
            if let Some(assigned) = assignment.get_mut(member) {
                assigned.push(tp);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(list: &[(&str, &[&str])]) -> BTreeMap<String, Subscription> {
        list.iter()
            .map(|(member, topics)| {
                (
                    member.to_string(),
                    Subscription {
                        topics: topics.iter().map(|t| t.to_string()).collect(),
                        owned: Vec::new(),
                        generation: -1,
                    },
                )
            })
            .collect()
    }

    fn tps(list: &[(&str, i32)]) -> Vec<TopicPartition> {
        list.iter()
            .map(|(t, p)| TopicPartition::new(*t, *p))
            .collect()
    }

    #[test]
    fn range_gives_contiguous_ranges_per_topic_as_java() {
        // Java's RangeAssignorTest.testTwoConsumersTwoTopicsSixPartitions.
        let members = members(&[("c0", &["t1", "t2"]), ("c1", &["t1", "t2"])]);
        let partitions = BTreeMap::from([("t1".into(), 3), ("t2".into(), 3)]);
        let assignment = Assignor::Range.assign(&members, &partitions);
        assert_eq!(
            assignment["c0"],
            tps(&[("t1", 0), ("t1", 1), ("t2", 0), ("t2", 1)])
        );
        assert_eq!(assignment["c1"], tps(&[("t1", 2), ("t2", 2)]));
    }

    #[test]
    fn roundrobin_deals_all_partitions_over_members_as_java() {
        // Java's RoundRobinAssignorTest.testTwoConsumersTwoTopicsSixPartitions.
        let members = members(&[("c0", &["t1", "t2"]), ("c1", &["t1", "t2"])]);
        let partitions = BTreeMap::from([("t1".into(), 3), ("t2".into(), 3)]);
        let assignment = Assignor::RoundRobin.assign(&members, &partitions);
        assert_eq!(assignment["c0"], tps(&[("t1", 0), ("t1", 2), ("t2", 1)]));
        assert_eq!(assignment["c1"], tps(&[("t1", 1), ("t2", 0), ("t2", 2)]));
    }

    #[test]
    fn cooperative_sticky_keeps_owners_and_withholds_what_moves() {
        let mut group = members(&[("a", &["t"]), ("b", &["t"])]);
        let partitions = BTreeMap::from([("t".into(), 4)]);
        let first = Assignor::CooperativeSticky.assign(&group, &partitions);
        assert_eq!(first["a"].len() + first["b"].len(), 4);
        assert_eq!(first["a"].len(), 2);
        // A third member joins: a and b keep what they own but one partition each may move;
        // the moving partitions are withheld in this round.
        for (member, owned) in &first {
            if let Some(s) = group.get_mut(member) {
                s.owned = owned.clone();
                s.generation = 1;
            }
        }
        group.insert(
            "c".into(),
            Subscription {
                topics: BTreeSet::from(["t".to_string()]),
                ..Subscription::default()
            },
        );
        let second = Assignor::CooperativeSticky.assign(&group, &partitions);
        for member in ["a", "b"] {
            assert!(second[member].iter().all(|tp| first[member].contains(tp)));
        }
        assert!(second["c"].is_empty(), "moving partitions are withheld");
        let kept: usize = second.values().map(Vec::len).sum();
        assert_eq!(kept, 3, "one partition is being revoked");
        // After the revocation round every partition is assigned and counts differ by <= 1.
        for (member, owned) in &second {
            if let Some(s) = group.get_mut(member) {
                s.owned = owned.clone();
                s.generation = 2;
            }
        }
        let third = Assignor::CooperativeSticky.assign(&group, &partitions);
        let counts: Vec<usize> = third.values().map(Vec::len).collect();
        assert_eq!(counts.iter().sum::<usize>(), 4);
        assert!(counts.iter().max().unwrap_or(&0) - counts.iter().min().unwrap_or(&0) <= 1);
        for member in ["a", "b"] {
            assert!(second[member].iter().all(|tp| third[member].contains(tp)));
        }
    }

    #[test]
    fn subscriptions_and_assignments_round_trip() {
        let subscription = Subscription {
            topics: BTreeSet::from(["a".to_string(), "b".to_string()]),
            owned: tps(&[("a", 1), ("b", 0)]),
            generation: 7,
        };
        let bytes = subscription.encode().expect("encodes");
        assert_eq!(Subscription::decode(&bytes).expect("decodes"), subscription);
        let partitions = tps(&[("a", 0), ("a", 2), ("b", 1)]);
        let bytes = encode_assignment(&partitions).expect("encodes");
        assert_eq!(decode_assignment(&bytes).expect("decodes"), partitions);
        assert!(decode_assignment(&[]).expect("empty").is_empty());
        assert!(Subscription::decode(&[0]).is_err());
        assert_eq!(Assignor::parse("range"), Some(Assignor::Range));
        assert_eq!(
            Assignor::parse("org.apache.kafka.clients.consumer.CooperativeStickyAssignor"),
            Some(Assignor::CooperativeSticky)
        );
        assert_eq!(Assignor::parse("sticky"), None);
    }
}
