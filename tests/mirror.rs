//! `sluice mirror` between two three-node clusters of real processes, under a confluent-kafka
//! producer: every acknowledged record arrives, in each partition's order, through a kill -9
//! of the mirror; a consumer group that moves to the target with `sluice groups translate`
//! resumes at or before where it stopped, skipping nothing. With exactly-once, two kill -9s
//! leave every record once and in order for read_committed readers of the target.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use support::{AckedProducer, Cluster, free_port, sluice, tail};

struct MirrorProcess {
    args: Vec<String>,
    log: std::path::PathBuf,
    child: Option<Child>,
    metrics_port: u16,
}

impl MirrorProcess {
    fn start(source: &Cluster, target: &Cluster, log: std::path::PathBuf) -> MirrorProcess {
        MirrorProcess::start_with(source, target, log, &[])
    }

    /// [`MirrorProcess::start`] with more `--override`s.
    fn start_with(
        source: &Cluster,
        target: &Cluster,
        log: std::path::PathBuf,
        overrides: &[&str],
    ) -> MirrorProcess {
        let metrics_port = free_port();
        let mut args = vec![
            "mirror".to_owned(),
            "--source".to_owned(),
            source.bootstrap(),
            "--target".to_owned(),
            target.bootstrap(),
            "--topics".to_owned(),
            "orders.*".to_owned(),
            "--override".to_owned(),
            "emit.checkpoints.interval.seconds=1".to_owned(),
            "--override".to_owned(),
            "refresh.topics.interval.seconds=1".to_owned(),
            "--override".to_owned(),
            format!("http.listener=127.0.0.1:{metrics_port}"),
        ];
        for value in overrides {
            args.push("--override".to_owned());
            args.push((*value).to_owned());
        }
        let mut mirror = MirrorProcess {
            args,
            log,
            child: None,
            metrics_port,
        };
        mirror.launch();
        mirror
    }

    fn launch(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("mirror log");
        self.child = Some(
            Command::new(env!("CARGO_BIN_EXE_sluice"))
                .args(&self.args)
                .stdout(log.try_clone().expect("log"))
                .stderr(log)
                .spawn()
                .expect("start sluice mirror"),
        );
    }

    fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn logs(&self) -> String {
        tail(&std::fs::read_to_string(&self.log).unwrap_or_default(), 40)
    }
}

impl Drop for MirrorProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// (offset, value) of every record of a partition, read with kcat.
fn partition_records(bootstrap: &str, topic: &str, partition: i32) -> Vec<(i64, String)> {
    partition_records_as(bootstrap, topic, partition, "read_uncommitted")
}

/// [`partition_records`] at an `isolation.level`.
fn partition_records_as(
    bootstrap: &str,
    topic: &str,
    partition: i32,
    isolation_level: &str,
) -> Vec<(i64, String)> {
    let output = Command::new("kcat")
        .args([
            "-C",
            "-b",
            bootstrap,
            "-X",
            &format!("isolation.level={isolation_level}"),
            "-t",
            topic,
            "-p",
            &partition.to_string(),
            "-e",
            "-q",
            "-f",
            "%o %s\n",
        ])
        .output()
        .expect("kcat");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let (offset, value) = line.split_once(' ')?;
            Some((offset.parse().ok()?, value.to_owned()))
        })
        .collect()
}

#[test]
fn an_exactly_once_mirror_killed_twice_writes_each_record_once_for_read_committed_readers() {
    // One node each: the transaction coordinator's log has one replica.
    let single = [
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "offsets.topic.replication.factor=1",
    ];
    let source = Cluster::start(1, &single);
    let target = Cluster::start(1, &single);
    sluice(&[
        "topics",
        "create",
        "orders",
        "--partitions",
        "2",
        "--bootstrap-server",
        &source.bootstrap(),
    ]);
    let producer = AckedProducer::start_on(&source, "orders");
    let mut mirror = MirrorProcess::start_with(
        &source,
        &target,
        source.dir.path().join("mirror.log"),
        &["target.exactly.once.source.support=enabled"],
    );
    for _ in 0..2 {
        producer.wait_for_more(&source, 10_000);
        mirror.kill9();
        producer.wait_for_more(&source, 5_000);
        mirror.launch();
    }
    producer.wait_for_more(&source, 10_000);
    let (acked, _errors) = producer.stop();
    let deadline = Instant::now() + Duration::from_secs(120);
    let (upstream, committed) = loop {
        let upstream: Vec<Vec<String>> = (0..2)
            .map(|p| {
                partition_records(&source.bootstrap(), "orders", p)
                    .into_iter()
                    .map(|(_, v)| v)
                    .collect()
            })
            .collect();
        let committed: Vec<Vec<String>> = (0..2)
            .map(|p| {
                partition_records_as(&target.bootstrap(), "source.orders", p, "read_committed")
                    .into_iter()
                    .map(|(_, v)| v)
                    .collect()
            })
            .collect();
        if (0..2).all(|p| committed[p].len() >= upstream[p].len()) {
            break (upstream, committed);
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} records committed on the target\n{}",
            committed.iter().map(Vec::len).sum::<usize>(),
            upstream.iter().map(Vec::len).sum::<usize>(),
            mirror.logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    for p in 0..2 {
        if committed[p] != upstream[p] {
            let first = committed[p]
                .iter()
                .zip(&upstream[p])
                .position(|(a, b)| a != b);
            panic!(
                "partition {p}: {} records read_committed on the target for {} on the source; first difference at {first:?}\n{}",
                committed[p].len(),
                upstream[p].len(),
                mirror.logs()
            );
        }
    }
    let arrived: BTreeSet<&String> = committed.iter().flatten().collect();
    assert!(acked.iter().all(|value| arrived.contains(value)));
    let written: usize = (0..2)
        .map(|p| partition_records(&target.bootstrap(), "source.orders", p).len())
        .sum();
    let total: usize = upstream.iter().map(Vec::len).sum();
    println!(
        "{total} records (of them {} acknowledged) each once and in order for read_committed through two kill -9s; read_uncommitted also sees {} aborted",
        acked.len(),
        written - total
    );
}

#[test]
fn a_mirror_between_two_clusters_loses_nothing_and_a_group_moves_over() {
    let source = Cluster::start(3, &[]);
    let target = Cluster::start(3, &[]);
    sluice(&[
        "topics",
        "create",
        "orders",
        "--partitions",
        "2",
        "--replication-factor",
        "3",
        "--bootstrap-server",
        &source.bootstrap(),
    ]);
    let producer = AckedProducer::start_on(&source, "orders");
    let mut mirror = MirrorProcess::start(&source, &target, source.dir.path().join("mirror.log"));
    producer.wait_for_more(&source, 10_000);

    // A group reads part of the topic on the source and commits.
    let consumed = sluice(&[
        "consume",
        "orders",
        "--group",
        "g",
        "--from-beginning",
        "--max-messages",
        "3000",
        "--bootstrap-server",
        &source.bootstrap(),
    ]);
    assert_eq!(consumed.lines().count(), 3000);

    // kill -9 of the mirror while the producer goes on, then a restart.
    std::thread::sleep(Duration::from_secs(1));
    mirror.kill9();
    producer.wait_for_more(&source, 10_000);
    mirror.launch();
    producer.wait_for_more(&source, 10_000);
    let (acked, _errors) = producer.stop();
    println!("{} records acknowledged by the source", acked.len());

    // Every acknowledged record arrives, and each partition keeps its order.
    let deadline = Instant::now() + Duration::from_secs(120);
    let (source_records, target_records) = loop {
        let source_records: Vec<Vec<(i64, String)>> = (0..2)
            .map(|p| partition_records(&source.bootstrap(), "orders", p))
            .collect();
        let target_records: Vec<Vec<(i64, String)>> = (0..2)
            .map(|p| partition_records(&target.bootstrap(), "source.orders", p))
            .collect();
        let arrived: BTreeSet<&str> = target_records
            .iter()
            .flatten()
            .map(|(_, value)| value.as_str())
            .collect();
        let missing = acked
            .iter()
            .filter(|value| !arrived.contains(value.as_str()))
            .count();
        if missing == 0 {
            break (source_records, target_records);
        }
        assert!(
            Instant::now() < deadline,
            "{missing} acknowledged records not mirrored\n{}",
            mirror.logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let mut repeated = 0;
    for p in 0..2 {
        let mut seen = BTreeSet::new();
        let first_copies: Vec<&str> = target_records[p]
            .iter()
            .map(|(_, value)| value.as_str())
            .filter(|value| seen.insert(*value))
            .collect();
        repeated += target_records[p].len() - first_copies.len();
        let upstream: Vec<&str> = source_records[p].iter().map(|(_, v)| v.as_str()).collect();
        assert_eq!(
            first_copies, upstream,
            "partition {p}: the target's order differs"
        );
    }
    println!("{repeated} records written twice to the target after the kill -9");

    // The group moves to the target at its translated offsets.
    let committed: BTreeMap<i32, i64> = {
        let json = sluice(&[
            "groups",
            "describe",
            "g",
            "--output",
            "json",
            "--bootstrap-server",
            &source.bootstrap(),
        ]);
        let value: serde_json::Value = serde_json::from_str(&json).expect("json");
        value["partitions"]
            .as_array()
            .expect("partitions")
            .iter()
            .filter_map(|row| {
                Some((
                    row["partition"].as_i64()? as i32,
                    row["committed_offset"].as_i64()?,
                ))
            })
            .collect()
    };
    assert!(
        !committed.is_empty(),
        "the group committed nothing on the source"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let translated: BTreeMap<i32, (i64, i64)> = loop {
        let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args([
                "groups",
                "translate",
                "g",
                "--output",
                "json",
                "--bootstrap-server",
                &target.bootstrap(),
            ])
            .output()
            .expect("sluice");
        if output.status.success() {
            let value: serde_json::Value =
                serde_json::from_slice(&output.stdout).expect("translate json");
            let rows: BTreeMap<i32, (i64, i64)> = value["partitions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|row| {
                    Some((
                        row["partition"].as_i64()? as i32,
                        (row["source_offset"].as_i64()?, row["offset"].as_i64()?),
                    ))
                })
                .collect();
            if rows
                .iter()
                .all(|(p, (upstream, _))| committed.get(p) == Some(upstream))
                && rows.len() == committed.len()
            {
                break rows;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint of g's offsets {committed:?}\n{}",
            mirror.logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    sluice(&[
        "groups",
        "translate",
        "g",
        "--execute",
        "--bootstrap-server",
        &target.bootstrap(),
    ]);
    for (p, (upstream, downstream)) in &translated {
        let p = *p as usize;
        // What the group had not read on the source...
        let unread: BTreeSet<&str> = source_records[p]
            .iter()
            .filter(|(offset, _)| offset >= upstream)
            .map(|(_, v)| v.as_str())
            .collect();
        // ...is all at or after where it resumes on the target.
        let after: BTreeSet<&str> = target_records[p]
            .iter()
            .filter(|(offset, _)| offset >= downstream)
            .map(|(_, v)| v.as_str())
            .collect();
        let skipped = unread.difference(&after).count();
        assert_eq!(
            skipped,
            0,
            "partition {p}: resuming at {downstream} skips {skipped} records\n{}",
            mirror.logs()
        );
        let reread = after.difference(&unread).count();
        println!(
            "partition {p}: committed {upstream} on the source, resumes at {downstream} on the target ({reread} records read again)"
        );
    }
    let resumed = sluice(&[
        "groups",
        "describe",
        "g",
        "--output",
        "json",
        "--bootstrap-server",
        &target.bootstrap(),
    ]);
    let value: serde_json::Value = serde_json::from_str(&resumed).expect("json");
    for row in value["partitions"].as_array().expect("partitions") {
        let p = row["partition"].as_i64().expect("partition") as i32;
        assert_eq!(
            row["committed_offset"].as_i64(),
            translated.get(&p).map(|(_, d)| *d),
            "{row}"
        );
    }
    // Topics and partitions added on the source are followed.
    sluice(&[
        "topics",
        "create",
        "orders-late",
        "--partitions",
        "1",
        "--bootstrap-server",
        &source.bootstrap(),
    ]);
    sluice(&[
        "topics",
        "alter",
        "orders",
        "--partitions",
        "3",
        "--bootstrap-server",
        &source.bootstrap(),
    ]);
    for (topic, partition) in [("orders-late", "0"), ("orders", "2")] {
        let mut kcat = Command::new("kcat")
            .args([
                "-P",
                "-b",
                &source.bootstrap(),
                "-t",
                topic,
                "-p",
                partition,
                "-K:",
                "-H",
                "origin=eu",
                "-H",
                "trace=42",
            ])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("kcat");
        use std::io::Write as _;
        kcat.stdin
            .take()
            .expect("stdin")
            .write_all(format!("key-{topic}:late-{topic}\n").as_bytes())
            .expect("write");
        assert!(kcat.wait().expect("kcat").success());
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let late = partition_records(&target.bootstrap(), "source.orders-late", 0);
        let grown = partition_records(&target.bootstrap(), "source.orders", 2);
        if late.iter().any(|(_, v)| v == "late-orders-late")
            && grown.iter().any(|(_, v)| v == "late-orders")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a new topic or partition was not followed\n{}",
            mirror.logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    // Keys, headers and timestamps are kept (read with kcat on both sides).
    let described = |bootstrap: &str, topic: &str| -> String {
        let output = Command::new("kcat")
            .args([
                "-C",
                "-b",
                bootstrap,
                "-t",
                topic,
                "-e",
                "-q",
                "-f",
                "%k|%h|%T|%s\n",
            ])
            .output()
            .expect("kcat");
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    };
    let upstream = described(&source.bootstrap(), "orders-late");
    assert!(
        upstream.starts_with("key-orders-late|origin=eu,trace=42|"),
        "{upstream}"
    );
    assert_eq!(
        described(&target.bootstrap(), "source.orders-late"),
        upstream
    );

    // The mirror's lag is on /metrics, and it has caught up.
    let metrics = support::metrics_at(mirror.metrics_port).expect("mirror /metrics");
    let lag: i64 = metrics
        .lines()
        .filter(|line| line.starts_with("sluice_mirror_record_lag{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<i64>().ok())
        .sum();
    assert_eq!(lag, 0, "{metrics}");
}
