//! Leader elections: from the last committed ISR only (unclean only where enabled), and
//! ElectLeaders (preferred or unclean) on request or by the preferred-leader rebalance.

use super::*;

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
pub(super) fn clean_leader(
    replicas: &[BrokerId],
    isr: &[BrokerId],
    image: &MetadataImage,
) -> BrokerId {
    match elect_leader(replicas, isr, |b| alive(image, b), false) {
        Election::Clean(leader) => leader,
        Election::Unclean(_) | Election::None => NO_LEADER,
    }
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

/// One broker's share of the leaderships it is preferred for (the first replica) that other
/// brokers hold, as the rebalance judged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderImbalance {
    pub broker: BrokerId,
    /// Partitions whose first replica is this broker.
    pub preferred: usize,
    /// Of those, partitions another broker leads (or nobody does).
    pub led_elsewhere: usize,
    /// Of those, partitions given back now: the broker is alive and in their ISR, and no
    /// reassignment is moving them.
    pub elected: usize,
}

impl LeaderImbalance {
    /// The share led elsewhere, in whole percent (rounded down), for logs.
    pub fn percentage(&self) -> usize {
        self.led_elsewhere * 100 / self.preferred.max(1)
    }
}

/// Leader rebalancing (`auto.leader.rebalance.enable`), by Kafka's rule: a broker's
/// imbalance is the share of the partitions it is preferred for (their first replica) that
/// another broker leads; when that share is above `imbalance_percentage_max`
/// (`leader.imbalance.per.broker.percentage`), each of those partitions whose preferred
/// replica is alive and in the ISR, and that no reassignment is moving, gets it back as
/// leader. A broker at or under the threshold keeps its imbalance: moving a leadership makes
/// its clients look for the new leader, and a few partitions led elsewhere are not worth it.
///
/// Returns the brokers over the threshold and the changes that give their leaderships back.
pub fn preferred_leader_changes(
    image: &MetadataImage,
    imbalance_percentage_max: u32,
) -> (Vec<LeaderImbalance>, Vec<MetadataRecord>) {
    // Per preferred broker: how many partitions, and which of them another broker leads.
    let mut by_broker: BTreeMap<BrokerId, (usize, Vec<(Uuid, i32)>)> = BTreeMap::new();
    for topic in image.topics.values() {
        for (partition, current) in &topic.partitions {
            let Some(&preferred) = current.replicas.first() else {
                continue;
            };
            let entry = by_broker.entry(preferred).or_default();
            entry.0 += 1;
            if current.leader != preferred {
                entry.1.push((topic.id, *partition));
            }
        }
    }
    let mut imbalances = Vec::new();
    let mut records = Vec::new();
    for (broker, (preferred, led_elsewhere)) in by_broker {
        // ratio * 100 > percentage, in integers: led_elsewhere / preferred * 100 > max.
        let over = led_elsewhere.len() * 100 > imbalance_percentage_max as usize * preferred;
        if !over {
            continue;
        }
        let changes: Vec<MetadataRecord> = led_elsewhere
            .iter()
            .filter(|key| !image.reassignments.contains_key(key))
            .filter_map(|&(topic_id, partition)| {
                elect_for(image, topic_id, partition, ELECTION_PREFERRED).ok()
            })
            .map(MetadataRecord::PartitionChange)
            .collect();
        debug_assert!(changes.len() <= led_elsewhere.len());
        imbalances.push(LeaderImbalance {
            broker,
            preferred,
            led_elsewhere: led_elsewhere.len(),
            elected: changes.len(),
        });
        records.extend(changes);
    }
    (imbalances, records)
}
