//! ISR upkeep on the leader: a follower unheard-from (not caught up) for longer than
//! `replica.lag.time.max.ms` leaves the ISR, a follower that caught up with the high watermark
//! joins it. Both go to the controller as AlterPartition; the leader adopts the new ISR only
//! when the committed image carries it.

use std::sync::Arc;
use std::time::Duration;

use sluice_raft::Quorum;

use super::ReplicaManager;
use crate::controller::AlterPartition;
use crate::controller::service::{ControllerRequest, ControllerResponse, call_controller};

pub async fn run(
    replicas: Arc<ReplicaManager>,
    quorum: Arc<Quorum>,
    voters: Vec<String>,
    lag_max: Duration,
) {
    let period = (lag_max / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
    loop {
        tokio::time::sleep(period).await;
        for partition in replicas.partitions() {
            // A leader whose log failed changes no ISR: its report to the controller
            // (`offline`) moves the leadership, and followers it could no longer serve
            // must not be dropped before it goes.
            if partition.is_offline() {
                continue;
            }
            let Some((state, isr)) = partition.wanted_isr(lag_max) else {
                continue;
            };
            let shrink = isr.len() < state.isr.len();
            tracing::info!(
                topic_partition = %partition.topic_partition,
                from = ?state.isr,
                to = ?isr,
                followers = ?partition.followers(),
                "{}",
                if shrink { "shrinking the ISR" } else { "expanding the ISR" }
            );
            partition.isr_change_sent(isr.clone());
            let request = ControllerRequest::AlterPartition(AlterPartition {
                broker: replicas.broker_id(),
                topic_id: state.topic_id,
                partition: partition.topic_partition.partition,
                leader_epoch: state.leader_epoch,
                partition_epoch: state.partition_epoch,
                new_isr: isr,
            });
            match call_controller(&quorum, &voters, &request, Duration::from_secs(10)).await {
                // Counted when the committed image carries it (`apply_image`).
                Ok(ControllerResponse::Ok { .. }) => {}
                Ok(other) => {
                    tracing::warn!(topic_partition = %partition.topic_partition, ?other, "AlterPartition refused");
                    partition.isr_change_failed();
                }
                Err(error) => {
                    tracing::warn!(topic_partition = %partition.topic_partition, %error, "AlterPartition failed");
                    partition.isr_change_failed();
                }
            }
        }
    }
}
