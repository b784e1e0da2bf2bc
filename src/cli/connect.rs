//! `sluice connect`: a Kafka Connect worker (see `sluice::connect`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context as _;
use sluice::connect::{WorkerConfig, run_with_connectors};

/// Runs a Kafka Connect worker: Connect's REST API (127.0.0.1:8083 by default), the
/// FileStreamSource and FileStreamSink connectors, converters String, ByteArray and JSON.
///
/// With no file it joins 127.0.0.1:9092 with the defaults of Kafka's
/// connect-distributed.properties (group connect-cluster; topics connect-configs,
/// connect-offsets, connect-status; JsonConverter with schemas). Workers with the same
/// group.id share connectors and tasks, and one takes over what a stopped one ran.
#[derive(clap::Args, Debug)]
pub struct ConnectArgs {
    /// A worker properties file (Kafka Connect's worker keys).
    worker: Option<PathBuf>,
    /// Connector properties files (name=, connector.class=, ...), created or updated when the
    /// worker starts, as connect-standalone.sh takes them.
    connectors: Vec<PathBuf>,
    /// A standalone worker, as connect-standalone.sh runs: no group, offsets in the file
    /// offset.storage.file.filename names, connectors from the files given (and the REST
    /// API, until the worker stops).
    #[arg(long)]
    standalone: bool,
    /// key=value over the worker file (repeatable).
    #[arg(long = "override", value_parser = super::common::parse_key_value)]
    overrides: Vec<(String, String)>,
}

fn read_properties(path: &PathBuf) -> anyhow::Result<BTreeMap<String, String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    sluice::config::parse_properties(&text)
        .map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))
}

pub fn run(args: ConnectArgs) -> anyhow::Result<()> {
    let mut properties = match &args.worker {
        Some(path) => read_properties(path)?,
        None => BTreeMap::new(),
    };
    properties.extend(args.overrides);
    let config = WorkerConfig::from_properties(&properties, args.standalone)
        .map_err(|error| anyhow::anyhow!("invalid worker configuration: {error}"))?;
    let mut connectors = Vec::new();
    for path in &args.connectors {
        connectors.push(read_properties(path)?);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(run_with_connectors(config, connectors))?;
    Ok(())
}
