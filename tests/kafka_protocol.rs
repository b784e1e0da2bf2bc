//! Protocol behaviour that clients rarely exercise on purpose, checked with requests encoded by
//! the `kafka-protocol` crate over a raw socket: the idempotent producer (duplicates, gaps,
//! fenced epochs, state across kill -9 and clean restarts) and incremental fetch sessions.

mod support;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, InitProducerIdRequest, InitProducerIdResponse,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use sluice::log::batch::BatchBuilder;
use support::SingleNode;
use support::raw::{Client, idempotent_batch};

#[test]
fn idempotent_producer_dedupes_orders_and_fences_across_restarts() {
    let mut node = SingleNode::start(&[]);
    let mut client = Client::connect(node.kafka_port);
    client.create_topic("idem", 1);
    let pid = client.init_producer_id();
    assert!(pid >= 0);
    // Producer ids are unique: a second InitProducerId gets another.
    let again: InitProducerIdResponse = client.call(
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_producer_id((-1).into())
            .with_producer_epoch(-1),
    );
    assert_ne!(again.producer_id.0, pid);

    assert_eq!(
        client.produce("idem", 0, idempotent_batch(pid, 0, 0, 5)),
        (0, 0)
    );
    // A retry of the same batch: success with the original offset, nothing appended.
    assert_eq!(
        client.produce("idem", 0, idempotent_batch(pid, 0, 0, 5)),
        (0, 0)
    );
    assert_eq!(client.latest_offset("idem", 0), 5);
    assert_eq!(
        client.produce("idem", 0, idempotent_batch(pid, 0, 5, 3)),
        (0, 5)
    );
    // A gap in sequences: OUT_OF_ORDER_SEQUENCE_NUMBER (45).
    assert_eq!(
        client.produce("idem", 0, idempotent_batch(pid, 0, 10, 1)).0,
        45
    );
    // A new epoch restarts sequences; the old epoch is fenced: INVALID_PRODUCER_EPOCH (47).
    assert_eq!(
        client.produce("idem", 0, idempotent_batch(pid, 1, 0, 2)),
        (0, 8)
    );
    assert_eq!(
        client.produce("idem", 0, idempotent_batch(pid, 0, 8, 1)).0,
        47
    );
    assert_eq!(client.latest_offset("idem", 0), 10);

    // kill -9: the state is rebuilt from the log.
    node.kill9();
    node.restart();
    let mut client = Client::connect(node.kafka_port);
    assert_eq!(
        client.produce("idem", 0, idempotent_batch(pid, 1, 0, 2)),
        (0, 8)
    );
    assert_eq!(
        client.produce("idem", 0, idempotent_batch(pid, 0, 8, 1)).0,
        47
    );
    assert_eq!(
        client.produce("idem", 0, idempotent_batch(pid, 1, 2, 1)),
        (0, 10)
    );
    // A clean stop: the state comes back from the snapshot written at shutdown.
    assert!(node.terminate(), "SIGTERM exit");
    let snapshots = std::fs::read_dir(node.data_dir().join("idem-0"))
        .expect("partition dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".snapshot"))
        .count();
    assert!(snapshots >= 1, "no producer snapshot written at shutdown");
    node.restart();
    let mut client = Client::connect(node.kafka_port);
    assert_eq!(
        client.produce("idem", 0, idempotent_batch(pid, 1, 2, 1)),
        (0, 10)
    );
    assert_eq!(
        client.produce("idem", 0, idempotent_batch(pid, 1, 4, 1)).0,
        45
    );
    assert_eq!(client.latest_offset("idem", 0), 11);
}

fn fetch(
    client: &mut Client,
    session_id: i32,
    epoch: i32,
    partitions: &[(i32, i64)],
    forgotten: &[i32],
) -> FetchResponse {
    let topic = TopicName(StrBytes::from_static_str("sess"));
    let mut request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(200)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_session_id(session_id)
        .with_session_epoch(epoch);
    if !partitions.is_empty() {
        request.topics = vec![
            FetchTopic::default()
                .with_topic(topic.clone())
                .with_partitions(
                    partitions
                        .iter()
                        .map(|(p, offset)| {
                            FetchPartition::default()
                                .with_partition(*p)
                                .with_fetch_offset(*offset)
                                .with_partition_max_bytes(1 << 20)
                        })
                        .collect(),
                ),
        ];
    }
    if !forgotten.is_empty() {
        request.forgotten_topics_data = vec![
            ForgottenTopic::default()
                .with_topic(topic)
                .with_partitions(forgotten.to_vec()),
        ];
    }
    client.call(ApiKey::Fetch, 12, &request)
}

fn partitions_in(response: &FetchResponse) -> Vec<(i32, usize)> {
    response
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| (p.partition_index, p.records.as_ref().map_or(0, Bytes::len)))
        .collect()
}

fn plain_batch(value: &str) -> Vec<u8> {
    let mut builder = BatchBuilder::new(0, 1_700_000_000_000);
    builder.push(1_700_000_000_000, None, Some(value.as_bytes()), &[]);
    builder.build()
}

#[test]
fn incremental_fetch_sessions_send_only_what_changed() {
    let node = SingleNode::start(&[]);
    let mut client = Client::connect(node.kafka_port);
    client.create_topic("sess", 2);
    assert_eq!(client.produce("sess", 0, plain_batch("a")).0, 0);

    // A full fetch that opens a session: both partitions, p0 with its batch.
    let full = fetch(&mut client, 0, 0, &[(0, 0), (1, 0)], &[]);
    assert_eq!(full.error_code, 0);
    assert_ne!(full.session_id, 0, "no session was created");
    let session = full.session_id;
    let got = partitions_in(&full);
    assert_eq!(got.len(), 2);
    assert!(got.iter().any(|(p, bytes)| *p == 0 && *bytes > 0));

    // Incremental, p0 moved past its batch, nothing new anywhere: an empty response.
    let quiet = fetch(&mut client, session, 1, &[(0, 1)], &[]);
    assert_eq!(quiet.error_code, 0);
    assert_eq!(partitions_in(&quiet), vec![]);

    // New data on p1 (still at offset 0 in the session): only p1 comes back.
    assert_eq!(client.produce("sess", 1, plain_batch("b")).0, 0);
    let changed = fetch(&mut client, session, 2, &[], &[]);
    let got = partitions_in(&changed);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, 1);
    assert!(got[0].1 > 0);

    // Session errors are top-level: a wrong epoch, an unknown session.
    assert_eq!(fetch(&mut client, session, 9, &[], &[]).error_code, 71);
    assert_eq!(
        fetch(&mut client, session + 1000, 1, &[], &[]).error_code,
        70
    );

    // Forget p1 (and move p1's offset nowhere): new data on p1 no longer shows.
    let forgot = fetch(&mut client, session, 3, &[], &[1]);
    assert_eq!(forgot.error_code, 0);
    assert_eq!(client.produce("sess", 1, plain_batch("c")).0, 0);
    let after = fetch(&mut client, session, 4, &[], &[]);
    assert_eq!(partitions_in(&after), vec![]);
    // Closing the session (epoch -1) answers as a sessionless full fetch.
    let closed = fetch(&mut client, session, -1, &[(1, 0)], &[]);
    assert_eq!(closed.session_id, 0);
    assert_eq!(partitions_in(&closed).len(), 1);
    assert_eq!(fetch(&mut client, session, 5, &[], &[]).error_code, 70);
    // Past the log end: OFFSET_OUT_OF_RANGE (1) at the partition, with the watermarks.
    let out_of_range = fetch(&mut client, 0, -1, &[(0, 1000)], &[]);
    let p = &out_of_range.responses[0].partitions[0];
    assert_eq!(
        (p.error_code, p.high_watermark, p.log_start_offset),
        (1, 1, 0)
    );
}

/// A replica fetch (replica id set) of partition 0 of `topic` at `offset`, saying the last
/// batch the follower holds has `last_fetched_epoch`.
fn replica_fetch(
    client: &mut Client,
    replica_id: i32,
    topic: &str,
    offset: i64,
    last_fetched_epoch: i32,
) -> kafka_protocol::messages::fetch_response::PartitionData {
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(replica_id))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(offset)
                        .with_last_fetched_epoch(last_fetched_epoch)
                        .with_partition_max_bytes(1 << 20),
                ]),
        ]);
    let response: FetchResponse = client.call(ApiKey::Fetch, 12, &request);
    response.responses[0].partitions[0].clone()
}

/// KIP-320 on the leader, with fetches in the name of its real follower (broker 2), and a
/// fetch naming a broker that is no replica of the partition: refused, as Kafka does, with
/// NOT_LEADER_OR_FOLLOWER, and its offset never counts toward the high watermark.
#[test]
fn a_follower_whose_last_fetched_epoch_ends_earlier_is_told_where_logs_diverge() {
    let cluster = support::Cluster::start(2, &[]);
    let mut client = Client::connect(cluster.nodes[0].kafka_port);
    client.create_topic_assigned("div", &[vec![1, 2]]);
    let mut produced = 0;
    for value in ["a", "b", "c"] {
        // Retried while the follower joins the ISR at the start.
        loop {
            if client.produce("div", 0, plain_batch(value)).0 == 0 {
                break;
            }
            produced += 1;
            assert!(produced < 100, "produce keeps failing");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    // Not a replica: refused, with no records (the unit tests show it changes no state).
    let stranger = replica_fetch(&mut client, 7, "div", 3, -1);
    assert_eq!(
        stranger.error_code, 6,
        "NOT_LEADER_OR_FOLLOWER: {stranger:?}"
    );
    assert!(stranger.records.is_none_or(|r| r.is_empty()));
    // The leader's epoch, from the first batch's header (partition leader epoch field).
    let consumer_view = replica_fetch(&mut client, 2, "div", 0, -1);
    let records = consumer_view.records.expect("records");
    let epoch = i32::from_be_bytes(records[12..16].try_into().expect("4 bytes"));
    // Consistent: the follower's last epoch ends at or after its fetch offset.
    let fine = replica_fetch(&mut client, 2, "div", 3, epoch);
    assert_eq!((fine.error_code, fine.diverging_epoch.epoch), (0, -1));
    // Records past our log end under our own epoch: they diverge at our log end.
    let ahead = replica_fetch(&mut client, 2, "div", 5, epoch);
    assert_eq!(ahead.error_code, 0);
    assert_eq!(
        (
            ahead.diverging_epoch.epoch,
            ahead.diverging_epoch.end_offset
        ),
        (epoch, 3)
    );
    assert!(ahead.records.is_none_or(|r| r.is_empty()));
    // An epoch later than any this leader knows: undefined, as Kafka answers; the follower
    // then asks OffsetForLeaderEpoch and keeps what was committed.
    let unknown = replica_fetch(&mut client, 2, "div", 2, epoch + 3);
    assert_eq!(
        (
            unknown.diverging_epoch.epoch,
            unknown.diverging_epoch.end_offset
        ),
        (-1, -1)
    );
}

/// Single-record produce requests on several connections to one partition complete out of
/// order; the high watermark must only move forward. It moved back (an older append's
/// candidate overwrote a newer one), which took the partition offline (a panic in debug
/// builds) within a second of `sluice perf produce-batches`.
#[test]
fn concurrent_appends_never_move_the_high_watermark_back() {
    let node = SingleNode::start(&[]);
    let bootstrap = node.bootstrap();
    let sluice = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(args)
            .args(["--bootstrap-server", bootstrap.as_str()])
            .output()
            .expect("sluice")
    };
    let created = sluice(&["topics", "create", "hw-race", "--partitions", "1"]);
    assert!(created.status.success(), "{created:?}");
    let produced = sluice(&[
        "perf",
        "produce-batches",
        "--topic",
        "hw-race",
        "--partitions",
        "1",
        "--connections",
        "4",
        "--batch-records",
        "1",
        "--record-bytes",
        "100",
        "--seconds",
        "3",
    ]);
    let logs = node.logs();
    assert!(
        produced.status.success() && !logs.contains("invariant"),
        "{}\n{}",
        String::from_utf8_lossy(&produced.stderr),
        support::tail(&logs, 30)
    );
}
