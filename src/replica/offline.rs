//! Replicas whose log failed are reported to the controller, so that their leaderships move
//! and this broker leaves their ISRs, as Kafka's brokers report an offline log directory. A
//! failed log answers KAFKA_STORAGE_ERROR here; without the report a partition it led would
//! stay unavailable until an operator restarted the broker, and one it followed would still
//! count in the ISR toward `min.insync.replicas`.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sluice_raft::Quorum;
use sluice_raft::records::Uuid;

use super::ReplicaManager;
use crate::controller::service::{ControllerRequest, ControllerResponse, call_controller};
use crate::log::partition_log::LOGS_GONE_OFFLINE;

/// How often the reporter looks for logs gone offline (it looks at them all only when one
/// went offline since, the broker epoch changed, or a report failed).
const CHECK_INTERVAL: Duration = Duration::from_millis(100);
/// A look at every hosted partition regardless, for partitions that appeared offline without
/// a storage error being counted (a log not opened at start).
const FULL_CHECK_INTERVAL: Duration = Duration::from_secs(5);
const RETRY_BACKOFF: Duration = Duration::from_secs(1);

pub async fn run(replicas: Arc<ReplicaManager>, quorum: Arc<Quorum>, voters: Vec<String>) {
    // Reported and committed, per broker epoch: each replica is reported once per epoch.
    let mut reported: HashSet<(Uuid, i32)> = HashSet::new();
    let mut reported_epoch = -1;
    let mut seen_events = u64::MAX;
    let mut last_full_check = Instant::now();
    let mut retry = false;
    loop {
        tokio::time::sleep(CHECK_INTERVAL).await;
        let epoch = replicas.registered_epoch();
        if epoch < 0 {
            continue;
        }
        let events = LOGS_GONE_OFFLINE.load(Ordering::Acquire);
        let due = events != seen_events
            || epoch != reported_epoch
            || retry
            || last_full_check.elapsed() >= FULL_CHECK_INTERVAL;
        if !due {
            continue;
        }
        seen_events = events;
        last_full_check = Instant::now();
        if epoch != reported_epoch {
            reported.clear();
            reported_epoch = epoch;
        }
        let broker = replicas.broker_id();
        let image = quorum.image();
        // Only what the controller still counts on this replica for: it leads, or is in the
        // ISR. Once the change is committed, nothing is left to say.
        let partitions: Vec<(Uuid, i32)> = replicas
            .offline_partitions()
            .into_iter()
            .filter_map(|tp| {
                let topic = image.topic_by_name(&tp.topic)?;
                let current = topic.partitions.get(&tp.partition)?;
                let counted = current.leader == broker || current.isr.contains(&broker);
                (counted && !reported.contains(&(topic.id, tp.partition)))
                    .then_some((topic.id, tp.partition))
            })
            .collect();
        // Whether the last report failed: a streak of failures is said once.
        let was_failing = std::mem::take(&mut retry);
        if partitions.is_empty() {
            continue;
        }
        let request = ControllerRequest::ReplicasOffline {
            broker_id: broker,
            broker_epoch: epoch,
            partitions: partitions.clone(),
        };
        let failure =
            match call_controller(&quorum, &voters, &request, Duration::from_secs(10)).await {
                Ok(ControllerResponse::Ok { .. }) => {
                    tracing::warn!(
                        partitions = partitions.len(),
                        "reported replicas with failed logs to the controller: their leaderships \
                     move to other ISR members and this broker leaves their ISRs until it \
                     restarts (a partition with no other ISR member stays here, offline)"
                    );
                    reported.extend(partitions);
                    None
                }
                Ok(other) => Some(format!("refused: {other:?}")),
                Err(error) => Some(error.to_string()),
            };
        retry = failure.is_some();
        match failure {
            Some(reason) if !was_failing => {
                tracing::warn!(%reason, "report of failed replicas did not go through; retrying every second")
            }
            Some(reason) => tracing::debug!(%reason, "report of failed replicas still failing"),
            None => {}
        }
        if retry {
            tokio::time::sleep(RETRY_BACKOFF).await;
        }
    }
}
