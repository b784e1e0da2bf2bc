//! The SDK's transactional producer and transaction admin against a real `sluice server`:
//! committed transactions are read and aborted ones skipped by `read_committed` consumers (the
//! SDK's and confluent-kafka's), offsets sent to a transaction commit with its output and not
//! without it, a fenced producer gets a fatal error for every later call, and the `sluice
//! transactions` commands show an open transaction (and abort it) while `sluice consume
//! --isolation-level read_committed` stops before it.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use sluice::client::{
    Admin, ClientConfig, Consumer, ConsumerRecord, NewTopic, Producer, ProducerRecord,
    TopicPartition, TransactionState,
};
use support::SingleNode;

fn admin(node: &SingleNode) -> Admin {
    Admin::new(ClientConfig::new(&node.bootstrap())).expect("admin")
}

async fn create_topic(node: &SingleNode, topic: &str, partitions: i32) {
    admin(node)
        .create_topics(&[NewTopic::new(topic, partitions, 1)], false)
        .await
        .expect("create topic");
}

fn transactional(node: &SingleNode, transactional_id: &str) -> Producer {
    Producer::new(
        ClientConfig::new(&node.bootstrap())
            .set("transactional.id", transactional_id)
            .set("linger.ms", "5"),
    )
    .expect("transactional producer")
}

fn plain(node: &SingleNode) -> Producer {
    Producer::new(ClientConfig::new(&node.bootstrap())).expect("producer")
}

/// Sends `values` (keyed by themselves, so they spread over the partitions).
async fn send_all(producer: &Producer, topic: &str, values: &[String]) {
    let mut deliveries = Vec::new();
    for value in values {
        let record = ProducerRecord::new(topic, value.clone()).key(value.clone());
        deliveries.push(producer.send(record).await.expect("queued"));
    }
    producer.flush().await.expect("flushed");
    for delivery in deliveries {
        delivery.await.expect("delivered");
    }
}

fn values(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}-{i}")).collect()
}

/// Every record of `topic` from the beginning, read with `isolation.level`, until `expected`
/// came or nothing more came for a while.
async fn read_topic(
    node: &SingleNode,
    topic: &str,
    isolation_level: &str,
    expected: usize,
) -> Vec<ConsumerRecord> {
    let consumer = Consumer::new(
        ClientConfig::new(&node.bootstrap())
            .set("isolation.level", isolation_level)
            .set("auto.offset.reset", "earliest"),
    )
    .expect("consumer");
    let partitions = consumer.partitions_for(topic).await.expect("partitions");
    consumer.assign(&partitions).await.expect("assign");
    let mut records = Vec::new();
    let mut quiet_since = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let polled = consumer
            .poll(Duration::from_millis(500))
            .await
            .expect("poll");
        if polled.is_empty() {
            // Past what is expected, a short quiet spell says nothing more is coming.
            if records.len() >= expected && quiet_since.elapsed() > Duration::from_secs(2) {
                break;
            }
        } else {
            quiet_since = Instant::now();
            records.extend(polled);
        }
    }
    consumer.close().await.expect("close");
    records
}

fn value_set(records: &[ConsumerRecord]) -> BTreeSet<String> {
    records
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect()
}

const CONFLUENT_READ_COMMITTED: &str = r#"
import json, sys, time
from confluent_kafka import Consumer, TopicPartition
bootstrap, topic, expected = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = Consumer({'bootstrap.servers': bootstrap, 'group.id': 'confluent-read-committed',
              'enable.auto.commit': False, 'isolation.level': 'read_committed',
              'enable.partition.eof': True})
md = c.list_topics(topic, timeout=10).topics[topic]
c.assign([TopicPartition(topic, p, 0) for p in md.partitions])
values, at_end = [], set()
deadline = time.time() + 30
while time.time() < deadline and (len(values) < expected or len(at_end) < len(md.partitions)):
    m = c.poll(1)
    if m is None:
        continue
    if m.error():
        if m.error().code() == -191:  # _PARTITION_EOF: the end this isolation level reads to
            at_end.add(m.partition())
            continue
        raise SystemExit(str(m.error()))
    values.append(m.value().decode())
c.close()
print(json.dumps(sorted(values)))
"#;

/// What confluent-kafka's `read_committed` consumer reads of `topic`.
fn confluent_read_committed(node: &SingleNode, topic: &str, expected: usize) -> Vec<String> {
    let out = support::run_client(
        node,
        "python3",
        &[
            "-c",
            CONFLUENT_READ_COMMITTED,
            &node.bootstrap(),
            topic,
            &expected.to_string(),
        ],
    );
    let line = out.lines().last().expect("a line of output");
    serde_json::from_str(line).expect("a JSON list")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_transactions_are_read_and_aborted_ones_skipped_by_read_committed_consumers() {
    let node = SingleNode::start(&[]);
    create_topic(&node, "txn", 3).await;
    let producer = transactional(&node, "sdk-commit-abort");
    assert_eq!(
        producer.transaction_state(),
        Some(TransactionState::Uninitialized)
    );
    producer.init_transactions().await.expect("init");
    assert_eq!(producer.transaction_state(), Some(TransactionState::Ready));

    producer.begin_transaction().expect("begin");
    send_all(&producer, "txn", &values("committed", 12)).await;
    producer.commit_transaction().await.expect("commit");

    producer.begin_transaction().expect("begin");
    send_all(&producer, "txn", &values("aborted", 12)).await;
    producer.abort_transaction().await.expect("abort");
    assert_eq!(producer.transaction_state(), Some(TransactionState::Ready));

    // Records still buffered when the abort comes are dropped, never sent.
    producer.begin_transaction().expect("begin");
    let unsent = producer
        .send(ProducerRecord::new("txn", "dropped").partition(0))
        .await
        .expect("queued");
    producer.abort_transaction().await.expect("abort");
    match unsent.await {
        Ok(stored) => assert!(stored.offset >= 0, "sent before the abort: {stored:?}"),
        Err(error) => assert!(
            matches!(error, sluice::client::Error::TransactionAborted),
            "{error}"
        ),
    }

    producer.begin_transaction().expect("begin");
    send_all(&producer, "txn", &values("later", 12)).await;
    producer.commit_transaction().await.expect("commit");
    // A transaction that wrote nothing commits too (without the coordinator).
    producer.begin_transaction().expect("begin");
    producer.commit_transaction().await.expect("empty commit");

    let mut expected: BTreeSet<String> = values("committed", 12).into_iter().collect();
    expected.extend(values("later", 12));

    let committed = read_topic(&node, "txn", "read_committed", expected.len()).await;
    assert_eq!(
        committed.len(),
        expected.len(),
        "no duplicates, nothing aborted"
    );
    assert_eq!(value_set(&committed), expected);

    let everything = read_topic(&node, "txn", "read_uncommitted", 36).await;
    let all = value_set(&everything);
    assert!(
        values("aborted", 12).iter().all(|v| all.contains(v)),
        "read_uncommitted sees the aborted records too"
    );

    let theirs = confluent_read_committed(&node, "txn", expected.len());
    assert_eq!(
        theirs,
        expected.iter().cloned().collect::<Vec<_>>(),
        "confluent-kafka's read_committed consumer reads the same"
    );
    producer.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_sent_to_a_transaction_commit_with_its_output_and_not_when_it_aborts() {
    let node = SingleNode::start(&[]);
    create_topic(&node, "eos-in", 1).await;
    create_topic(&node, "eos-out", 1).await;
    send_all(&plain(&node), "eos-in", &values("input", 10)).await;

    let consumer = Consumer::new(
        ClientConfig::new(&node.bootstrap())
            .set("group.id", "eos")
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .set("auto.offset.reset", "earliest"),
    )
    .expect("consumer");
    consumer.subscribe(&["eos-in"]).expect("subscribe");
    let mut input = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while input.len() < 10 && Instant::now() < deadline {
        input.extend(
            consumer
                .poll(Duration::from_millis(500))
                .await
                .expect("poll"),
        );
    }
    assert_eq!(input.len(), 10);
    let group = consumer.group_metadata().expect("a group member");
    assert_eq!(group.group_id, "eos");
    assert!(group.generation_id >= 1, "{group:?}");
    assert!(!group.member_id.is_empty(), "{group:?}");

    let next_offset = input.last().map_or(0, |r| r.offset + 1);
    let offsets = BTreeMap::from([(TopicPartition::new("eos-in", 0), next_offset)]);
    let output: Vec<String> = input.iter().map(|r| format!("out-{}", r.offset)).collect();
    let producer = transactional(&node, "sdk-eos");
    producer.init_transactions().await.expect("init");

    // Aborted: neither the output nor the offsets.
    producer.begin_transaction().expect("begin");
    send_all(&producer, "eos-out", &output).await;
    producer
        .send_offsets_to_transaction(&offsets, &group)
        .await
        .expect("offsets");
    producer.abort_transaction().await.expect("abort");
    let committed = consumer
        .committed(&[TopicPartition::new("eos-in", 0)])
        .await
        .expect("committed");
    assert!(
        committed.is_empty(),
        "no offset after the abort: {committed:?}"
    );

    // Committed: both.
    producer.begin_transaction().expect("begin");
    send_all(&producer, "eos-out", &output).await;
    producer
        .send_offsets_to_transaction(&offsets, &group)
        .await
        .expect("offsets");
    producer.commit_transaction().await.expect("commit");
    let committed = consumer
        .committed(&[TopicPartition::new("eos-in", 0)])
        .await
        .expect("committed");
    assert_eq!(
        committed.get(&TopicPartition::new("eos-in", 0)),
        Some(&next_offset)
    );
    let read = read_topic(&node, "eos-out", "read_committed", output.len()).await;
    assert_eq!(read.len(), output.len(), "the committed output once");
    assert_eq!(value_set(&read), output.iter().cloned().collect());

    // Offsets for a generation the group has moved past are refused: abortable.
    producer.begin_transaction().expect("begin");
    let stale = sluice::client::ConsumerGroupMetadata {
        generation_id: group.generation_id + 10,
        ..group.clone()
    };
    let refused = producer
        .send_offsets_to_transaction(&offsets, &stale)
        .await
        .expect_err("a wrong generation");
    assert!(refused.is_abortable(), "{refused}");
    assert!(
        refused.to_string().contains("ILLEGAL_GENERATION"),
        "{refused}"
    );
    let again = producer
        .send(ProducerRecord::new("eos-out", "x"))
        .await
        .err()
        .expect("only abort now");
    assert!(again.is_abortable(), "{again}");
    producer.abort_transaction().await.expect("abort");
    producer
        .begin_transaction()
        .expect("a new transaction after the abort");
    producer.abort_transaction().await.expect("abort");
    consumer.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_producer_gets_the_fatal_error_for_every_later_call() {
    let node = SingleNode::start(&[]);
    create_topic(&node, "fence", 1).await;
    let zombie = transactional(&node, "sdk-fence");
    zombie.init_transactions().await.expect("init");
    zombie.begin_transaction().expect("begin");
    send_all(&zombie, "fence", &values("zombie", 3)).await;

    // A new instance with the same transactional id: the zombie's open transaction is
    // aborted and its epoch fenced.
    let successor = transactional(&node, "sdk-fence");
    successor
        .init_transactions()
        .await
        .expect("init fences the zombie");

    let fenced = zombie
        .commit_transaction()
        .await
        .expect_err("the zombie is fenced");
    assert!(fenced.is_fatal(), "{fenced}");
    assert!(
        fenced.to_string().starts_with("PRODUCER_FENCED"),
        "{fenced}"
    );
    assert_eq!(
        zombie.transaction_state(),
        Some(TransactionState::FatalError)
    );
    let begin = zombie.begin_transaction().expect_err("fatal");
    let send = zombie
        .send(ProducerRecord::new("fence", "late"))
        .await
        .err()
        .expect("fatal");
    let abort = zombie.abort_transaction().await.expect_err("fatal");
    for error in [&begin, &send, &abort] {
        assert!(error.is_fatal(), "{error}");
        assert_eq!(error.to_string(), fenced.to_string());
    }

    successor.begin_transaction().expect("begin");
    send_all(&successor, "fence", &values("successor", 3)).await;
    successor.commit_transaction().await.expect("commit");
    let read = read_topic(&node, "fence", "read_committed", 3).await;
    assert_eq!(
        value_set(&read),
        values("successor", 3).into_iter().collect()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_record_makes_the_transaction_abortable_and_the_abort_bumps_the_epoch() {
    let node = SingleNode::start(&[]);
    admin(&node)
        .create_topics(
            &[NewTopic::new("small", 1, 1).config("max.message.bytes", "1000")],
            false,
        )
        .await
        .expect("create topic");
    let producer = transactional(&node, "sdk-bump");
    producer.init_transactions().await.expect("init");
    let epoch = || async {
        admin(&node)
            .describe_transactions(&["sdk-bump".to_owned()])
            .await
            .expect("describe")[0]
            .producer_epoch
    };
    let first_epoch = epoch().await;

    producer.begin_transaction().expect("begin");
    send_all(&producer, "small", &values("kept-out", 2)).await;
    let too_large = producer
        .send(ProducerRecord::new("small", vec![b'x'; 5_000]).partition(0))
        .await
        .expect("queued")
        .await
        .expect_err("larger than max.message.bytes");
    assert!(
        too_large.to_string().starts_with("MESSAGE_TOO_LARGE"),
        "{too_large}"
    );
    let commit = producer.commit_transaction().await.expect_err("abortable");
    assert!(commit.is_abortable(), "{commit}");
    producer.abort_transaction().await.expect("abort");
    assert_eq!(epoch().await, first_epoch + 1, "bumped after the abort");

    producer.begin_transaction().expect("begin");
    send_all(&producer, "small", &values("committed", 3)).await;
    producer.commit_transaction().await.expect("commit");
    let read = read_topic(&node, "small", "read_committed", 3).await;
    assert_eq!(
        value_set(&read),
        values("committed", 3).into_iter().collect()
    );
}

fn sluice(node: &SingleNode, args: &[&str]) -> Output {
    let bootstrap = node.bootstrap();
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .args(["--bootstrap-server", bootstrap.as_str()])
        .output()
        .expect("run sluice")
}

fn ok(node: &SingleNode, args: &[&str]) -> String {
    let output = sluice(node, args);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "sluice {args:?}: {}\n{stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The table's rows as maps from its header's columns.
fn table(text: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines.next().expect("a header").split_whitespace().collect();
    lines
        .map(|line| {
            header
                .iter()
                .map(|h| h.to_string())
                .zip(line.split_whitespace().map(str::to_owned))
                .collect()
        })
        .collect()
}

fn consume_values(node: &SingleNode, topic: &str, isolation_level: &str) -> Vec<String> {
    ok(
        node,
        &[
            "consume",
            topic,
            "--from-beginning",
            "--isolation-level",
            isolation_level,
            "--timeout-ms",
            "3000",
        ],
    )
    .lines()
    .map(str::to_owned)
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_shows_an_open_transaction_and_read_committed_consume_stops_before_it() {
    let node = SingleNode::start(&[]);
    create_topic(&node, "open", 1).await;
    let plain = plain(&node);
    send_all(&plain, "open", &values("before", 3)).await;
    let producer = transactional(&node, "sdk-open");
    producer.init_transactions().await.expect("init");
    producer.begin_transaction().expect("begin");
    send_all(&producer, "open", &values("pending", 2)).await;
    send_all(&plain, "open", &values("after", 2)).await;

    let listed = table(&ok(&node, &["transactions", "list"]));
    let row = listed
        .iter()
        .find(|r| r["TransactionalId"] == "sdk-open")
        .unwrap_or_else(|| panic!("sdk-open listed: {listed:?}"));
    assert_eq!(row["TransactionState"], "Ongoing");
    assert_eq!(row["Coordinator"], "1");
    let producer_id = row["ProducerId"].clone();
    let ongoing = table(&ok(&node, &["transactions", "list", "--state", "Ongoing"]));
    assert!(ongoing.iter().any(|r| r["TransactionalId"] == "sdk-open"));
    let completed = table(&ok(
        &node,
        &["transactions", "list", "--state", "CompleteCommit"],
    ));
    assert!(completed.iter().all(|r| r["TransactionalId"] != "sdk-open"));
    let bogus = sluice(&node, &["transactions", "list", "--state", "Bogus"]);
    assert!(!bogus.status.success());
    let stderr = String::from_utf8_lossy(&bogus.stderr);
    assert!(
        stderr.contains("\"Bogus\" is not a transaction state"),
        "{stderr}"
    );
    // kafka-transactions.sh's order: the connection flags before the subcommand.
    let bootstrap = node.bootstrap();
    let kafka_order = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["transactions", "--bootstrap-server", &bootstrap, "list"])
        .output()
        .expect("run");
    assert!(kafka_order.status.success(), "{kafka_order:?}");

    let described = table(&ok(&node, &["transactions", "describe", "sdk-open"]));
    assert_eq!(described.len(), 1, "{described:?}");
    let row = &described[0];
    assert_eq!(row["TransactionalId"], "sdk-open");
    assert_eq!(row["ProducerId"], producer_id);
    assert_eq!(row["TransactionState"], "Ongoing");
    assert_eq!(row["TransactionTimeoutMs"], "60000");
    assert_eq!(row["TopicPartitions"], "open-0");
    assert_ne!(row["CurrentTransactionStartTimeMs"], "None");
    let json: serde_json::Value = serde_json::from_str(&ok(
        &node,
        &[
            "transactions",
            "describe",
            "--transactional-id",
            "sdk-open",
            "--output",
            "json",
        ],
    ))
    .expect("json");
    assert_eq!(json["transaction_state"], "Ongoing");
    assert_eq!(json["topic_partitions"][0], "open-0");

    let producers = table(&ok(
        &node,
        &["transactions", "describe-producers", "open", "0"],
    ));
    let row = producers
        .iter()
        .find(|r| r["ProducerId"] == producer_id)
        .unwrap_or_else(|| panic!("the transactional producer: {producers:?}"));
    assert_eq!(row["CurrentTransactionStartOffset"], "3");
    assert_eq!(row["LastSequence"], "1");

    // An unknown id is named with Kafka's error, exit code 4.
    let missing = sluice(&node, &["transactions", "describe", "nobody"]);
    assert_eq!(missing.status.code(), Some(4));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("TRANSACTIONAL_ID_NOT_FOUND"), "{stderr}");

    // read_committed stops before the open transaction; read_uncommitted reads on.
    assert_eq!(
        consume_values(&node, "open", "read_committed"),
        values("before", 3)
    );
    assert_eq!(consume_values(&node, "open", "read_uncommitted").len(), 7);

    // kafka-transactions.sh's abort of a hanging transaction, by its start offset: the
    // partition's transaction ends, read_committed reads past it (without its records).
    let aborted = ok(
        &node,
        &[
            "transactions",
            "abort",
            "--topic",
            "open",
            "--partition",
            "0",
            "--start-offset",
            "3",
        ],
    );
    assert!(aborted.starts_with("Aborted transaction"), "{aborted}");
    let mut expected = values("before", 3);
    expected.extend(values("after", 2));
    assert_eq!(consume_values(&node, "open", "read_committed"), expected);
    let producers = table(&ok(
        &node,
        &[
            "transactions",
            "describe-producers",
            "--topic",
            "open",
            "--partition",
            "0",
        ],
    ));
    assert!(
        producers
            .iter()
            .all(|r| r["CurrentTransactionStartOffset"] == "None"),
        "{producers:?}"
    );
}
