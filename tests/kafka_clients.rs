//! Sluice against real Kafka clients, each test with its own `sluice server` process:
//! librdkafka (confluent-kafka and Debian's kcat, librdkafka 2.0.2), kafka-python and kafkajs.
//! The clients are installed by `scripts/test`; a missing client fails the test.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use support::{SingleNode, confluent, run_client};

#[test]
fn confluent_admin_topics_partitions_configs_cluster() {
    let node = SingleNode::start(&[]);
    confluent(&node, "admin", &[]);
}

#[test]
fn confluent_produces_100k_records_with_every_codec_and_acks_and_reads_them_back() {
    let node = SingleNode::start(&[]);
    let data = node.data_dir().display().to_string();
    confluent(&node, "produce-consume", &[&data]);
    // The broker counted what came in and went out.
    // 15 runs of 6,666 records.
    assert!(node.gauge("sluice_messages_in_total").unwrap_or(0) >= 99_990);
    let metrics = node.metrics_text();
    assert!(metrics.contains("sluice_request_latency_seconds_bucket{api=\"Produce\""));
    assert!(metrics.contains("sluice_requests_total{api=\"Fetch\"}"));
}

#[test]
fn topic_compression_type_recompresses_and_producer_keeps_the_codec() {
    let node = SingleNode::start(&[]);
    let data = node.data_dir().display().to_string();
    confluent(&node, "topic-compression", &[&data]);
}

#[test]
fn confluent_list_offsets_by_time_and_delete_records() {
    let node = SingleNode::start(&[]);
    confluent(&node, "list-offsets", &[]);
}

#[test]
fn confluent_sees_message_too_large_and_nothing_is_written() {
    let node = SingleNode::start(&[]);
    confluent(&node, "errors", &[]);
}

#[test]
fn confluent_sees_keyless_records_refused_one_by_one_in_every_codec() {
    let node = SingleNode::start(&[]);
    confluent(&node, "record-errors", &[]);
}

#[test]
fn auto_create_follows_the_broker_setting() {
    let node = SingleNode::start(&[]);
    confluent(&node, "auto-create", &[]);
    let node = SingleNode::start(&["auto.create.topics.enable=false"]);
    confluent(&node, "no-auto-create", &[]);
}

#[test]
fn kcat_lists_metadata_produces_a_file_and_consumes_the_same_bytes() {
    let node = SingleNode::start(&[]);
    let bootstrap = node.bootstrap();
    let metadata = run_client(&node, "kcat", &["-b", &bootstrap, "-L"]);
    assert!(
        metadata.contains(&format!("broker 1 at 127.0.0.1:{}", node.kafka_port)),
        "{metadata}"
    );
    let input = node.dir.path().join("input.txt");
    let lines: Vec<String> = (0..5000)
        .map(|i| format!("line {i} {}", "y".repeat(i % 300)))
        .collect();
    std::fs::write(&input, lines.join("\n") + "\n").expect("write input");
    let input = input.display().to_string();
    run_client(
        &node,
        "kcat",
        &[
            "-b",
            &bootstrap,
            "-P",
            "-t",
            "kcat-topic",
            "-z",
            "snappy",
            "-l",
            &input,
        ],
    );
    let consumed = run_client(
        &node,
        "kcat",
        &[
            "-b",
            &bootstrap,
            "-C",
            "-t",
            "kcat-topic",
            "-e",
            "-q",
            "-f",
            "%s\n",
        ],
    );
    assert_eq!(consumed.lines().collect::<Vec<_>>(), lines);
    let metadata = run_client(&node, "kcat", &["-b", &bootstrap, "-L", "-t", "kcat-topic"]);
    assert!(metadata.contains("partition 0, leader 1"), "{metadata}");
}

/// `thread.affinity` (on by default): one network thread per CPU, each pinned to its own,
/// and every other thread (tokio's blocking pools, the log's threads, the writeback thread
/// the first MiBs appended start from a network thread) keeps all of the process's CPUs.
/// Off, no thread is pinned. kcat writes and reads meanwhile.
#[test]
fn network_threads_are_pinned_one_per_cpu_and_no_other_thread_is() {
    fn thread_cpus(pid: u32) -> Vec<(String, String)> {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("list threads");
        tasks
            .filter_map(|task| {
                let path = task.ok()?.path();
                let name = std::fs::read_to_string(path.join("comm")).ok()?;
                let status = std::fs::read_to_string(path.join("status")).ok()?;
                let cpus = status
                    .lines()
                    .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))?;
                Some((name.trim().to_owned(), cpus.trim().to_owned()))
            })
            .collect()
    }
    fn write_and_read(node: &SingleNode) {
        let bootstrap = node.bootstrap();
        let input = node.dir.path().join("input.txt");
        let lines: Vec<String> = (0..3000)
            .map(|i| format!("{i:04} {}", "z".repeat(1000)))
            .collect();
        std::fs::write(&input, lines.join("\n") + "\n").expect("write input");
        let input = input.display().to_string();
        run_client(
            node,
            "kcat",
            &["-b", &bootstrap, "-P", "-t", "spread", "-l", &input],
        );
        let consumed = run_client(
            node,
            "kcat",
            &[
                "-b", &bootstrap, "-C", "-t", "spread", "-e", "-q", "-f", "%s\n",
            ],
        );
        assert_eq!(consumed.lines().count(), lines.len());
    }
    // What this test process may use is what the server it starts may use.
    let process_cpus = std::fs::read_to_string("/proc/self/status")
        .expect("own status")
        .lines()
        .find_map(|line| {
            line.strip_prefix("Cpus_allowed_list:")
                .map(|s| s.trim().to_owned())
        })
        .expect("Cpus_allowed_list");
    let cpu_count: usize = process_cpus
        .split(',')
        .map(|range| match range.split_once('-') {
            Some((first, last)) => {
                let first: usize = first.parse().expect("a CPU number");
                let last: usize = last.parse().expect("a CPU number");
                last - first + 1
            }
            None => 1,
        })
        .sum();

    let node = SingleNode::start(&[]);
    write_and_read(&node);
    let threads = thread_cpus(node.pid());
    assert!(
        threads.iter().any(|(name, _)| name == "log-writeback"),
        "the writeback thread runs: {threads:?}"
    );
    let mut pinned: Vec<(&str, &str)> = threads
        .iter()
        .filter(|(_, cpus)| *cpus != process_cpus)
        .map(|(name, cpus)| {
            assert!(
                name.starts_with("sluice-net-") && cpus.parse::<usize>().is_ok(),
                "only network threads are pinned, each to one CPU: {threads:?}"
            );
            (name.as_str(), cpus.as_str())
        })
        .collect();
    pinned.sort_unstable();
    pinned.dedup();
    let logs = node.logs();
    if cpu_count >= 2 {
        let mut cpus: Vec<&str> = pinned.iter().map(|(_, cpu)| *cpu).collect();
        cpus.sort_unstable();
        cpus.dedup();
        assert!(
            pinned.len() == cpu_count && cpus.len() == cpu_count,
            "one network thread per CPU: {threads:?}"
        );
        assert!(
            logs.contains("network threads pinned one per CPU"),
            "the start-up log says so: {logs}"
        );
        // /metrics shows each thread's CPU and its connections, which add up to all the
        // listener's; new connections go to the least busy thread, so 2 per thread opened
        // here leave none without one.
        let open: Vec<_> = (0..2 * cpu_count)
            .map(|_| std::net::TcpStream::connect(("127.0.0.1", node.kafka_port)).expect("connect"))
            .collect();
        let scrape = || -> (Vec<(String, i64)>, i64) {
            let text = node.metrics_text();
            let threads = text
                .lines()
                .filter_map(|line| line.strip_prefix("sluice_network_thread_connections{"))
                .filter_map(|line| {
                    let (labels, value) = line.split_once("} ")?;
                    Some((labels.to_owned(), value.trim().parse().ok()?))
                })
                .collect();
            let all = text
                .lines()
                .find_map(|line| line.strip_prefix("sluice_connections "))
                .and_then(|value| value.trim().parse().ok())
                .unwrap_or(-1);
            (threads, all)
        };
        let settled = |(threads, all): &(Vec<(String, i64)>, i64)| {
            threads.iter().map(|(_, count)| count).sum::<i64>() == *all && *all >= open.len() as i64
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut now = scrape();
        while !settled(&now) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            now = scrape();
        }
        assert!(settled(&now), "{now:?}");
        assert_eq!(now.0.len(), cpu_count, "{now:?}");
        assert!(now.0.iter().all(|(_, count)| *count >= 1), "{now:?}");
        for (name, cpu) in &pinned {
            let thread = name.trim_start_matches("sluice-net-");
            let labels = format!("thread=\"{thread}\",cpu=\"{cpu}\"");
            assert!(
                now.0.iter().any(|(l, _)| *l == labels),
                "{labels} in {now:?}"
            );
        }
        drop(open);
    } else {
        assert!(pinned.is_empty(), "{threads:?}");
        assert!(logs.contains("one CPU: connections are served"), "{logs}");
    }
    drop(node);

    let floating = SingleNode::start(&["thread.affinity=false"]);
    write_and_read(&floating);
    let threads = thread_cpus(floating.pid());
    assert!(
        threads
            .iter()
            .all(|(name, cpus)| *cpus == process_cpus && !name.starts_with("sluice-net-")),
        "no network threads, none pinned: {threads:?}"
    );
    let logs = floating.logs();
    assert!(
        logs.contains("thread.affinity=false: connections are served"),
        "{logs}"
    );
}

#[test]
fn kafka_python_round_trips_records() {
    let node = SingleNode::start(&[]);
    run_client(
        &node,
        "python3",
        &["kafka_python_roundtrip.py", &node.bootstrap()],
    );
}

#[test]
fn kafkajs_round_trips_records() {
    let node = SingleNode::start(&[]);
    run_client(&node, "node", &["kafkajs_roundtrip.js", &node.bootstrap()]);
}

/// kill -9 the broker while an idempotent producer is writing; after a restart every record
/// the broker acknowledged is there exactly once.
#[test]
fn every_acknowledged_record_survives_kill_9_exactly_once() {
    let mut node = SingleNode::start(&["num.partitions=2"]);
    let bootstrap = node.bootstrap();
    let producer = support::AckedProducer::start(&bootstrap, "crash");
    let deadline = Instant::now() + Duration::from_secs(60);
    while node.gauge("sluice_messages_in_total").unwrap_or(0) < 20_000 && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    node.kill9();
    std::thread::sleep(Duration::from_millis(500));
    let (acked, _) = producer.stop();
    assert!(
        acked.len() > 1000,
        "only {} records were acknowledged",
        acked.len()
    );
    node.restart();
    let dumped = confluent(&node, "dump", &["crash", "2"]);
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for line in dumped.lines().filter(|l| l.starts_with('r')) {
        *counts.entry(line).or_default() += 1;
    }
    let missing: Vec<&String> = acked
        .iter()
        .filter(|a| !counts.contains_key(a.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged records lost, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "records stored twice: {:?}",
        &twice[..twice.len().min(5)]
    );
    println!(
        "{} acknowledged records, {} stored, none lost or doubled",
        acked.len(),
        counts.len()
    );
}

#[test]
fn sigterm_stops_the_broker_cleanly_and_keeps_its_data() {
    let mut node = SingleNode::start(&[]);
    confluent(&node, "auto-create", &[]);
    assert!(node.terminate(), "the broker did not exit 0 on SIGTERM");
    assert!(
        node.data_dir().join(".kafka_cleanshutdown").exists()
            || node.data_dir().join("made-on-demand-0").exists()
    );
    node.restart();
    let got = confluent(&node, "dump", &["made-on-demand", "1"]);
    assert!(got.lines().any(|l| l == "hello"), "{got}");
}
