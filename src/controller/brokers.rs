//! Brokers: registration (ending the previous incarnation in the same commit), fencing (its
//! leaderships move to live ISR members, it leaves the ISRs) and unfencing.

use super::*;

/// The change that removes `gone` from a partition's ISR and, if it led, elects a new leader.
/// The ISR never becomes empty: its last member stays (it holds every acknowledged record).
pub(super) fn without_broker(
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

/// The broker's logs of these partitions failed (a storage error while running, or a log it
/// could not open at start): it leaves their ISRs, and their leaderships move to other live
/// ISR members, as Kafka does for the replicas of an offline log directory. Where it is the
/// last ISR member and leads, nothing changes unless the topic allows an unclean election:
/// no one else holds every acknowledged record, and its answer, KAFKA_STORAGE_ERROR, says
/// more than a leaderless partition would. Partitions it does not host are skipped.
pub fn replicas_offline(
    image: &MetadataImage,
    broker: BrokerId,
    partitions: &[(Uuid, i32)],
    defaults: &Defaults,
) -> Vec<MetadataRecord> {
    let mut records = Vec::new();
    for (topic_id, partition) in partitions {
        let Some(topic) = image.topics.get(topic_id) else {
            continue;
        };
        let Some(current) = topic.partitions.get(partition) else {
            continue;
        };
        if !current.replicas.contains(&broker) {
            continue;
        }
        let change = without_broker(
            image,
            &topic.name,
            *topic_id,
            *partition,
            current,
            broker,
            defaults,
        );
        if let Some(change) = change.filter(|c| c.leader != Some(NO_LEADER)) {
            records.push(MetadataRecord::PartitionChange(change));
        }
    }
    records
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
///
/// `partitions_max` is the most partition replicas the broker can host
/// (`max.broker.partitions`); placement puts no new replica on it beyond that.
pub fn register_broker(
    image: &MetadataImage,
    registration: RegisterBroker,
    partitions_max: Option<u32>,
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
    let (broker_id, broker_epoch) = (registration.broker_id, registration.broker_epoch);
    records.push(MetadataRecord::RegisterBroker(registration));
    if let Some(partitions_max) = partitions_max {
        records.push(MetadataRecord::BrokerCapacity {
            broker_id,
            broker_epoch,
            partitions_max,
        });
    }
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
