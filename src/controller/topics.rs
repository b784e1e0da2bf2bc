//! Topics: creation (validation, placement), deletion, partitions added.

use super::*;

/// The most partitions one request may create: bounds the records a single proposal makes.
pub const PARTITIONS_PER_REQUEST_MAX: i32 = 100_000;

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
            &with_room(image, candidates, factor as usize),
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
        topic.assignments.clone()
    };
    check_capacity(image, &assignment)?;
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
    records.extend(partition_records(image, topic_id, assignment));
    Ok(records)
}

/// New partitions on their replicas: the ISR is the live replicas, the first of them leads.
fn partition_records(
    image: &MetadataImage,
    topic_id: Uuid,
    assignment: impl IntoIterator<Item = (i32, Vec<BrokerId>)>,
) -> impl Iterator<Item = MetadataRecord> {
    assignment.into_iter().map(move |(partition, replicas)| {
        let isr: Vec<BrokerId> = replicas
            .iter()
            .copied()
            .filter(|b| alive(image, *b))
            .collect();
        let leader = isr.first().copied().unwrap_or(NO_LEADER);
        MetadataRecord::Partition(PartitionRecord {
            topic_id,
            partition,
            replicas,
            isr,
            leader,
            leader_epoch: 0,
            partition_epoch: 0,
        })
    })
}

pub(super) fn validate_assignments(
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
        if !replicas.iter().any(|b| alive(image, *b)) {
            return Err(ControllerError::InvalidReplicaAssignment(format!(
                "partition {partition}: no assigned replica is an unfenced broker"
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
/// CreatePartitions: grows `name` to `total` partitions, placed by the controller or, when
/// `assignments` is not empty, on the replicas it lists for each new partition in order
/// (validated like CreateTopics' assignments, with the topic's replication factor).
pub fn create_partitions(
    image: &MetadataImage,
    name: &str,
    total: i32,
    assignments: &[Vec<BrokerId>],
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
    if !assignments.is_empty() {
        if assignments.len() as i32 != total - current {
            return Err(ControllerError::InvalidReplicaAssignment(format!(
                "increasing the number of partitions by {} but {} assignments provided",
                total - current,
                assignments.len()
            )));
        }
        if let Some(other) = assignments.iter().find(|r| r.len() != factor) {
            return Err(ControllerError::InvalidReplicaAssignment(format!(
                "inconsistent replication factor between partitions: {} replicas {other:?} where the topic has {factor}",
                other.len()
            )));
        }
        let assigned: BTreeMap<i32, Vec<BrokerId>> =
            (current..).zip(assignments.iter().cloned()).collect();
        validate_assignments(image, &assigned, current)?;
        check_capacity(image, &assigned)?;
        return Ok(partition_records(image, topic.id, assigned).collect());
    }
    let candidates = candidates(image);
    if factor > candidates.len() {
        return Err(ControllerError::InvalidReplicationFactor(format!(
            "replication factor {factor} with {} available brokers",
            candidates.len()
        )));
    }
    let assignment = placement::assign(
        &with_room(image, candidates, factor),
        current,
        total - current,
        factor,
        (topic.id.0 % 1_000_003) as usize,
    );
    check_capacity(image, &assignment)?;
    Ok(partition_records(image, topic.id, assignment).collect())
}

/// The candidates that can host another replica, if at least `factor` of them can; else all
/// of them, so that `check_capacity` names the broker that is full.
fn with_room(image: &MetadataImage, candidates: Vec<Candidate>, factor: usize) -> Vec<Candidate> {
    let roomy: Vec<Candidate> = candidates
        .iter()
        .filter(|c| {
            image
                .partitions_max(c.id)
                .is_none_or(|max| image.replica_count(c.id) < max)
        })
        .cloned()
        .collect();
    if roomy.len() >= factor {
        roomy
    } else {
        candidates
    }
}

/// Refuses an assignment that would put more partition replicas on a broker than it said it
/// can host (`max.broker.partitions`), so nothing is committed that a broker cannot serve.
fn check_capacity(
    image: &MetadataImage,
    assignment: &BTreeMap<i32, Vec<BrokerId>>,
) -> Result<(), ControllerError> {
    let mut added: BTreeMap<BrokerId, u32> = BTreeMap::new();
    for replicas in assignment.values() {
        for broker in replicas {
            *added.entry(*broker).or_default() += 1;
        }
    }
    for (broker, new) in added {
        let Some(max) = image.partitions_max(broker) else {
            continue;
        };
        let hosted = image.replica_count(broker);
        if u64::from(hosted) + u64::from(new) > u64::from(max) {
            return Err(ControllerError::InvalidPartitions(format!(
                "broker {broker} hosts {hosted} partition replicas and this would add {new}, \
                 past its max.broker.partitions of {max}; delete unused topics, add brokers, \
                 or raise max.broker.partitions on broker {broker} if its memory allows"
            )));
        }
    }
    Ok(())
}
