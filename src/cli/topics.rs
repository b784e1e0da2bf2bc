//! `sluice topics`: topic administration through any broker's Kafka port (the same APIs as
//! Kafka's tools). Today: `reassign`, which moves a partition's replicas and shows progress.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Subcommand;
use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, MetadataRequest,
    MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use sluice::client::Connection;
use sluice::protocol::errors;

#[derive(Subcommand)]
pub enum TopicsCommand {
    /// Moves a partition to new replicas (AlterPartitionReassignments) and follows the move
    /// until it completes: the new replicas join, catch up, enter the ISR; the others leave.
    Reassign {
        #[arg(long, default_value = "127.0.0.1:9092")]
        bootstrap_server: String,
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
    },
}

pub fn run(command: TopicsCommand) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        match command {
            TopicsCommand::Reassign {
                bootstrap_server,
                topic,
                partition,
                replicas,
                cancel,
                wait_seconds,
            } => {
                reassign(
                    &bootstrap_server,
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

async fn reassign(
    server: &str,
    topic: &str,
    partition: i32,
    target: Option<Vec<i32>>,
    wait: Duration,
) -> anyhow::Result<()> {
    let mut connection = Connection::connect(server, Duration::from_secs(30))
        .await
        .with_context(|| format!("connecting to {server}"))?;
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
    let response: AlterPartitionReassignmentsResponse = connection
        .call(ApiKey::AlterPartitionReassignments, 0, &request)
        .await
        .context("AlterPartitionReassignments")?;
    if response.error_code != 0 {
        bail!(
            "{}: {}",
            errors::name(response.error_code),
            response.error_message.as_deref().unwrap_or("")
        );
    }
    for t in &response.responses {
        for p in &t.partitions {
            if p.error_code != 0 {
                bail!(
                    "{}-{}: {}: {}",
                    t.name.0,
                    p.partition_index,
                    errors::name(p.error_code),
                    p.error_message.as_deref().unwrap_or("")
                );
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
        let ongoing: ListPartitionReassignmentsResponse = connection
            .call(ApiKey::ListPartitionReassignments, 0, &list)
            .await
            .context("ListPartitionReassignments")?;
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
                Some(target) => partition_metadata(&mut connection, &name, partition)
                    .await?
                    .is_some_and(|(replicas, isr)| {
                        replicas == *target && target.iter().all(|r| isr.contains(r))
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

/// A partition's replicas and ISR as the broker's Metadata shows them (`None`: not listed).
async fn partition_metadata(
    connection: &mut Connection,
    topic: &TopicName,
    partition: i32,
) -> anyhow::Result<Option<(Vec<i32>, Vec<i32>)>> {
    let request = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(topic.clone())),
    ]));
    let response: MetadataResponse = connection
        .call(ApiKey::Metadata, 12, &request)
        .await
        .context("Metadata")?;
    Ok(response
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition_index == partition)
        .map(|p| {
            (
                p.replica_nodes.iter().map(|b| b.0).collect(),
                p.isr_nodes.iter().map(|b| b.0).collect(),
            )
        }))
}
