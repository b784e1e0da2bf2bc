//! Transactions at the protocol level, against a real `sluice server`: KIP-890's server-side
//! verification (a transactional write the coordinator did not register is refused, so a late
//! write of an ended transaction can never open a transaction nobody ends), the internal topic
//! closed to clients, producer fencing by epoch, and what DescribeProducers and
//! ListOffsets(read_committed) report of an open transaction.

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, BrokerId,
    DescribeProducersRequest, DescribeProducersResponse, EndTxnRequest, EndTxnResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, InitProducerIdRequest, InitProducerIdResponse,
    ListOffsetsRequest, ListOffsetsResponse, ProduceRequest, ProduceResponse, ProducerId,
    TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use sluice::log::batch::BatchBuilder;
use sluice::protocol::errors;
use support::SingleNode;
use support::raw::Client;

const TOPIC: &str = "txn-proto";

fn name(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

fn txn_batch(producer_id: i64, epoch: i16, sequence: i32, value: &str) -> Vec<u8> {
    let mut builder = BatchBuilder::new(0, 1_700_000_000_000)
        .producer(producer_id, epoch, sequence)
        .transactional();
    builder.push(1_700_000_000_000, None, Some(value.as_bytes()), &[]);
    builder.build()
}

/// Until the transaction coordinator answers (the first call creates `__transaction_state`).
fn init(client: &mut Client, id: &str) -> (i64, i16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found: FindCoordinatorResponse = client.call(
            ApiKey::FindCoordinator,
            3,
            &FindCoordinatorRequest::default()
                .with_key(name(id))
                .with_key_type(1),
        );
        if found.error_code == 0 {
            let response: InitProducerIdResponse = client.call(
                ApiKey::InitProducerId,
                4,
                &InitProducerIdRequest::default()
                    .with_transactional_id(Some(TransactionalId(name(id))))
                    .with_transaction_timeout_ms(60_000)
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1),
            );
            if response.error_code == 0 {
                return (response.producer_id.0, response.producer_epoch);
            }
        }
        assert!(Instant::now() < deadline, "no transaction coordinator");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn produce(client: &mut Client, id: &str, topic: &str, records: Vec<u8>) -> (i16, String) {
    let request = ProduceRequest::default()
        .with_transactional_id(Some(TransactionalId(name(id))))
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(name(topic)))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(Bytes::from(records))),
                ]),
        ]);
    let response: ProduceResponse = client.call(ApiKey::Produce, 9, &request);
    let p = &response.responses[0].partition_responses[0];
    (
        p.error_code,
        p.error_message
            .as_ref()
            .map(|m| m.to_string())
            .unwrap_or_default(),
    )
}

fn add_partition(client: &mut Client, id: &str, producer: (i64, i16)) -> i16 {
    let response: AddPartitionsToTxnResponse = client.call(
        ApiKey::AddPartitionsToTxn,
        3,
        &AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(name(id)))
            .with_v3_and_below_producer_id(ProducerId(producer.0))
            .with_v3_and_below_producer_epoch(producer.1)
            .with_v3_and_below_topics(vec![
                AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(name(TOPIC)))
                    .with_partitions(vec![0]),
            ]),
    );
    response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
}

fn end(client: &mut Client, id: &str, producer: (i64, i16), commit: bool) -> i16 {
    let response: EndTxnResponse = client.call(
        ApiKey::EndTxn,
        3,
        &EndTxnRequest::default()
            .with_transactional_id(TransactionalId(name(id)))
            .with_producer_id(ProducerId(producer.0))
            .with_producer_epoch(producer.1)
            .with_committed(commit),
    );
    response.error_code
}

fn read_committed_end(client: &mut Client) -> i64 {
    let response: ListOffsetsResponse = client.call(
        ApiKey::ListOffsets,
        5,
        &ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(1)
            .with_topics(vec![
                ListOffsetsTopic::default()
                    .with_name(TopicName(name(TOPIC)))
                    .with_partitions(vec![
                        ListOffsetsPartition::default()
                            .with_partition_index(0)
                            .with_timestamp(-1),
                    ]),
            ]),
    );
    response.topics[0].partitions[0].offset
}

fn open_transaction_start(client: &mut Client, producer_id: i64) -> Option<i64> {
    let response: DescribeProducersResponse = client.call(
        ApiKey::DescribeProducers,
        0,
        &DescribeProducersRequest::default().with_topics(vec![
            TopicRequest::default()
                .with_name(TopicName(name(TOPIC)))
                .with_partition_indexes(vec![0]),
        ]),
    );
    let partition = &response.topics[0].partitions[0];
    assert_eq!(partition.error_code, 0, "{partition:?}");
    partition
        .active_producers
        .iter()
        .find(|p| p.producer_id.0 == producer_id)
        .map(|p| p.current_txn_start_offset)
}

/// Waits until `check` holds (markers are written after EndTxn is answered).
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_transactional_write_needs_the_coordinator_and_a_late_one_is_refused() {
    let node = SingleNode::start(&[]);
    let mut client = Client::connect(node.kafka_port);
    client.create_topic(TOPIC, 1);
    let producer = init(&mut client, "verify");

    // Not added to the transaction: refused, nothing written, nothing held open.
    let (code, message) = produce(
        &mut client,
        "verify",
        TOPIC,
        txn_batch(producer.0, producer.1, 0, "x"),
    );
    assert_eq!(code, errors::INVALID_TXN_STATE, "{message}");
    assert!(message.contains("could not confirm"), "{message}");
    assert_eq!(client.latest_offset(TOPIC, 0), 0);

    // Added: accepted, and the transaction holds the last stable offset at its start.
    assert_eq!(add_partition(&mut client, "verify", producer), 0);
    let (code, message) = produce(
        &mut client,
        "verify",
        TOPIC,
        txn_batch(producer.0, producer.1, 0, "in"),
    );
    assert_eq!(code, 0, "{message}");
    assert_eq!(read_committed_end(&mut client), 0);
    assert_eq!(open_transaction_start(&mut client, producer.0), Some(0));

    // Aborted: once the marker is in, the next write of that epoch (a late retry) cannot
    // open a new transaction the coordinator knows nothing of.
    assert_eq!(end(&mut client, "verify", producer, false), 0);
    eventually("the abort marker", || read_committed_end(&mut client) == 2);
    assert_eq!(open_transaction_start(&mut client, producer.0), Some(-1));
    let (code, message) = produce(
        &mut client,
        "verify",
        TOPIC,
        txn_batch(producer.0, producer.1, 1, "late"),
    );
    assert_eq!(code, errors::INVALID_TXN_STATE, "{message}");
    assert_eq!(client.latest_offset(TOPIC, 0), 2);
    assert_eq!(read_committed_end(&mut client), 2);

    // A second InitProducerId fences the first epoch: its EndTxn is refused.
    let newer = init(&mut client, "verify");
    assert_eq!((newer.0, newer.1), (producer.0, producer.1 + 1));
    let fenced = end(&mut client, "verify", producer, true);
    assert!(
        fenced == errors::PRODUCER_FENCED || fenced == errors::INVALID_PRODUCER_EPOCH,
        "fenced producer's EndTxn answered {}",
        errors::name(fenced)
    );
}

#[test]
fn clients_cannot_write_the_transaction_state_topic() {
    let node = SingleNode::start(&[]);
    let mut client = Client::connect(node.kafka_port);
    let _ = init(&mut client, "internal");
    let mut builder = BatchBuilder::new(0, 1_700_000_000_000);
    builder.push(1_700_000_000_000, Some(b"k"), Some(b"v"), &[]);
    let response = client.produce_at(9, "__transaction_state", 0, builder.build());
    let p = &response.responses[0].partition_responses[0];
    assert_eq!(p.error_code, errors::INVALID_TOPIC_EXCEPTION, "{p:?}");
}

/// Transaction version 2 (KIP-890 part 2), as a Kafka 4 client speaks it: the cluster
/// advertises `transaction.version` 2; the client never adds partitions (Produce v12 makes the
/// leader add them); each EndTxn (v5) bumps the epoch and answers it, so a late write of an
/// ended transaction is refused by its old epoch.
#[test]
fn transaction_version_2_adds_partitions_on_produce_and_bumps_the_epoch_per_transaction() {
    use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
    let node = SingleNode::start(&[]);
    let mut client = Client::connect(node.kafka_port);
    let versions: ApiVersionsResponse = client.call(
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default()
            .with_client_software_name(name("test"))
            .with_client_software_version(name("1")),
    );
    let feature = versions
        .finalized_features
        .iter()
        .find(|f| f.name.as_str() == "transaction.version")
        .expect("transaction.version is finalized");
    assert_eq!(feature.max_version_level, 2);
    client.create_topic(TOPIC, 1);
    let (producer_id, epoch) = init(&mut client, "tv2");
    let produce_v12 = |client: &mut Client, epoch: i16, sequence: i32, value: &str| {
        let request = ProduceRequest::default()
            .with_transactional_id(Some(TransactionalId(name("tv2"))))
            .with_acks(-1)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(TopicName(name(TOPIC)))
                    .with_partition_data(vec![
                        PartitionProduceData::default()
                            .with_index(0)
                            .with_records(Some(Bytes::from(txn_batch(
                                producer_id,
                                epoch,
                                sequence,
                                value,
                            )))),
                    ]),
            ]);
        let response: ProduceResponse = client.call(ApiKey::Produce, 12, &request);
        response.responses[0].partition_responses[0].error_code
    };
    let end_v5 = |client: &mut Client, epoch: i16, commit: bool| -> EndTxnResponse {
        client.call(
            ApiKey::EndTxn,
            5,
            &EndTxnRequest::default()
                .with_transactional_id(TransactionalId(name("tv2")))
                .with_producer_id(ProducerId(producer_id))
                .with_producer_epoch(epoch)
                .with_committed(commit),
        )
    };
    // No AddPartitionsToTxn: the leader adds the partition.
    assert_eq!(produce_v12(&mut client, epoch, 0, "first"), 0);
    assert_eq!(open_transaction_start(&mut client, producer_id), Some(0));
    let ended = end_v5(&mut client, epoch, true);
    assert_eq!(ended.error_code, 0, "{ended:?}");
    assert_eq!(
        (ended.producer_id.0, ended.producer_epoch),
        (producer_id, epoch + 1),
        "EndTxn v5 answers the bumped epoch"
    );
    eventually("the commit marker", || read_committed_end(&mut client) == 2);
    // A late write of the ended transaction carries the old epoch: refused, nothing opened.
    let late = produce_v12(&mut client, epoch, 1, "late");
    assert!(
        late == errors::INVALID_PRODUCER_EPOCH || late == errors::PRODUCER_FENCED,
        "a late write answered {}",
        errors::name(late)
    );
    assert_eq!(client.latest_offset(TOPIC, 0), 2);
    // The next transaction at the new epoch, sequences from 0, aborted.
    assert_eq!(produce_v12(&mut client, epoch + 1, 0, "second"), 0);
    let ended = end_v5(&mut client, epoch + 1, false);
    assert_eq!(ended.error_code, 0, "{ended:?}");
    assert_eq!(ended.producer_epoch, epoch + 2);
    eventually("the abort marker", || read_committed_end(&mut client) == 4);
    assert_eq!(open_transaction_start(&mut client, producer_id), Some(-1));
}
