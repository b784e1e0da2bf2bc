//! `sluice perf`: benchmarks whose figures are printed beside the raw limit of this machine,
//! measured in the same run, so that the ratio (not the absolute number) is what is compared.
//!
//! `sluice perf log` measures, in `--dir`:
//! - raw sequential write (positional writes of the same total bytes + one fdatasync) and raw
//!   sequential read (after dropping the file from the page cache);
//! - log append throughput, 1 KiB records in 16 KiB batches, with `flush.policy=interval`
//!   (and a final flush, as the raw write has its fdatasync), and with `flush.policy=always`
//!   from one and from `--appenders` concurrent appenders (group commit);
//! - sequential log read throughput, from cold cache like the raw read;
//! - restart time after `kill -9` of a process that wrote `--restart-bytes` with a running
//!   log manager.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use sluice::log::batch::BatchBuilder;
use sluice::log::{
    AppendOrigin, FlushPolicy, LoadState, Log, LogConfig, LogManager, LogManagerConfig,
    SystemClock, TopicPartition,
};

#[derive(Subcommand)]
pub enum Target {
    /// The metadata quorum: commit latency and topic-creation throughput on three real
    /// nodes, beside RocksDB's synced-write latency measured in the same run.
    Quorum(QuorumArgs),
    /// The storage engine: append, read and restart throughput against raw disk bandwidth.
    Log(LogArgs),
    /// The SDK producer against a running broker, with kafka-producer-perf-test's flags:
    /// records/s, MB/s, per-record latency p50/p95/p99/p99.9/max, progress every 5 s.
    Produce(super::perf_client::ProduceArgs),
    /// The SDK consumer reading a topic from its beginning, with kafka-consumer-perf-test's
    /// flags: records/s, MB/s.
    Consume(super::perf_client::ConsumeArgs),
    /// The broker's own limit: prebuilt batches produced over several connections, without a
    /// client's per-record work; records/s, MB/s, request latency.
    ProduceBatches(super::perf_kafka::ProduceArgs),
    /// One producer beside many idle long-polling consumers (one connection and one empty
    /// partition each): produce latency and broker CPU, beside TCP loopback round trips.
    IdleConsumers(super::perf_kafka::IdleConsumersArgs),
    /// Fetch a topic from offset 0 to its high watermark with raw fetches (records counted,
    /// not decoded); records/s, MB/s.
    ConsumeBatches(super::perf_kafka::ConsumeArgs),
    /// Kafka's authorizer decision over many ACLs (`--acls`, default 10,000): per-request
    /// authorization cost beside a hash-map lookup per decision, and the index rebuild.
    Authorizer(super::perf_authorizer::AuthorizerArgs),
    /// The raw limits other benchmarks compare with, as `name value` lines: disk write
    /// bandwidth (pwrite + fdatasync) in DIR and TCP loopback copy bandwidth.
    Raw {
        #[arg(long, default_value = "data/perf-raw")]
        dir: PathBuf,
        #[arg(long, default_value = "1GiB", value_parser = parse_bytes)]
        total_bytes: u64,
    },
    /// Internal: a process that appends to a log until it is killed with SIGKILL (the
    /// restart measurement and the kill -9 tests drive it).
    #[command(hide = true)]
    LogWriter {
        #[arg(long)]
        dir: PathBuf,
        /// Prints `ready` after this many bytes (and keeps appending with `--print-acks`).
        #[arg(long, value_parser = parse_bytes)]
        bytes: u64,
        #[arg(long, default_value = "interval")]
        flush_policy: String,
        /// Prints `ack <last offset>` after every acknowledged append, and never stops.
        #[arg(long)]
        print_acks: bool,
    },
}

#[derive(Args)]
pub struct LogArgs {
    /// Where to write (on the disk to measure); emptied first.
    #[arg(long, default_value = "data/perf")]
    dir: PathBuf,
    /// Bytes written by each throughput measurement (e.g. 1GiB, 64MiB).
    #[arg(long, default_value = "1GiB", value_parser = parse_bytes)]
    total_bytes: u64,
    /// Size of the log killed and restarted.
    /// Size of the log killed and restarted; the default leaves a nearly full 1 GiB active
    /// segment to rescan, the worst case for a 2 GiB log.
    #[arg(long, default_value = "2047MiB", value_parser = parse_bytes)]
    restart_bytes: u64,
    /// Concurrent appenders for the `always` policy.
    #[arg(long, default_value_t = 8)]
    appenders: usize,
    #[arg(long, default_value = "1KiB", value_parser = parse_bytes)]
    record_bytes: u64,
    #[arg(long, default_value = "16KiB", value_parser = parse_bytes)]
    batch_bytes: u64,
}

#[derive(Args)]
pub struct QuorumArgs {
    /// Where the three nodes keep their data; emptied first.
    #[arg(long, default_value = "data/perf-quorum")]
    dir: PathBuf,
    /// Topics to create.
    #[arg(long, default_value_t = 1000)]
    topics: usize,
    #[arg(long, default_value_t = 3)]
    partitions: i32,
    /// Concurrent creators for the throughput run.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
}

/// `123`, `16KiB`, `64MiB`, `2GiB` (also KB/MB/GB as powers of 1024).
fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a size"))?;
    let factor = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(format!("unknown unit '{unit}' in '{text}'")),
    };
    number
        .checked_mul(factor)
        .ok_or_else(|| format!("'{text}' is too large"))
}

pub fn run(target: Target) -> anyhow::Result<()> {
    match target {
        Target::Log(args) => perf_log(&args),
        Target::Authorizer(args) => super::perf_authorizer::run(args),
        Target::Produce(args) => super::perf_client::produce(args),
        Target::Consume(args) => super::perf_client::consume(args),
        Target::ProduceBatches(args) => super::perf_kafka::produce(args),
        Target::ConsumeBatches(args) => super::perf_kafka::consume(args),
        Target::IdleConsumers(args) => super::perf_kafka::idle_consumers(args),
        Target::Raw { dir, total_bytes } => {
            fs::create_dir_all(&dir)?;
            let path = dir.join("raw-write");
            let write = raw_write(&path, total_bytes)?;
            let _ = fs::remove_file(&path);
            let loopback = loopback_copy(total_bytes)?;
            println!("raw_disk_write_mb_s {:.1}", write.mb_per_s());
            println!("loopback_copy_mb_s {:.1}", loopback.mb_per_s());
            Ok(())
        }
        Target::Quorum(args) => {
            super::perf_quorum::run(&args.dir, args.topics, args.partitions, args.concurrency)
        }
        Target::LogWriter {
            dir,
            bytes,
            flush_policy,
            print_acks,
        } => log_writer(&dir, bytes, &flush_policy, print_acks),
    }
}

const MB: f64 = 1_000_000.0;

struct Figure {
    name: String,
    bytes: u64,
    elapsed: Duration,
}

impl Figure {
    fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / MB / self.elapsed.as_secs_f64().max(1e-9)
    }
    fn print(&self, reference: Option<(&str, &Figure)>) {
        let ratio = reference.map_or(String::new(), |(label, r)| {
            format!("  {:>5.2}x {label}", self.mb_per_s() / r.mb_per_s())
        });
        println!("{:<56} {:>9.1} MB/s{ratio}", self.name, self.mb_per_s());
    }
}

/// Empties the page cache for a cold read: `/proc/sys/vm/drop_caches` when this process may
/// write it (root), else `posix_fadvise(DONTNEED)` on the files named (which can leave
/// recently read pages behind).
fn drop_page_cache(paths: &[PathBuf]) -> anyhow::Result<()> {
    if std::env::var_os("SLUICE_PERF_HOT").is_some() {
        return Ok(());
    }
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    if fs::write("/proc/sys/vm/drop_caches", "1").is_ok() {
        return Ok(());
    }
    for path in paths {
        let file = File::open(path)?;
        // SAFETY: an advisory call on a descriptor we own.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if rc != 0 {
            bail!("posix_fadvise failed on {}: {rc}", path.display());
        }
    }
    Ok(())
}

fn segment_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "log") {
            files.push(path);
        }
    }
    Ok(files)
}

fn perf_log(args: &LogArgs) -> anyhow::Result<()> {
    if args.record_bytes == 0 || args.batch_bytes < args.record_bytes {
        bail!("--batch-bytes must hold at least one record of --record-bytes");
    }
    if args.dir.exists() {
        fs::remove_dir_all(&args.dir)
            .with_context(|| format!("emptying {}", args.dir.display()))?;
    }
    fs::create_dir_all(&args.dir)?;
    println!(
        "sluice perf log: dir {}, {} MiB per run, {} B records in {} B batches",
        args.dir.display(),
        args.total_bytes >> 20,
        args.record_bytes,
        args.batch_bytes
    );
    // The disk's speed drifts from minute to minute (a virtual disk with a host cache):
    // each log measurement runs right after the raw one it is compared with, three times,
    // and the median ratio is reported.
    let batch = template_batch(args.record_bytes, args.batch_bytes);
    let raw_path = args.dir.join("raw");
    let log_dir = args.dir.join("log");
    let mut writes = Vec::new();
    let mut reads = Vec::new();
    for _ in 0..3 {
        let raw = raw_write(&raw_path, args.total_bytes)?;
        let _ = fs::remove_dir_all(&log_dir);
        let log = log_append(&log_dir, &batch, args.total_bytes, 1, FlushPolicy::Interval)?;
        writes.push((raw, log));
        // A first read of freshly written data runs at the speed of the host's storage behind
        // this virtual disk, whatever reads it; read both once to settle that, then measure
        // both from the guest's cold page cache.
        for _ in 0..2 {
            let mut files = segment_files(&log_dir)?;
            files.push(raw_path.clone());
            drop_page_cache(&files)?;
            let raw = raw_read(&raw_path)?;
            drop_page_cache(&files)?;
            let log = log_read(&log_dir)?;
            reads.push((raw, log));
        }
        reads.remove(reads.len() - 2);
    }
    fs::remove_file(&raw_path)?;
    fs::remove_dir_all(&log_dir)?;
    let (raw_write, append) = median_pair(writes);
    raw_write.print(None);
    append.print(Some(("raw write", &raw_write)));
    let always_bytes = args.total_bytes / 4;
    for appenders in [1, args.appenders] {
        let dir = args.dir.join(format!("always-{appenders}"));
        let always = log_append(&dir, &batch, always_bytes, appenders, FlushPolicy::Always)?;
        always.print(Some(("raw write", &raw_write)));
        fs::remove_dir_all(&dir)?;
    }
    let (raw_read, read) = median_pair(reads);
    raw_read.print(None);
    read.print(Some(("raw read", &raw_read)));

    restart_after_kill(&args.dir.join("restart"), args.restart_bytes)?;
    fs::remove_dir_all(&args.dir)?;
    Ok(())
}

/// The (raw, log) pair with the median log/raw ratio.
fn median_pair(mut pairs: Vec<(Figure, Figure)>) -> (Figure, Figure) {
    pairs.sort_by(|a, b| {
        (a.1.mb_per_s() / a.0.mb_per_s()).total_cmp(&(b.1.mb_per_s() / b.0.mb_per_s()))
    });
    let middle = pairs.len() / 2;
    pairs.swap_remove(middle)
}

fn raw_write(path: &Path, total: u64) -> anyhow::Result<Figure> {
    let _ = fs::remove_file(path);
    let file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(path)?;
    let chunk = vec![0x5au8; 1 << 20];
    let started = Instant::now();
    let mut written = 0u64;
    while written < total {
        let n = chunk.len().min((total - written) as usize);
        file.write_all_at(&chunk[..n], written)?;
        written += n as u64;
    }
    file.sync_data()?;
    Ok(Figure {
        name: "raw write (pwrite + fdatasync)".into(),
        bytes: total,
        elapsed: started.elapsed(),
    })
}

/// Bytes sent through a TCP loopback connection and read on the other side, 1 MiB at a time.
fn loopback_copy(total: u64) -> anyhow::Result<Figure> {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let reader = std::thread::spawn(move || -> std::io::Result<u64> {
        let (mut stream, _) = listener.accept()?;
        let mut buffer = vec![0u8; 1 << 20];
        let mut read = 0u64;
        loop {
            match stream.read(&mut buffer)? {
                0 => return Ok(read),
                n => read += n as u64,
            }
        }
    });
    let mut stream = std::net::TcpStream::connect(addr)?;
    let chunk = vec![0x5au8; 1 << 20];
    let started = Instant::now();
    let mut sent = 0u64;
    while sent < total {
        let n = chunk.len().min((total - sent) as usize);
        stream.write_all(&chunk[..n])?;
        sent += n as u64;
    }
    drop(stream);
    let read = reader
        .join()
        .map_err(|_| anyhow::anyhow!("loopback reader panicked"))??;
    anyhow::ensure!(read == total, "loopback read {read} of {total} bytes");
    Ok(Figure {
        name: "loopback copy (TCP, 1 MiB writes)".into(),
        bytes: total,
        elapsed: started.elapsed(),
    })
}

fn raw_read(path: &Path) -> anyhow::Result<Figure> {
    let mut file = File::open(path)?;
    let mut buffer = vec![0u8; 1 << 20];
    let started = Instant::now();
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    Ok(Figure {
        name: "raw read (cold cache)".into(),
        bytes: total,
        elapsed: started.elapsed(),
    })
}

/// One batch of `batch_bytes / record_bytes` records; appends reuse copies of it (the leader
/// rewrites only offset and epoch, which the CRC does not cover).
fn template_batch(record_bytes: u64, batch_bytes: u64) -> Vec<u8> {
    let records = (batch_bytes / record_bytes).max(1);
    let value = vec![0x61u8; record_bytes.saturating_sub(16) as usize];
    let mut builder = BatchBuilder::new(0, 1_700_000_000_000);
    for n in 0..records {
        builder.push(
            1_700_000_000_000,
            Some(format!("key-{n:08}").as_bytes()),
            Some(&value),
            &[],
        );
    }
    builder.build()
}

fn open_log(dir: &Path, policy: FlushPolicy) -> anyhow::Result<Log> {
    let config = LogConfig {
        flush_policy: policy,
        ..LogConfig::default()
    };
    let (log, _) = Log::open(
        dir,
        TopicPartition::new("perf", 0),
        config,
        LoadState::default(),
        Arc::new(SystemClock),
    )?;
    Ok(log)
}

fn log_append(
    dir: &Path,
    batch: &[u8],
    total: u64,
    appenders: usize,
    policy: FlushPolicy,
) -> anyhow::Result<Figure> {
    let log = Arc::new(open_log(dir, policy)?);
    let batches_each = (total / batch.len() as u64 / appenders as u64).max(1);
    let started = Instant::now();
    let threads: Vec<_> = (0..appenders)
        .map(|_| {
            let log = Arc::clone(&log);
            let buffer = batch.to_vec();
            std::thread::spawn(move || -> anyhow::Result<()> {
                for _ in 0..batches_each {
                    log.append_as_leader(&buffer, 0, AppendOrigin::Client)?;
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread
            .join()
            .map_err(|_| anyhow::anyhow!("appender panicked"))??;
    }
    log.flush()?;
    let elapsed = started.elapsed();
    let batches = batches_each * appenders as u64;
    let flushes = log.flush_count();
    log.close()?;
    let policy = match policy {
        FlushPolicy::Interval => "interval",
        FlushPolicy::Always => "always",
    };
    let grouping = if flushes > 1 {
        format!(", {:.1} batches/fsync", batches as f64 / flushes as f64)
    } else {
        String::new()
    };
    Ok(Figure {
        name: format!("log append, {policy}, {appenders} appender(s){grouping}"),
        bytes: batches * batch.len() as u64,
        elapsed,
    })
}

fn log_read(dir: &Path) -> anyhow::Result<Figure> {
    let load = LoadState {
        clean_shutdown: true,
        recovery_point: u64::MAX,
        ..LoadState::default()
    };
    let (log, _) = Log::open(
        dir,
        TopicPartition::new("perf", 0),
        LogConfig::default(),
        load,
        Arc::new(SystemClock),
    )?;
    let mut buffer = vec![0u8; 2 << 20];
    let mut offset = 0u64;
    let mut total = 0u64;
    let started = Instant::now();
    while let Some(slice) = log.read(offset, 1 << 20, None)?.slice {
        if buffer.len() < slice.len as usize {
            buffer.resize(slice.len as usize, 0);
        }
        let read = slice.read_to_slice(&mut buffer)?;
        total += read as u64;
        offset = last_offset_in(&buffer[..read]).context("read returned no whole batch")? + 1;
    }
    let elapsed = started.elapsed();
    log.close()?;
    Ok(Figure {
        name: "log read, 1 MiB fetches (cold cache)".into(),
        bytes: total,
        elapsed,
    })
}

fn last_offset_in(bytes: &[u8]) -> Option<u64> {
    sluice::log::batch::BatchIter::new(bytes)
        .filter_map(Result::ok)
        .last()
        .map(|(_, header, _)| header.last_offset() as u64)
}

fn manager_config(dir: &Path) -> LogManagerConfig {
    LogManagerConfig {
        log_dirs: vec![dir.to_path_buf()],
        checkpoint_interval_ms: 1_000,
        flush_scheduler_interval_ms: 200,
        ..LogManagerConfig::default()
    }
}

/// Spawns `sluice perf log-writer`, waits until it has written `bytes`, SIGKILLs it, and
/// times the reopening of its log dir.
fn restart_after_kill(dir: &Path, bytes: u64) -> anyhow::Result<()> {
    fs::create_dir_all(dir)?;
    let mut child = Command::new(std::env::current_exe()?)
        .args(["perf", "log-writer", "--dir"])
        .arg(dir)
        .args(["--bytes", &bytes.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the log writer")?;
    let stdout = child.stdout.take().context("writer stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let ready = lines.next().transpose()?.unwrap_or_default();
    if ready.trim() != "ready" {
        let _ = child.kill();
        bail!("log writer did not get ready: '{ready}'");
    }
    // Let the writer's scheduler run as it would between checkpoints, then kill it hard.
    std::thread::sleep(Duration::from_millis(1_500));
    child.kill()?;
    child.wait()?;
    let started = Instant::now();
    let manager = LogManager::open(manager_config(dir), Arc::new(SystemClock))?;
    let elapsed = started.elapsed();
    let log = manager
        .get(&TopicPartition::new("perf", 0))
        .context("restarted log is missing")?;
    println!(
        "{:<56} {:>9.3} s   ({} MiB, {} segments, log end offset {})",
        "restart after kill -9",
        elapsed.as_secs_f64(),
        log.size_bytes() >> 20,
        log.segment_count(),
        log.log_end_offset()
    );
    drop(log);
    drop(manager);
    Ok(())
}

fn log_writer(dir: &Path, bytes: u64, flush_policy: &str, print_acks: bool) -> anyhow::Result<()> {
    use std::io::Write;
    let manager = Arc::new(LogManager::open(
        manager_config(dir),
        Arc::new(SystemClock),
    )?);
    manager.start_background()?;
    let mut config = LogConfig::default();
    config.set("flush.policy", flush_policy)?;
    let log = manager.get_or_create(&TopicPartition::new("perf", 0), config)?;
    let batch = template_batch(1024, 16 * 1024);
    let mut written = 0u64;
    let mut ready = false;
    let mut stdout = std::io::stdout().lock();
    loop {
        let info = log.append_as_leader(&batch, 0, AppendOrigin::Client)?;
        written += batch.len() as u64;
        if print_acks {
            writeln!(stdout, "ack {}", info.last_offset)?;
        }
        if !ready && written >= bytes {
            ready = true;
            writeln!(stdout, "ready")?;
            stdout.flush()?;
            if !print_acks {
                break;
            }
        }
    }
    drop(stdout);
    // Wait to be killed.
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}
