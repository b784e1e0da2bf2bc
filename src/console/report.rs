//! What the console shows and the CLI prints with `--output json`, built in one place from the
//! same admin calls, so the two always agree: the cluster (brokers, quorum, partition health),
//! topics and their partitions, consumer groups with their lag.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::{DescribeQuorumRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use serde::Serialize;

use crate::client::{Admin, Error, GroupDescription, OffsetSpec, TopicPartition};
use crate::protocol::topic_partition::topic_id_text;

/// A group member as `sluice groups describe --output json` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub host: String,
    /// `[topic, partition]` pairs in JSON.
    #[serde(serialize_with = "topic_partition_pairs")]
    pub assignment: Vec<TopicPartition>,
}

fn topic_partition_pairs<S: serde::Serializer>(
    partitions: &[TopicPartition],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(partitions.iter().map(|tp| (&tp.topic, tp.partition)))
}

/// A group's members as the reports show them.
pub fn members(described: &GroupDescription) -> Vec<Member> {
    described
        .members
        .iter()
        .map(|m| Member {
            member_id: m.member_id.clone(),
            group_instance_id: m.group_instance_id.clone(),
            client_id: m.client_id.clone(),
            host: m.host.clone(),
            assignment: m.assignment.clone(),
        })
        .collect()
}

/// Kafka's name of a config source (`ConfigEntry.ConfigSource`).
pub fn config_source_name(source: i8) -> &'static str {
    match source {
        1 => "DYNAMIC_TOPIC_CONFIG",
        2 => "DYNAMIC_BROKER_CONFIG",
        3 => "DYNAMIC_DEFAULT_BROKER_CONFIG",
        4 => "STATIC_BROKER_CONFIG",
        5 => "DEFAULT_CONFIG",
        6 => "DYNAMIC_BROKER_LOGGER_CONFIG",
        7 => "CLIENT_METRICS_CONFIG",
        8 => "GROUP_CONFIG",
        _ => "UNKNOWN",
    }
}

/// One partition of a group: committed offset, log end offset, lag and owner.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    pub committed_offset: Option<i64>,
    pub log_end_offset: Option<i64>,
    pub lag: Option<i64>,
    pub member_id: Option<String>,
    pub client_id: Option<String>,
    pub host: Option<String>,
}

/// `sluice groups describe --output json`.
#[derive(Debug, Clone, Serialize)]
pub struct GroupReport {
    pub group: String,
    pub coordinator: String,
    pub state: String,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<Member>,
    pub partitions: Vec<PartitionLag>,
    pub total_lag: i64,
}

/// A group's members and, per partition it committed or owns, the lag.
pub async fn group(admin: &Admin, group_id: &str) -> Result<GroupReport, Error> {
    let described = admin.describe_group(group_id).await?;
    let committed = admin.list_group_offsets(group_id).await?;
    group_from(admin, described, committed).await
}

async fn group_from(
    admin: &Admin,
    described: GroupDescription,
    committed: BTreeMap<TopicPartition, i64>,
) -> Result<GroupReport, Error> {
    let members = members(&described);
    let mut owner: BTreeMap<&TopicPartition, &Member> = BTreeMap::new();
    for member in &members {
        for key in &member.assignment {
            owner.insert(key, member);
        }
    }
    let partitions: BTreeSet<TopicPartition> = committed
        .keys()
        .chain(owner.keys().copied())
        .cloned()
        .collect();
    let ends = admin.list_offsets(&partitions, OffsetSpec::Latest).await?;
    let rows: Vec<PartitionLag> = partitions
        .iter()
        .map(|key| {
            let committed_offset = committed.get(key).copied();
            let log_end_offset = ends.get(key).copied().flatten();
            let member = owner.get(key);
            PartitionLag {
                topic: key.topic.clone(),
                partition: key.partition,
                committed_offset,
                log_end_offset,
                lag: committed_offset
                    .zip(log_end_offset)
                    .map(|(c, e)| (e - c).max(0)),
                member_id: member.map(|m| m.member_id.clone()),
                client_id: member.map(|m| m.client_id.clone()),
                host: member.map(|m| m.host.clone()),
            }
        })
        .collect();
    let total_lag = rows.iter().filter_map(|r| r.lag).sum();
    Ok(GroupReport {
        group: described.group_id,
        coordinator: described.coordinator,
        state: described.state,
        protocol_type: described.protocol_type,
        protocol: described.protocol,
        members,
        partitions: rows,
        total_lag,
    })
}

/// `sluice groups list --output json`.
#[derive(Debug, Clone, Serialize)]
pub struct ListedGroup {
    pub group: String,
    pub state: String,
    pub protocol_type: String,
}

pub async fn groups(admin: &Admin) -> Result<Vec<ListedGroup>, Error> {
    Ok(admin
        .list_groups()
        .await?
        .into_iter()
        .map(|g| ListedGroup {
            group: g.group_id,
            state: g.state,
            protocol_type: g.protocol_type,
        })
        .collect())
}

/// One partition of `sluice topics describe --output json`.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionReport {
    pub partition: i32,
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub offline_replicas: Vec<i32>,
}

/// `sluice topics describe --output json`: one topic.
#[derive(Debug, Clone, Serialize)]
pub struct TopicReport {
    pub name: String,
    pub topic_id: String,
    pub internal: bool,
    pub configs: BTreeMap<String, String>,
    pub partitions: Vec<PartitionReport>,
}

/// The named topics (every one but internal ones when `names` is empty), described with the
/// configs set on them (DescribeConfigs of each: what `sluice topics describe` prints).
pub async fn topics(admin: &Admin, names: &[String]) -> Result<Vec<TopicReport>, Error> {
    let names = if names.is_empty() {
        admin.list_topics(false).await?
    } else {
        names.to_vec()
    };
    Ok(admin
        .describe_topics(&names)
        .await?
        .into_iter()
        .map(|t| TopicReport {
            name: t.name,
            topic_id: topic_id_text(u128::from_be_bytes(t.topic_id)),
            internal: t.is_internal,
            configs: t.configs.into_iter().collect(),
            partitions: partitions_of(&t.partitions),
        })
        .collect())
}

/// The named topics (every one the caller may see, internal ones too, for `None`) from one
/// Metadata request, without their configs (empty): what pages that refresh need, at one
/// request however many topics. A named topic the caller may not describe, or that does not
/// exist, fails with Kafka's error.
pub async fn topics_metadata(
    admin: &Admin,
    names: Option<&[String]>,
) -> Result<Vec<TopicReport>, Error> {
    let metadata = admin.metadata(names).await?;
    let mut out = Vec::new();
    let wanted: Vec<&String> = match names {
        Some(names) => names.iter().collect(),
        None => metadata.topics.keys().collect(),
    };
    for name in wanted {
        let Some(topic) = metadata.topics.get(name) else {
            continue;
        };
        if let Some(error) = Error::kafka(topic.error_code, format!("topic {name}"), None) {
            if names.is_some() {
                return Err(error);
            }
            continue;
        }
        out.push(TopicReport {
            name: topic.name.clone(),
            topic_id: topic_id_text(u128::from_be_bytes(topic.topic_id)),
            internal: topic.is_internal,
            configs: BTreeMap::new(),
            partitions: partitions_of(&topic.partitions),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn partitions_of(partitions: &[crate::client::PartitionMetadata]) -> Vec<PartitionReport> {
    partitions
        .iter()
        .map(|p| PartitionReport {
            partition: p.partition,
            leader: p.leader,
            leader_epoch: p.leader_epoch,
            replicas: p.replicas.clone(),
            isr: p.isr.clone(),
            offline_replicas: p.offline_replicas.clone(),
        })
        .collect()
}

/// One member of the metadata quorum.
#[derive(Debug, Clone, Serialize)]
pub struct QuorumMember {
    pub node_id: i32,
    /// `voter` or `observer` (Kafka's name for a learner or a broker that follows).
    pub role: String,
    /// The last offset of the metadata log known to be on it, -1 when unknown.
    pub log_end_offset: i64,
    /// Entries behind the commit index (None when unknown).
    pub lag: Option<i64>,
    /// Milliseconds since it last fetched (-1 when unknown).
    pub last_fetch_ms_ago: i64,
}

/// `sluice cluster status --output json`'s quorum: DescribeQuorum.
#[derive(Debug, Clone, Serialize)]
pub struct QuorumReport {
    pub leader_id: i32,
    pub term: i32,
    pub commit_index: i64,
    pub members: Vec<QuorumMember>,
}

pub async fn quorum(admin: &Admin) -> Result<QuorumReport, Error> {
    let connection = admin.connection().await?;
    let request = DescribeQuorumRequest::default().with_topics(vec![
        TopicData::default()
            .with_topic_name(TopicName(StrBytes::from_static_str("__cluster_metadata")))
            .with_partitions(vec![PartitionData::default().with_partition_index(0)]),
    ]);
    let answer = connection.send_at_most(&request, 2).await?;
    if let Some(error) = Error::kafka(
        answer.error_code,
        "DescribeQuorum",
        answer.error_message.as_deref(),
    ) {
        return Err(error);
    }
    let partition = answer
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or_else(|| Error::Protocol("DescribeQuorum answered no partition".into()))?;
    if let Some(error) = Error::kafka(
        partition.error_code,
        "DescribeQuorum",
        partition.error_message.as_deref(),
    ) {
        return Err(error);
    }
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let members = [
        ("voter", &partition.current_voters),
        ("observer", &partition.observers),
    ]
    .into_iter()
    .flat_map(|(role, members)| {
        members.iter().map(move |m| QuorumMember {
            node_id: m.replica_id.0,
            role: role.to_owned(),
            log_end_offset: m.log_end_offset,
            lag: (m.log_end_offset >= 0)
                .then(|| (partition.high_watermark - m.log_end_offset).max(0)),
            last_fetch_ms_ago: if m.last_fetch_timestamp >= 0 {
                (now_ms - m.last_fetch_timestamp).max(0)
            } else {
                -1
            },
        })
    })
    .collect();
    Ok(QuorumReport {
        leader_id: partition.leader_id.0,
        term: partition.leader_epoch,
        commit_index: partition.high_watermark,
        members,
    })
}

/// A broker of `sluice cluster status --output json`.
#[derive(Debug, Clone, Serialize)]
pub struct BrokerReport {
    pub id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    pub fenced: bool,
    /// Partitions it leads.
    pub leaders: usize,
    /// Bytes of the partition logs in its log dirs (DescribeLogDirs); None when it did not
    /// answer in time or is fenced.
    pub disk_bytes: Option<i64>,
}

/// How long the sizes of the brokers' logs are waited for (a hung broker must not hang a
/// report: its sizes are left out).
const LOG_DIRS_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Replica sizes by broker and partition, from the brokers in `brokers` that answer within
/// `LOG_DIRS_WAIT` (the others are absent).
pub async fn replica_sizes(
    admin: &Admin,
    brokers: &[i32],
    topics: Option<&[String]>,
) -> BTreeMap<i32, BTreeMap<TopicPartition, i64>> {
    let Ok(Ok(answers)) = tokio::time::timeout(
        LOG_DIRS_WAIT,
        admin.describe_log_dirs(Some(brokers), topics),
    )
    .await
    else {
        return BTreeMap::new();
    };
    answers
        .into_iter()
        .filter_map(|broker| {
            let dirs = broker.log_dirs.ok()?;
            let sizes = dirs
                .into_iter()
                .flat_map(|dir| dir.replicas)
                .filter(|replica| !replica.is_future)
                .map(|replica| (replica.topic_partition, replica.size_bytes))
                .collect();
            Some((broker.broker_id, sizes))
        })
        .collect()
}

/// `sluice cluster status --output json`: the cluster, its brokers and its quorum, and what
/// is unwell.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterReport {
    pub cluster_id: String,
    pub controller_id: i32,
    pub brokers: Vec<BrokerReport>,
    pub quorum: QuorumReport,
    pub topics: usize,
    pub partitions: usize,
    pub under_replicated_partitions: usize,
    pub offline_partitions: usize,
    /// `healthy` or `degraded`.
    pub status: String,
    /// Why degraded, one sentence each.
    pub problems: Vec<String>,
}

pub async fn cluster(admin: &Admin) -> Result<ClusterReport, Error> {
    let description = admin.describe_cluster().await?;
    let quorum = quorum(admin).await?;
    let topics = topics_metadata(admin, None).await?;
    let mut leaders: BTreeMap<i32, usize> = BTreeMap::new();
    let (mut partitions, mut under_replicated, mut offline) = (0, 0, 0);
    for partition in topics.iter().flat_map(|t| t.partitions.iter()) {
        partitions += 1;
        if partition.leader < 0 {
            offline += 1;
        } else {
            *leaders.entry(partition.leader).or_default() += 1;
        }
        if partition.isr.len() < partition.replicas.len() {
            under_replicated += 1;
        }
    }
    let unfenced: Vec<i32> = description
        .brokers
        .iter()
        .filter(|(_, fenced)| !fenced)
        .map(|(info, _)| info.node_id)
        .collect();
    let sizes = replica_sizes(admin, &unfenced, None).await;
    let brokers: Vec<BrokerReport> = description
        .brokers
        .iter()
        .map(|(info, fenced)| BrokerReport {
            id: info.node_id,
            host: info.host.clone(),
            port: info.port,
            rack: info.rack.clone(),
            fenced: *fenced,
            leaders: leaders.get(&info.node_id).copied().unwrap_or(0),
            disk_bytes: sizes.get(&info.node_id).map(|s| s.values().sum()),
        })
        .collect();
    let mut problems = Vec::new();
    let fenced: Vec<String> = brokers
        .iter()
        .filter(|b| b.fenced)
        .map(|b| b.id.to_string())
        .collect();
    if !fenced.is_empty() {
        problems.push(format!(
            "broker(s) {} fenced: not answering the controller",
            fenced.join(", ")
        ));
    }
    if offline > 0 {
        problems.push(format!("{offline} partition(s) offline: no leader"));
    }
    if under_replicated > 0 {
        problems.push(format!(
            "{under_replicated} partition(s) under-replicated: a replica is out of the ISR"
        ));
    }
    if quorum.leader_id < 0 {
        problems.push("the metadata quorum has no leader".to_owned());
    }
    let lagging: Vec<String> = quorum
        .members
        .iter()
        .filter(|m| m.role == "voter" && m.lag.is_none_or(|lag| lag > 1000))
        .map(|m| m.node_id.to_string())
        .collect();
    if !lagging.is_empty() {
        problems.push(format!(
            "quorum voter(s) {} behind the metadata log",
            lagging.join(", ")
        ));
    }
    Ok(ClusterReport {
        cluster_id: description.cluster_id,
        controller_id: description.controller_id,
        brokers,
        quorum,
        topics: topics.iter().filter(|t| !t.internal).count(),
        partitions,
        under_replicated_partitions: under_replicated,
        offline_partitions: offline,
        status: if problems.is_empty() {
            "healthy"
        } else {
            "degraded"
        }
        .to_owned(),
        problems,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_members_assignment_prints_as_topic_partition_pairs_in_json() {
        let member = Member {
            member_id: "m".into(),
            group_instance_id: None,
            client_id: "c".into(),
            host: "/127.0.0.1".into(),
            assignment: vec![TopicPartition::new("t", 0), TopicPartition::new("u", 2)],
        };
        let value = serde_json::to_value(&member).expect("serializes");
        assert_eq!(value["assignment"], serde_json::json!([["t", 0], ["u", 2]]));
    }
}
