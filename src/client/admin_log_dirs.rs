//! [`Admin`]'s log dir description, as Kafka's `AdminClient.describeLogDirs` (and
//! `kafka-log-dirs.sh --describe`): DescribeLogDirs to each broker asked about, answered by that
//! broker for its own disks, so every broker is asked separately (concurrently).
//!
//! A broker that cannot be reached or refuses (CLUSTER_AUTHORIZATION_FAILED) fails its own
//! entry, not the call: the others' answers are still worth having, as Kafka's admin gives one
//! future per broker. Likewise a log dir the broker cannot use (KAFKA_STORAGE_ERROR) carries
//! its error beside the others.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use tokio::task::JoinSet;

use super::admin::Admin;
use super::consumer::TopicPartition;
use super::error::{Error, Result};
use crate::protocol::errors;

/// How many brokers are asked for metadata before giving up (each failure forgets its
/// connection, so the next attempt goes elsewhere).
const METADATA_ATTEMPTS_MAX: u32 = 3;

/// One broker's log dirs, or why they could not be had.
#[derive(Debug, Clone)]
pub struct BrokerLogDirs {
    /// The broker's node id.
    pub broker_id: i32,
    /// Its log dirs; the error when the broker could not be reached or refused.
    pub log_dirs: Result<Vec<LogDirDescription>>,
}

/// One log dir of a broker (Kafka's `LogDirDescription`).
#[derive(Debug, Clone)]
pub struct LogDirDescription {
    /// The dir's absolute path on the broker.
    pub path: String,
    /// Why the broker cannot use the dir (KAFKA_STORAGE_ERROR: offline); `None` when it can.
    pub error: Option<Error>,
    /// The replicas whose logs it holds (those asked about), in partition order.
    pub replicas: Vec<ReplicaInfo>,
    /// The size of its filesystem; `None` when the broker does not say (DescribeLogDirs
    /// before v4) or does not know.
    pub total_bytes: Option<u64>,
    /// What is left to write on its filesystem; `None` as for `total_bytes`.
    pub usable_bytes: Option<u64>,
}

/// One replica's log in a log dir (Kafka's `ReplicaInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaInfo {
    /// The partition.
    pub topic_partition: TopicPartition,
    /// The bytes its log takes on disk.
    pub size_bytes: i64,
    /// How far its log end is behind its high watermark (a current replica), or behind the
    /// current replica's log end (a future one); -1 when the broker does not know.
    pub offset_lag: i64,
    /// Whether this is a future replica: a copy being made in this dir to replace the
    /// current one (AlterReplicaLogDirs).
    pub is_future: bool,
}

impl Admin {
    /// The log dirs of each broker in `broker_ids` (every broker in the cluster's metadata for
    /// `None`), with the replicas of `topics` they hold (every replica for `None`), by broker
    /// id. A broker that fails is an `Err` in its own entry.
    pub async fn describe_log_dirs(
        &self,
        broker_ids: Option<&[i32]>,
        topics: Option<&[String]>,
    ) -> Result<Vec<BrokerLogDirs>> {
        let brokers: BTreeSet<i32> = match broker_ids {
            Some(ids) => ids.iter().copied().collect(),
            None => self
                .metadata_retried(Some(&[]))
                .await?
                .brokers
                .keys()
                .copied()
                .collect(),
        };
        let request = DescribeLogDirsRequest::default().with_topics(match topics {
            None => None,
            Some(names) => Some(self.partitions_of(names).await?),
        });
        let mut asked = JoinSet::new();
        for broker_id in brokers {
            let (admin, request) = (self.clone(), request.clone());
            asked.spawn(async move {
                let log_dirs = admin.log_dirs_of(broker_id, &request).await;
                BrokerLogDirs {
                    broker_id,
                    log_dirs,
                }
            });
        }
        let mut described = Vec::with_capacity(asked.len());
        while let Some(done) = asked.join_next().await {
            described.push(
                done.map_err(|e| Error::Protocol(format!("a DescribeLogDirs task failed: {e}")))?,
            );
        }
        described.sort_by_key(|b| b.broker_id);
        Ok(described)
    }

    /// Every partition of the topics named, as DescribeLogDirs asks for them. A topic the
    /// metadata does not know asks for nothing (as Kafka's tool, which filters by name).
    async fn partitions_of(&self, topics: &[String]) -> Result<Vec<DescribableLogDirTopic>> {
        let metadata = self.metadata_retried(Some(topics)).await?;
        let names: BTreeSet<&String> = topics.iter().collect();
        Ok(names
            .into_iter()
            .filter_map(|name| {
                let topic = metadata.topics.get(name)?;
                (topic.error_code == errors::NONE).then(|| {
                    DescribableLogDirTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(name.clone())))
                        .with_partitions(topic.partitions.iter().map(|p| p.partition).collect())
                })
            })
            .collect())
    }

    /// Metadata, asked again (of another broker: the one that failed is forgotten) when the
    /// broker asked went away, so that a broker just dead fails only its own entry.
    async fn metadata_retried(
        &self,
        topics: Option<&[String]>,
    ) -> Result<std::sync::Arc<super::cluster::ClusterMetadata>> {
        let mut attempt = 1;
        loop {
            match self.metadata(topics).await {
                Err(error) if error.is_retriable() && attempt < METADATA_ATTEMPTS_MAX => {
                    tracing::debug!(%error, attempt, "metadata for DescribeLogDirs: retrying");
                    attempt += 1;
                }
                outcome => return outcome,
            }
        }
    }

    async fn log_dirs_of(
        &self,
        broker_id: i32,
        request: &DescribeLogDirsRequest,
    ) -> Result<Vec<LogDirDescription>> {
        let response = self
            .cluster()
            .broker(broker_id)
            .await?
            .send(request)
            .await?;
        log_dirs_from(broker_id, response)
    }
}

/// A broker's answer as its log dirs. Before v3 the answer has no error field: a refused
/// request comes back with no dir, and a broker always has one, so that is read as
/// CLUSTER_AUTHORIZATION_FAILED, as Kafka's admin reads it.
fn log_dirs_from(
    broker_id: i32,
    response: DescribeLogDirsResponse,
) -> Result<Vec<LogDirDescription>> {
    let context = || format!("the log dirs of broker {broker_id}");
    if let Some(error) = Error::kafka(response.error_code, context(), None) {
        return Err(error);
    }
    if response.results.is_empty() {
        return Err(Error::from_code(
            errors::CLUSTER_AUTHORIZATION_FAILED,
            context(),
            None,
        ));
    }
    Ok(response
        .results
        .into_iter()
        .map(|dir| {
            let path = dir.log_dir.to_string();
            let mut replicas: BTreeMap<TopicPartition, ReplicaInfo> = BTreeMap::new();
            for topic in &dir.topics {
                for partition in &topic.partitions {
                    let topic_partition =
                        TopicPartition::new(topic.name.as_str(), partition.partition_index);
                    replicas.insert(
                        topic_partition.clone(),
                        ReplicaInfo {
                            topic_partition,
                            size_bytes: partition.partition_size,
                            offset_lag: partition.offset_lag,
                            is_future: partition.is_future_key,
                        },
                    );
                }
            }
            LogDirDescription {
                error: Error::kafka(
                    dir.error_code,
                    format!("log dir {path} of broker {broker_id}"),
                    None,
                ),
                path,
                replicas: replicas.into_values().collect(),
                total_bytes: u64::try_from(dir.total_bytes).ok(),
                usable_bytes: u64::try_from(dir.usable_bytes).ok(),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::describe_log_dirs_response::{
        DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
    };

    use super::*;

    #[test]
    fn an_answer_becomes_dirs_with_their_replicas_and_errors() {
        let partition = |index, size| {
            DescribeLogDirsPartition::default()
                .with_partition_index(index)
                .with_partition_size(size)
        };
        let response = DescribeLogDirsResponse::default().with_results(vec![
            DescribeLogDirsResult::default()
                .with_log_dir(StrBytes::from_static_str("/disk1"))
                .with_total_bytes(1000)
                .with_usable_bytes(10)
                .with_topics(vec![
                    DescribeLogDirsTopic::default()
                        .with_name(TopicName(StrBytes::from_static_str("orders")))
                        .with_partitions(vec![partition(1, 20), partition(0, 10)]),
                ]),
            DescribeLogDirsResult::default()
                .with_log_dir(StrBytes::from_static_str("/disk2"))
                .with_error_code(errors::KAFKA_STORAGE_ERROR),
        ]);
        let dirs = log_dirs_from(3, response).expect("dirs");
        assert_eq!(dirs.len(), 2);
        assert_eq!(dirs[0].path, "/disk1");
        assert!(dirs[0].error.is_none());
        assert_eq!(
            (dirs[0].total_bytes, dirs[0].usable_bytes),
            (Some(1000), Some(10))
        );
        let sizes: Vec<(i32, i64)> = dirs[0]
            .replicas
            .iter()
            .map(|r| (r.topic_partition.partition, r.size_bytes))
            .collect();
        assert_eq!(sizes, [(0, 10), (1, 20)]);
        assert_eq!(
            dirs[1].error.as_ref().and_then(Error::code),
            Some(errors::KAFKA_STORAGE_ERROR)
        );
        assert_eq!((dirs[1].total_bytes, dirs[1].usable_bytes), (None, None));
    }

    #[test]
    fn a_refusal_is_the_brokers_error_with_or_without_the_v3_field() {
        let v3 = DescribeLogDirsResponse::default()
            .with_error_code(errors::CLUSTER_AUTHORIZATION_FAILED);
        let v2 = DescribeLogDirsResponse::default();
        for response in [v3, v2] {
            let error = log_dirs_from(1, response).expect_err("refused");
            assert_eq!(error.code(), Some(errors::CLUSTER_AUTHORIZATION_FAILED));
            assert!(error.to_string().contains("broker 1"), "{error}");
        }
    }
}
