//! `sluice perf quorum`: three real `sluice server` processes on this machine; metadata
//! commit latency (one CreateTopics at a time, p50/p99) and topic-creation throughput
//! (concurrent creators), printed beside the synced-write latency of RocksDB measured in
//! the same run on the same disk (a commit needs at least one on a majority).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use sluice::controller::NewTopic;
use sluice::controller::service::{ControllerRequest, ControllerResponse, call_at};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct Nodes(Vec<Child>);

impl Drop for Nodes {
    fn drop(&mut self) {
        for child in &mut self.0 {
            // SAFETY: kill(2) on a child we spawned.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        }
        for child in &mut self.0 {
            let _ = child.wait();
        }
    }
}

pub fn run(dir: &Path, topics: usize, partitions: i32, concurrency: usize) -> anyhow::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    let mut sync =
        sluice_raft::store::measure_synced_write_latency(&dir.join("rocksdb-sync"), 200)?;
    sync.sort();
    println!(
        "{:<44} p50 {:>7.3} ms  p99 {:>7.3} ms",
        "RocksDB synced 1 KiB write",
        ms(percentile(&sync, 0.5)),
        ms(percentile(&sync, 0.99))
    );

    // Each node's quorum, Kafka and HTTP ports, all distinct.
    let ports = super::common::free_ports(9)?;
    let quorum_ports = &ports[..3];
    let voters = quorum_ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    let mut children = Vec::new();
    for (i, quorum_port) in quorum_ports.iter().enumerate() {
        let id = i + 1;
        let config = dir.join(format!("node-{id}.properties"));
        std::fs::write(
            &config,
            format!(
                "node.id={id}\nlisteners=PLAINTEXT://127.0.0.1:{},CONTROLLER://127.0.0.1:{quorum_port}\n\
                 controller.quorum.voters={voters}\nhttp.listener=127.0.0.1:{}\nlog.dirs={}\n",
                ports[3 + 2 * i],
                ports[4 + 2 * i],
                dir.join(format!("data-{id}")).display()
            ),
        )?;
        let log = std::fs::File::create(dir.join(format!("node-{id}.log")))?;
        children.push(
            Command::new(std::env::current_exe()?)
                .args(["server", "--config"])
                .arg(&config)
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .context("starting a node")?,
        );
    }
    let _nodes = Nodes(children);
    let bootstrap = format!("127.0.0.1:{}", quorum_ports[0]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        // Wait for a leader and three unfenced brokers.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(ControllerResponse::Quorum(q)) = call_at(&bootstrap, &ControllerRequest::DescribeQuorum, Duration::from_secs(5)).await {
                if q.brokers.iter().filter(|b| !b.fenced).count() == 3 {
                    break;
                }
            }
            if Instant::now() > deadline {
                bail!("the three nodes did not form a cluster (see node-*.log in the --dir)");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let target = bootstrap.clone();
        let create = move |name: String| {
            let bootstrap = target.clone();
            async move {
                let topic = NewTopic { name, partitions, replication_factor: 3, ..NewTopic::default() };
                let started = Instant::now();
                match call_at(&bootstrap, &ControllerRequest::CreateTopic(topic), Duration::from_secs(30)).await {
                    Ok(ControllerResponse::Ok { .. }) => Ok(started.elapsed()),
                    Ok(other) => Err(anyhow::anyhow!("create topic: {other:?}")),
                    Err(error) => Err(anyhow::anyhow!(error)),
                }
            }
        };
        // Latency: one at a time (each a committed metadata write through the quorum).
        let sequential = topics.min(200);
        let mut latencies = Vec::with_capacity(sequential);
        for n in 0..sequential {
            latencies.push(create(format!("latency-{n}")).await?);
        }
        latencies.sort();
        println!(
            "{:<44} p50 {:>7.3} ms  p99 {:>7.3} ms  ({:.1}x / {:.1}x the synced write)",
            "metadata commit (CreateTopic, one at a time)",
            ms(percentile(&latencies, 0.5)),
            ms(percentile(&latencies, 0.99)),
            ms(percentile(&latencies, 0.5)) / ms(percentile(&sync, 0.5)).max(1e-6),
            ms(percentile(&latencies, 0.99)) / ms(percentile(&sync, 0.99)).max(1e-6)
        );
        // Throughput: `topics` topics from `concurrency` creators.
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let started = Instant::now();
        let mut workers = Vec::new();
        for _ in 0..concurrency.max(1) {
            let next = Arc::clone(&next);
            let create = create.clone();
            workers.push(tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if n >= topics {
                        return anyhow::Ok(());
                    }
                    create(format!("throughput-{n}")).await?;
                }
            }));
        }
        for worker in workers {
            worker.await??;
        }
        let elapsed = started.elapsed();
        println!(
            "{:<44} {:>7.1} topics/s  ({topics} topics of {partitions} partitions, {concurrency} creators, {:.2} s)",
            "topic creation on three nodes",
            topics as f64 / elapsed.as_secs_f64(),
            elapsed.as_secs_f64()
        );
        anyhow::Ok(())
    })?;
    Ok(())
}
