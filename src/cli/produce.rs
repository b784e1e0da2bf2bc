//! `sluice produce TOPIC`: a console producer on the SDK's [`Producer`]: one record per line
//! of standard input, optionally `key<separator>value`, as Kafka's console producer.

use std::io::BufRead;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::Context;
use bytes::Bytes;
use clap::Args;
use sluice::client::{ClientConfig, Producer, ProducerRecord};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::common::{
    Connect, Progress, TopicArg, block_on, parse_key_value, parse_property, watch_stalls,
};

#[derive(Args)]
#[command(override_usage = "sluice produce [OPTIONS] <TOPIC | --topic TOPIC>")]
#[command(after_help = "Examples (kafka-console-producer.sh's flags work too):
  sluice produce orders                                  a record per line of stdin
  sluice produce --topic orders --property parse.key=true --property key.separator=:
  sluice produce orders --key-separator : --header source=cli")]
pub struct ProduceArgs {
    #[command(flatten)]
    topic: TopicArg,
    /// Splits each line into key and value at the first occurrence (no key otherwise).
    #[arg(long)]
    key_separator: Option<String>,
    /// kafka-console-producer.sh's line reader properties: parse.key=true|false,
    /// key.separator=S (default a tab), null.marker=S (a value equal to it is a null value)
    /// (repeatable).
    #[arg(long = "property", value_parser = parse_property)]
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

/// How a line becomes a record, as Kafka's `LineMessageReader`.
#[derive(Debug)]
struct LineReader {
    key_separator: Option<String>,
    null_marker: Option<String>,
    /// Kafka's `ignore.error`: a line without the key separator is the value, with no key,
    /// instead of an error.
    ignore_error: bool,
}

impl LineReader {
    /// From --key-separator and kafka-console-producer.sh's --property keys.
    fn new(args: &ProduceArgs) -> anyhow::Result<LineReader> {
        let mut parse_key = args.key_separator.is_some();
        let mut separator = args.key_separator.clone();
        let mut null_marker = None;
        // --key-separator (ours) keeps its documented meaning: a line without the separator
        // is all value. Kafka's `parse.key=true` refuses such a line unless `ignore.error`.
        let mut ignore_error = args.key_separator.is_some();
        for (key, value) in &args.reader_properties {
            match key.as_str() {
                "parse.key" => parse_key = parse_bool(key, value)?,
                "key.separator" => separator = Some(value.clone()),
                "null.marker" => null_marker = Some(value.clone()),
                "ignore.error" => ignore_error = parse_bool(key, value)?,
                _ => eprintln!(
                    "--property {key}: not a property this producer knows (parse.key, key.separator, ignore.error, null.marker); ignored"
                ),
            }
        }
        Ok(LineReader {
            key_separator: parse_key.then(|| separator.unwrap_or_else(|| "\t".to_owned())),
            null_marker,
            ignore_error,
        })
    }

    /// The key and value of line `line_number` (counted from 1). A line without the key
    /// separator, when keys are parsed, fails as in Kafka, or with `ignore.error` is all value.
    fn split(
        &self,
        line: String,
        line_number: u64,
    ) -> anyhow::Result<(Option<String>, Option<String>)> {
        let (key, value) = match &self.key_separator {
            Some(separator) => match line.split_once(separator.as_str()) {
                Some((k, v)) => (Some(k.to_owned()), v.to_owned()),
                None if self.ignore_error => (None, line),
                // Kafka's words, which scripts may look for.
                None => {
                    anyhow::bail!("No key separator found on line number {line_number}: '{line}'")
                }
            },
            None => (None, line),
        };
        let is_null = |text: &str| self.null_marker.as_deref() == Some(text);
        Ok((
            key.filter(|k| !is_null(k)),
            (!is_null(&value)).then_some(value),
        ))
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
    let topic = args.topic.name();
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
        let mut lines = read_lines();
        let mut deliveries = JoinSet::new();
        let mut line_number = 0u64;
        let mut input_open = true;
        // The first failure (a line the reader refused, a read or send error, a record not
        // delivered) stops the input; what was sent before it is still delivered, as Kafka's
        // console producer closes its producer (which sends what it holds) before it exits.
        let mut failed: Option<anyhow::Error> = None;
        loop {
            tokio::select! {
                line = lines.recv(), if input_open && deliveries.len() < OUTSTANDING_RECORDS_MAX => {
                    let Some(line) = line else {
                        input_open = false;
                        continue;
                    };
                    line_number += 1;
                    let split = line
                        .context("reading standard input")
                        .and_then(|line| reader.split(line, line_number));
                    let (key, value) = match split {
                        Ok(split) => split,
                        Err(error) => {
                            failed = Some(error);
                            break;
                        }
                    };
                    match producer.send(record_of(&args, &topic, key, value)).await {
                        Ok(delivery) => {
                            deliveries.spawn(delivery);
                            progress.sent.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(error) => {
                            failed = Some(error.into());
                            break;
                        }
                    }
                }
                // Counted as each is acknowledged, so the stall watcher sees idle input as
                // nothing waiting.
                Some(delivery) = deliveries.join_next() => {
                    if let Err(error) = delivered(delivery, &progress) {
                        failed = Some(error);
                        break;
                    }
                }
                else => break,
            }
        }
        while let Some(delivery) = deliveries.join_next().await {
            if let Err(error) = delivered(delivery, &progress) {
                failed.get_or_insert(error);
            }
        }
        let closed = producer.close().await;
        if let Some(error) = failed {
            return Err(error);
        }
        closed?;
        let done = progress.done.load(Ordering::Relaxed);
        eprintln!("{done} records written to {topic}");
        Ok(())
    })
}

/// One delivery's outcome, counted when the record was acknowledged.
fn delivered(
    delivery: Result<
        sluice::client::Result<sluice::client::RecordMetadata>,
        tokio::task::JoinError,
    >,
    progress: &Progress,
) -> anyhow::Result<()> {
    delivery??;
    progress.done.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Records sent and not yet acknowledged, at most: beyond it input waits, so memory stays
/// flat on long inputs.
const OUTSTANDING_RECORDS_MAX: usize = 10_000;

/// Lines read ahead of the producer.
const READ_AHEAD_LINES: usize = 1_000;

/// The lines of standard input as they come, read on a thread of their own: a read blocks
/// until a line is typed, and the runtime (one thread) must meanwhile send what was typed
/// before and count acknowledgements. A plain thread, not `spawn_blocking`: the runtime's
/// shutdown would wait for a read of a terminal that may never end.
fn read_lines() -> mpsc::Receiver<std::io::Result<String>> {
    let (sender, lines) = mpsc::channel(READ_AHEAD_LINES);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let failed = line.is_err();
            if sender.blocking_send(line).is_err() || failed {
                return;
            }
        }
    });
    lines
}

/// The record for a line's key and value, with the flags' partition and headers.
fn record_of(
    args: &ProduceArgs,
    topic: &str,
    key: Option<String>,
    value: Option<String>,
) -> ProducerRecord {
    let mut record = ProducerRecord::new(topic, Bytes::new());
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
    record
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(ignore_error: bool) -> LineReader {
        LineReader {
            key_separator: Some(":".to_owned()),
            null_marker: None,
            ignore_error,
        }
    }

    #[test]
    fn a_line_without_the_key_separator_fails_as_kafka_unless_errors_are_ignored() {
        let split = reader(false).split("k:v".to_owned(), 1).expect("has a key");
        assert_eq!(split, (Some("k".to_owned()), Some("v".to_owned())));
        let error = reader(false)
            .split("no key".to_owned(), 7)
            .expect_err("no separator");
        assert_eq!(
            error.to_string(),
            "No key separator found on line number 7: 'no key'"
        );
        let split = reader(true).split("no key".to_owned(), 7).expect("ignored");
        assert_eq!(split, (None, Some("no key".to_owned())));
    }
}
