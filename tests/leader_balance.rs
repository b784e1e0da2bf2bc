//! Leader balance across a rolling restart of three real `sluice server` processes: each node
//! stopped with SIGTERM and started again, one at a time, while an idempotent acks=all
//! confluent-kafka producer writes. Leaderships move away from each stopping node and come
//! back to their preferred replicas by the controller's rebalance
//! (`auto.leader.rebalance.enable`, `leader.imbalance.check.interval.seconds`) within the
//! check interval, and the producer sees nothing worse than retriable errors and loses no
//! acknowledged record.

mod support;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use support::{AckedProducer, Cluster, confluent_cluster};

/// The rebalance check interval these tests run with.
const CHECK_INTERVAL_S: u64 = 3;

/// The leader of each partition of `topic`, in partition order.
fn leaders(cluster: &Cluster, topic: &str) -> Vec<i32> {
    partitions(cluster, topic)
        .into_iter()
        .map(|(l, _)| l)
        .collect()
}

/// (leader, ISR) of each partition of `topic`, in partition order.
fn partitions(cluster: &Cluster, topic: &str) -> Vec<(i32, Vec<i32>)> {
    confluent_cluster(cluster, "leaders", &[topic])
        .lines()
        .filter_map(|l| {
            let fields: Vec<i32> = l
                .split_whitespace()
                .filter_map(|f| f.parse().ok())
                .collect();
            (fields.len() >= 2).then(|| (fields[1], fields[2..].to_vec()))
        })
        .collect()
}

/// Waits until every partition of `topic` is led by `preferred` again; how long it took.
fn wait_for_preferred_leaders(cluster: &Cluster, topic: &str, preferred: &[i32]) -> Duration {
    let started = Instant::now();
    cluster.wait_until(
        "leaderships back on their preferred replicas",
        Duration::from_secs(60),
        |c| leaders(c, topic) == preferred,
    );
    started.elapsed()
}

/// What happened when, from the test's start, so a failure shows where the time went.
struct Timeline {
    started: Instant,
    events: Vec<String>,
}

impl Timeline {
    fn new() -> Timeline {
        Timeline {
            started: Instant::now(),
            events: Vec::new(),
        }
    }

    fn note(&mut self, event: impl Into<String>) {
        let line = format!(
            "{:>7.1} s  {}",
            self.started.elapsed().as_secs_f64(),
            event.into()
        );
        println!("{line}");
        self.events.push(line);
    }

    /// The events, and the controllers' rebalance and controlled-shutdown lines.
    fn show(&self, cluster: &Cluster) -> String {
        let logs = cluster.logs();
        let controller: Vec<&str> = logs
            .lines()
            .filter(|l| l.contains("leader rebalance") || l.contains("controlled shutdown"))
            .collect();
        format!(
            "timeline:\n{}\ncontroller log lines:\n{}",
            self.events.join("\n"),
            controller.join("\n")
        )
    }
}

/// confluent-kafka's `AdminClient.elect_leaders` (preferred): for every partition (`None`),
/// then for `topic`'s partition 0 by name; the two results as Python prints them.
fn confluent_elect_preferred(cluster: &Cluster, topic: &str) -> (String, String) {
    let script = r#"
import sys
from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient
admin = AdminClient({"bootstrap.servers": sys.argv[1]})
def show(partitions):
    result = admin.elect_leaders(ElectionType.PREFERRED, partitions).result(timeout=30)
    # Each value is None, or a KafkaError (a KafkaException in some versions).
    name = lambda e: "NONE" if e is None else (e.args[0] if isinstance(e, Exception) else e).name()
    return sorted(f"{tp.topic}-{tp.partition}:{name(e)}" for tp, e in result.items())
print(show(None))
print(show([TopicPartition(sys.argv[2], 0)]))
"#;
    let output = Command::new("python3")
        .args(["-c", script, &cluster.bootstrap(), topic])
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "confluent-kafka elect_leaders: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut lines = stdout.lines().map(str::to_owned);
    (
        lines.next().unwrap_or_default(),
        lines.next().unwrap_or_default(),
    )
}

#[test]
fn leaderships_return_to_preferred_replicas_after_a_rolling_restart_without_losing_acked_records() {
    let interval = format!("leader.imbalance.check.interval.seconds={CHECK_INTERVAL_S}");
    let mut cluster = Cluster::start(
        3,
        &[
            "min.insync.replicas=2",
            "replica.lag.time.max.ms=2000",
            // A controlled shutdown may take up to a session: room for one on a loaded machine.
            "broker.session.timeout.ms=9000",
            interval.as_str(),
        ],
    );
    // Six partitions, two preferring each broker (Kafka's round-robin placement).
    confluent_cluster(&cluster, "create", &["balanced", "6", "3"]);
    cluster.wait_until("full ISRs", Duration::from_secs(30), |c| {
        partitions(c, "balanced")
            .iter()
            .all(|(_, isr)| isr.len() == 3)
    });
    let preferred = leaders(&cluster, "balanced");
    let distinct: BTreeSet<i32> = preferred.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        3,
        "placement spreads leaders: {preferred:?}"
    );

    let mut timeline = Timeline::new();
    let producer = AckedProducer::start(&cluster.bootstrap(), "balanced");
    producer.wait_for_more(&cluster, 2_000);
    timeline.note("producer going");
    let mut returns = Vec::new();
    for index in 0..3 {
        let broker = cluster.nodes[index].id as i32;
        timeline.note(format!("SIGTERM to broker {broker}"));
        cluster.signal(index, libc::SIGTERM);
        let status = cluster.wait_exit(index, Duration::from_secs(30));
        timeline.note(format!("broker {broker} exited: {status:?}"));
        assert!(
            status.is_some_and(|s| s.success()),
            "node {broker} exit: {status:?}\n{}",
            support::tail(&cluster.logs(), 60)
        );
        // Controlled shutdown moved its leaderships away before it exited. The broker
        // answering Metadata may apply that change a moment later: give it 2 s (the stopped
        // broker's log says the controlled shutdown moved them, not its fencing after).
        assert!(
            cluster.logs().contains(&format!(
                "controlled shutdown: leaderships moved broker_id={broker}"
            )),
            "broker {broker} stopped before its leaderships moved\n{}",
            timeline.show(&cluster)
        );
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut after_stop = leaders(&cluster, "balanced");
        while after_stop.contains(&broker) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            after_stop = leaders(&cluster, "balanced");
        }
        assert!(
            !after_stop.contains(&broker),
            "broker {broker} still leads after it stopped: {after_stop:?}\n{}",
            timeline.show(&cluster)
        );
        cluster.start_node(index);
        timeline.note(format!("broker {broker} started again"));
        cluster.wait_until("all ISRs full again", Duration::from_secs(90), |c| {
            partitions(c, "balanced")
                .iter()
                .all(|(_, isr)| isr.len() == 3)
        });
        timeline.note(format!("broker {broker} back in every ISR (client view)"));
        // Back in every ISR: the next check gives its leaderships back.
        let took = wait_for_preferred_leaders(&cluster, "balanced", &preferred);
        timeline.note(format!(
            "broker {broker}: leaderships back {} ms after it rejoined the ISRs",
            took.as_millis()
        ));
        returns.push(took);
        producer.wait_for_more(&cluster, 1_000);
    }
    // The next check comes within one interval of the broker rejoining the ISRs; then the
    // change commits and reaches the clients' metadata, and every look at the leaders is a
    // Python client run of its own (about half a second alone, several seconds when the two
    // cores are busy with a suite of multi-process tests). Three intervals and a margin still
    // tell "at the next check" from "never" or "at some later, unrelated event".
    let bound = Duration::from_secs(3 * CHECK_INTERVAL_S) + Duration::from_secs(3);
    assert!(
        returns.iter().all(|took| *took <= bound),
        "leaderships came back after {returns:?}, more than the check interval allows ({bound:?})\n{}",
        timeline.show(&cluster)
    );

    // Everything led by its preferred replica: confluent-kafka's elect_leaders for every
    // partition hears of none (Kafka leaves out ELECTION_NOT_NEEDED when no partition is
    // named), and of a named one that it needed no election.
    println!("{}", timeline.show(&cluster));
    let (every, named) = confluent_elect_preferred(&cluster, "balanced");
    assert_eq!(every, "[]", "elect_leaders(None) on a balanced cluster");
    assert_eq!(named, "['balanced-0:ELECTION_NOT_NEEDED']");

    let (acked, errors) = producer.stop();
    // Leaders moving and brokers stopping are what retriable errors are for; a record given
    // up or a fatal error is not.
    let not_retriable: Vec<&String> = errors
        .iter()
        .filter(|e| e.starts_with("ERROR delivery:") || e.contains("fatal=True"))
        .collect();
    assert!(
        not_retriable.is_empty(),
        "the producer failed: {not_retriable:?}"
    );
    let dumped = confluent_cluster(&cluster, "dump", &["balanced", "2"]);
    let stored: BTreeSet<u64> = dumped
        .lines()
        .filter_map(|l| l.strip_prefix('r'))
        .filter_map(|n| n.parse().ok())
        .collect();
    let lost: Vec<u64> = acked
        .iter()
        .filter_map(|v| v.strip_prefix('r')?.parse().ok())
        .filter(|n| !stored.contains(n))
        .collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged records lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    println!(
        "{} acknowledged, none lost; {} transient client errors (error_cb, not fatal): {:?}",
        acked.len(),
        errors.len(),
        &errors[..errors.len().min(5)]
    );
}
