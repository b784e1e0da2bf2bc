//! `sluice perf produce|consume`: a broker driven through its Kafka port by our own client
//! (`sluice::client`), without a client library's per-record work in the way: prebuilt
//! batches produced over several connections, and fetches that count bytes without decoding
//! records. Prints records/s, MB/s and request latency percentiles.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::Args;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, ProduceRequest, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use sluice::client::{Admin, ClientConfig, Connection, Error, NewTopic};
use sluice::log::batch::{BatchBuilder, BatchIter};
use sluice::protocol::errors;

#[derive(Args)]
pub struct ProduceArgs {
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap_server: String,
    #[arg(long)]
    topic: String,
    #[arg(long, default_value_t = 1)]
    partitions: i32,
    #[arg(long, default_value_t = 1024)]
    record_bytes: usize,
    /// Records per batch (one batch per produce request and partition).
    #[arg(long, default_value_t = 512)]
    batch_records: usize,
    /// -1 (all), 0 or 1.
    #[arg(long, default_value_t = 1, allow_hyphen_values = true)]
    acks: i16,
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Concurrent connections, each producing its share of partitions.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Client settings (Kafka's keys: security.protocol, ssl.*, sasl.*), to measure a TLS or
    /// SASL listener.
    #[arg(long)]
    command_config: Option<PathBuf>,
}

#[derive(Args)]
pub struct ConsumeArgs {
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap_server: String,
    #[arg(long)]
    topic: String,
    #[arg(long, default_value_t = 1)]
    partitions: i32,
    /// Bytes per fetch response (`fetch.max.bytes`, Kafka's default).
    #[arg(long, default_value_t = 50 << 20)]
    max_bytes: i32,
    /// Bytes per partition in a response (`max.partition.fetch.bytes`, Kafka's default).
    #[arg(long, default_value_t = 1 << 20)]
    partition_max_bytes: i32,
    /// Client settings (Kafka's keys: security.protocol, ssl.*, sasl.*), to measure a TLS or
    /// SASL listener.
    #[arg(long)]
    command_config: Option<PathBuf>,
}

/// The client settings of a benchmark: `--command-config`'s keys, the bootstrap server and
/// the benchmark's client id.
fn client_config(
    bootstrap: &str,
    command_config: Option<&PathBuf>,
) -> anyhow::Result<ClientConfig> {
    let mut config = match command_config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading --command-config {}", path.display()))?;
            ClientConfig::from_properties(&text)?
        }
        None => ClientConfig::default(),
    };
    config.insert("bootstrap.servers", bootstrap);
    config.insert("client.id", "sluice-perf");
    config.insert("request.timeout.ms", "30000");
    Ok(config)
}

fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() as f64 * p) as usize).min(sorted.len() - 1);
    sorted[index].as_secs_f64() * 1e3
}

pub fn produce(args: ProduceArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if args.acks == 0 {
        bail!("acks=0 has no response to time; use --acks 1 or -1");
    }
    runtime.block_on(async move {
        let value = vec![0x61u8; args.record_bytes];
        let mut builder = BatchBuilder::new(0, 0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        for _ in 0..args.batch_records {
            builder.push(now, None, Some(&value), &[]);
        }
        let batch = Bytes::from(builder.build());
        let records = Arc::new(AtomicU64::new(0));
        let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
        let started = Instant::now();
        let mut tasks = Vec::new();
        let config = client_config(&args.bootstrap_server, args.command_config.as_ref())?;
        let leaders = partition_leaders(&config, &args.topic, args.partitions).await?;
        let mut assignments: Vec<(String, Vec<i32>)> = Vec::new();
        for connection_index in 0..args.connections.max(1) {
            // Each connection its share of partitions; with fewer partitions than
            // connections, several connections write to the same partition.
            let mut partitions: Vec<i32> = (0..args.partitions)
                .filter(|p| *p as usize % args.connections.max(1) == connection_index)
                .collect();
            if partitions.is_empty() && args.partitions > 0 {
                partitions.push((connection_index % args.partitions as usize) as i32);
            }
            // One connection per leader among this share.
            let mut by_leader: BTreeMap<String, Vec<i32>> = BTreeMap::new();
            for p in partitions {
                let leader = leaders
                    .get(&p)
                    .cloned()
                    .unwrap_or_else(|| args.bootstrap_server.clone());
                by_leader.entry(leader).or_default().push(p);
            }
            assignments.extend(by_leader);
        }
        for (server, partitions) in assignments {
            let batch = batch.clone();
            let records = Arc::clone(&records);
            let topic = args.topic.clone();
            let (acks, per_batch) = (args.acks, args.batch_records as u64);
            let config = config.clone();
            tasks.push(tokio::spawn(async move {
                let connection = Connection::connect_with(&server, &config).await?;
                let mut latencies = Vec::new();
                while Instant::now() < deadline {
                    let request = ProduceRequest::default()
                        .with_acks(acks)
                        .with_timeout_ms(30_000)
                        .with_topic_data(vec![
                            TopicProduceData::default()
                                .with_name(topic_name(&topic))
                                .with_partition_data(
                                    partitions
                                        .iter()
                                        .map(|p| {
                                            PartitionProduceData::default()
                                                .with_index(*p)
                                                .with_records(Some(batch.clone()))
                                        })
                                        .collect(),
                                ),
                        ]);
                    let sent = Instant::now();
                    let response: ProduceResponse =
                        connection.call(ApiKey::Produce, 8, &request).await?;
                    latencies.push(sent.elapsed());
                    for topic in &response.responses {
                        for p in &topic.partition_responses {
                            if p.error_code != 0 {
                                return Err(partition_error(&topic.name.0, p.index, p.error_code));
                            }
                        }
                    }
                    records.fetch_add(per_batch * partitions.len() as u64, Ordering::Relaxed);
                }
                anyhow::Ok(latencies)
            }));
        }
        let mut latencies = Vec::new();
        for task in tasks {
            latencies.extend(task.await.context("producer task")??);
        }
        let elapsed = started.elapsed().as_secs_f64();
        latencies.sort();
        let records = records.load(Ordering::Relaxed);
        println!("produced_records {records}");
        println!("produce_records_s {:.0}", records as f64 / elapsed);
        println!(
            "produce_mb_s {:.1}",
            (records as f64 * args.record_bytes as f64) / elapsed / 1e6
        );
        println!("produce_request_p50_ms {:.2}", percentile(&latencies, 0.5));
        println!("produce_request_p99_ms {:.2}", percentile(&latencies, 0.99));
        println!(
            "produce_request_p999_ms {:.2}",
            percentile(&latencies, 0.999)
        );
        Ok(())
    })
}

/// Each partition's leader address. A topic that does not exist is created with
/// `partitions` partitions (the cluster's default replication factor); one with fewer
/// partitions than asked is refused, saying how to get more.
pub async fn partition_leaders(
    config: &ClientConfig,
    topic: &str,
    partitions: i32,
) -> anyhow::Result<BTreeMap<i32, String>> {
    let admin = Admin::new(config.clone())?;
    let topics = [topic.to_owned()];
    let metadata = admin.metadata(Some(&topics)).await?;
    let exists = metadata
        .topics
        .get(topic)
        .is_some_and(|t| t.error_code != errors::UNKNOWN_TOPIC_OR_PARTITION);
    if !exists {
        match admin
            .create_topics(&[NewTopic::new(topic, partitions.max(1), -1)], false)
            .await
        {
            Err(e) if e.code() == Some(errors::TOPIC_ALREADY_EXISTS) => {}
            other => other?,
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let metadata = admin.metadata(Some(&topics)).await?;
        let count = metadata.topics.get(topic).map_or(0, |t| t.partitions.len());
        if count > 0 && (count as i32) < partitions {
            bail!(
                "topic {topic} has {count} partitions and --partitions asks for {partitions}: \
                 use --partitions {count}, or add partitions with \
                 `sluice topics alter {topic} --partitions {partitions}`"
            );
        }
        let mut leaders = BTreeMap::new();
        for p in metadata
            .topics
            .get(topic)
            .map_or(&[][..], |t| &t.partitions)
        {
            if let Some(broker) = metadata.brokers.get(&p.leader) {
                leaders.insert(p.partition, broker.address());
            }
        }
        if count > 0 && leaders.len() >= partitions.max(0) as usize {
            return Ok(leaders);
        }
        if Instant::now() >= deadline {
            bail!(
                "topic {topic}: {} of {partitions} partitions have a leader after 30 s; \
                 `sluice topics describe {topic}` shows which",
                leaders.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A partition's error as the SDK names it (Kafka's name, what to do).
fn partition_error(topic: &str, partition: i32, code: i16) -> anyhow::Error {
    match Error::kafka(code, format!("partition {topic}-{partition}"), None) {
        Some(error) => error.into(),
        None => anyhow::anyhow!("partition {topic}-{partition}: no error"),
    }
}

pub fn consume(args: ConsumeArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let config = client_config(&args.bootstrap_server, args.command_config.as_ref())?;
        let connection = Connection::connect_with(&args.bootstrap_server, &config).await?;
        let mut offsets: Vec<i64> = vec![0; args.partitions.max(0) as usize];
        let mut ends: Vec<i64> = vec![i64::MAX; offsets.len()];
        let (mut bytes, mut records) = (0u64, 0u64);
        let started = Instant::now();
        while offsets.iter().zip(&ends).any(|(o, e)| o < e) {
            let request = FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(100)
                .with_min_bytes(1)
                .with_max_bytes(args.max_bytes)
                .with_topics(vec![
                    FetchTopic::default()
                        .with_topic(topic_name(&args.topic))
                        .with_partitions(
                            offsets
                                .iter()
                                .enumerate()
                                .map(|(p, offset)| {
                                    FetchPartition::default()
                                        .with_partition(p as i32)
                                        .with_fetch_offset(*offset)
                                        .with_partition_max_bytes(args.partition_max_bytes)
                                })
                                .collect(),
                        ),
                ]);
            let response: FetchResponse = connection.call(ApiKey::Fetch, 12, &request).await?;
            for topic in &response.responses {
                for p in &topic.partitions {
                    if p.error_code != 0 {
                        return Err(partition_error(
                            &args.topic,
                            p.partition_index,
                            p.error_code,
                        ));
                    }
                    let index = p.partition_index as usize;
                    ends[index] = p.high_watermark;
                    let Some(data) = &p.records else { continue };
                    bytes += data.len() as u64;
                    for (_, header, _) in BatchIter::new(data).filter_map(Result::ok) {
                        if header.last_offset() >= offsets[index] {
                            records += header.records_count.max(0) as u64;
                            offsets[index] = header.last_offset() + 1;
                        }
                    }
                }
            }
        }
        let elapsed = started.elapsed().as_secs_f64();
        println!("consumed_records {records}");
        println!("consume_records_s {:.0}", records as f64 / elapsed);
        println!("consume_mb_s {:.1}", bytes as f64 / elapsed / 1e6);
        Ok(())
    })
}

#[derive(Args)]
pub struct IdleConsumersArgs {
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap_server: String,
    /// A topic with at least `consumers + 1` partitions: the producer writes partition 0,
    /// consumer i long-polls partition i + 1 (which stays empty).
    #[arg(long)]
    topic: String,
    #[arg(long, default_value_t = 1000)]
    consumers: usize,
    /// How long each idle fetch waits for records (`fetch.max.wait.ms`).
    #[arg(long, default_value_t = 500)]
    max_wait_ms: i32,
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    #[arg(long, default_value_t = 100)]
    record_bytes: usize,
    #[arg(long, default_value_t = 1, allow_hyphen_values = true)]
    acks: i16,
    /// The broker's process id, to measure its CPU time over the run (/proc/<pid>/stat).
    #[arg(long)]
    broker_pid: Option<u32>,
}

/// User + system CPU seconds of a process so far.
fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("unexpected /proc stat format")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: f64 = fields
        .get(11..13)
        .context("short /proc stat line")?
        .iter()
        .map(|f| f.parse::<f64>().unwrap_or(0.0))
        .sum();
    // SAFETY: sysconf reads a constant of the system.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok(ticks / per_second)
}

/// The raw limit a small request's latency compares with: round trips of `bytes` over a TCP
/// loopback connection (p50, p99 in ms).
fn loopback_round_trips(bytes: usize, count: usize) -> anyhow::Result<(f64, f64)> {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut stream, _) = listener.accept()?;
        stream.set_nodelay(true)?;
        let mut buffer = vec![0u8; bytes];
        loop {
            if stream.read_exact(&mut buffer).is_err() {
                return Ok(());
            }
            stream.write_all(&buffer)?;
        }
    });
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    let (message, mut answer) = (vec![0x5au8; bytes], vec![0u8; bytes]);
    let mut latencies = Vec::with_capacity(count);
    for _ in 0..count {
        let sent = Instant::now();
        stream.write_all(&message)?;
        stream.read_exact(&mut answer)?;
        latencies.push(sent.elapsed());
    }
    drop(stream);
    let _ = echo.join();
    latencies.sort();
    Ok((percentile(&latencies, 0.5), percentile(&latencies, 0.99)))
}

/// One producer beside `consumers` idle long-polling consumers (one connection each, each on
/// its own empty partition): the producer's request latency and the broker's CPU must not grow
/// with the number of idle consumers (the purgatory wakes only the partition written).
pub fn idle_consumers(args: IdleConsumersArgs) -> anyhow::Result<()> {
    let (loopback_p50, loopback_p99) = loopback_round_trips(args.record_bytes + 100, 5_000)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let needed = args.consumers as i32 + 1;
        let config = client_config(&args.bootstrap_server, None)?;
        let leaders = partition_leaders(&config, &args.topic, needed).await?;
        let server = leaders
            .get(&0)
            .cloned()
            .unwrap_or_else(|| args.bootstrap_server.clone());
        let fetches = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut consumers = Vec::with_capacity(args.consumers);
        for index in 0..args.consumers {
            let partition = index as i32 + 1;
            let server = leaders.get(&partition).cloned().unwrap_or(server.clone());
            let (topic, fetches, stop) =
                (args.topic.clone(), Arc::clone(&fetches), Arc::clone(&stop));
            let max_wait_ms = args.max_wait_ms;
            consumers.push(tokio::spawn(async move {
                let connection = Connection::connect(&server, Duration::from_secs(30)).await?;
                while !stop.load(Ordering::Relaxed) {
                    let request = FetchRequest::default()
                        .with_replica_id(BrokerId(-1))
                        .with_max_wait_ms(max_wait_ms)
                        .with_min_bytes(1)
                        .with_max_bytes(1 << 20)
                        .with_topics(vec![
                            FetchTopic::default()
                                .with_topic(topic_name(&topic))
                                .with_partitions(vec![
                                    FetchPartition::default()
                                        .with_partition(partition)
                                        .with_fetch_offset(0)
                                        .with_partition_max_bytes(1 << 20),
                                ]),
                        ]);
                    let response: FetchResponse =
                        connection.call(ApiKey::Fetch, 12, &request).await?;
                    for p in response.responses.iter().flat_map(|t| &t.partitions) {
                        if p.error_code != 0 {
                            return Err(partition_error(&topic, p.partition_index, p.error_code));
                        }
                    }
                    fetches.fetch_add(1, Ordering::Relaxed);
                }
                anyhow::Ok(())
            }));
        }
        // Every consumer connected and waiting before the measurement starts.
        tokio::time::sleep(Duration::from_millis(
            args.max_wait_ms.max(0) as u64 * 2 + 1000,
        ))
        .await;
        let value = vec![0x61u8; args.record_bytes];
        let connection = Connection::connect(&server, Duration::from_secs(30)).await?;
        let cpu_before = args.broker_pid.map(cpu_seconds).transpose()?;
        let fetches_before = fetches.load(Ordering::Relaxed);
        let started = Instant::now();
        let deadline = started + Duration::from_secs_f64(args.seconds);
        let mut latencies = Vec::new();
        while Instant::now() < deadline {
            let mut builder = BatchBuilder::new(0, 0);
            builder.push(0, None, Some(&value), &[]);
            let request = ProduceRequest::default()
                .with_acks(args.acks)
                .with_timeout_ms(30_000)
                .with_topic_data(vec![
                    TopicProduceData::default()
                        .with_name(topic_name(&args.topic))
                        .with_partition_data(vec![
                            PartitionProduceData::default()
                                .with_index(0)
                                .with_records(Some(Bytes::from(builder.build()))),
                        ]),
                ]);
            let sent = Instant::now();
            let response: ProduceResponse = connection.call(ApiKey::Produce, 8, &request).await?;
            latencies.push(sent.elapsed());
            for p in response
                .responses
                .iter()
                .flat_map(|t| &t.partition_responses)
            {
                if p.error_code != 0 {
                    return Err(partition_error(&args.topic, p.index, p.error_code));
                }
            }
        }
        let elapsed = started.elapsed().as_secs_f64();
        let cpu = match (args.broker_pid, cpu_before) {
            (Some(pid), Some(before)) => Some(cpu_seconds(pid)? - before),
            _ => None,
        };
        let fetched = fetches.load(Ordering::Relaxed) - fetches_before;
        stop.store(true, Ordering::Relaxed);
        for consumer in consumers {
            consumer.abort();
            if let Ok(Err(error)) = consumer.await {
                bail!("an idle consumer failed: {error:#}");
            }
        }
        latencies.sort();
        let (p50, p99) = (percentile(&latencies, 0.5), percentile(&latencies, 0.99));
        println!("idle_consumers {}", args.consumers);
        println!("produce_requests {}", latencies.len());
        println!("produce_request_p50_ms {p50:.3}");
        println!("produce_request_p99_ms {p99:.3}");
        println!("loopback_round_trip_p50_ms {loopback_p50:.3}");
        println!("loopback_round_trip_p99_ms {loopback_p99:.3}");
        println!("produce_p99_over_loopback_p99 {:.1}", p99 / loopback_p99);
        println!("idle_fetches_answered_s {:.0}", fetched as f64 / elapsed);
        if let Some(cpu) = cpu {
            println!("broker_cpu_percent {:.1}", cpu / elapsed * 100.0);
            println!(
                "broker_cpu_us_per_produce {:.1}",
                cpu * 1e6 / latencies.len().max(1) as f64
            );
        }
        Ok(())
    })
}
