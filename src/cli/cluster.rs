//! `sluice cluster`: the metadata quorum, seen and changed from the command line.
//!
//! `--bootstrap-controller HOST:PORT` is any node's internal (CONTROLLER) listener, as with
//! Kafka's `kafka-metadata-quorum --bootstrap-controller`; the call is followed to the leader.

use std::path::PathBuf;
use std::time::Duration;

use super::common::Format;
use anyhow::{Context, bail};
use clap::Subcommand;
use sluice::client::ClientConfig;
use sluice::controller::service::{ControllerRequest, ControllerResponse, call_at};
use sluice::protocol::errors;

#[derive(Subcommand)]
pub enum ClusterCommand {
    /// Voters, learners, leader, term, commit index and each member's lag; brokers and their
    /// fenced state.
    Status {
        /// Any node's internal (CONTROLLER) listener (the quorum's own view, with learners).
        #[arg(long, conflicts_with = "bootstrap_server")]
        bootstrap_controller: Option<String>,
        /// With --bootstrap-controller: a properties file saying how to reach an SSL quorum
        /// listener (security.protocol=SSL, ssl.truststore.location, ssl.keystore.location).
        #[arg(long, requires = "bootstrap_controller")]
        command_config: Option<PathBuf>,
        /// Brokers' Kafka listeners, comma-separated, each tried in turn (DescribeQuorum and
        /// DescribeCluster, as Kafka's tools). The default when neither flag is given:
        /// 127.0.0.1:9092.
        #[arg(long)]
        bootstrap_server: Option<String>,
        /// With --bootstrap-server: how long to wait for a broker to answer before giving up
        /// (exit 3), in milliseconds.
        #[arg(
            long,
            default_value_t = super::common::BROKER_WAIT_MS,
            conflicts_with = "bootstrap_controller"
        )]
        timeout_ms: u64,
        /// With --bootstrap-server (or the default): `json` prints the cluster's report (its
        /// brokers with their leaders and disk use, the quorum, partition health and whether
        /// it is healthy or degraded, and why), the same the web console shows.
        #[arg(long, value_enum, default_value_t = Format::Text, conflicts_with = "bootstrap_controller")]
        output: Format,
    },
    /// Makes a learner (a running node outside the voters) a voter.
    AddVoter {
        #[arg(long)]
        bootstrap_controller: String,
        #[arg(long)]
        node_id: u64,
        /// How to reach an SSL quorum listener (security.protocol=SSL, ssl.truststore.location,
        /// ssl.keystore.location: a certificate whose principal may ALTER the cluster).
        #[arg(long)]
        command_config: Option<PathBuf>,
    },
    /// Makes a voter a learner (it keeps following the metadata log).
    RemoveVoter {
        #[arg(long)]
        bootstrap_controller: String,
        #[arg(long)]
        node_id: u64,
        /// How to reach an SSL quorum listener (security.protocol=SSL, ssl.truststore.location,
        /// ssl.keystore.location: a certificate whose principal may ALTER the cluster).
        #[arg(long)]
        command_config: Option<PathBuf>,
    },
}

/// Sets how this process reaches quorum listeners, from `--command-config`.
fn quorum_tls(command_config: Option<&PathBuf>) -> anyhow::Result<()> {
    let Some(path) = command_config else {
        return Ok(());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --command-config {}", path.display()))?;
    let tls = ClientConfig::from_properties(&text)?.quorum_tls()?;
    sluice_raft::transport::set_client_tls(tls);
    Ok(())
}

pub fn run(command: ClusterCommand) -> anyhow::Result<()> {
    match &command {
        ClusterCommand::Status { command_config, .. }
        | ClusterCommand::AddVoter { command_config, .. }
        | ClusterCommand::RemoveVoter { command_config, .. } => {
            quorum_tls(command_config.as_ref())?
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let (addr, request) = match &command {
            ClusterCommand::Status {
                bootstrap_server,
                timeout_ms,
                output: Format::Json,
                ..
            } => {
                let server = bootstrap_server.as_deref().unwrap_or("127.0.0.1:9092");
                return status_json(server, *timeout_ms).await;
            }
            ClusterCommand::Status {
                bootstrap_server: Some(server),
                timeout_ms,
                ..
            } => return status_via_kafka(server, *timeout_ms).await,
            ClusterCommand::Status {
                bootstrap_controller: Some(controller),
                ..
            } => (controller, ControllerRequest::DescribeQuorum),
            ClusterCommand::Status { timeout_ms, .. } => {
                return status_via_kafka("127.0.0.1:9092", *timeout_ms).await;
            }
            ClusterCommand::AddVoter {
                bootstrap_controller,
                node_id,
                ..
            } => (
                bootstrap_controller,
                ControllerRequest::AddVoter { node_id: *node_id },
            ),
            ClusterCommand::RemoveVoter {
                bootstrap_controller,
                node_id,
                ..
            } => (
                bootstrap_controller,
                ControllerRequest::RemoveVoter { node_id: *node_id },
            ),
        };
        let response = call_at(addr, &request, Duration::from_secs(15))
            .await
            .map_err(anyhow::Error::msg)?;
        match response {
            ControllerResponse::Quorum(description) => {
                println!(
                    "leader {}  term {}  commit index {}",
                    description.leader, description.term, description.commit_index
                );
                println!(
                    "{:<8} {:<8} {:<24} {:>10} {:>8}",
                    "node", "role", "address", "matched", "lag"
                );
                for member in &description.members {
                    let show = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
                    println!(
                        "{:<8} {:<8} {:<24} {:>10} {:>8}",
                        member.node_id,
                        if member.voter { "voter" } else { "learner" },
                        member.addr,
                        show(member.matched_index),
                        show(member.lag)
                    );
                }
                println!(
                    "{:<8} {:<8} {:<10} {:>18} endpoints",
                    "broker", "epoch", "state", "partitions/max"
                );
                for broker in &description.brokers {
                    let partitions = match broker.partitions_max {
                        Some(max) => format!("{}/{max}", broker.partitions),
                        None => broker.partitions.to_string(),
                    };
                    println!(
                        "{:<8} {:<8} {:<10} {:>18} {}",
                        broker.broker_id,
                        broker.broker_epoch,
                        if broker.fenced { "fenced" } else { "unfenced" },
                        partitions,
                        broker.endpoints.join(",")
                    );
                }
                Ok(())
            }
            ControllerResponse::Ok { .. } => {
                println!("done");
                Ok(())
            }
            ControllerResponse::Error { code, message } => {
                bail!("{}: {message}", errors::name(code))
            }
            ControllerResponse::NotController { .. } => bail!("no quorum leader could be reached"),
            other => bail!("unexpected answer: {other:?}"),
        }
    })
}

/// `cluster status --output json`: the cluster's report, as the console shows it.
async fn status_json(server: &str, timeout_ms: u64) -> anyhow::Result<()> {
    let admin = sluice::client::Admin::new(
        sluice::client::ClientConfig::new(server).set("client.id", "sluice-cli"),
    )?;
    super::common::wait_for_broker(&admin, server, Duration::from_millis(timeout_ms)).await?;
    let report = sluice::console::report::cluster(&admin).await?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

/// `cluster status --bootstrap-server`: the quorum (DescribeQuorum) and the brokers
/// (DescribeCluster) through a broker's Kafka listener.
async fn status_via_kafka(server: &str, timeout_ms: u64) -> anyhow::Result<()> {
    use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
    use kafka_protocol::messages::{DescribeClusterRequest, DescribeQuorumRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;

    let admin = sluice::client::Admin::new(
        sluice::client::ClientConfig::new(server).set("client.id", "sluice-cli"),
    )?;
    super::common::wait_for_broker(&admin, server, Duration::from_millis(timeout_ms)).await?;
    let connection = admin.connection().await?;
    let request = DescribeQuorumRequest::default().with_topics(vec![
        TopicData::default()
            .with_topic_name(TopicName(StrBytes::from_static_str("__cluster_metadata")))
            .with_partitions(vec![PartitionData::default().with_partition_index(0)]),
    ]);
    // Version 2 carries the nodes' listeners; DescribeCluster 2 the fenced state.
    let quorum = connection.send_at_most(&request, 2).await?;
    if let Some(error) = sluice::client::Error::kafka(
        quorum.error_code,
        "DescribeQuorum",
        quorum.error_message.as_deref(),
    ) {
        return Err(error.into());
    }
    let partition = quorum
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or_else(|| anyhow::anyhow!("DescribeQuorum answered no partition"))?;
    println!(
        "leader {}  term {}  commit index {}",
        partition.leader_id.0, partition.leader_epoch, partition.high_watermark
    );
    println!(
        "{:<8} {:<8} {:<24} {:>10} {:>8}",
        "node", "role", "address", "matched", "lag"
    );
    let address = |id: i32| {
        quorum
            .nodes
            .iter()
            .find(|n| n.node_id.0 == id)
            .and_then(|n| n.listeners.first())
            .map_or("-".to_owned(), |l| format!("{}:{}", l.host, l.port))
    };
    for (role, members) in [
        ("voter", &partition.current_voters),
        ("learner", &partition.observers),
    ] {
        for member in members {
            let matched = member.log_end_offset;
            let (matched, lag) = if matched < 0 {
                ("-".to_owned(), "-".to_owned())
            } else {
                (
                    matched.to_string(),
                    (partition.high_watermark - matched).max(0).to_string(),
                )
            };
            println!(
                "{:<8} {:<8} {:<24} {:>10} {:>8}",
                member.replica_id.0,
                role,
                address(member.replica_id.0),
                matched,
                lag
            );
        }
    }
    let cluster = connection
        .send_at_most(
            &DescribeClusterRequest::default()
                .with_include_fenced_brokers(true)
                .with_endpoint_type(1),
            2,
        )
        .await?;
    println!(
        "cluster {}  controller {}",
        cluster.cluster_id, cluster.controller_id.0
    );
    println!("{:<8} {:<10} endpoint", "broker", "state");
    for broker in &cluster.brokers {
        println!(
            "{:<8} {:<10} {}:{}",
            broker.broker_id.0,
            if broker.is_fenced {
                "fenced"
            } else {
                "unfenced"
            },
            broker.host,
            broker.port
        );
    }
    Ok(())
}
