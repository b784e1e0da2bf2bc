//! Stopping a whole cluster at once: SIGTERM to all three `sluice server` processes together.
//! Each tries a controlled shutdown, the quorum goes away under the last ones, and every node
//! still exits 0 within 10 s (it took the last one 35 s, retrying a controller that was gone),
//! logging no ERROR: stopping a cluster is an ordinary event.

mod support;

use std::time::{Duration, Instant};

use support::{Cluster, confluent_cluster};

#[test]
fn every_node_of_a_cluster_stopped_at_once_exits_0_within_10_s() {
    // Kafka's defaults for the controlled shutdown and the broker session (the test cluster
    // otherwise runs with a 3 s session, which would hide a bound that is too long).
    let mut cluster = Cluster::start(
        3,
        &[
            "broker.session.timeout.ms=9000",
            "controlled.shutdown.max.retries=3",
            "controlled.shutdown.retry.backoff.ms=5000",
            "min.insync.replicas=2",
        ],
    );
    // Every node leads replicated partitions, so every node has leaderships to move.
    confluent_cluster(&cluster, "create", &["everywhere", "6", "3"]);
    cluster.wait_until("full ISRs", Duration::from_secs(30), |c| {
        confluent_cluster(c, "leaders", &["everywhere"])
            .lines()
            .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
            .all(|l| l.split_whitespace().count() == 5)
    });
    let started = Instant::now();
    for index in 0..3 {
        cluster.signal(index, libc::SIGTERM);
    }
    let mut exits = Vec::new();
    for index in 0..3 {
        let status = cluster.wait_exit(index, Duration::from_secs(20));
        exits.push((index + 1, status, started.elapsed()));
    }
    println!("exits (node, status, after): {exits:?}");
    let logs = cluster.logs();
    // Which way each node's controlled shutdown ended (moved, quorum gone, gave up), for the
    // record of a run.
    for line in logs.lines().filter(|l| l.contains("controlled shutdown")) {
        println!("{line}");
    }
    for (node, status, after) in &exits {
        assert!(
            status.is_some_and(|s| s.success()) && *after <= Duration::from_secs(10),
            "node {node} exited with {status:?} after {after:?}\n{}",
            support::tail(&logs, 80)
        );
    }
    let errors: Vec<&str> = logs.lines().filter(|l| l.contains(" ERROR ")).collect();
    assert!(
        errors.is_empty(),
        "stopping the cluster logged errors:\n{}",
        errors.join("\n")
    );
}
