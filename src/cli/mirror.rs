//! `sluice mirror`: MirrorMaker 2's model (see `sluice::mirror`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context as _;
use sluice::mirror::MirrorConfig;

/// Mirrors topics from one cluster to another as MirrorMaker 2 does: target topics created
/// with the source's partitions and configs (named <source-alias>.<topic> by default),
/// records with their partition, key, headers and timestamp; offset syncs and consumer group
/// checkpoints so a group can move (`sluice groups translate`). Speaks only the Kafka
/// protocol: either side may be any Kafka-compatible cluster. Replication lag on /metrics
/// (--override http.listener=, 127.0.0.1:9645 by default).
///
///   sluice mirror --source a:9092 --target b:9092 --topics 'orders.*'
///   sluice mirror mm2.properties      (clusters, A.bootstrap.servers, A->B.enabled, ...)
#[derive(clap::Args, Debug)]
pub struct MirrorArgs {
    /// A MirrorMaker 2 properties file.
    properties: Option<PathBuf>,
    /// The source cluster's bootstrap servers.
    #[arg(long)]
    source: Option<String>,
    /// The target cluster's bootstrap servers.
    #[arg(long)]
    target: Option<String>,
    /// Topics to mirror: regexes separated by commas (MM2's `topics`; all by default).
    #[arg(long)]
    topics: Option<String>,
    /// Consumer groups to checkpoint (MM2's `groups`; all by default).
    #[arg(long)]
    groups: Option<String>,
    /// The source's alias: the prefix of mirrored topics and of the checkpoints topic.
    #[arg(long, default_value = "source")]
    source_alias: String,
    /// The target's alias.
    #[arg(long, default_value = "target")]
    target_alias: String,
    /// key=value, an MM2 setting over the file (repeatable).
    #[arg(long = "override", value_parser = super::common::parse_key_value)]
    overrides: Vec<(String, String)>,
}

pub fn run(args: MirrorArgs) -> anyhow::Result<()> {
    let mut properties: BTreeMap<String, String> = match &args.properties {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            sluice::config::parse_properties(&text)
                .map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))?
        }
        None => BTreeMap::new(),
    };
    if args.source.is_some() || args.target.is_some() {
        let (Some(source), Some(target)) = (&args.source, &args.target) else {
            anyhow::bail!("--source and --target go together");
        };
        let (a, b) = (&args.source_alias, &args.target_alias);
        properties.insert("clusters".into(), format!("{a}, {b}"));
        properties.insert(format!("{a}.bootstrap.servers"), source.clone());
        properties.insert(format!("{b}.bootstrap.servers"), target.clone());
        properties.insert(format!("{a}->{b}.enabled"), "true".into());
    } else if args.properties.is_none() {
        anyhow::bail!("say what to mirror: --source A --target B, or an MM2 properties file");
    }
    if let Some(topics) = args.topics {
        properties.insert("topics".into(), topics);
    }
    if let Some(groups) = args.groups {
        properties.insert("groups".into(), groups);
    }
    properties.extend(args.overrides);
    let config = MirrorConfig::from_properties(&properties)
        .map_err(|error| anyhow::anyhow!("invalid mirror configuration: {error}"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(sluice::mirror::run(config))?;
    Ok(())
}
