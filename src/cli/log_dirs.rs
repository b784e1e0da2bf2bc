//! `sluice log-dirs describe`: each broker's log dirs and the replicas in them, asked with
//! DescribeLogDirs (so it works against Kafka too) and printed as `kafka-log-dirs.sh
//! --describe` prints them, which scripts parse: two lines of narration, then one line of JSON
//!
//! ```text
//! Querying brokers for log directories information
//! Received log directory information from brokers 1,2
//! {"brokers":[{"broker":1,"logDirs":[{"logDir":"/data","error":null,"partitions":[
//!   {"partition":"orders-0","size":123,"offsetLag":0,"isFuture":false}]}]}],"version":1}
//! ```
//!
//! (on one line). Kafka's spelling works: `sluice log-dirs --describe --bootstrap-server H:P
//! --broker-list 1,2 --topic-list orders,audit`. A dir the broker cannot use has its error in
//! `error`, named as Kafka names the error (`KAFKA_STORAGE_ERROR`; Kafka's tool prints its
//! exception's class there). A broker that does not answer, or refuses, fails the command
//! naming it and the error, as Kafka's tool fails.
//!
//! The connection flags may come before the subcommand (`sluice log-dirs --bootstrap-server
//! H:P describe`). `--broker-list` here is a list of broker ids, as in kafka-log-dirs.sh, not
//! the console producer's old name for `--bootstrap-server`.

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::bail;
use clap::{Args, Subcommand};
use serde::Serialize;
use sluice::client::{Admin, BrokerLogDirs};

use super::common::{BROKER_WAIT_MS, Connect, Servers, block_on};

#[derive(Args)]
pub struct LogDirsArgs {
    #[command(subcommand)]
    command: LogDirsCommand,
    /// Brokers to start from: host:port, comma-separated; each is tried in turn.
    #[arg(long, default_value = "127.0.0.1:9092", global = true)]
    bootstrap_server: String,
    /// A properties file of client settings (Kafka's names, e.g. the admin's SASL login).
    #[arg(long, alias = "admin.config", global = true)]
    command_config: Option<PathBuf>,
    /// How long to wait for a broker to answer before giving up (exit 3), in milliseconds.
    #[arg(long = "timeout-ms", default_value_t = BROKER_WAIT_MS, global = true)]
    broker_timeout_ms: u64,
}

#[derive(Subcommand)]
pub enum LogDirsCommand {
    /// Each broker's log dirs with the replicas in them: size on disk, offset lag, whether a
    /// future replica; printed as kafka-log-dirs.sh --describe prints them (JSON).
    #[command(after_help = "Examples (kafka-log-dirs.sh's flags):
  sluice log-dirs --describe --bootstrap-server 127.0.0.1:9092
  sluice log-dirs --describe --broker-list 1,2 --topic-list orders,audit")]
    Describe {
        /// The brokers to ask, by node id, comma-separated (default: every broker).
        #[arg(long, value_name = "IDS", value_delimiter = ',')]
        broker_list: Vec<i32>,
        /// Only the replicas of these topics, comma-separated (default: every replica).
        #[arg(long, value_name = "TOPICS", value_delimiter = ',')]
        topic_list: Vec<String>,
    },
}

pub fn run(args: LogDirsArgs) -> anyhow::Result<()> {
    let connect = Connect {
        servers: Servers {
            bootstrap_server: args.bootstrap_server,
            command_config: args.command_config,
        },
        broker_timeout_ms: args.broker_timeout_ms,
    };
    let LogDirsCommand::Describe {
        broker_list,
        topic_list,
    } = args.command;
    block_on(async move {
        let admin = connect.admin().await?;
        let outcome = describe(&admin, &broker_list, &topic_list).await;
        admin.close();
        outcome
    })
}

async fn describe(admin: &Admin, broker_list: &[i32], topic_list: &[String]) -> anyhow::Result<()> {
    let existing: BTreeSet<i32> = admin
        .metadata(Some(&[]))
        .await?
        .brokers
        .keys()
        .copied()
        .collect();
    let brokers: BTreeSet<i32> = if broker_list.is_empty() {
        existing.clone()
    } else {
        broker_list.iter().copied().collect()
    };
    let missing: Vec<i32> = brokers.difference(&existing).copied().collect();
    if !missing.is_empty() {
        bail!(
            "the given brokers do not exist from --broker-list: {}. Current existent brokers: {}",
            ids(&missing),
            ids(&existing)
        );
    }
    println!("Querying brokers for log directories information");
    let brokers: Vec<i32> = brokers.into_iter().collect();
    let topics = (!topic_list.is_empty()).then_some(topic_list);
    let described = admin.describe_log_dirs(Some(&brokers), topics).await?;
    fail_on_broker_errors(&described)?;
    println!(
        "Received log directory information from brokers {}",
        ids(&brokers)
    );
    println!("{}", serde_json::to_string(&LogDirsJson::of(&described))?);
    Ok(())
}

/// Fails, naming each broker that did not describe its log dirs and why; the first one's
/// error decides the exit code (3 unreachable, 4 a Kafka error).
fn fail_on_broker_errors(described: &[BrokerLogDirs]) -> anyhow::Result<()> {
    let failed: Vec<(i32, &sluice::client::Error)> = described
        .iter()
        .filter_map(|b| b.log_dirs.as_ref().err().map(|e| (b.broker_id, e)))
        .collect();
    let Some((_, first)) = failed.first() else {
        return Ok(());
    };
    let each: Vec<String> = failed
        .iter()
        .map(|(broker, error)| format!("broker {broker}: {error}"))
        .collect();
    Err(anyhow::Error::new((*first).clone()).context(format!(
        "no log directory information from brokers {} ({})",
        ids(failed.iter().map(|(broker, _)| broker)),
        each.join("; ")
    )))
}

fn ids<'a>(ids: impl IntoIterator<Item = &'a i32>) -> String {
    ids.into_iter()
        .map(i32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// kafka-log-dirs.sh's JSON, its keys in its order.
#[derive(Serialize)]
struct LogDirsJson {
    brokers: Vec<BrokerJson>,
    version: u32,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BrokerJson {
    broker: i32,
    log_dirs: Vec<LogDirJson>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LogDirJson {
    log_dir: String,
    error: Option<String>,
    partitions: Vec<PartitionJson>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PartitionJson {
    /// `topic-partition`.
    partition: String,
    size: i64,
    offset_lag: i64,
    is_future: bool,
}

impl LogDirsJson {
    /// The brokers that answered (the command fails before printing when one did not).
    fn of(described: &[BrokerLogDirs]) -> LogDirsJson {
        let brokers = described
            .iter()
            .filter_map(|broker| {
                let dirs = broker.log_dirs.as_ref().ok()?;
                Some(BrokerJson {
                    broker: broker.broker_id,
                    log_dirs: dirs
                        .iter()
                        .map(|dir| LogDirJson {
                            log_dir: dir.path.clone(),
                            error: dir.error.as_ref().map(|e| {
                                e.code().map_or_else(
                                    || e.to_string(),
                                    |code| sluice::protocol::errors::name(code).into_owned(),
                                )
                            }),
                            partitions: dir
                                .replicas
                                .iter()
                                .map(|replica| PartitionJson {
                                    partition: replica.topic_partition.to_string(),
                                    size: replica.size_bytes,
                                    offset_lag: replica.offset_lag,
                                    is_future: replica.is_future,
                                })
                                .collect(),
                        })
                        .collect(),
                })
            })
            .collect();
        LogDirsJson {
            brokers,
            version: 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use sluice::client::{Error, LogDirDescription, ReplicaInfo, TopicPartition};

    use super::*;

    #[test]
    fn the_json_is_kafkas_shape_on_one_line() {
        let described = vec![BrokerLogDirs {
            broker_id: 1,
            log_dirs: Ok(vec![
                LogDirDescription {
                    path: "/data".into(),
                    error: None,
                    replicas: vec![ReplicaInfo {
                        topic_partition: TopicPartition::new("t", 0),
                        size_bytes: 123,
                        offset_lag: 0,
                        is_future: false,
                    }],
                    total_bytes: Some(1),
                    usable_bytes: Some(1),
                },
                LogDirDescription {
                    path: "/gone".into(),
                    error: Error::kafka(56, "log dir /gone", None),
                    replicas: vec![],
                    total_bytes: None,
                    usable_bytes: None,
                },
            ]),
        }];
        assert_eq!(
            serde_json::to_string(&LogDirsJson::of(&described)).expect("json"),
            r#"{"brokers":[{"broker":1,"logDirs":[{"logDir":"/data","error":null,"partitions":[{"partition":"t-0","size":123,"offsetLag":0,"isFuture":false}]},{"logDir":"/gone","error":"KAFKA_STORAGE_ERROR","partitions":[]}]}],"version":1}"#
        );
    }

    #[test]
    fn a_broker_that_did_not_answer_fails_the_command_naming_it() {
        let described = vec![
            BrokerLogDirs {
                broker_id: 1,
                log_dirs: Ok(vec![]),
            },
            BrokerLogDirs {
                broker_id: 2,
                log_dirs: Err(Error::kafka(31, "the log dirs of broker 2", None).expect("error")),
            },
        ];
        let error = fail_on_broker_errors(&described).expect_err("broker 2 failed");
        let text = format!("{error:#}");
        assert!(text.contains("brokers 2 ("), "{text}");
        assert!(text.contains("CLUSTER_AUTHORIZATION_FAILED"), "{text}");
        assert_eq!(super::super::common::exit_code(&error), 4);
    }
}
