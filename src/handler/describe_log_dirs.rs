//! DescribeLogDirs: what each of this broker's log dirs holds (Kafka's `kafka-log-dirs.sh
//! --describe`, Cruise Control's disk view): per dir its path, whether it can be used, the room
//! on its filesystem (v4+) and, per partition asked for, the bytes its log takes and how far it
//! lags.
//!
//! As Kafka's `KafkaApis.handleDescribeLogDirsRequest` and `ReplicaManager.describeLogDirs`:
//! - DESCRIBE on the CLUSTER, else CLUSTER_AUTHORIZATION_FAILED at the top (v3+; before v3 the
//!   answer has no field for it, and no dirs is how clients read a refusal);
//! - `topics` null asks for every log here; otherwise only the partitions named that have a log
//!   here (one asked for and not hosted is no error, just absent);
//! - every dir is listed, even with nothing asked for in it; a topic with no partition left
//!   after the filter is not;
//! - `offset_lag` of a current log is `max(0, high watermark - log end offset)` (0 as a
//!   leader, and as a follower too, whose high watermark never passes its log end); there are
//!   no future logs (AlterReplicaLogDirs is not served), so `is_future_key` is false.
//!
//! A dir whose filesystem cannot be asked (the dir removed, its disk gone) answers
//! KAFKA_STORAGE_ERROR with no partitions, as Kafka answers for an offline dir. Sluice takes a
//! single log offline after a storage error rather than its whole dir: such a log is left out
//! of its dir, as Kafka leaves out the logs it does not serve.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};

use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::log::manager::LogDirDescription;
use crate::protocol::TopicPartition;
use crate::protocol::errors::KafkaError;
use crate::security::acl::Operation;

/// v1 (KIP-219 throttling) to v4 (total and usable bytes); v0 is gone from Kafka 4.
pub const VERSIONS: (i16, i16) = (1, 4);

/// The version whose response has a top-level error code.
const TOP_LEVEL_ERROR_VERSION: i16 = 3;

pub fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: DescribeLogDirsRequest,
) -> DescribeLogDirsResponse {
    if !context.access.allows_cluster(Operation::Describe) {
        return refused(context.api_version);
    }
    let wanted = Wanted::of(request);
    let dirs = broker
        .replicas
        .describe_log_dirs(|topic_partition| wanted.contains(topic_partition));
    DescribeLogDirsResponse::default().with_results(results(dirs))
}

/// The answer to a client without DESCRIBE on the cluster.
fn refused(api_version: i16) -> DescribeLogDirsResponse {
    let response = DescribeLogDirsResponse::default();
    if api_version >= TOP_LEVEL_ERROR_VERSION {
        response.with_error_code(KafkaError::ClusterAuthorizationFailed.code())
    } else {
        response
    }
}

/// The partitions a request asks about.
#[derive(Debug, PartialEq, Eq)]
enum Wanted {
    /// `topics` null: every log here.
    All,
    /// The partitions named, by topic.
    Named(BTreeMap<String, BTreeSet<i32>>),
}

impl Wanted {
    fn of(request: DescribeLogDirsRequest) -> Wanted {
        match request.topics {
            None => Wanted::All,
            Some(topics) => {
                let mut named: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
                for topic in topics {
                    named
                        .entry(topic.topic.0.to_string())
                        .or_default()
                        .extend(topic.partitions);
                }
                Wanted::Named(named)
            }
        }
    }

    fn contains(&self, topic_partition: &TopicPartition) -> bool {
        match self {
            Wanted::All => true,
            Wanted::Named(named) => named
                .get(&topic_partition.topic)
                .is_some_and(|partitions| partitions.contains(&topic_partition.partition)),
        }
    }
}

/// One result per log dir, its logs grouped by topic.
fn results(dirs: Vec<LogDirDescription>) -> Vec<DescribeLogDirsResult> {
    dirs.into_iter()
        .map(|dir| {
            let result = DescribeLogDirsResult::default()
                .with_log_dir(str_bytes(dir.path.to_string_lossy()));
            let space = match dir.space {
                Ok(space) => space,
                Err(_) => return result.with_error_code(KafkaError::KafkaStorageError.code()),
            };
            let mut topics: BTreeMap<String, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
            for log in dir.logs {
                topics.entry(log.topic_partition.topic).or_default().push(
                    DescribeLogDirsPartition::default()
                        .with_partition_index(log.topic_partition.partition)
                        .with_partition_size(i64::try_from(log.size_bytes).unwrap_or(i64::MAX))
                        .with_offset_lag(offset_lag(log.high_watermark, log.log_end_offset))
                        .with_is_future_key(false),
                );
            }
            result
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(name, partitions)| {
                            DescribeLogDirsTopic::default()
                                .with_name(TopicName(str_bytes(name)))
                                .with_partitions(partitions)
                        })
                        .collect(),
                )
                .with_total_bytes(i64::try_from(space.total_bytes).unwrap_or(i64::MAX))
                .with_usable_bytes(i64::try_from(space.usable_bytes).unwrap_or(i64::MAX))
        })
        .collect()
}

/// Kafka's lag of a current (not future) log: how far its log end is below the high watermark
/// it knows, never negative.
fn offset_lag(high_watermark: u64, log_end_offset: u64) -> i64 {
    i64::try_from(high_watermark.saturating_sub(log_end_offset)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;

    use super::*;
    use crate::log::manager::{DirSpace, LogDescription};

    fn log(topic: &str, partition: i32, size_bytes: u64) -> LogDescription {
        LogDescription {
            topic_partition: TopicPartition::new(topic, partition),
            size_bytes,
            log_end_offset: 10,
            high_watermark: 10,
        }
    }

    fn dir(path: &str, logs: Vec<LogDescription>) -> LogDirDescription {
        LogDirDescription {
            path: PathBuf::from(path),
            space: Ok(DirSpace {
                total_bytes: 1000,
                usable_bytes: 400,
            }),
            logs,
        }
    }

    #[test]
    fn null_topics_want_every_log_and_named_ones_only_those_partitions() {
        let all = Wanted::of(DescribeLogDirsRequest::default().with_topics(None));
        assert_eq!(all, Wanted::All);
        assert!(all.contains(&TopicPartition::new("anything", 7)));

        let named = Wanted::of(DescribeLogDirsRequest::default().with_topics(Some(vec![
            DescribableLogDirTopic::default()
                .with_topic(TopicName(str_bytes("orders")))
                .with_partitions(vec![0, 2]),
            DescribableLogDirTopic::default()
                .with_topic(TopicName(str_bytes("audit")))
                .with_partitions(vec![]),
        ])));
        assert!(named.contains(&TopicPartition::new("orders", 0)));
        assert!(named.contains(&TopicPartition::new("orders", 2)));
        assert!(!named.contains(&TopicPartition::new("orders", 1)));
        assert!(!named.contains(&TopicPartition::new("orders-x", 0)));
        // A topic named with no partitions asks for none of them.
        assert!(!named.contains(&TopicPartition::new("audit", 0)));
        // An empty list asks for no partition at all.
        let none = Wanted::of(DescribeLogDirsRequest::default().with_topics(Some(vec![])));
        assert!(!none.contains(&TopicPartition::new("orders", 0)));
    }

    #[test]
    fn each_dir_lists_its_logs_by_topic_and_an_unreadable_dir_is_a_storage_error() {
        let unreadable = LogDirDescription {
            space: Err("No such file or directory".into()),
            ..dir("/disk2", vec![log("orders", 1, 50)])
        };
        let answered = results(vec![
            dir(
                "/disk1",
                vec![
                    log("audit", 0, 7),
                    log("orders", 0, 100),
                    log("orders", 2, 0),
                ],
            ),
            unreadable,
            dir("/disk3", vec![]),
        ]);
        assert_eq!(
            answered.len(),
            3,
            "every dir, even one holding nothing asked for"
        );

        let first = &answered[0];
        assert_eq!(first.log_dir.as_str(), "/disk1");
        assert_eq!(first.error_code, 0);
        assert_eq!((first.total_bytes, first.usable_bytes), (1000, 400));
        // (partition, size, offset lag, future) of each partition, by topic.
        type Partitions = Vec<(i32, i64, i64, bool)>;
        let topics: Vec<(&str, Partitions)> = first
            .topics
            .iter()
            .map(|t| {
                (
                    t.name.0.as_str(),
                    t.partitions
                        .iter()
                        .map(|p| {
                            (
                                p.partition_index,
                                p.partition_size,
                                p.offset_lag,
                                p.is_future_key,
                            )
                        })
                        .collect(),
                )
            })
            .collect();
        assert_eq!(
            topics,
            vec![
                ("audit", vec![(0, 7, 0, false)]),
                ("orders", vec![(0, 100, 0, false), (2, 0, 0, false)]),
            ]
        );

        let second = &answered[1];
        assert_eq!(second.error_code, KafkaError::KafkaStorageError.code());
        assert!(second.topics.is_empty(), "an unusable dir lists nothing");
        assert_eq!((second.total_bytes, second.usable_bytes), (-1, -1));

        assert!(answered[2].topics.is_empty());
        assert_eq!(answered[2].error_code, 0);
    }

    #[test]
    fn the_lag_of_a_current_log_is_never_negative() {
        assert_eq!(offset_lag(10, 10), 0);
        assert_eq!(
            offset_lag(5, 10),
            0,
            "a leader's log end is past its high watermark"
        );
        assert_eq!(offset_lag(12, 10), 2);
    }

    #[test]
    fn a_refusal_says_so_at_the_top_from_v3_and_lists_no_dir_before() {
        let v2 = refused(2);
        assert_eq!(v2.error_code, 0);
        assert!(v2.results.is_empty());
        let v3 = refused(3);
        assert_eq!(v3.error_code, KafkaError::ClusterAuthorizationFailed.code());
        assert!(v3.results.is_empty());
    }
}
