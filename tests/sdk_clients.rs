//! The Rust client SDK against a real broker: the producer with every codec, its partitions
//! for keys against confluent-kafka's `murmur2_random`, and idempotent retries across a
//! kill -9 of the broker; the admin client. confluent-kafka reads back what the SDK wrote.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use sluice::client::{Admin, ClientConfig, NewTopic, Producer, ProducerRecord};
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
