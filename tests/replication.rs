//! Replication across three real `sluice server` processes, driven by confluent-kafka:
//! acknowledged writes survive kill -9 of a partition leader, a restarted follower catches up
//! and rejoins the ISR, and a paused follower leaves the ISR and comes back.

mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::{Cluster, clients_dir, confluent_cluster};

/// (partition, leader, isr) of each partition of `topic`.
fn leaders(cluster: &Cluster, topic: &str) -> Vec<(i32, i32, Vec<i32>)> {
    confluent_cluster(cluster, "leaders", &[topic])
        .lines()
        .filter_map(|l| {
            let fields: Vec<i32> = l
                .split_whitespace()
                .filter_map(|f| f.parse().ok())
                .collect();
            (fields.len() >= 2).then(|| (fields[0], fields[1], fields[2..].to_vec()))
        })
        .collect()
}

#[test]
fn acked_writes_survive_leader_kill_and_the_follower_catches_up_after_restart() {
    let mut cluster = Cluster::start(
        3,
        &["min.insync.replicas=2", "replica.lag.time.max.ms=2000"],
    );
    confluent_cluster(&cluster, "create", &["acked", "2", "3"]);
    let mut producer = Command::new("python3")
        .args([
            "confluent_suite.py",
            &cluster.bootstrap(),
            "produce-acked",
            "acked",
        ])
        .current_dir(clients_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start producer");
    let stdout = producer.stdout.take().expect("stdout");
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let reader = {
        let acked = Arc::clone(&acked);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                acked.lock().expect("lock").push(line);
            }
        })
    };
    let count = || acked.lock().expect("lock").len();
    cluster.wait_until(
        "10,000 acknowledged records",
        Duration::from_secs(60),
        |_| count() >= 10_000,
    );
    let (_, leader, _) = leaders(&cluster, "acked")[0].clone();
    let victim = (leader - 1) as usize;
    let at_kill = count();
    cluster.kill9(victim);
    // The producer goes on once the partition has a new leader.
    let deadline = Instant::now() + Duration::from_secs(60);
    while count() < at_kill + 10_000 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = producer.kill();
    let _ = producer.wait();
    reader.join().expect("reader");
    let acked = acked.lock().expect("lock").clone();
    assert!(
        acked.len() >= at_kill + 10_000,
        "the producer did not recover after the leader was killed ({} acknowledged, {at_kill} at the kill)\n{}",
        acked.len(),
        support::tail(&cluster.logs(), 60)
    );
    let new_leader = leaders(&cluster, "acked")[0].1;
    assert_ne!(new_leader, leader, "partition 0 kept a dead leader");

    // Every acknowledged record is stored once, and in order within its partition.
    let dumped = confluent_cluster(&cluster, "dump", &["acked", "2"]);
    let stored: Vec<u64> = dumped
        .lines()
        .filter_map(|l| l.strip_prefix('r'))
        .filter_map(|n| n.parse().ok())
        .collect();
    let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
    for i in &stored {
        *counts.entry(*i).or_default() += 1;
    }
    let missing: Vec<&String> = acked
        .iter()
        .filter(|a| {
            a.strip_prefix('r')
                .and_then(|n| n.parse::<u64>().ok())
                .is_none_or(|n| !counts.contains_key(&n))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged records lost, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).take(5).collect();
    assert!(twice.is_empty(), "records stored twice: {twice:?}");
    for partition in 0..2 {
        let in_partition: Vec<u64> = stored
            .iter()
            .copied()
            .filter(|i| i % 2 == partition)
            .collect();
        assert!(
            in_partition.windows(2).all(|w| w[0] < w[1]),
            "partition {partition} is out of order"
        );
    }
    println!(
        "{} acknowledged ({at_kill} before the kill), {} stored, none lost, doubled or reordered",
        acked.len(),
        stored.len()
    );

    // The killed broker comes back, truncates what it must, catches up and rejoins every ISR.
    cluster.start_node(victim);
    cluster.wait_until("all ISRs full again", Duration::from_secs(90), |c| {
        leaders(c, "acked").iter().all(|(_, _, isr)| isr.len() == 3)
            && c.gauge_sum("sluice_under_replicated_partitions") == 0
    });
}

#[test]
fn isr_shrinks_when_a_follower_is_paused_and_expands_after() {
    let cluster = Cluster::start(
        3,
        &[
            "replica.lag.time.max.ms=1000",
            "broker.session.timeout.ms=20000",
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
    let shrinks = cluster.gauge((leader - 1) as usize, "sluice_isr_shrinks_total");
    assert!(shrinks >= Some(1), "shrinks {shrinks:?}");
    assert_eq!(
        cluster.gauge((leader - 1) as usize, "sluice_under_replicated_partitions"),
        Some(1)
    );
    cluster.signal(follower, libc::SIGCONT);
    cluster.wait_until("the ISR to expand", Duration::from_secs(30), |c| {
        leaders(c, "paused")[0].2.len() == 3
    });
    let expands = cluster.gauge((leader - 1) as usize, "sluice_isr_expands_total");
    assert!(expands >= Some(1), "expands {expands:?}");
}

#[test]
fn controlled_shutdown_moves_leaders_first() {
    let mut cluster = Cluster::start(3, &["replica.lag.time.max.ms=2000"]);
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
    // Already moved when the broker exited: no wait for its session to expire.
    for (partition, now_leader, isr) in leaders(&cluster, "moving") {
        assert_ne!(
            now_leader, leader,
            "partition {partition} still led by the stopped broker"
        );
        assert!(!isr.contains(&leader), "partition {partition} ISR {isr:?}");
    }
}
