//! # The controller's decisions
//!
//! The active controller is the quorum leader. Each decision here reads the current
//! `MetadataImage` and returns the records that carry it out, or the Kafka error a client gets;
//! nothing here touches the network or disk, so every rule is tested on plain images. The
//! records take effect only once the quorum commits them (nodes act on committed metadata).
//!
//! - topic creation (validation, placement), deletion, partition addition;
//! - broker registration, fencing (its leaderships move to other ISR members) and unfencing;
//! - leader election from the last committed ISR only, unless unclean election is enabled for
//!   the topic;
//! - AlterPartition (ISR changes requested by a partition leader, checked against the
//!   partition and leader epochs).

pub mod placement;
pub mod service;

use std::collections::BTreeMap;

use sluice_raft::MetadataImage;
use sluice_raft::image::PartitionRegistration;
use sluice_raft::records::{
    BrokerId, ConfigResource, MetadataRecord, NO_LEADER, PartitionChange, PartitionRecord,
    RegisterBroker, Uuid,
};

use crate::log::topic_partition::validate_topic_name;
use crate::protocol::errors;
use crate::protocol::errors::{
    ELECTION_NOT_NEEDED, ELIGIBLE_LEADERS_NOT_AVAILABLE, NO_REASSIGNMENT_IN_PROGRESS,
    PREFERRED_LEADER_NOT_AVAILABLE,
};
use placement::Candidate;

/// Errors a client sees, with Kafka's codes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControllerError {
    #[error("topic '{0}' already exists")]
    TopicAlreadyExists(String),
    #[error("invalid topic: {0}")]
    InvalidTopic(String),
    #[error("invalid partitions: {0}")]
    InvalidPartitions(String),
    #[error("invalid replication factor: {0}")]
    InvalidReplicationFactor(String),
    #[error("invalid replica assignment: {0}")]
    InvalidReplicaAssignment(String),
    #[error("invalid config: {0}")]
    InvalidConfig(String),
    #[error("unknown topic or partition: {0}")]
    UnknownTopicOrPartition(String),
    #[error("broker {0} is not the leader of the partition")]
    NotLeaderOrFollower(BrokerId),
    #[error("stale leader epoch {got} (current {current})")]
    FencedLeaderEpoch { got: i32, current: i32 },
    #[error("stale partition epoch {got} (current {current})")]
    InvalidUpdateVersion { got: i32, current: i32 },
    #[error("replica {0} cannot join the ISR (unknown, fenced or not a replica)")]
    IneligibleReplica(BrokerId),
    #[error("stale broker epoch for broker {0}")]
    StaleBrokerEpoch(BrokerId),
}

impl ControllerError {
    pub fn kafka_error_code(&self) -> i16 {
        match self {
            ControllerError::TopicAlreadyExists(_) => errors::TOPIC_ALREADY_EXISTS,
            ControllerError::InvalidTopic(_) => errors::INVALID_TOPIC_EXCEPTION,
            ControllerError::InvalidPartitions(_) => errors::INVALID_PARTITIONS,
            ControllerError::InvalidReplicationFactor(_) => errors::INVALID_REPLICATION_FACTOR,
            ControllerError::InvalidReplicaAssignment(_) => errors::INVALID_REPLICA_ASSIGNMENT,
            ControllerError::InvalidConfig(_) => errors::INVALID_CONFIG,
            ControllerError::UnknownTopicOrPartition(_) => errors::UNKNOWN_TOPIC_OR_PARTITION,
            ControllerError::NotLeaderOrFollower(_) => errors::NOT_LEADER_OR_FOLLOWER,
            ControllerError::FencedLeaderEpoch { .. } => errors::FENCED_LEADER_EPOCH,
            ControllerError::InvalidUpdateVersion { .. } => errors::INVALID_UPDATE_VERSION,
            ControllerError::IneligibleReplica(_) => errors::INELIGIBLE_REPLICA,
            ControllerError::StaleBrokerEpoch(_) => errors::STALE_BROKER_EPOCH,
        }
    }
}

/// A CreateTopics entry.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct NewTopic {
    pub name: String,
    /// -1: the broker default (`num.partitions`).
    pub partitions: i32,
    /// -1: the broker default (`default.replication.factor`).
    pub replication_factor: i16,
    /// Explicit replica lists by partition (then `partitions` and `replication_factor` are -1).
    pub assignments: BTreeMap<i32, Vec<BrokerId>>,
    pub configs: BTreeMap<String, String>,
}

/// Broker-wide defaults the controller applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Defaults {
    pub partitions: i32,
    pub replication_factor: i16,
    pub unclean_leader_election: bool,
}

/// The most partitions one request may create: bounds the records a single proposal makes.
pub const PARTITIONS_PER_REQUEST_MAX: i32 = 100_000;

fn candidates(image: &MetadataImage) -> Vec<Candidate> {
    image
        .unfenced_brokers()
        .map(|b| Candidate {
            id: b.registration.broker_id,
            rack: b.registration.rack.clone(),
        })
        .collect()
}

fn alive(image: &MetadataImage, broker: BrokerId) -> bool {
    image.brokers.get(&broker).is_some_and(|b| !b.fenced)
}

fn unclean_allowed(image: &MetadataImage, topic: &str, defaults: &Defaults) -> bool {
    image
        .configs
        .get(&ConfigResource::Topic(topic.to_owned()))
        .and_then(|c| c.get("unclean.leader.election.enable"))
        .map_or(defaults.unclean_leader_election, |v| v == "true")
}

/// CreateTopics: the records that create `topic` with id `topic_id`.
pub fn create_topic(
    image: &MetadataImage,
    topic: &NewTopic,
    topic_id: Uuid,
    defaults: &Defaults,
) -> Result<Vec<MetadataRecord>, ControllerError> {
    validate_topic_name(&topic.name).map_err(ControllerError::InvalidTopic)?;
    if image.topic_by_name(&topic.name).is_some() {
        return Err(ControllerError::TopicAlreadyExists(topic.name.clone()));
    }
    let assignment = if topic.assignments.is_empty() {
        let partitions = if topic.partitions == -1 {
            defaults.partitions
        } else {
            topic.partitions
        };
        if partitions <= 0 || partitions > PARTITIONS_PER_REQUEST_MAX {
            return Err(ControllerError::InvalidPartitions(format!(
                "{partitions} partitions; must be in [1, {PARTITIONS_PER_REQUEST_MAX}]"
            )));
        }
        let factor = if topic.replication_factor == -1 {
            defaults.replication_factor
        } else {
            topic.replication_factor
        };
        let candidates = candidates(image);
        if factor <= 0 || factor as usize > candidates.len() {
            return Err(ControllerError::InvalidReplicationFactor(format!(
                "replication factor {factor} with {} available brokers",
                candidates.len()
            )));
        }
        placement::assign(
            &candidates,
            0,
            partitions,
            factor as usize,
            (topic_id.0 % 1_000_003) as usize,
        )
    } else {
        if topic.assignments.len() > PARTITIONS_PER_REQUEST_MAX as usize {
            return Err(ControllerError::InvalidPartitions(format!(
                "at most {PARTITIONS_PER_REQUEST_MAX} partitions at once"
            )));
        }
        validate_assignments(image, &topic.assignments, 0)?;
        if let Some((partition, _)) = topic
            .assignments
            .iter()
            .find(|(_, r)| !r.iter().any(|b| alive(image, *b)))
        {
            return Err(ControllerError::InvalidReplicaAssignment(format!(
                "partition {partition}: no assigned replica is an unfenced broker"
            )));
        }
        topic.assignments.clone()
    };
    let mut records = vec![MetadataRecord::Topic {
        topic_id,
        name: topic.name.clone(),
    }];
    for (name, value) in &topic.configs {
        validate_topic_config(name, value)?;
        records.push(MetadataRecord::Config {
            resource: ConfigResource::Topic(topic.name.clone()),
            name: name.clone(),
            value: Some(value.clone()),
        });
    }
    for (partition, replicas) in assignment {
        let isr: Vec<BrokerId> = replicas
            .iter()
            .copied()
            .filter(|b| alive(image, *b))
            .collect();
        let leader = isr.first().copied().unwrap_or(NO_LEADER);
        records.push(MetadataRecord::Partition(PartitionRecord {
            topic_id,
            partition,
            replicas,
            isr: if isr.is_empty() { vec![] } else { isr },
            leader,
            leader_epoch: 0,
            partition_epoch: 0,
        }));
    }
    Ok(records)
}

/// Topic configs Kafka knows that the log does not interpret, with their value checks.
type ValueCheck = fn(&str) -> bool;
const OTHER_TOPIC_KEYS: &[(&str, ValueCheck)] = &[
    ("unclean.leader.election.enable", |v| {
        v == "true" || v == "false"
    }),
    ("min.insync.replicas", |v| {
        v.parse::<i32>().is_ok_and(|n| n >= 1)
    }),
    ("compression.type", |v| {
        ["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"].contains(&v)
    }),
    ("max.compaction.lag.ms", |v| {
        v.parse::<i64>().is_ok_and(|n| n >= 1)
    }),
    ("message.timestamp.before.max.ms", |v| {
        v.parse::<i64>().is_ok_and(|n| n >= 0)
    }),
    ("message.timestamp.after.max.ms", |v| {
        v.parse::<i64>().is_ok_and(|n| n >= 0)
    }),
    ("message.timestamp.difference.max.ms", |v| {
        v.parse::<i64>().is_ok_and(|n| n >= 0)
    }),
    ("preallocate", |v| v == "true" || v == "false"),
];

/// A topic config key and value must be ones Kafka accepts (INVALID_CONFIG otherwise).
pub fn validate_topic_config(name: &str, value: &str) -> Result<(), ControllerError> {
    if crate::log::LogConfig::TOPIC_KEYS.contains(&name) {
        let mut check = crate::log::LogConfig::default();
        return check
            .set(name, value)
            .map_err(|e| ControllerError::InvalidConfig(e.to_string()));
    }
    match OTHER_TOPIC_KEYS.iter().find(|(key, _)| *key == name) {
        Some((_, valid)) if valid(value) => Ok(()),
        Some(_) => Err(ControllerError::InvalidConfig(format!(
            "invalid value '{value}' for {name}"
        ))),
        None => Err(ControllerError::InvalidConfig(format!(
            "unknown topic config {name}"
        ))),
    }
}

fn validate_assignments(
    image: &MetadataImage,
    assignments: &BTreeMap<i32, Vec<BrokerId>>,
    first: i32,
) -> Result<(), ControllerError> {
    let expected: Vec<i32> = (first..first + assignments.len() as i32).collect();
    if assignments.keys().copied().collect::<Vec<_>>() != expected {
        return Err(ControllerError::InvalidReplicaAssignment(format!(
            "partitions must be numbered {first}.. without gaps"
        )));
    }
    let factor = assignments.values().next().map_or(0, Vec::len);
    for (partition, replicas) in assignments {
        let mut sorted = replicas.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if replicas.is_empty() || sorted.len() != replicas.len() || replicas.len() != factor {
            return Err(ControllerError::InvalidReplicaAssignment(format!(
                "partition {partition}: {replicas:?}"
            )));
        }
        if let Some(unknown) = replicas.iter().find(|b| !image.brokers.contains_key(b)) {
            return Err(ControllerError::InvalidReplicaAssignment(format!(
                "broker {unknown} is not registered"
            )));
        }
    }
    Ok(())
}

/// DeleteTopics.
pub fn delete_topic(
    image: &MetadataImage,
    name: &str,
) -> Result<Vec<MetadataRecord>, ControllerError> {
    let topic = image
        .topic_by_name(name)
        .ok_or_else(|| ControllerError::UnknownTopicOrPartition(name.to_owned()))?;
    Ok(vec![MetadataRecord::RemoveTopic { topic_id: topic.id }])
}

/// CreatePartitions: grow `name` to `total` partitions.
pub fn create_partitions(
    image: &MetadataImage,
    name: &str,
    total: i32,
) -> Result<Vec<MetadataRecord>, ControllerError> {
    let topic = image
        .topic_by_name(name)
        .ok_or_else(|| ControllerError::UnknownTopicOrPartition(name.to_owned()))?;
    let current = topic.partitions.len() as i32;
    if total <= current {
        return Err(ControllerError::InvalidPartitions(format!(
            "topic has {current} partitions; {total} would not add any"
        )));
    }
    if total - current > PARTITIONS_PER_REQUEST_MAX {
        return Err(ControllerError::InvalidPartitions(format!(
            "at most {PARTITIONS_PER_REQUEST_MAX} partitions at once"
        )));
    }
    let factor = topic
        .partitions
        .values()
        .next()
        .map_or(1, |p| p.replicas.len());
    let candidates = candidates(image);
    if factor > candidates.len() {
        return Err(ControllerError::InvalidReplicationFactor(format!(
            "replication factor {factor} with {} available brokers",
            candidates.len()
        )));
    }
    let assignment = placement::assign(
        &candidates,
        current,
        total - current,
        factor,
        (topic.id.0 % 1_000_003) as usize,
    );
    Ok(assignment
        .into_iter()
        .map(|(partition, replicas)| {
            MetadataRecord::Partition(PartitionRecord {
                topic_id: topic.id,
                partition,
                leader: replicas[0],
                isr: replicas.clone(),
                replicas,
                leader_epoch: 0,
                partition_epoch: 0,
            })
        })
        .collect())
}

/// The outcome of a leader election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Election {
    /// From the ISR: no acknowledged record can be lost.
    Clean(BrokerId),
    /// Outside the ISR, because the topic allows it: acknowledged records may be lost.
    Unclean(BrokerId),
    /// No eligible replica: the partition is offline.
    None,
}

/// Kafka's rule: the first replica, in assignment order, that is in the ISR and alive; with
/// unclean election allowed, failing that, the first alive replica.
pub fn elect_leader(
    replicas: &[BrokerId],
    isr: &[BrokerId],
    alive: impl Fn(BrokerId) -> bool,
    unclean: bool,
) -> Election {
    if let Some(leader) = replicas.iter().find(|r| isr.contains(r) && alive(**r)) {
        return Election::Clean(*leader);
    }
    if unclean {
        if let Some(leader) = replicas.iter().find(|r| alive(**r)) {
            return Election::Unclean(*leader);
        }
    }
    Election::None
}

/// The first of `replicas` (preferred order) that is in `isr` and alive, or no leader: a
/// clean election, for moves that leave the current leader out.
fn clean_leader(replicas: &[BrokerId], isr: &[BrokerId], image: &MetadataImage) -> BrokerId {
    match elect_leader(replicas, isr, |b| alive(image, b), false) {
        Election::Clean(leader) => leader,
        Election::Unclean(_) | Election::None => NO_LEADER,
    }
}

/// The change that removes `gone` from a partition's ISR and, if it led, elects a new leader.
/// The ISR never becomes empty: its last member stays (it holds every acknowledged record).
fn without_broker(
    image: &MetadataImage,
    topic: &str,
    topic_id: Uuid,
    partition: i32,
    current: &PartitionRegistration,
    gone: BrokerId,
    defaults: &Defaults,
) -> Option<PartitionChange> {
    let in_isr = current.isr.contains(&gone);
    if !in_isr && current.leader != gone {
        return None;
    }
    let mut isr: Vec<BrokerId> = current.isr.iter().copied().filter(|b| *b != gone).collect();
    if isr.is_empty() {
        isr = current.isr.clone();
    }
    let mut change = PartitionChange {
        topic_id,
        partition,
        ..Default::default()
    };
    if current.leader == gone || !alive(image, current.leader) {
        let is_alive = |b: BrokerId| b != gone && alive(image, b);
        match elect_leader(
            &current.replicas,
            &isr,
            is_alive,
            unclean_allowed(image, topic, defaults),
        ) {
            Election::Clean(leader) => change.leader = Some(leader),
            Election::Unclean(leader) => {
                tracing::warn!(
                    topic,
                    partition,
                    leader,
                    "UNCLEAN leader election: acknowledged records may be lost"
                );
                change.leader = Some(leader);
                isr = vec![leader];
            }
            Election::None => change.leader = Some(NO_LEADER),
        }
    }
    if isr != current.isr {
        change.isr = Some(isr);
    }
    if change.leader == Some(current.leader) {
        // Already leaderless (offline): nothing moves.
        change.leader = None;
    }
    (change.leader.is_some() || change.isr.is_some()).then_some(change)
}

/// A broker missed its heartbeats (or shut down): fence it and move its leaderships.
pub fn fence_broker(
    image: &MetadataImage,
    broker: BrokerId,
    defaults: &Defaults,
) -> Result<Vec<MetadataRecord>, ControllerError> {
    let registration = image
        .brokers
        .get(&broker)
        .ok_or(ControllerError::StaleBrokerEpoch(broker))?;
    let mut records = Vec::new();
    if !registration.fenced {
        records.push(MetadataRecord::FenceBroker {
            broker_id: broker,
            broker_epoch: registration.registration.broker_epoch,
        });
    }
    let mut fenced = image.clone();
    if let Some(b) = fenced.brokers.get_mut(&broker) {
        b.fenced = true;
    }
    for topic in image.topics.values() {
        for (partition, current) in &topic.partitions {
            if let Some(change) = without_broker(
                &fenced,
                &topic.name,
                topic.id,
                *partition,
                current,
                broker,
                defaults,
            ) {
                records.push(MetadataRecord::PartitionChange(change));
            }
        }
    }
    Ok(records)
}

/// A broker registers (start-up): it is fenced until it has caught up with the metadata log.
///
/// A registration that replaces an earlier one ends that incarnation first, as fencing does
/// (Kafka's unclean-shutdown handling, KIP-966): its leaderships move to other live ISR
/// members and it leaves the ISRs, all in the same commit. The process that registers has
/// just restarted: whatever its log holds was not seen by the controller, and while it led
/// under the old leader epoch it could serve from a log cut short by the crash. It comes back
/// as a follower, rejoins the ISRs as it catches up, and leads only through a new election
/// (at a new leader epoch). A broker that shut down cleanly was fenced already: nothing moves.
pub fn register_broker(
    image: &MetadataImage,
    registration: RegisterBroker,
    defaults: &Defaults,
) -> Vec<MetadataRecord> {
    let mut registration = registration;
    registration.fenced = true;
    let mut records = Vec::new();
    if let Some(previous) = image.brokers.get(&registration.broker_id) {
        registration.broker_epoch = registration
            .broker_epoch
            .max(previous.registration.broker_epoch + 1);
        if let Ok(mut fenced) = fence_broker(image, registration.broker_id, defaults) {
            records.append(&mut fenced);
        }
    }
    records.push(MetadataRecord::RegisterBroker(registration));
    records
}

/// The broker caught up: unfence it, and give offline partitions whose ISR it is in a leader.
pub fn unfence_broker(
    image: &MetadataImage,
    broker: BrokerId,
    broker_epoch: i64,
) -> Result<Vec<MetadataRecord>, ControllerError> {
    let registration = image
        .brokers
        .get(&broker)
        .ok_or(ControllerError::StaleBrokerEpoch(broker))?;
    if registration.registration.broker_epoch != broker_epoch {
        return Err(ControllerError::StaleBrokerEpoch(broker));
    }
    let mut records = Vec::new();
    if registration.fenced {
        records.push(MetadataRecord::UnfenceBroker {
            broker_id: broker,
            broker_epoch,
        });
    }
    for topic in image.topics.values() {
        for (partition, current) in &topic.partitions {
            if current.leader == NO_LEADER && current.isr.contains(&broker) {
                records.push(MetadataRecord::PartitionChange(PartitionChange {
                    topic_id: topic.id,
                    partition: *partition,
                    leader: Some(broker),
                    ..Default::default()
                }));
            }
        }
    }
    Ok(records)
}

/// Kafka's ElectLeaders election types.
pub const ELECTION_PREFERRED: i8 = 0;
pub const ELECTION_UNCLEAN: i8 = 1;

/// ElectLeaders for one partition: preferred (its first replica, when alive and in the ISR)
/// or unclean (an offline partition gets any live replica). The change, or the error code.
pub fn elect_for(
    image: &MetadataImage,
    topic_id: Uuid,
    partition: i32,
    election_type: i8,
) -> Result<PartitionChange, i16> {
    let current = image.partition(topic_id, partition).ok_or(
        ControllerError::UnknownTopicOrPartition(format!("{partition}")).kafka_error_code(),
    )?;
    let change = |leader: BrokerId, isr: Option<Vec<BrokerId>>| PartitionChange {
        topic_id,
        partition,
        leader: Some(leader),
        isr,
        replicas: None,
    };
    if election_type == ELECTION_UNCLEAN {
        if current.leader != NO_LEADER && alive(image, current.leader) {
            return Err(ELECTION_NOT_NEEDED);
        }
        return match elect_leader(&current.replicas, &current.isr, |b| alive(image, b), true) {
            Election::Clean(leader) => Ok(change(leader, None)),
            Election::Unclean(leader) => {
                tracing::warn!(%topic_id, partition, leader, "UNCLEAN leader election (ElectLeaders): acknowledged records may be lost");
                Ok(change(leader, Some(vec![leader])))
            }
            Election::None => Err(ELIGIBLE_LEADERS_NOT_AVAILABLE),
        };
    }
    let Some(&preferred) = current.replicas.first() else {
        return Err(PREFERRED_LEADER_NOT_AVAILABLE);
    };
    if current.leader == preferred {
        return Err(ELECTION_NOT_NEEDED);
    }
    if !alive(image, preferred) || !current.isr.contains(&preferred) {
        return Err(PREFERRED_LEADER_NOT_AVAILABLE);
    }
    Ok(change(preferred, None))
}

/// Leader rebalancing (`auto.leader.rebalance.enable`): every partition whose preferred
/// replica is alive, in the ISR and not leading gets it back as leader.
pub fn preferred_leader_changes(image: &MetadataImage) -> Vec<MetadataRecord> {
    image
        .topics
        .values()
        .flat_map(|t| t.partitions.keys().map(move |p| (t.id, *p)))
        .filter_map(|(topic_id, partition)| {
            elect_for(image, topic_id, partition, ELECTION_PREFERRED).ok()
        })
        .map(MetadataRecord::PartitionChange)
        .collect()
}

/// AlterPartitionReassignments for one partition: `Some(target)` starts (or redirects) a move
/// to those replicas: they are added to the replica set now and follow the leader; once all
/// are in the ISR, `complete_reassignments` drops the others. `None` cancels a move, back to
/// the replicas it started from.
pub fn reassign(
    image: &MetadataImage,
    topic: &str,
    partition: i32,
    target: Option<Vec<BrokerId>>,
) -> Result<Vec<MetadataRecord>, i16> {
    let unknown = || ControllerError::UnknownTopicOrPartition(format!("{topic}-{partition}"));
    let topic_image = image
        .topic_by_name(topic)
        .ok_or_else(|| unknown().kafka_error_code())?;
    let current = topic_image
        .partitions
        .get(&partition)
        .ok_or_else(|| unknown().kafka_error_code())?;
    let key = (topic_image.id, partition);
    let ongoing = image.reassignments.get(&key);
    let Some(target) = target else {
        let Some(ongoing) = ongoing else {
            return Err(NO_REASSIGNMENT_IN_PROGRESS);
        };
        let original = ongoing.original.clone();
        let mut change = PartitionChange {
            topic_id: topic_image.id,
            partition,
            replicas: Some(original.clone()),
            ..Default::default()
        };
        let isr: Vec<BrokerId> = current
            .isr
            .iter()
            .copied()
            .filter(|b| original.contains(b))
            .collect();
        let isr = if isr.is_empty() {
            vec![original[0]]
        } else {
            isr
        };
        if !isr.contains(&current.leader) {
            change.leader = Some(clean_leader(&original, &isr, image));
        }
        change.isr = Some(isr);
        return Ok(vec![
            MetadataRecord::PartitionChange(change),
            MetadataRecord::Reassignment {
                topic_id: topic_image.id,
                partition,
                target: None,
            },
        ]);
    };
    let mut distinct = target.clone();
    distinct.sort_unstable();
    distinct.dedup();
    let invalid = |why: String| ControllerError::InvalidReplicaAssignment(why).kafka_error_code();
    if target.is_empty() || distinct.len() != target.len() {
        return Err(invalid(format!("replicas {target:?}")));
    }
    if let Some(unknown) = target.iter().find(|b| !image.brokers.contains_key(b)) {
        return Err(invalid(format!("broker {unknown} is not registered")));
    }
    if ongoing.is_none() && target == current.replicas {
        return Ok(Vec::new());
    }
    let original = ongoing.map_or_else(|| current.replicas.clone(), |o| o.original.clone());
    // Target first (its first replica becomes the preferred leader), then those leaving.
    let mut replicas = target.clone();
    replicas.extend(current.replicas.iter().filter(|b| !target.contains(b)));
    Ok(vec![
        MetadataRecord::Reassignment {
            topic_id: topic_image.id,
            partition,
            target: Some(sluice_raft::records::Reassignment {
                target: target.clone(),
                original,
            }),
        },
        MetadataRecord::PartitionChange(PartitionChange {
            topic_id: topic_image.id,
            partition,
            replicas: Some(replicas),
            ..Default::default()
        }),
    ])
}

/// Reassignments whose target replicas are all in the ISR finish: the replica set becomes the
/// target, the ISR keeps only target replicas, and leadership moves into the target if needed.
pub fn complete_reassignments(image: &MetadataImage) -> Vec<MetadataRecord> {
    let mut records = Vec::new();
    for ((topic_id, partition), reassignment) in &image.reassignments {
        let Some(current) = image.partition(*topic_id, *partition) else {
            continue;
        };
        let target = &reassignment.target;
        if !target.iter().all(|b| current.isr.contains(b)) {
            continue;
        }
        let isr: Vec<BrokerId> = target
            .iter()
            .copied()
            .filter(|b| current.isr.contains(b))
            .collect();
        let mut change = PartitionChange {
            topic_id: *topic_id,
            partition: *partition,
            replicas: Some(target.clone()),
            isr: Some(isr.clone()),
            ..Default::default()
        };
        if !target.contains(&current.leader) {
            change.leader = Some(clean_leader(target, &isr, image));
        }
        records.push(MetadataRecord::PartitionChange(change));
        records.push(MetadataRecord::Reassignment {
            topic_id: *topic_id,
            partition: *partition,
            target: None,
        });
    }
    records
}

/// Producer ids handed to a broker at a time.
pub const PRODUCER_ID_BLOCK_SIZE: i32 = 1000;

/// AllocateProducerIds: the next block of producer ids for a registered broker, as the record
/// that hands it out and the block's first id.
pub fn allocate_producer_ids(
    image: &MetadataImage,
    broker_id: BrokerId,
    broker_epoch: i64,
) -> Result<(Vec<MetadataRecord>, i64), ControllerError> {
    match image.brokers.get(&broker_id) {
        Some(b) if b.registration.broker_epoch == broker_epoch => {}
        _ => return Err(ControllerError::StaleBrokerEpoch(broker_id)),
    }
    let first = image.next_producer_id;
    let record = MetadataRecord::ProducerIds {
        broker_id,
        broker_epoch,
        next_producer_id: first + i64::from(PRODUCER_ID_BLOCK_SIZE),
    };
    Ok((vec![record], first))
}

/// Broker configs that can be changed while running, cluster-wide or per broker: the topic
/// defaults (applied to every topic without its own value) and `min.insync.replicas`.
pub fn is_dynamic_broker_config(name: &str) -> bool {
    crate::log::config::BROKER_TO_TOPIC_KEYS
        .iter()
        .any(|(broker_key, _)| *broker_key == name)
        || matches!(
            name,
            "log.retention.ms"
                | "log.retention.minutes"
                | "log.retention.hours"
                | "log.roll.ms"
                | "log.roll.hours"
                | "min.insync.replicas"
                | "unclean.leader.election.enable"
                | "compression.type"
        )
}

/// IncrementalAlterConfigs of one resource: `changes` sets (`Some`) or deletes (`None`) keys.
pub fn alter_configs(
    image: &MetadataImage,
    resource: &ConfigResource,
    changes: &[(String, Option<String>)],
) -> Result<Vec<MetadataRecord>, ControllerError> {
    match resource {
        ConfigResource::Topic(name) => {
            if image.topic_by_name(name).is_none() {
                return Err(ControllerError::UnknownTopicOrPartition(name.clone()));
            }
            for (key, value) in changes {
                match value {
                    Some(value) => validate_topic_config(key, value)?,
                    None => validate_topic_config_key(key)?,
                }
            }
        }
        ConfigResource::Broker(id) => {
            if let Some(id) = id {
                if !image.brokers.contains_key(id) {
                    return Err(ControllerError::InvalidConfig(format!(
                        "broker {id} is not registered"
                    )));
                }
            }
            for (key, value) in changes {
                if !is_dynamic_broker_config(key) {
                    return Err(ControllerError::InvalidConfig(format!(
                        "{key} cannot be changed dynamically"
                    )));
                }
                if let Some(value) = value {
                    let mut properties = BTreeMap::new();
                    properties.insert(key.clone(), value.clone());
                    crate::log::LogConfig::from_broker_properties(&properties)
                        .map_err(|e| ControllerError::InvalidConfig(e.to_string()))?;
                    if let Some((_, topic_key)) = crate::log::config::BROKER_TO_TOPIC_KEYS
                        .iter()
                        .find(|(broker_key, _)| broker_key == key)
                    {
                        validate_topic_config(topic_key, value)?;
                    } else if !matches!(
                        key.as_str(),
                        "log.retention.ms"
                            | "log.retention.minutes"
                            | "log.retention.hours"
                            | "log.roll.ms"
                            | "log.roll.hours"
                    ) {
                        validate_topic_config(key, value)?;
                    }
                }
            }
        }
    }
    let mut records: Vec<MetadataRecord> = changes
        .iter()
        .map(|(name, value)| MetadataRecord::Config {
            resource: resource.clone(),
            name: name.clone(),
            value: value.clone(),
        })
        .collect();
    // Enabling unclean election on a topic elects a leader for its offline partitions now
    // (KIP-704), from any live replica.
    let enables_unclean = changes.iter().any(|(name, value)| {
        name == "unclean.leader.election.enable" && value.as_deref() == Some("true")
    });
    if let (ConfigResource::Topic(name), true) = (resource, enables_unclean) {
        if let Some(topic) = image.topic_by_name(name) {
            for (partition, current) in &topic.partitions {
                if current.leader != NO_LEADER {
                    continue;
                }
                let election =
                    elect_leader(&current.replicas, &current.isr, |b| alive(image, b), true);
                let leader = match election {
                    Election::Clean(leader) => leader,
                    Election::Unclean(leader) => {
                        tracing::warn!(
                            topic = %name,
                            partition,
                            leader,
                            "UNCLEAN leader election: acknowledged records may be lost"
                        );
                        leader
                    }
                    Election::None => continue,
                };
                records.push(MetadataRecord::PartitionChange(PartitionChange {
                    topic_id: topic.id,
                    partition: *partition,
                    leader: Some(leader),
                    isr: (!current.isr.contains(&leader)).then(|| vec![leader]),
                    replicas: None,
                }));
            }
        }
    }
    Ok(records)
}

fn validate_topic_config_key(name: &str) -> Result<(), ControllerError> {
    if crate::log::LogConfig::TOPIC_KEYS.contains(&name)
        || OTHER_TOPIC_KEYS.iter().any(|(key, _)| *key == name)
    {
        Ok(())
    } else {
        Err(ControllerError::InvalidConfig(format!(
            "unknown topic config {name}"
        )))
    }
}

/// An AlterPartition request from a partition leader.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AlterPartition {
    pub broker: BrokerId,
    pub topic_id: Uuid,
    pub partition: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub new_isr: Vec<BrokerId>,
}

/// Checks an ISR change against the current registration and returns its record.
pub fn alter_partition(
    image: &MetadataImage,
    request: &AlterPartition,
) -> Result<Vec<MetadataRecord>, ControllerError> {
    let current = image
        .partition(request.topic_id, request.partition)
        .ok_or_else(|| {
            ControllerError::UnknownTopicOrPartition(format!(
                "{}-{}",
                request.topic_id, request.partition
            ))
        })?;
    if current.leader != request.broker {
        return Err(ControllerError::NotLeaderOrFollower(request.broker));
    }
    if request.leader_epoch != current.leader_epoch {
        return Err(ControllerError::FencedLeaderEpoch {
            got: request.leader_epoch,
            current: current.leader_epoch,
        });
    }
    if request.partition_epoch != current.partition_epoch {
        return Err(ControllerError::InvalidUpdateVersion {
            got: request.partition_epoch,
            current: current.partition_epoch,
        });
    }
    if !request.new_isr.contains(&request.broker) {
        return Err(ControllerError::IneligibleReplica(request.broker));
    }
    if let Some(twice) = request
        .new_isr
        .iter()
        .find(|b| request.new_isr.iter().filter(|x| x == b).count() > 1)
    {
        return Err(ControllerError::IneligibleReplica(*twice));
    }
    if !alive(image, request.broker) {
        // A fenced leader's view of its followers is not to be trusted.
        return Err(ControllerError::NotLeaderOrFollower(request.broker));
    }
    for member in &request.new_isr {
        let joining = !current.isr.contains(member);
        if !current.replicas.contains(member) || (joining && !alive(image, *member)) {
            return Err(ControllerError::IneligibleReplica(*member));
        }
    }
    Ok(vec![MetadataRecord::PartitionChange(PartitionChange {
        topic_id: request.topic_id,
        partition: request.partition,
        isr: Some(request.new_isr.clone()),
        ..Default::default()
    })])
}

#[cfg(test)]
mod tests {
    use sluice_raft::MetadataDelta;
    use sluice_raft::records::{Endpoint, MetadataRequest};

    use super::*;

    const DEFAULTS: Defaults = Defaults {
        partitions: 3,
        replication_factor: 3,
        unclean_leader_election: false,
    };

    fn apply(image: &MetadataImage, records: Vec<MetadataRecord>) -> MetadataImage {
        let mut delta = MetadataDelta::new(image);
        delta
            .replay_all(&MetadataRequest::new(records).records)
            .expect("controller records replay");
        delta.apply(image.index + 1)
    }

    fn cluster(brokers: i32) -> MetadataImage {
        let mut image = MetadataImage::default();
        for id in 1..=brokers {
            let registration = RegisterBroker {
                broker_id: id,
                incarnation_id: Uuid(id as u128),
                broker_epoch: 10,
                endpoints: vec![Endpoint {
                    name: "PLAINTEXT".into(),
                    host: "127.0.0.1".into(),
                    port: 9092,
                    security_protocol: "PLAINTEXT".into(),
                }],
                rack: None,
                fenced: true,
            };
            image = apply(&image, register_broker(&image, registration, &DEFAULTS));
            image = apply(&image, unfence_broker(&image, id, 10).unwrap());
        }
        image
    }

    /// The partitions of `topic` that `broker` leads.
    fn led_by(image: &MetadataImage, topic: &str, broker: BrokerId) -> Vec<i32> {
        image
            .topic_by_name(topic)
            .unwrap()
            .partitions
            .iter()
            .filter(|(_, p)| p.leader == broker)
            .map(|(n, _)| *n)
            .collect()
    }

    fn topic(name: &str) -> NewTopic {
        NewTopic {
            name: name.into(),
            partitions: -1,
            replication_factor: -1,
            ..Default::default()
        }
    }

    #[test]
    fn create_topic_validates_like_kafka() {
        let image = cluster(3);
        let image = apply(
            &image,
            create_topic(&image, &topic("orders"), Uuid(1), &DEFAULTS).unwrap(),
        );
        let orders = image.topic_by_name("orders").unwrap();
        assert_eq!(orders.partitions.len(), 3);
        assert!(
            orders
                .partitions
                .values()
                .all(|p| p.replicas.len() == 3 && p.isr == p.replicas && p.leader == p.replicas[0])
        );
        let code = |t: &NewTopic| {
            create_topic(&image, t, Uuid(2), &DEFAULTS)
                .unwrap_err()
                .kafka_error_code()
        };
        assert_eq!(code(&topic("orders")), 36, "TOPIC_ALREADY_EXISTS");
        assert_eq!(
            code(&NewTopic {
                partitions: 0,
                ..topic("a")
            }),
            37,
            "INVALID_PARTITIONS"
        );
        assert_eq!(
            code(&NewTopic {
                replication_factor: 4,
                ..topic("a")
            }),
            38,
            "INVALID_REPLICATION_FACTOR"
        );
        assert_eq!(
            code(&NewTopic {
                replication_factor: 0,
                ..topic("a")
            }),
            38
        );
        assert_eq!(code(&topic("bad name")), 17, "INVALID_TOPIC_EXCEPTION");
        let bad_assignment = NewTopic {
            assignments: [(0, vec![1, 1])].into(),
            ..topic("a")
        };
        assert_eq!(code(&bad_assignment), 39, "INVALID_REPLICA_ASSIGNMENT");
        let bad_config = NewTopic {
            configs: [("retention.ms".into(), "soon".into())].into(),
            ..topic("a")
        };
        assert_eq!(code(&bad_config), 40, "INVALID_CONFIG");
        let unknown_config = NewTopic {
            configs: [("retention.forever".into(), "1".into())].into(),
            ..topic("a")
        };
        assert_eq!(code(&unknown_config), 40, "INVALID_CONFIG");
        let fine = NewTopic {
            configs: [
                ("min.insync.replicas".into(), "2".into()),
                ("cleanup.policy".into(), "compact".into()),
            ]
            .into(),
            ..topic("a")
        };
        assert!(create_topic(&image, &fine, Uuid(3), &DEFAULTS).is_ok());
    }

    #[test]
    fn fencing_moves_leaderships_to_the_isr_and_never_empties_it() {
        let image = cluster(3);
        let image = apply(
            &image,
            create_topic(&image, &topic("orders"), Uuid(1), &DEFAULTS).unwrap(),
        );
        let led_by_1 = led_by(&image, "orders", 1);
        assert!(!led_by_1.is_empty());
        let image = apply(&image, fence_broker(&image, 1, &DEFAULTS).unwrap());
        for partition in image.topic_by_name("orders").unwrap().partitions.values() {
            assert_ne!(partition.leader, 1);
            assert!(!partition.isr.contains(&1));
            assert!(partition.isr.contains(&partition.leader));
        }
        for number in led_by_1 {
            assert_eq!(
                image.partition(Uuid(1), number).unwrap().leader_epoch,
                1,
                "a new leader bumps the epoch"
            );
        }
        // Fence the other two: the ISR keeps its last member and the partition goes offline.
        let image = apply(&image, fence_broker(&image, 2, &DEFAULTS).unwrap());
        let image = apply(&image, fence_broker(&image, 3, &DEFAULTS).unwrap());
        for partition in image.topic_by_name("orders").unwrap().partitions.values() {
            assert_eq!(partition.leader, NO_LEADER);
            assert_eq!(partition.isr.len(), 1, "the last ISR member stays");
        }
        // Broker 1 comes back: it is not in any ISR, so without unclean election nothing changes.
        let image = apply(&image, unfence_broker(&image, 1, 10).unwrap());
        assert!(
            image
                .topic_by_name("orders")
                .unwrap()
                .partitions
                .values()
                .all(|p| p.leader == NO_LEADER)
        );
        // The last ISR member comes back: it leads again.
        let last = image.partition(Uuid(1), 0).unwrap().isr[0];
        let image = apply(&image, unfence_broker(&image, last, 10).unwrap());
        assert_eq!(image.partition(Uuid(1), 0).unwrap().leader, last);
    }

    /// A broker that restarts (kill -9) and registers again never keeps the leaderships of its
    /// earlier incarnation: in the same commit as its registration they move to live ISR
    /// members and it leaves the ISRs; where it is the last ISR member the partition waits
    /// offline and it leads again, at a new leader epoch, once unfenced.
    #[test]
    fn a_restarted_broker_registering_again_gives_up_its_leaderships() {
        let image = cluster(3);
        let image = apply(
            &image,
            create_topic(&image, &topic("orders"), Uuid(1), &DEFAULTS).unwrap(),
        );
        let mut single = topic("single");
        single.replication_factor = 1;
        let image = apply(
            &image,
            create_topic(&image, &single, Uuid(2), &DEFAULTS).unwrap(),
        );
        let before = image.clone();
        let again = RegisterBroker {
            broker_id: 1,
            incarnation_id: Uuid(99),
            broker_epoch: 20,
            endpoints: before.brokers[&1].registration.endpoints.clone(),
            rack: None,
            fenced: true,
        };
        let image = apply(&image, register_broker(&image, again, &DEFAULTS));
        assert!(image.brokers[&1].fenced);
        assert_eq!(image.brokers[&1].registration.broker_epoch, 20);
        for (number, partition) in &image.topic_by_name("orders").unwrap().partitions {
            let was = before.partition(Uuid(1), *number).unwrap();
            assert_ne!(partition.leader, 1, "partition {number}");
            assert!(!partition.isr.contains(&1));
            if was.leader == 1 {
                assert!(partition.leader_epoch > was.leader_epoch);
            }
        }
        let single_led_by_1 = led_by(&before, "single", 1);
        assert!(!single_led_by_1.is_empty());
        for number in &single_led_by_1 {
            let partition = image.partition(Uuid(2), *number).unwrap();
            assert_eq!(
                (partition.leader, partition.isr.clone()),
                (NO_LEADER, vec![1])
            );
        }
        // Caught up and unfenced: it leads its single-replica partitions again, at new epochs.
        let image = apply(&image, unfence_broker(&image, 1, 20).unwrap());
        for number in &single_led_by_1 {
            let was = before.partition(Uuid(2), *number).unwrap();
            let partition = image.partition(Uuid(2), *number).unwrap();
            assert_eq!(partition.leader, 1);
            assert!(partition.leader_epoch > was.leader_epoch);
        }
        // Registering again at once (a retried registration) moves nothing more.
        let retry = RegisterBroker {
            broker_id: 2,
            incarnation_id: Uuid(98),
            broker_epoch: 30,
            endpoints: before.brokers[&2].registration.endpoints.clone(),
            rack: None,
            fenced: true,
        };
        let image = apply(&image, register_broker(&image, retry.clone(), &DEFAULTS));
        let records = register_broker(&image, retry, &DEFAULTS);
        assert_eq!(records.len(), 1, "{records:?}");
    }

    #[test]
    fn unclean_election_only_when_the_topic_allows_it() {
        let replicas = [1, 2, 3];
        assert_eq!(
            elect_leader(&replicas, &[3], |b| b != 3, false),
            Election::None
        );
        assert_eq!(
            elect_leader(&replicas, &[3], |b| b != 3, true),
            Election::Unclean(1)
        );
        assert_eq!(
            elect_leader(&replicas, &[2, 3], |_| true, false),
            Election::Clean(2)
        );

        let image = cluster(2);
        let mut spec = NewTopic {
            replication_factor: 2,
            partitions: 1,
            ..topic("t")
        };
        spec.configs
            .insert("unclean.leader.election.enable".into(), "true".into());
        let image = apply(
            &image,
            create_topic(&image, &spec, Uuid(5), &DEFAULTS).unwrap(),
        );
        let leader = image.partition(Uuid(5), 0).unwrap().leader;
        let follower = 3 - leader;
        // The follower drops out of the ISR, then the leader is fenced: only unclean election
        // gives the partition a leader again.
        let current = image.partition(Uuid(5), 0).unwrap().clone();
        let shrink = AlterPartition {
            broker: leader,
            topic_id: Uuid(5),
            partition: 0,
            leader_epoch: current.leader_epoch,
            partition_epoch: current.partition_epoch,
            new_isr: vec![leader],
        };
        let image = apply(&image, alter_partition(&image, &shrink).unwrap());
        let image = apply(&image, fence_broker(&image, leader, &DEFAULTS).unwrap());
        let partition = image.partition(Uuid(5), 0).unwrap();
        assert_eq!(
            (partition.leader, partition.isr.clone()),
            (follower, vec![follower])
        );
    }

    #[test]
    fn alter_partition_checks_epochs_and_eligibility() {
        let image = cluster(3);
        let spec = NewTopic {
            partitions: 1,
            ..topic("t")
        };
        let image = apply(
            &image,
            create_topic(&image, &spec, Uuid(9), &DEFAULTS).unwrap(),
        );
        let current = image.partition(Uuid(9), 0).unwrap().clone();
        let leader = current.leader;
        let others: Vec<i32> = current
            .replicas
            .iter()
            .copied()
            .filter(|b| *b != leader)
            .collect();
        let request = AlterPartition {
            broker: leader,
            topic_id: Uuid(9),
            partition: 0,
            leader_epoch: current.leader_epoch,
            partition_epoch: current.partition_epoch,
            new_isr: vec![leader, others[0]],
        };
        let code = |r: &AlterPartition| alter_partition(&image, r).unwrap_err().kafka_error_code();
        assert_eq!(
            code(&AlterPartition {
                broker: others[0],
                ..request.clone()
            }),
            6,
            "NOT_LEADER_OR_FOLLOWER"
        );
        assert_eq!(
            code(&AlterPartition {
                leader_epoch: 7,
                ..request.clone()
            }),
            74,
            "FENCED_LEADER_EPOCH"
        );
        assert_eq!(
            code(&AlterPartition {
                partition_epoch: 7,
                ..request.clone()
            }),
            95,
            "INVALID_UPDATE_VERSION"
        );
        assert_eq!(
            code(&AlterPartition {
                new_isr: vec![others[0]],
                ..request.clone()
            }),
            107,
            "leader must stay"
        );
        assert_eq!(
            code(&AlterPartition {
                new_isr: vec![leader, 42],
                ..request.clone()
            }),
            107,
            "not a replica"
        );
        let shrunk = apply(&image, alter_partition(&image, &request).unwrap());
        let after = shrunk.partition(Uuid(9), 0).unwrap();
        assert_eq!(after.isr, vec![leader, others[0]]);
        assert_eq!(
            (after.leader_epoch, after.partition_epoch),
            (current.leader_epoch, current.partition_epoch + 1)
        );
        // The same request again is stale now.
        assert_eq!(
            alter_partition(&shrunk, &request)
                .unwrap_err()
                .kafka_error_code(),
            95
        );
        // A fenced replica may not join.
        let fenced = apply(
            &shrunk,
            vec![MetadataRecord::FenceBroker {
                broker_id: others[1],
                broker_epoch: 10,
            }],
        );
        let after = fenced.partition(Uuid(9), 0).unwrap();
        let join = AlterPartition {
            leader_epoch: after.leader_epoch,
            partition_epoch: after.partition_epoch,
            new_isr: vec![leader, others[0], others[1]],
            ..request
        };
        assert_eq!(
            alter_partition(&fenced, &join)
                .unwrap_err()
                .kafka_error_code(),
            107
        );
    }

    #[test]
    fn partitions_are_added_and_topics_deleted() {
        let image = cluster(3);
        let image = apply(
            &image,
            create_topic(
                &image,
                &NewTopic {
                    partitions: 2,
                    replication_factor: 2,
                    ..topic("t")
                },
                Uuid(3),
                &DEFAULTS,
            )
            .unwrap(),
        );
        assert_eq!(
            create_partitions(&image, "t", 2)
                .unwrap_err()
                .kafka_error_code(),
            37
        );
        assert_eq!(
            create_partitions(&image, "nope", 5)
                .unwrap_err()
                .kafka_error_code(),
            3
        );
        let image = apply(&image, create_partitions(&image, "t", 5).unwrap());
        let topic = image.topic_by_name("t").unwrap();
        assert_eq!(
            topic.partitions.keys().copied().collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 4]
        );
        assert!(topic.partitions.values().all(|p| p.replicas.len() == 2));
        let image = apply(&image, delete_topic(&image, "t").unwrap());
        assert!(image.topic_by_name("t").is_none());
        assert_eq!(delete_topic(&image, "t").unwrap_err().kafka_error_code(), 3);
    }

    #[test]
    fn duplicate_isr_members_and_unservable_assignments_are_refused() {
        let image = cluster(3);
        let spec = NewTopic {
            partitions: 1,
            ..topic("t")
        };
        let image = apply(
            &image,
            create_topic(&image, &spec, Uuid(4), &DEFAULTS).unwrap(),
        );
        let current = image.partition(Uuid(4), 0).unwrap().clone();
        let other = *current
            .replicas
            .iter()
            .find(|b| **b != current.leader)
            .unwrap();
        let duplicate = AlterPartition {
            broker: current.leader,
            topic_id: Uuid(4),
            partition: 0,
            leader_epoch: current.leader_epoch,
            partition_epoch: current.partition_epoch,
            new_isr: vec![current.leader, other, other],
        };
        assert_eq!(
            alter_partition(&image, &duplicate)
                .unwrap_err()
                .kafka_error_code(),
            107
        );
        // Replay refuses a duplicate ISR whatever proposes it.
        let mut delta = sluice_raft::MetadataDelta::new(&image);
        let change = MetadataRecord::PartitionChange(PartitionChange {
            topic_id: Uuid(4),
            partition: 0,
            isr: Some(vec![current.leader, current.leader]),
            ..Default::default()
        });
        assert!(delta.replay(&change).is_err());
        // Explicit assignments with no unfenced replica would never come online.
        let fenced = apply(
            &image,
            vec![MetadataRecord::FenceBroker {
                broker_id: 3,
                broker_epoch: 10,
            }],
        );
        let offline = NewTopic {
            assignments: [(0, vec![3])].into(),
            ..topic("u")
        };
        assert_eq!(
            create_topic(&fenced, &offline, Uuid(5), &DEFAULTS)
                .unwrap_err()
                .kafka_error_code(),
            39
        );
    }

    #[test]
    fn reassignments_elect_the_first_live_in_sync_target_in_replica_order() {
        let image = cluster(5);
        let image = apply(
            &image,
            create_topic(&image, &topic("moving"), Uuid(9), &DEFAULTS).unwrap(),
        );
        let start = image.partition(Uuid(9), 0).unwrap().clone();
        let outside: Vec<BrokerId> = (1..=5).filter(|b| !start.replicas.contains(b)).collect();
        // Move to the two brokers outside the set plus one follower; the leader leaves.
        let follower = *start.replicas.iter().find(|b| **b != start.leader).unwrap();
        let target = vec![outside[1], outside[0], follower];
        let image = apply(
            &image,
            reassign(&image, "moving", 0, Some(target.clone())).unwrap(),
        );
        // Every replica caught up: the ISR lists them in another order than the target.
        let mut everyone = image.partition(Uuid(9), 0).unwrap().replicas.clone();
        everyone.sort_unstable();
        let caught_up = MetadataRecord::PartitionChange(PartitionChange {
            topic_id: Uuid(9),
            partition: 0,
            isr: Some(everyone),
            ..Default::default()
        });
        let image = apply(&image, vec![caught_up]);
        let done = apply(&image, complete_reassignments(&image));
        let moved = done.partition(Uuid(9), 0).unwrap();
        assert_eq!(moved.replicas, target);
        // The preferred (first) target replica leads, not the lowest id in the ISR.
        assert_eq!(moved.leader, outside[1]);

        // Cancelling instead goes back to the original replicas; when the leader is not among
        // them, the first original replica in the ISR and alive leads.
        let led_by_newcomer = apply(
            &image,
            vec![MetadataRecord::PartitionChange(PartitionChange {
                topic_id: Uuid(9),
                partition: 0,
                leader: Some(outside[0]),
                ..Default::default()
            })],
        );
        let cancelled = apply(
            &led_by_newcomer,
            reassign(&led_by_newcomer, "moving", 0, None).unwrap(),
        );
        let back = cancelled.partition(Uuid(9), 0).unwrap();
        assert_eq!(back.replicas, start.replicas);
        assert_eq!(back.leader, start.replicas[0]);
    }
}
