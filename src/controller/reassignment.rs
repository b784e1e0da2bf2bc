//! Partition reassignment: adding the target replicas, then, once they are all in the ISR,
//! dropping the others.

use super::*;

/// Why one partition's move is refused: a Kafka error and a message that says what to do.
pub type Refusal = ApiError;

/// AlterPartitionReassignments for one partition: `Some(target)` starts (or redirects) a move
/// to those replicas: they are added to the replica set now and follow the leader; once all
/// are in the ISR, `complete_reassignments` drops the others. `None` cancels a move, back to
/// the replicas it started from.
///
/// A broker a move adds hosts the replica from the start, so a move that would put a broker
/// past its `max.broker.partitions` is refused. `adding` counts, per broker, the replicas that
/// moves decided earlier in the same request add (not yet in `image`); this move's are added.
pub fn reassign(
    image: &MetadataImage,
    topic: &str,
    partition: i32,
    target: Option<Vec<BrokerId>>,
    adding: &mut BTreeMap<BrokerId, u32>,
) -> Result<Vec<MetadataRecord>, Refusal> {
    let unknown = || {
        ApiError::from(ControllerError::UnknownTopicOrPartition(format!(
            "{topic}-{partition}"
        )))
    };
    let topic_image = image.topic_by_name(topic).ok_or_else(unknown)?;
    let current = topic_image.partitions.get(&partition).ok_or_else(unknown)?;
    let key = (topic_image.id, partition);
    let ongoing = image.reassignments.get(&key);
    let Some(target) = target else {
        let Some(ongoing) = ongoing else {
            return Err(ApiError::new(
                KafkaError::NoReassignmentInProgress,
                format!("no reassignment of {topic}-{partition} is in progress"),
            ));
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
    let invalid = |why: String| ApiError::from(ControllerError::InvalidReplicaAssignment(why));
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
    let added: Vec<BrokerId> = target
        .iter()
        .copied()
        .filter(|b| !current.replicas.contains(b))
        .collect();
    for broker in &added {
        let Some(max) = image.partitions_max(*broker) else {
            continue;
        };
        let hosted = image.replica_count(*broker) + adding.get(broker).copied().unwrap_or(0);
        if hosted >= max {
            return Err(invalid(format!(
                "broker {broker} hosts {hosted} partition replicas and its \
                 max.broker.partitions is {max}; move replicas off it, delete unused topics, or raise max.broker.partitions \
                 on broker {broker} if its memory allows"
            )));
        }
    }
    for broker in added {
        *adding.entry(broker).or_default() += 1;
    }
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
