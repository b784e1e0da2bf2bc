//! Leader balance across a rolling restart of three real `sluice server` processes: each node
//! stopped with SIGTERM and started again, one at a time, while an idempotent acks=all
//! confluent-kafka producer writes. Leaderships move away from each stopping node and come
//! back to their preferred replicas by the controller's rebalance
//! (`auto.leader.rebalance.enable`, `leader.imbalance.check.interval.seconds`) within the
//! check interval, and the producer sees nothing worse than retriable errors and loses no
//! acknowledged record.

mod support;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::{Cluster, clients_dir, confluent_cluster};

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

/// `tests/clients/acked_producer.py`: what it acknowledged and every error it reported.
struct Producer {
    child: std::process::Child,
    acked: Arc<Mutex<Vec<u64>>>,
    errors: Arc<Mutex<Vec<String>>>,
    reader: std::thread::JoinHandle<()>,
}

impl Producer {
    fn start(cluster: &Cluster, topic: &str) -> Producer {
        let mut child = Command::new("python3")
            .args(["acked_producer.py", &cluster.bootstrap(), topic])
            .current_dir(clients_dir())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start producer");
        let stdout = child.stdout.take().expect("stdout");
        let acked = Arc::new(Mutex::new(Vec::new()));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let reader = {
            let (acked, errors) = (Arc::clone(&acked), Arc::clone(&errors));
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if let Some(n) = line.strip_prefix('r').and_then(|n| n.parse().ok()) {
                        acked.lock().expect("lock").push(n);
                    } else {
                        errors.lock().expect("lock").push(line);
                    }
                }
            })
        };
        Producer {
            child,
            acked,
            errors,
            reader,
        }
    }

    fn count(&self) -> usize {
        self.acked.lock().expect("lock").len()
    }

    /// Waits (up to 60 s) for `more` records acknowledged from now on.
    fn wait_for_more(&self, cluster: &Cluster, more: usize) {
        let before = self.count();
        cluster.wait_until("the producer going on", Duration::from_secs(60), |_| {
            self.count() >= before + more
        });
    }

    /// Stops the producer; what it acknowledged and the errors it saw.
    fn stop(mut self) -> (Vec<u64>, Vec<String>) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = self.reader.join();
        let acked = self.acked.lock().expect("lock").clone();
        let errors = self.errors.lock().expect("lock").clone();
        (acked, errors)
    }
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

#[test]
fn leaderships_return_to_preferred_replicas_after_a_rolling_restart_without_losing_acked_records() {
    let interval = format!("leader.imbalance.check.interval.seconds={CHECK_INTERVAL_S}");
    let mut cluster = Cluster::start(
        3,
        &[
            "min.insync.replicas=2",
            "replica.lag.time.max.ms=2000",
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

    let producer = Producer::start(&cluster, "balanced");
    producer.wait_for_more(&cluster, 2_000);
    let mut returns = Vec::new();
    for index in 0..3 {
        let broker = cluster.nodes[index].id as i32;
        cluster.signal(index, libc::SIGTERM);
        let status = cluster.wait_exit(index, Duration::from_secs(30));
        assert!(
            status.is_some_and(|s| s.success()),
            "node {broker} exit: {status:?}\n{}",
            support::tail(&cluster.logs(), 60)
        );
        // Controlled shutdown moved its leaderships away.
        assert!(
            !leaders(&cluster, "balanced").contains(&broker),
            "broker {broker} still leads after it stopped"
        );
        cluster.start_node(index);
        cluster.wait_until("all ISRs full again", Duration::from_secs(90), |c| {
            partitions(c, "balanced")
                .iter()
                .all(|(_, isr)| isr.len() == 3)
        });
        // Back in every ISR: the next check gives its leaderships back.
        let took = wait_for_preferred_leaders(&cluster, "balanced", &preferred);
        println!(
            "broker {broker}: leaderships back {} ms after it rejoined the ISRs",
            took.as_millis()
        );
        returns.push(took);
        producer.wait_for_more(&cluster, 1_000);
    }
    // One check interval, and time for the change to commit and reach the clients' metadata
    // (each look at the leaders is a client run of its own, about half a second).
    let bound = Duration::from_secs(CHECK_INTERVAL_S) + Duration::from_secs(3);
    assert!(
        returns.iter().all(|took| *took <= bound),
        "leaderships came back after {returns:?}, more than the check interval allows ({bound:?})"
    );

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
        .copied()
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
