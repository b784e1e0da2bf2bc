//! [`Admin`]: topics, partitions, configs, the cluster and records, through any broker's Kafka
//! port (as Kafka's `AdminClient`). Requests a broker forwards to the controller (topic
//! creation, configs) go to any broker; DeleteRecords goes to each partition's leader.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::create_partitions_request::{
    CreatePartitionsAssignment, CreatePartitionsTopic,
};
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    BrokerId, CreatePartitionsRequest, CreateTopicsRequest, DeleteRecordsRequest,
    DeleteTopicsRequest, DescribeClusterRequest, DescribeConfigsRequest, ElectLeadersRequest,
    IncrementalAlterConfigsRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::cluster::{BrokerInfo, Cluster, ClusterMetadata, PartitionMetadata};
use super::config::{ClientConfig, CommonConfig};
use super::connection::Connection;
use super::error::{Error, Result};
use crate::protocol::errors;

/// Kafka's config resource types.
pub const RESOURCE_TOPIC: i8 = 2;
/// Kafka's config resource type of a broker (by node id; empty name: the cluster default).
pub const RESOURCE_BROKER: i8 = 4;

/// Which replicas an election may choose (Kafka's `ElectionType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectionType {
    /// The preferred replica (the first of the partition's replicas), when it is alive and in
    /// the ISR.
    Preferred,
    /// Any live replica when the ISR has none left, at the risk of losing acknowledged records.
    Unclean,
}

impl ElectionType {
    /// Kafka's code for it in ElectLeaders.
    fn code(self) -> i8 {
        match self {
            ElectionType::Preferred => 0,
            ElectionType::Unclean => 1,
        }
    }
}

/// One partition's outcome of [`Admin::elect_leaders`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionResult {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// Kafka's error code: NONE when elected, ELECTION_NOT_NEEDED when the chosen replica
    /// already leads.
    pub error_code: i16,
    /// The broker's message, when it sent one.
    pub error_message: Option<String>,
}

impl ElectionResult {
    /// The error this partition's election met (ELECTION_NOT_NEEDED included), if any.
    pub fn error(&self) -> Option<Error> {
        Error::kafka(
            self.error_code,
            format!("partition {}-{}", self.topic, self.partition),
            self.error_message.as_deref(),
        )
    }
}

/// A topic to create. `-1` partitions or replication factor take the broker's defaults
/// (`num.partitions`, `default.replication.factor`).
#[derive(Debug, Clone)]
pub struct NewTopic {
    /// The topic's name.
    pub name: String,
    /// Partitions to create (-1: the broker's `num.partitions`).
    pub num_partitions: i32,
    /// Replicas per partition (-1: `default.replication.factor`).
    pub replication_factor: i16,
    /// Topic configs (`cleanup.policy`, `retention.ms`, ...).
    pub configs: BTreeMap<String, String>,
    /// Explicit replicas per partition, the first preferred as leader (instead of a count).
    pub assignments: BTreeMap<i32, Vec<i32>>,
}

impl NewTopic {
    /// A topic with `num_partitions` partitions of `replication_factor` replicas.
    pub fn new(name: &str, num_partitions: i32, replication_factor: i16) -> Self {
        NewTopic {
            name: name.to_owned(),
            num_partitions,
            replication_factor,
            configs: BTreeMap::new(),
            assignments: BTreeMap::new(),
        }
    }

    /// Adds a topic config.
    pub fn config(mut self, key: &str, value: &str) -> Self {
        self.configs.insert(key.to_owned(), value.to_owned());
        self
    }
}

/// A topic with its partitions, as `describe_topics` gives it.
#[derive(Debug, Clone)]
pub struct TopicDescription {
    /// The topic's name.
    pub name: String,
    /// The topic's id (16 bytes).
    pub topic_id: [u8; 16],
    /// Whether it is an internal topic (`__consumer_offsets`).
    pub is_internal: bool,
    /// Its partitions, by index.
    pub partitions: Vec<PartitionMetadata>,
    /// Configs set on the topic itself (not defaults), by name.
    pub configs: BTreeMap<String, String>,
}

/// One config as DescribeConfigs gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    /// The config key.
    pub name: String,
    /// `None` for sensitive values and unset keys.
    pub value: Option<String>,
    /// Kafka's config source: 1 topic, 2 dynamic broker, 4 static broker, 5 default, ...
    pub source: i8,
    /// Whether the value is the default.
    pub is_default: bool,
    /// Whether the key cannot be changed while running.
    pub read_only: bool,
    /// Whether the value is secret (and not shown).
    pub is_sensitive: bool,
}

/// How `alter_configs` changes a key (Kafka's IncrementalAlterConfigs operations).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlterConfigOp {
    /// Sets the value.
    Set(String),
    /// Back to the default.
    Delete,
    /// Adds to a list value.
    Append(String),
    /// Removes from a list value.
    Subtract(String),
}

/// The cluster as DescribeCluster gives it.
#[derive(Debug, Clone)]
pub struct ClusterDescription {
    /// The cluster's id.
    pub cluster_id: String,
    /// The active controller's node id.
    pub controller_id: i32,
    /// Brokers with whether each is fenced.
    pub brokers: Vec<(BrokerInfo, bool)>,
}

/// Administration of a Kafka cluster.
///
/// ```no_run
/// # async fn example() -> sluice::client::Result<()> {
/// use sluice::client::{Admin, ClientConfig, NewTopic};
/// let admin = Admin::new(ClientConfig::new("127.0.0.1:9092"))?;
/// admin.create_topics(&[NewTopic::new("orders", 6, 3)], false).await?;
/// for topic in admin.describe_topics(&["orders".to_owned()]).await? {
///     println!("{} has {} partitions", topic.name, topic.partitions.len());
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Admin {
    cluster: Arc<Cluster>,
}

const ADMIN_KEYS: &[&str] = &["default.api.timeout.ms"];

impl Admin {
    /// An admin client; it connects on first use.
    pub fn new(config: ClientConfig) -> Result<Admin> {
        config.warn_unknown("admin", ADMIN_KEYS);
        Ok(Admin {
            cluster: Cluster::shared(CommonConfig::from_config(&config)?),
        })
    }

    /// A connection to any broker, for requests this client does not wrap.
    pub async fn connection(&self) -> Result<Arc<Connection>> {
        self.cluster.any().await
    }

    /// The cluster's metadata for `topics` (every topic for `None`).
    pub async fn metadata(&self, topics: Option<&[String]>) -> Result<Arc<ClusterMetadata>> {
        self.cluster.refresh(topics).await
    }

    pub(crate) fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    fn timeout_ms(&self) -> i32 {
        i32::try_from(self.cluster.config.request_timeout.as_millis()).unwrap_or(i32::MAX)
    }

    /// Creates topics; fails with the first topic's error (each error names its topic).
    /// `validate_only` checks without creating.
    pub async fn create_topics(&self, topics: &[NewTopic], validate_only: bool) -> Result<()> {
        let request = CreateTopicsRequest::default()
            .with_timeout_ms(self.timeout_ms())
            .with_validate_only(validate_only)
            .with_topics(
                topics
                    .iter()
                    .map(|t| {
                        CreatableTopic::default()
                            .with_name(topic_name(&t.name))
                            .with_num_partitions(if t.assignments.is_empty() {
                                t.num_partitions
                            } else {
                                -1
                            })
                            .with_replication_factor(if t.assignments.is_empty() {
                                t.replication_factor
                            } else {
                                -1
                            })
                            .with_assignments(
                                t.assignments
                                    .iter()
                                    .map(|(partition, replicas)| {
                                        CreatableReplicaAssignment::default()
                                            .with_partition_index(*partition)
                                            .with_broker_ids(
                                                replicas.iter().copied().map(BrokerId).collect(),
                                            )
                                    })
                                    .collect(),
                            )
                            .with_configs(
                                t.configs
                                    .iter()
                                    .map(|(k, v)| {
                                        CreatableTopicConfig::default()
                                            .with_name(str_bytes(k))
                                            .with_value(Some(str_bytes(v)))
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            );
        let response = self.cluster.any().await?.send(&request).await?;
        for topic in &response.topics {
            if let Some(error) = Error::kafka(
                topic.error_code,
                format!("topic {}", topic.name.0),
                topic.error_message.as_deref(),
            ) {
                return Err(error);
            }
        }
        Ok(())
    }

    /// Deletes topics by name; fails with the first topic's error.
    pub async fn delete_topics(&self, names: &[String]) -> Result<()> {
        let request = DeleteTopicsRequest::default()
            .with_timeout_ms(self.timeout_ms())
            .with_topic_names(names.iter().map(|n| topic_name(n)).collect())
            .with_topics(
                names
                    .iter()
                    .map(|n| DeleteTopicState::default().with_name(Some(topic_name(n))))
                    .collect(),
            );
        let response = self.cluster.any().await?.send(&request).await?;
        for topic in &response.responses {
            let name = topic.name.as_ref().map_or("?".into(), |n| n.0.to_string());
            if let Some(error) = Error::kafka(
                topic.error_code,
                format!("topic {name}"),
                topic.error_message.as_deref(),
            ) {
                return Err(error);
            }
        }
        Ok(())
    }

    /// Every topic's name, sorted; internal topics (`__consumer_offsets`) only when asked.
    pub async fn list_topics(&self, include_internal: bool) -> Result<Vec<String>> {
        let metadata = self.cluster.refresh(None).await?;
        Ok(metadata
            .topics
            .values()
            .filter(|t| include_internal || !t.is_internal)
            .map(|t| t.name.clone())
            .collect())
    }

    /// Topics with their partitions and the configs set on them. A topic that does not exist
    /// fails the call with UNKNOWN_TOPIC_OR_PARTITION naming it.
    pub async fn describe_topics(&self, names: &[String]) -> Result<Vec<TopicDescription>> {
        let metadata = self.cluster.refresh(Some(names)).await?;
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let Some(topic) = metadata.topics.get(name) else {
                return Err(Error::Protocol(format!(
                    "Metadata did not answer for {name}"
                )));
            };
            if let Some(error) = Error::kafka(topic.error_code, format!("topic {name}"), None) {
                return Err(error);
            }
            let configs = self
                .describe_configs(RESOURCE_TOPIC, name)
                .await?
                .into_iter()
                .filter(|c| !c.is_default && c.source == 1)
                .filter_map(|c| Some((c.name, c.value?)))
                .collect();
            out.push(TopicDescription {
                name: topic.name.clone(),
                topic_id: topic.topic_id,
                is_internal: topic.is_internal,
                partitions: topic.partitions.clone(),
                configs,
            });
        }
        Ok(out)
    }

    /// Raises `topic`'s partition count to `total_count` (partitions are never removed).
    pub async fn create_partitions(
        &self,
        topic: &str,
        total_count: i32,
        assignments: Option<Vec<Vec<i32>>>,
    ) -> Result<()> {
        let request = CreatePartitionsRequest::default()
            .with_timeout_ms(self.timeout_ms())
            .with_topics(vec![
                CreatePartitionsTopic::default()
                    .with_name(topic_name(topic))
                    .with_count(total_count)
                    .with_assignments(assignments.map(|a| {
                        a.into_iter()
                            .map(|replicas| {
                                CreatePartitionsAssignment::default()
                                    .with_broker_ids(replicas.into_iter().map(BrokerId).collect())
                            })
                            .collect()
                    })),
            ]);
        let response = self.cluster.any().await?.send(&request).await?;
        for result in &response.results {
            if let Some(error) = Error::kafka(
                result.error_code,
                format!("topic {}", result.name.0),
                result.error_message.as_deref(),
            ) {
                return Err(error);
            }
        }
        Ok(())
    }

    /// Every config of a topic (`RESOURCE_TOPIC`) or broker (`RESOURCE_BROKER`, by node id),
    /// with where its value comes from.
    pub async fn describe_configs(
        &self,
        resource_type: i8,
        name: &str,
    ) -> Result<Vec<ConfigEntry>> {
        let request = DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(str_bytes(name))
                // Null asks for every key (the codec's default is an empty list: none).
                .with_configuration_keys(None),
        ]);
        let connection = if resource_type == RESOURCE_BROKER {
            // Broker configs are answered by that broker.
            match name.parse() {
                Ok(node_id) => self.cluster.broker(node_id).await?,
                Err(_) => self.cluster.any().await?,
            }
        } else {
            self.cluster.any().await?
        };
        let response = connection.send(&request).await?;
        let mut entries = Vec::new();
        for result in &response.results {
            if let Some(error) = Error::kafka(
                result.error_code,
                format!("{} {}", resource_name(resource_type), result.resource_name),
                result.error_message.as_deref(),
            ) {
                return Err(error);
            }
            for config in &result.configs {
                entries.push(ConfigEntry {
                    name: config.name.to_string(),
                    value: config.value.as_ref().map(|v| v.to_string()),
                    source: config.config_source,
                    is_default: config.config_source == 5,
                    read_only: config.read_only,
                    is_sensitive: config.is_sensitive,
                });
            }
        }
        Ok(entries)
    }

    /// Changes configs of a topic or broker (IncrementalAlterConfigs): keys not named keep
    /// their values. An empty broker name changes the cluster-wide default.
    pub async fn alter_configs(
        &self,
        resource_type: i8,
        name: &str,
        changes: &[(String, AlterConfigOp)],
        validate_only: bool,
    ) -> Result<()> {
        let request = IncrementalAlterConfigsRequest::default()
            .with_validate_only(validate_only)
            .with_resources(vec![
                AlterConfigsResource::default()
                    .with_resource_type(resource_type)
                    .with_resource_name(str_bytes(name))
                    .with_configs(
                        changes
                            .iter()
                            .map(|(key, op)| {
                                let (operation, value) = match op {
                                    AlterConfigOp::Set(v) => (0, Some(v)),
                                    AlterConfigOp::Delete => (1, None),
                                    AlterConfigOp::Append(v) => (2, Some(v)),
                                    AlterConfigOp::Subtract(v) => (3, Some(v)),
                                };
                                AlterableConfig::default()
                                    .with_name(str_bytes(key))
                                    .with_config_operation(operation)
                                    .with_value(value.map(|v| str_bytes(v)))
                            })
                            .collect(),
                    ),
            ]);
        let response = self.cluster.any().await?.send(&request).await?;
        for result in &response.responses {
            if let Some(error) = Error::kafka(
                result.error_code,
                format!("{} {}", resource_name(resource_type), result.resource_name),
                result.error_message.as_deref(),
            ) {
                return Err(error);
            }
        }
        Ok(())
    }

    /// Elects leaders (ElectLeaders, as `kafka-leader-election.sh`): for `partitions`, or for
    /// every partition when `None`. The controller decides; the answer has each partition's
    /// outcome (ELECTION_NOT_NEEDED where the replica the election would choose already
    /// leads). Fails as a whole only when the request is refused.
    pub async fn elect_leaders(
        &self,
        election_type: ElectionType,
        partitions: Option<&[(String, i32)]>,
    ) -> Result<Vec<ElectionResult>> {
        let topic_partitions = partitions.map(|partitions| {
            let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for (topic, partition) in partitions {
                by_topic.entry(topic).or_default().push(*partition);
            }
            by_topic
                .into_iter()
                .map(|(topic, partitions)| {
                    TopicPartitions::default()
                        .with_topic(TopicName(str_bytes(topic)))
                        .with_partitions(partitions)
                })
                .collect()
        });
        let request = ElectLeadersRequest::default()
            .with_election_type(election_type.code())
            .with_topic_partitions(topic_partitions)
            .with_timeout_ms(self.timeout_ms());
        let response = self.cluster.any().await?.send(&request).await?;
        if let Some(error) = Error::kafka(response.error_code, "ElectLeaders", None) {
            return Err(error);
        }
        let mut results = Vec::new();
        for topic in &response.replica_election_results {
            for partition in &topic.partition_result {
                results.push(ElectionResult {
                    topic: topic.topic.to_string(),
                    partition: partition.partition_id,
                    error_code: partition.error_code,
                    error_message: partition.error_message.as_ref().map(|m| m.to_string()),
                });
            }
        }
        Ok(results)
    }

    /// The cluster id, the active controller and every broker with its fenced state.
    pub async fn describe_cluster(&self) -> Result<ClusterDescription> {
        let request = DescribeClusterRequest::default().with_include_fenced_brokers(true);
        let response = self.cluster.any().await?.send(&request).await?;
        if let Some(error) = Error::kafka(
            response.error_code,
            "DescribeCluster",
            response.error_message.as_deref(),
        ) {
            return Err(error);
        }
        Ok(ClusterDescription {
            cluster_id: response.cluster_id.to_string(),
            controller_id: response.controller_id.0,
            brokers: response
                .brokers
                .iter()
                .map(|b| {
                    (
                        BrokerInfo {
                            node_id: b.broker_id.0,
                            host: b.host.to_string(),
                            port: b.port,
                            rack: b.rack.as_ref().map(|r| r.to_string()),
                        },
                        b.is_fenced,
                    )
                })
                .collect(),
        })
    }

    /// Deletes the records of `topic` below each given offset per partition (-1: the high
    /// watermark); returns each partition's new log start offset.
    pub async fn delete_records(
        &self,
        topic: &str,
        before_offsets: &BTreeMap<i32, i64>,
    ) -> Result<BTreeMap<i32, i64>> {
        let metadata = self.cluster.refresh(Some(&[topic.to_owned()])).await?;
        let mut by_leader: BTreeMap<i32, Vec<(i32, i64)>> = BTreeMap::new();
        for (&partition, &offset) in before_offsets {
            let context = format!("partition {topic}-{partition}");
            let leader = match metadata.partition(topic, partition) {
                Some(p) if p.leader >= 0 => p.leader,
                Some(_) => {
                    return Err(Error::Kafka {
                        code: errors::LEADER_NOT_AVAILABLE,
                        context,
                        message: None,
                    });
                }
                None => {
                    let code = metadata
                        .topics
                        .get(topic)
                        .map(|t| t.error_code)
                        .filter(|&c| c != errors::NONE)
                        .unwrap_or(errors::UNKNOWN_TOPIC_OR_PARTITION);
                    return Err(Error::Kafka {
                        code,
                        context,
                        message: None,
                    });
                }
            };
            by_leader
                .entry(leader)
                .or_default()
                .push((partition, offset));
        }
        let mut low_watermarks = BTreeMap::new();
        for (leader, partitions) in by_leader {
            let request = DeleteRecordsRequest::default()
                .with_timeout_ms(self.timeout_ms())
                .with_topics(vec![
                    DeleteRecordsTopic::default()
                        .with_name(topic_name(topic))
                        .with_partitions(
                            partitions
                                .iter()
                                .map(|&(p, offset)| {
                                    DeleteRecordsPartition::default()
                                        .with_partition_index(p)
                                        .with_offset(offset)
                                })
                                .collect(),
                        ),
                ]);
            let response = self.cluster.broker(leader).await?.send(&request).await?;
            for t in &response.topics {
                for p in &t.partitions {
                    if let Some(error) = Error::kafka(
                        p.error_code,
                        format!("partition {topic}-{}", p.partition_index),
                        None,
                    ) {
                        return Err(error);
                    }
                    low_watermarks.insert(p.partition_index, p.low_watermark);
                }
            }
        }
        Ok(low_watermarks)
    }

    /// Closes the connections.
    pub fn close(&self) {
        self.cluster.close();
    }
}

fn resource_name(resource_type: i8) -> &'static str {
    match resource_type {
        RESOURCE_TOPIC => "topic",
        RESOURCE_BROKER => "broker",
        _ => "resource",
    }
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn topic_name(s: &str) -> TopicName {
    TopicName(str_bytes(s))
}
