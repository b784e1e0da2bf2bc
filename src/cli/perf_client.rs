//! `sluice perf produce|consume`: the SDK's producer and consumer under load, with the flags
//! of Kafka's `kafka-producer-perf-test` and `kafka-consumer-perf-test`. The producer sends
//! `--num-records` records of `--record-size` bytes at up to `--throughput` records/s and
//! times each from send to acknowledgement; both print a progress line every few seconds and
//! a summary (or one JSON object with `--output json`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::bail;
use bytes::Bytes;
use clap::Args;
use serde::Serialize;
use sluice::client::{ClientConfig, Consumer, DeliveryFuture, Producer, ProducerRecord};
use tokio::sync::mpsc;

use super::common::{Connect, Format, parse_key_value};

const PROGRESS_EVERY: Duration = Duration::from_secs(5);

#[derive(Args)]
#[command(after_help = "Example (as kafka-producer-perf-test):
  sluice perf produce --topic bench --num-records 1000000 --record-size 100 \\
      --throughput -1 --producer-props acks=all linger.ms=5")]
pub struct ProduceArgs {
    /// The topic to write to (created with --partitions if it does not exist).
    #[arg(long)]
    topic: String,
    /// Records to send.
    #[arg(long, default_value_t = 1_000_000)]
    num_records: u64,
    /// Bytes per record value.
    #[arg(long, default_value_t = 100)]
    record_size: usize,
    /// Records per second to offer at most; -1 for as fast as the producer goes.
    #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
    throughput: i64,
    /// Producer settings, key=value (Kafka's names): --producer-props acks=all linger.ms=5
    #[arg(long, num_args = 1.., value_parser = parse_key_value)]
    producer_props: Vec<(String, String)>,
    /// Partitions of the topic when this creates it.
    #[arg(long, default_value_t = 1)]
    partitions: i32,
    /// text (progress lines and a summary) or json (one object at the end).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    output: Format,
    #[command(flatten)]
    connect: Connect,
}

#[derive(Args)]
#[command(after_help = "Example (as kafka-consumer-perf-test):
  sluice perf consume --topic bench --messages 1000000")]
pub struct ConsumeArgs {
    /// The topic to read, from its beginning.
    #[arg(long)]
    topic: String,
    /// Records to read before stopping.
    #[arg(long, default_value_t = 1_000_000)]
    messages: u64,
    /// Reads as a member of this group (otherwise every partition is assigned directly).
    #[arg(long)]
    group: Option<String>,
    /// Stops when no record arrives for this long (milliseconds).
    #[arg(long, default_value_t = 10_000)]
    timeout: u64,
    /// Consumer settings, key=value (Kafka's names): --consumer-props fetch.max.bytes=1048576
    #[arg(long, num_args = 1.., value_parser = parse_key_value)]
    consumer_props: Vec<(String, String)>,
    /// text or json.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    output: Format,
    #[command(flatten)]
    connect: Connect,
}

/// The producer's figures, as `--output json` prints them.
#[derive(Serialize)]
struct ProduceSummary {
    records: u64,
    records_per_sec: f64,
    mb_per_sec: f64,
    avg_ms: f64,
    p50_ms: f64,
    p95_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    max_ms: f64,
}

/// The consumer's figures.
#[derive(Serialize)]
struct ConsumeSummary {
    records: u64,
    records_per_sec: f64,
    mb_per_sec: f64,
    elapsed_s: f64,
}

/// Per-record latencies in microseconds, kept whole for exact percentiles (4 bytes each).
#[derive(Default)]
struct Latencies {
    micros: Vec<u32>,
    bytes: u64,
}

impl Latencies {
    fn record(&mut self, latency: Duration, bytes: usize) {
        self.micros
            .push(latency.as_micros().min(u128::from(u32::MAX)) as u32);
        self.bytes += bytes as u64;
    }

    fn summary(mut self, elapsed: Duration) -> ProduceSummary {
        self.micros.sort_unstable();
        let ms = |micros: u32| f64::from(micros) / 1e3;
        let at = |p: f64| {
            if self.micros.is_empty() {
                return 0.0;
            }
            let index = ((self.micros.len() as f64 * p) as usize).min(self.micros.len() - 1);
            ms(self.micros[index])
        };
        let records = self.micros.len() as u64;
        let seconds = elapsed.as_secs_f64().max(1e-9);
        ProduceSummary {
            records,
            records_per_sec: records as f64 / seconds,
            mb_per_sec: self.bytes as f64 / seconds / 1e6,
            avg_ms: self.micros.iter().map(|&m| f64::from(m)).sum::<f64>()
                / records.max(1) as f64
                / 1e3,
            p50_ms: at(0.5),
            p95_ms: at(0.95),
            p99_ms: at(0.99),
            p999_ms: at(0.999),
            max_ms: self.micros.last().copied().map_or(0.0, ms),
        }
    }
}

/// A progress line over the records acknowledged since the last one.
struct Progress {
    started: Instant,
    count: u64,
    bytes: u64,
    max: Duration,
    total: Duration,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            started: Instant::now(),
            count: 0,
            bytes: 0,
            max: Duration::ZERO,
            total: Duration::ZERO,
        }
    }

    fn add(&mut self, latency: Duration, bytes: usize) {
        self.count += 1;
        self.bytes += bytes as u64;
        self.max = self.max.max(latency);
        self.total += latency;
    }

    fn due(&self) -> bool {
        self.started.elapsed() >= PROGRESS_EVERY
    }

    fn print(&mut self) {
        let seconds = self.started.elapsed().as_secs_f64();
        eprintln!(
            "{} records sent, {:.1} records/sec ({:.2} MB/sec), {:.2} ms avg latency, {:.2} ms max latency.",
            self.count,
            self.count as f64 / seconds,
            self.bytes as f64 / seconds / 1e6,
            self.total.as_secs_f64() * 1e3 / self.count.max(1) as f64,
            self.max.as_secs_f64() * 1e3
        );
        *self = Progress::new();
    }
}

/// The client's tasks on two workers (this machine kind's cores); the calling thread drives
/// the benchmark loop.
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}

pub fn produce(args: ProduceArgs) -> anyhow::Result<()> {
    if args.record_size == 0 {
        bail!("--record-size must be at least 1");
    }
    let mut config: ClientConfig = args.connect.config()?;
    for (key, value) in &args.producer_props {
        config.insert(key, value.clone());
    }
    runtime()?.block_on(async move {
        args.connect.wait_for_broker().await?;
        // Created with --partitions if missing; refused if it has fewer; leaders known.
        super::perf_kafka::partition_leaders(&args.connect.config()?, &args.topic, args.partitions)
            .await?;
        let producer = Producer::new(config)?;
        // Kafka's tool sends random uppercase letters; the same here, one payload reused.
        let payload: Bytes = (0..args.record_size)
            .map(|i| b'A' + ((i * 7919) % 26) as u8)
            .collect::<Vec<u8>>()
            .into();
        // Deliveries are awaited in send order by a task of their own, which times each
        // record from its send to its acknowledgement.
        let (deliveries, mut pending) = mpsc::channel::<(Instant, DeliveryFuture)>(1 << 16);
        let record_size = args.record_size;
        let text = args.output == Format::Text;
        let progress_counts = Arc::new(super::common::Progress::default());
        let _watch =
            super::common::watch_stalls(progress_counts.clone(), args.connect.servers.clone());
        let done_counts = progress_counts.clone();
        let collector = tokio::spawn(async move {
            let mut latencies = Latencies::default();
            latencies.micros.reserve(1 << 16);
            let mut progress = Progress::new();
            let mut first_error = None;
            while let Some((sent, delivery)) = pending.recv().await {
                let outcome = delivery.await;
                done_counts.done.fetch_add(1, Ordering::Relaxed);
                match outcome {
                    Ok(_) => {
                        let latency = sent.elapsed();
                        latencies.record(latency, record_size);
                        progress.add(latency, record_size);
                    }
                    Err(error) => {
                        first_error.get_or_insert(error);
                    }
                }
                if text && progress.due() {
                    progress.print();
                }
            }
            (latencies, first_error)
        });
        let started = Instant::now();
        for sent_count in 0..args.num_records {
            if args.throughput > 0 {
                // Sleep when ahead of the offered rate (Kafka's ThroughputThrottler). A thread
                // sleep, not the runtime's millisecond timer: records go out evenly instead
                // of in bursts at each millisecond (this loop is the only work on this
                // thread; the producer's tasks run on the runtime's workers).
                let due = Duration::from_secs_f64(sent_count as f64 / args.throughput as f64);
                let ahead = due.saturating_sub(started.elapsed());
                if ahead > Duration::from_micros(50) {
                    std::thread::sleep(ahead);
                }
            }
            let record = ProducerRecord::new(&args.topic, payload.clone());
            let sent = Instant::now();
            let delivery = producer.send(record).await?;
            progress_counts.sent.fetch_add(1, Ordering::Relaxed);
            if deliveries.send((sent, delivery)).await.is_err() {
                break;
            }
        }
        drop(deliveries);
        producer.flush().await?;
        let (latencies, error) = collector.await?;
        let elapsed = started.elapsed();
        producer.close().await?;
        if let Some(error) = error {
            return Err(error.into());
        }
        let summary = latencies.summary(elapsed);
        match args.output {
            Format::Json => println!("{}", serde_json::to_string(&summary)?),
            Format::Text => println!(
                "{} records sent, {:.1} records/sec ({:.2} MB/sec), {:.2} ms avg latency, {:.2} ms max latency, {:.2} ms 50th, {:.2} ms 95th, {:.2} ms 99th, {:.2} ms 99.9th.",
                summary.records,
                summary.records_per_sec,
                summary.mb_per_sec,
                summary.avg_ms,
                summary.max_ms,
                summary.p50_ms,
                summary.p95_ms,
                summary.p99_ms,
                summary.p999_ms
            ),
        }
        Ok(())
    })
}

pub fn consume(args: ConsumeArgs) -> anyhow::Result<()> {
    let mut config: ClientConfig = args.connect.config()?;
    config.insert("auto.offset.reset", "earliest");
    if let Some(group) = &args.group {
        config.insert("group.id", group.clone());
    }
    for (key, value) in &args.consumer_props {
        config.insert(key, value.clone());
    }
    runtime()?.block_on(async move {
        args.connect.wait_for_broker().await?;
        let consumer = Consumer::new(config)?;
        let partitions = consumer.partitions_for(&args.topic).await?;
        match &args.group {
            Some(_) => consumer.subscribe(&[&args.topic])?,
            None => {
                consumer.assign(&partitions).await?;
                consumer.seek_to_beginning(&partitions).await?;
            }
        }
        let started = Instant::now();
        let mut last_record = Instant::now();
        let (mut records, mut bytes) = (0u64, 0u64);
        let mut progress_at = Instant::now();
        let mut progress_records = 0u64;
        while records < args.messages {
            if last_record.elapsed() >= Duration::from_millis(args.timeout) {
                eprintln!(
                    "no record for {} ms after {records} of {}; stopping (--timeout)",
                    args.timeout, args.messages
                );
                break;
            }
            let batch = consumer.poll(Duration::from_millis(100)).await?;
            if !batch.is_empty() {
                last_record = Instant::now();
            }
            for record in &batch {
                records += 1;
                bytes += record.value.as_ref().map_or(0, |v| v.len() as u64)
                    + record.key.as_ref().map_or(0, |k| k.len() as u64);
            }
            if args.output == Format::Text && progress_at.elapsed() >= PROGRESS_EVERY {
                let seconds = progress_at.elapsed().as_secs_f64();
                eprintln!(
                    "{records} records read, {:.1} records/sec",
                    (records - progress_records) as f64 / seconds
                );
                progress_at = Instant::now();
                progress_records = records;
            }
        }
        let elapsed = started.elapsed().as_secs_f64().max(1e-9);
        consumer.close().await?;
        let summary = ConsumeSummary {
            records,
            records_per_sec: records as f64 / elapsed,
            mb_per_sec: bytes as f64 / elapsed / 1e6,
            elapsed_s: elapsed,
        };
        match args.output {
            Format::Json => println!("{}", serde_json::to_string(&summary)?),
            Format::Text => println!(
                "{} records read in {:.2} s, {:.1} records/sec ({:.2} MB/sec).",
                summary.records, summary.elapsed_s, summary.records_per_sec, summary.mb_per_sec
            ),
        }
        Ok(())
    })
}
