//! `sluice produce TOPIC`: a console producer on the SDK's [`Producer`]: one record per line
//! of standard input, optionally `key<separator>value`, as Kafka's console producer.

use std::io::BufRead;

use anyhow::Context;
use bytes::Bytes;
use clap::Args;
use sluice::client::{ClientConfig, Producer, ProducerRecord};

use super::common::{Connect, block_on, parse_key_value};

#[derive(Args)]
pub struct ProduceArgs {
    /// The topic to write to.
    topic: String,
    /// Splits each line into key and value at the first occurrence (no key otherwise).
    #[arg(long)]
    key_separator: Option<String>,
    /// A header added to every record, key=value (repeatable).
    #[arg(long = "header", value_parser = parse_key_value)]
    headers: Vec<(String, String)>,
    /// Writes every record to this partition (otherwise the key's hash, or sticky).
    #[arg(long)]
    partition: Option<i32>,
    /// all (-1), 1 or 0: how many replicas must have a record before it counts as written.
    #[arg(long, default_value = "all")]
    acks: String,
    /// none, gzip, snappy, lz4 or zstd.
    #[arg(long, default_value = "none")]
    compression: String,
    /// Any producer setting, key=value (repeatable): --producer-property linger.ms=20
    #[arg(long = "producer-property", value_parser = parse_key_value)]
    properties: Vec<(String, String)>,
    #[command(flatten)]
    connect: Connect,
}

pub fn run(args: ProduceArgs) -> anyhow::Result<()> {
    let mut config: ClientConfig = args.connect.config()?;
    config.insert("acks", args.acks.clone());
    config.insert("compression.type", args.compression.clone());
    // A console user should not wait a minute to learn the topic does not exist.
    config.insert("max.block.ms", "10000");
    for (key, value) in &args.properties {
        config.insert(key, value.clone());
    }
    block_on(async move {
        let producer = Producer::new(config)?;
        // Fail before reading input when the topic cannot be written.
        producer.existing_partition_count(&args.topic).await?;
        let stdin = std::io::stdin();
        let mut deliveries = Vec::new();
        let mut sent = 0u64;
        for line in stdin.lock().lines() {
            let line = line.context("reading standard input")?;
            let (key, value) = match &args.key_separator {
                Some(separator) => match line.split_once(separator.as_str()) {
                    Some((k, v)) => (Some(k.to_owned()), v.to_owned()),
                    None => (None, line),
                },
                None => (None, line),
            };
            let mut record = ProducerRecord::new(&args.topic, value);
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
            // Keep memory flat on long inputs: settle what is outstanding now and then.
            if deliveries.len() >= 10_000 {
                for delivery in deliveries.drain(..) {
                    delivery.await?;
                }
            }
        }
        for delivery in deliveries {
            delivery.await?;
        }
        producer.close().await?;
        eprintln!("{sent} records written to {}", args.topic);
        Ok(())
    })
}
