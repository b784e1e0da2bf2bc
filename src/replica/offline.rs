//! Replicas whose log failed are reported to the controller, so that their leaderships move
//! and this broker leaves their ISRs, as Kafka's brokers report an offline log directory. A
//! failed log answers KAFKA_STORAGE_ERROR here; without the report a partition it led would
//! stay unavailable until an operator restarted the broker, and one it followed would still
//! count in the ISR toward `min.insync.replicas`.
//!
//! A failed replica that still leads is reported again every few seconds, and at once when it
//! gains a new leadership (an unclean election can pick a replica outside the ISR, failed or
//! not): the controller moves the leadership as soon as the topic's election rules allow,
//! for instance once another replica is alive again.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sluice_raft::Quorum;
use sluice_raft::image::PartitionRegistration;
use sluice_raft::records::{BrokerId, Uuid};

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
/// How often a failed replica that still leads is reported again.
const LEADER_REPORT_INTERVAL: Duration = Duration::from_secs(5);

pub async fn run(replicas: Arc<ReplicaManager>, quorum: Arc<Quorum>, voters: Vec<String>) {
    // Reported and committed, per broker epoch, with when: each replica once per leader
    // epoch, or every LEADER_REPORT_INTERVAL while it leads.
    let mut reported: HashMap<Reported, Instant> = HashMap::new();
    let mut reported_epoch = -1;
    let mut seen_events = u64::MAX;
    let mut seen_index = 0;
    // Whether the last look found a failed replica: then a metadata change (a new leader)
    // is worth a look too.
    let mut offline_known = false;
    let mut last_full_check = Instant::now();
    let mut retry = false;
    loop {
        tokio::time::sleep(CHECK_INTERVAL).await;
        let epoch = replicas.registered_epoch();
        if epoch < 0 {
            continue;
        }
        let events = LOGS_GONE_OFFLINE.load(Ordering::Acquire);
        let image = quorum.image();
        let due = events != seen_events
            || epoch != reported_epoch
            || retry
            || (offline_known && image.index != seen_index)
            || last_full_check.elapsed() >= FULL_CHECK_INTERVAL;
        if !due {
            continue;
        }
        seen_events = events;
        seen_index = image.index;
        last_full_check = Instant::now();
        if epoch != reported_epoch {
            reported.clear();
            reported_epoch = epoch;
        }
        let broker = replicas.broker_id();
        let offline = replicas.offline_partitions();
        offline_known = !offline.is_empty();
        let hosted = offline.iter().filter_map(|tp| {
            let topic = image.topic_by_name(&tp.topic)?;
            let current = topic.partitions.get(&tp.partition)?;
            Some((topic.id, tp.partition, current))
        });
        let now = Instant::now();
        let due_reports = to_report(broker, hosted, &reported, now);
        let first_time = due_reports.iter().any(|key| !reported.contains_key(key));
        let partitions: Vec<(Uuid, i32)> = due_reports
            .iter()
            .map(|&(topic_id, partition, _)| (topic_id, partition))
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
                    if first_time {
                        tracing::warn!(
                            partitions = partitions.len(),
                            "reported replicas with failed logs to the controller: their \
                             leaderships move to other ISR members and this broker leaves their \
                             ISRs until it restarts (a partition with no other ISR member stays \
                             here, offline)"
                        );
                    } else {
                        tracing::debug!(
                            partitions = partitions.len(),
                            "reported failed replicas this broker still leads again"
                        );
                    }
                    reported.extend(due_reports.into_iter().map(|key| (key, now)));
                    None
                }
                Ok(other) => Some(format!("refused: {}", other.summary())),
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

/// A report the controller took: topic id, partition and the leader epoch it was made in.
type Reported = (Uuid, i32, i32);

/// The failed replicas to report: those the controller still counts on, because this broker
/// leads the partition or is in its ISR, and not yet reported in the partition's current
/// leader epoch; or still led here, last reported `LEADER_REPORT_INTERVAL` ago or more. Once
/// a report is committed the broker is out of the ISR, so a follower has nothing left to say
/// until a new leadership comes its way; a leader keeps asking to hand over (the topic may
/// allow an unclean election and a replica come back to take it).
fn to_report<'a>(
    broker: BrokerId,
    offline: impl Iterator<Item = (Uuid, i32, &'a PartitionRegistration)>,
    reported: &HashMap<Reported, Instant>,
    now: Instant,
) -> Vec<Reported> {
    offline
        .filter(|(_, _, current)| current.leader == broker || current.isr.contains(&broker))
        .filter_map(|(topic_id, partition, current)| {
            let key = (topic_id, partition, current.leader_epoch);
            let due = match reported.get(&key) {
                None => true,
                Some(at) => {
                    current.leader == broker
                        && now.saturating_duration_since(*at) >= LEADER_REPORT_INTERVAL
                }
            };
            due.then_some(key)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registration(
        leader: BrokerId,
        isr: &[BrokerId],
        leader_epoch: i32,
    ) -> PartitionRegistration {
        PartitionRegistration {
            replicas: vec![1, 2, 3],
            isr: isr.to_vec(),
            leader,
            leader_epoch,
            partition_epoch: leader_epoch,
        }
    }

    #[test]
    fn a_failed_replica_is_reported_again_when_a_new_leadership_comes_its_way() {
        let topic = Uuid(7);
        let start = Instant::now();
        let report =
            |current: &PartitionRegistration, reported: &HashMap<Reported, Instant>, at| {
                to_report(2, [(topic, 0, current)].into_iter(), reported, at)
            };
        // Broker 2's log failed while it followed, in the ISR: reported.
        let following = registration(1, &[1, 2, 3], 4);
        let first = report(&following, &HashMap::new(), start);
        assert_eq!(first, vec![(topic, 0, 4)]);
        let mut reported: HashMap<Reported, Instant> =
            first.into_iter().map(|key| (key, start)).collect();
        // Out of the ISR now: nothing to say, in this leader epoch or a later one, ever.
        let later = start + 3 * LEADER_REPORT_INTERVAL;
        let left = registration(1, &[1, 3], 4);
        assert!(report(&left, &reported, later).is_empty());
        let moved = registration(3, &[3], 5);
        assert!(report(&moved, &reported, later).is_empty());
        // An unclean election made it the leader: reported at once.
        let elected = registration(2, &[2], 6);
        let again = report(&elected, &reported, start);
        assert_eq!(again, vec![(topic, 0, 6)]);
        reported.extend(again.into_iter().map(|key| (key, start)));
        // Still leading: again only once the interval has passed.
        let soon = start + LEADER_REPORT_INTERVAL / 2;
        assert!(report(&elected, &reported, soon).is_empty());
        assert_eq!(
            report(&elected, &reported, start + LEADER_REPORT_INTERVAL),
            vec![(topic, 0, 6)]
        );
    }
}
