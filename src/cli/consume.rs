//! `sluice consume TOPIC`: a console consumer on the SDK's [`Consumer`], as Kafka's
//! `kafka-console-consumer`: prints records as they arrive, from the end by default or from
//! the beginning, a partition and offset, or a consumer group's committed offsets.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use sluice::client::{ClientConfig, Consumer, ConsumerRecord, TopicPartition};

use super::common::{
    BROKER_WAIT_MS, BrokerProbe, Connect, STALL_REPORT_EVERY, Servers, block_on, parse_key_value,
    parse_property,
};
use super::produce::parse_bool;

/// How each record is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RecordFormat {
    /// The value only.
    Value,
    /// The key, the separator, the value.
    KeyValue,
    /// One JSON object per record: topic, partition, offset, timestamp, key, value, headers.
    Json,
}

/// kafka-console-consumer.sh's `--isolation-level` (the consumer's `isolation.level`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Isolation {
    /// Every record, transactional ones before their transaction ends too.
    #[value(name = "read_uncommitted")]
    ReadUncommitted,
    /// Only records of committed transactions (and non-transactional ones), up to the
    /// first transaction still open.
    #[value(name = "read_committed")]
    ReadCommitted,
}

impl Isolation {
    fn name(self) -> &'static str {
        match self {
            Isolation::ReadUncommitted => "read_uncommitted",
            Isolation::ReadCommitted => "read_committed",
        }
    }
}

#[derive(Args)]
#[command(override_usage = "sluice consume [OPTIONS] <TOPIC | --topic TOPIC | --include PATTERN>")]
#[command(after_help = "Examples:
  sluice consume orders --from-beginning                 every record, then new ones
  sluice consume orders --group billing                  as a member of group billing
  sluice consume orders --partition 2 --offset 100 --max-messages 10
  sluice consume --include 'orders-.*' --format json      every topic matching a pattern
  sluice consume orders --from-beginning --isolation-level read_committed
                                                         only committed transactions
  sluice consume --topic orders --from-beginning --property print.key=true \\
      --property key.separator=:                         as kafka-console-consumer.sh

--timeout-ms has kafka-console-consumer.sh's meaning (exit when no record arrives for that
long); the wait for a reachable broker at start is bounded by --broker-timeout-ms.")]
pub struct ConsumeArgs {
    /// The topic to read (or --topic, as kafka-console-consumer.sh takes it; or --include a
    /// pattern).
    #[arg(required_unless_present_any = ["include", "topic_flag"], conflicts_with = "topic_flag")]
    topic: Option<String>,
    /// The same, as Kafka's tools name it.
    #[arg(
        long = "topic",
        id = "topic_flag",
        value_name = "TOPIC",
        hide_short_help = true
    )]
    topic_flag: Option<String>,
    /// Reads every topic whose name matches this regular expression (through a group).
    #[arg(long, alias = "whitelist", conflicts_with_all = ["topic", "topic_flag"])]
    include: Option<String>,
    /// Starts at the oldest record when there is no committed offset (else at the end).
    #[arg(long)]
    from_beginning: bool,
    /// Reads only this partition (without a group).
    #[arg(long)]
    partition: Option<i32>,
    /// Where to start in --partition: an offset, earliest or latest.
    #[arg(long, requires = "partition")]
    offset: Option<String>,
    /// Reads as a member of this consumer group: partitions shared with its other members,
    /// starting from (and committing) the group's offsets.
    #[arg(long, conflicts_with = "partition")]
    group: Option<String>,
    /// Exits after this many records.
    #[arg(long)]
    max_messages: Option<u64>,
    /// Exits when no record arrives for this long (milliseconds), as kafka-console-consumer.sh.
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// How long to wait at start for a broker to answer before giving up (exit 3), in
    /// milliseconds (other commands call this --timeout-ms).
    #[arg(long, default_value_t = BROKER_WAIT_MS)]
    broker_timeout_ms: u64,
    /// How to print each record.
    #[arg(long, value_enum, default_value = "value")]
    format: RecordFormat,
    /// Between key and value with --format key-value.
    #[arg(long, default_value = "\t")]
    key_separator: String,
    /// kafka-console-consumer.sh's formatter properties: print.key, print.value,
    /// print.partition, print.offset, print.timestamp, print.headers (true|false),
    /// key.separator, line.separator, null.literal (repeatable). Any of them prints records
    /// as Kafka's default formatter does (so not with --format or --key-separator).
    #[arg(
        long = "property",
        value_parser = parse_property,
        conflicts_with_all = ["format", "key_separator"]
    )]
    formatter_properties: Vec<(String, String)>,
    /// Which records to print: every one (read_uncommitted), or only those of committed
    /// transactions, stopping before any transaction still open (read_committed).
    #[arg(long, value_enum, default_value_t = Isolation::ReadUncommitted)]
    isolation_level: Isolation,
    /// Any consumer setting, key=value (repeatable): --consumer-property fetch.min.bytes=1024
    #[arg(long = "consumer-property", value_parser = parse_key_value)]
    properties: Vec<(String, String)>,
    #[command(flatten)]
    servers: Servers,
}

pub fn run(mut args: ConsumeArgs) -> anyhow::Result<()> {
    if let Some(topic) = args.topic_flag.take() {
        args.topic = Some(topic);
    }
    let formatter = KafkaFormatter::new(&args.formatter_properties)?;
    let connect = Connect {
        servers: args.servers.clone(),
        broker_timeout_ms: args.broker_timeout_ms,
    };
    let mut config: ClientConfig = connect.config()?;
    config.insert("isolation.level", args.isolation_level.name());
    config.insert(
        "auto.offset.reset",
        if args.from_beginning {
            "earliest"
        } else {
            "latest"
        },
    );
    match (&args.group, &args.include) {
        (Some(group), _) => config.insert("group.id", group.clone()),
        (None, Some(_)) => {
            // A pattern needs a group; a throwaway one commits nothing, as Kafka's tool does.
            config.insert("group.id", format!("sluice-console-{}", std::process::id()));
            config.insert("enable.auto.commit", "false");
        }
        (None, None) => {}
    }
    for (key, value) in &args.properties {
        config.insert(key, value.clone());
    }
    block_on(async move {
        connect.wait_for_broker().await?;
        let consumer = Consumer::new(config)?;
        start(&consumer, &args).await?;
        let outcome = print_records(&consumer, &args, formatter.as_ref()).await;
        let closed = consumer.close().await;
        let count = outcome?;
        closed?;
        eprintln!("Processed a total of {count} messages");
        Ok(())
    })
}

/// Subscribes or assigns as the flags say, failing at once for a topic that does not exist.
async fn start(consumer: &Consumer, args: &ConsumeArgs) -> anyhow::Result<()> {
    if let Some(pattern) = &args.include {
        consumer.subscribe_pattern(pattern)?;
        return Ok(());
    }
    let topic = args.topic.as_deref().unwrap_or_default();
    let partitions = consumer.partitions_for(topic).await?;
    if args.group.is_some() {
        consumer.subscribe(&[topic])?;
        return Ok(());
    }
    let partitions = match args.partition {
        Some(partition) => {
            let tp = TopicPartition::new(topic, partition);
            if !partitions.contains(&tp) {
                anyhow::bail!(
                    "topic {topic} has no partition {partition} (it has {}); pick one below that",
                    partitions.len()
                );
            }
            vec![tp]
        }
        None => partitions,
    };
    consumer.assign(&partitions).await?;
    match args.offset.as_deref() {
        None => {}
        Some("earliest") => consumer.seek_to_beginning(&partitions).await?,
        Some("latest") => consumer.seek_to_end(&partitions).await?,
        Some(text) => {
            let offset: i64 = text.parse().map_err(|_| {
                anyhow::anyhow!("--offset {text:?} is not an offset, earliest or latest")
            })?;
            for tp in &partitions {
                consumer.seek(tp, offset).await?;
            }
        }
    }
    Ok(())
}

/// Prints records until --max-messages, --timeout-ms, Ctrl-C, or a closed output.
async fn print_records(
    consumer: &Consumer,
    args: &ConsumeArgs,
    formatter: Option<&KafkaFormatter>,
) -> anyhow::Result<u64> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut count = 0u64;
    let mut last_record = Instant::now();
    // While nothing arrives, whether a broker still answers is checked now and then: a broker
    // gone must not leave the consumer silent (an idle topic is no reason to speak).
    let mut last_check = Instant::now();
    let mut probe = BrokerProbe::new(&args.servers);
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        if args.max_messages.is_some_and(|max| count >= max) {
            break;
        }
        if let Some(timeout) = args.timeout_ms {
            if last_record.elapsed() >= Duration::from_millis(timeout) {
                break;
            }
        }
        let records = tokio::select! {
            records = consumer.poll(Duration::from_millis(200)) => records?,
            _ = &mut interrupted => break,
        };
        if !records.is_empty() {
            last_record = Instant::now();
        } else if last_record.elapsed() >= STALL_REPORT_EVERY
            && last_check.elapsed() >= STALL_REPORT_EVERY
        {
            last_check = Instant::now();
            // Ctrl-C ends a probe too (it may wait for a broker that does not answer).
            let (answers, state) = tokio::select! {
                state = probe.state() => state,
                _ = &mut interrupted => break,
            };
            if !answers {
                eprintln!("{state}");
            }
        }
        for record in records {
            if args.max_messages.is_some_and(|max| count >= max) {
                break;
            }
            let written = match formatter {
                Some(formatter) => out.write_all(formatter.format(&record).as_bytes()),
                None => writeln!(
                    out,
                    "{}",
                    format_record(&record, args.format, &args.key_separator)
                ),
            };
            if written.is_err() {
                return Ok(count); // the reader went away (`| head`)
            }
            count += 1;
        }
        if out.flush().is_err() {
            return Ok(count);
        }
    }
    Ok(count)
}

/// Kafka's `DefaultMessageFormatter`, as `--property print.key=true` etc. select: the fields
/// asked for in its order (timestamp, partition, offset, headers, key, value), each followed
/// by `key.separator`, the last by `line.separator`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaFormatter {
    print_timestamp: bool,
    print_partition: bool,
    print_offset: bool,
    print_headers: bool,
    print_key: bool,
    print_value: bool,
    key_separator: String,
    line_separator: String,
    null_literal: String,
}

impl KafkaFormatter {
    /// `None` when no property is given (the `--format` output then).
    pub fn new(properties: &[(String, String)]) -> anyhow::Result<Option<KafkaFormatter>> {
        if properties.is_empty() {
            return Ok(None);
        }
        let mut formatter = KafkaFormatter {
            print_timestamp: false,
            print_partition: false,
            print_offset: false,
            print_headers: false,
            print_key: false,
            print_value: true,
            key_separator: "\t".to_owned(),
            line_separator: "\n".to_owned(),
            null_literal: "null".to_owned(),
        };
        for (key, value) in properties {
            let flag = || parse_bool(key, value);
            match key.as_str() {
                "print.timestamp" => formatter.print_timestamp = flag()?,
                "print.partition" => formatter.print_partition = flag()?,
                "print.offset" => formatter.print_offset = flag()?,
                "print.headers" => formatter.print_headers = flag()?,
                "print.key" => formatter.print_key = flag()?,
                "print.value" => formatter.print_value = flag()?,
                "key.separator" => formatter.key_separator = value.clone(),
                "line.separator" => formatter.line_separator = value.clone(),
                "null.literal" => formatter.null_literal = value.clone(),
                _ => eprintln!(
                    "--property {key}: not a property of Kafka's default formatter that this consumer knows; ignored"
                ),
            }
        }
        Ok(Some(formatter))
    }

    /// The record as Kafka's console consumer prints it, line separator included.
    pub fn format(&self, record: &ConsumerRecord) -> String {
        let bytes = |value: &Option<bytes::Bytes>| match value {
            Some(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            None => self.null_literal.clone(),
        };
        let mut fields = Vec::new();
        if self.print_timestamp {
            fields.push(match record.timestamp_type {
                sluice::client::TimestampType::LogAppendTime => {
                    format!("LogAppendTime:{}", record.timestamp)
                }
                _ => format!("CreateTime:{}", record.timestamp),
            });
        }
        if self.print_partition {
            fields.push(format!("Partition:{}", record.partition));
        }
        if self.print_offset {
            fields.push(format!("Offset:{}", record.offset));
        }
        if self.print_headers {
            fields.push(if record.headers.is_empty() {
                "NO_HEADERS".to_owned()
            } else {
                record
                    .headers
                    .iter()
                    .map(|(k, v)| format!("{k}:{}", bytes(v)))
                    .collect::<Vec<_>>()
                    .join(",")
            });
        }
        if self.print_key {
            fields.push(bytes(&record.key));
        }
        if self.print_value {
            fields.push(bytes(&record.value));
        }
        fields.join(&self.key_separator) + &self.line_separator
    }
}

fn text(bytes: &Option<bytes::Bytes>) -> String {
    match bytes {
        Some(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        None => "null".to_owned(),
    }
}

fn format_record(record: &ConsumerRecord, format: RecordFormat, separator: &str) -> String {
    match format {
        RecordFormat::Value => text(&record.value),
        RecordFormat::KeyValue => {
            format!("{}{separator}{}", text(&record.key), text(&record.value))
        }
        RecordFormat::Json => {
            let json_bytes = |bytes: &Option<bytes::Bytes>| match bytes {
                Some(bytes) => {
                    serde_json::Value::String(String::from_utf8_lossy(bytes).into_owned())
                }
                None => serde_json::Value::Null,
            };
            let headers: BTreeMap<&str, serde_json::Value> = record
                .headers
                .iter()
                .map(|(k, v)| (k.as_str(), json_bytes(v)))
                .collect();
            serde_json::json!({
                "topic": &*record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "timestamp": record.timestamp,
                "key": json_bytes(&record.key),
                "value": json_bytes(&record.value),
                "headers": headers,
            })
            .to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> ConsumerRecord {
        ConsumerRecord {
            topic: "t".into(),
            partition: 2,
            offset: 7,
            timestamp: 1000,
            timestamp_type: sluice::client::TimestampType::CreateTime,
            key: None,
            value: Some(bytes::Bytes::from_static(b"v")),
            headers: vec![("h".into(), Some(bytes::Bytes::from_static(b"x")))],
            leader_epoch: None,
        }
    }

    fn formatted(properties: &[(&str, &str)]) -> String {
        let properties: Vec<(String, String)> = properties
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        KafkaFormatter::new(&properties)
            .expect("valid")
            .expect("a formatter")
            .format(&record())
    }

    #[test]
    fn properties_print_fields_in_kafka_default_formatter_order() {
        assert_eq!(formatted(&[("print.key", "true")]), "null\tv\n");
        assert_eq!(
            formatted(&[("print.key", "true"), ("key.separator", ":")]),
            "null:v\n"
        );
        assert_eq!(
            formatted(&[
                ("print.value", "false"),
                ("print.offset", "true"),
                ("print.timestamp", "true"),
                ("print.partition", "true"),
                ("print.headers", "true"),
            ]),
            "CreateTime:1000\tPartition:2\tOffset:7\th:x\n"
        );
        assert!(KafkaFormatter::new(&[]).expect("valid").is_none());
        assert!(KafkaFormatter::new(&[("print.key".into(), "yes".into())]).is_err());
    }
}
