//! ACLs against a real `sluice server` with Kafka's StandardAuthorizer and
//! `allow.everyone.if.no.acl.found=false`: a SASL user without ACLs is refused by every API the
//! broker serves (each answer checked for Kafka's *_AUTHORIZATION_FAILED code, and no topic,
//! group or transactional id leaked), walking the whole ApiVersions list so an API added
//! without a check fails here; the broker never logs an answer given without asking the
//! authorizer.

mod support;

use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use support::SingleNode;
use support::raw::Client;

const JAAS: &str = "listener.name.sasl_plaintext.plain.sasl.jaas.config=\
    org.apache.kafka.common.security.plain.PlainLoginModule required \
    user_admin=\"admin-secret\" user_alice=\"alice-secret\" user_mallory=\"mallory-secret\";";

const AUTHORIZER: &str =
    "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer";

/// A node whose SASL listener serves PLAIN users, with the authorizer on. The PLAINTEXT
/// listener (inter-broker, and the harness's) is `User:ANONYMOUS`, a super user as Kafka
/// operators make their PLAINTEXT inter-broker principal.
fn secured_node() -> SingleNode {
    SingleNode::start_with_listeners(
        &["SASL_PLAINTEXT"],
        &[
            "sasl.enabled.mechanisms=PLAIN",
            JAAS,
            AUTHORIZER,
            "super.users=User:admin;User:ANONYMOUS",
            "allow.everyone.if.no.acl.found=false",
        ],
    )
}

/// A raw client authenticated as `user` on the SASL listener.
fn sasl_client(node: &SingleNode, user: &str) -> Client {
    let mut client = Client::connect(node.listener_port("SASL_PLAINTEXT"));
    let handshake: SaslHandshakeResponse = client.call(
        ApiKey::SaslHandshake,
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
    );
    assert_eq!(handshake.error_code, 0, "{handshake:?}");
    let token = format!("\0{user}\0{user}-secret");
    let done: SaslAuthenticateResponse = client.call(
        ApiKey::SaslAuthenticate,
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token.into_bytes())),
    );
    assert_eq!(done.error_code, 0, "{done:?}");
    client
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

fn topic(name: &str) -> TopicName {
    TopicName(s(name))
}

const TOPIC_DENIED: i16 = 29;
const GROUP_DENIED: i16 = 30;
const CLUSTER_DENIED: i16 = 31;
const TXN_DENIED: i16 = 53;

#[test]
fn a_user_without_acls_is_refused_by_every_api_and_sees_no_names() {
    let node = secured_node();
    // Resources that exist, made by the super user on the PLAINTEXT listener: a topic with a
    // record, a group with a committed offset, a transactional id.
    let mut setup = Client::connect(node.kafka_port);
    setup.create_topic("secret", 1);
    let (code, _) = setup.produce("secret", 0, support::raw::idempotent_batch(-1, -1, -1, 1));
    assert_eq!(code, 0);
    // The coordinators' topics are made by the first FindCoordinator.
    for (key_type, key) in [(0, "secret-group"), (1, "secret-txn")] {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let found: FindCoordinatorResponse = setup.call(
                ApiKey::FindCoordinator,
                4,
                &FindCoordinatorRequest::default()
                    .with_key_type(key_type)
                    .with_coordinator_keys(vec![s(key)]),
            );
            if found.coordinators[0].error_code == 0 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{found:?}");
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let committed: OffsetCommitResponse = setup.call(
            ApiKey::OffsetCommit,
            8,
            &OffsetCommitRequest::default()
                .with_group_id(GroupId(s("secret-group")))
                .with_generation_id_or_member_epoch(-1)
                .with_topics(vec![
                    offset_commit_request::OffsetCommitRequestTopic::default()
                        .with_name(topic("secret"))
                        .with_partitions(vec![
                            offset_commit_request::OffsetCommitRequestPartition::default()
                                .with_partition_index(0)
                                .with_committed_offset(1),
                        ]),
                ]),
        );
        let code = committed.topics[0].partitions[0].error_code;
        if code == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{committed:?}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let initialized = loop {
        let answer: InitProducerIdResponse = setup.call(
            ApiKey::InitProducerId,
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(s("secret-txn"))))
                .with_transaction_timeout_ms(60_000),
        );
        if answer.error_code == 0 {
            break answer;
        }
        assert!(std::time::Instant::now() < deadline, "{answer:?}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };

    let mut mallory = sasl_client(&node, "mallory");
    let versions: ApiVersionsResponse =
        mallory.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    let mut unchecked: std::collections::BTreeSet<i16> =
        versions.api_keys.iter().map(|k| k.api_key).collect();
    let mut checked = |api: ApiKey| {
        unchecked.remove(&(api as i16));
    };
    // Served to every authenticated client, as in Kafka.
    for open in [
        ApiKey::ApiVersions,
        ApiKey::SaslHandshake,
        ApiKey::SaslAuthenticate,
    ] {
        checked(open);
    }

    // Produce: WRITE on the topic; a transactional id first.
    let produce = |id: Option<&str>| {
        ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(5000)
            .with_transactional_id(id.map(|i| TransactionalId(s(i))))
            .with_topic_data(vec![
                produce_request::TopicProduceData::default()
                    .with_name(topic("secret"))
                    .with_partition_data(vec![
                        produce_request::PartitionProduceData::default()
                            .with_index(0)
                            .with_records(Some(Bytes::from(support::raw::idempotent_batch(
                                -1, -1, -1, 1,
                            )))),
                    ]),
            ])
    };
    let answer: ProduceResponse = mallory.call(ApiKey::Produce, 9, &produce(None));
    assert_eq!(
        answer.responses[0].partition_responses[0].error_code,
        TOPIC_DENIED
    );
    let answer: ProduceResponse = mallory.call(ApiKey::Produce, 9, &produce(Some("secret-txn")));
    assert_eq!(
        answer.responses[0].partition_responses[0].error_code,
        TXN_DENIED
    );
    checked(ApiKey::Produce);

    // Fetch: READ on the topic.
    let answer: FetchResponse = mallory.call(
        ApiKey::Fetch,
        12,
        &FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![
                fetch_request::FetchTopic::default()
                    .with_topic(topic("secret"))
                    .with_partitions(vec![
                        fetch_request::FetchPartition::default()
                            .with_partition(0)
                            .with_partition_max_bytes(1 << 20),
                    ]),
            ]),
    );
    let partition = &answer.responses[0].partitions[0];
    assert_eq!(partition.error_code, TOPIC_DENIED, "{answer:?}");
    assert!(partition.records.as_ref().is_none_or(|r| r.is_empty()));
    // A follower's fetch (replica id 1): CLUSTER_ACTION.
    let answer: FetchResponse = mallory.call(
        ApiKey::Fetch,
        12,
        &FetchRequest::default()
            .with_replica_id(BrokerId(1))
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![
                fetch_request::FetchTopic::default()
                    .with_topic(topic("secret"))
                    .with_partitions(vec![
                        fetch_request::FetchPartition::default()
                            .with_partition(0)
                            .with_partition_max_bytes(1 << 20),
                    ]),
            ]),
    );
    assert_eq!(answer.responses[0].partitions[0].error_code, TOPIC_DENIED);
    checked(ApiKey::Fetch);

    // ListOffsets: DESCRIBE.
    let answer: ListOffsetsResponse = mallory.call(
        ApiKey::ListOffsets,
        7,
        &ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![
                list_offsets_request::ListOffsetsTopic::default()
                    .with_name(topic("secret"))
                    .with_partitions(vec![
                        list_offsets_request::ListOffsetsPartition::default()
                            .with_partition_index(0)
                            .with_timestamp(-1),
                    ]),
            ]),
    );
    assert_eq!(answer.topics[0].partitions[0].error_code, TOPIC_DENIED);
    checked(ApiKey::ListOffsets);

    // Metadata: a full listing leaves the topic out; by name it is refused, and so is a topic
    // that does not exist (its existence is not said); brokers are every client's.
    let answer: MetadataResponse = mallory.call(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(None),
    );
    assert!(
        answer.topics.is_empty(),
        "topics leaked: {:?}",
        answer.topics
    );
    assert_eq!(answer.brokers.len(), 1);
    let answer: MetadataResponse = mallory.call(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default()
            .with_allow_auto_topic_creation(true)
            .with_topics(Some(vec![
                metadata_request::MetadataRequestTopic::default().with_name(Some(topic("secret"))),
                metadata_request::MetadataRequestTopic::default().with_name(Some(topic("ghost"))),
            ])),
    );
    for t in &answer.topics {
        assert_eq!(t.error_code, TOPIC_DENIED, "{t:?}");
        assert!(t.partitions.is_empty());
    }
    checked(ApiKey::Metadata);

    // Topic administration.
    let answer: CreateTopicsResponse = mallory.call(
        ApiKey::CreateTopics,
        7,
        &CreateTopicsRequest::default()
            .with_timeout_ms(5000)
            .with_topics(vec![
                create_topics_request::CreatableTopic::default()
                    .with_name(topic("mallorys"))
                    .with_num_partitions(1)
                    .with_replication_factor(1),
            ]),
    );
    assert_eq!(answer.topics[0].error_code, TOPIC_DENIED);
    checked(ApiKey::CreateTopics);
    let answer: DeleteTopicsResponse = mallory.call(
        ApiKey::DeleteTopics,
        6,
        &DeleteTopicsRequest::default()
            .with_timeout_ms(5000)
            .with_topics(vec![
                delete_topics_request::DeleteTopicState::default().with_name(Some(topic("secret"))),
            ]),
    );
    assert_eq!(answer.responses[0].error_code, TOPIC_DENIED);
    checked(ApiKey::DeleteTopics);
    let answer: DeleteRecordsResponse = mallory.call(
        ApiKey::DeleteRecords,
        2,
        &DeleteRecordsRequest::default()
            .with_timeout_ms(5000)
            .with_topics(vec![
                delete_records_request::DeleteRecordsTopic::default()
                    .with_name(topic("secret"))
                    .with_partitions(vec![
                        delete_records_request::DeleteRecordsPartition::default()
                            .with_partition_index(0)
                            .with_offset(1),
                    ]),
            ]),
    );
    assert_eq!(answer.topics[0].partitions[0].error_code, TOPIC_DENIED);
    checked(ApiKey::DeleteRecords);
    let answer: CreatePartitionsResponse = mallory.call(
        ApiKey::CreatePartitions,
        3,
        &CreatePartitionsRequest::default()
            .with_timeout_ms(5000)
            .with_topics(vec![
                create_partitions_request::CreatePartitionsTopic::default()
                    .with_name(topic("secret"))
                    .with_count(2),
            ]),
    );
    assert_eq!(answer.results[0].error_code, TOPIC_DENIED);
    checked(ApiKey::CreatePartitions);

    // Producer ids: idempotent needs IDEMPOTENT_WRITE (or WRITE on a topic), transactional
    // WRITE on the id.
    let answer: InitProducerIdResponse = mallory.call(
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(-1),
    );
    assert_eq!(answer.error_code, CLUSTER_DENIED);
    let answer: InitProducerIdResponse = mallory.call(
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(s("secret-txn"))))
            .with_transaction_timeout_ms(60_000),
    );
    assert_eq!(answer.error_code, TXN_DENIED);
    checked(ApiKey::InitProducerId);

    let answer: OffsetForLeaderEpochResponse = mallory.call(
        ApiKey::OffsetForLeaderEpoch,
        4,
        &OffsetForLeaderEpochRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![
                offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                    .with_topic(topic("secret"))
                    .with_partitions(vec![
                        offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                            .with_partition(0)
                            .with_current_leader_epoch(-1)
                            .with_leader_epoch(0),
                    ]),
            ]),
    );
    assert_eq!(answer.topics[0].partitions[0].error_code, TOPIC_DENIED);
    checked(ApiKey::OffsetForLeaderEpoch);

    // Configs: the topic's need the topic's permission, the broker's the cluster's.
    let answer: DescribeConfigsResponse = mallory.call(
        ApiKey::DescribeConfigs,
        4,
        &DescribeConfigsRequest::default().with_resources(vec![
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s("secret")),
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(4)
                .with_resource_name(s("1")),
        ]),
    );
    assert_eq!(answer.results[0].error_code, TOPIC_DENIED);
    assert_eq!(answer.results[1].error_code, CLUSTER_DENIED);
    assert!(answer.results.iter().all(|r| r.configs.is_empty()));
    checked(ApiKey::DescribeConfigs);
    let answer: AlterConfigsResponse = mallory.call(
        ApiKey::AlterConfigs,
        2,
        &AlterConfigsRequest::default().with_resources(vec![
            alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s("secret")),
        ]),
    );
    assert_eq!(answer.responses[0].error_code, TOPIC_DENIED);
    checked(ApiKey::AlterConfigs);
    let answer: IncrementalAlterConfigsResponse = mallory.call(
        ApiKey::IncrementalAlterConfigs,
        1,
        &IncrementalAlterConfigsRequest::default().with_resources(vec![
            incremental_alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(4)
                .with_resource_name(s("")),
        ]),
    );
    assert_eq!(answer.responses[0].error_code, CLUSTER_DENIED);
    checked(ApiKey::IncrementalAlterConfigs);

    // The cluster: described to all, its operations only with DESCRIBE.
    let answer: DescribeClusterResponse = mallory.call(
        ApiKey::DescribeCluster,
        1,
        &DescribeClusterRequest::default().with_include_cluster_authorized_operations(true),
    );
    assert_eq!(answer.error_code, 0);
    assert_eq!(answer.cluster_authorized_operations, 0);
    checked(ApiKey::DescribeCluster);
    let answer: DescribeQuorumResponse = mallory.call(
        ApiKey::DescribeQuorum,
        2,
        &DescribeQuorumRequest::default().with_topics(vec![
            describe_quorum_request::TopicData::default()
                .with_topic_name(topic("__cluster_metadata"))
                .with_partitions(vec![describe_quorum_request::PartitionData::default()]),
        ]),
    );
    assert_eq!(answer.error_code, CLUSTER_DENIED);
    assert!(answer.topics.is_empty());
    checked(ApiKey::DescribeQuorum);
    let answer: DescribeLogDirsResponse = mallory.call(
        ApiKey::DescribeLogDirs,
        4,
        &DescribeLogDirsRequest::default().with_topics(None),
    );
    assert_eq!(answer.error_code, CLUSTER_DENIED);
    assert!(answer.results.is_empty(), "log dirs leaked: {answer:?}");
    checked(ApiKey::DescribeLogDirs);
    let answer: ElectLeadersResponse = mallory.call(
        ApiKey::ElectLeaders,
        2,
        &ElectLeadersRequest::default()
            .with_timeout_ms(5000)
            .with_topic_partitions(Some(vec![
                elect_leaders_request::TopicPartitions::default()
                    .with_topic(topic("secret"))
                    .with_partitions(vec![0]),
            ])),
    );
    assert_eq!(answer.error_code, CLUSTER_DENIED);
    checked(ApiKey::ElectLeaders);
    let answer: AlterPartitionReassignmentsResponse = mallory.call(
        ApiKey::AlterPartitionReassignments,
        0,
        &AlterPartitionReassignmentsRequest::default().with_timeout_ms(5000),
    );
    assert_eq!(answer.error_code, CLUSTER_DENIED);
    checked(ApiKey::AlterPartitionReassignments);
    let answer: ListPartitionReassignmentsResponse = mallory.call(
        ApiKey::ListPartitionReassignments,
        0,
        &ListPartitionReassignmentsRequest::default().with_timeout_ms(5000),
    );
    assert_eq!(answer.error_code, CLUSTER_DENIED);
    checked(ApiKey::ListPartitionReassignments);

    // Groups.
    let group = || GroupId(s("secret-group"));
    let answer: FindCoordinatorResponse = mallory.call(
        ApiKey::FindCoordinator,
        4,
        &FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(vec![s("secret-group")]),
    );
    assert_eq!(answer.coordinators[0].error_code, GROUP_DENIED);
    let answer: FindCoordinatorResponse = mallory.call(
        ApiKey::FindCoordinator,
        4,
        &FindCoordinatorRequest::default()
            .with_key_type(1)
            .with_coordinator_keys(vec![s("secret-txn")]),
    );
    assert_eq!(answer.coordinators[0].error_code, TXN_DENIED);
    checked(ApiKey::FindCoordinator);
    let answer: JoinGroupResponse = mallory.call(
        ApiKey::JoinGroup,
        9,
        &JoinGroupRequest::default()
            .with_group_id(group())
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![
                join_group_request::JoinGroupRequestProtocol::default().with_name(s("range")),
            ]),
    );
    assert_eq!(answer.error_code, GROUP_DENIED);
    checked(ApiKey::JoinGroup);
    let answer: SyncGroupResponse = mallory.call(
        ApiKey::SyncGroup,
        5,
        &SyncGroupRequest::default()
            .with_group_id(group())
            .with_generation_id(1)
            .with_member_id(s("m")),
    );
    assert_eq!(answer.error_code, GROUP_DENIED);
    checked(ApiKey::SyncGroup);
    let answer: HeartbeatResponse = mallory.call(
        ApiKey::Heartbeat,
        4,
        &HeartbeatRequest::default()
            .with_group_id(group())
            .with_generation_id(1)
            .with_member_id(s("m")),
    );
    assert_eq!(answer.error_code, GROUP_DENIED);
    checked(ApiKey::Heartbeat);
    let answer: LeaveGroupResponse = mallory.call(
        ApiKey::LeaveGroup,
        5,
        &LeaveGroupRequest::default()
            .with_group_id(group())
            .with_members(vec![
                leave_group_request::MemberIdentity::default().with_member_id(s("m")),
            ]),
    );
    assert_eq!(answer.error_code, GROUP_DENIED);
    checked(ApiKey::LeaveGroup);
    let answer: OffsetCommitResponse = mallory.call(
        ApiKey::OffsetCommit,
        8,
        &OffsetCommitRequest::default()
            .with_group_id(group())
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![
                offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(topic("secret"))
                    .with_partitions(vec![
                        offset_commit_request::OffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(0),
                    ]),
            ]),
    );
    assert_eq!(answer.topics[0].partitions[0].error_code, GROUP_DENIED);
    checked(ApiKey::OffsetCommit);
    let answer: OffsetFetchResponse = mallory.call(
        ApiKey::OffsetFetch,
        8,
        &OffsetFetchRequest::default().with_groups(vec![
            offset_fetch_request::OffsetFetchRequestGroup::default()
                .with_group_id(group())
                .with_topics(None),
        ]),
    );
    assert_eq!(answer.groups[0].error_code, GROUP_DENIED);
    assert!(answer.groups[0].topics.is_empty());
    checked(ApiKey::OffsetFetch);
    let answer: ListGroupsResponse =
        mallory.call(ApiKey::ListGroups, 4, &ListGroupsRequest::default());
    assert_eq!(answer.error_code, 0);
    assert!(
        answer.groups.is_empty(),
        "groups leaked: {:?}",
        answer.groups
    );
    checked(ApiKey::ListGroups);
    let answer: DescribeGroupsResponse = mallory.call(
        ApiKey::DescribeGroups,
        5,
        &DescribeGroupsRequest::default().with_groups(vec![group()]),
    );
    assert_eq!(answer.groups[0].error_code, GROUP_DENIED);
    checked(ApiKey::DescribeGroups);
    let answer: DeleteGroupsResponse = mallory.call(
        ApiKey::DeleteGroups,
        2,
        &DeleteGroupsRequest::default().with_groups_names(vec![group()]),
    );
    assert_eq!(answer.results[0].error_code, GROUP_DENIED);
    checked(ApiKey::DeleteGroups);
    let answer: ConsumerGroupHeartbeatResponse = mallory.call(
        ApiKey::ConsumerGroupHeartbeat,
        0,
        &ConsumerGroupHeartbeatRequest::default()
            .with_group_id(group())
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(10_000)
            .with_subscribed_topic_names(Some(vec![topic("secret")]))
            .with_topic_partitions(Some(Vec::new())),
    );
    assert_eq!(answer.error_code, GROUP_DENIED);
    checked(ApiKey::ConsumerGroupHeartbeat);
    let answer: ConsumerGroupDescribeResponse = mallory.call(
        ApiKey::ConsumerGroupDescribe,
        0,
        &ConsumerGroupDescribeRequest::default().with_group_ids(vec![group()]),
    );
    assert_eq!(answer.groups[0].error_code, GROUP_DENIED);
    checked(ApiKey::ConsumerGroupDescribe);
    let answer: OffsetDeleteResponse = mallory.call(
        ApiKey::OffsetDelete,
        0,
        &OffsetDeleteRequest::default()
            .with_group_id(group())
            .with_topics(vec![
                offset_delete_request::OffsetDeleteRequestTopic::default()
                    .with_name(topic("secret"))
                    .with_partitions(vec![
                        offset_delete_request::OffsetDeleteRequestPartition::default()
                            .with_partition_index(0),
                    ]),
            ]),
    );
    assert_eq!(answer.error_code, GROUP_DENIED);
    checked(ApiKey::OffsetDelete);

    // Transactions.
    let txn = || TransactionalId(s("secret-txn"));
    let answer: AddPartitionsToTxnResponse = mallory.call(
        ApiKey::AddPartitionsToTxn,
        3,
        &AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(txn())
            .with_v3_and_below_producer_id(ProducerId(initialized.producer_id.0))
            .with_v3_and_below_producer_epoch(initialized.producer_epoch)
            .with_v3_and_below_topics(vec![
                add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                    .with_name(topic("secret"))
                    .with_partitions(vec![0]),
            ]),
    );
    assert_eq!(
        answer.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
        TXN_DENIED
    );
    checked(ApiKey::AddPartitionsToTxn);
    let answer: AddOffsetsToTxnResponse = mallory.call(
        ApiKey::AddOffsetsToTxn,
        3,
        &AddOffsetsToTxnRequest::default()
            .with_transactional_id(txn())
            .with_producer_id(initialized.producer_id)
            .with_producer_epoch(initialized.producer_epoch)
            .with_group_id(group()),
    );
    assert_eq!(answer.error_code, TXN_DENIED);
    checked(ApiKey::AddOffsetsToTxn);
    let answer: EndTxnResponse = mallory.call(
        ApiKey::EndTxn,
        3,
        &EndTxnRequest::default()
            .with_transactional_id(txn())
            .with_producer_id(initialized.producer_id)
            .with_producer_epoch(initialized.producer_epoch)
            .with_committed(false),
    );
    assert_eq!(answer.error_code, TXN_DENIED);
    checked(ApiKey::EndTxn);
    let answer: TxnOffsetCommitResponse = mallory.call(
        ApiKey::TxnOffsetCommit,
        3,
        &TxnOffsetCommitRequest::default()
            .with_transactional_id(txn())
            .with_group_id(group())
            .with_producer_id(initialized.producer_id)
            .with_producer_epoch(initialized.producer_epoch)
            .with_generation_id(-1)
            .with_topics(vec![
                txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                    .with_name(topic("secret"))
                    .with_partitions(vec![
                        txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(0),
                    ]),
            ]),
    );
    assert_eq!(answer.topics[0].partitions[0].error_code, TXN_DENIED);
    checked(ApiKey::TxnOffsetCommit);
    let answer: DescribeTransactionsResponse = mallory.call(
        ApiKey::DescribeTransactions,
        0,
        &DescribeTransactionsRequest::default().with_transactional_ids(vec![txn()]),
    );
    assert_eq!(answer.transaction_states[0].error_code, TXN_DENIED);
    checked(ApiKey::DescribeTransactions);
    let answer: ListTransactionsResponse = mallory.call(
        ApiKey::ListTransactions,
        1,
        &ListTransactionsRequest::default(),
    );
    assert!(
        answer.transaction_states.is_empty(),
        "transactional ids leaked: {:?}",
        answer.transaction_states
    );
    checked(ApiKey::ListTransactions);
    let answer: DescribeProducersResponse = mallory.call(
        ApiKey::DescribeProducers,
        0,
        &DescribeProducersRequest::default().with_topics(vec![
            describe_producers_request::TopicRequest::default()
                .with_name(topic("secret"))
                .with_partition_indexes(vec![0]),
        ]),
    );
    assert_eq!(answer.topics[0].partitions[0].error_code, TOPIC_DENIED);
    checked(ApiKey::DescribeProducers);
    let answer: WriteTxnMarkersResponse = mallory.call(
        ApiKey::WriteTxnMarkers,
        1,
        &WriteTxnMarkersRequest::default().with_markers(vec![
            write_txn_markers_request::WritableTxnMarker::default()
                .with_producer_id(initialized.producer_id)
                .with_producer_epoch(initialized.producer_epoch)
                .with_topics(vec![
                    write_txn_markers_request::WritableTxnMarkerTopic::default()
                        .with_name(topic("secret"))
                        .with_partition_indexes(vec![0]),
                ]),
        ]),
    );
    assert_eq!(
        answer.markers[0].topics[0].partitions[0].error_code,
        CLUSTER_DENIED
    );
    checked(ApiKey::WriteTxnMarkers);

    // Security administration.
    let answer: DescribeUserScramCredentialsResponse = mallory.call(
        ApiKey::DescribeUserScramCredentials,
        0,
        &DescribeUserScramCredentialsRequest::default(),
    );
    assert_eq!(answer.error_code, CLUSTER_DENIED);
    checked(ApiKey::DescribeUserScramCredentials);
    let answer: AlterUserScramCredentialsResponse = mallory.call(
        ApiKey::AlterUserScramCredentials,
        0,
        &AlterUserScramCredentialsRequest::default().with_deletions(vec![
            alter_user_scram_credentials_request::ScramCredentialDeletion::default()
                .with_name(s("admin"))
                .with_mechanism(2),
        ]),
    );
    assert_eq!(answer.results[0].error_code, CLUSTER_DENIED);
    checked(ApiKey::AlterUserScramCredentials);
    let answer: CreateAclsResponse = mallory.call(
        ApiKey::CreateAcls,
        3,
        &CreateAclsRequest::default().with_creations(vec![
            create_acls_request::AclCreation::default()
                .with_resource_type(2)
                .with_resource_name(s("secret"))
                .with_resource_pattern_type(3)
                .with_principal(s("User:mallory"))
                .with_host(s("*"))
                .with_operation(2)
                .with_permission_type(3),
        ]),
    );
    assert_eq!(answer.results[0].error_code, CLUSTER_DENIED);
    checked(ApiKey::CreateAcls);
    let answer: DescribeAclsResponse = mallory.call(
        ApiKey::DescribeAcls,
        3,
        &DescribeAclsRequest::default()
            .with_resource_type_filter(1)
            .with_pattern_type_filter(1)
            .with_operation(1)
            .with_permission_type(1),
    );
    assert_eq!(answer.error_code, CLUSTER_DENIED);
    checked(ApiKey::DescribeAcls);
    let answer: DeleteAclsResponse = mallory.call(
        ApiKey::DeleteAcls,
        3,
        &DeleteAclsRequest::default().with_filters(vec![
            delete_acls_request::DeleteAclsFilter::default()
                .with_resource_type_filter(1)
                .with_pattern_type_filter(1)
                .with_operation(1)
                .with_permission_type(1),
        ]),
    );
    assert_eq!(answer.filter_results[0].error_code, CLUSTER_DENIED);
    checked(ApiKey::DeleteAcls);

    // Client quotas: DESCRIBE_CONFIGS and ALTER_CONFIGS on the cluster.
    let answer: DescribeClientQuotasResponse = mallory.call(
        ApiKey::DescribeClientQuotas,
        1,
        &DescribeClientQuotasRequest::default(),
    );
    assert_eq!(answer.error_code, CLUSTER_DENIED);
    assert!(answer.entries.is_none_or(|e| e.is_empty()));
    checked(ApiKey::DescribeClientQuotas);
    let answer: AlterClientQuotasResponse = mallory.call(
        ApiKey::AlterClientQuotas,
        1,
        &AlterClientQuotasRequest::default().with_entries(vec![
            alter_client_quotas_request::EntryData::default()
                .with_entity(vec![
                    alter_client_quotas_request::EntityData::default()
                        .with_entity_type(s("user"))
                        .with_entity_name(Some(s("mallory"))),
                ])
                .with_ops(vec![
                    alter_client_quotas_request::OpData::default()
                        .with_key(s("producer_byte_rate"))
                        .with_remove(true),
                ]),
        ]),
    );
    assert_eq!(answer.entries[0].error_code, CLUSTER_DENIED);
    checked(ApiKey::AlterClientQuotas);

    assert!(
        unchecked.is_empty(),
        "APIs advertised but not walked by this test (add their case): {unchecked:?}"
    );
    let logs = node.logs();
    assert!(
        !logs.contains("answered without asking the authorizer"),
        "a handler answered without asking the authorizer:\n{}",
        support::tail(&logs, 40)
    );
    assert!(
        node.gauge("sluice_authorizations_denied_total")
            .unwrap_or(0)
            > 40
    );
    // The super user on the PLAINTEXT listener still sees everything.
    let answer: MetadataResponse = setup.call(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(None),
    );
    assert!(
        answer
            .topics
            .iter()
            .any(|t| t.name == Some(topic("secret")))
    );
}

/// confluent-kafka grants, describes and revokes ACLs; alice, over SASL, works within them
/// (a PREFIXED topic ACL, a group ACL) and is refused outside them with Kafka's errors.
#[test]
fn acls_from_confluent_kafka_let_a_user_in_and_keep_her_out() {
    let node = secured_node();
    let plain = node.bootstrap();
    let sasl = format!("127.0.0.1:{}", node.listener_port("SASL_PLAINTEXT"));
    for case in ["grant", "alice-works", "alice-refused", "revoke"] {
        support::run_client(&node, "python3", &["acl_suite.py", case, &plain, &sasl]);
    }
    assert_eq!(node.gauge("sluice_acls"), Some(3));
}
