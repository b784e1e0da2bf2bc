//! ISR upkeep on the leader: a follower not caught up for longer than
//! `replica.lag.time.max.ms`, or silent (no fetch at all) for longer than
//! `replica.silence.max.ms`, leaves the ISR; a follower that caught up with the high watermark
//! joins it. Both go to the controller as AlterPartition; the leader adopts the new ISR only
//! when the committed image carries it.
//!
//! A follower that the image shows fenced (its broker is down or stopping) is not proposed to
//! join: the controller would refuse it (Kafka's leaders skip fenced and shutting-down
//! replicas the same way, KIP-841). Without that check, a follower that stopped while caught
//! up looked caught up for `replica.lag.time.max.ms` more, and every leader asked for it to
//! join, every round, and was refused: dozens of WARNs every few seconds while a node was down.
//!
//! Refusals and failures that repeat are said once per streak: the first as a WARN, the rest
//! at DEBUG, and the end as one INFO with how many and for how long.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_raft::records::BrokerId;
use sluice_raft::{MetadataImage, Quorum};

use super::ReplicaManager;
use super::partition::{FollowerState, Partition};
use crate::controller::AlterPartition;
use crate::controller::service::{ControllerRequest, ControllerResponse, call_controller};

/// How long one AlterPartition may take before the loop goes on to the next partition.
const ALTER_PARTITION_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn run(
    replicas: Arc<ReplicaManager>,
    quorum: Arc<Quorum>,
    voters: Vec<String>,
    lag_max: Duration,
    silence_max: Duration,
) {
    let period =
        (lag_max.min(silence_max) / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
    let mut streaks = Streaks::default();
    loop {
        tokio::time::sleep(period).await;
        let mut round = Vec::new();
        for partition in replicas.partitions() {
            // A leader whose log failed changes no ISR: its report to the controller
            // (`offline`) moves the leadership, and followers it could no longer serve
            // must not be dropped before it goes.
            if partition.is_offline() {
                continue;
            }
            let image = quorum.image();
            let Some((state, isr)) =
                partition.wanted_isr(lag_max, silence_max, |b| may_join(&image, b))
            else {
                continue;
            };
            log_change(&partition, &state.isr, &isr);
            partition.isr_change_sent(isr.clone());
            let request = ControllerRequest::AlterPartition(AlterPartition {
                broker: replicas.broker_id(),
                topic_id: state.topic_id,
                partition: partition.topic_partition.partition,
                leader_epoch: state.leader_epoch,
                partition_epoch: state.partition_epoch,
                new_isr: isr,
            });
            let outcome =
                match call_controller(&quorum, &voters, &request, ALTER_PARTITION_TIMEOUT).await {
                    // Counted when the committed image carries it (`apply_image`).
                    Ok(ControllerResponse::Ok { .. }) => continue,
                    Ok(other) => Refusal {
                        kind: match &other {
                            ControllerResponse::Error { code, .. } => {
                                crate::protocol::errors::name(*code).into_owned()
                            }
                            _ => "refused".to_owned(),
                        },
                        reason: other.summary(),
                    },
                    Err(error) => Refusal {
                        kind: NO_ANSWER.to_owned(),
                        reason: error,
                    },
                };
            partition.isr_change_failed();
            round.push((partition.topic_partition.to_string(), outcome));
        }
        streaks.round(round, Instant::now());
    }
}

/// Whether `broker` may join an ISR: the image shows it registered and unfenced. The
/// controller refuses others, so asking only brings a refusal.
fn may_join(image: &MetadataImage, broker: BrokerId) -> bool {
    image.brokers.get(&broker).is_some_and(|b| !b.fenced)
}

/// Broker ids as `1,2,3`.
pub(crate) fn broker_list(brokers: &[BrokerId]) -> String {
    brokers
        .iter()
        .map(BrokerId::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// One INFO line per change, with plain fields: who leaves or joins, and for each the log
/// end offset it last fetched from and how long ago it was last caught up.
fn log_change(partition: &Partition, from: &[BrokerId], to: &[BrokerId]) {
    let followers = partition.followers();
    let now = Instant::now();
    let describe = |members: Vec<BrokerId>| -> String {
        members
            .into_iter()
            .map(|broker| match followers.get(&broker) {
                Some(follower) => describe_follower(broker, follower, now),
                None => format!("broker {broker} (never fetched)"),
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let leaving: Vec<BrokerId> = from.iter().copied().filter(|b| !to.contains(b)).collect();
    let joining: Vec<BrokerId> = to.iter().copied().filter(|b| !from.contains(b)).collect();
    let what = match (leaving.is_empty(), joining.is_empty()) {
        (false, true) => "shrinking the ISR",
        (true, false) => "expanding the ISR",
        _ => "changing the ISR",
    };
    let or_none = |members: Vec<BrokerId>| {
        if members.is_empty() {
            "none".to_owned()
        } else {
            describe(members)
        }
    };
    tracing::info!(
        topic_partition = %partition.topic_partition,
        from = %broker_list(from),
        to = %broker_list(to),
        high_watermark = partition.high_watermark(),
        leaving = %or_none(leaving),
        joining = %or_none(joining),
        "{what}"
    );
}

fn describe_follower(broker: BrokerId, follower: &FollowerState, now: Instant) -> String {
    let caught_up_ms = now
        .saturating_duration_since(follower.last_caught_up)
        .as_millis();
    let heard_ms = now
        .saturating_duration_since(follower.last_heard())
        .as_millis();
    match follower.log_end_offset {
        Some(offset) => format!(
            "broker {broker} at offset {offset}, last caught up {caught_up_ms} ms ago, last \
             fetch {heard_ms} ms ago"
        ),
        None => format!("broker {broker} not fetched yet, last caught up {caught_up_ms} ms ago"),
    }
}

/// An AlterPartition the controller refused or that got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Refusal {
    /// What makes two refusals the same streak: the Kafka error's name, or `NO_ANSWER`.
    kind: String,
    reason: String,
}

/// The kind of a call that got no answer (the others are refused with a Kafka error).
const NO_ANSWER: &str = "no answer";

/// "refused" or "failed", and the noun for a count of them, for the log lines.
fn verb_of(kind: &str) -> (&'static str, &'static str) {
    if kind == NO_ANSWER {
        ("failed", "failures")
    } else {
        ("refused", "refusals")
    }
}

/// A run of refusals of one kind: said when it starts and when it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Streak {
    since: Instant,
    count: u64,
}

/// The streaks going on, by kind.
#[derive(Default)]
struct Streaks {
    open: BTreeMap<String, Streak>,
}

/// What a round's refusals are worth saying.
#[derive(Debug, PartialEq, Eq)]
enum Said {
    /// A new streak: WARN, with the first refusal and how many this round.
    Started {
        kind: String,
        topic_partition: String,
        verb: &'static str,
        reason: String,
        partitions: usize,
    },
    /// A streak that went on: DEBUG.
    Continued { kind: String, count: u64 },
    /// A round with none of this kind: INFO, with the count and the duration.
    Ended {
        kind: String,
        verb: &'static str,
        count: u64,
        elapsed_ms: u64,
    },
}

impl Streaks {
    /// Takes one round's refusals (topic partition, refusal) and logs what is worth saying.
    fn round(&mut self, refusals: Vec<(String, Refusal)>, now: Instant) {
        for said in self.judge(refusals, now) {
            match said {
                Said::Started {
                    kind,
                    topic_partition,
                    verb,
                    reason,
                    partitions,
                } => tracing::warn!(
                    %topic_partition,
                    partitions,
                    %kind,
                    "AlterPartition {verb}: {reason} (not logged again until it stops)"
                ),
                Said::Continued { kind, count } => {
                    tracing::debug!(%kind, count, "AlterPartition still {}", verb_of(&kind).0)
                }
                Said::Ended {
                    kind,
                    verb,
                    count,
                    elapsed_ms,
                } => tracing::info!(
                    %kind,
                    elapsed_ms,
                    "AlterPartition no longer {verb} after {count} {} over {:.1} s",
                    verb_of(&kind).1,
                    elapsed_ms as f64 / 1000.0
                ),
            }
        }
    }

    fn judge(&mut self, refusals: Vec<(String, Refusal)>, now: Instant) -> Vec<Said> {
        let mut said = Vec::new();
        let mut by_kind: BTreeMap<String, Vec<(String, Refusal)>> = BTreeMap::new();
        for (topic_partition, refusal) in refusals {
            by_kind
                .entry(refusal.kind.clone())
                .or_default()
                .push((topic_partition, refusal));
        }
        let ended: Vec<String> = self
            .open
            .keys()
            .filter(|kind| !by_kind.contains_key(*kind))
            .cloned()
            .collect();
        for kind in ended {
            if let Some(streak) = self.open.remove(&kind) {
                said.push(Said::Ended {
                    verb: verb_of(&kind).0,
                    kind,
                    count: streak.count,
                    elapsed_ms: now.saturating_duration_since(streak.since).as_millis() as u64,
                });
            }
        }
        for (kind, refusals) in by_kind {
            let count = refusals.len() as u64;
            match self.open.get_mut(&kind) {
                Some(streak) => {
                    streak.count += count;
                    said.push(Said::Continued {
                        kind,
                        count: streak.count,
                    });
                }
                None => {
                    let Some((topic_partition, first)) = refusals.into_iter().next() else {
                        continue;
                    };
                    self.open.insert(kind.clone(), Streak { since: now, count });
                    said.push(Said::Started {
                        verb: verb_of(&kind).0,
                        kind,
                        topic_partition,
                        reason: first.reason,
                        partitions: count as usize,
                    });
                }
            }
        }
        said
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(topic_partition: &str) -> (String, Refusal) {
        (
            topic_partition.to_owned(),
            Refusal {
                kind: "INELIGIBLE_REPLICA".into(),
                reason: "INELIGIBLE_REPLICA (107): replica 3 cannot join the ISR".into(),
            },
        )
    }

    #[test]
    fn repeated_refusals_are_said_when_they_start_and_when_they_end() {
        let mut streaks = Streaks::default();
        let start = Instant::now();
        // 33 partitions refused in the first round: one WARN naming the first.
        let first: Vec<_> = (0..33).map(|p| refused(&format!("t-{p}"))).collect();
        let said = streaks.judge(first, start);
        assert_eq!(said.len(), 1);
        assert!(matches!(
            &said[0],
            Said::Started { topic_partition, partitions: 33, .. } if topic_partition == "t-0"
        ));
        // The same again, round after round: DEBUG only.
        for round in 1..=3u64 {
            let again: Vec<_> = (0..33).map(|p| refused(&format!("t-{p}"))).collect();
            let said = streaks.judge(again, start + Duration::from_secs(5 * round));
            assert_eq!(
                said,
                vec![Said::Continued {
                    kind: "INELIGIBLE_REPLICA".into(),
                    count: 33 * (round + 1)
                }]
            );
        }
        // A round without: the streak ends, with its count and length.
        let said = streaks.judge(Vec::new(), start + Duration::from_secs(20));
        assert_eq!(
            said,
            vec![Said::Ended {
                kind: "INELIGIBLE_REPLICA".into(),
                verb: "refused",
                count: 132,
                elapsed_ms: 20_000
            }]
        );
        // Quiet rounds say nothing; the next refusal starts a new streak.
        assert!(streaks.judge(Vec::new(), start).is_empty());
        let said = streaks.judge(vec![refused("t-1")], start);
        assert!(matches!(&said[0], Said::Started { partitions: 1, .. }));
    }

    #[test]
    fn a_fenced_follower_is_not_proposed_to_join() {
        use sluice_raft::image::BrokerRegistration;
        use sluice_raft::records::{RegisterBroker, Uuid};
        let mut image = MetadataImage::default();
        for (id, fenced) in [(1, false), (2, false), (3, true)] {
            image.brokers.insert(
                id,
                BrokerRegistration {
                    registration: RegisterBroker {
                        broker_id: id,
                        incarnation_id: Uuid(id as u128),
                        broker_epoch: 1,
                        endpoints: Vec::new(),
                        rack: None,
                        fenced,
                    },
                    fenced,
                },
            );
        }
        // 2 and 3 look caught up; 3 is fenced (stopped): only 2 is proposed. (A fenced
        // member already in the ISR stays: `Partition::wanted_isr` asks only of joiners.)
        assert!(may_join(&image, 2));
        assert!(!may_join(&image, 3));
        // Unknown brokers never join.
        assert!(!may_join(&image, 4));
    }
}
