//! Replication across three real `sluice server` processes, driven by confluent-kafka:
//! acknowledged writes survive kill -9 of a partition leader, a restarted follower catches up
//! and rejoins the ISR, and a paused follower leaves the ISR and comes back.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::raw::{Client, idempotent_batch};
use support::{
    AckedProducer, Cluster, assert_acked_stored_once_in_order, clients_dir, confluent_cluster,
    leaders,
};

/// Waits (at most 30 s) until partition `partition` of `topic` has a leader and ISR that
/// `wanted(leader, isr)` accepts.
fn wait_for_partition(
    cluster: &Cluster,
    topic: &str,
    partition: usize,
    what: &str,
    wanted: impl Fn(i32, &[i32]) -> bool,
) {
    cluster.wait_until(what, Duration::from_secs(30), |c| {
        let (_, leader, isr) = leaders(c, topic)[partition].clone();
        wanted(leader, &isr)
    });
}

/// Stops `producer`, then checks that every record of `topic` it got acknowledged is stored
/// once and in order, and prints the counts for `what`.
fn stop_and_check(producer: AckedProducer, cluster: &Cluster, topic: &str, what: &str) {
    let (acked, _) = producer.stop();
    let stored = assert_acked_stored_once_in_order(cluster, topic, &acked);
    println!(
        "{what}: {} acknowledged, {stored} stored, none lost",
        acked.len()
    );
}

/// Creates `topic` with partitions on brokers 1,2,3 and 2,3,1, waits for full ISRs, and
/// starts an acks=all producer on it; returns once `acked` records are acknowledged.
fn replicated_under_load(cluster: &Cluster, topic: &str, acked: usize) -> AckedProducer {
    confluent_cluster(cluster, "create-assigned", &[topic, "1,2,3/2,3,1"]);
    cluster.wait_until("full ISRs", Duration::from_secs(30), |c| {
        leaders(c, topic).iter().all(|(_, _, isr)| isr.len() == 3)
    });
    let producer = AckedProducer::start(&cluster.bootstrap(), topic);
    cluster.wait_until("records acknowledged", Duration::from_secs(60), |_| {
        producer.count() >= acked
    });
    producer
}

#[test]
fn acked_writes_survive_leader_kill_and_the_follower_catches_up_after_restart() {
    let mut cluster = Cluster::start(
        3,
        &["min.insync.replicas=2", "replica.lag.time.max.ms=2000"],
    );
    confluent_cluster(&cluster, "create", &["acked", "2", "3"]);
    let producer = AckedProducer::start(&cluster.bootstrap(), "acked");
    cluster.wait_until(
        "10,000 acknowledged records",
        Duration::from_secs(60),
        |_| producer.count() >= 10_000,
    );
    let (_, leader, _) = leaders(&cluster, "acked")[0].clone();
    let victim = (leader - 1) as usize;
    let at_kill = producer.count();
    cluster.kill9(victim);
    // The producer goes on once the partition has a new leader.
    let deadline = Instant::now() + Duration::from_secs(60);
    while producer.count() < at_kill + 10_000 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (acked, _) = producer.stop();
    assert!(
        acked.len() >= at_kill + 10_000,
        "the producer did not recover after the leader was killed ({} acknowledged, {at_kill} at the kill)\n{}",
        acked.len(),
        support::tail(&cluster.logs(), 60)
    );
    let new_leader = leaders(&cluster, "acked")[0].1;
    assert_ne!(new_leader, leader, "partition 0 kept a dead leader");
    let stored = assert_acked_stored_once_in_order(&cluster, "acked", &acked);
    println!(
        "{} acknowledged ({at_kill} before the kill), {stored} stored, none lost, doubled or reordered",
        acked.len()
    );

    // The killed broker comes back, truncates what it must, catches up and rejoins every ISR.
    cluster.start_node(victim);
    cluster.wait_until("all ISRs full again", Duration::from_secs(90), |c| {
        leaders(c, "acked").iter().all(|(_, _, isr)| isr.len() == 3)
            && c.gauge_sum("sluice_under_replicated_partitions") == 0
    });
}

#[test]
fn rolling_restart_loses_nothing() {
    let mut cluster = Cluster::start(
        3,
        &["min.insync.replicas=2", "replica.lag.time.max.ms=2000"],
    );
    confluent_cluster(&cluster, "create", &["rolling", "2", "3"]);
    let producer = AckedProducer::start(&cluster.bootstrap(), "rolling");
    cluster.wait_until("5,000 acknowledged", Duration::from_secs(60), |_| {
        producer.count() >= 5_000
    });
    for index in 0..3 {
        cluster.signal(index, libc::SIGTERM);
        let status = cluster.wait_exit(index, Duration::from_secs(60));
        assert!(
            status.is_some_and(|s| s.success()),
            "node {} exit: {status:?}",
            index + 1
        );
        cluster.start_node(index);
        cluster.wait_until("all ISRs full again", Duration::from_secs(90), |c| {
            leaders(c, "rolling")
                .iter()
                .all(|(_, _, isr)| isr.len() == 3)
        });
        producer.wait_for_more(&cluster, 2_000);
    }
    stop_and_check(producer, &cluster, "rolling", "rolling restart");
}

#[test]
fn isr_shrinks_when_a_follower_is_paused_and_expands_after() {
    let cluster = Cluster::start(
        3,
        &[
            "replica.lag.time.max.ms=1000",
            "broker.session.timeout.ms=20000",
            // The paused follower stays registered: its lag, not its fencing, shrinks the ISR.
            "broker.liveness.probe.timeout.ms=0",
        ],
    );
    confluent_cluster(&cluster, "create", &["paused", "1", "3"]);
    let (_, leader, isr) = leaders(&cluster, "paused")[0].clone();
    assert_eq!(isr.len(), 3);
    let follower = (1..=3).find(|b| *b != leader).expect("a follower") as usize - 1;
    cluster.signal(follower, libc::SIGSTOP);
    cluster.wait_until("the ISR to shrink", Duration::from_secs(30), |c| {
        leaders(c, "paused")[0].2.len() == 2
    });
    // The leader's replicas apply the image a moment after its metadata answers show it.
    let at_leader = (leader - 1) as usize;
    cluster.wait_until("a counted shrink", Duration::from_secs(10), |c| {
        c.gauge(at_leader, "sluice_isr_shrinks_total") >= Some(1)
            && c.gauge(at_leader, "sluice_under_replicated_partitions") == Some(1)
    });
    cluster.signal(follower, libc::SIGCONT);
    cluster.wait_until("the ISR to expand", Duration::from_secs(30), |c| {
        leaders(c, "paused")[0].2.len() == 3
    });
    cluster.wait_until("a counted expansion", Duration::from_secs(10), |c| {
        c.gauge(at_leader, "sluice_isr_expands_total") >= Some(1)
            && c.gauge(at_leader, "sluice_under_replicated_partitions") == Some(0)
    });
}

/// A silent follower (SIGSTOP: no FIN, no RST, its heartbeats just stop) leaves the ISR in
/// seconds by `replica.silence.max.ms` (shipped default), long before its broker session
/// (30 s here, the controller's probe off) or Kafka's lag time (30 s) could take it out: acks=all writes go on while it is
/// still registered and unfenced. It rejoins after SIGCONT; nothing acknowledged is lost.
#[test]
fn a_silent_follower_leaves_the_isr_in_seconds_while_still_registered() {
    let cluster = Cluster::start(
        3,
        &[
            "broker.session.timeout.ms=30000",
            "broker.liveness.probe.timeout.ms=0",
            "replica.lag.time.max.ms=30000",
            "min.insync.replicas=2",
        ],
    );
    // Brokers 1 and 2 lead; broker 3 only follows.
    let producer = replicated_under_load(&cluster, "silent", 200);
    cluster.signal(2, libc::SIGSTOP);
    let paused_at = Instant::now();
    cluster.wait_until("both ISRs without broker 3", Duration::from_secs(20), |c| {
        leaders(c, "silent")
            .iter()
            .all(|(_, _, isr)| isr.len() == 2 && !isr.contains(&3))
    });
    let shrunk_after = paused_at.elapsed();
    assert_eq!(
        cluster.gauge(0, "sluice_brokers_unfenced"),
        Some(3),
        "broker 3 was fenced: its session, not its silence, took it out"
    );
    let before = producer.count();
    producer.wait_for_more(&cluster, 300);
    println!(
        "ISR shrank {shrunk_after:?} after the pause; {} more acknowledged while broker 3 was stopped",
        producer.count() - before
    );
    cluster.signal(2, libc::SIGCONT);
    cluster.wait_until("full ISRs again", Duration::from_secs(30), |c| {
        leaders(c, "silent")
            .iter()
            .all(|(_, _, isr)| isr.len() == 3)
    });
    stop_and_check(producer, &cluster, "silent", "silent follower");
}

/// One deadline per request (the purgatory): an acks=all Produce for eight partitions, four of
/// them replicated to a paused follower that stays in the ISR, answers once, after about its
/// `timeout_ms`, with REQUEST_TIMED_OUT for the four stuck partitions and success for the
/// others. Each partition used to wait a full timeout in turn (4 x timeout_ms here). Once the
/// follower resumes, the stuck records are committed.
#[test]
fn an_acks_all_produce_for_many_partitions_answers_within_its_timeout() {
    const TIMEOUT_MS: i32 = 3_000;
    let cluster = Cluster::start(
        3,
        // The paused follower stays in the ISR and registered for the whole test.
        &[
            "replica.lag.time.max.ms=60000",
            "replica.silence.max.ms=60000",
            "broker.session.timeout.ms=60000",
            "broker.liveness.probe.timeout.ms=0",
        ],
    );
    let port = |broker: i32| cluster.nodes[(broker - 1) as usize].kafka_port;
    let mut client = Client::connect(port(1));
    // Partitions 0..4 on brokers 1 and 3 (stuck once 3 pauses), 4..8 on brokers 1 and 2.
    let assignments: Vec<Vec<i32>> = (0..8)
        .map(|p| if p < 4 { vec![1, 3] } else { vec![1, 2] })
        .collect();
    client.create_topic_assigned("deadline", &assignments);
    cluster.wait_until("full ISRs led by broker 1", Duration::from_secs(30), |_| {
        let mut client = Client::connect(port(1));
        (0..8).all(|p| {
            let (leader, _, isr) = client.partition_leader("deadline", p);
            leader == 1 && isr.len() == 2
        })
    });
    let batches = |sequence: i32| {
        (0..8)
            .map(|p| (p, idempotent_batch(-1, -1, sequence, 3)))
            .collect::<Vec<_>>()
    };
    let warm = client.produce_many("deadline", batches(0), TIMEOUT_MS);
    assert!(warm.iter().all(|(_, code)| *code == 0), "{warm:?}");

    cluster.signal(2, libc::SIGSTOP);
    let started = Instant::now();
    let answers = client.produce_many("deadline", batches(0), TIMEOUT_MS);
    let elapsed = started.elapsed();
    cluster.signal(2, libc::SIGCONT);
    println!(
        "eight partitions, four stuck: answered in {} ms: {answers:?}",
        elapsed.as_millis()
    );
    for (partition, code) in &answers {
        let expected = if *partition < 4 { 7 } else { 0 }; // REQUEST_TIMED_OUT, NONE
        assert_eq!(*code, expected, "partition {partition}: {answers:?}");
    }
    assert!(
        elapsed >= Duration::from_millis(TIMEOUT_MS as u64 - 100),
        "answered before the stuck partitions' timeout: {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_millis(2 * TIMEOUT_MS as u64),
        "one request, one deadline: answered after {elapsed:?}, timeout_ms is {TIMEOUT_MS}"
    );
    // The resumed follower catches up: the timed-out records were written and get committed.
    cluster.wait_until(
        "the stuck records committed",
        Duration::from_secs(30),
        |_| {
            let mut client = Client::connect(port(1));
            (0..4).all(|p| client.latest_offset("deadline", p) == 6)
        },
    );
}

#[test]
fn controlled_shutdown_moves_leaders_first() {
    // A controlled shutdown may take up to a session: room for one on a loaded machine.
    let mut cluster = Cluster::start(
        3,
        &[
            "replica.lag.time.max.ms=2000",
            "broker.session.timeout.ms=9000",
        ],
    );
    confluent_cluster(&cluster, "create", &["moving", "3", "3"]);
    cluster.wait_until("full ISRs", Duration::from_secs(30), |c| {
        leaders(c, "moving")
            .iter()
            .all(|(_, _, isr)| isr.len() == 3)
    });
    let (_, leader, _) = leaders(&cluster, "moving")[0].clone();
    let index = (leader - 1) as usize;
    cluster.signal(index, libc::SIGTERM);
    let status = cluster.wait_exit(index, Duration::from_secs(60));
    assert!(
        status.is_some_and(|s| s.success()),
        "SIGTERM exit: {status:?}\n{}",
        support::tail(&cluster.logs(), 40)
    );
    let logs = cluster.logs();
    assert!(
        logs.contains("controlled shutdown: leaderships moved"),
        "{}",
        support::tail(&logs, 40)
    );
    // Already moved when the broker exited: no wait for its session to expire (9 s). The
    // broker answering Metadata may apply the committed change a moment after the stopped
    // broker saw it (a suite run under load once read the old leader): give it 2 s.
    let moved = |c: &Cluster| {
        leaders(c, "moving")
            .iter()
            .all(|(_, l, isr)| *l != leader && !isr.contains(&leader))
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    while !moved(&cluster) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    for (partition, now_leader, isr) in leaders(&cluster, "moving") {
        assert_ne!(
            now_leader, leader,
            "partition {partition} still led by the stopped broker"
        );
        assert!(!isr.contains(&leader), "partition {partition} ISR {isr:?}");
    }
}

/// The bytes of every segment of a partition replica, in offset order.
fn replica_bytes(cluster: &Cluster, node: u64, topic_partition: &str) -> Vec<u8> {
    let dir = cluster
        .dir
        .path()
        .join(format!("data-{node}"))
        .join(topic_partition);
    let mut segments: Vec<_> = std::fs::read_dir(&dir)
        .expect("partition dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    segments.sort();
    segments
        .iter()
        .flat_map(|p| std::fs::read(p).expect("segment"))
        .collect()
}

/// KIP-101: a leader takes writes its followers never got (acks=1 while they are paused) and
/// dies; a follower becomes leader and takes other writes. When the old leader returns it must
/// truncate its divergent tail (OffsetForLeaderEpoch) before fetching: all three replicas end
/// byte-identical, and the divergent records are gone.
#[test]
fn divergent_follower_truncates_on_new_leader() {
    let mut cluster = Cluster::start(
        3,
        &[
            "replica.lag.time.max.ms=60000",
            "replica.silence.max.ms=60000",
            "broker.session.timeout.ms=6000",
            // The paused followers stay in the ISR while the leader takes acks=1 writes.
            "broker.liveness.probe.timeout.ms=0",
            "min.insync.replicas=2",
        ],
    );
    confluent_cluster(&cluster, "create", &["diverge", "1", "3"]);
    cluster.wait_until("a full ISR", Duration::from_secs(30), |c| {
        leaders(c, "diverge")[0].2.len() == 3
    });
    confluent_cluster(&cluster, "produce", &["diverge", "500", "all", "common-"]);
    let (_, old_leader, _) = leaders(&cluster, "diverge")[0].clone();
    let followers: Vec<usize> = (1..=3)
        .filter(|b| *b != old_leader)
        .map(|b| b as usize - 1)
        .collect();
    for f in &followers {
        cluster.signal(*f, libc::SIGSTOP);
    }
    // Let the followers' fetches in flight time out (replica.fetch.wait.max.ms), so no fetch
    // is waiting at the leader to carry what comes next.
    std::thread::sleep(Duration::from_millis(1500));
    // acks=1: only the leader has these.
    let leader_only = format!(
        "127.0.0.1:{}",
        cluster.nodes[(old_leader - 1) as usize].kafka_port
    );
    let output = Command::new("python3")
        .args([
            "confluent_suite.py",
            &leader_only,
            "produce",
            "diverge",
            "300",
            "1",
            "lost-",
        ])
        .current_dir(clients_dir())
        .output()
        .expect("producer");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    cluster.kill9((old_leader - 1) as usize);
    for f in &followers {
        cluster.signal(*f, libc::SIGCONT);
    }
    cluster.wait_until("a new leader", Duration::from_secs(60), |c| {
        let (_, leader, _) = leaders(c, "diverge")[0].clone();
        leader > 0 && leader != old_leader
    });
    confluent_cluster(&cluster, "produce", &["diverge", "200", "all", "after-"]);
    cluster.start_node((old_leader - 1) as usize);
    cluster.wait_until(
        "the old leader back in the ISR",
        Duration::from_secs(60),
        |c| leaders(c, "diverge")[0].2.len() == 3,
    );
    cluster.wait_until("identical replicas", Duration::from_secs(30), |c| {
        let reference = replica_bytes(c, 1, "diverge-0");
        (2..=3).all(|n| replica_bytes(c, n, "diverge-0") == reference)
    });
    let dumped = confluent_cluster(&cluster, "dump", &["diverge", "1"]);
    let values: Vec<&str> = dumped.lines().filter(|l| !l.ends_with(": ok")).collect();
    assert_eq!(
        values.iter().filter(|v| v.starts_with("common-")).count(),
        500
    );
    assert_eq!(
        values.iter().filter(|v| v.starts_with("after-")).count(),
        200
    );
    assert_eq!(values.iter().filter(|v| v.starts_with("lost-")).count(), 0);
    assert!(
        cluster
            .logs()
            .contains("truncating a diverged follower log"),
        "the old leader did not truncate"
    );
}

/// A partition whose only ISR member dies stays offline, even with another replica alive,
/// until unclean election is enabled for its topic; then that replica leads (and the election
/// is logged loudly).
#[test]
fn unclean_election_only_when_enabled() {
    // Three voters and a broker-only node 4, so two replicas can fail without losing the
    // metadata quorum.
    let mut cluster = Cluster::start_with_voters(
        4,
        3,
        &[
            "replica.lag.time.max.ms=1000",
            "broker.session.timeout.ms=3000",
        ],
    );
    confluent_cluster(&cluster, "create-assigned", &["unclean", "4,1"]);
    wait_for_partition(
        &cluster,
        "unclean",
        0,
        "a full ISR led by 4",
        |leader, isr| leader == 4 && isr.len() == 2,
    );
    confluent_cluster(&cluster, "produce", &["unclean", "100", "all", "kept-"]);
    // The follower (node 1) stops: it leaves the ISR; then the leader (node 4) dies.
    cluster.signal(0, libc::SIGSTOP);
    cluster.wait_until(
        "the ISR to shrink to the leader",
        Duration::from_secs(30),
        |c| leaders(c, "unclean")[0].2 == vec![4],
    );
    cluster.kill9(3);
    cluster.signal(0, libc::SIGCONT);
    cluster.wait_until(
        "the partition to go offline",
        Duration::from_secs(30),
        |c| leaders(c, "unclean")[0].1 == -1,
    );
    // Node 1 is back and alive, but not in the ISR: no clean election is possible.
    std::thread::sleep(Duration::from_secs(4));
    let (_, leader, isr) = leaders(&cluster, "unclean")[0].clone();
    assert_eq!(
        (leader, isr),
        (-1, vec![4]),
        "elected without unclean election enabled"
    );
    confluent_cluster(
        &cluster,
        "set-config",
        &["unclean", "unclean.leader.election.enable", "true"],
    );
    cluster.wait_until("an unclean leader", Duration::from_secs(30), |c| {
        leaders(c, "unclean")[0].1 == 1
    });
    assert!(cluster.logs().contains("UNCLEAN leader election"));
}

/// With two of three replicas down the ISR holds only the leader: acks=all is refused with
/// NOT_ENOUGH_REPLICAS before anything is appended.
#[test]
fn min_insync_rejects_when_two_replicas_down() {
    // Three voters and two broker-only nodes: losing two replicas keeps the metadata quorum.
    let mut cluster = Cluster::start_with_voters(
        5,
        3,
        &["replica.lag.time.max.ms=1000", "min.insync.replicas=2"],
    );
    confluent_cluster(&cluster, "create-assigned", &["guarded", "4,5,1"]);
    wait_for_partition(
        &cluster,
        "guarded",
        0,
        "a full ISR led by 4",
        |leader, isr| leader == 4 && isr.len() == 3,
    );
    let mut client = support::raw::Client::connect(cluster.nodes[3].kafka_port);
    let mut batch = sluice::log::batch::BatchBuilder::new(0, 1_700_000_000_000);
    batch.push(1_700_000_000_000, None, Some(b"guarded"), &[]);
    let batch = batch.build();
    // KIP-951: a follower answers NOT_LEADER_OR_FOLLOWER (Produce v10+) naming the leader
    // and its endpoint, so a client retries there without asking for metadata first.
    let mut follower = support::raw::Client::connect(cluster.nodes[4].kafka_port);
    let answer = follower.produce_at(11, "guarded", 0, batch.clone());
    let partition = &answer.responses[0].partition_responses[0];
    assert_eq!(partition.error_code, 6, "NOT_LEADER_OR_FOLLOWER");
    assert_eq!(partition.current_leader.leader_id.0, 4, "{answer:?}");
    assert!(partition.current_leader.leader_epoch >= 0, "{answer:?}");
    // Node 4 is cluster.nodes[3]: its Kafka port must be the endpoint named.
    let leader_port = i32::from(cluster.nodes[3].kafka_port);
    let names_leader = |endpoints: Vec<(i32, i32)>| endpoints.contains(&(4, leader_port));
    assert!(
        names_leader(
            answer
                .node_endpoints
                .iter()
                .map(|e| (e.node_id.0, e.port))
                .collect()
        ),
        "{answer:?}"
    );
    let old = follower.produce_at(9, "guarded", 0, batch.clone());
    assert!(
        old.node_endpoints.is_empty(),
        "no KIP-951 fields before v10"
    );
    // The same for Fetch v16+: a consumer's fetch sent to a broker that hosts no replica (a
    // follower serves a v11+ consumer fetch itself, as Kafka's does: KIP-392).
    let mut elsewhere = support::raw::Client::connect(cluster.nodes[1].kafka_port);
    let fetch = kafka_protocol::messages::FetchRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_max_wait_ms(0)
        .with_topics(vec![
            kafka_protocol::messages::fetch_request::FetchTopic::default()
                .with_topic(kafka_protocol::messages::TopicName(
                    kafka_protocol::protocol::StrBytes::from_static_str("guarded"),
                ))
                .with_topic_id(topic_id(&mut elsewhere, "guarded"))
                .with_partitions(vec![
                    kafka_protocol::messages::fetch_request::FetchPartition::default()
                        .with_partition(0)
                        .with_partition_max_bytes(1 << 20),
                ]),
        ]);
    let answer: kafka_protocol::messages::FetchResponse =
        elsewhere.call(kafka_protocol::messages::ApiKey::Fetch, 16, &fetch);
    let partition = &answer.responses[0].partitions[0];
    assert_eq!(partition.error_code, 6, "NOT_LEADER_OR_FOLLOWER");
    assert_eq!(partition.current_leader.leader_id.0, 4, "{answer:?}");
    assert!(
        names_leader(
            answer
                .node_endpoints
                .iter()
                .map(|e| (e.node_id.0, e.port))
                .collect()
        ),
        "{answer:?}"
    );
    assert_eq!(client.produce("guarded", 0, batch.clone()), (0, 0));
    cluster.kill9(4);
    cluster.kill9(0);
    cluster.wait_until(
        "the ISR to shrink to the leader",
        Duration::from_secs(30),
        |c| leaders(c, "guarded")[0].2 == vec![4],
    );
    assert_eq!(
        client.produce("guarded", 0, batch).0,
        19,
        "NOT_ENOUGH_REPLICAS"
    );
    assert_eq!(
        client.latest_offset("guarded", 0),
        1,
        "a refused batch was appended"
    );
}

/// After a broker comes back, its partitions are led by others; ElectLeaders (preferred) gives
/// them back, and with `auto.leader.rebalance.enable` the controller does it by itself.
#[test]
fn preferred_leaders_come_back_by_request_and_by_rebalance() {
    for automatic in [false, true] {
        let mut cluster = Cluster::start(
            3,
            &[
                "replica.lag.time.max.ms=2000",
                if automatic {
                    "leader.imbalance.check.interval.seconds=1"
                } else {
                    "auto.leader.rebalance.enable=false"
                },
            ],
        );
        confluent_cluster(&cluster, "create", &["pref", "3", "3"]);
        cluster.wait_until("full ISRs", Duration::from_secs(30), |c| {
            leaders(c, "pref").iter().all(|(_, _, isr)| isr.len() == 3)
        });
        let preferred: Vec<i32> = leaders(&cluster, "pref")
            .iter()
            .map(|(_, l, _)| *l)
            .collect();
        cluster.kill9(0);
        cluster.wait_until("node 1 to lead nothing", Duration::from_secs(30), |c| {
            leaders(c, "pref").iter().all(|(_, l, _)| *l != 1)
        });
        cluster.start_node(0);
        cluster.wait_until("full ISRs again", Duration::from_secs(60), |c| {
            leaders(c, "pref").iter().all(|(_, _, isr)| isr.len() == 3)
        });
        if !automatic {
            std::thread::sleep(Duration::from_secs(2));
            let now: Vec<i32> = leaders(&cluster, "pref")
                .iter()
                .map(|(_, l, _)| *l)
                .collect();
            assert_ne!(now, preferred, "leaders moved back without a request");
            let results = confluent_cluster(&cluster, "elect-preferred", &["pref", "3"]);
            // 0: elected; 84: ELECTION_NOT_NEEDED for partitions already led by their first replica.
            assert!(
                results
                    .lines()
                    .filter(|l| !l.ends_with(": ok"))
                    .all(|l| l.ends_with(" 0") || l.ends_with(" 84")),
                "{results}"
            );
        }
        cluster.wait_until("preferred leaders", Duration::from_secs(30), |c| {
            leaders(c, "pref")
                .iter()
                .map(|(_, l, _)| *l)
                .collect::<Vec<_>>()
                == preferred
        });
    }
}

/// `sluice topics reassign` of `partition` of `topic` to `replicas`, through the broker on
/// `port`, waiting up to 60 s.
fn reassign(port: u16, topic: &str, partition: i32, replicas: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["topics", "reassign", "--bootstrap-server"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--topic", topic, "--partition", &partition.to_string()])
        .args(["--replicas", replicas])
        .args(["--wait-seconds", "60"])
        .output()
        .expect("sluice topics reassign")
}

/// `sluice topics reassign` moves a partition from brokers 1,2,3 to 4,2,3 under acks=all load:
/// broker 4 joins and catches up, broker 1 leaves and drops its copy, nothing is lost.
#[test]
fn reassignment_moves_replicas_without_loss() {
    let cluster = Cluster::start_with_voters(
        4,
        3,
        &["min.insync.replicas=2", "replica.lag.time.max.ms=2000"],
    );
    let producer = replicated_under_load(&cluster, "moved", 5_000);
    let output = reassign(cluster.nodes[1].kafka_port, "moved", 0, "4,2,3");
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success() && printed.contains("done after"),
        "{printed}{}\n{}",
        String::from_utf8_lossy(&output.stderr),
        support::tail(&cluster.logs(), 40)
    );
    println!("{printed}");
    // The CLI saw the move complete in the image of the broker it asked; the broker answering
    // Metadata next may apply that image a moment later.
    let isr_after = |c: &Cluster| {
        let (_, leader, mut isr) = leaders(c, "moved")[0].clone();
        isr.sort_unstable();
        (leader, isr)
    };
    cluster.wait_until(
        "partition 0 ISR to be 2,3,4",
        Duration::from_secs(30),
        |c| isr_after(c).1 == [2, 3, 4],
    );
    let (leader, isr) = isr_after(&cluster);
    assert_eq!(isr, vec![2, 3, 4], "partition 0 ISR after the move");
    assert!([2, 3, 4].contains(&leader));
    cluster.wait_until("broker 1 to drop its copy", Duration::from_secs(30), |c| {
        !c.dir.path().join("data-1").join("moved-0").exists()
    });
    producer.wait_for_more(&cluster, 2_000);
    stop_and_check(producer, &cluster, "moved", "reassignment");

    // "done" means committed and visible: right after it, the broker the command asked shows
    // the target replicas all in the ISR. (An empty RF=1 topic moved to three brokers printed
    // "done after 0.0 s" while Metadata still showed the ISR [3]: the reassignment list was
    // empty because that broker's image did not hold the move yet.)
    confluent_cluster(&cluster, "create-assigned", &["widened", "3"]);
    let asked = cluster.nodes[1].kafka_port;
    let output = reassign(asked, "widened", 0, "2,3,1");
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success() && printed.contains("done after"),
        "{printed}"
    );
    let (_, _, mut isr) = Client::connect(asked).partition_leader("widened", 0);
    isr.sort_unstable();
    assert_eq!(isr, vec![1, 2, 3], "ISR right after '{}'", printed.trim());
}

/// A move onto a broker at its `max.broker.partitions` is refused with
/// INVALID_REPLICA_ASSIGNMENT (kafkajs, and `sluice topics reassign` with the reason), also
/// when an earlier move of the same request took the last room, and nothing of it commits.
#[test]
fn moves_onto_a_full_broker_are_refused() {
    let cluster = Cluster::start_with_voters(2, 1, &["max.broker.partitions=2"]);
    confluent_cluster(&cluster, "create-assigned", &["full", "1/1"]);
    confluent_cluster(&cluster, "create-assigned", &["half", "2"]);
    // Broker 2 has room for one more: the first move takes it, the second is refused.
    let output = Command::new("node")
        .args([
            "kafkajs_reassign.js",
            &cluster.bootstrap(),
            "full",
            "0=2",
            "1=2",
        ])
        .current_dir(clients_dir())
        .output()
        .expect("node kafkajs_reassign.js (scripts/test installs kafkajs)");
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        printed.lines().collect::<Vec<_>>(),
        ["full-0 ok", "full-1 INVALID_REPLICA_ASSIGNMENT"],
        "{printed}"
    );
    cluster.wait_until("full-0 moved to broker 2", Duration::from_secs(30), |c| {
        leaders(c, "full")[0].2 == [2]
    });
    let output = reassign(cluster.nodes[0].kafka_port, "full", 1, "2");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("INVALID_REPLICA_ASSIGNMENT")
            && stderr.contains("broker 2 hosts 2 partition replicas")
            && stderr.contains("max.broker.partitions is 2"),
        "{stderr}"
    );
    assert_eq!(
        leaders(&cluster, "full")[1].2,
        [1],
        "the refused move left full-1 alone"
    );
}

/// A leader whose log fails while it runs (writes get an I/O error) reports it: another ISR
/// member leads within seconds, the producer goes on, the failed replica leaves the ISR and
/// copies nothing more. Then a follower's log fails: it leaves that ISR, the leader stays.
/// Every acknowledged record is kept.
#[test]
fn a_leader_whose_log_fails_hands_its_leadership_over() {
    let cluster = Cluster::start_with_write_faults(
        3,
        3,
        &["min.insync.replicas=2", "replica.lag.time.max.ms=2000"],
    );
    let producer = replicated_under_load(&cluster, "failing", 3_000);
    let failed_at = Instant::now();
    cluster.fail_writes(0, &["failing-0"]);
    wait_for_partition(
        &cluster,
        "failing",
        0,
        "partition 0 led by another ISR member, broker 1 out of its ISR",
        |leader, isr| leader != 1 && !isr.contains(&1) && isr.len() == 2,
    );
    println!(
        "new leader of failing-0 {:.1} s after its log failed",
        failed_at.elapsed().as_secs_f64()
    );
    producer.wait_for_more(&cluster, 3_000);
    let (_, leader, isr) = leaders(&cluster, "failing")[1].clone();
    assert_eq!((leader, isr.len()), (2, 3), "partition 1 moved");
    // A follower's log failing: broker 3 leaves partition 1's ISR, which keeps its leader.
    cluster.fail_writes(2, &["failing-1"]);
    wait_for_partition(
        &cluster,
        "failing",
        1,
        "broker 3 out of partition 1's ISR",
        |leader, isr| leader == 2 && !isr.contains(&3) && isr.len() == 2,
    );
    producer.wait_for_more(&cluster, 3_000);
    stop_and_check(producer, &cluster, "failing", "log failures");
    let logs = cluster.logs();
    assert!(
        logs.contains("reported replicas with failed logs to the controller"),
        "{}",
        support::tail(&logs, 60)
    );
}

/// An unclean election can only pick among live replicas, and a replica whose log failed is
/// live: it wins when the ISR's last member dies and no healthy replica is up. Its broker
/// reports it again as soon as it leads, and keeps doing so, so when a healthy replica comes
/// back the leadership moves there (uncleanly, as the topic allows).
#[test]
fn an_unclean_election_onto_a_failed_replica_moves_on_when_a_healthy_one_returns() {
    // Node 1, the failed replica, is the only voter: the quorum lives while 2 and 3 die.
    let mut cluster = Cluster::start_with_write_faults(
        3,
        1,
        &[
            "unclean.leader.election.enable=true",
            "min.insync.replicas=1",
            "replica.lag.time.max.ms=2000",
        ],
    );
    confluent_cluster(&cluster, "create-assigned", &["fallback", "2,1,3"]);
    wait_for_partition(
        &cluster,
        "fallback",
        0,
        "a full ISR led by 2",
        |leader, isr| leader == 2 && isr.len() == 3,
    );
    // Broker 1's log fails as it follows: it leaves the ISR.
    cluster.fail_writes(0, &["fallback-0"]);
    confluent_cluster(&cluster, "produce", &["fallback", "100", "all", "r"]);
    wait_for_partition(
        &cluster,
        "fallback",
        0,
        "broker 1 out of the ISR",
        |leader, isr| leader == 2 && isr == [2, 3],
    );
    cluster.kill9(2);
    wait_for_partition(&cluster, "fallback", 0, "the ISR down to 2", |_, isr| {
        isr == [2]
    });
    // The last ISR member dies: the only live replica, the failed one, wins uncleanly.
    cluster.kill9(1);
    wait_for_partition(
        &cluster,
        "fallback",
        0,
        "the failed replica elected",
        |leader, _| leader == 1,
    );
    // A healthy replica returns: the leadership moves to it.
    let returned = Instant::now();
    cluster.start_node(2);
    wait_for_partition(
        &cluster,
        "fallback",
        0,
        "the healthy replica leading",
        |leader, _| leader == 3,
    );
    println!(
        "broker 3 leads {:.1} s after it was started again",
        returned.elapsed().as_secs_f64()
    );
}

/// KIP-279: two failovers in a row under load (the first new leader dies too), then both old
/// leaders return: every acknowledged record is kept and all three replicas end identical.
#[test]
fn two_failovers_in_a_row_leave_no_divergence() {
    // Three voters and two broker-only nodes, so two replicas can die with the quorum intact.
    let mut cluster = Cluster::start_with_voters(
        5,
        3,
        &["min.insync.replicas=1", "replica.lag.time.max.ms=2000"],
    );
    confluent_cluster(&cluster, "create-assigned", &["twice", "4,5,1/4,5,1"]);
    cluster.wait_until("full ISRs led by 4", Duration::from_secs(30), |c| {
        leaders(c, "twice")
            .iter()
            .all(|(_, l, isr)| *l == 4 && isr.len() == 3)
    });
    let producer = AckedProducer::start(&cluster.bootstrap(), "twice");
    cluster.wait_until("5,000 acknowledged", Duration::from_secs(60), |_| {
        producer.count() >= 5_000
    });
    for (victim, next) in [(4, 5), (5, 1)] {
        cluster.kill9(victim - 1);
        cluster.wait_until("a new leader", Duration::from_secs(60), |c| {
            leaders(c, "twice").iter().all(|(_, l, _)| *l == next)
        });
        producer.wait_for_more(&cluster, 2_000);
    }
    cluster.start_node(3);
    cluster.start_node(4);
    cluster.wait_until("full ISRs again", Duration::from_secs(90), |c| {
        leaders(c, "twice").iter().all(|(_, _, isr)| isr.len() == 3)
    });
    let (acked, _) = producer.stop();
    for partition in 0..2 {
        let tp = format!("twice-{partition}");
        cluster.wait_until("identical replicas", Duration::from_secs(30), |c| {
            let reference = replica_bytes(c, 1, &tp);
            replica_bytes(c, 4, &tp) == reference && replica_bytes(c, 5, &tp) == reference
        });
    }
    let stored = assert_acked_stored_once_in_order(&cluster, "twice", &acked);
    println!(
        "two failovers: {} acknowledged, {stored} stored, replicas identical",
        acked.len()
    );
}

#[test]
fn logs_of_topics_deleted_while_a_broker_was_down_are_removed_when_it_returns() {
    let mut cluster = Cluster::start(3, &["log.segment.delete.delay.ms=0"]);
    confluent_cluster(&cluster, "create", &["doomed", "2", "3"]);
    confluent_cluster(&cluster, "create", &["kept", "1", "3"]);
    confluent_cluster(&cluster, "produce", &["doomed", "100", "all", "d"]);
    confluent_cluster(&cluster, "produce", &["kept", "100", "all", "k"]);
    let data = cluster.dir.path().join("data-3");
    let has_log = |name: &str| data.join(name).join("partition.metadata").exists();
    cluster.wait_until("node 3 holds both topics", Duration::from_secs(30), |_| {
        has_log("doomed-0") && has_log("doomed-1") && has_log("kept-0")
    });
    cluster.kill9(2);
    confluent_cluster(&cluster, "delete", &["doomed"]);
    // Re-created under the same name with one partition: doomed-0 is a new topic's partition
    // and doomed-1 has no owner at all. The dead broker is fenced within a second (its
    // listener refuses), so three replicas must name it explicitly: a fenced but registered
    // broker may be assigned, as in Kafka, while replication.factor=3 would be refused.
    confluent_cluster(&cluster, "create-assigned", &["doomed", "1,2,3"]);
    confluent_cluster(&cluster, "produce", &["doomed", "10", "all", "new"]);
    cluster.start_node(2);
    cluster.wait_until(
        "node 3 drops doomed-1 and the old doomed-0",
        Duration::from_secs(60),
        |_| !data.join("doomed-1").exists() && has_log("doomed-0"),
    );
    assert!(has_log("kept-0"), "a hosted partition's log was deleted");
    // The new doomed-0 on node 3 holds only the new topic's records once caught up.
    cluster.wait_until("node 3 back in every ISR", Duration::from_secs(60), |c| {
        leaders(c, "doomed")
            .iter()
            .chain(leaders(c, "kept").iter())
            .all(|(_, _, isr)| isr.len() == 3)
    });
    let bytes = replica_bytes(&cluster, 3, "doomed-0");
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.contains("new9") && !text.contains("d99"),
        "node 3's doomed-0 is not the new topic's"
    );
}

/// A partition leader killed -9 and restarted at once, well inside its broker session (the
/// issue behind the seed-4242 jepsen duplicates): its registration moves the leadership to
/// another in-sync replica at a new leader epoch, in the same commit; the restarted process
/// never opens the partition as leader from the metadata it replays from disk, follows,
/// and rejoins the ISR. A producer's retry of a batch acknowledged before the kill is
/// answered by the new leader as a duplicate with its original offset, and nothing is
/// appended twice.
#[test]
fn a_leader_restarted_at_once_gives_up_its_leadership_and_retries_stay_single() {
    let mut cluster = Cluster::start(
        3,
        // Sessions far longer than the test: the leadership moves by the fence of the
        // liveness probe (the listener refuses while the process restarts) or by the new
        // registration, whichever commits first; either way the restarted process replays
        // metadata from disk that still names it leader.
        &["min.insync.replicas=2", "broker.session.timeout.ms=60000"],
    );
    confluent_cluster(&cluster, "create", &["restart", "1", "3"]);
    cluster.wait_until("a full ISR", Duration::from_secs(30), |c| {
        leaders(c, "restart")[0].2.len() == 3
    });
    let port = |c: &Cluster, broker: i32| c.nodes[(broker - 1) as usize].kafka_port;
    let (leader, epoch, _) = Client::connect(port(&cluster, 1)).partition_leader("restart", 0);
    let mut client = Client::connect(port(&cluster, leader));
    let producer_id = client.init_producer_id();
    assert_eq!(
        client.produce("restart", 0, idempotent_batch(producer_id, 0, 0, 5)),
        (0, 0)
    );
    let retried = idempotent_batch(producer_id, 0, 5, 5);
    assert_eq!(client.produce("restart", 0, retried.clone()), (0, 5));

    let victim = (leader - 1) as usize;
    cluster.kill9(victim);
    cluster.start_node(victim);
    let started = Instant::now();
    let mut moved = (leader, epoch);
    cluster.wait_until(
        "every broker to name a new leader at a newer epoch",
        Duration::from_secs(30),
        |c| {
            (1..=3).all(|b| {
                let Some(mut client) = Client::try_connect(port(c, b)) else {
                    return false;
                };
                let (now, now_epoch, _) = client.partition_leader("restart", 0);
                moved = (now, now_epoch);
                now != leader && now >= 0 && now_epoch > epoch
            })
        },
    );
    println!(
        "leadership moved from {leader} (epoch {epoch}) to {} (epoch {}) {} ms after the restart",
        moved.0,
        moved.1,
        started.elapsed().as_millis()
    );
    let restarted_log =
        std::fs::read_to_string(cluster.dir.path().join(format!("node-{leader}-run-2.log")))
            .expect("restarted node's log");
    assert!(
        !restarted_log.contains("topic_partition=restart-0 leader=true"),
        "the restarted broker opened the partition as leader:\n{}",
        support::tail(&restarted_log, 40)
    );

    let mut new_leader = Client::connect(port(&cluster, moved.0));
    assert_eq!(
        new_leader.produce("restart", 0, retried),
        (0, 5),
        "the retry is a duplicate answered with its original offset"
    );
    assert_eq!(new_leader.latest_offset("restart", 0), 10);
    assert_eq!(
        new_leader.produce("restart", 0, idempotent_batch(producer_id, 0, 10, 5)),
        (0, 10)
    );
    cluster.wait_until(
        "the restarted broker back in the ISR",
        Duration::from_secs(60),
        |c| leaders(c, "restart")[0].2.len() == 3,
    );
}

/// SIGTERM under load, five times in a row on brokers that lead and follow: each exits 0 and
/// never panics (one in five did, a replica fetcher outliving the node and entering
/// `block_in_place` while the runtime shut down), and nothing acknowledged is lost or doubled.
#[test]
fn sigterm_under_load_stops_every_task_in_order() {
    let mut cluster = Cluster::start(
        3,
        &["min.insync.replicas=2", "replica.lag.time.max.ms=2000"],
    );
    confluent_cluster(&cluster, "create", &["stopping", "2", "3"]);
    let producer = AckedProducer::start(&cluster.bootstrap(), "stopping");
    cluster.wait_until("records flowing", Duration::from_secs(60), |_| {
        producer.count() >= 2_000
    });
    for round in 0..5 {
        let index = round % 3;
        cluster.signal(index, libc::SIGTERM);
        let status = cluster.wait_exit(index, Duration::from_secs(60));
        let logs = cluster.logs();
        assert!(
            status.is_some_and(|s| s.success()),
            "round {round}: SIGTERM exit {status:?}\n{}",
            support::tail(&logs, 60)
        );
        if let Some(at) = logs.find("panicked") {
            let from = logs[..at].rfind("--- node").unwrap_or(0);
            let context: String = logs[from..].chars().take(6_000).collect();
            panic!("round {round}: a panic\n{context}");
        }
        cluster.start_node(index);
        cluster.wait_until("full ISRs again", Duration::from_secs(60), |c| {
            leaders(c, "stopping")
                .iter()
                .all(|(_, _, isr)| isr.len() == 3)
        });
    }
    let (acked, _) = producer.stop();
    let stored = assert_acked_stored_once_in_order(&cluster, "stopping", &acked);
    println!(
        "{} acknowledged, {stored} stored across five SIGTERMs",
        acked.len()
    );
}

/// A topic's id, from Metadata (Fetch v13+ names topics by id).
fn topic_id(client: &mut support::raw::Client, topic: &str) -> uuid::Uuid {
    let request = kafka_protocol::messages::MetadataRequest::default().with_topics(Some(vec![
        kafka_protocol::messages::metadata_request::MetadataRequestTopic::default().with_name(
            Some(kafka_protocol::messages::TopicName(
                kafka_protocol::protocol::StrBytes::from_string(topic.to_owned()),
            )),
        ),
    ]));
    let response: kafka_protocol::messages::MetadataResponse =
        client.call(kafka_protocol::messages::ApiKey::Metadata, 12, &request);
    response.topics[0].topic_id
}
