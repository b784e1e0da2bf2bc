//! `sluice topics`: topic administration through any broker's Kafka port, with the SDK's
//! [`Admin`] (the same APIs as Kafka's `kafka-topics`): create, list, describe, alter, delete,
//! and `reassign`, which moves a partition's replicas and shows progress.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Subcommand;
use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, BrokerId, ListPartitionReassignmentsRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use serde_json::json;
use sluice::client::{Admin, AlterConfigOp, ElectionType, Error, NewTopic, RESOURCE_TOPIC};
use sluice::protocol::errors;
use sluice::protocol::topic_partition::topic_id_text;

use super::common::{Connect, Format, TopicArg, block_on, parse_key_value, print_table};

#[derive(Subcommand)]
pub enum TopicsCommand {
    /// Creates a topic. Partitions and replication factor default to the cluster's
    /// num.partitions and default.replication.factor.
    #[command(override_usage = "sluice topics create [OPTIONS] <TOPIC | --topic TOPIC>")]
    Create {
        #[command(flatten)]
        topic: TopicArg,
        #[arg(long)]
        partitions: Option<i32>,
        #[arg(long)]
        replication_factor: Option<i16>,
        /// A topic config, key=value (repeatable): --config cleanup.policy=compact
        #[arg(long = "config", value_parser = parse_key_value)]
        configs: Vec<(String, String)>,
        /// Explicit replicas, partitions separated by commas and replicas by colons, the first
        /// preferred as leader: --replica-assignment 1:2,2:3,3:1
        #[arg(long, conflicts_with_all = ["partitions", "replication_factor"])]
        replica_assignment: Option<String>,
        /// Succeeds when the topic already exists.
        #[arg(long)]
        if_not_exists: bool,
        /// Checks the request without creating anything.
        #[arg(long)]
        validate_only: bool,
        #[command(flatten)]
        connect: Connect,
    },
    /// Lists the topics.
    List {
        /// Also internal topics (__consumer_offsets).
        #[arg(long)]
        include_internal: bool,
        #[command(flatten)]
        connect: Connect,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        output: Format,
    },
    /// Partitions (leader, replicas, in-sync replicas) and the configs set on topics; every
    /// topic when none is named.
    Describe {
        /// Topics to describe (or --topic T, repeatable, as kafka-topics.sh takes it).
        topics: Vec<String>,
        /// The same, as Kafka's tools name it.
        #[arg(
            long = "topic",
            id = "topic_flags",
            value_name = "TOPIC",
            hide_short_help = true
        )]
        topic_flags: Vec<String>,
        /// Only partitions whose in-sync replicas are fewer than their replicas.
        #[arg(long)]
        under_replicated_partitions: bool,
        /// Only partitions with no live leader.
        #[arg(long)]
        unavailable_partitions: bool,
        #[command(flatten)]
        connect: Connect,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        output: Format,
    },
    /// Adds partitions and changes the topic's configs.
    #[command(override_usage = "sluice topics alter [OPTIONS] <TOPIC | --topic TOPIC>")]
    Alter {
        #[command(flatten)]
        topic: TopicArg,
        /// The new total partition count (partitions are never removed).
        #[arg(long)]
        partitions: Option<i32>,
        /// Sets a topic config, key=value (repeatable).
        #[arg(long = "config", value_parser = parse_key_value)]
        configs: Vec<(String, String)>,
        /// Returns a topic config to its default (repeatable).
        #[arg(long = "delete-config")]
        delete_configs: Vec<String>,
        #[command(flatten)]
        connect: Connect,
    },
    /// Deletes topics and their data.
    #[command(override_usage = "sluice topics delete [OPTIONS] <TOPIC... | --topic TOPIC...>")]
    Delete {
        /// Topics to delete (or --topic T, repeatable, as kafka-topics.sh takes it).
        #[arg(required_unless_present = "topic_flags")]
        topics: Vec<String>,
        /// The same, as Kafka's tools name it.
        #[arg(
            long = "topic",
            id = "topic_flags",
            value_name = "TOPIC",
            hide_short_help = true
        )]
        topic_flags: Vec<String>,
        /// Succeeds when a topic does not exist.
        #[arg(long)]
        if_exists: bool,
        #[command(flatten)]
        connect: Connect,
    },
    /// Elects leaders as kafka-leader-election.sh does: the preferred replica (the first
    /// listed) where it is alive and in sync, or with `unclean` any live replica of a
    /// partition whose in-sync replicas are all gone (records may be lost).
    #[command(after_help = "Examples:
  sluice topics elect-leaders --election-type preferred --all-topic-partitions
  sluice topics elect-leaders --election-type preferred --topic orders --partition 0
  sluice topics elect-leaders --election-type unclean --path-to-json-file partitions.json
      (the file: {\"partitions\": [{\"topic\": \"orders\", \"partition\": 0}]})")]
    ElectLeaders {
        #[arg(long, value_enum, ignore_case = true)]
        election_type: ElectionKind,
        /// The topic whose partitions to elect for (every partition, or --partition).
        #[arg(long, conflicts_with_all = ["all_topic_partitions", "path_to_json_file"])]
        topic: Option<String>,
        /// One partition of --topic.
        #[arg(long, requires = "topic")]
        partition: Option<i32>,
        /// Every partition of every topic.
        #[arg(long, conflicts_with = "path_to_json_file")]
        all_topic_partitions: bool,
        /// A JSON file naming the partitions, as Kafka's tool reads it.
        #[arg(long)]
        path_to_json_file: Option<std::path::PathBuf>,
        #[command(flatten)]
        connect: Connect,
    },
    /// Moves a partition to new replicas (AlterPartitionReassignments) and follows the move
    /// until it completes: the new replicas join, catch up, enter the ISR; the others leave.
    Reassign {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        partition: i32,
        /// The target replicas, the first preferred as leader: e.g. 2,3,4.
        #[arg(long, value_delimiter = ',', required_unless_present = "cancel")]
        replicas: Vec<i32>,
        /// Cancels the partition's ongoing move instead (back to its original replicas).
        #[arg(long)]
        cancel: bool,
        /// How long to follow the move before returning (it goes on regardless).
        #[arg(long, default_value_t = 300)]
        wait_seconds: u64,
        #[command(flatten)]
        connect: Connect,
    },
}

pub fn run(command: TopicsCommand) -> anyhow::Result<()> {
    block_on(async move {
        match command {
            TopicsCommand::Create {
                topic,
                partitions,
                replication_factor,
                configs,
                replica_assignment,
                if_not_exists,
                validate_only,
                connect,
            } => {
                let topic = topic.name();
                let mut new = NewTopic::new(
                    &topic,
                    partitions.unwrap_or(-1),
                    replication_factor.unwrap_or(-1),
                );
                new.configs = configs.into_iter().collect();
                if let Some(assignment) = replica_assignment {
                    new.assignments = parse_assignment(&assignment)?;
                }
                let admin = connect.admin().await?;
                match admin.create_topics(&[new], validate_only).await {
                    Err(e) if if_not_exists && e.code() == Some(errors::TOPIC_ALREADY_EXISTS) => {
                        println!("Topic {topic} already exists.");
                    }
                    Err(e) => return Err(e.into()),
                    Ok(()) if validate_only => println!("topic {topic} can be created"),
                    Ok(()) => println!("Created topic {topic}."),
                }
                Ok(())
            }
            TopicsCommand::List {
                include_internal,
                connect,
                output,
            } => {
                let topics = connect.admin().await?.list_topics(include_internal).await?;
                match output {
                    Format::Json => println!("{}", json!(topics)),
                    Format::Text => topics.iter().for_each(|t| println!("{t}")),
                }
                Ok(())
            }
            TopicsCommand::Describe {
                mut topics,
                topic_flags,
                under_replicated_partitions,
                unavailable_partitions,
                connect,
                output,
            } => {
                topics.extend(topic_flags);
                let admin = connect.admin().await?;
                let filter = |p: &sluice::client::PartitionMetadata| {
                    (!under_replicated_partitions || p.isr.len() < p.replicas.len())
                        && (!unavailable_partitions || p.leader < 0)
                };
                describe(&admin, topics, &filter, output).await
            }
            TopicsCommand::Alter {
                topic,
                partitions,
                configs,
                delete_configs,
                connect,
            } => {
                let topic = topic.name();
                if partitions.is_none() && configs.is_empty() && delete_configs.is_empty() {
                    bail!("nothing to change: give --partitions, --config or --delete-config");
                }
                let admin = connect.admin().await?;
                if let Some(count) = partitions {
                    admin.create_partitions(&topic, count, None).await?;
                    println!("topic {topic} now has {count} partitions");
                }
                let changes: Vec<(String, AlterConfigOp)> = configs
                    .into_iter()
                    .map(|(k, v)| (k, AlterConfigOp::Set(v)))
                    .chain(
                        delete_configs
                            .into_iter()
                            .map(|k| (k, AlterConfigOp::Delete)),
                    )
                    .collect();
                if !changes.is_empty() {
                    admin
                        .alter_configs(RESOURCE_TOPIC, &topic, &changes, false)
                        .await?;
                    println!("topic {topic}: {} config(s) changed", changes.len());
                }
                Ok(())
            }
            TopicsCommand::Delete {
                mut topics,
                topic_flags,
                if_exists,
                connect,
            } => {
                topics.extend(topic_flags);
                let admin = connect.admin().await?;
                for topic in &topics {
                    match admin.delete_topics(std::slice::from_ref(topic)).await {
                        Err(e)
                            if if_exists
                                && e.code() == Some(errors::UNKNOWN_TOPIC_OR_PARTITION) =>
                        {
                            println!("topic {topic} does not exist");
                        }
                        Err(e) => return Err(e.into()),
                        Ok(()) => println!("deleted topic {topic}"),
                    }
                }
                Ok(())
            }
            TopicsCommand::ElectLeaders {
                election_type,
                topic,
                partition,
                all_topic_partitions,
                path_to_json_file,
                connect,
            } => {
                let admin = connect.admin().await?;
                let partitions = match (topic, path_to_json_file) {
                    (Some(topic), _) => Some(match partition {
                        Some(partition) => vec![(topic, partition)],
                        None => topic_partitions(&admin, &topic).await?,
                    }),
                    (None, Some(path)) => Some(partitions_from_json(&path)?),
                    (None, None) if all_topic_partitions => None,
                    (None, None) => bail!(
                        "which partitions? give --all-topic-partitions, --topic T [--partition P] or --path-to-json-file F"
                    ),
                };
                elect_leaders(&admin, election_type, partitions.as_deref()).await
            }
            TopicsCommand::Reassign {
                topic,
                partition,
                replicas,
                cancel,
                wait_seconds,
                connect,
            } => {
                reassign(
                    &connect.admin().await?,
                    &topic,
                    partition,
                    (!cancel).then_some(replicas),
                    Duration::from_secs(wait_seconds),
                )
                .await
            }
        }
    })
}

/// `--election-type`, as kafka-leader-election.sh spells it (either case).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ElectionKind {
    Preferred,
    Unclean,
}

/// Every partition of `topic`.
async fn topic_partitions(admin: &Admin, topic: &str) -> anyhow::Result<Vec<(String, i32)>> {
    let described = admin.describe_topics(&[topic.to_owned()]).await?;
    Ok(described
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.name.clone(), p.partition)))
        .collect())
}

/// Kafka's `--path-to-json-file`: `{"partitions": [{"topic": "t", "partition": 0}, ...]}`.
fn partitions_from_json(path: &std::path::Path) -> anyhow::Result<Vec<(String, i32)>> {
    #[derive(serde::Deserialize)]
    struct File {
        partitions: Vec<Entry>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        topic: String,
        partition: i32,
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --path-to-json-file {}", path.display()))?;
    let file: File = serde_json::from_str(&text).with_context(|| {
        format!(
            "--path-to-json-file {}: not {{\"partitions\": [{{\"topic\": T, \"partition\": P}}, ...]}}",
            path.display()
        )
    })?;
    if file.partitions.is_empty() {
        bail!("--path-to-json-file {}: no partitions", path.display());
    }
    Ok(file
        .partitions
        .into_iter()
        .map(|e| (e.topic, e.partition))
        .collect())
}

/// Elects and prints the outcome as kafka-leader-election.sh does: the partitions elected,
/// those whose replica already leads, then each failure; fails when any partition failed.
async fn elect_leaders(
    admin: &Admin,
    kind: ElectionKind,
    partitions: Option<&[(String, i32)]>,
) -> anyhow::Result<()> {
    let (election_type, name) = match kind {
        ElectionKind::Preferred => (ElectionType::Preferred, "PREFERRED"),
        ElectionKind::Unclean => (ElectionType::Unclean, "UNCLEAN"),
    };
    let mut results = admin.elect_leaders(election_type, partitions).await?;
    results.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    let named = |code: Option<i16>| -> Vec<String> {
        results
            .iter()
            .filter(|r| code.is_none_or(|c| r.error_code == c))
            .map(|r| format!("{}-{}", r.topic, r.partition))
            .collect()
    };
    let elected = named(Some(errors::NONE));
    if !elected.is_empty() {
        println!(
            "Successfully completed leader election ({name}) for partitions {}",
            elected.join(", ")
        );
    }
    let not_needed = named(Some(errors::ELECTION_NOT_NEEDED));
    if !not_needed.is_empty() {
        println!(
            "Valid replica already elected for partitions {}",
            not_needed.join(", ")
        );
    }
    let failed: Vec<Error> = results
        .iter()
        .filter(|r| r.error_code != errors::NONE && r.error_code != errors::ELECTION_NOT_NEEDED)
        .filter_map(|r| r.error())
        .collect();
    for error in &failed {
        println!("Error completing leader election ({name}) for {error}");
    }
    let count = failed.len();
    match failed.into_iter().next() {
        Some(first) => Err(anyhow::Error::new(first).context(format!(
            "leader election ({name}) failed for {count} partition(s)"
        ))),
        None => Ok(()),
    }
}

/// `1:2,2:3` -> {0: [1, 2], 1: [2, 3]}.
fn parse_assignment(text: &str) -> anyhow::Result<BTreeMap<i32, Vec<i32>>> {
    let mut assignments = BTreeMap::new();
    for (partition, replicas) in text.split(',').enumerate() {
        let replicas = replicas
            .split(':')
            .map(|r| r.trim().parse::<i32>())
            .collect::<Result<Vec<_>, _>>()
            .with_context(|| {
                format!("--replica-assignment {text:?}: partition {partition} is not broker ids separated by ':'")
            })?;
        assignments.insert(partition as i32, replicas);
    }
    Ok(assignments)
}

async fn describe(
    admin: &Admin,
    mut topics: Vec<String>,
    filter: &dyn Fn(&sluice::client::PartitionMetadata) -> bool,
    output: Format,
) -> anyhow::Result<()> {
    if topics.is_empty() {
        topics = admin.list_topics(false).await?;
    }
    if output == Format::Json {
        let mut described = sluice::console::report::topics(admin, &topics).await?;
        for topic in &mut described {
            topic.partitions.retain(|p| {
                filter(&sluice::client::PartitionMetadata {
                    partition: p.partition,
                    error_code: 0,
                    leader: p.leader,
                    leader_epoch: p.leader_epoch,
                    replicas: p.replicas.clone(),
                    isr: p.isr.clone(),
                    offline_replicas: p.offline_replicas.clone(),
                })
            });
        }
        println!("{}", json!(described));
        return Ok(());
    }
    let descriptions = admin.describe_topics(&topics).await?;
    for topic in &descriptions {
        let replication_factor = topic.partitions.first().map_or(0, |p| p.replicas.len());
        let configs: Vec<String> = topic
            .configs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        println!(
            "Topic: {}  TopicId: {}  PartitionCount: {}  ReplicationFactor: {}  Configs: {}",
            topic.name,
            topic_id_text(u128::from_be_bytes(topic.topic_id)),
            topic.partitions.len(),
            replication_factor,
            configs.join(",")
        );
        let rows: Vec<Vec<String>> = topic
            .partitions
            .iter()
            .filter(|p| filter(p))
            .map(|p| {
                vec![
                    p.partition.to_string(),
                    if p.leader < 0 {
                        "none".to_owned()
                    } else {
                        p.leader.to_string()
                    },
                    p.leader_epoch.to_string(),
                    ids(&p.replicas),
                    ids(&p.isr),
                    ids(&p.offline_replicas),
                ]
            })
            .collect();
        print_table(
            &[
                "  partition",
                "leader",
                "epoch",
                "replicas",
                "isr",
                "offline",
            ],
            &rows
                .into_iter()
                .map(|mut r| {
                    r[0] = format!("  {}", r[0]);
                    r
                })
                .collect::<Vec<_>>(),
        );
    }
    Ok(())
}

fn ids(v: &[i32]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    v.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

async fn reassign(
    admin: &Admin,
    topic: &str,
    partition: i32,
    target: Option<Vec<i32>>,
    wait: Duration,
) -> anyhow::Result<()> {
    let connection = admin.connection().await?;
    let name = TopicName(StrBytes::from_string(topic.to_owned()));
    let request = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![
            ReassignableTopic::default()
                .with_name(name.clone())
                .with_partitions(vec![
                    ReassignablePartition::default()
                        .with_partition_index(partition)
                        .with_replicas(
                            target
                                .clone()
                                .map(|t| t.into_iter().map(BrokerId).collect()),
                        ),
                ]),
        ]);
    let response = connection.send(&request).await?;
    if let Some(error) = Error::kafka(
        response.error_code,
        "AlterPartitionReassignments",
        response.error_message.as_deref(),
    ) {
        return Err(error.into());
    }
    for t in &response.responses {
        for p in &t.partitions {
            if let Some(error) = Error::kafka(
                p.error_code,
                format!("partition {}-{}", t.name.0, p.partition_index),
                p.error_message.as_deref(),
            ) {
                return Err(error.into());
            }
        }
    }
    match &target {
        Some(t) => println!("{topic}-{partition}: moving to replicas {t:?}"),
        None => println!("{topic}-{partition}: move cancelled"),
    }
    let started = Instant::now();
    let mut last = String::new();
    loop {
        let list = ListPartitionReassignmentsRequest::default()
            .with_timeout_ms(30_000)
            .with_topics(Some(vec![
                ListPartitionReassignmentsTopics::default()
                    .with_name(name.clone())
                    .with_partition_indexes(vec![partition]),
            ]));
        let ongoing = connection.send(&list).await?;
        let state = ongoing
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == partition);
        let Some(state) = state else {
            // No move listed: done once the broker's metadata shows the target replicas, all
            // in the ISR (the list can be empty before this broker's image holds the move,
            // and "done" must mean committed and visible).
            let settled = match &target {
                None => true,
                Some(target) => admin
                    .metadata(Some(&[topic.to_owned()]))
                    .await?
                    .partition(topic, partition)
                    .is_some_and(|p| {
                        p.replicas == *target && target.iter().all(|r| p.isr.contains(r))
                    }),
            };
            if settled {
                println!(
                    "{topic}-{partition}: done after {:.1} s",
                    started.elapsed().as_secs_f64()
                );
                return Ok(());
            }
            if started.elapsed() > wait {
                println!("{topic}-{partition}: still moving; it goes on without this command");
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        };
        let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<_>>();
        let line = format!(
            "{topic}-{partition}: replicas {:?}, adding {:?}, removing {:?}",
            ids(&state.replicas),
            ids(&state.adding_replicas),
            ids(&state.removing_replicas)
        );
        if line != last {
            println!("{line}");
            last = line;
        }
        if started.elapsed() > wait {
            println!("{topic}-{partition}: still moving; it goes on without this command");
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
