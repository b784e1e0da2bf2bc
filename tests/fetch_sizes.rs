//! Fetch sizes as Kafka (KIP-74): a Fetch response's records stay within the request's
//! `max_bytes`, and each partition's within min(`partition_max_bytes`, what is left of
//! `max_bytes`), except for one batch: the first batch of the first partition that returns
//! records, so a client always progresses. Checked on the wire (each response frame's size
//! read off the socket, sessionless and in an incremental session), with the SDK consumer,
//! with librdkafka (confluent-kafka, whose `receive.message.max.bytes` refuses larger frames),
//! and for followers, whose batches may exceed `replica.fetch.max.bytes` and must get their
//! turn while other partitions stay busy.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, MetadataRequest, MetadataResponse,
    ProduceRequest, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use sluice::client::{ClientConfig, Consumer, ConsumerRecord};
use sluice::log::batch::BatchBuilder;
use support::raw::Client;
use support::{Cluster, SingleNode};

/// What a response may add to its records: headers, topics, partition fields. librdkafka
/// allows 512 bytes over `fetch.max.bytes` (its `receive.message.max.bytes` default rule).
const RESPONSE_OVERHEAD_MAX_BYTES: usize = 512;

/// One batch holding one record of `value_bytes` bytes.
fn batch_of(value_bytes: usize, tag: u8) -> Vec<u8> {
    let mut builder = BatchBuilder::new(0, 1_700_000_000_000);
    builder.push(1_700_000_000_000, None, Some(&vec![tag; value_bytes]), &[]);
    builder.build()
}

/// Writes `layout[p]` (one record per batch, of those value sizes) to partition `p` of `topic`.
fn produce_layout(client: &mut Client, topic: &str, layout: &[Vec<usize>]) {
    for (partition, sizes) in layout.iter().enumerate() {
        for (n, &size) in sizes.iter().enumerate() {
            let (code, offset) = client.produce(topic, partition as i32, batch_of(size, n as u8));
            assert_eq!(
                (code, offset),
                (0, n as i64),
                "produce to {topic}-{partition}"
            );
        }
    }
}

/// The topic id, from Metadata.
fn topic_id(client: &mut Client, topic: &str) -> uuid::Uuid {
    let request = MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
            TopicName(StrBytes::from_string(topic.to_owned())),
        ))]));
    let response: MetadataResponse = client.call(ApiKey::Metadata, 12, &request);
    response.topics[0].topic_id
}

/// Fetches over a plain socket, so the test sees each response frame's size as a client
/// library does before decoding it.
struct FrameClient {
    stream: TcpStream,
    correlation_id: i32,
}

impl FrameClient {
    fn connect(port: u16) -> FrameClient {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        FrameClient {
            stream,
            correlation_id: 0,
        }
    }

    /// Sends `request` at `version`: the response's size field (the bytes after it, what
    /// librdkafka checks against `receive.message.max.bytes`) and the response, decoded from
    /// exactly those bytes.
    fn fetch(&mut self, version: i16, request: &FetchRequest) -> (usize, FetchResponse) {
        self.correlation_id += 1;
        let mut body = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(ApiKey::Fetch as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("fetch-sizes")))
            .encode(&mut body, ApiKey::Fetch.request_header_version(version))
            .expect("encode header");
        request.encode(&mut body, version).expect("encode fetch");
        let mut frame = (body.len() as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(&body);
        self.stream.write_all(&frame).expect("send");
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).expect("response size");
        let size = i32::from_be_bytes(size);
        assert!(size > 0, "response size {size}");
        let mut response = vec![0u8; size as usize];
        self.stream.read_exact(&mut response).expect("response");
        let mut buf = bytes::Bytes::from(response);
        let header =
            ResponseHeader::decode(&mut buf, ApiKey::Fetch.response_header_version(version))
                .expect("response header");
        assert_eq!(header.correlation_id, self.correlation_id);
        let decoded = FetchResponse::decode(&mut buf, version).expect("decode fetch response");
        // The size written up front is exact: the response ends where the frame does.
        assert_eq!(buf.remaining(), 0, "bytes left after the response");
        (size as usize, decoded)
    }
}

/// The batches of a partition's records: (count, offset after the last).
fn batches(records: &[u8]) -> (usize, Option<i64>) {
    let mut position = 0;
    let mut count = 0;
    let mut next_offset = None;
    while position + 27 <= records.len() {
        let at = |from: usize, n: usize| &records[position + from..position + from + n];
        let base_offset = i64::from_be_bytes(at(0, 8).try_into().expect("8 bytes"));
        let length = i32::from_be_bytes(at(8, 4).try_into().expect("4 bytes")) as usize;
        let last_offset_delta = i32::from_be_bytes(at(23, 4).try_into().expect("4 bytes"));
        assert!(
            position + 12 + length <= records.len(),
            "sluice sends whole batches only"
        );
        position += 12 + length;
        count += 1;
        next_offset = Some(base_offset + i64::from(last_offset_delta) + 1);
    }
    assert_eq!(position, records.len(), "records end on a batch boundary");
    (count, next_offset)
}

/// What the sizes rule allows, checked on one response whose partitions answer `asked` (in
/// its order): returns the records' total bytes and each partition's next offset.
fn check_sizes(
    response: &FetchResponse,
    frame_bytes: usize,
    max_bytes: usize,
    partition_max_bytes: usize,
    context: &str,
) -> (usize, Vec<(i32, i64)>) {
    assert_eq!(response.error_code, 0, "{context}");
    let mut total = 0usize;
    let mut served = Vec::new();
    for topic in &response.responses {
        for partition in &topic.partitions {
            assert_eq!(partition.error_code, 0, "{context}");
            let records = partition.records.as_deref().unwrap_or_default();
            if records.is_empty() {
                continue;
            }
            let (count, next_offset) = batches(records);
            let limit = partition_max_bytes.min(max_bytes.saturating_sub(total));
            if served.is_empty() {
                // The first partition to return records: within its limit, or one batch.
                assert!(
                    records.len() <= limit || count == 1,
                    "{context}: first partition {} returned {} bytes in {count} batches over \
                     its limit {limit}",
                    partition.partition_index,
                    records.len()
                );
            } else {
                assert!(
                    records.len() <= limit,
                    "{context}: partition {} returned {} bytes over its limit {limit} (after \
                     {total} bytes)",
                    partition.partition_index,
                    records.len()
                );
            }
            total += records.len();
            served.push((
                partition.partition_index,
                next_offset.expect("records hold a batch"),
            ));
        }
    }
    let first_batch_over = total > max_bytes;
    assert!(
        !first_batch_over || served.len() == 1,
        "{context}: {total} bytes over max_bytes {max_bytes} from several partitions"
    );
    assert!(
        frame_bytes <= total.max(max_bytes) + RESPONSE_OVERHEAD_MAX_BYTES,
        "{context}: a {frame_bytes}-byte response for {total} bytes of records"
    );
    (total, served)
}

fn fetch_request(
    topic: &str,
    topic_id: uuid::Uuid,
    partitions: &[(i32, i64)],
    max_bytes: i32,
    partition_max_bytes: i32,
) -> FetchRequest {
    let mut request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(max_bytes)
        .with_session_id(0)
        .with_session_epoch(-1);
    if !partitions.is_empty() {
        request.topics = vec![
            FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_topic_id(topic_id)
                .with_partitions(
                    partitions
                        .iter()
                        .map(|&(partition, fetch_offset)| {
                            FetchPartition::default()
                                .with_partition(partition)
                                .with_fetch_offset(fetch_offset)
                                .with_partition_max_bytes(partition_max_bytes)
                        })
                        .collect(),
                ),
        ];
    }
    request
}

/// Large batches in three partitions, among them one larger than any limit tried.
fn large_layout() -> Vec<Vec<usize>> {
    vec![
        vec![150_000; 4],
        vec![700_000, 100_000, 100_000],
        vec![50_000, 50_000, 50_000, 50_000, 50_000, 50_000, 1_200_000],
    ]
}

#[test]
fn fetch_responses_exceed_max_bytes_and_partition_max_bytes_only_by_one_first_batch() {
    let node = SingleNode::start(&["message.max.bytes=3000000"]);
    let mut client = Client::connect(node.kafka_port);
    let topic = "sizes";
    client.create_topic(topic, 3);
    let layout = large_layout();
    produce_layout(&mut client, topic, &layout);
    let id = topic_id(&mut client, topic);
    let ends: Vec<i64> = layout.iter().map(|l| l.len() as i64).collect();

    let mut frames = FrameClient::connect(node.kafka_port);
    // (max_bytes, partition_max_bytes): the consumer, a tight response limit, a
    // tight partition limit, and limits below every batch.
    let limits = [
        (1_000_000, 20_000_000),
        (400_000, 10_000_000),
        (10_000_000, 120_000),
        (400_000, 120_000),
        (1, 1),
        (0, 0),
    ];
    for version in [4i16, 11, 12, 17] {
        for (max_bytes, partition_max_bytes) in limits {
            let context =
                format!("v{version} max_bytes {max_bytes} partition {partition_max_bytes}");
            let mut offsets: Vec<i64> = vec![0; 3];
            // The largest response, and the largest whose records kept within max_bytes.
            let (mut largest_frame, mut largest_within) = (0, 0);
            let mut fetches = 0;
            while offsets != ends {
                fetches += 1;
                assert!(fetches <= 40, "{context}: no progress, at {offsets:?}");
                // Rotated as librdkafka does, so each partition leads some requests.
                let asked: Vec<(i32, i64)> = (0..3)
                    .map(|n| (n + fetches) % 3)
                    .map(|p| (p, offsets[p as usize]))
                    .collect();
                let request = fetch_request(topic, id, &asked, max_bytes, partition_max_bytes);
                let (frame_bytes, response) = frames.fetch(version, &request);
                let (total, served) = check_sizes(
                    &response,
                    frame_bytes,
                    max_bytes as usize,
                    partition_max_bytes as usize,
                    &context,
                );
                assert!(total > 0, "{context}: an empty answer with records left");
                for (partition, next) in served {
                    let at = &mut offsets[partition as usize];
                    assert!(next > *at, "{context}: partition {partition} went back");
                    *at = next;
                }
                largest_frame = largest_frame.max(frame_bytes);
                if total <= max_bytes as usize {
                    largest_within = largest_within.max(frame_bytes);
                }
            }
            println!(
                "{context}: {fetches} fetches, largest response {largest_frame} bytes, \
                 largest within max_bytes {largest_within} bytes"
            );
        }
    }
}

#[test]
fn an_incremental_fetch_session_keeps_the_limits_and_serves_every_partition_in_turn() {
    let node = SingleNode::start(&["message.max.bytes=3000000"]);
    let mut client = Client::connect(node.kafka_port);
    let topic = "session-sizes";
    client.create_topic(topic, 3);
    // Equal partitions of 100 KB batches; a 150 KB response holds one batch.
    let layout = vec![vec![100_000; 6]; 3];
    produce_layout(&mut client, topic, &layout);
    let id = topic_id(&mut client, topic);
    let (max_bytes, partition_max_bytes): (i32, i32) = (150_000, 1_000_000);

    let mut frames = FrameClient::connect(node.kafka_port);
    for version in [12i16, 17] {
        let context = format!("v{version} session");
        let mut offsets: Vec<i64> = vec![0; 3];
        let all: Vec<(i32, i64)> = (0..3).map(|p| (p, 0)).collect();
        let mut request =
            fetch_request(topic, id, &all, max_bytes, partition_max_bytes).with_session_epoch(0);
        let mut order = Vec::new();
        let mut largest_frame = 0;
        for epoch in 1..=18 {
            let (frame_bytes, response) = frames.fetch(version, &request);
            assert_ne!(response.session_id, 0, "{context}: a session");
            let (_, served) = check_sizes(
                &response,
                frame_bytes,
                max_bytes as usize,
                partition_max_bytes as usize,
                &context,
            );
            assert_eq!(served.len(), 1, "{context}: one 100 KB batch fits 150 KB");
            largest_frame = largest_frame.max(frame_bytes);
            let (partition, next) = served[0];
            offsets[partition as usize] = next;
            order.push(partition);
            // The next incremental fetch names only what changed: the partition just served.
            request = fetch_request(
                topic,
                id,
                &[(partition, next)],
                max_bytes,
                partition_max_bytes,
            )
            .with_session_id(response.session_id)
            .with_session_epoch(epoch);
        }
        assert_eq!(offsets, vec![6; 3], "{context}: everything read");
        // A partition served goes to the back of the session (Kafka's rule): in turn, none
        // starves behind the first.
        let first_round: std::collections::BTreeSet<i32> = order[..3].iter().copied().collect();
        assert_eq!(first_round.len(), 3, "{context}: served in turn: {order:?}");
        println!("{context}: order {order:?}, largest response {largest_frame} bytes");
    }
}

/// Polls until `expected` records arrived (or 60 s passed).
async fn read_all(consumer: &Consumer, expected: usize) -> Vec<ConsumerRecord> {
    let mut records = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
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
async fn the_sdk_consumer_reads_records_larger_than_its_fetch_sizes() {
    let node = SingleNode::start(&["message.max.bytes=3000000"]);
    let topic = "sdk-large";
    let per_partition = 4;
    // The records, 900 KiB each; the client is blocking, so off the runtime.
    let port = node.kafka_port;
    tokio::task::spawn_blocking(move || {
        let mut client = Client::connect(port);
        client.create_topic(topic, 3);
        produce_layout(
            &mut client,
            topic,
            &vec![vec![900 * 1024; per_partition]; 3],
        );
    })
    .await
    .expect("produce");

    // The sizes, and sizes below every record.
    for (fetch_max_bytes, partition_max_bytes) in [("1000000", "20000000"), ("300000", "100000")] {
        let consumer = Consumer::new(
            ClientConfig::new(&node.bootstrap())
                .set("auto.offset.reset", "earliest")
                .set("fetch.max.bytes", fetch_max_bytes)
                .set("max.partition.fetch.bytes", partition_max_bytes),
        )
        .expect("consumer");
        let partitions = consumer.partitions_for(topic).await.expect("partitions");
        consumer.assign(&partitions).await.expect("assign");
        let records = read_all(&consumer, 3 * per_partition).await;
        assert_eq!(
            records.len(),
            3 * per_partition,
            "fetch.max.bytes {fetch_max_bytes}, max.partition.fetch.bytes {partition_max_bytes}"
        );
        let mut next = [0i64; 3];
        for record in &records {
            let partition = record.partition as usize;
            assert_eq!(record.offset, next[partition], "in order, none twice");
            next[partition] += 1;
            assert_eq!(record.value.as_ref().map(|v| v.len()), Some(900 * 1024));
        }
        consumer.close().await.expect("close");
    }
}

#[test]
fn confluent_consumes_900_kib_records_within_its_receive_message_max_bytes() {
    let node = SingleNode::start(&["group.initial.rebalance.delay.ms=0"]);
    let out = support::run_client(
        &node,
        "python3",
        &["fetch_sizes.py", &node.bootstrap(), "large-records"],
    );
    assert!(out.contains("consumed 15 records"), "{out}");
}

/// Sends the same acks=0 Produce frame over and over, as fast as the broker takes them
/// (acks=0 has no response, so nothing waits between requests), until `stop`; counts the
/// frames written in `sent`.
fn produce_acks_0_until(
    port: u16,
    topic: &str,
    batches: Vec<(i32, Vec<u8>)>,
    stop: &AtomicBool,
    sent: &AtomicU64,
) {
    let request = ProduceRequest::default()
        .with_acks(0)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partition_data(
                    batches
                        .into_iter()
                        .map(|(index, records)| {
                            PartitionProduceData::default()
                                .with_index(index)
                                .with_records(Some(bytes::Bytes::from(records)))
                        })
                        .collect(),
                ),
        ]);
    let version = 8;
    let mut body = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(ApiKey::Produce as i16)
        .with_request_api_version(version)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str("fetch-sizes-busy")))
        .encode(&mut body, ApiKey::Produce.request_header_version(version))
        .expect("encode header");
    request.encode(&mut body, version).expect("encode produce");
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    while !stop.load(Ordering::Relaxed) {
        stream.write_all(&frame).expect("send");
        sent.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn a_follower_batch_larger_than_replica_fetch_max_bytes_is_replicated_while_other_partitions_stay_busy()
 {
    // A follower's fetch may exceed its limits only by the first batch of the first partition
    // that returns records (KIP-74), and replica.fetch.response.max.bytes holds one batch of
    // the busy partitions. So unless the fetcher moves the partitions it was just served
    // behind the others, a partition named after a busy one never gets its turn, and a batch
    // larger than replica.fetch.max.bytes there is never replicated: acks=all never answers.
    let cluster = Cluster::start(
        3,
        &[
            "replica.fetch.max.bytes=1024",
            "replica.fetch.response.max.bytes=1024",
            "min.insync.replicas=3",
        ],
    );
    let leader = &cluster.nodes[0];
    let mut client = Client::connect(leader.kafka_port);
    let topic = "replicated-busy";
    let leader_id = leader.id as i32;
    let followers: Vec<i32> = cluster.nodes[1..].iter().map(|n| n.id as i32).collect();
    // Partition 0 gets the large batch; 1 to 7 stay busy. A follower orders the partitions it
    // follows by hash before any are served, so with the rotation gone the large one would
    // come first at both followers (and be served anyway) in only 1 run in 64.
    let partitions = 8;
    client.create_topic_assigned(
        topic,
        &vec![vec![leader_id, followers[0], followers[1]]; partitions],
    );
    // Batches over replica.fetch.max.bytes: a follower's fetch serves one at a time, so the
    // producer (several batches per request, no waits) stays ahead of the followers.
    let busy: Vec<(i32, Vec<u8>)> = (1..partitions as i32)
        .map(|p| (p, batch_of(1200, p as u8)))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let producer = {
        let (stop, sent, port) = (Arc::clone(&stop), Arc::clone(&sent), leader.kafka_port);
        std::thread::spawn(move || produce_acks_0_until(port, topic, busy, &stop, &sent))
    };
    // A head start, so the busy partitions have a backlog at every follower fetch.
    cluster.wait_until(
        "the busy producer to start",
        Duration::from_secs(30),
        |_| sent.load(Ordering::Relaxed) >= 300,
    );

    // 100 KB: a hundred times replica.fetch.max.bytes and the whole response's limit. The
    // request timeout only detects a hang (starvation); it is no performance bound.
    let started = Instant::now();
    let answer = client.produce_many(topic, vec![(0, batch_of(100_000, 0))], 18_000);
    let waited = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    producer.join().expect("busy producer");
    assert_eq!(
        answer,
        [(0, 0)],
        "the large batch was acknowledged (acks=all) while the other partitions were busy; \
         7 is REQUEST_TIMED_OUT, after {waited:?}"
    );
    assert_eq!(client.latest_offset(topic, 0), 1);

    // Then the followers catch up on the busy partitions: every batch written (the broker
    // reads a connection's requests in order, to its end) below the high watermark.
    let written = sent.load(Ordering::Relaxed) as i64;
    cluster.wait_until(
        "the followers to catch up on the busy partitions",
        Duration::from_secs(60),
        |_| (1..partitions as i32).all(|p| client.latest_offset(topic, p) == written),
    );
    for partition in 0..partitions as i32 {
        let (_, _, isr) = client.partition_leader(topic, partition);
        assert_eq!(
            isr.len(),
            3,
            "partition {partition}: every follower kept up"
        );
    }
}
