//! AlterPartition: ISR changes a partition leader asks for, checked against the leader and
//! partition epochs.

use super::*;

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
