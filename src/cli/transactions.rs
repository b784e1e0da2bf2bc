//! `sluice transactions`: Kafka transactions through any broker's Kafka port, as
//! `kafka-transactions.sh` has them (its subcommands, flags and columns, so its users' habits
//! and scripts work): `list` (every transactional id the coordinators know), `describe` (one
//! id at its coordinator), `describe-producers` (a partition's producers at its leader) and
//! `abort` (a transaction left hanging at a partition: its abort marker written there).
//!
//! The connection flags may come before the subcommand, as kafka-transactions.sh takes them
//! (`sluice transactions --bootstrap-server H:P list`).

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde::Serialize;
use sluice::client::{
    AbortTransactionSpec, Admin, ListTransactionsFilters, ProducerState, TopicPartition,
};

use super::common::{Common, Format, block_on, one_of, print_table};

#[derive(Args)]
pub struct TransactionsArgs {
    #[command(subcommand)]
    command: TransactionsCommand,
    #[command(flatten)]
    common: Common,
}

#[derive(Subcommand)]
pub enum TransactionsCommand {
    /// Every transactional id the cluster's coordinators know, with its producer id and
    /// state.
    List {
        /// Only transactions open longer than this many milliseconds.
        #[arg(long)]
        duration_filter: Option<i64>,
        /// Only this state (Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit,
        /// CompleteAbort, ...; repeatable).
        #[arg(long = "state")]
        states: Vec<String>,
        /// Only this producer id (repeatable).
        #[arg(long = "producer-id")]
        producer_ids: Vec<i64>,
        /// Only transactional ids matching this regular expression.
        #[arg(long)]
        transactional_id_pattern: Option<String>,
    },
    /// One transactional id as its coordinator describes it: producer id and epoch, state,
    /// timeout, when the open transaction started and its partitions.
    #[command(
        override_usage = "sluice transactions describe [OPTIONS] <TRANSACTIONAL_ID | --transactional-id ID>"
    )]
    Describe {
        /// The transactional id (or --transactional-id, as kafka-transactions.sh takes it).
        #[arg(
            required_unless_present = "transactional_id_flag",
            conflicts_with = "transactional_id_flag"
        )]
        transactional_id: Option<String>,
        /// The same, as kafka-transactions.sh names it.
        #[arg(
            long = "transactional-id",
            id = "transactional_id_flag",
            value_name = "ID",
            hide_short_help = true
        )]
        transactional_id_flag: Option<String>,
    },
    /// The producers a partition's leader knows: epoch, last sequence and timestamp, the
    /// coordinator epoch of their last marker, where their open transaction starts.
    #[command(
        override_usage = "sluice transactions describe-producers [OPTIONS] <TOPIC PARTITION | --topic TOPIC --partition PARTITION>"
    )]
    DescribeProducers {
        #[command(flatten)]
        partition: PartitionArgs,
        /// Ask this broker (a replica) rather than the partition's leader.
        #[arg(long)]
        broker_id: Option<i32>,
    },
    /// Aborts a transaction left hanging at one partition (its producer gone, its
    /// coordinator not ending it): writes its abort marker at the partition's leader. Name
    /// it by --start-offset (from describe-producers), or by --producer-id, --producer-epoch
    /// and --coordinator-epoch.
    #[command(
        override_usage = "sluice transactions abort [OPTIONS] --topic TOPIC --partition PARTITION <--start-offset OFFSET | --producer-id ID --producer-epoch EPOCH --coordinator-epoch EPOCH>"
    )]
    Abort {
        #[command(flatten)]
        partition: PartitionArgs,
        /// The first offset of the transaction to abort (CurrentTransactionStartOffset).
        #[arg(
            long,
            required_unless_present = "producer_id",
            conflicts_with_all = ["producer_id", "producer_epoch", "coordinator_epoch"]
        )]
        start_offset: Option<i64>,
        /// The producer id of the transaction to abort.
        #[arg(long, requires_all = ["producer_epoch", "coordinator_epoch"])]
        producer_id: Option<i64>,
        /// Its producer epoch.
        #[arg(long, requires = "producer_id")]
        producer_epoch: Option<i16>,
        /// The coordinator epoch of its last marker (LatestCoordinatorEpoch; -1 is sent as 0).
        #[arg(long, requires = "producer_id", allow_negative_numbers = true)]
        coordinator_epoch: Option<i32>,
    },
}

/// A partition, as `TOPIC PARTITION` or kafka-transactions.sh's `--topic T --partition P`.
#[derive(Args)]
pub struct PartitionArgs {
    /// The topic (or --topic).
    #[arg(
        required_unless_present = "topic_flag",
        conflicts_with = "topic_flag",
        requires = "partition"
    )]
    topic: Option<String>,
    /// The partition (or --partition).
    #[arg(
        required_unless_present = "partition_flag",
        conflicts_with = "partition_flag"
    )]
    partition: Option<i32>,
    /// The topic, as kafka-transactions.sh names it.
    #[arg(long = "topic", id = "topic_flag", value_name = "TOPIC")]
    topic_flag: Option<String>,
    /// The partition, as kafka-transactions.sh names it.
    #[arg(long = "partition", id = "partition_flag", value_name = "PARTITION")]
    partition_flag: Option<i32>,
}

impl PartitionArgs {
    fn topic_partition(&self) -> TopicPartition {
        TopicPartition::new(
            one_of(self.topic.clone(), self.topic_flag.clone()),
            self.partition.or(self.partition_flag).unwrap_or_default(),
        )
    }
}

pub fn run(args: TransactionsArgs) -> anyhow::Result<()> {
    let TransactionsArgs { command, common } = args;
    block_on(async move {
        let admin = common.connect().admin().await?;
        let outcome = match command {
            TransactionsCommand::List {
                duration_filter,
                states,
                producer_ids,
                transactional_id_pattern,
            } => {
                let filters = ListTransactionsFilters {
                    states,
                    producer_ids,
                    duration_ms: duration_filter,
                    transactional_id_pattern,
                };
                list(&admin, &filters, common.output).await
            }
            TransactionsCommand::Describe {
                transactional_id,
                transactional_id_flag,
            } => {
                let id = one_of(transactional_id, transactional_id_flag);
                describe(&admin, &id, common.output).await
            }
            TransactionsCommand::DescribeProducers {
                partition,
                broker_id,
            } => {
                describe_producers(
                    &admin,
                    &partition.topic_partition(),
                    broker_id,
                    common.output,
                )
                .await
            }
            TransactionsCommand::Abort {
                partition,
                start_offset,
                producer_id,
                producer_epoch,
                coordinator_epoch,
            } => {
                let tp = partition.topic_partition();
                let spec = match (start_offset, producer_id, producer_epoch, coordinator_epoch) {
                    (Some(offset), ..) => spec_at_offset(&admin, &tp, offset).await?,
                    (None, Some(producer_id), Some(producer_epoch), Some(coordinator_epoch)) => {
                        AbortTransactionSpec {
                            topic_partition: tp,
                            producer_id,
                            producer_epoch,
                            coordinator_epoch,
                        }
                    }
                    _ => bail!(
                        "name the transaction to abort with --start-offset, or with \
                         --producer-id, --producer-epoch and --coordinator-epoch"
                    ),
                };
                abort(&admin, &spec, common.output).await
            }
        };
        admin.close();
        outcome
    })
}

#[derive(Serialize)]
struct Listed {
    transactional_id: String,
    coordinator: i32,
    producer_id: i64,
    transaction_state: String,
}

async fn list(
    admin: &Admin,
    filters: &ListTransactionsFilters,
    output: Format,
) -> anyhow::Result<()> {
    let listings = admin
        .list_transactions(filters)
        .await
        .context("listing the transactions")?;
    let rows: Vec<Listed> = listings
        .into_iter()
        .map(|l| Listed {
            transactional_id: l.transactional_id,
            coordinator: l.coordinator_id,
            producer_id: l.producer_id,
            transaction_state: l.state,
        })
        .collect();
    if output == Format::Json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    print_table(
        &[
            "TransactionalId",
            "Coordinator",
            "ProducerId",
            "TransactionState",
        ],
        &rows
            .iter()
            .map(|r| {
                vec![
                    r.transactional_id.clone(),
                    r.coordinator.to_string(),
                    r.producer_id.to_string(),
                    r.transaction_state.clone(),
                ]
            })
            .collect::<Vec<_>>(),
    );
    Ok(())
}

#[derive(Serialize)]
struct Described {
    coordinator_id: i32,
    transactional_id: String,
    producer_id: i64,
    producer_epoch: i16,
    transaction_state: String,
    transaction_timeout_ms: i32,
    current_transaction_start_time_ms: Option<i64>,
    transaction_duration_ms: Option<i64>,
    topic_partitions: Vec<String>,
}

async fn describe(admin: &Admin, transactional_id: &str, output: Format) -> anyhow::Result<()> {
    let described = admin
        .describe_transactions(&[transactional_id.to_owned()])
        .await
        .with_context(|| format!("describing transactional id {transactional_id}"))?;
    let Some(d) = described.into_iter().next() else {
        bail!("no description of transactional id {transactional_id}");
    };
    let row = Described {
        coordinator_id: d.coordinator_id,
        transactional_id: d.transactional_id,
        producer_id: d.producer_id,
        producer_epoch: d.producer_epoch,
        transaction_state: d.state,
        transaction_timeout_ms: d.transaction_timeout_ms,
        current_transaction_start_time_ms: d.transaction_start_time_ms,
        transaction_duration_ms: d.transaction_start_time_ms.map(|start| now_ms() - start),
        topic_partitions: d.topic_partitions.iter().map(|tp| tp.to_string()).collect(),
    };
    if output == Format::Json {
        println!("{}", serde_json::to_string_pretty(&row)?);
        return Ok(());
    }
    let none = |v: Option<i64>| v.map_or("None".to_owned(), |v| v.to_string());
    print_table(
        &[
            "CoordinatorId",
            "TransactionalId",
            "ProducerId",
            "ProducerEpoch",
            "TransactionState",
            "TransactionTimeoutMs",
            "CurrentTransactionStartTimeMs",
            "TransactionDurationMs",
            "TopicPartitions",
        ],
        &[vec![
            row.coordinator_id.to_string(),
            row.transactional_id.clone(),
            row.producer_id.to_string(),
            row.producer_epoch.to_string(),
            row.transaction_state.clone(),
            row.transaction_timeout_ms.to_string(),
            none(row.current_transaction_start_time_ms),
            none(row.transaction_duration_ms),
            row.topic_partitions.join(","),
        ]],
    );
    Ok(())
}

#[derive(Serialize)]
struct Producer {
    producer_id: i64,
    producer_epoch: i32,
    latest_coordinator_epoch: i32,
    last_sequence: i32,
    last_timestamp: i64,
    current_transaction_start_offset: Option<i64>,
}

async fn describe_producers(
    admin: &Admin,
    tp: &TopicPartition,
    broker_id: Option<i32>,
    output: Format,
) -> anyhow::Result<()> {
    let producers = producers_of(admin, tp, broker_id).await?;
    let rows: Vec<Producer> = producers
        .iter()
        .map(|p| Producer {
            producer_id: p.producer_id,
            producer_epoch: p.producer_epoch,
            latest_coordinator_epoch: p.coordinator_epoch.unwrap_or(-1),
            last_sequence: p.last_sequence,
            last_timestamp: p.last_timestamp,
            current_transaction_start_offset: p.current_transaction_start_offset,
        })
        .collect();
    if output == Format::Json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    print_table(
        &[
            "ProducerId",
            "ProducerEpoch",
            "LatestCoordinatorEpoch",
            "LastSequence",
            "LastTimestamp",
            "CurrentTransactionStartOffset",
        ],
        &rows
            .iter()
            .map(|r| {
                vec![
                    r.producer_id.to_string(),
                    r.producer_epoch.to_string(),
                    r.latest_coordinator_epoch.to_string(),
                    r.last_sequence.to_string(),
                    r.last_timestamp.to_string(),
                    r.current_transaction_start_offset
                        .map_or("None".to_owned(), |o| o.to_string()),
                ]
            })
            .collect::<Vec<_>>(),
    );
    Ok(())
}

async fn producers_of(
    admin: &Admin,
    tp: &TopicPartition,
    broker_id: Option<i32>,
) -> anyhow::Result<Vec<ProducerState>> {
    let on = broker_id.map_or("its leader".to_owned(), |b| format!("broker {b}"));
    let mut described = admin
        .describe_producers_on(std::slice::from_ref(tp), broker_id)
        .await
        .with_context(|| format!("describing the producers of partition {tp} on {on}"))?;
    Ok(described.remove(tp).unwrap_or_default())
}

/// The open transaction that starts at `start_offset` of `tp`, as describe-producers shows
/// it (kafka-transactions.sh's `abort --start-offset`).
async fn spec_at_offset(
    admin: &Admin,
    tp: &TopicPartition,
    start_offset: i64,
) -> anyhow::Result<AbortTransactionSpec> {
    let producers = producers_of(admin, tp, None).await?;
    let Some(producer) = producers
        .iter()
        .find(|p| p.current_transaction_start_offset == Some(start_offset))
    else {
        bail!(
            "Could not find any open transactions starting at offset {start_offset} on \
             partition {tp} (`sluice transactions describe-producers {} {}` shows them)",
            tp.topic,
            tp.partition
        );
    };
    Ok(AbortTransactionSpec {
        topic_partition: tp.clone(),
        producer_id: producer.producer_id,
        producer_epoch: i16::try_from(producer.producer_epoch).with_context(|| {
            format!("producer epoch {} is out of range", producer.producer_epoch)
        })?,
        coordinator_epoch: producer.coordinator_epoch.unwrap_or(-1),
    })
}

async fn abort(admin: &Admin, spec: &AbortTransactionSpec, output: Format) -> anyhow::Result<()> {
    admin
        .abort_transaction(spec)
        .await
        .with_context(|| format!("Failed to abort transaction {}", describe_spec(spec)))?;
    if output == Format::Json {
        let json = serde_json::json!({
            "topic": spec.topic_partition.topic,
            "partition": spec.topic_partition.partition,
            "producer_id": spec.producer_id,
            "producer_epoch": spec.producer_epoch,
            "coordinator_epoch": spec.coordinator_epoch.max(0),
            "aborted": true,
        });
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        println!("Aborted transaction {}.", describe_spec(spec));
    }
    Ok(())
}

fn describe_spec(spec: &AbortTransactionSpec) -> String {
    format!(
        "of producer {} (epoch {}, coordinator epoch {}) at {}",
        spec.producer_id,
        spec.producer_epoch,
        spec.coordinator_epoch.max(0),
        spec.topic_partition
    )
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
