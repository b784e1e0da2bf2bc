//! Fetch from follower (KIP-392) on three real nodes in three racks with the rack-aware
//! replica selector: a consumer naming a rack in `client.rack` is sent by the leader to the
//! replica in that rack and reads from it (the per-broker counters show where the bytes came
//! from), and when that replica is killed it goes back to the leader and reads on, nothing
//! lost or repeated. confluent-kafka (librdkafka) first, then the SDK through `sluice consume`.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use support::{Cluster, clients_dir, confluent_cluster, leaders, tail};

const RACK_AWARE: &str =
    "replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector";
const FOLLOWER_BYTES: &str = "sluice_fetch_follower_read_bytes_total";
const REDIRECTS: &str = "sluice_fetch_preferred_read_replica_total";

/// A client process whose stdout lines arrive on a channel.
struct Streaming {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Streaming {
    fn start(command: &mut Command) -> Streaming {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("client");
        let stdout = child.stdout.take().expect("stdout");
        let (sender, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        Streaming {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits until `done` holds for the lines so far; false after `timeout`.
    fn wait_for(&mut self, timeout: Duration, done: impl Fn(&[String]) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        while !done(&self.seen) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self
                .lines
                .recv_timeout(left.min(Duration::from_millis(200)))
            {
                Ok(line) => self.seen.push(line),
                Err(_) if Instant::now() >= deadline => return false,
                Err(_) => {}
            }
        }
        true
    }

    /// Waits for the process to exit; its status and stderr.
    fn finish(mut self, timeout: Duration) -> (bool, Vec<String>, String) {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                break Some(status);
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                break None;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(500)) {
            self.seen.push(line);
        }
        let mut stderr = String::new();
        if let Some(mut pipe) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
        }
        (status.is_some_and(|s| s.success()), self.seen, stderr)
    }
}

fn python(cluster: &Cluster, args: &[&str]) -> Command {
    let mut command = Command::new("python3");
    command
        .arg("follower_fetch.py")
        .arg(cluster.bootstrap())
        .args(args)
        .current_dir(clients_dir());
    command
}

fn produce(cluster: &Cluster, topic: &str, first: usize, count: usize) {
    let output = python(
        cluster,
        &["produce", topic, &first.to_string(), &count.to_string()],
    )
    .output()
    .expect("python3");
    assert!(
        output.status.success(),
        "produce failed: {}{}\n--- logs\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        tail(&cluster.logs(), 60)
    );
}

fn counter(cluster: &Cluster, node_id: i32, name: &str) -> i64 {
    cluster.gauge(node_id as usize - 1, name).unwrap_or(0)
}

/// The partition's leader once all three replicas are in sync.
fn leader_with_full_isr(cluster: &Cluster, topic: &str) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some((_, leader, isr)) = leaders(cluster, topic).into_iter().next() {
            if leader > 0 && isr.len() == 3 {
                return leader;
            }
        }
        assert!(Instant::now() < deadline, "the ISR never held three");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn consumers_read_from_the_replica_in_their_rack_and_fall_back_to_the_leader() {
    let mut cluster = Cluster::start(3, &["broker.rack=rack-{id}", RACK_AWARE]);
    confluent_cluster(&cluster, "create", &["near", "1", "3"]);
    let leader = leader_with_full_isr(&cluster, "near");
    let followers: Vec<i32> = (1..=3).filter(|id| *id != leader).collect();
    produce(&cluster, "near", 0, 1000);

    // librdkafka in the first follower's rack.
    let near = followers[0];
    let before = counter(&cluster, near, FOLLOWER_BYTES);
    let rack = format!("rack-{near}");
    let mut confluent = Streaming::start(
        python(&cluster, &["consume", "near", &rack, "2000"]).stdin(Stdio::null()),
    );
    let read_1000 = |lines: &[String]| lines.iter().any(|l| l == "consumed 1000");
    assert!(
        confluent.wait_for(Duration::from_secs(60), read_1000),
        "confluent-kafka did not read the first 1000 records: {:?}",
        confluent.seen.last()
    );
    let served = counter(&cluster, near, FOLLOWER_BYTES) - before;
    assert!(
        served >= 1000 * 5,
        "the follower in rack-{near} served {served} bytes of 1000 records"
    );
    assert!(counter(&cluster, leader, REDIRECTS) >= 1);
    assert_eq!(counter(&cluster, followers[1], FOLLOWER_BYTES), 0);
    assert_eq!(counter(&cluster, leader, FOLLOWER_BYTES), 0);

    // Its replica dies: the records written after come from the leader.
    cluster.kill9(near as usize - 1);
    produce(&cluster, "near", 1000, 1000);
    let (ok, lines, stderr) = confluent.finish(Duration::from_secs(120));
    assert!(
        ok && lines.last().is_some_and(|l| l == "in order"),
        "confluent-kafka after its replica's kill -9: {:?}\n{stderr}\n--- logs\n{}",
        lines.last(),
        tail(&cluster.logs(), 60)
    );

    // The SDK (sluice consume) in the other follower's rack, the first back (the metadata
    // quorum needs two of its three voters once the second goes).
    cluster.start_node(followers[0] as usize - 1);
    assert_eq!(leader_with_full_isr(&cluster, "near"), leader);
    let near = followers[1];
    let before = counter(&cluster, near, FOLLOWER_BYTES);
    let redirects_before = counter(&cluster, leader, REDIRECTS);
    let mut sdk = Streaming::start(
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args([
                "consume",
                "near",
                "--partition",
                "0",
                "--offset",
                "earliest",
            ])
            .args(["--max-messages", "3000", "--bootstrap-server"])
            .arg(cluster.bootstrap())
            .arg("--consumer-property")
            .arg(format!("client.rack=rack-{near}"))
            .stdin(Stdio::null()),
    );
    assert!(
        sdk.wait_for(Duration::from_secs(60), |lines| lines.len() >= 2000),
        "the SDK did not read the first 2000 records: {} lines",
        sdk.seen.len()
    );
    let served = counter(&cluster, near, FOLLOWER_BYTES) - before;
    assert!(
        served >= 2000 * 5,
        "the follower in rack-{near} served the SDK {served} bytes of 2000 records"
    );
    assert!(counter(&cluster, leader, REDIRECTS) > redirects_before);
    cluster.kill9(near as usize - 1);
    produce(&cluster, "near", 2000, 1000);
    let (ok, lines, stderr) = sdk.finish(Duration::from_secs(120));
    let expected: Vec<String> = (0..3000).map(|i| format!("v{i}")).collect();
    assert!(
        ok && lines == expected,
        "the SDK after its replica's kill -9: {} lines, last {:?}\n{stderr}\n--- logs\n{}",
        lines.len(),
        lines.last(),
        tail(&cluster.logs(), 60)
    );
}

/// Kafka's rules for a consumer's Fetch at a follower, on the wire: below v11 only the leader
/// serves; from v11 the follower serves up to its high watermark, checks the leader epoch,
/// and answers an offset past its log end with OFFSET_OUT_OF_RANGE only to a client that named
/// its epoch. Without a rack-aware selector the leader never redirects.
#[test]
fn a_follower_serves_consumer_fetches_by_kafkas_rules() {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, FetchResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;

    let cluster = Cluster::start(3, &[]);
    confluent_cluster(&cluster, "create", &["rules", "1", "3"]);
    let leader = leader_with_full_isr(&cluster, "rules");
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    produce(&cluster, "rules", 0, 10);
    let mut client = support::raw::Client::connect(cluster.nodes[follower as usize - 1].kafka_port);
    let (_, epoch, _) = client.partition_leader("rules", 0);
    let fetch = |client: &mut support::raw::Client, version: i16, offset: i64, epoch: i32| {
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_static_str("rules")))
                    .with_partitions(vec![
                        FetchPartition::default()
                            .with_partition(0)
                            .with_fetch_offset(offset)
                            .with_current_leader_epoch(epoch)
                            .with_partition_max_bytes(1 << 20),
                    ]),
            ]);
        let response: FetchResponse = client.call(ApiKey::Fetch, version, &request);
        response.responses[0].partitions[0].clone()
    };
    assert_eq!(
        fetch(&mut client, 10, 0, epoch).error_code,
        6,
        "NOT_LEADER_OR_FOLLOWER below v11"
    );
    // The follower learns the high watermark with its next fetch from the leader.
    let deadline = Instant::now() + Duration::from_secs(10);
    let answer = loop {
        let answer = fetch(&mut client, 12, 0, epoch);
        if answer.high_watermark == 10 || Instant::now() > deadline {
            break answer;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(answer.error_code, 0);
    assert_eq!(answer.high_watermark, 10);
    assert!(
        answer.records.is_some_and(|r| !r.is_empty()),
        "the follower served no records"
    );
    assert_eq!(answer.preferred_read_replica.0, -1);
    assert_eq!(
        fetch(&mut client, 12, 1000, epoch).error_code,
        1,
        "OFFSET_OUT_OF_RANGE with an epoch"
    );
    let unnamed = fetch(&mut client, 12, 1000, -1);
    assert_eq!(unnamed.error_code, 0, "nothing, without an epoch");
    assert!(unnamed.records.is_none_or(|r| r.is_empty()));
    assert_eq!(
        fetch(&mut client, 12, 0, epoch + 1).error_code,
        75,
        "UNKNOWN_LEADER_EPOCH"
    );
    // The leader, asked by a consumer with a rack, serves it itself without a rack-aware selector.
    let mut at_leader =
        support::raw::Client::connect(cluster.nodes[leader as usize - 1].kafka_port);
    let answer = fetch(&mut at_leader, 12, 0, epoch);
    assert_eq!(answer.preferred_read_replica.0, -1);
    assert!(answer.records.is_some_and(|r| !r.is_empty()));
}
