//! The Rust client SDK against a real broker: the producer with every codec, its partitions
//! for keys against confluent-kafka's `murmur2_random`, and idempotent retries across a
//! kill -9 of the broker; the admin client; the consumer reading what confluent-kafka wrote
//! (every codec), seeking and pausing, and in groups with every assignor, KIP-848, and a
//! confluent-kafka member. confluent-kafka reads back what the SDK wrote.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice::client::{
    Admin, ClientConfig, Consumer, ConsumerRecord, NewTopic, Producer, ProducerRecord,
    TopicPartition,
};
use support::SingleNode;

const CONFLUENT_READ: &str = r#"
import json, sys
from confluent_kafka import Consumer, Producer, TopicPartition
bootstrap, topic, expected = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = Consumer({'bootstrap.servers': bootstrap, 'group.id': 'unused', 'enable.auto.commit': False})
md = c.list_topics(topic, timeout=10).topics[topic]
c.assign([TopicPartition(topic, p, 0) for p in md.partitions])
seen = {}
headers_ok = True
while len(seen) < expected:
    m = c.poll(10)
    if m is None:
        break
    if m.error():
        raise SystemExit(str(m.error()))
    key = m.key().decode()
    if key in seen:
        raise SystemExit(f'duplicate {key}')
    seen[key] = m.partition()
    if m.value().decode() != 'value-' + key or dict(m.headers() or []).get('h') != b'x':
        headers_ok = False
c.close()
# Where confluent's own producer puts the same keys.
p = Producer({'bootstrap.servers': bootstrap, 'partitioner': 'murmur2_random'})
theirs = {}
def report(err, msg):
    theirs[msg.key().decode()] = msg.partition()
for key in list(seen)[:500]:
    p.produce(topic + '-confluent', key=key, value=b'', on_delivery=report)
p.flush(30)
same = sum(1 for k, v in theirs.items() if seen[k] == v)
print(json.dumps({'read': len(seen), 'headers_ok': headers_ok, 'compared': len(theirs), 'same': same}))
"#;

fn confluent_read(node: &SingleNode, topic: &str, expected: usize) -> serde_json::Value {
    let out = support::run_client(
        node,
        "python3",
        &[
            "-c",
            CONFLUENT_READ,
            &node.bootstrap(),
            topic,
            &expected.to_string(),
        ],
    );
    serde_json::from_str(out.trim().lines().last().unwrap_or("")).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_writes_every_codec_and_keys_land_where_confluent_puts_them() {
    let node = SingleNode::start(&[]);
    let admin = Admin::new(ClientConfig::new(&node.bootstrap())).expect("admin");
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("sdk-{codec}");
        admin
            .create_topics(
                &[
                    NewTopic::new(&topic, 6, 1),
                    NewTopic::new(&format!("{topic}-confluent"), 6, 1),
                ],
                false,
            )
            .await
            .expect("create");
        let producer = Producer::new(
            ClientConfig::new(&node.bootstrap())
                .set("compression.type", codec)
                .set("linger.ms", "2"),
        )
        .expect("producer");
        let mut deliveries = Vec::new();
        for i in 0..3_000 {
            let key = format!("k{i}");
            let record = ProducerRecord::new(&topic, format!("value-{key}"))
                .key(key)
                .header("h", "x");
            deliveries.push(producer.send(record).await.expect("send"));
        }
        // Offsets of each partition are 0.. without gaps, in send order.
        let mut next: BTreeMap<i32, i64> = BTreeMap::new();
        for delivery in deliveries {
            let stored = delivery.await.expect("delivered");
            let expected = next.entry(stored.partition).or_insert(0);
            assert_eq!(stored.offset, *expected, "{codec}: {stored:?}");
            *expected += 1;
        }
        assert_eq!(next.len(), 6, "{codec}: keys spread over every partition");
        producer.close().await.expect("close");
        let read = confluent_read(&node, &topic, 3_000);
        assert_eq!(read["read"], 3_000, "{codec}: {read}");
        assert_eq!(read["headers_ok"], true, "{codec}: {read}");
        assert_eq!(read["compared"], 500, "{codec}: {read}");
        assert_eq!(read["same"], 500, "{codec}: {read}");
    }
    // Admin sees what it made; records below an offset can be deleted.
    let topics = admin.list_topics(false).await.expect("list");
    assert_eq!(topics.len(), 10, "{topics:?}");
    let low = admin
        .delete_records("sdk-none", &BTreeMap::from([(0, 2)]))
        .await
        .expect("delete records");
    assert_eq!(low.get(&0), Some(&2));
    let cluster = admin.describe_cluster().await.expect("describe cluster");
    assert_eq!(cluster.brokers.len(), 1);

    // A producer dropped without close still sends what it buffered (long before its
    // linger), and its sender stops.
    let producer = Producer::new(ClientConfig::new(&node.bootstrap()).set("linger.ms", "60000"))
        .expect("producer");
    let delivery = producer
        .send(ProducerRecord::new("sdk-none", "sent after the drop"))
        .await
        .expect("send");
    drop(producer);
    let stored = tokio::time::timeout(Duration::from_secs(10), delivery)
        .await
        .expect("delivered without waiting for linger.ms")
        .expect("stored");
    assert!(stored.offset >= 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_producer_retries_across_a_broker_kill_9_without_duplicates() {
    let node = SingleNode::start(&[]);
    let bootstrap = node.bootstrap();
    let admin = Admin::new(ClientConfig::new(&bootstrap)).expect("admin");
    admin
        .create_topics(&[NewTopic::new("idem", 3, 1)], false)
        .await
        .expect("create");
    let producer = Producer::new(
        ClientConfig::new(&bootstrap)
            .set("linger.ms", "1")
            .set("request.timeout.ms", "5000")
            .set("reconnect.backoff.ms", "100"),
    )
    .expect("producer");
    // The broker is killed while records are in flight, then started again on its data.
    let restarter = tokio::task::spawn_blocking(move || {
        std::thread::sleep(Duration::from_millis(700));
        let mut node = node;
        node.kill9();
        std::thread::sleep(Duration::from_millis(500));
        node.restart();
        node
    });
    // Records keep coming before, during and after the kill (a steady few thousand a
    // second), so some are in flight when the broker dies.
    let mut deliveries = Vec::new();
    let mut after_restart = 0;
    while after_restart < 2_000 {
        let key = format!("k{}", deliveries.len());
        let record = ProducerRecord::new("idem", format!("value-{key}"))
            .key(key)
            .header("h", "x");
        deliveries.push(producer.send(record).await.expect("send"));
        if deliveries.len() % 20 == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if restarter.is_finished() {
            after_restart += 1;
        }
    }
    let total = deliveries.len();
    let sent_at = std::time::Instant::now();
    let mut failed = 0;
    for delivery in deliveries {
        if let Err(error) = delivery.await {
            failed += 1;
            eprintln!("{error}");
        }
    }
    println!(
        "{total} records, the last delivered {:?} after the last send",
        sent_at.elapsed()
    );
    assert_eq!(failed, 0, "every record is delivered, through the restart");
    producer.close().await.expect("close");
    let node = restarter.await.expect("restarted");
    assert!(
        node.logs().contains("log loaded"),
        "the broker restarted on its data"
    );
    admin
        .create_topics(&[NewTopic::new("idem-confluent", 3, 1)], false)
        .await
        .expect("create");
    // Each record exactly once: the reader refuses duplicates.
    let read = confluent_read(&node, "idem", total);
    assert_eq!(read["read"], total, "{read}");
}

const CONFLUENT_WRITE: &str = r#"
import sys
from confluent_kafka import Producer
bootstrap, topic, count, codec = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
p = Producer({'bootstrap.servers': bootstrap, 'compression.type': codec, 'linger.ms': 5,
              'partitioner': 'murmur2_random'})
for i in range(count):
    p.produce(topic, key=f'k{i}', value=f'v{i}', headers=[('h', b'x'), ('n', None)],
              timestamp=1_000_000 + i)
assert p.flush(30) == 0
"#;

/// Reads from `consumer` until `expected` records arrived (or 30 s passed).
async fn read_all(consumer: &Consumer, expected: usize) -> Vec<ConsumerRecord> {
    let mut records = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while records.len() < expected && Instant::now() < deadline {
        records.extend(
            consumer
                .poll(Duration::from_millis(500))
                .await
                .expect("poll"),
        );
    }
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_reads_what_confluent_wrote_and_seeks_pauses_and_resets() {
    let node = SingleNode::start(&[]);
    let bootstrap = node.bootstrap();
    let admin = Admin::new(ClientConfig::new(&bootstrap)).expect("admin");
    let per_codec = 1_000;
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("from-confluent-{codec}");
        admin
            .create_topics(&[NewTopic::new(&topic, 3, 1)], false)
            .await
            .expect("create");
        let count = per_codec.to_string();
        support::run_client(
            &node,
            "python3",
            &["-c", CONFLUENT_WRITE, &bootstrap, &topic, &count, codec],
        );
        let consumer =
            Consumer::new(ClientConfig::new(&bootstrap).set("auto.offset.reset", "earliest"))
                .expect("consumer");
        let partitions = consumer.partitions_for(&topic).await.expect("partitions");
        consumer.assign(&partitions).await.expect("assign");
        let records = read_all(&consumer, per_codec).await;
        assert_eq!(records.len(), per_codec, "codec {codec}");
        let mut next_offset: BTreeMap<i32, i64> = BTreeMap::new();
        let mut keys = std::collections::BTreeSet::new();
        for record in &records {
            let key = String::from_utf8_lossy(record.key.as_deref().expect("key")).into_owned();
            let i: i64 = key[1..].parse().expect("numbered key");
            assert_eq!(record.value.as_deref(), Some(format!("v{i}").as_bytes()));
            assert_eq!(record.timestamp, 1_000_000 + i);
            assert_eq!(
                record.headers,
                [
                    ("h".to_string(), Some(bytes::Bytes::from_static(b"x"))),
                    ("n".to_string(), None)
                ]
            );
            let expected = next_offset.entry(record.partition).or_insert(0);
            assert_eq!(record.offset, *expected, "offsets in order, no gaps");
            *expected += 1;
            assert!(keys.insert(key), "each record once");
        }
        consumer.close().await.expect("close");
    }

    // Seeks, offsets by time, pause and resume, on the uncompressed topic.
    let topic = "from-confluent-none";
    let consumer = Consumer::new(ClientConfig::new(&bootstrap)).expect("consumer");
    let partitions = consumer.partitions_for(topic).await.expect("partitions");
    let tp0 = partitions[0].clone();
    let only = vec![tp0.clone()];
    let ends = consumer.end_offsets(&partitions).await.expect("ends");
    let beginnings = consumer
        .beginning_offsets(&partitions)
        .await
        .expect("starts");
    assert_eq!(ends.values().sum::<i64>(), per_codec as i64);
    assert!(beginnings.values().all(|&o| o == 0));
    consumer.assign(&only).await.expect("assign");
    consumer.seek(&tp0, 5).await.expect("seek");
    let first = &consumer.poll(Duration::from_secs(5)).await.expect("poll")[0];
    assert_eq!(first.offset, 5);
    // The first record at or after a timestamp in the middle of the partition.
    consumer.seek(&tp0, 0).await.expect("seek");
    let all = read_all(&consumer, ends[&tp0] as usize).await;
    let middle = &all[all.len() / 2];
    consumer
        .seek_to_timestamp(&only, middle.timestamp)
        .await
        .expect("seek to time");
    let first = &consumer.poll(Duration::from_secs(5)).await.expect("poll")[0];
    assert_eq!(first.offset, middle.offset);
    let by_time = consumer
        .offsets_for_times(&BTreeMap::from([(tp0.clone(), middle.timestamp)]))
        .await
        .expect("offsets for times");
    assert_eq!(by_time[&tp0], middle.offset);
    consumer.seek_to_end(&only).await.expect("seek to end");
    assert!(
        consumer
            .poll(Duration::from_millis(300))
            .await
            .expect("poll")
            .is_empty()
    );
    assert_eq!(consumer.position(&tp0).await, Some(ends[&tp0]));
    // Paused partitions return nothing until resumed.
    consumer.seek_to_beginning(&only).await.expect("seek");
    consumer.pause(&only).await.expect("pause");
    assert!(
        consumer
            .poll(Duration::from_millis(500))
            .await
            .expect("poll")
            .is_empty()
    );
    assert_eq!(consumer.paused().await, only);
    consumer.resume(&only).await.expect("resume");
    assert_eq!(
        consumer.poll(Duration::from_secs(5)).await.expect("poll")[0].offset,
        0
    );
    consumer.close().await.expect("close");

    // auto.offset.reset=none with nothing committed: the poll fails, saying what to do.
    let consumer = Consumer::new(
        ClientConfig::new(&bootstrap)
            .set("group.id", "no-offsets")
            .set("auto.offset.reset", "none"),
    )
    .expect("consumer");
    consumer.assign(&only).await.expect("assign");
    let error = consumer
        .poll(Duration::from_secs(1))
        .await
        .expect_err("no offset");
    assert!(
        matches!(error, sluice::client::Error::NoOffset { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("seek"), "{error}");
    // After a commit the same consumer starts from it; confluent sees the commit too.
    consumer
        .commit_offsets(BTreeMap::from([(tp0.clone(), 7)]))
        .await
        .expect("commit");
    assert_eq!(
        consumer.poll(Duration::from_secs(5)).await.expect("poll")[0].offset,
        7
    );
    let committed = consumer.committed(&only).await.expect("committed");
    assert_eq!(committed[&tp0], 7);
    consumer.close().await.expect("close");
}

const CONFLUENT_MEMBER: &str = r#"
import json, sys, time
from confluent_kafka import Consumer
bootstrap, topic, group, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
c = Consumer({'bootstrap.servers': bootstrap, 'group.id': group, 'auto.offset.reset': 'earliest',
              'partition.assignment.strategy': 'range', 'enable.auto.commit': True,
              'auto.commit.interval.ms': 200})
assigned = []
def on_assign(consumer, partitions):
    assigned[:] = sorted(p.partition for p in partitions)
c.subscribe([topic], on_assign=on_assign)
seen = set()
end = time.time() + seconds
while time.time() < end:
    m = c.poll(0.2)
    if m is None or m.error():
        continue
    seen.add((m.partition(), m.offset()))
c.close()
print(json.dumps({'assigned': assigned, 'records': sorted(seen)}))
"#;

/// Polls `consumer` in a task of its own until `stop`, collecting (partition, offset).
fn member(
    consumer: Arc<Consumer>,
    seen: Arc<Mutex<BTreeSet<(i32, i64)>>>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !stop.load(Ordering::Acquire) {
            let records = consumer
                .poll(Duration::from_millis(200))
                .await
                .expect("poll");
            let mut seen = seen.lock().expect("lock");
            for record in records {
                seen.insert((record.partition, record.offset));
            }
        }
    })
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(40);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_groups_share_partitions_with_every_assignor_and_with_confluent() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let node = SingleNode::start(&[]);
    let bootstrap = node.bootstrap();
    let admin = Admin::new(ClientConfig::new(&bootstrap)).expect("admin");
    admin
        .create_topics(&[NewTopic::new("shared", 6, 1)], false)
        .await
        .expect("create");
    let producer = Producer::new(ClientConfig::new(&bootstrap)).expect("producer");
    let total = 3_000;
    for i in 0..total {
        producer
            .send(ProducerRecord::new("shared", format!("v{i}")).key(format!("k{i}")))
            .await
            .expect("send");
    }
    producer.close().await.expect("flushed");
    let every_partition: Vec<TopicPartition> =
        (0..6).map(|p| TopicPartition::new("shared", p)).collect();

    for (protocol, strategy) in [
        ("classic", "range"),
        ("classic", "roundrobin"),
        ("classic", "cooperative-sticky"),
        ("consumer", "range"),
    ] {
        let group = format!("g-{protocol}-{strategy}");
        let config = ClientConfig::new(&bootstrap)
            .set("group.id", group.as_str())
            .set("group.protocol", protocol)
            .set("partition.assignment.strategy", strategy)
            .set("auto.offset.reset", "earliest")
            .set("auto.commit.interval.ms", "200")
            .set("heartbeat.interval.ms", "500");
        let seen = Arc::new(Mutex::new(BTreeSet::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let a = Arc::new(Consumer::new(config.clone()).expect("consumer"));
        let b = Arc::new(Consumer::new(config).expect("consumer"));
        a.subscribe(&["shared"]).expect("subscribe");
        b.subscribe(&["shared"]).expect("subscribe");
        let tasks = [
            member(a.clone(), seen.clone(), stop.clone()),
            member(b.clone(), seen.clone(), stop.clone()),
        ];
        // Every record is read, and the two members split the partitions between them.
        wait_for(&format!("{group}: all records"), || {
            seen.lock().expect("lock").len() == total
        })
        .await;
        let mut split = (Vec::new(), Vec::new());
        let deadline = Instant::now() + Duration::from_secs(40);
        while Instant::now() < deadline {
            split = (a.assignment().await, b.assignment().await);
            if split.0.len() == 3 && split.1.len() == 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut both: Vec<TopicPartition> = split.0.iter().chain(&split.1).cloned().collect();
        both.sort();
        assert_eq!(both, every_partition, "{group}: disjoint halves {split:?}");
        // One leaves: the other takes every partition, and what was committed is the end.
        stop.store(true, Ordering::Release);
        for task in tasks {
            task.await.expect("member");
        }
        if let Err(error) = b.close().await {
            panic!(
                "{group}: close: {error}\n{}",
                support::tail(&node.logs(), 40)
            );
        }
        stop.store(false, Ordering::Release);
        let task = member(a.clone(), seen.clone(), stop.clone());
        let deadline = Instant::now() + Duration::from_secs(40);
        while a.assignment().await.len() != 6 {
            assert!(
                Instant::now() < deadline,
                "{group}: the survivor takes every partition"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        stop.store(true, Ordering::Release);
        task.await.expect("member");
        a.commit_sync().await.expect("commit");
        let committed = a.committed(&every_partition).await.expect("committed");
        assert_eq!(committed.values().sum::<i64>(), total as i64, "{group}");
        a.close().await.expect("close");
        println!("{group}: split {split:?}");
    }

    // A group of one SDK member and one confluent-kafka member: the assignment protocol is
    // the same on both sides, so they split the partitions and read everything between them.
    let python = std::thread::spawn({
        let bootstrap = bootstrap.clone();
        move || {
            std::process::Command::new("python3")
                .args([
                    "-c",
                    CONFLUENT_MEMBER,
                    &bootstrap,
                    "shared",
                    "g-mixed",
                    "12",
                ])
                .output()
                .expect("python3")
        }
    });
    let consumer = Arc::new(
        Consumer::new(
            ClientConfig::new(&bootstrap)
                .set("group.id", "g-mixed")
                .set("partition.assignment.strategy", "range")
                .set("auto.offset.reset", "earliest"),
        )
        .expect("consumer"),
    );
    consumer.subscribe(&["shared"]).expect("subscribe");
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let stop = Arc::new(AtomicBool::new(false));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let task = member(consumer.clone(), seen.clone(), stop.clone());
    let mut ours = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(9);
    while Instant::now() < deadline {
        ours = consumer.assignment().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let output = tokio::task::spawn_blocking(move || python.join().expect("python"))
        .await
        .expect("joined");
    stop.store(true, Ordering::Release);
    task.await.expect("member");
    consumer.close().await.expect("close");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let theirs: serde_json::Value =
        serde_json::from_str(stdout.trim().lines().last().unwrap_or("")).expect("json");
    let their_partitions: Vec<i32> = theirs["assigned"]
        .as_array()
        .expect("assigned")
        .iter()
        .filter_map(|p| p.as_i64().map(|p| p as i32))
        .collect();
    let mut all: Vec<i32> = ours
        .iter()
        .map(|tp| tp.partition)
        .chain(their_partitions.clone())
        .collect();
    all.sort();
    assert_eq!(
        all,
        [0, 1, 2, 3, 4, 5],
        "ours {ours:?}, confluent's {their_partitions:?}"
    );
    assert_eq!(ours.len(), 3, "range splits six partitions three and three");
    let mut union = seen.lock().expect("lock").clone();
    for pair in theirs["records"].as_array().expect("records") {
        union.insert((
            pair[0].as_i64().expect("partition") as i32,
            pair[1].as_i64().expect("offset"),
        ));
    }
    assert_eq!(union.len(), total, "between them they read every record");

    // The admin client's view of the groups: listed, described, offsets read, moved, deleted.
    let listed = admin.list_groups().await.expect("list groups");
    for group in ["g-classic-range", "g-consumer-range", "g-mixed"] {
        assert!(
            listed.iter().any(|g| g.group_id == group),
            "{group} in {listed:?}"
        );
    }
    let described = admin
        .describe_group("g-classic-range")
        .await
        .expect("describe");
    assert_eq!(described.state, "Empty");
    assert!(described.members.is_empty());
    let offsets = admin
        .list_group_offsets("g-classic-range")
        .await
        .expect("offsets");
    assert_eq!(offsets.values().sum::<i64>(), total as i64);
    let rewound: BTreeMap<TopicPartition, i64> = offsets.keys().map(|tp| (tp.clone(), 0)).collect();
    admin
        .alter_group_offsets("g-classic-range", &rewound)
        .await
        .expect("alter offsets");
    let offsets = admin
        .list_group_offsets("g-classic-range")
        .await
        .expect("offsets");
    assert_eq!(offsets.values().sum::<i64>(), 0);
    let ends = admin
        .list_offsets(
            &offsets.keys().cloned().collect(),
            sluice::client::OffsetSpec::Latest,
        )
        .await
        .expect("list offsets");
    assert_eq!(ends.values().flatten().sum::<i64>(), total as i64);
    admin
        .delete_groups(&["g-classic-range".to_string()])
        .await
        .expect("delete");
    let error = admin
        .describe_group("g-classic-range")
        .await
        .expect_err("deleted");
    assert_eq!(
        error.code(),
        Some(sluice::protocol::errors::GROUP_ID_NOT_FOUND),
        "{error}"
    );
}

/// An nftables rule that drops the SYNs to a port on loopback, so a connect there hangs as
/// to a partitioned broker; removed on drop.
struct SynDrop {
    table: String,
}

impl SynDrop {
    fn on(port: u16) -> SynDrop {
        let table = format!("sluice_syn_drop_{port}");
        let script = format!(
            "add table inet {table}\n\
             add chain inet {table} input {{ type filter hook input priority 0; }}\n\
             add rule inet {table} input tcp dport {port} tcp flags & (syn|ack) == syn drop\n"
        );
        let mut nft = std::process::Command::new("nft")
            .args(["-f", "-"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("nft (scripts/test installs nftables)");
        use std::io::Write;
        nft.stdin
            .take()
            .expect("stdin")
            .write_all(script.as_bytes())
            .expect("nft script");
        assert!(nft.wait().expect("nft").success(), "nft refused {script}");
        SynDrop { table }
    }
}

impl Drop for SynDrop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("nft")
            .args(["delete", "table", "inet", &self.table])
            .status();
    }
}

/// A leader the producer cannot reach (its connect hangs, as to a partitioned broker) delays
/// only its own partitions: records for the other leader are delivered meanwhile, and the
/// held one once the leader is reachable again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_connect_hangs_delays_only_its_own_partitions() {
    let cluster = support::Cluster::start_with_voters(2, 1, &[]);
    support::confluent_cluster(&cluster, "create-assigned", &["split", "1/2"]);
    // Bootstrapped from broker 1 only: no connection to broker 2 until partition 1 is sent to.
    let bootstrap = format!("127.0.0.1:{}", cluster.nodes[0].kafka_port);
    let producer = Producer::new(
        ClientConfig::new(&bootstrap)
            .set("linger.ms", "0")
            .set("socket.connection.setup.timeout.ms", "60000")
            .set("delivery.timeout.ms", "120000"),
    )
    .expect("producer");
    let to = |partition: i32, value: &str| {
        ProducerRecord::new("split", value.to_owned()).partition(partition)
    };
    producer
        .send(to(0, "first"))
        .await
        .expect("send")
        .await
        .expect("first record to broker 1");
    let blocked = SynDrop::on(cluster.nodes[1].kafka_port);
    let mut held = producer.send(to(1, "held")).await.expect("send");
    // Broker 1's partition goes on while the connect to broker 2 hangs (60 s): each record is
    // delivered long before that.
    for i in 0..20 {
        let delivery = producer.send(to(0, &format!("r{i}"))).await.expect("send");
        tokio::time::timeout(Duration::from_secs(20), delivery)
            .await
            .expect("a record to the reachable leader waited on the hanging one")
            .expect("delivered");
    }
    assert!(
        futures_poll_once(&mut held).await.is_none(),
        "the record to the unreachable leader was answered"
    );
    drop(blocked);
    let metadata = tokio::time::timeout(Duration::from_secs(90), held)
        .await
        .expect("the held record once broker 2 is reachable")
        .expect("delivered");
    assert_eq!(metadata.partition, 1);
}

/// Polls a future once: `Some` when it is ready.
async fn futures_poll_once<F: std::future::Future + Unpin>(future: &mut F) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match std::pin::Pin::new(&mut *future).poll(cx) {
            std::task::Poll::Ready(output) => Some(output),
            std::task::Poll::Pending => None,
        })
    })
    .await
}

/// A proxy in front of one broker's Kafka listener that, once told to, holds back every
/// Metadata request (as a broker that stopped answering would) and passes everything else.
struct MetadataHold {
    port: u16,
    holding: Arc<AtomicBool>,
    held: Arc<std::sync::atomic::AtomicUsize>,
}

impl MetadataHold {
    /// Listens now (the broker must advertise this port before it starts); forwards to
    /// `upstream` once [`MetadataHold::forward_to`] is called.
    async fn listen() -> (MetadataHold, tokio::net::TcpListener) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("proxy bind");
        let port = listener.local_addr().expect("proxy addr").port();
        let hold = MetadataHold {
            port,
            holding: Arc::new(AtomicBool::new(false)),
            held: Arc::default(),
        };
        (hold, listener)
    }

    fn forward_to(&self, listener: tokio::net::TcpListener, upstream: u16) {
        let (holding, held) = (self.holding.clone(), self.held.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(broker) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                else {
                    continue;
                };
                let (mut client_read, mut client_write) = client.into_split();
                let (mut broker_read, mut broker_write) = broker.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut broker_read, &mut client_write).await;
                });
                let (holding, held) = (holding.clone(), held.clone());
                tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    loop {
                        let Ok(size) = client_read.read_i32().await else {
                            return;
                        };
                        let mut body = vec![0; size.clamp(0, 64 << 20) as usize];
                        if client_read.read_exact(&mut body).await.is_err() {
                            return;
                        }
                        const METADATA: [u8; 2] = [0, 3];
                        if holding.load(Ordering::Acquire) && body.starts_with(&METADATA) {
                            held.fetch_add(1, Ordering::AcqRel);
                            continue;
                        }
                        let mut frame = size.to_be_bytes().to_vec();
                        frame.extend_from_slice(&body);
                        if broker_write.write_all(&frame).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
    }
}

/// A metadata refresh that gets no answer holds up only the topic it is for: the producer's
/// records for another topic on the same broker are delivered meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metadata_refresh_that_hangs_delays_only_its_own_topic() {
    let (proxy, listener) = MetadataHold::listen().await;
    // Every client connection goes through the proxy: the broker advertises it.
    let advertised = format!("advertised.listeners=PLAINTEXT://127.0.0.1:{}", proxy.port);
    let node = SingleNode::start(&[&advertised]);
    proxy.forward_to(listener, node.kafka_port);
    let bootstrap = format!("127.0.0.1:{}", proxy.port);
    let admin = Admin::new(ClientConfig::new(&bootstrap)).expect("admin");
    admin
        .create_topics(
            &[NewTopic::new("steady", 1, 1), NewTopic::new("gone", 1, 1)],
            false,
        )
        .await
        .expect("create topics");
    let producer = Producer::new(
        ClientConfig::new(&bootstrap)
            .set("linger.ms", "0")
            .set("request.timeout.ms", "60000")
            .set("delivery.timeout.ms", "120000"),
    )
    .expect("producer");
    for topic in ["steady", "gone"] {
        producer
            .send(ProducerRecord::new(topic, "first"))
            .await
            .expect("send")
            .await
            .expect("first record");
    }
    // "gone" is deleted: the producer's next record for it is refused (UNKNOWN_TOPIC_OR_
    // PARTITION) and it asks for the topic's metadata, which the proxy now holds back (60 s).
    admin
        .delete_topics(&["gone".to_owned()])
        .await
        .expect("delete");
    let deadline = Instant::now() + Duration::from_secs(20);
    while admin
        .list_topics(false)
        .await
        .expect("list topics")
        .contains(&"gone".to_owned())
    {
        assert!(
            Instant::now() < deadline,
            "the deleted topic is still listed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    proxy.holding.store(true, Ordering::Release);
    let mut lost = producer
        .send(ProducerRecord::new("gone", "lost"))
        .await
        .expect("send");
    wait_for("the producer's metadata request", || {
        proxy.held.load(Ordering::Acquire) > 0
    })
    .await;
    for i in 0..20 {
        let delivery = producer
            .send(ProducerRecord::new("steady", format!("r{i}")))
            .await
            .expect("send");
        tokio::time::timeout(Duration::from_secs(10), delivery)
            .await
            .expect("a record for another topic waited on the held metadata request")
            .expect("delivered");
    }
    assert!(
        futures_poll_once(&mut lost).await.is_none(),
        "the record for the deleted topic was answered while its metadata was held"
    );
}

/// Acknowledgements per partition: (value, when).
type AckedAt = BTreeMap<i32, Vec<(String, Instant)>>;

/// A hung leader (SIGSTOP: no FIN, no RST) with shipped liveness settings: it misses its
/// heartbeat, does not answer the controller's probe, and is fenced (not by its session,
/// 30 s here); its partition gets a new leader. The SDK's producer and consumer, whose
/// requests wait on the hung broker, abandon them once a survivor's metadata no longer lists
/// it, and go on at the new leader while the broker is still stopped: without that they
/// would wait out `request.timeout.ms` (30 s). Nothing acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_leader_is_fenced_in_seconds_and_the_sdk_moves_on_without_it() {
    let cluster = support::Cluster::start(
        3,
        &[
            // Shipped liveness settings (the test cluster's are shorter), a long session.
            "broker.heartbeat.interval.ms=1000",
            "controller.quorum.election.timeout.ms=1000",
            "broker.session.timeout.ms=30000",
            "min.insync.replicas=2",
        ],
    );
    support::confluent_cluster(&cluster, "create-assigned", &["hung", "1,2,3/2,3,1"]);
    cluster.wait_until("full ISRs", Duration::from_secs(30), |c| {
        support::leaders(c, "hung")
            .iter()
            .all(|(_, _, isr)| isr.len() == 3)
    });
    let config = || {
        ClientConfig::new(&cluster.bootstrap())
            .set("linger.ms", "0")
            .set("request.timeout.ms", "30000")
    };
    let producer = Arc::new(Producer::new(config().set("acks", "all")).expect("producer"));
    let consumer = Consumer::new(config()).expect("consumer");
    consumer
        .assign(&[TopicPartition::new("hung", 1)])
        .await
        .expect("assign");
    let acked: Arc<Mutex<AckedAt>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (producer, acked, stop) = (producer.clone(), acked.clone(), stop.clone());
        tokio::spawn(async move {
            let mut deliveries = Vec::new();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let partition = (i % 2) as i32;
                let value = format!("r{i}");
                let record = ProducerRecord::new("hung", value.clone()).partition(partition);
                let delivery = producer.send(record).await.expect("send");
                let acked = acked.clone();
                deliveries.push(tokio::spawn(async move {
                    if delivery.await.is_ok() {
                        let mut acked = acked.lock().expect("lock");
                        acked
                            .entry(partition)
                            .or_default()
                            .push((value, Instant::now()));
                    }
                }));
                i += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            for delivery in deliveries {
                let _ = delivery.await;
            }
        })
    };
    let acked_on = |partition: i32, after: Instant| {
        acked
            .lock()
            .expect("lock")
            .get(&partition)
            .map_or(0, |a| a.iter().filter(|(_, at)| *at > after).count())
    };
    let started = Instant::now();
    while acked_on(1, started) < 200 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no records acknowledged"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The consumer is reading partition 1 at its leader, broker 2.
    let read = consumer.poll(Duration::from_secs(10)).await.expect("poll");
    assert!(
        !read.is_empty(),
        "the consumer read nothing before the pause"
    );

    cluster.signal(1, libc::SIGSTOP);
    let paused_at = Instant::now();
    let resumed = |partition: i32| {
        acked
            .lock()
            .expect("lock")
            .get(&partition)
            .and_then(|a| a.iter().find(|(_, at)| *at > paused_at).cloned())
    };
    // Within the session (30 s) and the request timeout (30 s): only the probe and the SDK's
    // stall watch make it.
    let deadline = paused_at + Duration::from_secs(20);
    let (first_after, produced_at) = loop {
        if let Some(found) = resumed(1) {
            break found;
        }
        assert!(
            Instant::now() < deadline,
            "no record acknowledged on the hung broker's partition 20 s into the pause"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let producer_stall = produced_at - paused_at;
    // The consumer reaches a record written after the pause, at the new leader.
    let wanted: u64 = first_after[1..].parse().expect("r<i>");
    let mut consumer_resumed = None;
    // What the consumer read since the pause, for the failure message: (records, last offset
    // and value).
    let mut read_since_pause = (0usize, None::<(i64, String)>);
    while consumer_resumed.is_none() {
        if Instant::now() >= deadline {
            panic!(
                "the consumer read nothing written after the pause (r{wanted} on) 20 s into it; \
                 since the pause it read {} records, the last {:?}\n--- logs tail\n{}",
                read_since_pause.0,
                read_since_pause.1,
                support::tail(&cluster.logs(), 80)
            );
        }
        for record in consumer
            .poll(Duration::from_millis(200))
            .await
            .expect("poll")
        {
            let value =
                String::from_utf8_lossy(record.value.as_deref().unwrap_or_default()).to_string();
            if value[1..].parse::<u64>().is_ok_and(|i| i >= wanted) {
                consumer_resumed = Some(paused_at.elapsed());
            }
            read_since_pause = (read_since_pause.0 + 1, Some((record.offset, value)));
        }
    }
    let logs = cluster.logs();
    assert!(
        logs.contains("answers on none of its listeners"),
        "the hung broker was not fenced by its unanswered probe"
    );
    assert!(
        !logs.contains("broker session expired"),
        "a session expired: the probe did not fence the hung broker"
    );
    let (_, leader, isr) = support::leaders(&cluster, "hung")[1].clone();
    assert_ne!(leader, 2, "partition 1 is still led by the hung broker");
    println!(
        "hung leader: SDK producer resumed {producer_stall:?} and consumer {:?} after the pause; \
         partition 1 now led by {leader}, ISR {isr:?}",
        consumer_resumed.unwrap_or_default()
    );
    cluster.signal(1, libc::SIGCONT);
    stop.store(true, Ordering::Relaxed);
    writer.await.expect("writer");
    tokio::time::timeout(Duration::from_secs(60), producer.flush())
        .await
        .expect("flush within 60 s")
        .expect("flush");
    let acked: Vec<String> = acked
        .lock()
        .expect("lock")
        .values()
        .flatten()
        .map(|(value, _)| value.clone())
        .collect();
    // Read right after the resume: the old leader's stale image still names it leader of
    // partition 1, but it leads nothing until the controller answers it again.
    let stored = support::assert_acked_stored_once_in_order(&cluster, "hung", &acked);
    println!("{} acknowledged, {stored} stored, none lost", acked.len());
    assert!(
        cluster
            .logs()
            .contains("leading none until a heartbeat is answered"),
        "the resumed broker did not notice its stall"
    );
}
