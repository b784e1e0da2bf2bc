//! `sluice produce TOPIC`: a console producer on the SDK's [`Producer`]: one record per line
//! of standard input, optionally `key<separator>value`, as Kafka's console producer.

use std::io::BufRead;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::Context;
use bytes::Bytes;
use clap::Args;
use sluice::client::{ClientConfig, Producer, ProducerRecord};

use super::common::{Connect, Progress, block_on, one_of, parse_key_value, watch_stalls};

#[derive(Args)]
#[command(override_usage = "sluice produce [OPTIONS] <TOPIC | --topic TOPIC>")]
#[command(after_help = "Examples (kafka-console-producer.sh's flags work too):
  sluice produce orders                                  a record per line of stdin
  sluice produce --topic orders --property parse.key=true --property key.separator=:
  sluice produce orders --key-separator : --header source=cli")]
pub struct ProduceArgs {
    /// The topic to write to (or --topic, as kafka-console-producer.sh takes it).
    #[arg(required_unless_present = "topic_flag", conflicts_with = "topic_flag")]
    topic: Option<String>,
    /// The same, as Kafka's tools name it.
    #[arg(
        long = "topic",
        id = "topic_flag",
        value_name = "TOPIC",
        hide_short_help = true
    )]
    topic_flag: Option<String>,
    /// Splits each line into key and value at the first occurrence (no key otherwise).
    #[arg(long)]
    key_separator: Option<String>,
    /// kafka-console-producer.sh's line reader properties: parse.key=true|false,
    /// key.separator=S (default a tab), null.marker=S (a value equal to it is a null value)
    /// (repeatable).
    #[arg(long = "property", value_parser = parse_key_value)]
    reader_properties: Vec<(String, String)>,
    /// A header added to every record, key=value (repeatable).
    #[arg(long = "header", value_parser = parse_key_value)]
    headers: Vec<(String, String)>,
    /// Writes every record to this partition (otherwise the key's hash, or sticky).
    #[arg(long)]
    partition: Option<i32>,
    /// all (-1), 1 or 0: how many replicas must have a record before it counts as written.
    #[arg(long, alias = "request-required-acks", default_value = "all")]
    acks: String,
    /// none, gzip, snappy, lz4 or zstd.
    #[arg(long, alias = "compression-codec", default_value = "none")]
    compression: String,
    /// Any producer setting, key=value (repeatable): --producer-property linger.ms=20
    #[arg(long = "producer-property", value_parser = parse_key_value)]
    properties: Vec<(String, String)>,
    #[command(flatten)]
    connect: Connect,
}

/// How a line becomes a record.
struct LineReader {
    key_separator: Option<String>,
    null_marker: Option<String>,
}

impl LineReader {
    /// From --key-separator and kafka-console-producer.sh's --property keys.
    fn new(args: &ProduceArgs) -> anyhow::Result<LineReader> {
        let mut parse_key = args.key_separator.is_some();
        let mut separator = args.key_separator.clone();
        let mut null_marker = None;
        for (key, value) in &args.reader_properties {
            match key.as_str() {
                "parse.key" => parse_key = parse_bool(key, value)?,
                "key.separator" => separator = Some(value.clone()),
                "null.marker" => null_marker = Some(value.clone()),
                _ => eprintln!(
                    "--property {key}: not a property this producer knows (parse.key, key.separator, null.marker); ignored"
                ),
            }
        }
        Ok(LineReader {
            key_separator: parse_key.then(|| separator.unwrap_or_else(|| "\t".to_owned())),
            null_marker,
        })
    }

    /// The key and value of a line (no key when it has no separator).
    fn split(&self, line: String) -> (Option<String>, Option<String>) {
        let (key, value) = match &self.key_separator {
            Some(separator) => match line.split_once(separator.as_str()) {
                Some((k, v)) => (Some(k.to_owned()), v.to_owned()),
                None => (None, line),
            },
            None => (None, line),
        };
        let is_null = |text: &str| self.null_marker.as_deref() == Some(text);
        (
            key.filter(|k| !is_null(k)),
            (!is_null(&value)).then_some(value),
        )
    }
}

/// `true` or `false`, as Kafka's tools read booleans (either case).
pub fn parse_bool(key: &str, value: &str) -> anyhow::Result<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => anyhow::bail!("--property {key}={value}: give true or false"),
    }
}

pub fn run(args: ProduceArgs) -> anyhow::Result<()> {
    let topic = one_of(args.topic.clone(), args.topic_flag.clone());
    let reader = LineReader::new(&args)?;
    let mut config: ClientConfig = args.connect.config()?;
    config.insert("acks", args.acks.clone());
    config.insert("compression.type", args.compression.clone());
    // A console user should not wait a minute to learn the topic does not exist.
    config.insert("max.block.ms", "10000");
    for (key, value) in &args.properties {
        config.insert(key, value.clone());
    }
    block_on(async move {
        args.connect.wait_for_broker().await?;
        let producer = Producer::new(config)?;
        // Fail before reading input when the topic cannot be written.
        producer.existing_partition_count(&topic).await?;
        let progress = Arc::new(Progress::default());
        let _watch = watch_stalls(progress.clone(), args.connect.servers.clone());
        let stdin = std::io::stdin();
        let mut deliveries = Vec::new();
        let mut sent = 0u64;
        for line in stdin.lock().lines() {
            let line = line.context("reading standard input")?;
            let (key, value) = reader.split(line);
            let mut record = ProducerRecord::new(&topic, Bytes::new());
            record.value = value.map(Bytes::from);
            if let Some(key) = key {
                record = record.key(key);
            }
            if let Some(partition) = args.partition {
                record = record.partition(partition);
            }
            for (k, v) in &args.headers {
                record = record.header(k, Bytes::from(v.clone()));
            }
            deliveries.push(producer.send(record).await?);
            sent += 1;
            progress.sent.fetch_add(1, Ordering::Relaxed);
            // Keep memory flat on long inputs: settle what is outstanding now and then.
            if deliveries.len() >= 10_000 {
                for delivery in deliveries.drain(..) {
                    delivery.await?;
                    progress.done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        for delivery in deliveries {
            delivery.await?;
            progress.done.fetch_add(1, Ordering::Relaxed);
        }
        producer.close().await?;
        eprintln!("{sent} records written to {topic}");
        Ok(())
    })
}
