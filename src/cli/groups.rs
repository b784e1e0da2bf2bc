//! `sluice groups`: consumer group administration through any broker's Kafka port, with the
//! APIs Kafka's `kafka-consumer-groups.sh` uses (so it works against Kafka too): `list`,
//! `describe` (members, assignment, committed offset, log end offset and lag per partition),
//! `reset-offsets` (a dry run unless `--execute`; refused while the group has members) and
//! `delete`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse,
    ConsumerProtocolAssignment, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    ListGroupsRequest, ListGroupsResponse, ListOffsetsRequest, ListOffsetsResponse,
    MetadataRequest, MetadataResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use serde::Serialize;
use sluice::client::Connection;
use sluice::protocol::errors;

const TIMEOUT: Duration = Duration::from_secs(30);
/// ListOffsets' special timestamps.
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;

#[derive(Subcommand)]
pub enum GroupsCommand {
    /// Every consumer group of the cluster, with its state.
    List {
        #[command(flatten)]
        common: Common,
    },
    /// A group's members and, per partition, the committed offset, log end offset and lag.
    Describe {
        group: String,
        #[command(flatten)]
        common: Common,
    },
    /// Moves a group's committed offsets for a topic. A dry run unless --execute; refused
    /// while the group has members (stop its consumers first), as Kafka does.
    ResetOffsets {
        group: String,
        #[arg(long)]
        topic: String,
        #[command(flatten)]
        target: ResetTarget,
        /// Commit the new offsets (without it, only shows them).
        #[arg(long)]
        execute: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Deletes a group that has no members, with its committed offsets.
    Delete {
        group: String,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(Args)]
pub struct Common {
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap_server: String,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    output: Format,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
}

#[derive(Args)]
#[group(required = true, multiple = false)]
pub struct ResetTarget {
    /// The first offset still in the log.
    #[arg(long)]
    to_earliest: bool,
    /// The log end offset (the high watermark).
    #[arg(long)]
    to_latest: bool,
    /// This offset (kept within the log's earliest and latest).
    #[arg(long)]
    to_offset: Option<i64>,
    /// The first offset at or after this time: 2026-12-01T10:00:00, with an optional
    /// fraction and Z or +hh:mm (UTC when none), or milliseconds since the epoch.
    #[arg(long)]
    to_datetime: Option<String>,
    /// The committed offset moved by N (negative: back), kept within the log.
    #[arg(long, allow_negative_numbers = true)]
    shift_by: Option<i64>,
}

pub fn run(command: GroupsCommand) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        match command {
            GroupsCommand::List { common } => list(&common).await,
            GroupsCommand::Describe { group, common } => describe(&common, &group).await,
            GroupsCommand::ResetOffsets {
                group,
                topic,
                target,
                execute,
                common,
            } => reset_offsets(&common, &group, &topic, &target, execute).await,
            GroupsCommand::Delete { group, common } => delete(&common, &group).await,
        }
    })
}

fn name(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

/// Fails with Kafka's error name, the broker's message and what was being done.
fn check(code: i16, message: Option<&StrBytes>, doing: &str) -> anyhow::Result<()> {
    if code == errors::NONE {
        return Ok(());
    }
    match message.map(|m| m.as_str()).filter(|m| !m.is_empty()) {
        Some(message) => bail!("{doing}: {}: {message}", errors::name(code)),
        None => bail!("{doing}: {}", errors::name(code)),
    }
}

/// Connections to the cluster's brokers, opened as needed.
struct Cluster {
    bootstrap: String,
    brokers: BTreeMap<i32, String>,
    connections: BTreeMap<String, Connection>,
}

impl Cluster {
    async fn connect(bootstrap: &str) -> anyhow::Result<Cluster> {
        let mut cluster = Cluster {
            bootstrap: bootstrap.to_owned(),
            brokers: BTreeMap::new(),
            connections: BTreeMap::new(),
        };
        let metadata = cluster.metadata(Some(Vec::new())).await?;
        cluster.brokers = metadata
            .brokers
            .iter()
            .map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port)))
            .collect();
        Ok(cluster)
    }

    async fn connection(&mut self, addr: &str) -> anyhow::Result<&mut Connection> {
        if !self.connections.contains_key(addr) {
            let connection = Connection::connect(addr, TIMEOUT).await?;
            self.connections.insert(addr.to_owned(), connection);
        }
        self.connections
            .get_mut(addr)
            .context("connection just opened")
    }

    /// Metadata for `topics` (None: all).
    async fn metadata(&mut self, topics: Option<Vec<String>>) -> anyhow::Result<MetadataResponse> {
        let request = MetadataRequest::default().with_topics(topics.map(|topics| {
            topics
                .into_iter()
                .map(|t| MetadataRequestTopic::default().with_name(Some(TopicName(name(&t)))))
                .collect()
        }));
        let bootstrap = self.bootstrap.clone();
        self.connection(&bootstrap)
            .await?
            .call(ApiKey::Metadata, 9, &request)
            .await
            .context("Metadata")
    }

    /// The address of `group`'s coordinator.
    async fn coordinator(&mut self, group: &str) -> anyhow::Result<String> {
        let request = FindCoordinatorRequest::default()
            .with_key(name(group))
            .with_key_type(0);
        let bootstrap = self.bootstrap.clone();
        // The coordinator may be loading (or __consumer_offsets being created): retry a while.
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        loop {
            let response: FindCoordinatorResponse = self
                .connection(&bootstrap)
                .await?
                .call(ApiKey::FindCoordinator, 3, &request)
                .await
                .context("FindCoordinator")?;
            if response.error_code == errors::COORDINATOR_NOT_AVAILABLE
                && tokio::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            check(
                response.error_code,
                response.error_message.as_ref(),
                &format!("finding the coordinator of group {group}"),
            )?;
            return Ok(format!("{}:{}", response.host, response.port));
        }
    }

    /// DescribeGroups of one group at its coordinator, retried while it loads.
    async fn describe(&mut self, group: &str) -> anyhow::Result<Described> {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        loop {
            let coordinator = self.coordinator(group).await?;
            let request = DescribeGroupsRequest::default().with_groups(vec![GroupId(name(group))]);
            let response: DescribeGroupsResponse = self
                .connection(&coordinator)
                .await?
                .call(ApiKey::DescribeGroups, 5, &request)
                .await
                .context("DescribeGroups")?;
            let described = response
                .groups
                .into_iter()
                .next()
                .context("DescribeGroups answered no group")?;
            if matches!(
                described.error_code,
                errors::COORDINATOR_LOAD_IN_PROGRESS | errors::NOT_COORDINATOR
            ) && tokio::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            if described.error_code == errors::GROUP_ID_NOT_FOUND {
                // Not a classic group: a KIP-848 consumer group describes itself elsewhere.
                if let Some(consumer) = self.describe_consumer_group(&coordinator, group).await? {
                    return Ok(consumer);
                }
            }
            check(
                described.error_code,
                None,
                &format!("describing group {group}"),
            )?;
            let members = described
                .members
                .into_iter()
                .map(|m| Member {
                    member_id: m.member_id.to_string(),
                    group_instance_id: m.group_instance_id.map(|i| i.to_string()),
                    client_id: m.client_id.to_string(),
                    host: m.client_host.to_string(),
                    assignment: decode_assignment(&m.member_assignment),
                })
                .collect();
            return Ok(Described {
                coordinator,
                state: described.group_state.to_string(),
                protocol_type: described.protocol_type.to_string(),
                protocol: described.protocol_data.to_string(),
                members,
            });
        }
    }

    /// ConsumerGroupDescribe of a KIP-848 group; `None` when it is not one.
    async fn describe_consumer_group(
        &mut self,
        coordinator: &str,
        group: &str,
    ) -> anyhow::Result<Option<Described>> {
        let request =
            ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(name(group))]);
        let response: ConsumerGroupDescribeResponse = self
            .connection(coordinator)
            .await?
            .call(ApiKey::ConsumerGroupDescribe, 0, &request)
            .await
            .context("ConsumerGroupDescribe")?;
        let Some(described) = response.groups.into_iter().next() else {
            return Ok(None);
        };
        if described.error_code == errors::GROUP_ID_NOT_FOUND {
            return Ok(None);
        }
        check(
            described.error_code,
            described.error_message.as_ref(),
            &format!("describing group {group}"),
        )?;
        let members = described
            .members
            .into_iter()
            .map(|m| Member {
                member_id: m.member_id.to_string(),
                group_instance_id: m.instance_id.map(|i| i.to_string()),
                client_id: m.client_id.to_string(),
                host: m.client_host.to_string(),
                assignment: m
                    .assignment
                    .topic_partitions
                    .into_iter()
                    .flat_map(|tp| {
                        let topic = tp.topic_name.to_string();
                        tp.partitions.into_iter().map(move |p| (topic.clone(), p))
                    })
                    .collect(),
            })
            .collect();
        Ok(Some(Described {
            coordinator: coordinator.to_owned(),
            state: described.group_state.to_string(),
            protocol_type: "consumer".into(),
            protocol: format!("{} (KIP-848)", described.assignor_name.as_str()),
            members,
        }))
    }

    /// The committed offsets of `group` (every partition that has one).
    async fn committed(
        &mut self,
        coordinator: &str,
        group: &str,
    ) -> anyhow::Result<BTreeMap<(String, i32), i64>> {
        let request = OffsetFetchRequest::default()
            .with_group_id(GroupId(name(group)))
            .with_topics(None);
        let response: OffsetFetchResponse = self
            .connection(coordinator)
            .await?
            .call(ApiKey::OffsetFetch, 7, &request)
            .await
            .context("OffsetFetch")?;
        check(
            response.error_code,
            None,
            &format!("fetching the offsets of group {group}"),
        )?;
        let mut offsets = BTreeMap::new();
        for topic in response.topics {
            for partition in topic.partitions {
                check(
                    partition.error_code,
                    None,
                    &format!("offset of {}-{}", topic.name.0, partition.partition_index),
                )?;
                if partition.committed_offset >= 0 {
                    offsets.insert(
                        (topic.name.to_string(), partition.partition_index),
                        partition.committed_offset,
                    );
                }
            }
        }
        Ok(offsets)
    }

    /// ListOffsets at `timestamp` (LATEST, EARLIEST or a time) for each partition, from its
    /// leader; `None` where no offset answers (a time after every record).
    async fn offsets_at(
        &mut self,
        partitions: &BTreeSet<(String, i32)>,
        timestamp: i64,
    ) -> anyhow::Result<BTreeMap<(String, i32), Option<i64>>> {
        let topics: BTreeSet<String> = partitions.iter().map(|(t, _)| t.clone()).collect();
        let metadata = self.metadata(Some(topics.into_iter().collect())).await?;
        let mut by_leader: BTreeMap<i32, Vec<(String, i32)>> = BTreeMap::new();
        for topic in &metadata.topics {
            let topic_name = topic
                .name
                .as_ref()
                .map(|n| n.to_string())
                .unwrap_or_default();
            check(topic.error_code, None, &format!("topic {topic_name}"))?;
            for partition in &topic.partitions {
                let key = (topic_name.clone(), partition.partition_index);
                if partitions.contains(&key) {
                    by_leader
                        .entry(partition.leader_id.0)
                        .or_default()
                        .push(key);
                }
            }
        }
        let mut answers = BTreeMap::new();
        for (leader, keys) in by_leader {
            let addr = self
                .brokers
                .get(&leader)
                .cloned()
                .with_context(|| format!("partition leader {leader} is not available"))?;
            let mut topics: BTreeMap<String, Vec<i32>> = BTreeMap::new();
            for (topic, partition) in keys {
                topics.entry(topic).or_default().push(partition);
            }
            let request = ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(topic, partitions)| {
                            ListOffsetsTopic::default()
                                .with_name(TopicName(name(&topic)))
                                .with_partitions(
                                    partitions
                                        .into_iter()
                                        .map(|p| {
                                            ListOffsetsPartition::default()
                                                .with_partition_index(p)
                                                .with_timestamp(timestamp)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                );
            let response: ListOffsetsResponse = self
                .connection(&addr)
                .await?
                .call(ApiKey::ListOffsets, 5, &request)
                .await
                .context("ListOffsets")?;
            for topic in response.topics {
                for p in topic.partitions {
                    check(
                        p.error_code,
                        None,
                        &format!("offsets of {}-{}", topic.name.0, p.partition_index),
                    )?;
                    answers.insert(
                        (topic.name.to_string(), p.partition_index),
                        (p.offset >= 0).then_some(p.offset),
                    );
                }
            }
        }
        Ok(answers)
    }
}

struct Described {
    coordinator: String,
    state: String,
    protocol_type: String,
    protocol: String,
    members: Vec<Member>,
}

#[derive(Serialize)]
struct Member {
    member_id: String,
    group_instance_id: Option<String>,
    client_id: String,
    host: String,
    assignment: Vec<(String, i32)>,
}

/// A consumer-protocol assignment's partitions (empty for other protocols or none).
fn decode_assignment(bytes: &[u8]) -> Vec<(String, i32)> {
    if bytes.len() < 2 {
        return Vec::new();
    }
    let version = i16::from_be_bytes([bytes[0], bytes[1]]);
    let mut buf = bytes::Bytes::copy_from_slice(&bytes[2..]);
    match ConsumerProtocolAssignment::decode(&mut buf, version.clamp(0, 3)) {
        Ok(assignment) => assignment
            .assigned_partitions
            .into_iter()
            .flat_map(|tp| {
                let topic = tp.topic.to_string();
                tp.partitions.into_iter().map(move |p| (topic.clone(), p))
            })
            .collect(),
        Err(_) => Vec::new(),
    }
}

async fn list(common: &Common) -> anyhow::Result<()> {
    let mut cluster = Cluster::connect(&common.bootstrap_server).await?;
    let mut groups = BTreeMap::new();
    let brokers: Vec<(i32, String)> = cluster.brokers.clone().into_iter().collect();
    for (id, addr) in brokers {
        let response: ListGroupsResponse = cluster
            .connection(&addr)
            .await?
            .call(ApiKey::ListGroups, 4, &ListGroupsRequest::default())
            .await
            .with_context(|| format!("ListGroups from broker {id}"))?;
        check(
            response.error_code,
            None,
            &format!("listing the groups of broker {id}"),
        )?;
        for group in response.groups {
            groups.insert(
                group.group_id.to_string(),
                (
                    group.group_state.to_string(),
                    group.protocol_type.to_string(),
                ),
            );
        }
    }
    #[derive(Serialize)]
    struct Listed {
        group: String,
        state: String,
        protocol_type: String,
    }
    let listed: Vec<Listed> = groups
        .into_iter()
        .map(|(group, (state, protocol_type))| Listed {
            group,
            state,
            protocol_type,
        })
        .collect();
    if common.output == Format::Json {
        println!("{}", serde_json::to_string_pretty(&listed)?);
        return Ok(());
    }
    let width = listed
        .iter()
        .map(|l| l.group.len())
        .max()
        .unwrap_or(5)
        .max(5);
    println!("{:<width$}  {:<20}  PROTOCOL-TYPE", "GROUP", "STATE");
    for l in &listed {
        println!("{:<width$}  {:<20}  {}", l.group, l.state, l.protocol_type);
    }
    Ok(())
}

#[derive(Serialize)]
struct PartitionLag {
    topic: String,
    partition: i32,
    committed_offset: Option<i64>,
    log_end_offset: Option<i64>,
    lag: Option<i64>,
    member_id: Option<String>,
    client_id: Option<String>,
    host: Option<String>,
}

async fn describe(common: &Common, group: &str) -> anyhow::Result<()> {
    let mut cluster = Cluster::connect(&common.bootstrap_server).await?;
    let described = cluster.describe(group).await?;
    if described.state == "Dead" {
        bail!("group {group}: GROUP_ID_NOT_FOUND: no such group");
    }
    let committed = cluster.committed(&described.coordinator, group).await?;
    let mut owner: BTreeMap<(String, i32), &Member> = BTreeMap::new();
    for member in &described.members {
        for key in &member.assignment {
            owner.insert(key.clone(), member);
        }
    }
    let partitions: BTreeSet<(String, i32)> =
        committed.keys().chain(owner.keys()).cloned().collect();
    let ends = cluster.offsets_at(&partitions, LATEST).await?;
    let rows: Vec<PartitionLag> = partitions
        .iter()
        .map(|key| {
            let committed_offset = committed.get(key).copied();
            let log_end_offset = ends.get(key).copied().flatten();
            let member = owner.get(key);
            PartitionLag {
                topic: key.0.clone(),
                partition: key.1,
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
    let total_lag: i64 = rows.iter().filter_map(|r| r.lag).sum();
    if common.output == Format::Json {
        #[derive(Serialize)]
        struct Description<'a> {
            group: &'a str,
            coordinator: &'a str,
            state: &'a str,
            protocol_type: &'a str,
            protocol: &'a str,
            members: &'a [Member],
            partitions: &'a [PartitionLag],
            total_lag: i64,
        }
        let description = Description {
            group,
            coordinator: &described.coordinator,
            state: &described.state,
            protocol_type: &described.protocol_type,
            protocol: &described.protocol,
            members: &described.members,
            partitions: &rows,
            total_lag,
        };
        println!("{}", serde_json::to_string_pretty(&description)?);
        return Ok(());
    }
    println!(
        "group {group}: {} ({} members), coordinator {}, protocol {} {}",
        described.state,
        described.members.len(),
        described.coordinator,
        described.protocol_type,
        described.protocol
    );
    let show = |v: Option<i64>| v.map_or("-".to_owned(), |v| v.to_string());
    let topic_width = rows.iter().map(|r| r.topic.len()).max().unwrap_or(5).max(5);
    println!(
        "\n{:<topic_width$}  {:>9}  {:>14}  {:>14}  {:>8}  {:<40}  {:<16}  CLIENT-ID",
        "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST"
    );
    for r in &rows {
        println!(
            "{:<topic_width$}  {:>9}  {:>14}  {:>14}  {:>8}  {:<40}  {:<16}  {}",
            r.topic,
            r.partition,
            show(r.committed_offset),
            show(r.log_end_offset),
            show(r.lag),
            r.member_id.as_deref().unwrap_or("-"),
            r.host.as_deref().unwrap_or("-"),
            r.client_id.as_deref().unwrap_or("-"),
        );
    }
    println!("\ntotal_lag {total_lag}");
    Ok(())
}

async fn reset_offsets(
    common: &Common,
    group: &str,
    topic: &str,
    target: &ResetTarget,
    execute: bool,
) -> anyhow::Result<()> {
    let mut cluster = Cluster::connect(&common.bootstrap_server).await?;
    let described = cluster.describe(group).await?;
    if !described.members.is_empty() {
        bail!(
            "group {group} has {} active members (state {}): offsets can only be reset while \
             it has none; stop its consumers first",
            described.members.len(),
            described.state
        );
    }
    let metadata = cluster.metadata(Some(vec![topic.to_owned()])).await?;
    let found = metadata
        .topics
        .first()
        .context("Metadata answered no topic")?;
    check(found.error_code, None, &format!("topic {topic}"))?;
    let partitions: BTreeSet<(String, i32)> = found
        .partitions
        .iter()
        .map(|p| (topic.to_owned(), p.partition_index))
        .collect();
    let earliest = cluster.offsets_at(&partitions, EARLIEST).await?;
    let latest = cluster.offsets_at(&partitions, LATEST).await?;
    let committed = cluster.committed(&described.coordinator, group).await?;
    let at_time = match &target.to_datetime {
        Some(text) => {
            let millis = parse_datetime_ms(text).with_context(|| {
                format!(
                    "--to-datetime {text}: expected 2026-12-01T10:00:00[.sss][Z|+hh:mm] or \
                     milliseconds"
                )
            })?;
            Some(cluster.offsets_at(&partitions, millis).await?)
        }
        None => None,
    };
    let mut plan = Vec::new();
    for key in &partitions {
        let low = earliest.get(key).copied().flatten().unwrap_or(0);
        let high = latest.get(key).copied().flatten().unwrap_or(low);
        let clamp = |offset: i64| offset.clamp(low, high);
        let new_offset = if target.to_earliest {
            low
        } else if target.to_latest {
            high
        } else if let Some(offset) = target.to_offset {
            clamp(offset)
        } else if let Some(shift) = target.shift_by {
            clamp(
                committed
                    .get(key)
                    .copied()
                    .unwrap_or(low)
                    .saturating_add(shift),
            )
        } else if let Some(at_time) = &at_time {
            // No record at or after the time: the end, as Kafka's tool does.
            at_time.get(key).copied().flatten().unwrap_or(high)
        } else {
            bail!("no reset target given");
        };
        plan.push((key.clone(), committed.get(key).copied(), new_offset));
    }
    let mut errors_by_partition = BTreeMap::new();
    if execute {
        let request = OffsetCommitRequest::default()
            .with_group_id(GroupId(name(group)))
            .with_generation_id_or_member_epoch(-1)
            .with_member_id(name(""))
            .with_topics(vec![
                OffsetCommitRequestTopic::default()
                    .with_name(TopicName(name(topic)))
                    .with_partitions(
                        plan.iter()
                            .map(|((_, p), _, offset)| {
                                OffsetCommitRequestPartition::default()
                                    .with_partition_index(*p)
                                    .with_committed_offset(*offset)
                                    .with_committed_leader_epoch(-1)
                            })
                            .collect(),
                    ),
            ]);
        let response: OffsetCommitResponse = cluster
            .connection(&described.coordinator)
            .await?
            .call(ApiKey::OffsetCommit, 8, &request)
            .await
            .context("OffsetCommit")?;
        for t in response.topics {
            for p in t.partitions {
                errors_by_partition.insert(p.partition_index, p.error_code);
            }
        }
    }
    #[derive(Serialize)]
    struct Reset {
        topic: String,
        partition: i32,
        committed_offset: Option<i64>,
        new_offset: i64,
        error: Option<String>,
    }
    let rows: Vec<Reset> = plan
        .into_iter()
        .map(|((topic, partition), committed_offset, new_offset)| Reset {
            error: errors_by_partition
                .get(&partition)
                .filter(|code| **code != errors::NONE)
                .map(|code| errors::name(*code).into_owned()),
            topic,
            partition,
            committed_offset,
            new_offset,
        })
        .collect();
    let failed = rows.iter().filter(|r| r.error.is_some()).count();
    if common.output == Format::Json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!(
            "{:<20}  {:>9}  {:>14}  {:>10}",
            "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"
        );
        for r in &rows {
            println!(
                "{:<20}  {:>9}  {:>14}  {:>10}{}",
                r.topic,
                r.partition,
                r.committed_offset.map_or("-".to_owned(), |o| o.to_string()),
                r.new_offset,
                r.error
                    .as_deref()
                    .map(|e| format!("  {e}"))
                    .unwrap_or_default()
            );
        }
        if !execute {
            println!("\ndry run: nothing committed (add --execute to commit these offsets)");
        }
    }
    if failed > 0 {
        bail!("{failed} partitions were not reset");
    }
    Ok(())
}

async fn delete(common: &Common, group: &str) -> anyhow::Result<()> {
    let mut cluster = Cluster::connect(&common.bootstrap_server).await?;
    let coordinator = cluster.coordinator(group).await?;
    let request = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(name(group))]);
    let response: DeleteGroupsResponse = cluster
        .connection(&coordinator)
        .await?
        .call(ApiKey::DeleteGroups, 2, &request)
        .await
        .context("DeleteGroups")?;
    let result = response
        .results
        .first()
        .context("DeleteGroups answered no group")?;
    if result.error_code == errors::NON_EMPTY_GROUP {
        bail!(
            "deleting group {group}: NON_EMPTY_GROUP: the group has active members; stop its consumers first"
        );
    }
    check(result.error_code, None, &format!("deleting group {group}"))?;
    if common.output == Format::Json {
        println!("{}", serde_json::json!({ "group": group, "deleted": true }));
    } else {
        println!("deleted group {group}");
    }
    Ok(())
}

/// `2026-12-01T10:00:00[.sss][Z|±hh:mm]` (UTC without a zone) or milliseconds since the epoch.
fn parse_datetime_ms(text: &str) -> Option<i64> {
    let text = text.trim();
    if let Ok(millis) = text.parse::<i64>() {
        return Some(millis);
    }
    let (date, rest) = text.split_once(['T', ' '])?;
    let mut date_parts = date.split('-');
    let year: i64 = date_parts.next()?.parse().ok()?;
    let month: i64 = date_parts.next()?.parse().ok()?;
    let day: i64 = date_parts.next()?.parse().ok()?;
    if date_parts.next().is_some() || !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    // Split off the zone: Z, +hh:mm or -hh:mm.
    let (time, offset_minutes) = if let Some(time) = rest.strip_suffix(['Z', 'z']) {
        (time, 0)
    } else if let Some(at) = rest.rfind(['+', '-']) {
        let (time, zone) = rest.split_at(at);
        let sign = if zone.starts_with('-') { -1 } else { 1 };
        let (h, m) = zone[1..].split_once(':').unwrap_or((&zone[1..], "0"));
        (
            time,
            sign * (h.parse::<i64>().ok()? * 60 + m.parse::<i64>().ok()?),
        )
    } else {
        (rest, 0)
    };
    let (clock, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut clock_parts = clock.split(':');
    let hour: i64 = clock_parts.next()?.parse().ok()?;
    let minute: i64 = clock_parts.next().unwrap_or("0").parse().ok()?;
    let second: i64 = clock_parts.next().unwrap_or("0").parse().ok()?;
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let millis: i64 = if fraction.is_empty() {
        0
    } else {
        let digits: String = fraction.chars().chain("000".chars()).take(3).collect();
        digits.parse().ok()?
    };
    let days = days_from_civil(year, month, day);
    Some(
        ((days * 86_400 + hour * 3_600 + minute * 60 + second) - offset_minutes * 60) * 1_000
            + millis,
    )
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetimes_parse_as_kafkas_tool_takes_them() {
        assert_eq!(parse_datetime_ms("1970-01-01T00:00:00"), Some(0));
        assert_eq!(parse_datetime_ms("1700000000000"), Some(1_700_000_000_000));
        // 2023-11-14T22:13:20Z is 1_700_000_000 s.
        assert_eq!(
            parse_datetime_ms("2023-11-14T22:13:20Z"),
            Some(1_700_000_000_000)
        );
        assert_eq!(
            parse_datetime_ms("2023-11-14T23:13:20.5+01:00"),
            Some(1_700_000_000_500)
        );
        assert_eq!(
            parse_datetime_ms("2024-02-29T00:00:00.123"),
            Some(1_709_164_800_123)
        );
        assert_eq!(parse_datetime_ms("2024-13-01T00:00:00"), None);
        assert_eq!(parse_datetime_ms("yesterday"), None);
    }
}
