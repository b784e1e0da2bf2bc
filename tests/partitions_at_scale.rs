//! Partitions bounded by memory, not by descriptors: a node whose open files limit is far
//! below three descriptors per partition serves thousands of partitions through produce,
//! consume, a clean restart and a kill -9, with its descriptors and memory mappings flat; and
//! a partition whose log cannot be opened stays offline (KAFKA_STORAGE_ERROR, one ERROR, a
//! gauge) without stopping the node from serving the rest.

mod support;

use std::time::{Duration, Instant};

use support::raw::Client;
use support::{SingleNode, confluent};

use sluice::log::batch::BatchBuilder;

const TOPICS: usize = 20;
const PARTITIONS_PER_TOPIC: i32 = 100;
/// Far below the 3 descriptors per partition (`.log`, `.index`, `.timeindex`) Kafka holds.
const OPEN_FILES_LIMIT: u64 = 512;

fn batch(value: &str) -> Vec<u8> {
    let mut builder = BatchBuilder::new(0, 1_700_000_000_000);
    builder.push(1_700_000_000_000, None, Some(value.as_bytes()), &[]);
    builder.build()
}

fn count_in(path: String) -> usize {
    match std::fs::read_dir(&path) {
        Ok(entries) => entries.count(),
        Err(e) => panic!("{path}: {e}"),
    }
}

fn maps(node: &SingleNode) -> usize {
    std::fs::read_to_string(format!("/proc/{}/maps", node.pid()))
        .unwrap_or_default()
        .lines()
        .count()
}

/// Produces `value` to every partition of every topic, one request per topic.
fn produce_everywhere(client: &mut Client, value: &str) {
    for t in 0..TOPICS {
        let answers = client.produce_many(
            &format!("wide{t}"),
            (0..PARTITIONS_PER_TOPIC)
                .map(|p| (p, batch(&format!("{value}-{t}-{p}"))))
                .collect(),
            30_000,
        );
        assert!(
            answers.iter().all(|(_, code)| *code == 0),
            "wide{t}: {answers:?}"
        );
    }
}

fn check_all_served(node: &SingleNode, records_per_partition: i64) {
    let mut client = Client::connect(node.kafka_port);
    for t in 0..TOPICS {
        for p in [0, PARTITIONS_PER_TOPIC / 2, PARTITIONS_PER_TOPIC - 1] {
            assert_eq!(
                client.latest_offset(&format!("wide{t}"), p),
                records_per_partition,
                "wide{t}-{p}"
            );
        }
    }
    // A third-party client reads a whole topic back, every partition.
    let dumped = confluent(node, "dump", &["wide7", &PARTITIONS_PER_TOPIC.to_string()]);
    let values = dumped.lines().filter(|l| l.starts_with("first-7-")).count();
    assert_eq!(values, PARTITIONS_PER_TOPIC as usize, "{dumped}");
}

#[test]
fn thousands_of_partitions_fit_an_open_files_limit_below_one_per_partition() {
    let mut node = SingleNode::start_limited(&[], &[], Some(OPEN_FILES_LIMIT));
    let mut client = Client::connect(node.kafka_port);
    let started = Instant::now();
    for t in 0..TOPICS {
        client.create_topic(&format!("wide{t}"), PARTITIONS_PER_TOPIC);
    }
    let total = TOPICS * PARTITIONS_PER_TOPIC as usize;
    println!(
        "{total} partitions created in {} ms",
        started.elapsed().as_millis()
    );
    produce_everywhere(&mut client, "first");
    let fds = count_in(format!("/proc/{}/fd", node.pid()));
    let mapped = maps(&node);
    println!(
        "{total} partitions: {fds} descriptors (limit {OPEN_FILES_LIMIT}), {mapped} mappings, RSS {} KiB",
        node.rss_kib()
    );
    assert!(fds < OPEN_FILES_LIMIT as usize, "{fds} descriptors");
    assert!(
        mapped < total / 2,
        "{mapped} memory mappings for {total} partitions: idle indexes must not be mapped"
    );
    assert!(
        node.gauge("sluice_segment_files_open")
            .is_some_and(|open| open <= (OPEN_FILES_LIMIT / 2) as i64),
        "open segment files over half the limit: {:?}",
        node.gauge("sluice_segment_files_open")
    );
    check_all_served(&node, 1);

    assert!(node.terminate(), "clean shutdown failed:\n{}", node.logs());
    node.restart();
    let mut client = Client::connect(node.kafka_port);
    produce_everywhere(&mut client, "second");
    check_all_served(&node, 2);

    node.kill9();
    node.restart();
    check_all_served(&node, 2);
    let fds = count_in(format!("/proc/{}/fd", node.pid()));
    assert!(
        fds < OPEN_FILES_LIMIT as usize,
        "{fds} descriptors after kill -9"
    );
    let logs = node.logs();
    assert!(
        !logs.contains("Too many open files") && !logs.contains(" ERROR "),
        "{}",
        support::tail(&logs, 40)
    );
}

#[test]
fn a_partition_whose_log_cannot_be_opened_stays_offline_and_the_rest_serve() {
    let mut node = SingleNode::start(&[]);
    let mut client = Client::connect(node.kafka_port);
    client.create_topic("good", 1);
    client.create_topic("bad", 1);
    assert_eq!(client.produce("good", 0, batch("g0")).0, 0);
    assert_eq!(client.produce("bad", 0, batch("b0")).0, 0);
    assert!(node.terminate());
    // The segment file replaced by a directory: opening the log fails.
    let segment = node
        .data_dir()
        .join("bad-0")
        .join("00000000000000000000.log");
    std::fs::remove_file(&segment).expect("segment");
    std::fs::create_dir(&segment).expect("directory in its place");

    node.restart();
    let mut client = Client::connect(node.kafka_port);
    const KAFKA_STORAGE_ERROR: i16 = 56;
    assert_eq!(client.produce("bad", 0, batch("b1")).0, KAFKA_STORAGE_ERROR);
    assert_eq!(client.produce("good", 0, batch("g1")).0, 0);
    let dumped = confluent(&node, "dump", &["good", "1"]);
    assert!(dumped.contains("g0") && dumped.contains("g1"), "{dumped}");
    assert_eq!(node.gauge("sluice_offline_partitions"), Some(1));
    let logs = node.logs();
    let errors: Vec<&str> = logs.lines().filter(|l| l.contains(" ERROR ")).collect();
    assert_eq!(
        errors.len(),
        1,
        "one ERROR for the offline partition: {errors:#?}"
    );
    assert!(
        errors[0].contains("bad-0") && errors[0].contains("repair or remove"),
        "{}",
        errors[0]
    );

    // Deleting the topic removes the broken log too.
    confluent(&node, "delete", &["bad"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while node.gauge("sluice_offline_partitions") != Some(0) {
        assert!(Instant::now() < deadline, "still offline after the delete");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!node.data_dir().join("bad-0").exists());
    // A topic of the same name starts afresh.
    let mut client = Client::connect(node.kafka_port);
    client.create_topic("bad", 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match client.produce("bad", 0, batch("b2")) {
            (0, offset) => {
                assert_eq!(offset, 0);
                break;
            }
            (code, _) => assert!(
                Instant::now() < deadline,
                "the re-created topic answers {code}"
            ),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn creates_past_max_broker_partitions_are_refused_and_nothing_of_them_is_committed() {
    let node = SingleNode::start(&["max.broker.partitions=10"]);
    confluent(&node, "partition-limit", &[]);
    // What the broker hosts and its limit, as the controller sees them.
    let controller = format!("127.0.0.1:{}", node.quorum_port);
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["cluster", "status", "--bootstrap-controller", &controller])
        .output()
        .expect("run sluice cluster status");
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "{text}");
    assert!(
        text.contains("partitions/max") && text.contains(" 5/10 "),
        "{text}"
    );
    // Full again: the SDK (sluice produce) is told at once why a new topic is not made.
    confluent(&node, "create", &["filler", "5", "1"]);
    let mut produce = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "produce",
            "never-made",
            "--bootstrap-server",
            &node.bootstrap(),
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run sluice produce");
    drop(produce.stdin.take());
    let output = produce.wait_with_output().expect("sluice produce");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains("INVALID_PARTITIONS")
            && stderr.contains("partitions/max")
            && !stderr.contains("max.block.ms")
            && stderr.lines().count() == 1,
        "{stderr}"
    );
    let logs = node.logs();
    assert!(
        logs.lines()
            .any(|l| l.contains("partitions_max=10") && l.contains("source=max.broker.partitions")),
        "the start-up log names the limit and its source"
    );

    // Without the key the limit comes from memory, and the log says so.
    let derived = SingleNode::start(&[]);
    let logs = derived.logs();
    assert!(
        logs.lines()
            .any(|l| l.contains("partitions_max=") && l.contains("KiB per partition replica")),
        "{logs}"
    );
}
