//! `sluice cluster`: the metadata quorum, seen and changed from the command line.
//!
//! `--bootstrap-controller HOST:PORT` is any node's internal (CONTROLLER) listener, as with
//! Kafka's `kafka-metadata-quorum --bootstrap-controller`; the call is followed to the leader.

use std::time::Duration;

use anyhow::{Context, bail};
use clap::Subcommand;
use sluice::controller::service::{ControllerRequest, ControllerResponse, call_at};

#[derive(Subcommand)]
pub enum ClusterCommand {
    /// Voters, learners, leader, term, commit index and each member's lag; brokers and their
    /// fenced state.
    Status {
        #[arg(long)]
        bootstrap_controller: String,
    },
    /// Makes a learner (a running node outside the voters) a voter.
    AddVoter {
        #[arg(long)]
        bootstrap_controller: String,
        #[arg(long)]
        node_id: u64,
    },
    /// Makes a voter a learner (it keeps following the metadata log).
    RemoveVoter {
        #[arg(long)]
        bootstrap_controller: String,
        #[arg(long)]
        node_id: u64,
    },
}

pub fn run(command: ClusterCommand) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let (addr, request) = match &command {
            ClusterCommand::Status {
                bootstrap_controller,
            } => (bootstrap_controller, ControllerRequest::DescribeQuorum),
            ClusterCommand::AddVoter {
                bootstrap_controller,
                node_id,
            } => (
                bootstrap_controller,
                ControllerRequest::AddVoter { node_id: *node_id },
            ),
            ClusterCommand::RemoveVoter {
                bootstrap_controller,
                node_id,
            } => (
                bootstrap_controller,
                ControllerRequest::RemoveVoter { node_id: *node_id },
            ),
        };
        let response = call_at(addr, &request, Duration::from_secs(15))
            .await
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("calling the controller via {addr}"))?;
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
                println!("{:<8} {:<8} {:<10} endpoints", "broker", "epoch", "state");
                for broker in &description.brokers {
                    println!(
                        "{:<8} {:<8} {:<10} {}",
                        broker.broker_id,
                        broker.broker_epoch,
                        if broker.fenced { "fenced" } else { "unfenced" },
                        broker.endpoints.join(",")
                    );
                }
                Ok(())
            }
            ControllerResponse::Ok { .. } => {
                println!("done");
                Ok(())
            }
            ControllerResponse::Error { code, message } => bail!("error {code}: {message}"),
            ControllerResponse::NotController { .. } => bail!("no quorum leader could be reached"),
            other => bail!("unexpected answer: {other:?}"),
        }
    })
}
