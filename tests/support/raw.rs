//! A raw Kafka client for tests: requests built with the `kafka-protocol` crate and sent at
//! the version the test names, over the SDK's connection, so tests send exactly what they
//! mean.

use std::time::Duration;

use bytes::Bytes;

use kafka_protocol::messages::create_topics_request::{CreatableReplicaAssignment, CreatableTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, BrokerId, CreateTopicsRequest, CreateTopicsResponse, InitProducerIdRequest,
    InitProducerIdResponse, ListOffsetsRequest, ListOffsetsResponse, MetadataRequest,
    MetadataResponse, ProduceRequest, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use sluice::client::Connection;
use sluice::log::batch::BatchBuilder;

/// An idempotent batch of `count` records from `sequence` on, valued `<epoch>-<sequence>`.
pub fn idempotent_batch(producer_id: i64, epoch: i16, sequence: i32, count: usize) -> Vec<u8> {
    let mut builder =
        BatchBuilder::new(0, 1_700_000_000_000).producer(producer_id, epoch, sequence);
    for i in 0..count {
        builder.push(
            1_700_000_000_000,
            None,
            Some(format!("{epoch}-{}", sequence as usize + i).as_bytes()),
            &[],
        );
    }
    builder.build()
}

/// A test client on the SDK's [`Connection`], blocking: each call runs on a runtime of its
/// own and is sent at exactly the version the test names.
pub struct Client {
    runtime: tokio::runtime::Runtime,
    connection: Connection,
}

impl Client {
    /// A connection, or `None` when nothing listens on `port` (a node restarting).
    pub fn try_connect(port: u16) -> Option<Client> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let connection = runtime
            .block_on(Connection::connect_as(
                &format!("127.0.0.1:{port}"),
                "protocol-test",
                Duration::from_secs(5),
                Duration::from_secs(20),
            ))
            .ok()?;
        Some(Client {
            runtime,
            connection,
        })
    }

    pub fn connect(port: u16) -> Client {
        Client::try_connect(port).unwrap_or_else(|| panic!("connect to 127.0.0.1:{port}"))
    }

    pub fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        api_key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Resp {
        self.runtime
            .block_on(self.connection.call(api_key, version, request))
            .unwrap_or_else(|e| panic!("{api_key:?} v{version}: {e}"))
    }

    /// As [`Client::call`], the error returned (a closed connection).
    pub fn try_call<Req: Encodable, Resp: Decodable>(
        &mut self,
        api_key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp, String> {
        self.runtime
            .block_on(self.connection.call(api_key, version, request))
            .map_err(|e| e.to_string())
    }

    pub fn create_topic(&mut self, name: &str, partitions: i32) {
        let request = CreateTopicsRequest::default()
            .with_topics(vec![
                CreatableTopic::default()
                    .with_name(TopicName(StrBytes::from_string(name.to_owned())))
                    .with_num_partitions(partitions)
                    .with_replication_factor(1),
            ])
            .with_timeout_ms(10_000);
        let response: CreateTopicsResponse = self.call(ApiKey::CreateTopics, 5, &request);
        assert_eq!(response.topics[0].error_code, 0, "{response:?}");
    }

    /// A topic whose partition `i` has the replicas `assignments[i]` (the first leads).
    pub fn create_topic_assigned(&mut self, name: &str, assignments: &[Vec<i32>]) {
        let request = CreateTopicsRequest::default()
            .with_topics(vec![
                CreatableTopic::default()
                    .with_name(TopicName(StrBytes::from_string(name.to_owned())))
                    .with_num_partitions(-1)
                    .with_replication_factor(-1)
                    .with_assignments(
                        assignments
                            .iter()
                            .enumerate()
                            .map(|(index, replicas)| {
                                CreatableReplicaAssignment::default()
                                    .with_partition_index(index as i32)
                                    .with_broker_ids(
                                        replicas.iter().map(|b| BrokerId(*b)).collect(),
                                    )
                            })
                            .collect(),
                    ),
            ])
            .with_timeout_ms(10_000);
        let response: CreateTopicsResponse = self.call(ApiKey::CreateTopics, 5, &request);
        assert_eq!(response.topics[0].error_code, 0, "{response:?}");
    }

    /// One acks=all Produce to several partitions of `topic`, waiting at most `timeout_ms`:
    /// each partition's (index, error code).
    pub fn produce_many(
        &mut self,
        topic: &str,
        batches: Vec<(i32, Vec<u8>)>,
        timeout_ms: i32,
    ) -> Vec<(i32, i16)> {
        let request = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(timeout_ms)
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                    .with_partition_data(
                        batches
                            .into_iter()
                            .map(|(index, records)| {
                                PartitionProduceData::default()
                                    .with_index(index)
                                    .with_records(Some(Bytes::from(records)))
                            })
                            .collect(),
                    ),
            ]);
        let response: ProduceResponse = self.call(ApiKey::Produce, 8, &request);
        response.responses[0]
            .partition_responses
            .iter()
            .map(|p| (p.index, p.error_code))
            .collect()
    }

    /// Produces `records` to one partition (acks=all): (error code, base offset).
    pub fn produce(&mut self, topic: &str, partition: i32, records: Vec<u8>) -> (i16, i64) {
        let response = self.produce_at(8, topic, partition, records);
        let p = &response.responses[0].partition_responses[0];
        (p.error_code, p.base_offset)
    }

    /// One batch to one partition with acks=all, at Produce `version`; the whole answer.
    pub fn produce_at(
        &mut self,
        version: i16,
        topic: &str,
        partition: i32,
        records: Vec<u8>,
    ) -> ProduceResponse {
        let request = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                    .with_partition_data(vec![
                        PartitionProduceData::default()
                            .with_index(partition)
                            .with_records(Some(Bytes::from(records))),
                    ]),
            ]);
        self.call(ApiKey::Produce, version, &request)
    }

    pub fn latest_offset(&mut self, topic: &str, partition: i32) -> i64 {
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![
                ListOffsetsTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                    .with_partitions(vec![
                        ListOffsetsPartition::default()
                            .with_partition_index(partition)
                            .with_timestamp(-1),
                    ]),
            ]);
        let response: ListOffsetsResponse = self.call(ApiKey::ListOffsets, 5, &request);
        response.topics[0].partitions[0].offset
    }

    /// A new idempotent producer id (InitProducerId without a transactional id).
    pub fn init_producer_id(&mut self) -> i64 {
        let init: InitProducerIdResponse = self.call(
            ApiKey::InitProducerId,
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(60_000)
                .with_producer_id((-1).into())
                .with_producer_epoch(-1),
        );
        assert_eq!(init.error_code, 0, "{init:?}");
        init.producer_id.0
    }

    /// (leader, leader epoch, isr) of a partition, as this broker's Metadata says.
    pub fn partition_leader(&mut self, topic: &str, partition: i32) -> (i32, i32, Vec<i32>) {
        let request = MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
                TopicName(StrBytes::from_string(topic.to_owned())),
            ))]));
        let response: MetadataResponse = self.call(ApiKey::Metadata, 12, &request);
        let found = response.topics[0]
            .partitions
            .iter()
            .find(|p| p.partition_index == partition)
            .unwrap_or_else(|| panic!("no partition {partition} in {response:?}"));
        (
            found.leader_id.0,
            found.leader_epoch,
            found.isr_nodes.iter().map(|b| b.0).collect(),
        )
    }
}
