//! Consumer groups against real clients and real `sluice server` processes: librdkafka
//! (confluent-kafka), kafka-python and kafkajs consumers subscribe, split partitions,
//! rebalance, commit and resume; the raw protocol checks fencing; a three-node cluster keeps
//! every committed offset when the coordinator's broker is killed.

mod support;

use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, FindCoordinatorRequest, FindCoordinatorResponse, GroupId, HeartbeatRequest,
    HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, OffsetCommitRequest,
    OffsetCommitResponse, SyncGroupRequest, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use support::raw::Client;
use support::{Cluster, SingleNode, run_client, suite_on_cluster};

fn groups_case(node: &SingleNode, case: &str) -> String {
    let bootstrap = node.bootstrap();
    run_client(node, "python3", &["groups_suite.py", &bootstrap, case])
}

#[test]
fn two_confluent_consumers_split_partitions_and_one_takes_over_when_the_other_leaves() {
    let node = SingleNode::start(&[]);
    groups_case(&node, "split-and-leave");
}

#[test]
fn a_restarted_confluent_consumer_resumes_at_the_committed_offset() {
    let node = SingleNode::start(&[]);
    groups_case(&node, "resume");
}

#[test]
fn confluent_auto_commit_stores_the_position() {
    let node = SingleNode::start(&[]);
    groups_case(&node, "auto-commit");
}

#[test]
fn a_static_member_restarts_without_a_rebalance() {
    let node = SingleNode::start(&[]);
    groups_case(&node, "static-restart");
}

#[test]
fn cooperative_sticky_rebalances_incrementally() {
    let node = SingleNode::start(&[]);
    groups_case(&node, "cooperative");
}

#[test]
fn kip848_consumers_split_partitions_without_stopping_and_commit() {
    let node = SingleNode::start(&[]);
    groups_case(&node, "kip848");
}

#[test]
fn group_admin_lists_describes_alters_and_deletes() {
    let node = SingleNode::start(&[]);
    groups_case(&node, "admin");
}

#[test]
fn kafka_python_consumers_join_a_group_commit_and_delete_offsets() {
    let node = SingleNode::start(&[]);
    run_client(
        &node,
        "python3",
        &["kafka_python_group.py", &node.bootstrap()],
    );
}

#[test]
fn kafkajs_consumer_joins_a_group_and_commits() {
    let node = SingleNode::start(&[]);
    run_client(&node, "node", &["kafkajs_group.js", &node.bootstrap()]);
}

fn find_group_coordinator(client: &mut Client, group: &str) -> FindCoordinatorResponse {
    client.call(
        ApiKey::FindCoordinator,
        3,
        &FindCoordinatorRequest::default()
            .with_key(StrBytes::from_string(group.to_owned()))
            .with_key_type(0),
    )
}

/// A JoinGroup, retried while the coordinator loads (as clients do).
fn join(client: &mut Client, group: &str, member_id: &str) -> JoinGroupResponse {
    for _ in 0..100 {
        let response = join_once(client, group, member_id);
        if response.error_code != 14 {
            return response;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("the coordinator of {group} stayed loading");
}

fn join_once(client: &mut Client, group: &str, member_id: &str) -> JoinGroupResponse {
    client.call(
        ApiKey::JoinGroup,
        5,
        &JoinGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_member_id(StrBytes::from_string(member_id.to_owned()))
            .with_protocol_type(StrBytes::from_static_str("consumer"))
            .with_protocols(vec![
                JoinGroupRequestProtocol::default()
                    .with_name(StrBytes::from_static_str("range"))
                    .with_metadata(bytes::Bytes::from_static(b"m")),
            ]),
    )
}

fn commit(client: &mut Client, group: &str, member_id: &str, generation: i32) -> i16 {
    let response: OffsetCommitResponse = client.call(
        ApiKey::OffsetCommit,
        8,
        &OffsetCommitRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(StrBytes::from_string(member_id.to_owned()))
            .with_topics(vec![
                OffsetCommitRequestTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str("fenced")))
                    .with_partitions(vec![
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(5),
                    ]),
            ]),
    );
    response.topics[0].partitions[0].error_code
}

#[test]
fn stale_generations_and_unknown_members_are_fenced() {
    let node = SingleNode::start(&[]);
    let mut client = Client::connect(node.kafka_port);
    client.create_topic("fenced", 1);
    let coordinator = find_group_coordinator(&mut client, "g");
    assert_eq!(coordinator.error_code, 0, "{coordinator:?}");
    assert_eq!(coordinator.port, i32::from(node.kafka_port));

    // KIP-394: the first join hands out the member id.
    let first = join(&mut client, "g", "");
    assert_eq!(first.error_code, 79, "MEMBER_ID_REQUIRED");
    let member = first.member_id.to_string();
    let joined = join(&mut client, "g", &member);
    assert_eq!((joined.error_code, joined.generation_id), (0, 1));
    let synced: SyncGroupResponse = client.call(
        ApiKey::SyncGroup,
        3,
        &SyncGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("g")))
            .with_generation_id(1)
            .with_member_id(StrBytes::from_string(member.clone()))
            .with_assignments(vec![
                SyncGroupRequestAssignment::default()
                    .with_member_id(StrBytes::from_string(member.clone()))
                    .with_assignment(bytes::Bytes::from_static(b"a")),
            ]),
    );
    assert_eq!((synced.error_code, &synced.assignment[..]), (0, &b"a"[..]));

    assert_eq!(commit(&mut client, "g", &member, 1), 0);
    assert_eq!(
        commit(&mut client, "g", &member, 0),
        22,
        "ILLEGAL_GENERATION"
    );
    assert_eq!(
        commit(&mut client, "g", "stranger", 1),
        25,
        "UNKNOWN_MEMBER_ID"
    );
    assert_eq!(
        commit(&mut client, "g", "", -1),
        25,
        "a tool's commit while the group has members"
    );
    let heartbeat: HeartbeatResponse = client.call(
        ApiKey::Heartbeat,
        3,
        &HeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("g")))
            .with_generation_id(7)
            .with_member_id(StrBytes::from_string(member.clone())),
    );
    assert_eq!(heartbeat.error_code, 22, "ILLEGAL_GENERATION");
    // A session timeout outside the broker's bounds.
    let mut short = JoinGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("g2")))
        .with_session_timeout_ms(1)
        .with_protocol_type(StrBytes::from_static_str("consumer"));
    short.protocols = join_protocols();
    // "g2" may live in another __consumer_offsets partition, still loading on a busy
    // machine: COORDINATOR_LOAD_IN_PROGRESS (14) is retried, as clients do.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let refused = loop {
        let answer: JoinGroupResponse = client.call(ApiKey::JoinGroup, 5, &short);
        if answer.error_code != 14 || std::time::Instant::now() > deadline {
            break answer;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(refused.error_code, 26, "INVALID_SESSION_TIMEOUT");
}

fn join_protocols() -> Vec<JoinGroupRequestProtocol> {
    vec![
        JoinGroupRequestProtocol::default()
            .with_name(StrBytes::from_static_str("range"))
            .with_metadata(bytes::Bytes::from_static(b"m")),
    ]
}

#[test]
fn a_single_node_without_enough_brokers_says_why_there_is_no_coordinator() {
    // offsets.topic.replication.factor above the broker count: Kafka's COORDINATOR_NOT_AVAILABLE,
    // with a message that says what to change.
    let node = SingleNode::start(&["offsets.topic.replication.factor=3"]);
    let mut client = Client::connect(node.kafka_port);
    let response = find_group_coordinator(&mut client, "g");
    assert_eq!(response.error_code, 15, "{response:?}");
    let message = response
        .error_message
        .map(|m| m.to_string())
        .unwrap_or_default();
    assert!(
        message.contains("offsets.topic.replication.factor"),
        "message: {message}"
    );
}

#[test]
fn committed_offsets_survive_kill_9_of_the_coordinators_broker() {
    let mut cluster = Cluster::start(3, &["offsets.topic.num.partitions=6"]);
    let mut client = Client::connect(cluster.nodes[0].kafka_port);
    client.create_topic("durable", 3);
    // Ten groups, so that their coordinators are spread over the brokers.
    let groups: Vec<String> = (0..10).map(|g| format!("durable-{g}")).collect();
    for (i, group) in groups.iter().enumerate() {
        let offset = (100 + i).to_string();
        suite_on_cluster(
            &cluster,
            "groups_suite.py",
            "commit",
            &["durable", group, &offset, "3"],
        );
    }
    // Kill -9 the broker coordinating the first group.
    let coordinator = find_group_coordinator(&mut client, &groups[0]);
    assert_eq!(coordinator.error_code, 0, "{coordinator:?}");
    let victim = cluster
        .nodes
        .iter()
        .position(|n| i32::from(n.kafka_port) == coordinator.port)
        .expect("the coordinator is a node of the cluster");
    cluster.kill9(victim);
    for (i, group) in groups.iter().enumerate() {
        let committed = suite_on_cluster(
            &cluster,
            "groups_suite.py",
            "committed",
            &["durable", group, "3"],
        );
        let expected = vec![(100 + i).to_string(); 3].join(",");
        assert!(
            committed.lines().any(|l| l == expected),
            "{group}: committed {committed:?}, expected {expected} (broker {victim} killed)"
        );
    }
}

/// `sluice groups ARGS... --bootstrap-server NODE`: (success, stdout, stderr).
fn groups_cli(node: &SingleNode, args: &[&str]) -> (bool, String, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("groups")
        .args(args)
        .args(["--bootstrap-server", &node.bootstrap()])
        .output()
        .expect("running sluice groups");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn the_groups_cli_describes_lag_refuses_live_resets_and_resets_where_it_says() {
    use std::io::{BufRead, BufReader};
    let node = SingleNode::start(&[]);
    groups_case_args(&node, "produce-n", &["cli", "2", "50"]);
    // A live member that has read and committed everything.
    let mut member = std::process::Command::new("python3")
        .args([
            "groups_suite.py",
            &node.bootstrap(),
            "hold",
            "g-cli",
            "cli",
            "100",
        ])
        .current_dir(support::clients_dir())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut lines = BufReader::new(member.stdout.take().expect("stdout")).lines();
    let ready = lines.next().and_then(Result::ok);
    assert_eq!(
        ready.as_deref(),
        Some("ready"),
        "the member did not get ready"
    );

    let (ok, json, stderr) = groups_cli(&node, &["describe", "g-cli", "--output", "json"]);
    assert!(ok, "{stderr}");
    assert!(json.contains("\"state\": \"Stable\""), "{json}");
    assert!(json.contains("\"total_lag\": 0"), "{json}");
    assert!(json.contains("\"host\": \"/127.0.0.1\""), "{json}");
    assert_eq!(json.matches("\"log_end_offset\": 50").count(), 2, "{json}");
    groups_case_args(&node, "produce-n-more", &["cli", "2", "5"]);
    let (ok, text, stderr) = groups_cli(&node, &["describe", "g-cli"]);
    assert!(ok, "{stderr}");
    assert!(text.contains("total_lag"), "{text}");
    // The coordinator's metrics: the group, its member and its lag (5 new records per
    // partition since the commit).
    let metrics = node.metrics_text();
    assert!(
        metrics.contains("sluice_consumer_group_lag_sum{group=\"g-cli\",topic=\"cli\"} 10"),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluice_group_members{group=\"g-cli\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("sluice_groups{type=\"classic\",state=\"Stable\"} 1"));
    assert!(
        metrics.contains("sluice_offset_commits_total 2"),
        "{metrics}"
    );
    let (ok, listed, _) = groups_cli(&node, &["list"]);
    assert!(
        ok && listed.contains("g-cli") && listed.contains("Stable"),
        "{listed}"
    );

    // Kafka refuses to move a live group's offsets.
    let (ok, _, stderr) = groups_cli(
        &node,
        &[
            "reset-offsets",
            "g-cli",
            "--topic",
            "cli",
            "--to-offset",
            "10",
            "--execute",
        ],
    );
    assert!(!ok && stderr.contains("active members"), "{stderr}");
    drop(member.stdin.take());
    assert!(member.wait().expect("member exit").success());

    // A dry run changes nothing; --execute commits; consumers start there.
    let (ok, plan, stderr) = groups_cli(
        &node,
        &[
            "reset-offsets",
            "g-cli",
            "--topic",
            "cli",
            "--to-offset",
            "10",
        ],
    );
    assert!(ok && plan.contains("dry run"), "{plan}{stderr}");
    let (_, json, _) = groups_cli(&node, &["describe", "g-cli", "--output", "json"]);
    assert_eq!(
        json.matches("\"committed_offset\": 50").count(),
        2,
        "{json}"
    );
    let (ok, _, stderr) = groups_cli(
        &node,
        &[
            "reset-offsets",
            "g-cli",
            "--topic",
            "cli",
            "--to-offset",
            "10",
            "--execute",
        ],
    );
    assert!(ok, "{stderr}");
    let first = groups_case_args(&node, "first-offsets", &["g-cli", "cli", "2"]);
    assert!(first.lines().any(|l| l == "10,10"), "{first}");
    let (ok, _, stderr) = groups_cli(
        &node,
        &[
            "reset-offsets",
            "g-cli",
            "--topic",
            "cli",
            "--shift-by",
            "-3",
            "--execute",
        ],
    );
    assert!(ok, "{stderr}");
    let (_, json, _) = groups_cli(&node, &["describe", "g-cli", "--output", "json"]);
    assert_eq!(
        json.matches("\"committed_offset\": 7,").count(),
        2,
        "{json}"
    );
    let (ok, _, stderr) = groups_cli(
        &node,
        &[
            "reset-offsets",
            "g-cli",
            "--topic",
            "cli",
            "--to-earliest",
            "--execute",
        ],
    );
    assert!(ok, "{stderr}");
    let first = groups_case_args(&node, "first-offsets", &["g-cli", "cli", "2"]);
    assert!(first.lines().any(|l| l == "0,0"), "{first}");

    let (ok, _, stderr) = groups_cli(&node, &["delete", "g-cli"]);
    assert!(ok, "{stderr}");
    let (ok, _, stderr) = groups_cli(&node, &["delete", "g-cli"]);
    assert!(!ok && stderr.contains("GROUP_ID_NOT_FOUND"), "{stderr}");
}

fn groups_case_args(node: &SingleNode, case: &str, args: &[&str]) -> String {
    let bootstrap = node.bootstrap();
    let mut all = vec!["groups_suite.py", bootstrap.as_str(), case];
    all.extend_from_slice(args);
    run_client(node, "python3", &all)
}

#[test]
fn batched_and_filtered_group_apis() {
    use kafka_protocol::messages::leave_group_request::MemberIdentity;
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
    use kafka_protocol::messages::{
        LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse,
        OffsetFetchRequest, OffsetFetchResponse,
    };
    let node = SingleNode::start(&[]);
    let mut client = Client::connect(node.kafka_port);
    client.create_topic("fenced", 1);
    // Clients cannot write the offsets topic or create it themselves (Kafka's answers).
    let mut batch = sluice::log::batch::BatchBuilder::new(0, 1_700_000_000_000);
    batch.push(1_700_000_000_000, Some(b"k"), Some(b"v"), &[]);
    let found: FindCoordinatorResponse = find_group_coordinator(&mut client, "a");
    assert_eq!(found.error_code, 0);
    assert_eq!(client.produce("__consumer_offsets", 0, batch.build()).0, 17);
    let create: kafka_protocol::messages::CreateTopicsResponse = client.call(
        ApiKey::CreateTopics,
        5,
        &kafka_protocol::messages::CreateTopicsRequest::default().with_topics(vec![
            kafka_protocol::messages::create_topics_request::CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("__consumer_offsets")))
                .with_num_partitions(1)
                .with_replication_factor(1),
        ]),
    );
    assert_eq!(create.topics[0].error_code, 42, "INVALID_REQUEST");

    // FindCoordinator v4+: several keys at once, each answered on its own.
    let batched: FindCoordinatorResponse = client.call(
        ApiKey::FindCoordinator,
        4,
        &FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(vec![
                StrBytes::from_static_str("a"),
                StrBytes::from_static_str("b"),
            ]),
    );
    assert_eq!(batched.coordinators.len(), 2);
    assert!(
        batched.coordinators.iter().all(|c| c.error_code == 0),
        "{batched:?}"
    );
    let transactional: FindCoordinatorResponse = client.call(
        ApiKey::FindCoordinator,
        4,
        &FindCoordinatorRequest::default()
            .with_key_type(1)
            .with_coordinator_keys(vec![StrBytes::from_static_str("t")]),
    );
    // Transactional ids have a coordinator too (its topic is created on this first call).
    assert_eq!(
        transactional.coordinators[0].error_code, 0,
        "{transactional:?}"
    );
    assert!(transactional.coordinators[0].node_id.0 >= 0);

    // Two static members in group "a"; a tool commit for group "b".
    let join_static = |client: &mut Client, instance: &str| -> JoinGroupResponse {
        let mut request = JoinGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("a")))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(100)
            .with_group_instance_id(Some(StrBytes::from_string(instance.to_owned())))
            .with_protocol_type(StrBytes::from_static_str("consumer"));
        request.protocols = join_protocols();
        for _ in 0..100 {
            let response: JoinGroupResponse = client.call(ApiKey::JoinGroup, 5, &request);
            if response.error_code != 14 {
                return response;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("coordinator kept loading");
    };
    let first = join_static(&mut client, "i1");
    assert_eq!((first.error_code, first.generation_id), (0, 1));
    assert_eq!(commit(&mut client, "b", "", -1), 0);

    // ListGroups with a state filter (v4).
    let list = |client: &mut Client, states: &[&'static str]| -> Vec<String> {
        let response: ListGroupsResponse = client.call(
            ApiKey::ListGroups,
            4,
            &ListGroupsRequest::default().with_states_filter(
                states
                    .iter()
                    .map(|s| StrBytes::from_static_str(s))
                    .collect(),
            ),
        );
        let mut groups: Vec<String> = response
            .groups
            .iter()
            .map(|g| g.group_id.to_string())
            .collect();
        groups.sort();
        groups
    };
    assert_eq!(list(&mut client, &[]), vec!["a", "b"]);
    assert_eq!(list(&mut client, &["CompletingRebalance"]), vec!["a"]);
    assert_eq!(list(&mut client, &["Empty"]), vec!["b"]);

    // OffsetFetch v8: two groups in one request.
    let fetched: OffsetFetchResponse = client.call(
        ApiKey::OffsetFetch,
        8,
        &OffsetFetchRequest::default().with_groups(vec![
            OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(StrBytes::from_static_str("a")))
                .with_topics(None),
            OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(StrBytes::from_static_str("b")))
                .with_topics(None),
        ]),
    );
    assert_eq!(fetched.groups.len(), 2);
    assert!(fetched.groups[0].topics.is_empty(), "{fetched:?}");
    assert_eq!(
        fetched.groups[1].topics[0].partitions[0].committed_offset,
        5
    );

    // LeaveGroup v3: a batch by instance id; an unknown instance is answered on its own.
    let left: LeaveGroupResponse = client.call(
        ApiKey::LeaveGroup,
        3,
        &LeaveGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("a")))
            .with_members(vec![
                MemberIdentity::default()
                    .with_member_id(StrBytes::from_static_str(""))
                    .with_group_instance_id(Some(StrBytes::from_static_str("i1"))),
                MemberIdentity::default()
                    .with_member_id(StrBytes::from_static_str(""))
                    .with_group_instance_id(Some(StrBytes::from_static_str("nobody"))),
            ]),
    );
    let codes: Vec<i16> = left.members.iter().map(|m| m.error_code).collect();
    assert_eq!((left.error_code, codes), (0, vec![0, 25]));
    assert_eq!(list(&mut client, &["Empty"]), vec!["a", "b"]);
}

/// The coordinator of a KIP-848 group is killed: the new one restores the group from
/// `__consumer_offsets` (Kafka's consumer group records), so the member keeps its id, epoch
/// and partitions: no revocation, no loss, no second assignment.
#[test]
fn a_kip848_member_keeps_its_partitions_when_the_coordinator_is_killed() {
    use kafka_protocol::messages::{ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse};
    let mut cluster = Cluster::start(3, &["offsets.topic.num.partitions=3"]);
    suite_on_cluster(
        &cluster,
        "groups_suite.py",
        "create-rf",
        &["durable848", "3", "3"],
    );
    let (member, member_id) = Held848::start(&cluster.bootstrap(), "g848d", "durable848");

    let mut client = Client::connect(cluster.nodes[0].kafka_port);
    let coordinator = find_group_coordinator(&mut client, "g848d");
    assert_eq!(coordinator.error_code, 0, "{coordinator:?}");
    let victim = cluster
        .nodes
        .iter()
        .position(|n| i32::from(n.kafka_port) == coordinator.port)
        .expect("the coordinator is a node of the cluster");
    cluster.kill9(victim);
    let survivor = cluster.nodes[(victim + 1) % 3].kafka_port;
    let mut client = Client::connect(survivor);

    // The new coordinator describes the same member, at an epoch it had.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let described = loop {
        let found = find_group_coordinator(&mut client, "g848d");
        if found.error_code == 0 && found.port != coordinator.port {
            let mut at = Client::connect(found.port as u16);
            let response: ConsumerGroupDescribeResponse = at.call(
                ApiKey::ConsumerGroupDescribe,
                0,
                &ConsumerGroupDescribeRequest::default()
                    .with_group_ids(vec![GroupId(StrBytes::from_static_str("g848d"))]),
            );
            if response.groups[0].error_code == 0 {
                break response;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no new coordinator served the group"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    };
    let members: Vec<String> = described.groups[0]
        .members
        .iter()
        .map(|m| m.member_id.to_string())
        .collect();
    assert_eq!(members, vec![member_id.clone()], "{described:?}");
    // A few heartbeats against the new coordinator.
    std::thread::sleep(std::time::Duration::from_secs(12));
    let summary = member.finish();
    assert_eq!(
        summary,
        format!("assigned 1 revoked 0 lost 0 member {member_id}"),
        "the member rejoined or lost its partitions"
    );
}

/// A confluent-kafka KIP-848 member (`groups_suite.py hold848`) holding its partitions until its
/// stdin closes.
struct Held848 {
    process: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl Held848 {
    /// Starts one in `group` on `topic` and waits for its "ready <member id>" line: the member
    /// and its id.
    fn start(bootstrap: &str, group: &str, topic: &str) -> (Held848, String) {
        use std::io::BufRead;
        let mut process = std::process::Command::new("python3")
            .args(["groups_suite.py", bootstrap, "hold848", group, topic])
            .current_dir(support::clients_dir())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let mut lines = std::io::BufReader::new(process.stdout.take().expect("stdout")).lines();
        let ready = lines.next().and_then(Result::ok).unwrap_or_default();
        let member_id = ready
            .strip_prefix("ready ")
            .unwrap_or_else(|| panic!("a confluent member did not get ready: {ready:?}"))
            .to_owned();
        (Held848 { process, lines }, member_id)
    }

    /// Closes its stdin, waits for it to exit successfully and returns its summary line
    /// ("assigned N revoked N lost N member <id>").
    fn finish(mut self) -> String {
        drop(self.process.stdin.take());
        let summary = self.lines.next().and_then(Result::ok).unwrap_or_default();
        assert!(self.process.wait().expect("member exit").success());
        summary
    }
}

/// One KIP-848 heartbeat (version 1: the member names itself), retried while the coordinator
/// loads; `owned` None on a join means none.
fn consumer_heartbeat(
    client: &mut Client,
    group: &str,
    member_id: &str,
    epoch: i32,
    owned: &[(uuid::Uuid, i32)],
) -> kafka_protocol::messages::ConsumerGroupHeartbeatResponse {
    use kafka_protocol::messages::ConsumerGroupHeartbeatRequest;
    use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
    let mut by_topic: std::collections::BTreeMap<uuid::Uuid, Vec<i32>> = Default::default();
    for (id, partition) in owned {
        by_topic.entry(*id).or_default().push(*partition);
    }
    let request = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
        .with_member_id(StrBytes::from_string(member_id.to_owned()))
        .with_member_epoch(epoch)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(
            (epoch == 0).then(|| vec![TopicName(StrBytes::from_static_str("soon848"))]),
        )
        .with_topic_partitions(Some(
            by_topic
                .into_iter()
                .map(|(id, partitions)| {
                    TopicPartitions::default()
                        .with_topic_id(id)
                        .with_partitions(partitions)
                })
                .collect(),
        ));
    for _ in 0..100 {
        let response: kafka_protocol::messages::ConsumerGroupHeartbeatResponse =
            client.call(ApiKey::ConsumerGroupHeartbeat, 1, &request);
        // COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE: the offsets topic is new.
        if ![14, 15].contains(&response.error_code) {
            assert_eq!(response.error_code, 0, "{response:?}");
            return response;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("the coordinator of {group} stayed loading");
}

fn assigned(
    response: &kafka_protocol::messages::ConsumerGroupHeartbeatResponse,
) -> Vec<(uuid::Uuid, i32)> {
    response
        .assignment
        .iter()
        .flat_map(|a| &a.topic_partitions)
        .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p)))
        .collect()
}

/// KIP-848 heartbeat intervals, as the protocol shows them: a member whose assignment is
/// changing (a newcomer waiting for partitions another member holds, a member that must
/// give partitions up) is answered with the short interval, so it hears of the next step
/// soon; a member whose assignment is complete heartbeats once per
/// `group.consumer.heartbeat.interval.ms`, its first stable answer placing its heartbeats
/// apart from the other stable members'. The metric counts the answers of each kind.
#[test]
fn kip848_members_whose_assignment_changes_are_asked_back_soon() {
    let node = SingleNode::start(&["group.consumer.heartbeat.interval.ms=4000"]);
    let mut client = Client::connect(node.kafka_port);
    client.create_topic("soon848", 4);
    // The first FindCoordinator creates the offsets topic.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while find_group_coordinator(&mut client, "soon").error_code != 0 {
        assert!(std::time::Instant::now() < deadline, "no coordinator");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (short, configured) = (200, 4000);
    let a = consumer_heartbeat(&mut client, "soon", "member-a", 0, &[]);
    assert_eq!(
        (assigned(&a).len(), a.heartbeat_interval_ms),
        (4, configured),
        "{a:?}"
    );
    let all_a = assigned(&a);

    // B joins: everything is A's, so B is asked back soon.
    let b = consumer_heartbeat(&mut client, "soon", "member-b", 0, &[]);
    assert_eq!(
        (assigned(&b).len(), b.heartbeat_interval_ms),
        (0, short),
        "{b:?}"
    );
    // A's next heartbeat tells it to give two up, and to come back soon.
    let a = consumer_heartbeat(&mut client, "soon", "member-a", a.member_epoch, &all_a);
    assert_eq!(
        (assigned(&a).len(), a.heartbeat_interval_ms),
        (2, short),
        "{a:?}"
    );
    let kept = assigned(&a);
    let b = consumer_heartbeat(&mut client, "soon", "member-b", b.member_epoch, &[]);
    assert_eq!(
        (assigned(&b).len(), b.heartbeat_interval_ms),
        (0, short),
        "{b:?}"
    );
    // A confirms: done, the configured interval; B's next heartbeat gets the two.
    let a_sent = std::time::Instant::now();
    let a = consumer_heartbeat(&mut client, "soon", "member-a", a.member_epoch, &kept);
    assert_eq!(
        (assigned(&a), a.heartbeat_interval_ms),
        (kept.clone(), configured),
        "{a:?}"
    );
    let b = consumer_heartbeat(&mut client, "soon", "member-b", b.member_epoch, &[]);
    assert_eq!(assigned(&b).len(), 2, "{b:?}");
    // B is stable with them: about half an interval from A's heartbeats (A heartbeat just
    // now, so B's first interval is about half of one, less the time between the two calls).
    let placed = b.heartbeat_interval_ms;
    let between_ms = a_sent.elapsed().as_millis() as i32;
    assert!(
        ((configured * 2 / 5).saturating_sub(between_ms)..=configured * 3 / 5).contains(&placed),
        "{b:?} ({between_ms} ms after A's heartbeat)"
    );
    // Its acknowledgement right after keeps that place.
    let b = consumer_heartbeat(
        &mut client,
        "soon",
        "member-b",
        b.member_epoch,
        &assigned(&b),
    );
    assert!(
        (placed - 1_000..=placed).contains(&b.heartbeat_interval_ms),
        "{placed} then {b:?}"
    );

    let metrics = node.metrics_text();
    for (interval, count) in [("reconciling", 3), ("stable", 4)] {
        let line = format!(
            "sluice_consumer_group_heartbeats_total{{group=\"soon\",interval=\"{interval}\"}} {count}"
        );
        assert!(metrics.contains(&line), "no {line:?} in\n{metrics}");
    }
}

/// The group's KIP-848 heartbeat answers so far: (reconciling, stable).
fn heartbeats_answered(node: &SingleNode, group: &str) -> (i64, i64) {
    let count = |interval: &str| {
        node.gauge(&format!(
            "sluice_consumer_group_heartbeats_total{{group=\"{group}\",interval=\"{interval}\"}}"
        ))
        .unwrap_or(0)
    };
    (count("reconciling"), count("stable"))
}

/// Waits until the node's one consumer group is Stable.
fn wait_stable(node: &SingleNode, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while node.gauge("sluice_groups{type=\"consumer\",state=\"Stable\"}") != Some(1) {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: the group never became stable\n{}",
            node.metrics_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// KIP-848 with real clients: two confluent-kafka members (group.protocol=consumer) own a
/// topic and an SDK member joins. The newcomer gets its share, having been answered with
/// the short interval while it waited for the others to release it; once the group is
/// stable again none of its members is answered with the short interval and they heartbeat
/// once per `group.consumer.heartbeat.interval.ms` (counted by the coordinator), and the
/// confluent members lost nothing on the way.
#[tokio::test(flavor = "multi_thread")]
async fn kip848_a_newcomer_is_asked_back_soon_and_a_stable_group_keeps_the_configured_interval() {
    use std::time::{Duration, Instant};
    let node = SingleNode::start(&[]);
    let configured_s = 5.0;
    groups_case_args(&node, "create-rf", &["steady848", "6", "1"]);
    let mut members = Vec::new();
    for _ in 0..2 {
        members.push(Held848::start(&node.bootstrap(), "steady", "steady848").0);
    }
    wait_stable(&node, "two confluent members");
    let (reconciling_before, _) = heartbeats_answered(&node, "steady");

    let consumer = std::sync::Arc::new(
        sluice::client::Consumer::new(
            sluice::client::ClientConfig::new(&node.bootstrap())
                .set("group.id", "steady")
                .set("group.protocol", "consumer"),
        )
        .expect("consumer"),
    );
    consumer.subscribe(&["steady848"]).expect("subscribe");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let polling = tokio::spawn({
        let (consumer, stop) = (consumer.clone(), stop.clone());
        async move {
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                consumer
                    .poll(Duration::from_millis(100))
                    .await
                    .expect("poll");
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while consumer.assignment().await.len() != 2 {
        assert!(
            Instant::now() < deadline,
            "the SDK member never got its share"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (reconciling, _) = heartbeats_answered(&node, "steady");
    assert!(
        reconciling > reconciling_before,
        "the newcomer was not asked back soon while it waited ({reconciling_before} -> {reconciling})"
    );

    // Stable: a window of a few configured intervals.
    wait_stable(&node, "with the SDK member");
    let (reconciling, stable) = heartbeats_answered(&node, "steady");
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(11)).await;
    let (reconciling_after, stable_after) = heartbeats_answered(&node, "steady");
    let window_s = started.elapsed().as_secs_f64();
    assert_eq!(
        reconciling_after, reconciling,
        "a stable member was answered with the short interval"
    );
    // Each of the three at most one heartbeat per interval, plus one at each end of the
    // window; and they did heartbeat.
    let allowed = (3.0 * (window_s / configured_s + 2.0)) as i64;
    let heartbeats = stable_after - stable;
    println!("{heartbeats} stable heartbeats from 3 members in {window_s:.1} s");
    assert!(
        (3..=allowed).contains(&heartbeats),
        "{heartbeats} stable heartbeats in {window_s:.1} s (at most {allowed})"
    );

    stop.store(true, std::sync::atomic::Ordering::Release);
    polling.await.expect("poll task");
    consumer.close().await.expect("close");
    for member in members {
        let summary = member.finish();
        assert!(
            summary.contains(" lost 0 "),
            "a confluent member: {summary}"
        );
    }
}
