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
/// or unclean (an offline partition gets any live replica). The change, or the error.
pub fn elect_for(
    image: &MetadataImage,
    topic_id: Uuid,
    partition: i32,
    election_type: i8,
) -> Result<PartitionChange, KafkaError> {
    let current = image
        .partition(topic_id, partition)
        .ok_or(ControllerError::UnknownTopicOrPartition(format!("{partition}")).kafka_error())?;
    let change = |leader: BrokerId, isr: Option<Vec<BrokerId>>| PartitionChange {
        topic_id,
        partition,
        leader: Some(leader),
        isr,
        replicas: None,
    };
    if election_type == ELECTION_UNCLEAN {
        if current.leader != NO_LEADER && alive(image, current.leader) {
            return Err(KafkaError::ElectionNotNeeded);
        }
        return match elect_leader(&current.replicas, &current.isr, |b| alive(image, b), true) {
            Election::Clean(leader) => Ok(change(leader, None)),
            Election::Unclean(leader) => {
                tracing::warn!(%topic_id, partition, leader, "UNCLEAN leader election (ElectLeaders): acknowledged records may be lost");
                Ok(change(leader, Some(vec![leader])))
            }
            Election::None => Err(KafkaError::EligibleLeadersNotAvailable),
        };
    }
    let Some(&preferred) = current.replicas.first() else {
        return Err(KafkaError::PreferredLeaderNotAvailable);
    };
    if current.leader == preferred {
        return Err(KafkaError::ElectionNotNeeded);
    }
    if !alive(image, preferred) || !current.isr.contains(&preferred) {
        return Err(KafkaError::PreferredLeaderNotAvailable);
    }
    Ok(change(preferred, None))
}

/// One partition's ElectLeaders outcome: (topic, partition, elected or why not).
pub type Elected = (String, i32, Result<(), KafkaError>);

/// ElectLeaders for the partitions a request names, or for every partition (`None`): the
/// outcome per partition as (topic, partition, outcome), and the changes to commit.
///
/// As Kafka's `ReplicationControlManager.electLeaders`: a request that names no partitions
/// hears only of partitions elected or failed, not of those whose replica already leads
/// (ELECTION_NOT_NEEDED), so `kafka-leader-election.sh --all-topic-partitions` on a healthy
/// cluster prints nothing; a partition named explicitly always gets its answer.
pub fn elect_leaders(
    image: &MetadataImage,
    election_type: i8,
    partitions: Option<&[TopicPartition]>,
) -> (Vec<Elected>, Vec<MetadataRecord>) {
    let wanted: Vec<TopicPartition> = match partitions {
        Some(list) => list.to_vec(),
        None => image
            .topics
            .values()
            .flat_map(|t| {
                t.partitions
                    .keys()
                    .map(|p| TopicPartition::new(t.name.as_str(), *p))
            })
            .collect(),
    };
    let every_partition = partitions.is_none();
    let mut results = Vec::with_capacity(wanted.len());
    let mut records = Vec::new();
    for TopicPartition { topic, partition } in wanted {
        let outcome = match image.topic_by_name(&topic) {
            Some(t) if t.partitions.contains_key(&partition) => {
                elect_for(image, t.id, partition, election_type)
            }
            _ => Err(ControllerError::UnknownTopicOrPartition(topic.clone()).kafka_error()),
        };
        match outcome {
            Ok(change) => {
                records.push(MetadataRecord::PartitionChange(change));
                results.push((topic, partition, Ok(())));
            }
            Err(KafkaError::ElectionNotNeeded) if every_partition => {}
            Err(error) => results.push((topic, partition, Err(error))),
        }
    }
    (results, records)
}

/// At most this many leader elections go into one rebalance proposal; more wait for the next
/// round, which starts at once. KRaft's QuorumController bounds each round the same way
/// (`MAX_ELECTIONS_PER_IMBALANCE`, 1,000), so that a large imbalance does not become one
/// huge metadata commit that holds up every other controller decision.
pub const LEADER_REBALANCE_ELECTIONS_PER_ROUND_MAX: usize = 1000;

/// One broker's share of the leaderships it is preferred for (the first replica) that other
/// brokers hold, as the rebalance judged it. Every partition led elsewhere is counted once:
/// `elected + reassigning + not_alive + not_in_isr == led_elsewhere`.
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
    /// Of those, partitions a reassignment is moving: the reassignment decides their leader.
    pub reassigning: usize,
    /// Of those, partitions not given back because the broker is not alive (fenced, or not
    /// registered).
    pub not_alive: usize,
    /// Of those, partitions not given back because the broker is alive but not (yet) in
    /// their ISR: it is catching up.
    pub not_in_isr: usize,
}

impl LeaderImbalance {
    /// The share led elsewhere, in whole percent (rounded down), for logs.
    pub fn percentage(&self) -> usize {
        self.led_elsewhere * 100 / self.preferred.max(1)
    }

    /// Why the partitions led elsewhere and not elected stay where they are, in words for a
    /// log line; empty when every one was elected.
    pub fn waiting_reasons(&self) -> String {
        let mut reasons = Vec::new();
        if self.not_alive > 0 {
            reasons.push(format!(
                "{} wait for the broker to be alive (it is fenced or not registered)",
                self.not_alive
            ));
        }
        if self.not_in_isr > 0 {
            reasons.push(format!(
                "{} wait for the broker to join their ISR (it is catching up)",
                self.not_in_isr
            ));
        }
        if self.reassigning > 0 {
            reasons.push(format!(
                "{} are being reassigned (the reassignment decides their leader)",
                self.reassigning
            ));
        }
        reasons.join("; ")
    }
}

/// Leader rebalancing (`auto.leader.rebalance.enable`) by the rule of
/// `leader.imbalance.per.broker.percentage` as Kafka documents it: a broker's imbalance is
/// the share of the partitions it is preferred for (their first replica) that another broker
/// leads; when that share is above `imbalance_percentage_max`, each of those partitions whose
/// preferred replica is alive and in the ISR, and that no reassignment is moving, gets it
/// back as leader. A broker at or under the threshold keeps its imbalance: moving a
/// leadership makes its clients look for the new leader, and a few partitions led elsewhere
/// are not worth it.
///
/// This is ZooKeeper-mode Kafka's rule (its `KafkaController` checks the percentage). KRaft's
/// `QuorumController` ignores `leader.imbalance.per.broker.percentage` and gives back every
/// leadership it can at each check; we keep the documented rule, which with a percentage of
/// 0 is KRaft's behaviour.
///
/// Returns the brokers over the threshold and the changes that give their leaderships back
/// (all of them: the caller proposes them in rounds of
/// `LEADER_REBALANCE_ELECTIONS_PER_ROUND_MAX`, see `preferred_elections`).
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
        let mut imbalance = LeaderImbalance {
            broker,
            preferred,
            led_elsewhere: led_elsewhere.len(),
            elected: 0,
            reassigning: 0,
            not_alive: 0,
            not_in_isr: 0,
        };
        let broker_alive = alive(image, broker);
        for (topic_id, partition) in led_elsewhere {
            if image.reassignments.contains_key(&(topic_id, partition)) {
                imbalance.reassigning += 1;
            } else if !broker_alive {
                imbalance.not_alive += 1;
            } else {
                match elect_for(image, topic_id, partition, ELECTION_PREFERRED) {
                    Ok(change) => {
                        imbalance.elected += 1;
                        records.push(MetadataRecord::PartitionChange(change));
                    }
                    // Alive, and preferred but not leading: what keeps it out is the ISR.
                    Err(_) => imbalance.not_in_isr += 1,
                }
            }
        }
        imbalances.push(imbalance);
    }
    (imbalances, records)
}

/// One rebalance round: the preferred-leader elections, of the first
/// `LEADER_REBALANCE_ELECTIONS_PER_ROUND_MAX` of `pending` (taken out of it), that still hold
/// on `image`. A partition whose preferred replica left the ISR, or that a reassignment
/// started to move, since the check decided on it is skipped, not forced.
pub fn preferred_elections(
    image: &MetadataImage,
    pending: &mut Vec<(Uuid, i32)>,
) -> Vec<MetadataRecord> {
    let round = pending.len().min(LEADER_REBALANCE_ELECTIONS_PER_ROUND_MAX);
    pending
        .drain(..round)
        .filter(|key| !image.reassignments.contains_key(key))
        .filter_map(|(topic_id, partition)| {
            elect_for(image, topic_id, partition, ELECTION_PREFERRED).ok()
        })
        .map(MetadataRecord::PartitionChange)
        .collect()
}
