//! The tasks a worker runs. A source task reads its file's complete lines, sends them, and
//! only once the cluster acknowledged them writes the file position to the offsets topic, so
//! a kill -9 repeats at most the batch whose position was not yet written; on a worker with
//! `exactly.once.source.support=enabled` the records and the position are committed in one
//! transaction instead, so a kill -9 repeats nothing a read_committed reader sees. A sink task
//! consumes in the group `connect-<connector>`, writes what it read (a file, or another
//! topic), and only then commits, with the same bound.

use std::collections::BTreeMap;
use std::io::SeekFrom;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use tokio::sync::watch;

use super::data::{Converter, Data};
use super::plugins::Plugin;
use super::store::{Stores, TargetState, offset_key};
use super::{ConnectError, WorkerConfig};
use crate::client::{Consumer, Producer, ProducerRecord, TopicPartition};

/// A task's counters, shown on the worker's `/metrics`.
#[derive(Default)]
pub struct TaskCounters {
    /// Records sent (a source, once acknowledged) or written (a sink).
    pub records: std::sync::atomic::AtomicU64,
    /// Positions written (a source) or offset commits (a sink).
    pub commits: std::sync::atomic::AtomicU64,
}

impl TaskCounters {
    fn add_records(&self, n: usize) {
        self.records
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
    }

    fn add_commit(&self) {
        self.commits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What a task needs from its worker.
pub struct TaskContext {
    pub worker: Arc<WorkerConfig>,
    pub connector: String,
    pub task: u32,
    pub plugin: Plugin,
    pub config: BTreeMap<String, String>,
    pub key_converter: Converter,
    pub value_converter: Converter,
    /// The worker's producer (data and offsets of sources).
    pub producer: Producer,
    /// The worker's stores: source offsets are read there, and written there when the
    /// worker is standalone (a file).
    pub stores: Arc<Stores>,
    /// STARTED, PAUSED or STOPPED; the task ends when told to stop or at `shutdown`.
    pub target: watch::Receiver<TargetState>,
    pub shutdown: watch::Receiver<bool>,
    pub admin: crate::client::Admin,
    pub counters: Arc<TaskCounters>,
}

impl TaskContext {
    fn tolerate_all(&self) -> bool {
        self.config
            .get("errors.tolerance")
            .is_some_and(|value| value.trim() == "all")
    }

    fn stopping(&self) -> bool {
        *self.shutdown.borrow() || *self.target.borrow() == TargetState::Stopped
    }

    fn paused(&self) -> bool {
        *self.target.borrow() == TargetState::Paused
    }

    /// Returns once the task is told to stop.
    async fn stop_requested(&mut self) {
        while !self.stopping() {
            tokio::select! {
                changed = self.shutdown.changed() => if changed.is_err() { return },
                changed = self.target.changed() => if changed.is_err() { return },
            }
        }
    }

    /// Waits for `duration`, or less when told to stop or resume.
    async fn idle(&mut self, duration: Duration) {
        tokio::select! {
            _ = tokio::time::sleep(duration) => {}
            _ = self.shutdown.changed() => {}
            _ = self.target.changed() => {}
        }
    }
}

/// Runs a task until it is told to stop; Err is the failure its status reports.
pub async fn run(context: TaskContext) -> Result<(), ConnectError> {
    match context.plugin {
        Plugin::FileSource => file_source(context).await,
        Plugin::FileSink | Plugin::TopicSink => sink(context).await,
    }
}

fn required<'a>(config: &'a BTreeMap<String, String>, key: &str) -> Result<&'a str, ConnectError> {
    config
        .get(key)
        .map(|value| value.trim())
        .filter(|value| !value.is_empty())
        .ok_or_else(|| {
            ConnectError::BadRequest(format!("Missing required configuration \"{key}\""))
        })
}

/// Lines longer than this fail the task rather than grow a buffer without bound.
const LINE_BYTES_MAX: usize = 16 * 1024 * 1024;

/// An exactly-once source task's transactions (KIP-618): its own transactional producer
/// writes the records and then the position after them to the offsets topic, and commits
/// both at once. A worker killed mid-transaction leaves it to be aborted when the task's
/// next instance takes the same transactional id, which fences the old one; the next
/// instance then reads (read_committed) the last committed position.
struct Transactions {
    producer: Producer,
    /// `transaction.boundary=interval`: how long a transaction stays open; zero for `poll`
    /// (a transaction per batch of lines).
    interval: Duration,
    /// When the open transaction began.
    opened: Option<Instant>,
}

impl Transactions {
    /// The task's transactional producer, initialized (so an older instance is fenced and
    /// its open transaction aborted); none unless the worker runs sources exactly once.
    async fn start(context: &TaskContext) -> Result<Option<Transactions>, ConnectError> {
        let config = &context.config;
        if !context.worker.exactly_once_source {
            if config.get("exactly.once.support").map(|v| v.trim()) == Some("required") {
                return Err(ConnectError::BadRequest(
                    "exactly.once.support=required, but this worker runs sources at least once: \
                     set exactly.once.source.support=enabled on the workers"
                        .to_owned(),
                ));
            }
            return Ok(None);
        }
        let interval = match config.get("transaction.boundary").map(|v| v.trim()) {
            Some("interval") => config
                .get("transaction.boundary.interval.ms")
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map_or(context.worker.offset_flush_interval, Duration::from_millis),
            _ => Duration::ZERO,
        };
        // Kafka Connect's transactional id of a source task.
        let transactional_id = format!(
            "{}-{}-{}",
            context.worker.group_id, context.connector, context.task
        );
        let mut producer_config = context.worker.client_config(&context.worker.producer);
        producer_config.insert("transactional.id", &transactional_id);
        producer_config.insert("acks", "all");
        producer_config.insert("linger.ms", "1");
        let producer = Producer::new(producer_config)?;
        producer.init_transactions().await?;
        tracing::info!(connector = %context.connector, task = context.task, transactional_id, "the source task writes its records and offsets in transactions");
        Ok(Some(Transactions {
            producer,
            interval,
            opened: None,
        }))
    }

    /// Opens a transaction unless one is open.
    fn begin(&mut self) -> Result<(), ConnectError> {
        if self.opened.is_none() {
            self.producer.begin_transaction()?;
            self.opened = Some(Instant::now());
        }
        Ok(())
    }

    /// Writes `position` into the open transaction and commits it, when its boundary is
    /// reached or `now`. A failed commit fails the task, as in Kafka Connect: its records
    /// and position are aborted together, and the restarted task reads on from the last
    /// committed position.
    async fn commit(
        &mut self,
        context: &TaskContext,
        source_partition: &Value,
        position: u64,
        now: bool,
    ) -> Result<(), ConnectError> {
        let Some(opened) = self.opened else {
            return Ok(());
        };
        if !now && opened.elapsed() < self.interval {
            return Ok(());
        }
        write_offset(context, &self.producer, source_partition, position).await?;
        self.producer.commit_transaction().await?;
        self.opened = None;
        Ok(())
    }
}

async fn file_source(mut context: TaskContext) -> Result<(), ConnectError> {
    let path = required(&context.config, "file")?.to_owned();
    let topic = required(&context.config, "topic")?.to_owned();
    let batch_size = context
        .config
        .get("batch.size")
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(2000)
        .clamp(1, 1_000_000);
    let source_partition = json!({ "filename": path });
    // Before the offsets are read: taking the transactional id aborts what a killed
    // instance left open, so the position read is the last committed one.
    let mut transactions = Transactions::start(&context).await?;
    context
        .stores
        .offsets
        .read_to_end(&context.admin, Duration::from_secs(30))
        .await?;
    let mut position = {
        let offsets = context.stores.offsets.read();
        offsets
            .offsets
            .get(&context.connector)
            .and_then(|map| map.get(&source_partition.to_string()))
            .and_then(|(_, offset)| offset.get("position"))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    tracing::info!(connector = %context.connector, file = %path, position, "file source starts");
    let mut file: Option<tokio::fs::File> = None;
    let mut missing_said = false;
    // Bytes read past `position` that do not yet end a line.
    let mut pending: Vec<u8> = Vec::new();
    let mut unwritten_position: Option<u64> = None;
    let mut last_offset_write = Instant::now();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        if context.stopping() {
            break;
        }
        if context.paused() {
            // A transaction is not left open through a pause (it would time out).
            if let Some(transactions) = &mut transactions {
                transactions
                    .commit(&context, &source_partition, position, true)
                    .await?;
            }
            context.idle(Duration::from_secs(1)).await;
            continue;
        }
        if file.is_none() {
            match tokio::fs::File::open(&path).await {
                Ok(mut opened) => {
                    opened
                        .seek(SeekFrom::Start(position))
                        .await
                        .map_err(|source| ConnectError::Io {
                            what: format!("seeking {path} to {position}"),
                            source,
                        })?;
                    file = Some(opened);
                    pending.clear();
                }
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                    if !missing_said {
                        tracing::warn!(file = %path, "couldn't find file for FileStreamSourceTask, sleeping to wait for it to be created");
                        missing_said = true;
                    }
                    context.idle(Duration::from_secs(1)).await;
                    continue;
                }
                Err(source) => {
                    return Err(ConnectError::Io {
                        what: format!("opening {path}"),
                        source,
                    });
                }
            }
        }
        let Some(reader) = file.as_mut() else {
            continue;
        };
        // Complete lines, at most `batch_size`, and the position after each.
        let mut lines: Vec<(Vec<u8>, u64)> = Vec::new();
        let mut consumed = position;
        loop {
            while lines.len() < batch_size
                && let Some(end) = pending.iter().position(|&b| b == b'\n')
            {
                let mut line: Vec<u8> = pending.drain(..=end).collect();
                consumed += line.len() as u64;
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                lines.push((line, consumed));
            }
            if lines.len() >= batch_size {
                break;
            }
            if pending.len() > LINE_BYTES_MAX {
                return Err(ConnectError::Data(format!(
                    "{path}: a line at byte {consumed} is over {LINE_BYTES_MAX} bytes"
                )));
            }
            let n = reader
                .read(&mut buffer)
                .await
                .map_err(|source| ConnectError::Io {
                    what: format!("reading {path}"),
                    source,
                })?;
            if n == 0 {
                break;
            }
            pending.extend_from_slice(&buffer[..n]);
        }
        if lines.is_empty() {
            if let Some(transactions) = &mut transactions {
                // At its boundary: `interval` holds a transaction open through idle reads.
                transactions
                    .commit(&context, &source_partition, position, false)
                    .await?;
            } else if let Some(at) = unwritten_position.take() {
                write_offset(&context, &context.producer, &source_partition, at).await?;
                last_offset_write = Instant::now();
            }
            context.idle(Duration::from_millis(250)).await;
            continue;
        }
        if let Some(transactions) = &mut transactions {
            transactions.begin()?;
        }
        let producer = transactions
            .as_ref()
            .map_or(&context.producer, |t| &t.producer);
        let mut deliveries = Vec::with_capacity(lines.len());
        for (line, _) in &lines {
            let text = String::from_utf8_lossy(line).into_owned();
            let value = match context.value_converter.to_bytes(&Data::String(text)) {
                Ok(value) => value,
                Err(error) if context.tolerate_all() => {
                    tracing::warn!(connector = %context.connector, error = %error, "skipping a line");
                    continue;
                }
                Err(error) => return Err(error),
            };
            let key = context.key_converter.to_bytes(&Data::Null)?;
            let record = ProducerRecord {
                topic: topic.clone(),
                partition: None,
                key,
                value,
                headers: Vec::new(),
                timestamp: None,
            };
            deliveries.push(producer.send(record).await?);
        }
        let sent = deliveries.len();
        for delivery in deliveries {
            delivery.await?;
        }
        context.counters.add_records(sent);
        position = lines.last().map_or(position, |(_, at)| *at);
        if let Some(transactions) = &mut transactions {
            transactions
                .commit(&context, &source_partition, position, false)
                .await?;
        } else if last_offset_write.elapsed() >= context.worker.offset_flush_interval {
            write_offset(&context, &context.producer, &source_partition, position).await?;
            last_offset_write = Instant::now();
            unwritten_position = None;
        } else {
            unwritten_position = Some(position);
        }
        // Bytes of an incomplete line stay in `pending`; the file is read on from there.
    }
    if let Some(transactions) = &mut transactions {
        transactions
            .commit(&context, &source_partition, position, true)
            .await?;
    } else if let Some(at) = unwritten_position {
        write_offset(&context, &context.producer, &source_partition, at).await?;
    }
    Ok(())
}

/// Writes a source position to the offsets topic through `producer` (the worker's, or an
/// exactly-once task's inside its transaction), or to a standalone worker's file.
async fn write_offset(
    context: &TaskContext,
    producer: &Producer,
    source_partition: &Value,
    position: u64,
) -> Result<(), ConnectError> {
    context.counters.add_commit();
    let key = offset_key(&context.connector, source_partition);
    let value = Bytes::from(json!({ "position": position }).to_string());
    if context.stores.standalone() {
        return context
            .stores
            .write_local(
                &context.worker,
                &context.worker.offset_topic,
                key,
                Some(value),
            )
            .await;
    }
    let record = ProducerRecord {
        topic: context.worker.offset_topic.clone(),
        partition: None,
        key: Some(key),
        value: Some(value),
        headers: Vec::new(),
        timestamp: None,
    };
    producer.send(record).await?.await?;
    Ok(())
}

enum SinkOutput {
    File {
        path: String,
        file: tokio::io::BufWriter<tokio::fs::File>,
    },
    Topic {
        topic: String,
    },
}

async fn sink(mut context: TaskContext) -> Result<(), ConnectError> {
    let mut output = match context.plugin {
        Plugin::FileSink => {
            let path = required(&context.config, "file")?.to_owned();
            let file = tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .await
                .map_err(|source| ConnectError::Io {
                    what: format!("opening {path} to append"),
                    source,
                })?;
            SinkOutput::File {
                path,
                file: tokio::io::BufWriter::new(file),
            }
        }
        _ => SinkOutput::Topic {
            topic: required(&context.config, "target.topic")?.to_owned(),
        },
    };
    let group = format!("connect-{}", context.connector);
    let mut client = context.worker.client_config(&context.worker.consumer);
    client.insert("group.id", group.clone());
    client.insert("enable.auto.commit", "false");
    client.insert("auto.offset.reset", "earliest");
    client.insert(
        "client.id",
        format!("connector-consumer-{}-{}", context.connector, context.task),
    );
    let consumer = Consumer::new(client)?;
    let topics = context.config.get("topics").map_or("", |v| v.trim());
    if topics.is_empty() {
        consumer.subscribe_pattern(required(&context.config, "topics.regex")?)?;
    } else {
        let list: Vec<&str> = topics
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .collect();
        consumer.subscribe(&list)?;
    }
    let result = sink_loop(&mut context, &consumer, &mut output).await;
    let closed = consumer.close().await;
    result?;
    closed?;
    Ok(())
}

async fn sink_loop(
    context: &mut TaskContext,
    consumer: &Consumer,
    output: &mut SinkOutput,
) -> Result<(), ConnectError> {
    let mut uncommitted: BTreeMap<TopicPartition, i64> = BTreeMap::new();
    let mut last_commit = Instant::now();
    let mut was_paused = false;
    // Records sent to the target topic and not yet acknowledged: awaited before a commit.
    let mut deliveries = Vec::new();
    loop {
        if context.stopping() {
            break;
        }
        let paused = context.paused();
        if paused != was_paused {
            let assigned = consumer.assignment().await;
            if paused {
                consumer.pause(&assigned).await?;
            } else {
                consumer.resume(&assigned).await?;
            }
            was_paused = paused;
        }
        // A poll can wait for a whole rebalance of the connector's group (a dead member is
        // waited for up to its session timeout): a stop does not wait with it.
        let records = tokio::select! {
            records = consumer.poll(Duration::from_millis(500)) => records?,
            _ = context.stop_requested() => break,
        };
        if paused && !records.is_empty() {
            // Buffered before the pause: not written, read again after the resume.
            for record in &records {
                let tp = TopicPartition::new(record.topic.to_string(), record.partition);
                consumer.seek(&tp, record.offset).await?;
            }
            continue;
        }
        for record in &records {
            let key = context
                .key_converter
                .to_data(&record.topic, record.key.as_ref());
            let value = context
                .value_converter
                .to_data(&record.topic, record.value.as_ref());
            let (key, value) = match (key, value) {
                (Ok(key), Ok(value)) => (key, value),
                (Err(error), _) | (_, Err(error)) => {
                    if context.tolerate_all() {
                        tracing::warn!(connector = %context.connector, topic = %record.topic, partition = record.partition, offset = record.offset, error = %error, "skipping a record");
                        uncommitted.insert(
                            TopicPartition::new(record.topic.to_string(), record.partition),
                            record.offset + 1,
                        );
                        continue;
                    }
                    return Err(ConnectError::Data(format!(
                        "Tolerance exceeded in error handler: {error} (topic {} partition {} offset {})",
                        record.topic, record.partition, record.offset
                    )));
                }
            };
            match output {
                SinkOutput::File { path, file } => {
                    let mut line = value.to_line();
                    line.push(b'\n');
                    file.write_all(&line)
                        .await
                        .map_err(|source| ConnectError::Io {
                            what: format!("writing {path}"),
                            source,
                        })?;
                }
                SinkOutput::Topic { topic } => {
                    let record = ProducerRecord {
                        topic: topic.clone(),
                        partition: None,
                        key: context.key_converter.to_bytes(&key)?,
                        value: context.value_converter.to_bytes(&value)?,
                        headers: record.headers.clone(),
                        timestamp: Some(record.timestamp),
                    };
                    deliveries.push(context.producer.send(record).await?);
                }
            }
            uncommitted.insert(
                TopicPartition::new(record.topic.to_string(), record.partition),
                record.offset + 1,
            );
            context.counters.add_records(1);
        }
        // Committed once offset.flush.interval.ms has passed, or at once when the topics
        // have nothing more for now (as the source writes its position when the file does).
        if uncommitted.is_empty()
            || (!records.is_empty() && last_commit.elapsed() < context.worker.offset_flush_interval)
        {
            continue;
        }
        flush(output, &mut deliveries).await?;
        commit(context, consumer, &mut uncommitted).await;
        last_commit = Instant::now();
    }
    if !uncommitted.is_empty() {
        flush(output, &mut deliveries).await?;
        commit(context, consumer, &mut uncommitted).await;
    }
    Ok(())
}

async fn flush(
    output: &mut SinkOutput,
    deliveries: &mut Vec<crate::client::DeliveryFuture>,
) -> Result<(), ConnectError> {
    if let SinkOutput::File { path, file } = output {
        file.flush().await.map_err(|source| ConnectError::Io {
            what: format!("writing {path}"),
            source,
        })?;
    }
    for delivery in deliveries.drain(..) {
        delivery.await?;
    }
    Ok(())
}

/// Commits what was written. A failed commit (a rebalance took the partitions) is not the
/// task's failure: the records are written, and the next owner may write them again.
async fn commit(
    context: &TaskContext,
    consumer: &Consumer,
    uncommitted: &mut BTreeMap<TopicPartition, i64>,
) {
    let offsets = std::mem::take(uncommitted);
    context.counters.add_commit();
    if let Err(error) = consumer.commit_offsets(offsets).await {
        tracing::warn!(connector = %context.connector, task = context.task, error = %error, "committing the sink's offsets failed; the records after the last commit may be written again");
    }
}
